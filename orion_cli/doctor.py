"""`orion doctor`: one table of what orion needs and whether it is there."""

from __future__ import annotations

import typer
from rich.table import Table

from orion_cli._common import console, handle_errors
from orion_cli.console import print_table
from orion_common.prerequisites import Check, blockers, machine_checks
from scheduler_core.library import native_checks

_MARK = {True: "[green]ok[/]", False: "[red]missing[/]", None: "[dim]info[/]"}


def run_checks() -> list[Check]:
    """Every check, in the order a user reads them: GPU, Python stack, tools, orion itself."""
    return [*machine_checks(), *native_checks()]


@handle_errors
def doctor_command() -> None:
    """Check the GPU, driver, CUDA, torch, ncu, MPS and orion's native library.

    Exits non-zero when something `orion profile` or `orion colocate` needs is missing.
    """
    checks = run_checks()
    table = Table(title="orion doctor", title_justify="left")
    table.add_column("check", style="bold")
    table.add_column("status")
    table.add_column("found")
    table.add_column("needed by")
    for check in checks:
        table.add_row(check.name, _MARK[check.ok], check.value, ", ".join(check.needed_for) or "-")
    print_table(table)
    for check in checks:
        if check.ok is False and check.hint:
            console.print(f"[yellow]{check.name}:[/] {check.hint}", highlight=False)
    missing = blockers(checks)
    for command, names in missing.items():
        if names:
            console.print(f"[red]orion {command} cannot run:[/] missing {', '.join(names)}")
        else:
            console.print(f"[green]orion {command}: ready[/]")
    if any(missing.values()):
        raise typer.Exit(1)
