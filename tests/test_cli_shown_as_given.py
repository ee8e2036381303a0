"""What a user wrote is shown as written: brackets in a name, a command or a hint are never read
as console markup (rich took ``svc[ray]`` for ``svc`` and a style tag), in plan, status, quota,
doctor and every error line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

import orion_cli.doctor as doctor
from orion_cli.app import app
from orion_cli.status import status_table
from orion_common.prerequisites import Check

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "placement"
runner = CliRunner(env={"COLUMNS": "250"})
BRACKETED = "svc[ray]"
PIP = 'pip install "orion-gpu-share[ray]"'


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_plan_shows_bracketed_job_names(tmp_path: Path) -> None:
    fleet = json.loads((DATA / "fleet.json").read_text())
    fleet["hp"][0]["name"] = BRACKETED
    fleet["be"][0]["name"] = "[bold]a"
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(fleet))
    result = runner.invoke(app, ["plan", str(path), "--matrix-dir", str(DATA / "pairs")])
    assert result.exit_code == 0, result.output
    assert f"{BRACKETED} (hp: resnet-infer)" in _flat(result.output)
    assert "[bold]a" in result.output


def test_status_shows_bracketed_names_and_commands() -> None:
    client = {
        "name": BRACKETED,
        "pid": 7,
        "role": "be",
        "launches_per_s": None,
        "gpu_share": 0.0,
        "memory_used_bytes": 0,
        "memory_limit_bytes": None,
        "held_launches": 0,
        "held_ms": 0.0,
        "gate_waits": 0,
        "held_by": {},
        "profile_sources": {"launch_share": {"offline": None}},
        "interference": None,
        "command": PIP.split(),
    }
    status = {
        "gpu": 0,
        "gpu_name": "[red]GPU",
        "policy": "orion",
        "sharing": "timeslice",
        "pid": 1,
        "uptime_s": 3.0,
        "free_slots": 15,
        "clients": [client],
    }
    out = Console(width=400, record=True)
    out.print(status_table(status))
    text = out.export_text()
    assert BRACKETED in text and PIP in text and "([red]GPU)" in text


def test_quota_names_a_bracketed_client_whole(tmp_path: Path) -> None:
    """`orion quota RUN svc` beside a client `svc[ray]` said "no client 'svc' (clients: svc)"."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record = {
        "status": "running",
        "policy": "orion",
        "clients": [{"name": BRACKETED, "role": "be"}],
        "scheduler": {"shm": "/orion-none", "controller_pid": os.getpid()},
    }
    (run_dir / "run.json").write_text(json.dumps(record))
    result = runner.invoke(app, ["quota", str(run_dir), "svc", "--memory-limit", "1GiB"])
    assert result.exit_code == 1
    assert f"no client 'svc' in this run (clients: {BRACKETED})" in _flat(result.output)


def test_doctor_shows_a_hint_with_brackets(monkeypatch: pytest.MonkeyPatch) -> None:
    checks = [Check("ray [optional]", False, "not installed", ("colocate",), hint=PIP)]
    monkeypatch.setattr(doctor, "run_checks", lambda: checks)
    result = runner.invoke(app, ["doctor"])
    output = _flat(result.output)
    assert "ray [optional]" in output
    assert PIP in output
    assert "missing ray [optional]" in output
