"""`orion quota`: change a client's limits while its run is live."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orion_cli._common import console, handle_errors
from orion_cli._settings import parsed, setting_option
from orion_cli.console import shown
from scheduler_core.settings import MEMORY_LIMIT, UNSET_WORD


@handle_errors
def quota_command(
    run_dir: Annotated[
        Path,
        typer.Argument(
            metavar="RUN_DIR", help="The live run's directory (what `orion colocate` printed)."
        ),
    ],
    client: Annotated[
        str, typer.Argument(metavar="CLIENT", help="The client's name in the jobs file.")
    ],
    memory_limit: Annotated[
        str | None,
        setting_option(MEMORY_LIMIT, f"The client's new memory limit ({UNSET_WORD!r} lifts it)."),
    ] = None,
    max_util: Annotated[
        float | None,
        typer.Option(
            "--max-util",
            help="New cap on the client's share of GPU time (0-1) over the run's quota window.",
            show_default=False,
        ),
    ] = None,
    min_util: Annotated[
        float | None,
        typer.Option(
            "--min-util",
            help="New share of GPU time (0-1) promised to the client when it has work.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Change a running client's limits: memory from its next allocation, GPU-time shares
    within a millisecond (the run must have started with shares, or under policy quota).

    Lowering a memory limit below what the client holds frees nothing: its new allocations fail
    (CUDA out of memory) until it is back under. Each change is appended to the run
    directory's limits.csv with its time on the run clock.
    """
    from colocation.config import ClientConfig
    from colocation.jobs_errors import value_problem
    from colocation.live_limits import change_memory_limit, change_shares
    from orion_common.errors import UsageError
    from orion_common.sizes import format_size

    if memory_limit is None and max_util is None and min_util is None:
        raise typer.BadParameter(
            "give at least one of --memory-limit, --max-util, --min-util", param_hint="options"
        )
    limit: int | None = parsed(MEMORY_LIMIT, memory_limit)
    for flag, field, value in (
        ("--max-util", "max_util", max_util),
        ("--min-util", "min_util", min_util),
    ):
        # a client's share, bounded as in a jobs file
        problem = None if value is None else value_problem(ClientConfig, field, value)
        if problem is not None:
            raise UsageError(f"{flag}: {problem}")
    if min_util is not None and max_util is not None and min_util > max_util:
        raise UsageError(f"--min-util {min_util:g} is above --max-util {max_util:g}")
    if _is_daemon_folder(run_dir):
        _change_through_daemon(run_dir, client, memory_limit, limit, min_util, max_util)
        return
    if max_util is not None or min_util is not None:
        for share in change_shares(run_dir, client, min_util, max_util):
            console.print(
                f"{shown(client)}: {share.field} {share.old:g} -> {share.new:g} "
                f"at run time {share.time_s:.3f} s"
            )
    if memory_limit is not None:
        change = change_memory_limit(run_dir, client, limit)

        def size(value: float | None) -> str:
            return "none" if value is None else format_size(int(value))

        console.print(
            f"{shown(client)}: memory limit {size(change.old)} -> {size(change.new)} "
            f"(in use {format_size(change.in_use)}) at run time {change.time_s:.3f} s"
        )


def _is_daemon_folder(folder: Path) -> bool:
    from orion_common.run_format import RUN_JSON
    from orion_daemon import state

    return (folder / state.RECORD).exists() and not (folder / RUN_JSON).exists()


def _change_through_daemon(
    folder: Path,
    client: str,
    memory_limit: str | None,
    limit: int | None,
    min_util: float | None,
    max_util: float | None,
) -> None:
    """A daemon's client: the daemon checks and applies the change (its admission then counts
    the new shares), through its socket."""
    from orion_common.sizes import format_size
    from orion_daemon.limits import UNCHANGED, change_limits

    changes = change_limits(
        folder,
        client,
        memory_limit=UNCHANGED if memory_limit is None else limit,
        min_util=min_util,
        max_util=max_util,
    )
    for change in changes:
        old, new = change["old"], change["new"]
        if change["field"] == "memory_limit":
            old = "none" if old is None else format_size(int(old))
            new = "none" if new is None else format_size(int(new))
            detail = f" (in use {format_size(int(change['in_use']))})"
        else:
            old, new, detail = f"{old:g}", f"{new:g}", ""
        field = "memory limit" if change["field"] == "memory_limit" else change["field"]
        console.print(
            f"{client}: {field} {old} -> {new}{detail} at daemon time {change['time_s']:.3f} s"
        )
