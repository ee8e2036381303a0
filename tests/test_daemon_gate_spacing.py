"""`orion up --be-gate-spacing-us`: the least BE work between two waits on a BE stream's gate,
through the daemon, against the stand-in driver (CPU only).

What users rely on: with the BE queue bound small (the latency loop's floor is a microsecond),
a BE trainer would pay for a gate wait before every kernel; the spacing they set keeps that
much BE work between two waits, and `orion status` says what the daemon runs with.
"""

from __future__ import annotations

import pytest
from daemon_harness import RunningDaemon

from orion_common.errors import OrionError
from orion_daemon.server import DaemonSettings
from scheduler_core.settings import DEFAULT_BE_GATE_SPACING_US

# Ten 1-ms kernels, then it says so and stays (a client that left is no longer in the status).
TEN_KERNELS = "func b 1000 repeat 10 launch b 8 64 0 end sync 0 say done hold"


@pytest.fixture
def make_daemon(tmp_path, monkeypatch):
    monkeypatch.setenv("ORION_STATE_DIR", str(tmp_path))
    started: list[RunningDaemon] = []

    def make(name: str, **settings) -> RunningDaemon:
        (tmp_path / name).mkdir()
        daemon = RunningDaemon(tmp_path / name / "gpu0", policy="orion", **settings)
        started.append(daemon)
        return daemon

    yield make
    for daemon in started:
        daemon.close()


def _be_gate_waits(harness, daemon: RunningDaemon, log) -> tuple[int, int]:
    process = harness.start(TEN_KERNELS, env=daemon.join("be", "trainer"), log=log)
    try:
        assert process.stdout.readline().strip() == "done"
        (trainer,) = [c for c in daemon.status()["clients"] if c["name"] == "trainer"]
    finally:
        process.kill()
        process.wait(timeout=10)
    return trainer["gate_waits"], trainer["launches"]


def test_a_gate_spacing_keeps_be_kernels_from_each_paying_a_wait(harness, make_daemon, tmp_path):
    # The same queue bound (0.5 ms, fixed) under two daemons: spaced by the queue bound (a spacing
    # of 1 us) every 1-ms kernel waits on the gate; with 2.5 ms, at most one kernel in two does.
    plain = make_daemon("plain", queue_limit_ns=500_000, be_gate_spacing_us=1)
    assert plain.status()["be_gate_spacing_us"] == 1
    waits, launches = _be_gate_waits(harness, plain, tmp_path / "plain.log")
    assert launches == 10 and waits == 10

    spaced = make_daemon("spaced", queue_limit_ns=500_000, be_gate_spacing_us=2500)
    assert spaced.status()["be_gate_spacing_us"] == 2500
    waits, launches = _be_gate_waits(harness, spaced, tmp_path / "spaced.log")
    assert launches == 10 and 1 <= waits <= 5


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"policy": "priority", "sharing": "mps"}, "policy 'priority'"),
        ({"policy": "quota"}, "policy 'quota'"),
        ({"policy": "orion", "be_gate": "cpu"}, "be_gate 'cpu'"),
    ],
)
def test_a_gate_spacing_where_no_gpu_gate_spaces_waits_is_refused(tmp_path, settings, said):
    # Under a policy without GPU-side BE gates (or with BE held on the CPU) it would change
    # nothing: refused in one line rather than taken silently.
    with pytest.raises(OrionError, match=f"be_gate_spacing_us applies .*{said}"):
        DaemonSettings(gpu=0, sm_count=132, folder=tmp_path, be_gate_spacing_us=100, **settings)
    assert DaemonSettings(gpu=0, sm_count=132, folder=tmp_path, be_gate_spacing_us=100)


@pytest.mark.parametrize(
    ("settings", "spacing"),
    [
        ({}, DEFAULT_BE_GATE_SPACING_US),  # orion, time-sliced, GPU gate
        ({"policy": "reef"}, DEFAULT_BE_GATE_SPACING_US),
        ({"sharing": "mps"}, DEFAULT_BE_GATE_SPACING_US),
        ({"be_gate_spacing_us": "1"}, 1.0),  # a wait per queue limit, as before the default
        ({"be_gate": "cpu"}, None),  # nothing to space: BE is held on the CPU
        ({"policy": "quota"}, None),
        ({"policy": "priority", "sharing": "mps"}, None),
    ],
)
def test_a_daemon_spaces_its_gpu_gate_waits_by_default(tmp_path, settings, spacing):
    # Unset, the spacing is the declared default wherever a GPU gate spaces waits, and stays
    # unset where none does (so a setting that would change nothing is never shown as in force).
    made = DaemonSettings(gpu=0, sm_count=132, folder=tmp_path, **settings)
    assert made.be_gate_spacing_us == spacing
