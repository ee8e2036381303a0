"""BE launches held on the GPU, not in the program's thread (``be_gate="gpu"``), on CPU.

The stand-in driver simulates `cuStreamWaitValue32`: a stream holds at the wait until the gate
word's open bit is set. What users rely on: a held BE launch returns to the program at once, its
work still runs only when the policy admits it, at most one queue limit of work passes one
opening, and nothing stays held when the HP client dies or the run ends.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from native_harness import MS, Harness, HeldKernel, kernel_table, read_log, wait_for

from orion_common.errors import OrionError
from scheduler_core import SchedulerRun, SchedulerSettings

BE_SCRIPT = "func bek 1000 repeat 10 launch bek 8 128 0 end sync 0"  # ten 1 ms kernels


def gate_settings(policy: str = "reef", queue_limit_ms: float = 2.5) -> SchedulerSettings:
    # GPU-written HP completions: the gate must open when HP's work is done, exactly.
    return SchedulerSettings(
        policy=policy,
        sm_count=132,
        queue_limit_ns=int(queue_limit_ms * MS),
        unknown_duration_ns=int(queue_limit_ms * MS),
        hp_completion="gpu-write",
        be_gate="gpu",
    )


def calls(log: Path, *kinds: str) -> list:
    return [e for e in read_log(log) if e.kind in kinds]


def start_hp_kernel(
    harness: Harness,
    tmp_path: Path,
    run: SchedulerRun,
    hp_ms: int = 300,
    hp_sms: int = 1,
    be_sms: int = 8,
    be_class: str = "memory",
    keeper: bool = True,
    hold: HeldKernel | None = None,
):
    """Registers an HP client (one compute kernel of ``hp_ms``) and a BE client (1 ms kernels),
    publishes the run (``keeper=False``: then stops its gate keeper, as if it had died) and
    starts HP's kernel (``hold``: it runs on until released); returns (hp index, be index, HP
    process)."""
    hp = run.add_client("hp", "hp", kernel_table(("long", 1, 32, hp_sms, "compute", hp_ms)))
    be = run.add_client("be", "be", kernel_table(("bek", 8, 128, be_sms, be_class, 1)))
    run.publish()
    if not keeper:
        run._run.stop_gate_keeper()
    process = harness.start(
        f"func long {hp_ms * 1000} launch long 1 32 0 sync 0",
        env={**run.client_environment(hp), **(hold.env() if hold else {})},
        log=tmp_path / "hp.log",
    )
    return hp, be, process


def hold_hp(tmp_path: Path) -> HeldKernel:
    """HP's kernel "long", run until the test releases it."""
    return HeldKernel("long", tmp_path / "release-hp")


def stop(*processes) -> None:
    for process in processes:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def not_started(log: Path) -> bool:
    """No kernel of the log's process has started on the (simulated) GPU yet."""
    return not calls(log, "exec_start")


def wait_for_hp_to_close_gates(run: SchedulerRun) -> None:
    """Until HP's launch is published and has closed the BE gates (it bumps ``hp_activity``
    after both). Its ``launches`` count comes first, before either: a BE launch made in between
    passes a gate still open."""
    wait_for(lambda: run.gate_stats()["hp_activity"] >= 1, what="HP's launch to close the gates")


def hp_kernel_end_ns(tmp_path: Path) -> int:
    return next(e for e in read_log(tmp_path / "hp.log") if e.kind == "exec_end").time_ns


def test_held_be_launches_return_at_once_and_run_after_the_hp_kernel(harness, tmp_path):
    hold = hold_hp(tmp_path)
    be_log = tmp_path / "be.log"
    with SchedulerRun(gate_settings()) as run:
        _, be, hp_process = start_hp_kernel(harness, tmp_path, run, hold=hold)
        be_process = None
        try:
            wait_for(lambda: not run.gate_open(be), what="HP's launch to close the BE gate")
            be_process = harness.start(BE_SCRIPT, env=run.client_environment(be), log=be_log)
            # HP's kernel runs until released: a program held in its thread never gets here.
            wait_for(lambda: len(calls(be_log, "launch")) == 10,
                     what="BE's ten launch calls to return while HP's kernel runs")  # fmt: skip
            assert not_started(be_log)
            released_ns = hold.release()
            assert be_process.wait(timeout=30) == 0, be_process.stderr.read()
            assert hp_process.wait(timeout=30) == 0
        finally:
            stop(hp_process, be_process)
        stats = run.stats()["be"]
    be_calls = calls(be_log, "launch")
    hp_end = hp_kernel_end_ns(tmp_path)
    be_starts = calls(be_log, "exec_start")
    assert len(be_calls) == len(be_starts) == 10
    # The program never stopped: all ten launch calls returned while HP's kernel ran ...
    assert be_calls[-1].time_ns < released_ns <= hp_end
    # ... but the GPU ran none of them before HP's kernel ended.
    assert all(start.time_ns >= hp_end for start in be_starts)
    assert stats["blocked_launches"] == 0
    assert stats["reasons"]["gpu_gate"] == 10


