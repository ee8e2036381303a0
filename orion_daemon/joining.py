"""The one way a program joins a daemon: environment variables that the preload library reads.

A program joins by starting with orion's preload library in ``LD_PRELOAD`` and ``ORION_ROLE``
(plus, optionally, its name, profile and limits) in its environment: at its first driver call the
library asks the daemon of the program's GPU (``CUDA_VISIBLE_DEVICES``) for a slot itself, then
attaches (``scheduler_core/native/daemon_join.h`` documents every variable and what a refused
join does). Nothing needs to wrap the program, which is what a process that Ray, Kubernetes or
Slurm starts requires. :func:`join_environment` builds those variables; `orion run` is a thin
setter of them (after :func:`check_join_now`, so a refusal is one line before anything starts),
and ``orion.ray.runtime_env`` puts the same variables into a Ray actor's environment.

:func:`join` is the ``join`` request itself as the library makes it, for callers that hold a slot
without a program (tests); the slot then belongs to the asking process.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orion_common.errors import OrionError
from orion_daemon import client as daemon_client
from orion_daemon import state
from orion_daemon.admission import JoinRequest
from orion_daemon.ownership import checked_environment
from scheduler_core.run_state import DECISIONS_VARIABLE
from scheduler_core.settings import HP_CONTEXT, MAX_UTIL, MEMORY_LIMIT, MIN_UTIL

COMMAND_NOT_FOUND = 127
"""The exit status a shell gives a command it cannot find; `orion run` gives the same."""
COMMAND_NOT_EXECUTABLE = 126
"""The exit status a shell gives a command it finds but cannot execute (a file without execute
permission, a folder); `orion run` gives the same."""
JOIN_REFUSED_EXIT = 75
"""The exit status of a program whose library could not join (daemon_join.h, kJoinRefusedExit)."""
JOIN_VARIABLES = {
    "role": "ORION_ROLE",
    "name": "ORION_NAME",
    "profile": "ORION_PROFILE",
    MEMORY_LIMIT.name: MEMORY_LIMIT.variable,
    "memory_fraction": "ORION_MEMORY_FRACTION",
    MIN_UTIL.name: MIN_UTIL.variable,
    MAX_UTIL.name: MAX_UTIL.variable,
    "latency_target_ms": "ORION_LATENCY_TARGET_MS",
    HP_CONTEXT.name: HP_CONTEXT.variable,
}
"""Each join request field and the variable the library reads it from."""
_DEFAULTS: dict[str, Any] = {s.name: s.default for s in (MIN_UTIL, MAX_UTIL)}
ORION_VARIABLES = (
    "ORION_RUN",
    "ORION_CLIENT",
    DECISIONS_VARIABLE,
    "ORION_STRICT",
    "ORION_BE_WHEN_DAEMON_GONE",
    "ORION_DAEMON_GONE_HOLD_S",
    "ORION_PARENT",  # set by the library of a BE client's child: the client it shares a limit of
    *JOIN_VARIABLES.values(),
)
"""Every variable that makes a program take part in a run or join a daemon."""


def find_command(command: list[str]) -> str | None:
    """The executable ``command`` would run (as ``execvp`` looks it up), or None."""
    if not command:
        return None
    program = command[0]
    if "/" in program:
        return program if os.access(program, os.X_OK) and Path(program).is_file() else None
    return shutil.which(program)


def command_failure(command: list[str]) -> tuple[int, str]:
    """Why :func:`find_command` found nothing for ``command``, as a shell says it: its exit
    status and message (``/etc/passwd``: 126, ``Permission denied``; ``nosuch``: 127)."""
    program = command[0] if command else ""
    if "/" in program and Path(program).exists():
        why = "Is a directory" if Path(program).is_dir() else "Permission denied"
        return COMMAND_NOT_EXECUTABLE, why
    return COMMAND_NOT_FOUND, "command not found"


def join_variables(join_request: JoinRequest) -> dict[str, str]:
    """The ``ORION_*`` variables that ask for ``join_request`` (fields at their default and
    unset ones are left out; the command is the program's own, read by the library)."""
    variables = {}
    for field, variable in JOIN_VARIABLES.items():
        value = getattr(join_request, field)
        if value is None or value == "" or _DEFAULTS.get(field, object()) == value:
            continue
        variables[variable] = repr(value) if isinstance(value, float) else str(value)
    return variables


def join_environment(
    base: Mapping[str, str],
    join_request: JoinRequest,
    *,
    device: str | None = None,
    state_base: Path | None = None,
) -> dict[str, str]:
    """``base`` set up so that the program it starts joins as ``join_request``: the preload
    library first in ``LD_PRELOAD``, the join variables, the GPU (``device``: an index or UUID for
    ``CUDA_VISIBLE_DEVICES``; None keeps the inherited one) and the daemons' state folder
    (``state_base``; None keeps the inherited one). Variables of another run are dropped."""
    from scheduler_core.library import with_preload

    environment = ungated_environment(base)
    environment.update(join_variables(join_request))
    if device is not None:
        environment["CUDA_VISIBLE_DEVICES"] = device
    if state_base is not None:
        environment["ORION_STATE_DIR"] = str(state_base)
    return with_preload(environment)


def check_join_now(gpu: int, join_request: JoinRequest, folder: Path | None = None) -> dict:
    """The daemon's record, once it says it would admit ``join_request`` now; else its one-line
    refusal as :class:`OrionError` (nothing is reserved either way)."""
    folder = folder or state.state_dir(gpu)
    record = state.require_daemon(gpu, folder)
    daemon_client.check_join(record, join_request)
    return record


def join(gpu: int, join_request: JoinRequest, folder: Path | None = None) -> dict[str, str]:
    """Takes a slot of ``gpu``'s daemon for the calling process; the variables the daemon
    answered with (``ORION_RUN``, ``ORION_CLIENT``, ``CUDA_VISIBLE_DEVICES``, MPS folders), once
    they are all variables a daemon may set (:func:`ownership.checked_environment`), and
    ``ORION_DECISIONS``: where the run's decisions are, which the daemon passed with its answer.

    The descriptor stays open, inheritable, for the life of this process: a program it execs
    keeps it (same pid, same path), and a program it starts finds it through this process's
    ``/proc/<pid>/fd``; the library maps it read-only (scheduler_core/native/shared_state.h,
    RunDecisions)."""
    folder = folder or state.state_dir(gpu)
    record = state.require_daemon(gpu, folder)
    answered, decisions = daemon_client.join(record, join_request)
    try:
        environment = checked_environment(answered)
    except OrionError:
        if decisions is not None:
            os.close(decisions)
        raise
    if decisions is None:
        raise OrionError(
            "the daemon's answer to join came without the run's decisions",
            hint="a daemon of an older orion? restart it with this one",
        )
    os.set_inheritable(decisions, True)
    environment[DECISIONS_VARIABLE] = f"/proc/{os.getpid()}/fd/{decisions}"
    return environment


def program_environment(base: Mapping[str, str], joined: Mapping[str, str]) -> dict[str, str]:
    """``base`` with what :func:`join` returned: this installation's own preload library is put
    first in ``LD_PRELOAD`` (the user's own preloads kept after it); a library the daemon names
    is never loaded."""
    from scheduler_core.library import with_preload

    environment = dict(base)
    answered = {k: v for k, v in joined.items() if k != DECISIONS_VARIABLE}
    environment.update(
        {k: v for k, v in checked_environment(answered).items() if k != "ORION_PRELOAD"}
    )
    if DECISIONS_VARIABLE in joined:  # set by :func:`join`, never by a daemon
        environment[DECISIONS_VARIABLE] = joined[DECISIONS_VARIABLE]
    return with_preload(environment)


def ungated_environment(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` without orion's run and join variables: `orion run --no-daemon` runs the program
    as it would run without orion (an inherited ``ORION_RUN`` would make it join another run, an
    inherited ``ORION_ROLE`` a daemon)."""
    return {k: v for k, v in base.items() if k not in ORION_VARIABLES}
