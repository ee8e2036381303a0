"""What every command shares: the console, the error handler and the common options.

Library code raises :class:`OrionError`; :func:`handle_errors` is the one place that turns it into
``error: <message>`` plus the hint on stderr and exit status 1 (2 for a
:class:`~orion_common.errors.UsageError`, as typer exits for usage), so no command prints
tracebacks for problems a user can fix.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, ParamSpec, TypeVar

import typer

from orion_cli.console import console, error_console, shown
from orion_common.errors import OrionError, UsageError

__all__ = ["as_usage", "console", "error_console", "fail", "handle_errors", "interactive"]

P = ParamSpec("P")
R = TypeVar("R")


def fail(message: str, hint: str | None = None, code: int = 1) -> typer.Exit:
    """Prints an error (and hint) and returns the Exit to raise."""
    # soft_wrap: an error stays one line however narrow the terminal, so it can be grepped
    error_console.print(f"[bold red]error:[/] {shown(message)}", highlight=False, soft_wrap=True)
    if hint:
        for line in hint.splitlines():
            error_console.print(f"[yellow]hint:[/] {shown(line)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def handle_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turns OrionError into a clean message and exit 1 (UsageError: 2), and Ctrl-C into exit
    130."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except UsageError as error:
            raise fail(error.message, error.hint, code=2) from None
        except OrionError as error:
            raise fail(error.message, error.hint) from None
        except KeyboardInterrupt:
            error_console.print("[yellow]interrupted[/]")
            raise typer.Exit(130) from None

    return wrapper


@contextlib.contextmanager
def as_usage() -> Iterator[None]:
    """The checks inside judge what the user typed on the command line (a workload's mode, a
    window): a library's :class:`OrionError` there is a usage error, exit status 2. The same
    check reading a file (a jobs file's workload) stays an error, exit status 1."""
    try:
        yield
    except UsageError:
        raise
    except OrionError as error:
        raise UsageError(error.message, error.hint) from None


def interactive() -> bool:
    """Progress bars and live views only on a terminal; plain lines in logs and pipes."""
    return sys.stdout.isatty()


ModeOpt = Annotated[
    str,
    typer.Option("--mode", "-m", help="infer (one request per step) or train (one iteration)."),
]
BatchSizeOpt = Annotated[int, typer.Option("--batch-size", "-b", help="Samples per step.")]
MatrixDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--matrix-dir",
        help="Folder holding one pair matrix <gpu kind>.json per GPU kind "
        "[default: benchmarks/results/<gpu kind>/pairs, as committed].",
        show_default=False,
    ),
]
CudaGraphOpt = Annotated[
    bool,
    typer.Option(
        "--cuda-graph",
        help="Inference only: capture the step once as a CUDA graph and replay it per request, "
        "as production servers do (see `orion workloads` for which workloads can). For a "
        "program after --: it replays CUDA graphs; ncu profiles each kernel node "
        "(--graph-profiling node) and the profile is a graph one.",
    ),
]
DTypeOpt = Annotated[
    str, typer.Option("--dtype", help="fp32, or bf16 (torch.autocast around forward and loss).")
]
