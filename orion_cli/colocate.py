"""`orion colocate JOBS.json`: run the jobs under one sharing policy, live, and summarise."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from orion_cli._common import console, error_console, fail, handle_errors, interactive
from orion_cli.console import print_table, warn
from orion_common.errors import OrionError, UsageError
from orion_common.output_paths import check_output_folder

_PLAIN_INTERVAL_S = 5.0
_EXAMPLE_HINT = "`orion colocate --example > jobs.json` writes a valid file to start from"


def _ms(value: float | None) -> str:
    return (
        "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f}"
    )


def _headline(progress: Any) -> str:
    parts = [f"{progress.policy}"]
    if progress.phases > 1:
        parts.append(f"phase {progress.phase}/{progress.phases}")
    parts.append(progress.state)
    if progress.elapsed_s is not None:
        parts.append(f"elapsed {max(0.0, progress.elapsed_s):.1f} s")
    if progress.remaining_s is not None:
        parts.append(f"remaining {progress.remaining_s:.1f} s")
    return " | ".join(parts)


def _hp_line(progress: Any) -> str:
    if not progress.hp_requests:
        return ""
    return (
        f"HP so far: {progress.hp_requests} requests, p50 {_ms(progress.hp_p50_ms)} ms, "
        f"p99 {_ms(progress.hp_p99_ms)} ms"
    )


class _LiveView:
    """A table redrawn in place (terminals)."""

    def __init__(self, out: Console) -> None:
        self._live = Live(console=out, refresh_per_second=4, transient=False)
        self.run_dir: Path | None = None

    def update(self, progress: Any) -> None:
        if self.run_dir is None:
            self.run_dir = progress.run_dir
            self._live.console.print(
                f"run directory: [bold]{progress.run_dir}[/]", highlight=False, soft_wrap=True
            )
        table = Table(title=_headline(progress), title_justify="left")
        for column in ("client", "role", "mode", "state", "pid", "requests / iterations"):
            table.add_column(column, justify="right" if column in ("pid",) else "left")
        for client in progress.clients:
            state = client.state if client.error is None else f"[red]{client.state}[/]"
            table.add_row(
                client.name,
                client.role,
                client.mode,
                state,
                str(client.pid or "-"),
                str(client.done),
            )
        self._live.update(Group(table, Text(_hp_line(progress))))

    def __enter__(self) -> _LiveView:
        self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._live.__exit__(*exc)


class _PlainView:
    """One line every few seconds and at each change of state (logs, pipes)."""

    def __init__(self, out: Console) -> None:
        self._out = out
        self._last = 0.0
        self._state: tuple[int, str] | None = None
        self.run_dir: Path | None = None

    def update(self, progress: Any) -> None:
        if self.run_dir is None:
            self.run_dir = progress.run_dir
            self._out.print(f"run directory: {progress.run_dir}", highlight=False, soft_wrap=True)
        state = (progress.phase, progress.state)
        now = time.monotonic()
        if state == self._state and now - self._last < _PLAIN_INTERVAL_S:
            return
        self._state, self._last = state, now
        counts = ", ".join(f"{c.name} {c.done} ({c.state})" for c in progress.clients)
        hp = _hp_line(progress)
        self._out.print(
            f"{_headline(progress)}: {counts}" + (f"; {hp}" if hp else ""),
            highlight=False,
            soft_wrap=True,
        )

    def __enter__(self) -> _PlainView:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


def _summary(run_dir: Path) -> None:
    from reporting import client_summary, load_run

    run = load_run(run_dir)
    frame = client_summary(run)
    table = Table(title=f"{run.policy} run ({run.status})", title_justify="left")
    view = [
        ("client", "client"),
        ("role", "role"),
        ("mode", "mode"),
        ("count", "done"),
        ("unfinished", "unfinished"),
        ("p50_ms", "p50 ms"),
        ("p99_ms", "p99 ms"),
        ("throughput_per_s", "per s"),
        ("exit_code", "exit"),
    ]
    for key, header in view:
        numeric = key not in ("client", "role", "mode", "errors")
        table.add_column(header, justify="right" if numeric else "left", no_wrap=key != "errors")
    for row in frame.to_dict("records"):
        cells = []
        for key, _ in view:
            value = row.get(key)
            if key in ("p50_ms", "p99_ms", "throughput_per_s"):
                cells.append(_ms(value))
            elif value is None or (isinstance(value, float) and math.isnan(value)):
                cells.append("-")
            elif key == "exit_code" and value != 0:
                cells.append(f"[red]{int(value)}[/]")
            else:
                cells.append(str(value))
        table.add_row(*cells)
    print_table(table)
    for entry in run.meta.get("clients", []):
        tail = entry.get("log_tail") or []
        if entry.get("error") and tail:
            console.print(
                f"[yellow]{entry['name']}: last lines of its log:[/]",
                highlight=False,
                soft_wrap=True,
            )
            for line in tail[-5:]:
                console.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)
    for note in run.notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)


@handle_errors
def colocate_command(
    jobs: Annotated[
        Path | None,
        typer.Argument(
            metavar="JOBS.json", help="The jobs file (see --example).", show_default=False
        ),
    ] = None,
    example: Annotated[
        bool, typer.Option("--example", help="Print a complete, valid jobs.json and exit.")
    ] = False,
    policy: Annotated[
        str | None,
        typer.Option("--policy", "-p", help="Run under this policy instead of run.policy."),
    ] = None,
    output_dir: Annotated[
        Path | None,
        typer.Option("--output-dir", "-o", help="Where to create the run directory."),
    ] = None,
    duration: Annotated[
        float | None,
        typer.Option(
            "--duration",
            "-d",
            help="Measure this many seconds (replaces run.duration_s and run.requests).",
        ),
    ] = None,
) -> None:
    """Run an HP inference job and best-effort jobs on one GPU under a sharing policy.

    Every client is a separate process; latencies, throughput, GPU utilisation and the
    scheduler's statistics are recorded in a new run directory for `orion report`.

    A plan from `orion plan -o plan.json` is run by `orion run-plan`.
    """
    from colocation.config import RunConfig, example_jobs, load_jobs
    from colocation.jobs_errors import value_problem
    from colocation.overrides import with_overrides
    from colocation.policies import get_policy
    from colocation.preflight import prepare_run
    from colocation.runner import run_jobs

    if example:
        typer.echo(example_jobs(), nl=False)
        return
    if jobs is None:
        raise UsageError("give a jobs file: orion colocate JOBS.json", hint=_EXAMPLE_HINT)
    # the options first, by the jobs file's own rules: a bad one is a usage error (status 2)
    if policy is not None:
        try:
            get_policy(policy)
        except OrionError as error:
            raise UsageError(f"--policy: {error.message}") from None
    problem = None if duration is None else value_problem(RunConfig, "duration_s", duration)
    if problem is not None:
        raise UsageError(f"--duration: {problem}")
    config = with_overrides(
        load_jobs(jobs), source=jobs, policy=policy, output_dir=output_dir, duration_s=duration
    )
    # input errors first, machine problems after: an unwritable -o is said before "no GPU"
    check_output_folder(config.run.output_dir, "output folder")
    prepared = prepare_run(config)
    for warning in prepared.warnings:
        warn(warning)
    view: _LiveView | _PlainView = _LiveView(console) if interactive() else _PlainView(console)
    try:
        with view:
            outcome = run_jobs(prepared, progress=view.update)
    except KeyboardInterrupt:
        if view.run_dir is not None:
            error_console.print(
                f"stopped early: what was measured is in {view.run_dir} (status incomplete)",
                highlight=False,
                soft_wrap=True,
            )
        raise
    _summary(outcome.run_dir)
    console.print(f"run directory: [bold]{outcome.run_dir}[/]", highlight=False, soft_wrap=True)
    if outcome.status == "failed":
        raise fail(
            "every client failed; nothing was measured",
            hint=f"see the logs in {outcome.run_dir / 'logs'}",
        )
    if outcome.failed_clients:
        error_console.print(
            f"[yellow]warning:[/] client(s) failed: {', '.join(outcome.failed_clients)} "
            "(their errors are in run.json and the table above)",
            highlight=False,
            soft_wrap=True,
        )
    console.print(f"next: orion report {outcome.run_dir}", highlight=False, soft_wrap=True)
