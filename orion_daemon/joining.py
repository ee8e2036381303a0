"""The one way a program joins a daemon: ask for a slot, then run with the variables it needs.

`orion run` (and `orion colocate`'s clients) call :func:`join`, which asks the daemon for a slot
and returns the environment the program must start with: the preload library first in
``LD_PRELOAD``, the shared state's name and the slot (``ORION_RUN``, ``ORION_CLIENT``), the GPU
(``CUDA_VISIBLE_DEVICES``) and, under MPS, the daemon's MPS folders. The daemon watches the
asking process until a process attaches to the slot; `orion run` then replaces itself with the
program (``exec``), so the daemon's pid and the program's are one.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from orion_common.errors import OrionError
from orion_daemon import state
from orion_daemon.admission import JoinRequest
from orion_daemon.protocol import request

COMMAND_NOT_FOUND = 127
"""The exit status a shell gives a command it cannot find; `orion run` gives the same."""
ORION_VARIABLES = ("ORION_RUN", "ORION_CLIENT", "ORION_STRICT")


def find_command(command: list[str]) -> str | None:
    """The executable ``command`` would run (as ``execvp`` looks it up), or None."""
    if not command:
        return None
    program = command[0]
    if "/" in program:
        return program if os.access(program, os.X_OK) and Path(program).is_file() else None
    return shutil.which(program)


def join(gpu: int, join_request: JoinRequest, folder: Path | None = None) -> dict[str, str]:
    """Asks the daemon of ``gpu`` for a slot; the variables to set (see the module docstring)."""
    folder = folder or state.state_dir(gpu)
    record = state.require_daemon(gpu, folder)
    message = {"op": "join", **join_request.__dict__}
    reply = request(Path(record["socket"]), message)
    environment = reply.get("environment")
    if not isinstance(environment, dict):
        raise OrionError("the daemon's answer to join has no environment")
    return {str(k): str(v) for k, v in environment.items()}


def program_environment(base: Mapping[str, str], joined: Mapping[str, str]) -> dict[str, str]:
    """``base`` with what :func:`join` returned: the preload library is put first in
    ``LD_PRELOAD`` (the user's own preloads kept after it)."""
    from scheduler_core.library import with_preload

    environment = dict(base)
    preload = joined.get("ORION_PRELOAD")
    environment.update({k: v for k, v in joined.items() if k != "ORION_PRELOAD"})
    return with_preload(environment, Path(preload) if preload else None)


def ungated_environment(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` without orion's join variables: `orion run --no-daemon` runs the program as
    it would run without orion (an inherited ``ORION_RUN`` would make it join another run)."""
    return {k: v for k, v in base.items() if k not in ORION_VARIABLES}
