"""`orion quota` on a daemon's client: a ``quota`` request on the daemon's socket.

The daemon admits clients by the GPU-time shares promised to those running and by the GPU's
memory. A change written straight into the shared memory would go past it, and a later join
would be checked against figures that no longer hold. So every client's limits are changed by
its daemon, whether `orion quota` was given the daemon's state folder or a live run's directory
(:mod:`colocation.live_limits`: a run's clients are its daemon's): the same rules as a join,
against what is promised now, then applied to the shared state and kept where admission reads
it, and appended to the state folder's ``limits.csv`` by the records thread.

Request: ``{"op": "quota", "client": NAME}`` plus any of ``memory_limit`` (bytes, or null to lift
the limit; absent: unchanged), ``min_util``, ``max_util`` (absent or null: unchanged). Answer:
``changes``, one ``{field, old, new, in_use}`` per value that changed.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from orion_common.errors import OrionError
from orion_daemon import client as daemon_client
from orion_daemon import state
from orion_daemon.admission import memory_limit_problem
from orion_daemon.status import Client
from scheduler_core.settings import MAX_UTIL, MEMORY_LIMIT, MIN_UTIL, Setting
from scheduler_core.shares import promises_problem, shares_problem

UNCHANGED = object()
"""What ``memory_limit`` is when it is not to change (None lifts the limit)."""


def _share(message: dict[str, Any], setting: Setting) -> float | None:
    value = message.get(setting.name)
    if value is not None and not isinstance(value, (int, float)):
        raise OrionError(f"quota: {setting.name} must be a number (got {value!r})")
    try:
        return setting.parse(value)
    except ValueError as error:
        raise OrionError(f"quota: {error}") from None


def _memory_limit(
    message: dict[str, Any], gpu_memory_bytes: int | None, context_bytes: int
) -> object:
    if "memory_limit" not in message:
        return UNCHANGED
    try:  # by the setting's declaration, as a join's is: its bounds hold on either path
        limit = MEMORY_LIMIT.parse(message["memory_limit"])
    except ValueError as error:
        raise OrionError(f"quota: memory_limit: {error}") from None
    if limit is None:
        return None
    problem = memory_limit_problem(limit, gpu_memory_bytes, context_bytes)
    if problem is not None:
        raise OrionError(problem, hint="give a limit in the GPU's memory, or 'none'")
    return limit


def shares_enforced(policy: str, shares: bool) -> bool:
    """Whether a daemon of ``policy``, started with GPU-time shares or not (``shares``), has a
    gate keeper that applies them: only then can a client's share change."""
    return shares or policy == "quota"


def unenforced_shares_refusal(policy: str, shares: bool) -> OrionError | None:
    """Why a client of a daemon of ``policy`` (started with GPU-time shares or not) can have no
    share, asked as it joins or with `orion quota`; None where the daemon enforces them."""
    if shares_enforced(policy, shares):
        return None
    return OrionError(
        "this daemon enforces no GPU-time shares (--min-util / --max-util)",
        hint="start it with `orion up --shares`",
    )


def apply_change(
    message: dict[str, Any],
    clients: Iterable[Client],
    scheduler: Any,
    *,
    policy: str,
    shares: bool,
    gpu_memory_bytes: int | None,
    context_bytes: int = 0,
) -> list[dict[str, Any]]:
    """Checks and applies a ``quota`` request to the daemon's ``clients`` (updated in place, so
    admission counts the new shares) and ``scheduler``; the changes made. Nothing is applied
    when anything is refused. ``context_bytes``: what a CUDA context takes on the GPU, which a
    new memory limit must hold (0: unknown)."""
    clients = list(clients)
    name = message.get("client")
    client = next((c for c in clients if c.name == name), None)
    if client is None:
        known = ", ".join(sorted(c.name for c in clients)) or "none"
        raise OrionError(f"no client {name!r} on this daemon (clients: {known})")
    limit = _memory_limit(message, gpu_memory_bytes, context_bytes)
    min_util, max_util = _share(message, MIN_UTIL), _share(message, MAX_UTIL)
    if min_util is not None or max_util is not None:
        refusal = unenforced_shares_refusal(policy, shares)
        if refusal is not None:
            raise refusal
        if client.role == "hp" and policy != "quota":
            raise OrionError(
                f"policy {policy!r} never holds HP work back; GPU-time shares apply to BE "
                "clients (every client under policy 'quota')"
            )
    new_min = client.min_util if min_util is None else min_util
    new_max = client.max_util if max_util is None else max_util
    problem = shares_problem(new_min, new_max)
    if problem is None and new_min > client.min_util:  # a promise kept or lowered always holds
        problem = promises_problem(sum(c.min_util for c in clients if c is not client) + new_min)
    if problem is not None:
        raise OrionError(f"{client.name}: {problem}")
    changes = []
    if limit is not UNCHANGED:
        scheduler.set_memory_limit(client.slot, limit)
        in_use = int(scheduler.client_stats(client.slot).get("memory_used", 0))
        changes.append(_change("memory_limit", client.memory_limit, limit, in_use))
        client.memory_limit = limit  # type: ignore[assignment]
    if (new_min, new_max) != (client.min_util, client.max_util):
        scheduler.set_quota(client.slot, new_min, new_max)
        for field, old, new in (("min_util", client.min_util, new_min),
                                ("max_util", client.max_util, new_max)):  # fmt: skip
            if old != new:
                changes.append(_change(field, old, new, 0))
        client.min_util, client.max_util = new_min, new_max
    return changes


def _change(field: str, old: object, new: object, in_use: int) -> dict[str, Any]:
    return {"field": field, "old": old, "new": new, "in_use": in_use}


def change_limits(
    folder: Path,
    client: str,
    *,
    memory_limit: object = UNCHANGED,
    min_util: float | None = None,
    max_util: float | None = None,
) -> list[dict[str, Any]]:
    """Asks the daemon whose state folder is ``folder`` to change ``client``'s limits
    (``memory_limit``: bytes, None to lift it, or left out); the changes it made."""
    record = state.live_record(folder)
    if record is None:
        raise OrionError(
            f"{folder}: no orion daemon runs there; limits change only while it runs",
            hint="`orion status` says which daemons run",
        )
    return request_change(record, client, memory_limit=memory_limit, min_util=min_util,
                          max_util=max_util)  # fmt: skip


def request_change(
    daemon: daemon_client.Daemon,
    client: str,
    *,
    memory_limit: object = UNCHANGED,
    min_util: float | None = None,
    max_util: float | None = None,
) -> list[dict[str, Any]]:
    """Sends ``daemon`` the ``quota`` request for ``client`` with the values that are to change
    (a share None: unchanged); the changes it made (``field``, ``old``, ``new``, ``in_use``,
    ``time_s`` on the daemon's clock)."""
    changes: dict[str, Any] = {}
    if memory_limit is not UNCHANGED:
        changes["memory_limit"] = memory_limit
    if min_util is not None:
        changes["min_util"] = min_util
    if max_util is not None:
        changes["max_util"] = max_util
    return daemon_client.change_limits(daemon, client, **changes)
