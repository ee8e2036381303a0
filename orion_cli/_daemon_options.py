"""Options shared by the daemon commands (`up`, `down`, `run`, `status`, `quota --gpu`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

GpuOpt = Annotated[
    int,
    typer.Option("--gpu", "-g", help="The GPU (index, as nvidia-smi numbers them).", min=0),
]
StateDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help="Where daemons keep their state (one folder per GPU): default $ORION_STATE_DIR, "
        "else $XDG_RUNTIME_DIR/orion, else /tmp/orion-<uid>.",
        show_default=False,
    ),
]


def daemon_folder(gpu: int, state_dir: Path | None) -> Path:
    """The state folder of GPU ``gpu``'s daemon under ``state_dir`` (None: the default base)."""
    from orion_daemon import state

    return state.state_dir(gpu, state_dir)