def be_waits_and_launches(harness, tmp_path, settings: SchedulerSettings) -> tuple[list, int]:
    """A lone BE client's ten 1-ms launches under ``settings``: its gate waits and launches in
    the order the program made them, and the gate waits its statistics counted."""
    with SchedulerRun(settings) as run:
        be = run.add_client("be", "be", kernel_table(("bek", 8, 128, 8, "memory", 1)))
        run.publish()
        result = harness.run(BE_SCRIPT, env=run.client_environment(be), log=tmp_path / "be.log")
        assert result.returncode == 0, result.stderr
        stats = run.stats()["be"]
    return [e.kind for e in calls(tmp_path / "be.log", "launch", "wait_value")], stats["gate_waits"]


def test_one_gate_wait_per_queue_limit_of_be_work(harness, tmp_path):
    # 1 ms kernels under a 2.5 ms limit: a wait before the 1st, 3rd, 5th ... launch, so an HP
    # request never finds more than the limit of BE work let through by one opening.
    sequence, waits = be_waits_and_launches(harness, tmp_path, gate_settings("orion"))
    assert sequence == ["wait_value", "launch", "launch"] * 5
    assert waits == 5


@pytest.mark.parametrize(
    ("spacing_ms", "expected"),
    [
        (0.0, ["wait_value", "launch"] * 10),  # unset: a wait per queue limit, here per kernel
        (2.5, ["wait_value", "launch", "launch"] * 5),  # one per 2.5 ms of work
        (0.2, ["wait_value", "launch"] * 10),  # below the queue limit: the queue limit's
    ],
)
def test_the_gate_spacing_keeps_waits_apart_when_the_queue_limit_is_small(
    harness, tmp_path, spacing_ms, expected
):
    # The latency loop takes the queue limit down to a microsecond, where every BE kernel would
    # get a wait of its own; the run's gate spacing keeps that much BE work between two waits.
    settings = SchedulerSettings(
        policy="orion", sm_count=132, queue_limit_ns=int(0.5 * MS), unknown_duration_ns=MS,
        hp_completion="gpu-write", be_gate="gpu", be_gate_spacing_ns=int(spacing_ms * MS),
    )  # fmt: skip
    sequence, waits = be_waits_and_launches(harness, tmp_path, settings)
    assert sequence == expected
    assert waits == expected.count("wait_value")


def test_a_runs_gate_spacing_is_its_decision_and_bounded():
    settings = SchedulerSettings(
        policy="orion", sm_count=1, queue_limit_ns=1, unknown_duration_ns=1, be_gate="gpu",
        be_gate_spacing_ns=100_000,
    )  # fmt: skip
    with SchedulerRun(settings) as run:
        assert run._run.be_gate_spacing_ns == 100_000
    with pytest.raises(OrionError, match="be_gate_spacing_ns must be 0"):
        SchedulerSettings(policy="orion", sm_count=1, queue_limit_ns=1, unknown_duration_ns=1,
                          be_gate_spacing_ns=10_000_001)  # fmt: skip


def test_ending_the_run_opens_every_gate(harness, tmp_path):
    run = SchedulerRun(gate_settings())
    _, be, hp_process = start_hp_kernel(harness, tmp_path, run, hp_ms=20_000)
    be_process = None
    try:
        wait_for(lambda: not run.gate_open(be), what="HP's launch to close the BE gate")
        be_process = harness.start(
            BE_SCRIPT, env=run.client_environment(be), log=tmp_path / "be.log"
        )
        wait_for(lambda: len(calls(tmp_path / "be.log", "launch")) == 10, what="BE's launches")
        # held on the (simulated) GPU behind the closed gate, for HP's 20 s kernel
        assert be_process.poll() is None and not_started(tmp_path / "be.log")
        closed_ns = time.monotonic_ns()
        run.close()  # what Ctrl-C and SIGTERM of `orion colocate` end in
        assert be_process.wait(timeout=5) == 0
        # Its work ran once the run ended (not before; HP's kernel is still running).
        be_starts = calls(tmp_path / "be.log", "exec_start")
        assert len(be_starts) == 10 and all(e.time_ns > closed_ns for e in be_starts)
    finally:
        for process in (hp_process, be_process):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(timeout=10)
        run.close()


