"""docs/commands.md is the full command reference the README links to: every command has a
section there, and the README names every command."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

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


def _first_commands() -> list[str]:
    """The command lines of the README's "The commands you need first", in order."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## The commands you need first", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]


def test_the_readmes_first_commands_run_in_order_up_to_the_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A newcomer on a machine without a GPU gets, at each step, either its result or what the
    machine lacks: never an input error (the second command was refused: `--policy mps` on the
    example's jobs file). The last one reads the runs the fourth made, so it stops there."""
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    lines = _first_commands()
    assert [line.split()[:2] for line in lines[:4]] == [
        ["orion", "doctor"],
        ["orion", "profile"],
        ["orion", "colocate"],
        ["orion", "colocate"],
    ]
    for line in lines[:4]:
        words, _, redirect = line.partition(">")
        result = runner.invoke(app, shlex.split(words)[1:])
        assert not isinstance(result.exception, Exception), (line, result.output)
        if redirect:
            assert result.exit_code == 0, (line, result.output)
            (tmp_path / redirect.strip()).write_text(result.stdout)
            continue
        assert result.exit_code in (0, 1), (line, result.output)  # never 2: usage
        output = " ".join(result.output.split())
        for input_error in ("invalid jobs file", "run.sharing: ", "Usage:", "Traceback"):
            assert input_error not in output, (line, result.output)
        if result.exit_code == 1 and "doctor" not in line:
            assert "GPU" in output, (line, result.output)  # what the machine lacks
