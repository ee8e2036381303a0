"""benchmarks/any_program.py's status sampling (the benchmark itself needs a GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmark_scripts import load_benchmark


def test_a_status_sample_asks_the_daemon_from_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No `orion status` process per sample (its start slowed the service beside it): the
    benchmark asks the daemon itself, and a daemon that is not there gives no sample."""
    module = load_benchmark("any_program")
    started = []
    monkeypatch.setattr(module.subprocess, "run", lambda *a, **k: started.append(a))
    monkeypatch.setattr(module.subprocess, "Popen", lambda *a, **k: started.append(a))
    assert module.status_sample(tmp_path / "no-daemon-here") is None
    assert started == []