def test_without_a_gate_keeper_hp_leaves_be_ungated(harness, tmp_path):
    # A controller killed with SIGKILL takes its keeper with it: HP launches must then stop
    # closing gates, or BE work would be held forever with nobody to open it.
    hold = hold_hp(tmp_path)
    with SchedulerRun(gate_settings()) as run:
        _, be, hp_process = start_hp_kernel(harness, tmp_path, run, keeper=False, hold=hold)
        try:
            assert not run.gate_stats()["keeper_running"]
            wait_for(lambda: run.stats()["hp"]["launches"] == 1, what="HP's launch")
            assert run.gate_open(be)
            # HP's kernel runs until released: BE's work must all run beside it.
            result = harness.run(BE_SCRIPT, env=run.client_environment(be), log=tmp_path / "be.log")
            assert result.returncode == 0, result.stderr
            hold.release()
            assert hp_process.wait(timeout=30) == 0
        finally:
            stop(hp_process)
    assert calls(tmp_path / "be.log", "exec_end")[-1].time_ns < hp_kernel_end_ns(tmp_path)


@pytest.mark.parametrize(
    ("be_class", "runs_beside"),
    [("memory", True), ("compute", False)],  # memory-bound beside a compute-bound HP kernel
)
def test_orion_opens_the_gate_beside_hp_only_for_work_that_fits(
    harness, tmp_path, be_class, runs_beside
):
    hold = hold_hp(tmp_path)
    be_log = tmp_path / "be.log"
    with SchedulerRun(gate_settings("orion")) as run:
        _, be, hp_process = start_hp_kernel(
            harness, tmp_path, run, hp_sms=100, be_sms=20, be_class=be_class, hold=hold
        )
        be_process = None
        try:
            wait_for_hp_to_close_gates(run)
            be_process = harness.start(BE_SCRIPT, env=run.client_environment(be), log=be_log)
            # HP's kernel runs until released: work that fits beside it finishes before that;
            # work that does not has all its launch calls in and waits on the GPU.
            if runs_beside:
                assert be_process.wait(timeout=30) == 0, be_process.stderr.read()
            else:
                wait_for(lambda: len(calls(be_log, "launch")) == 10, what="BE's launches")
                assert not_started(be_log)
            hold.release()
            assert be_process.wait(timeout=30) == 0, be_process.stderr.read()
            assert hp_process.wait(timeout=30) == 0
        finally:
            stop(hp_process, be_process)
    be_ends = calls(tmp_path / "be.log", "exec_end")
    assert len(be_ends) == 10
    # 20 SMs fit beside HP's 100 of 132; only the complementary class may share them.
    assert (be_ends[-1].time_ns < hp_kernel_end_ns(tmp_path)) == runs_beside


def test_without_stream_waits_held_launches_wait_in_their_thread(harness, tmp_path):
    with SchedulerRun(gate_settings()) as run:
        _, be, hp_process = start_hp_kernel(harness, tmp_path, run)
        wait_for_hp_to_close_gates(run)
        env = {**run.client_environment(be), "FAKE_NO_WAIT_VALUE": "1"}
        result = harness.run(BE_SCRIPT, env=env, log=tmp_path / "be.log")
        assert result.returncode == 0, result.stderr
        assert hp_process.wait(timeout=30) == 0
        stats = run.stats()["be"]
    assert "held launches wait in their thread" in result.stderr
    assert stats["gate_waits"] == 0
    assert stats["blocked_launches"] > 0  # gated on the CPU instead, never ungated


def test_be_gate_must_be_cpu_or_gpu():
    with pytest.raises(OrionError, match="be_gate must be one of cpu, gpu"):
        SchedulerSettings(
            policy="orion", sm_count=1, queue_limit_ns=1, unknown_duration_ns=1, be_gate="gpu-side"
        )


