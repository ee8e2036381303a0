"""docs/commands.md is the full command reference the README links to: every command has a
section there, and the README names every command."""

from __future__ import annotations

from pathlib import Path

import typer.main

from orion_cli.app import app

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = sorted(typer.main.get_command(app).commands)


def test_every_command_has_a_section_in_the_reference() -> None:
    reference = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    missing = [name for name in COMMANDS if f"## `orion {name}" not in reference]
    assert missing == []


def test_the_readme_names_every_command_and_links_the_reference() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(docs/commands.md)" in readme
    assert [name for name in COMMANDS if f"`orion {name}" not in readme] == []
