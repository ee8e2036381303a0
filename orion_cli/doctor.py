"""`orion doctor`: one table of what orion needs and whether it is there."""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from orion.ray.checks import ray_checks
from orion_cli._common import console, handle_errors
from orion_cli.console import JsonOpt, print_json, print_table, shown
from orion_common.prerequisites import Check, blockers, machine_checks
from scheduler_core.library import native_checks

_MARK = {True: "[green]ok[/]", False: "[red]missing[/]", None: "[dim]info[/]"}


def run_checks() -> list[Check]:
    """Every check, in the order a user reads them: GPU, Python stack, tools, orion itself,
    then Ray (optional: informational rows that block no command)."""
    return [*machine_checks(), *native_checks(), *ray_checks()]


def doctor_json(checks: list[Check]) -> dict[str, Any]:
    """The checks for scripts: each row, and per command whether it can run and what it lacks."""
    missing = blockers(checks)
    return {
        "checks": [
            {
                "name": check.name,
                "ok": check.ok,
                "found": check.value,
                "needed_by": list(check.needed_for),
                "problem": check.problem,
                "hint": check.hint,
            }
            for check in checks
        ],
        "commands": {
            command: {"ready": not names, "missing": list(names)}
            for command, names in missing.items()
        },
    }


@handle_errors
def doctor_command(as_json: JsonOpt = False) -> None:
    """Check the GPU, driver, CUDA, torch, ncu, MPS, orion's native library and Ray.

    Exits non-zero when something `orion profile` or `orion colocate` needs is missing
    (also with --json).
    """
    checks = run_checks()
    if as_json:
        document = doctor_json(checks)
        print_json(document)
        if not all(entry["ready"] for entry in document["commands"].values()):
            raise typer.Exit(1)
        return
    table = Table(title="orion doctor", title_justify="left")
    table.add_column("check", style="bold")
    table.add_column("status")
    table.add_column("found")
    table.add_column("needed by")
    for check in checks:
        table.add_row(
            shown(check.name),
            _MARK[check.ok],
            shown(check.value),
            ", ".join(check.needed_for) or "-",
        )
    print_table(table)
    for check in checks:
        if check.ok is False and check.hint:
            console.print(f"[yellow]{shown(check.name)}:[/] {shown(check.hint)}", highlight=False)
    missing = blockers(checks)
    for command, names in missing.items():
        if names:
            console.print(f"[red]orion {command} cannot run:[/] missing {shown(', '.join(names))}")
        else:
            console.print(f"[green]orion {command}: ready[/]")
    if any(missing.values()):
        raise typer.Exit(1)