def test_a_be_program_that_synchronises_after_every_launch_waits_without_deadlock(
    harness, tmp_path
):
    # A synchronising BE thread blocks behind its own closed gate (on the simulated GPU) until
    # the keeper opens it once HP is done: correct order, no deadlock, the holds counted.
    with SchedulerRun(gate_settings()) as run:
        _, be, hp_process = start_hp_kernel(harness, tmp_path, run)
        wait_for(lambda: not run.gate_open(be), what="HP's launch to close the BE gate")
        result = harness.run(
            "func bek 1000 repeat 5 launch bek 8 128 0 sync 0 end",
            env=run.client_environment(be),
            log=tmp_path / "be.log",
            timeout=30,
        )
        assert result.returncode == 0, result.stderr
        assert hp_process.wait(timeout=30) == 0
        stats = run.stats()["be"]
    be_starts = calls(tmp_path / "be.log", "exec_start")
    assert len(be_starts) == 5
    assert all(start.time_ns >= hp_kernel_end_ns(tmp_path) for start in be_starts)
    assert stats["gate_waits"] == 3  # one per 2.5 ms of work, syncs or not: launches 1, 3, 5
    assert stats["blocked_launches"] == 0


@pytest.mark.parametrize("shared", [False, True], ids=["own-streams", "one-stream"])
def test_be_threads_launching_at_once_are_held_on_the_gpu_without_deadlock(
    harness, tmp_path, shared
):
    # Real BE programs launch from several threads (data loaders, pipeline stages), each on a
    # stream of its own or all on one. Their launches must still return at once, each reach the
    # GPU exactly once, wait there while HP runs and all run once it is done, with no deadlock.
    threads, per_thread = 4, 10
    stream = "s" if shared else "own"  # "own": each thread's own stream
    script = (
        f"func bek 1000 stream s plain threads {threads} "
        f"repeat {per_thread} launch bek 8 128 {stream} end sync {stream} end"
    )
    hold = hold_hp(tmp_path)
    be_log = tmp_path / "be.log"
    with SchedulerRun(gate_settings()) as run:
        _, be, hp_process = start_hp_kernel(harness, tmp_path, run, hold=hold)
        be_process = None
        try:
            wait_for(lambda: not run.gate_open(be), what="HP's launch to close the BE gate")
            # A wait call that takes 5 ms lets the other threads' launches come while it is on
            # its way, every run.
            env = {**run.client_environment(be), "FAKE_WAIT_VALUE_DELAY_US": "5000"}
            be_process = harness.start(script, env=env, log=be_log)
            # HP's kernel runs until released: every thread's launch calls must return first.
            wait_for(
                lambda: len(calls(be_log, "launch")) == threads * per_thread,
                what="every BE thread's launch calls to return while HP's kernel runs",
            )
            hold.release()
            assert be_process.wait(timeout=30) == 0, be_process.stderr.read()
            assert hp_process.wait(timeout=30) == 0
        finally:
            stop(hp_process, be_process)
        stats = run.stats()["be"]
    hp_end = hp_kernel_end_ns(tmp_path)
    launches = calls(tmp_path / "be.log", "launch")
    starts = calls(tmp_path / "be.log", "exec_start")
    # No thread stopped: every launch call reached the driver while HP's kernel ran ...
    assert launches[-1].time_ns < hp_end
    # ... and every kernel ran exactly once, on the stream it was launched on.
    launched = Counter((e.fields[1], e.fields[-1]) for e in launches)
    assert sorted(launched.values()) == (
        [threads * per_thread] if shared else [per_thread] * threads
    )
    assert Counter((e.fields[0], e.fields[-1]) for e in starts) == launched
    assert stats["reasons"]["gpu_gate"] == threads * per_thread  # every launch returned at once
    assert stats["blocked_launches"] == 0
    assert stats["gate_waits"] == len(calls(tmp_path / "be.log", "wait_value")) > 0
    # Nothing ran beside HP. On a shared stream this needs the launch that decides to put a wait
    # to mark the stream's count until its wait is on the stream: without the mark, a second
    # thread's launch counted in between went ahead of every wait and ran beside HP.
    assert not [start for start in starts if start.time_ns < hp_end]
    if not shared:
        # One thread per stream: exactly the single-threaded accounting on every stream, a wait
        # before the 1st, 3rd, 5th ... 1 ms kernel under the 2.5 ms limit.
        for handle in {key[1] for key in launched}:
            sequence = [
                e.kind
                for e in calls(tmp_path / "be.log", "launch", "wait_value")
                if e.fields[-1] == handle
            ]
            assert sequence == ["wait_value", "launch", "launch"] * (per_thread // 2)
        assert stats["gate_waits"] == threads * per_thread // 2
