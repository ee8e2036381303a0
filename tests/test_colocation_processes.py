"""A client process as the runner sees it: one that cannot build its workload says why, and
the way a process ended is put in words."""

from __future__ import annotations

import os
from pathlib import Path

from colocation.config import parse_jobs
from colocation.processes import FAILED, ClientProcess, describe_exit, log_tail
from colocation.protocol import ClientSpec, spec_path
from colocation.rundir import create_run_dir
from orion_common.runclock import monotonic_ns


def test_a_client_that_cannot_build_its_workload_reports_why(tmp_path: Path) -> None:
    config = parse_jobs(
        {
            "run": {"policy": "timeslice", "duration_s": 1},
            "clients": [{"name": "be", "workload": "bert", "mode": "train", "batch_size": 1}],
        },
        tmp_path,
    )
    run_dir = create_run_dir(tmp_path, "timeslice")
    spec = ClientSpec(
        name="be",
        role="be",
        workload="bert",
        mode="train",
        batch_size=1,
        dtype="fp32",
        device="cpu",
        table="clients/be.csv",
        clock_origin_ns=monotonic_ns(),
        seed=1,
        warmup_steps=1,
        options={"seq_len": 0},  # what the config validator would have refused
    )
    spec.write(spec_path(run_dir, "be"))
    client = ClientProcess(config.clients[0], run_dir)
    client.spawn(dict(os.environ))
    assert client.wait(60)
    assert client.state == FAILED
    assert client.exit_code == 1
    assert client.error == (
        "failed during warm-up: option 'seq_len' of workload 'bert' must be an integer >= 1 "
        "and <= 512, got 0"
    )
    assert any("seq_len" in line for line in client.log_tail)
    assert client.record()["error"] == client.error


def test_exit_statuses_in_words() -> None:
    assert describe_exit(-9) == "killed by signal 9 (SIGKILL)"
    assert describe_exit(-11) == "killed by signal 11 (SIGSEGV)"
    assert describe_exit(70).startswith("exit code 70: the preload library could not join")
    assert describe_exit(3) == "exited with code 3"


def test_log_tail_reads_the_end(tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    log.write_text("".join(f"line {i}\n" for i in range(5000)))
    assert log_tail(log, 3) == ["line 4997", "line 4998", "line 4999"]
    assert log_tail(tmp_path / "missing.log") == []
