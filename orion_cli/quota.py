"""`orion quota`: change a client's limits while its run is live."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from orion_cli._common import console, handle_errors
from orion_cli._settings import parsed, setting_option
from orion_cli.console import shown
from scheduler_core.settings import MAX_UTIL, MEMORY_LIMIT, MIN_UTIL, UNSET_WORD
from scheduler_core.shares import shares_problem


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
        str | None, setting_option(MAX_UTIL, "The client's new cap on its share of GPU time.")
    ] = None,
    min_util: Annotated[
        str | None, setting_option(MIN_UTIL, "The client's new promised share of GPU time.")
    ] = None,
) -> None:
    """Change a running client's limits: memory from its next allocation, GPU-time shares
    within a millisecond (the run must have started with shares, or under policy quota).

    The change is a request to the daemon the client joined, checked by the rules a join meets.
    Lowering a memory limit below what the client holds frees nothing: its new allocations fail
    (CUDA out of memory) until it is back under. Each change is appended to the run
    directory's limits.csv with its time on the run clock.
    """
    from orion_common.errors import UsageError
    from orion_daemon.limits import UNCHANGED

    if memory_limit is None and max_util is None and min_util is None:
        raise typer.BadParameter(
            "give at least one of --memory-limit, --max-util, --min-util", param_hint="options"
        )
    limit: int | None = parsed(MEMORY_LIMIT, memory_limit)
    # a share given as "none" goes back to what unset means (no promise, no cap)
    promise = None if min_util is None else MIN_UTIL.or_default(parsed(MIN_UTIL, min_util))
    cap = None if max_util is None else MAX_UTIL.or_default(parsed(MAX_UTIL, max_util))
    problem = None if promise is None or cap is None else shares_problem(promise, cap)
    if problem is not None:
        raise UsageError(problem)
    changes: dict[str, Any] = {
        "memory_limit": UNCHANGED if memory_limit is None else limit,
        "min_util": promise,
        "max_util": cap,
    }
    if _is_daemon_folder(run_dir):
        from orion_daemon.limits import change_limits

        clock = "daemon"
    else:
        from colocation.live_limits import change_limits

        clock = "run"
    for change in change_limits(run_dir, client, **changes):
        console.print(f"{shown(client)}: {_said(change)} at {clock} time {change['time_s']:.3f} s")


def _is_daemon_folder(folder: Path) -> bool:
    from orion_common.run_format import RUN_JSON
    from orion_daemon import state

    return (folder / state.RECORD).exists() and not (folder / RUN_JSON).exists()


def _said(change: dict[str, Any]) -> str:
    """A change the daemon made, in words: the field, its old and new value."""
    from orion_common.sizes import format_size

    def size(value: Any) -> str:
        return "none" if value is None else format_size(int(value))

    old, new = change["old"], change["new"]
    if change["field"] == "memory_limit":
        return f"memory limit {size(old)} -> {size(new)} (in use {size(change['in_use'])})"
    return f"{change['field']} {old:g} -> {new:g}"
