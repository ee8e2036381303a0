"""Whether a program may join a daemon: one HP at a time, names unique, limits that fit.

Pure rules over the clients that are live now, so they are tested without a daemon. Every
refusal is one line that says what is wrong and what is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from orion_common.errors import OrionError, UsageError
from orion_common.sizes import format_size
from scheduler_core.settings import HP_CONTEXT, MAX_UTIL, MEMORY_LIMIT, MIN_UTIL, Setting
from scheduler_core.shares import promises_problem, shares_problem

ROLES = ("hp", "be")
MAX_NAME_CHARS = 31  # the shared state's client name field holds 31 bytes and a terminator


@dataclass(frozen=True)
class JoinRequest:
    """What `orion run` asks for (the ``join`` request's fields)."""

    role: str
    name: str
    command: list[str] = field(default_factory=list)
    profile: str | None = None
    memory_limit: int | None = None
    memory_fraction: float | None = None
    """The share of the GPU's memory to allow when ``memory_limit`` is not given: what a
    fractional GPU (Ray's ``num_gpus=0.5``) means for memory. The daemon turns it into bytes with
    its own GPU's size, which the asking side may not know (a Ray driver on another machine)."""
    min_util: float = MIN_UTIL.default
    max_util: float = MAX_UTIL.default
    latency_target_ms: float | None = None
    strict: bool = False
    """The program must run as a client or not at all (a benchmark run's: its library attaches
    as the program starts and exits with status 70 when it cannot); otherwise it attaches when
    it first reaches the driver and runs ungated when it cannot."""
    parent: str | None = None
    """The client whose process started this one (the library of a BE client's child names it):
    the child's allocations then count against that client's memory limit, once the daemon has
    checked that it is the child's ancestor."""
    hp_context: str | None = None
    """HP only, under a ``--sharing mps`` daemon: where this HP runs (``HP_CONTEXT``), ``mps`` or
    ``own``; None takes the daemon's. The context is the HP program's choice, not the GPU's: the
    suite measured an LLM decoder best in a context of its own and a graph encoder best in the
    MPS server, beside the same trainers."""

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> JoinRequest:
        """The request in a ``join`` message; malformed fields are refused with their name."""

        def number(key: str, default: float | None) -> float | None:
            value = message.get(key, default)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise OrionError(f"join: {key} must be a number (got {value!r})")
            return float(value)

        def share(setting: Setting) -> float:
            try:
                return setting.or_default(number(setting.name, None))
            except ValueError as error:
                raise OrionError(f"join: {error}") from None

        command = message.get("command", [])
        if not isinstance(command, list) or not all(isinstance(a, str) for a in command):
            raise OrionError("join: command must be a list of strings")
        try:  # bytes, or as a person wrote it (ORION_MEMORY_LIMIT=8GiB): one parser for both
            limit = MEMORY_LIMIT.parse(message.get("memory_limit"))
        except ValueError as error:
            raise OrionError(f"join: memory_limit: {error}") from None
        profile = message.get("profile")
        if profile is not None and not isinstance(profile, str):
            raise OrionError("join: profile must be a path")
        strict = message.get("strict", False)
        if not isinstance(strict, bool):
            raise OrionError(f"join: strict must be true or false (got {strict!r})")
        parent = message.get("parent")
        if parent is not None and not isinstance(parent, str):
            raise OrionError("join: parent must be a client's name")
        try:
            hp_context = HP_CONTEXT.parse(message.get("hp_context"))
        except ValueError as error:
            raise OrionError(f"join: {error}") from None
        return cls(
            role=str(message.get("role", "")),
            name=str(message.get("name", "")),
            command=list(command),
            profile=profile,
            memory_limit=limit,
            memory_fraction=number("memory_fraction", None),
            min_util=share(MIN_UTIL),
            max_util=share(MAX_UTIL),
            latency_target_ms=number("latency_target_ms", None),
            strict=strict,
            parent=parent or None,
            hp_context=hp_context,
        )


@dataclass(frozen=True)
class LiveClient:
    """A client holding a slot now, as admission needs it."""

    name: str
    role: str
    min_util: float


def memory_limit(request: JoinRequest, gpu_memory_bytes: int | None) -> int | None:
    """The client's memory limit in bytes: the one it gave, else its fraction of the GPU's
    memory (rounded down), else none. An explicit limit wins over a fraction."""
    if request.memory_limit is not None or request.memory_fraction is None:
        return request.memory_limit
    if gpu_memory_bytes is None:
        raise OrionError(
            "this daemon does not know its GPU's memory, so a memory fraction cannot be a limit",
            hint="give the client a memory limit in bytes instead",
        )
    return max(1, int(request.memory_fraction * gpu_memory_bytes))


def memory_limit_problem(
    limit: int | None, gpu_memory_bytes: int | None, context_bytes: int = 0
) -> str | None:
    """Why a client cannot have the memory limit ``limit`` on a GPU of ``gpu_memory_bytes``
    whose CUDA context takes ``context_bytes`` (None: it can, or what it is checked against is
    unknown): a limit over the GPU limits nothing and is a slip in the number or its unit, and
    one below the context is used up before the program allocates anything (every client
    process counts its context: scheduler_core/native/memory_ledger.h). For a join, and for
    `orion quota` changing a live client's."""
    if limit is None:
        return None
    if gpu_memory_bytes is not None and limit > gpu_memory_bytes:
        gpu = format_size(gpu_memory_bytes)
        return f"memory limit {format_size(limit)} is larger than the GPU's {gpu}"
    if limit < context_bytes:
        return (
            f"memory limit {format_size(limit)} is below the {format_size(context_bytes)} a "
            "CUDA context takes on this GPU"
        )
    return None


def check_request(request: JoinRequest, *, name_pending: bool = False) -> None:
    """Raises :class:`UsageError` with the reason when ``request`` is wrong in itself, whatever
    runs on the GPU: a role, name, limit, share or latency target out of its range.

    The one statement of these rules: the daemon applies them to every join (:func:`check_join`),
    and `orion run` and ``orion.ray.runtime_env`` before anything starts, so a bad value is said
    before any daemon or GPU is looked for. ``name_pending``: an empty name is left to the
    joining library, which names the client ``<program>-<pid>`` (``orion.ray``'s default)."""
    if request.role not in ROLES:
        raise UsageError(f"a client's role is 'hp' or 'be' (got {request.role!r})")
    left_to_library = name_pending and not request.name
    if not left_to_library and not 1 <= len(request.name.encode()) <= MAX_NAME_CHARS:
        raise UsageError(f"a client name has 1 to {MAX_NAME_CHARS} bytes (got {request.name!r})")
    fraction = request.memory_fraction
    if fraction is not None and not 0.0 < fraction <= 1.0:
        raise UsageError(f"a memory fraction is above 0 and at most 1 (got {fraction:g})")
    problem = MEMORY_LIMIT.problem(request.memory_limit)
    if problem is not None:
        raise UsageError(problem)
    problem = shares_problem(request.min_util, request.max_util)
    if problem is not None:
        raise UsageError(problem)
    target = request.latency_target_ms
    if target is not None and not (math.isfinite(target) and target > 0):
        raise UsageError(f"--latency-target-ms must be a positive number (got {target:g})")
    if target is not None and request.role != "hp":
        raise UsageError("--latency-target-ms is the HP client's target; a BE client has none")
    problem = HP_CONTEXT.problem(request.hp_context)
    if problem is not None:
        raise UsageError(problem)
    if request.hp_context is not None and request.role != "hp":
        raise UsageError(
            f"{HP_CONTEXT.flag} is where the HP client runs; a BE client runs where the daemon's "
            "sharing puts every BE client"
        )


def check_join(
    request: JoinRequest,
    live: Iterable[LiveClient],
    gpu_memory_bytes: int | None,
    context_bytes: int = 0,
) -> None:
    """Raises :class:`OrionError` with the reason when ``request`` cannot join beside ``live``:
    :func:`check_request`'s rules, then those of the GPU (its memory, and ``context_bytes``, what
    a CUDA context takes on it: 0 where unknown) and its clients."""
    live = list(live)
    check_request(request)
    if any(client.name == request.name for client in live):
        raise OrionError(
            f"a client named {request.name!r} is already running on this GPU",
            hint="give this one another --name",
        )
    if request.role == "hp":
        for client in live:
            if client.role == "hp":
                raise OrionError(
                    f"this GPU already has a high-priority client, {client.name!r}: at most one "
                    "HP client at a time",
                    hint="run this program with --be, or stop the other HP client first",
                )
    problem = memory_limit_problem(request.memory_limit, gpu_memory_bytes, context_bytes)
    if problem is None and request.memory_limit is None and gpu_memory_bytes is not None:
        # A fraction of the GPU: the limit it comes to must hold the context too.
        problem = memory_limit_problem(
            memory_limit(request, gpu_memory_bytes), gpu_memory_bytes, context_bytes
        )
    if problem is not None:
        raise OrionError(problem)
    promised = sum(client.min_util for client in live)
    problem = promises_problem(promised + request.min_util) if request.min_util > 0 else None
    if problem is not None:
        left = max(0.0, 1.0 - promised)
        raise OrionError(
            f"--min-util {request.min_util:g}: {problem} ({left:g} is left unpromised on this "
            f"GPU: the running clients are promised {promised:g})"
        )
