"""`orion quota`: change a client's limits while its run is live."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orion_cli._common import console, handle_errors


@handle_errors
def quota_command(
    run_dir: Annotated[
        Path, typer.Argument(help="The live run's directory (what `orion colocate` printed).")
    ],
    client: Annotated[str, typer.Argument(help="The client's name in the jobs file.")],
    memory_limit: Annotated[
        str | None,
        typer.Option(
            "--memory-limit",
            help="New GPU memory limit: bytes, or a number with k, M, G (powers of 10) or Ki, "
            "Mi, Gi (powers of 2), optionally followed by B; 'none' lifts the limit.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Change a running client's limits; it obeys from its next allocation.

    Lowering a memory limit below what the client holds frees nothing: its new allocations fail
    (CUDA out of memory) until it is back under. Each change is appended to the run
    directory's limits.csv with its time on the run clock.
    """
    from colocation.live_limits import change_memory_limit
    from orion_common.sizes import format_size, parse_size

    if memory_limit is None:
        raise typer.BadParameter("give a limit to change", param_hint="--memory-limit")
    if memory_limit.strip().lower() == "none":
        limit = None
    else:
        try:
            limit = parse_size(memory_limit)
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint="--memory-limit") from None
    change = change_memory_limit(run_dir, client, limit)

    def shown(value: int | None) -> str:
        return "none" if value is None else format_size(value)

    console.print(
        f"{client}: memory limit {shown(change.old)} -> {shown(change.new)} "
        f"(in use {format_size(change.in_use)}) at run time {change.time_s:.3f} s"
    )
