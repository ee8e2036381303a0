"""The conventions users bring from git, nvidia-smi and nvitop: --version, -h, completion,
--json where a table is printed, help without a type beside every flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orion_cli.app import app

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data" / "placement"
runner = CliRunner(env={"COLUMNS": "80"})
COMMANDS = ["profile", "colocate", "report", "doctor", "workloads", "plan", "pairs", "simulate"]


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag: str) -> None:
    result = runner.invoke(app, [flag])
    assert result.exit_code == 0
    assert result.stdout.startswith("orion ")


def test_completion_is_offered() -> None:
    assert "--install-completion" in runner.invoke(app, ["--help"]).stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_dash_h_is_help_without_types_beside_flags(command: str) -> None:
    result = runner.invoke(app, [command, "-h"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"Usage: orion {command}")
    assert "<bool>" not in result.stdout
    # paragraphs re-wrapped to the terminal, not the docstring's own line breaks
    assert all(len(line) <= 80 for line in result.stdout.splitlines())


# (command, arguments, a key of the JSON document)
JSON_COMMANDS = [
    ("doctor", ["doctor", "--json"], "checks"),
    ("workloads", ["workloads", "--json"], None),
    ("plan", ["plan", f"{DATA}/fleet.json", "--matrix-dir", f"{DATA}/pairs", "--json"], "gpus"),
    (
        "simulate",
        ["simulate", f"{DATA}/simulate/fleet.json", "--matrix-dir", f"{DATA}/pairs", "--json"],
        "metrics",
    ),
]


@pytest.mark.parametrize(("name", "args", "key"), JSON_COMMANDS, ids=[c[0] for c in JSON_COMMANDS])
def test_json_is_one_document_on_stdout(name: str, args: list[str], key: str | None) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code in (0, 1), result.output
    document = json.loads(result.stdout)  # nothing else on stdout
    if key is None:
        assert {entry["name"] for entry in document} >= {"resnet50", "synthetic-compute"}
    else:
        assert key in document
