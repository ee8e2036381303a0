"""An HP program that joins a daemon after BE programs that never idle is learned, against the
stand-in driver (CPU only).

What users rely on: services start after trainers all the time. Before sampling holds, an HP
sample counted only when no BE work was unfinished, so such an HP stayed 100% unknown and the
BE queue bound stayed unset. Now its kernels and graphs get durations, the bound is tight from
its join, and it follows the learned step.
"""

from __future__ import annotations

import pytest
from daemon_harness import RunningDaemon
from native_harness import wait_for

from scheduler_core.thresholds import UNLEARNED_HP_QUEUE_LIMIT_NS

# A training loop: 2-ms kernels, 20 to a step, a synchronisation between steps, far more steps
# than the test lasts.
NEVER_IDLE_BE = "func b 2000 say started repeat 100000 repeat 20 launch b 8 64 0 end sync 0 end"
# A served request: a graph of two kernels (2 ms and 1 ms), replayed and waited for.
GRAPH = "func ga 2000 func gb 1000 graph_new A graph_node A ga 4 128 graph_node A gb 2 64"


@pytest.fixture
def daemon(tmp_path, monkeypatch):
    monkeypatch.setenv("ORION_STATE_DIR", str(tmp_path))
    running = RunningDaemon(tmp_path / "gpu0", policy="orion")
    yield running
    running.close()


def test_an_hp_joining_after_be_that_never_idles_is_learned(harness, daemon, tmp_path):
    be = harness.start(NEVER_IDLE_BE, env=daemon.join("be", "trainer"), log=tmp_path / "be.log")
    hp = None
    try:
        assert be.stdout.readline().strip() == "started"
        assert daemon.status()["queue_limit_us"] is None
        # Its timing events on the stand-in's simulated clock: the graph is timed at exactly its
        # kernels' 3 ms, however late a busy machine runs them.
        hp_environment = {**daemon.join("hp", "serve"), "FAKE_EVENT_CLOCK": "simulated"}
        # Nothing of the HP is known yet: BE is bounded tightly from its join on.
        assert daemon.status()["queue_limit_us"] == UNLEARNED_HP_QUEUE_LIMIT_NS / 1e3
        script = f"{GRAPH} graph_inst A flags repeat 30 graph_run A 0 sync 0 end say learned"
        hp = harness.start(f"{script} hold", env=hp_environment)
        assert hp.stdout.readline().strip() == "learned"
        learned = daemon.learned("serve")
        wait_for(
            lambda: (daemon.status()["queue_limit_us"] or 0) > UNLEARNED_HP_QUEUE_LIMIT_NS / 1e3,
            what="the bound the learned step gives",
        )
        status = daemon.status()
        serve = next(c for c in status["clients"] if c["name"] == "serve")
        assert be.poll() is None  # the trainer never stopped
    finally:
        for process in (hp, be):
            if process is not None:
                process.kill()
                process.wait(timeout=10)
    graphs = [e for e in learned["entries"] if e["graph"]]
    assert len(graphs) == 1 and graphs[0]["duration_ns"] == pytest.approx(3_000_000, rel=1e-3)
    assert serve["sampling_holds"] >= 1 and serve["held_samples"] >= 5
    assert serve["profile_sources"]["launches"]["online"] >= 1
    # 2.5% of the learned 3-ms step, as an offline profile would give (the loop starts there).
    assert status["queue_limit_us"] == pytest.approx(75, rel=1e-3)
