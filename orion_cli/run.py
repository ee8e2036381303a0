"""`orion run`: run any program as a client of a GPU's daemon."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from orion_cli._common import error_console, handle_errors
from orion_cli._daemon_options import GpuOpt, StateDirOpt, daemon_folder
from orion_cli._settings import parsed, setting_option
from scheduler_core.settings import HP_CONTEXT, MAX_UTIL, MEMORY_LIMIT, MIN_UTIL


def default_name(command: list[str]) -> str:
    """The program's name: a Python script's name rather than the interpreter's."""
    program = Path(command[0]).name
    if program.startswith("python") and len(command) > 1 and command[1].endswith(".py"):
        program = Path(command[1]).stem
    return program[:31]


@handle_errors
def run_command(
    command: Annotated[
        list[str] | None,
        typer.Argument(
            help="The program and its arguments, after `--`.", show_default=False, metavar="CMD"
        ),
    ] = None,
    hp: Annotated[
        bool, typer.Option("--hp", help="Run as the high-priority client (at most one).")
    ] = False,
    be: Annotated[bool, typer.Option("--be", help="Run as a best-effort client.")] = False,
    gpu: GpuOpt = 0,
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="The client's name in `orion status` (default: the program's name).",
            show_default=False,
        ),
    ] = None,
    profile: Annotated[
        Path | None,
        typer.Option(
            "--profile",
            help="The program's kernel profile (`orion profile`); without one its kernels are "
            "unknown work.",
            show_default=False,
        ),
    ] = None,
    memory_limit: Annotated[str | None, setting_option(MEMORY_LIMIT, "E.g. 8GiB.")] = None,
    min_util: Annotated[str | None, setting_option(MIN_UTIL)] = None,
    max_util: Annotated[str | None, setting_option(MAX_UTIL)] = None,
    latency_target_ms: Annotated[
        float | None,
        typer.Option(
            "--latency-target-ms",
            help="HP only: the p99 latency the service aims at; sets how much BE work may queue.",
            show_default=False,
        ),
    ] = None,
    hp_context: Annotated[
        str | None, setting_option(HP_CONTEXT, "HP only, on a daemon of --sharing mps.")
    ] = None,
    no_daemon: Annotated[
        bool,
        typer.Option("--no-daemon", help="Run the program ungated, without a daemon."),
    ] = False,
    state_dir: StateDirOpt = None,
) -> None:
    """Run a program as a client of the GPU's orion daemon (`orion up`).

    Checks that the daemon would admit the program, sets the preload library and the variables
    that make it join (LD_PRELOAD, ORION_ROLE and the limits, CUDA_VISIBLE_DEVICES) and replaces
    itself with the program, unchanged: its exit status is orion run's. The program takes its
    slot when it first uses the GPU; when it ends, or is killed, the daemon gives its slot,
    memory count and share back. Programs that orion run cannot wrap (a Ray actor) join with the
    same variables set by other means (see the README).

    Example: orion run --hp --name web -- python serve.py --port 8000
    """
    from orion_common.errors import OrionError, UsageError
    from orion_daemon.admission import JoinRequest, check_request
    from orion_daemon.joining import (
        check_join_now,
        command_failure,
        find_command,
        join_environment,
        ungated_environment,
    )

    # Input first, the machine after: every value is checked before any daemon is looked for.
    if not command:
        raise UsageError("no command to run", hint="orion run --be -- python train.py")
    if hp == be and not no_daemon:
        raise UsageError("say whether the program is --hp or --be")
    limit = parsed(MEMORY_LIMIT, memory_limit)
    context = parsed(HP_CONTEXT, hp_context)
    promise, cap = parsed(MIN_UTIL, min_util), parsed(MAX_UTIL, max_util)
    if no_daemon:
        given = {
            MEMORY_LIMIT.flag: limit is not None,
            MIN_UTIL.flag: promise is not None,
            MAX_UTIL.flag: cap is not None,
            "--latency-target-ms": latency_target_ms is not None,
            HP_CONTEXT.flag: context is not None,
            "--profile": profile is not None,
        }
        ignored = [flag for flag, set_ in given.items() if set_]
        if ignored:
            raise UsageError(
                f"{', '.join(ignored)} cannot apply with --no-daemon: the program runs ungated, "
                "with no daemon to hold it to them",
                hint="leave out --no-daemon (and start one with `orion up`), or the options",
            )
    else:
        request = JoinRequest(
            role="hp" if hp else "be",
            name=default_name(command) if name is None else name,  # --name '' is refused
            command=list(command),
            profile=None if profile is None else str(profile.resolve()),
            memory_limit=limit,
            min_util=MIN_UTIL.or_default(promise),
            max_util=MAX_UTIL.or_default(cap),
            latency_target_ms=latency_target_ms,
            hp_context=context,
        )
        check_request(request)
        if profile is not None and not profile.is_file():
            raise OrionError(f"--profile: no such file: {profile}")  # a missing file: 1
        if profile is not None:
            from postprocess import read_profile

            try:
                read_profile(profile)  # as the daemon will read it at the join: a bad file, 1
            except OrionError as error:
                raise OrionError(f"--profile: {error.message}", error.hint) from None
    executable = find_command(command)
    if executable is None:
        status, why = command_failure(command)
        error_console.print(f"orion run: {command[0]}: {why}", highlight=False, markup=False)
        raise typer.Exit(status)
    if no_daemon:
        environment = ungated_environment(os.environ)
    else:
        folder = daemon_folder(gpu, state_dir)
        record = check_join_now(gpu, request, folder)
        # The daemon's GPU by UUID when it has one: the name CUDA cannot renumber.
        device = (record.get("gpu") or {}).get("uuid") or str(gpu)
        environment = join_environment(os.environ, request, device=device, state_base=state_dir)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(executable, command, environment)
    except OSError as error:
        error_console.print(
            f"orion run: {command[0]}: {error.strerror}", highlight=False, markup=False
        )
        raise typer.Exit(126) from None
