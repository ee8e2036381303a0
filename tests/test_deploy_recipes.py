"""deploy/: the systemd unit and the container recipe start `orion up` with options it has, and the
unit is one systemd accepts (``systemd-analyze verify``, where systemd is installed)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from orion_cli.app import app

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
UNIT = DEPLOY / "systemd" / "orion-daemon@.service"
DROP_IN = DEPLOY / "systemd" / "mps.conf"
DOCKERFILE = DEPLOY / "container" / "Dockerfile"


def up_options() -> set[str]:
    up = typer.main.get_command(app).commands["up"]  # type: ignore[attr-defined]
    return {name for param in up.params for name in getattr(param, "opts", [])}


def unit_command() -> list[str]:
    line = next(line for line in UNIT.read_text().splitlines() if line.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart="))


def test_the_unit_and_the_image_start_orion_up_in_the_foreground_with_its_own_options():
    command = unit_command()
    assert command[1:4] == ["up", "--foreground", "--gpu"] and command[4] == "%i"
    entrypoint = re.search(r"^ENTRYPOINT (\[.*\])$", DOCKERFILE.read_text(), re.MULTILINE)
    cmd = re.search(r"^CMD (\[.*\])$", DOCKERFILE.read_text(), re.MULTILINE)
    assert entrypoint is not None and cmd is not None
    image = [*json.loads(entrypoint.group(1)), *json.loads(cmd.group(1))]
    assert image[:3] == ["orion", "up", "--foreground"]
    used = {arg for arg in [*command, *image] if arg.startswith("--")}
    assert used <= up_options()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_accepts_the_unit_and_its_mps_drop_in(tmp_path):
    """The unit as installed, with its executable where this test's orion is (systemd checks
    that the command exists), and the drop-in beside it."""
    orion = Path(sys.executable).with_name("orion")
    if not orion.is_file():
        pytest.skip("orion is not installed beside this Python")
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/orion", str(orion)))
    (tmp_path / f"{UNIT.name}.d").mkdir()
    shutil.copy(DROP_IN, tmp_path / f"{UNIT.name}.d" / DROP_IN.name)
    checked = subprocess.run(
        ["systemd-analyze", "verify", str(unit), "orion-daemon@0.service"],
        env={**os.environ, "SYSTEMD_UNIT_PATH": f"{tmp_path}:"},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    assert checked.stderr.strip() == "", checked.stderr


def test_the_grafana_dashboard_queries_only_metrics_the_daemon_serves():
    from prometheus_client import CollectorRegistry, generate_latest

    from orion_daemon.metrics import families
    from orion_daemon.status import Client, client_status

    hp = Client(slot=0, name="web", role="hp", claim_pid=1, command=["serve"], profile=None,
                memory_limit=None, min_util=0.0, max_util=1.0, latency_target_ms=None,
                joined_s=0.0)  # fmt: skip
    status = {"gpu": 0, "gpu_name": "x", "policy": "orion", "sharing": "timeslice", "pid": 1,
              "uptime_s": 1.0, "queue_limit_us": 100.0, "free_slots": 15, "records": None,
              "records_pending": 0, "record_writes": 1, "record_write_failures": 0,
              "heartbeat_age_s": 0.01, "client_events": {"join": 1},
              "requests": {"status": {"count": 1, "seconds": 0.001}},
              "clients": [{**client_status(hp, {"memory_limit": 1 << 30}),
                           "interference": 1.2, "felt_slowdown": 1.3,
                           "felt_p99": 2.0, "felt_p99_over_alone": 1.4}]}  # fmt: skip

    class Snapshot:
        def collect(self):
            return families(status)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Snapshot())
    served = set(re.findall(r"^(orion_\w+?)[{ ]", generate_latest(registry).decode(), re.M))
    dashboard = (DEPLOY / "grafana" / "orion.json").read_text()
    json.loads(dashboard)
    queried = set(re.findall(r"\b(orion_\w+)", dashboard))
    assert queried and queried <= served, queried - served
