"""Online profiles: the preload library learns the kernels and graphs a client's profile lacks.

Driven through the stand-in driver (tests/native/fake_cuda.cpp), whose kernels run for the
duration the launcher gives them and whose timing events are stamped when its simulated GPU
reaches them; FAKE_BLOCKS_PER_SM is what its occupancy calculator answers.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from pathlib import Path

import pytest
from native_harness import (
    MS,
    Harness,
    HeldKernel,
    build_harness,
    kernel_table,
    launch_intervals,
    read_log,
    wait_for,
)

from scheduler_core import SchedulerRun, SchedulerSettings, native_module
from scheduler_core.sharing import DEFAULT_RUN_BE_GRAPH_GATE

SM_COUNT = 132


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    try:
        return build_harness(tmp_path_factory.mktemp("fake_cuda"))
    except RuntimeError as error:
        pytest.skip(str(error))


def settings(policy: str = "orion", queue_limit_ms: float = 5.0) -> SchedulerSettings:
    return SchedulerSettings(
        policy=policy,
        sm_count=SM_COUNT,
        queue_limit_ns=int(queue_limit_ms * MS),
        unknown_duration_ns=int(queue_limit_ms * MS),
        hp_completion="gpu-write",
        be_gate="cpu",
    )


def key(name: str, grid: int, block: int) -> int:
    return native_module().kernel_key(name, (grid, 1, 1), (block, 1, 1))


def learned_by_key(run: SchedulerRun, index: int) -> dict[int, dict]:
    return {entry["key"]: entry for entry in run.learned(index)}


# Timing events on the stand-in's simulated clock: what a kernel is timed at is exactly its
# duration, however late a busy machine wakes the simulated GPU.
SIMULATED_EVENTS = {"FAKE_EVENT_CLOCK": "simulated"}


# A BE kernel named "long" is held on the stand-in's GPU until its BE process is killed (its
# release file is never made): BE has work unfinished throughout, however long a busy machine
# makes the test.
UNFINISHED = HeldKernel("long", Path("/nonexistent/release-long"))
UNFINISHED_BE = "func long 1000 launch long 1 32 0 say started sync 0"


def run_client(harness, tmp_path, run, index, script, env=None):
    log = tmp_path / f"client{index}.log"
    environment = {**run.client_environment(index), **SIMULATED_EVENTS, **(env or {})}
    result = harness.run(script, env=environment, log=log)
    assert result.returncode == 0, result.stderr
    return log


def test_a_kernel_is_learned_with_the_stand_ins_duration_and_its_sm_need(harness, tmp_path):
    # 3 ms kernels of 264 blocks, 4 of which fit on an SM: 66 SMs.
    with SchedulerRun(settings()) as run:
        be = run.add_client("be", "be")
        run.publish()
        script = "func u 3000 repeat 12 launch u 264 128 0 end sync 0"
        run_client(harness, tmp_path, run, be, script, {"FAKE_BLOCKS_PER_SM": "4"})
        entry = learned_by_key(run, be)[key("u", 264, 128)]
        stats = run.client_stats(be)
    assert entry["name"] == "u"
    assert not entry["graph"]
    assert (entry["grid"], entry["block"]) == ((264, 1, 1), (128, 1, 1))
    assert entry["blocks_per_sm"] == 4
    assert entry["sm_needed"] == 66
    assert entry["launches"] == 12
    assert entry["samples"] >= 5
    # The stand-in's kernels run 3 ms; its events time them exactly (SIMULATED_EVENTS).
    assert entry["duration_ns"] == pytest.approx(3 * MS, rel=1e-3)
    # Known once enough samples were in: the later launches are gated as learned work.
    assert stats["online_launches"] >= 1
    assert stats["online_launches"] + stats["offline_launches"] <= 12
    assert stats["offline_launches"] == 0
    assert stats["online_ns"] == pytest.approx(stats["online_launches"] * 3 * MS, rel=1e-3)


def test_timing_never_breaks_a_graph_capture_of_the_program(harness, tmp_path):
    # PyTorch captures graphs in CUDA's global mode, where an event query from any thread of the
    # process invalidates the capture: the thread reading timed launches opts out (relaxed mode).
    # The reader thread starts with the first timed launch; a program that ends before the
    # thread first runs (a loaded machine) reads nothing, so the program runs again until the
    # thread has read something, a few times at most.
    for _ in range(3):
        (tmp_path / "client0.log").unlink(missing_ok=True)  # the stand-in appends to its log
        with SchedulerRun(settings()) as run:
            be = run.add_client("be", "be")
            run.publish()
            log = run_client(
                harness, tmp_path, run, be, "func u 1000 repeat 20 launch u 8 64 0 end sync 0"
            )
        events = read_log(log)
        queries = [e for e in events if e.kind == "event_elapsed"]
        if queries:
            break
    modes = [e for e in events if e.kind == "capture_mode"]
    assert queries, "the reader thread never ran in three runs of the program"
    assert [e.fields for e in modes] == [("2",)]  # CU_STREAM_CAPTURE_MODE_RELAXED, once
    assert modes[0].time_ns < queries[0].time_ns


def test_without_an_occupancy_answer_a_learned_kernel_needs_every_sm(harness, tmp_path):
    with SchedulerRun(settings()) as run:
        be = run.add_client("be", "be")
        run.publish()
        run_client(harness, tmp_path, run, be, "func u 1000 repeat 6 launch u 8 64 0 end sync 0")
        entry = learned_by_key(run, be)[key("u", 8, 64)]
    assert entry["blocks_per_sm"] == 0
    assert entry["sm_needed"] == SM_COUNT


def test_an_offline_entry_wins_over_learning(harness, tmp_path):
    # The profile says 7 ms; the kernel runs 1 ms. It is never learned: the profile is used.
    with SchedulerRun(settings()) as run:
        be = run.add_client("be", "be", kernel_table(("k", 8, 64, 8, "memory", 7)))
        run.publish()
        run_client(harness, tmp_path, run, be, "func k 1000 repeat 10 launch k 8 64 0 end sync 0")
        learned = learned_by_key(run, be)
        stats = run.client_stats(be)
    assert key("k", 8, 64) not in learned
    assert stats["offline_launches"] == 10
    assert stats["offline_ns"] == 10 * 7 * MS
    assert stats["online_launches"] == 0


def test_learned_durations_replace_the_unknown_kernel_bound(harness, tmp_path):
    # Queue limit 5 ms; an unknown kernel counts as 5 ms, so it waits for an empty queue. Once
    # learned at 1 ms, several are let onto the GPU at once.
    with SchedulerRun(settings(queue_limit_ms=5.0)) as run:
        be = run.add_client("be", "be")
        run.publish()
        log = run_client(
            harness, tmp_path, run, be, "func u 1000 repeat 60 launch u 8 64 0 end sync 0"
        )
        stats = run.client_stats(be)
    intervals = launch_intervals(read_log(log))
    assert len(intervals) == 60

    def queued_at(i: int) -> int:
        # Earlier launches whose kernel ended after launch i's call logged: their completions
        # (written by the GPU after the kernel ends) were not in when launch i was decided, so
        # they were queued then, by the order of events alone, however late a busy machine ran
        # either. (A launch decided after one's completion always logs after its end.)
        launched = intervals[i].launched_ns
        return sum(1 for j in intervals[:i] if j.finished_ns > launched)

    assert max(queued_at(i) for i in range(5)) == 0  # unknown: one at a time
    assert max(queued_at(i) for i in range(20, 60)) >= 2  # learned: the queue fills
    assert stats["reasons"]["queue_full"] >= 1


GRAPH = "func ga 2000 func gb 1000 graph_new A graph_node A ga 40 128 graph_node A gb 600 64"


def test_a_graph_is_learned_from_its_nodes_and_its_launches(harness, tmp_path):
    with SchedulerRun(settings()) as run:
        be = run.add_client("be", "be")
        run.publish()
        script = f"{GRAPH} graph_inst A flags repeat 8 graph_run A 0 end sync 0"
        run_client(harness, tmp_path, run, be, script, {"FAKE_BLOCKS_PER_SM": "2"})
        learned = learned_by_key(run, be)
        stats = run.client_stats(be)
    node_keys = [key("ga", 40, 128), key("gb", 600, 64)]
    graph = learned[native_module().graph_key(node_keys)]
    assert graph["graph"]
    assert sorted(graph["nodes"]) == sorted(node_keys)
    assert graph["sm_needed"] == SM_COUNT  # gb: 600 blocks, 2 per SM -> 300, capped
    assert learned[key("ga", 40, 128)]["sm_needed"] == 20
    assert graph["launches"] == 8
    # its two kernels back to back, timed exactly (SIMULATED_EVENTS)
    assert graph["duration_ns"] == pytest.approx(3 * MS, rel=1e-3)
    assert stats["online_launches"] >= 1


def test_an_hp_kernel_timed_beside_be_work_is_not_learned_from(harness, tmp_path):
    with SchedulerRun(settings()) as run:
        hp = run.add_client("hp", "hp")
        be = run.add_client("be", "be")
        run.publish()
        be_process = harness.start(
            "func long 1000 launch long 1 32 0 say launched sync 0",
            env={**run.client_environment(be), **UNFINISHED.env()},
            log=tmp_path / "be.log",
        )
        try:
            assert be_process.stdout.readline().strip() == "launched"
            # The BE kernel runs until BE is killed: every HP sample now is beside BE work, and no
            # sampling hold can make one clean (the kernel is on the GPU already).
            hp_script = "func h 1000 repeat 80 launch h 8 64 0 end sync 0"
            run_client(harness, tmp_path, run, hp, hp_script)
            beside = learned_by_key(run, hp)[key("h", 8, 64)]
            timed_beside = run.client_stats(hp)["sampled_launches"]
            holds = run.client_stats(hp)["sampling_holds"]
        finally:
            be_process.kill()
            be_process.wait(timeout=10)
    assert timed_beside >= 5  # timed (for the interference figure) ...
    assert beside["samples"] == 0  # ... but not learned from
    assert beside["duration_ns"] == 0
    # What one kernel may cost BE is bounded: only its first 64 launches asked for a hold.
    assert holds == 64


def test_an_hp_client_alone_learns_and_measures_its_interference(harness, tmp_path):
    # Profiled at 0.5 ms, the kernel runs 1 ms: the HP client's work runs about 2x slower than
    # its profile says (what `orion status` shows as interference).
    with SchedulerRun(settings()) as run:
        hp = run.add_client("hp", "hp", kernel_table(("slow", 8, 64, 8, "compute", 0.5)))
        run.publish()
        script = "func slow 1000 func h 1000 repeat 8 launch h 4 64 0 end "
        script += "repeat 130 launch slow 8 64 0 end sync 0"
        run_client(harness, tmp_path, run, hp, script)
        learned = learned_by_key(run, hp)
        stats = run.client_stats(hp)
    assert learned[key("h", 4, 64)]["samples"] >= 5  # alone: learned from
    assert stats["sampled_expected_ns"] > 0
    # 1 ms against 0.5 ms, timed exactly (SIMULATED_EVENTS)
    assert stats["sampled_ns"] / stats["sampled_expected_ns"] == pytest.approx(2.0, rel=1e-3)


def test_a_saved_online_profile_reads_back_and_gates_as_offline(harness, tmp_path):
    from orion_daemon.slots import add_profiled_client
    from postprocess.learned_profile import learned_profile
    from postprocess.profile_format import read_profile, write_profile

    script = f"func u 2000 {GRAPH} graph_inst A flags repeat 8 launch u 8 64 0 graph_run A 0 end"
    script += " sync 0"
    env = {"FAKE_BLOCKS_PER_SM": "2"}
    with SchedulerRun(settings()) as run:
        be = run.add_client("be", "be")
        run.publish()
        run_client(harness, tmp_path, run, be, script, env)
        entries = run.learned(be)
    profile = learned_profile(
        entries, client="be", gpu_name="stand-in", sm_count=SM_COUNT, command=["train"]
    )
    path = write_profile(profile, tmp_path / "learned.csv")
    saved = read_profile(path)
    assert saved.metadata["source"] == "online"
    assert saved.metadata["command"] == ["train"]
    assert saved.metadata["cuda_graph"] is True
    eager = saved.kernels[saved.kernels["graph"].isna()]
    assert list(eager["kernel_name"]) == ["u"]
    assert set(saved.kernels["kernel_class"]) == {"unknown"}
    # Gated from the saved file alone: every launch now counts as profiled offline.
    with SchedulerRun(settings()) as run:
        be = add_profiled_client(run, "be", "be", saved)
        run.publish()
        run_client(harness, tmp_path, run, be, script, env)
        stats = run.client_stats(be)
        relearned = run.learned(be)
    assert stats["offline_launches"] == 16  # 8 kernels and 8 graphs
    assert stats["unknown_graph_launches"] == 0
    assert not [e for e in relearned if e["launches"]]  # nothing launched needed learning


def executions(log) -> list[tuple[int, int]]:
    """(start, end) of each kernel the simulated GPU ran for one client, in order."""
    events = read_log(log)
    starts = [e.time_ns for e in events if e.kind == "exec_start"]
    ends = [e.time_ns for e in events if e.kind == "exec_end"]
    return list(zip(starts, ends, strict=False))


# A BE client that never idles: 2-ms kernels, 20 to a step, a synchronisation between steps (a
# training loop), far more steps than the test lasts.
NEVER_IDLE_BE = "func b 2000 say started repeat 100000 repeat 20 launch b 8 64 0 end sync 0 end"


def start_never_idle_be(harness, tmp_path, run, be):
    """NEVER_IDLE_BE as client `be` of `run` (its log be.log), once it has work on the GPU."""
    process = harness.start(NEVER_IDLE_BE, env=run.client_environment(be), log=tmp_path / "be.log")
    try:
        assert process.stdout.readline().strip() == "started"
        wait_for(lambda: run.client_stats(be)["tracked_launches"] >= 20, what="BE work")
    except BaseException:
        process.kill()
        process.wait(timeout=10)
        raise
    return process


@pytest.mark.parametrize("be_gate", ["gpu", "cpu"])
def test_an_hp_joining_beside_be_work_that_never_stops_is_learned(harness, tmp_path, be_gate):
    # Before sampling holds an HP sample counted only when no BE work was unfinished, so beside
    # this BE client the HP kernel was never learned. Now its first launches ask BE to stand aside
    # (no BE gate opens, every BE launch waits behind a gate of its own) and later ones, timed
    # once nothing of BE can run, are learned from.
    # A 10-ms bound: BE keeps several 2-ms kernels on the GPU, so it has unfinished work whenever
    # the HP launches (with a tighter one a CPU-gated BE runs a kernel at a time, with gaps).
    with SchedulerRun(dataclasses.replace(settings(queue_limit_ms=10.0), be_gate=be_gate)) as run:
        hp = run.add_client("hp", "hp")
        be = run.add_client("be", "be")
        run.publish()
        be_process = start_never_idle_be(harness, tmp_path, run, be)
        try:
            # HP requests: a 1-ms kernel each, waited for.
            hp_script = "func h 1000 repeat 30 launch h 8 64 0 sync 0 end"
            run_client(harness, tmp_path, run, hp, hp_script)
            entry = learned_by_key(run, hp)[key("h", 8, 64)]
            hp_stats = run.client_stats(hp)
            be_launches_after_hp = run.client_stats(be)["tracked_launches"]
            # BE runs on once the HP is done: the hold ends by itself.
            wait_for(
                lambda: run.client_stats(be)["tracked_launches"] > be_launches_after_hp + 40,
                what="BE to run on after the hold",
            )
            be_stats = run.client_stats(be)
            keeper = run._run.gate_stats()
            assert be_process.poll() is None  # BE never stopped of its own accord
        finally:
            be_process.kill()
            be_process.wait(timeout=10)
    assert entry["samples"] >= 5
    assert entry["duration_ns"] >= MS
    if be_gate == "gpu":
        # BE's launches queue on the GPU behind their gate waits, so it has unfinished work
        # whenever the HP comes, however its process is scheduled ...
        assert hp_stats["sampling_holds"] >= 1
        assert hp_stats["held_samples"] >= 5  # ... the samples learned from were taken in a hold
        assert keeper["hold_passes"] >= 1  # ... and the keeper kept the gates shut
    elif hp_stats["sampling_holds"] >= 1:
        # A CPU-gated BE launches from its thread a kernel at a time; on a loaded machine that
        # thread can be off the CPU long enough for BE's work to drain, and then the HP's samples
        # are alone without a hold. Where the HP did ask, BE's launches waited in their thread.
        assert be_stats["reasons"]["sampling_hold"] >= 1
    # Some HP kernels ran while no BE kernel did, and they are what was learned from.
    be_runs = executions(tmp_path / "be.log")
    alone = [
        (start, end)
        for start, end in executions(tmp_path / "client0.log")
        if not any(b_start < end and start < b_end for b_start, b_end in be_runs)
    ]
    assert len(alone) >= 5


# A BE client replaying a graph back to back (as XLA does each training step): ten 2-ms kernels,
# five replays to a step, a synchronisation between steps.
NEVER_IDLE_GRAPH_BE = (
    "func b 2000 graph_new G " + "graph_node G b 8 64 " * 10 + "graph_inst G flags say started "
    "repeat 100000 repeat 5 graph_run G 0 end sync 0 end"
)


def test_an_hp_joining_beside_be_graphs_that_never_stop_is_learned_under_the_default(
    harness, tmp_path
):
    # Gated inside (the MPS default before), a BE graph past its launch's wait read as running
    # to the HP's holds even while it stood at a wait inside it: beside a JAX trainer on an H200
    # the HP took no held sample in 4,150 holds and stayed unknown. Split into segments (every
    # policy's default now), each held segment waits at a gate of its own, so a hold drains BE.
    run_settings = dataclasses.replace(
        settings(queue_limit_ms=10.0), be_gate="gpu", be_graph_gate=DEFAULT_RUN_BE_GRAPH_GATE
    )
    with SchedulerRun(run_settings) as run:
        hp = run.add_client("hp", "hp")
        be = run.add_client("be", "be")
        run.publish()
        be_process = harness.start(
            NEVER_IDLE_GRAPH_BE, env=run.client_environment(be), log=tmp_path / "be.log"
        )
        try:
            assert be_process.stdout.readline().strip() == "started"
            wait_for(lambda: run.client_stats(be)["graph_launches"] >= 3, what="BE graphs")
            run_client(
                harness, tmp_path, run, hp, "func h 1000 repeat 30 launch h 8 64 0 sync 0 end"
            )
            entry = learned_by_key(run, hp)[key("h", 8, 64)]
            hp_stats = run.client_stats(hp)
            be_stats = run.client_stats(be)
            assert be_process.poll() is None  # BE never stopped of its own accord
        finally:
            be_process.kill()
            be_process.wait(timeout=10)
    assert be_stats["graphs_segmented"] == 1 and be_stats["graphs_ungated"] == 0
    assert entry["samples"] >= 5
    assert entry["duration_ns"] >= MS
    assert hp_stats["held_samples"] >= 5  # learned in holds, BE's segments waiting at gates


def hp_requests_felt(
    harness, tmp_path, requests, gap_us, be_kernel=None, be_script=None, kernels_per_request=1
):
    """An HP client's requests (`kernels_per_request` 0.5-ms kernels each, launched back to back
    and waited for, `gap_us` apart), each of which waits 1 ms for the stand-in's GPU before its
    work starts (FAKE_RESUME_DELAY_US), beside a BE client running `be_script` (its first line
    out says it started; a kernel of it named "long" never ends, UNFINISHED), or idle. Returns
    the HP's statistics; its stand-in log is client0.log."""
    with SchedulerRun(settings()) as run:
        hp = run.add_client("hp", "hp", kernel_table(("h", 8, 64, 8, "compute", 0.5)))
        be = run.add_client("be", "be", kernel_table(be_kernel) if be_kernel else None)
        run.publish()
        be_process = None
        if be_script is not None:
            be_process = harness.start(
                be_script,
                env={**run.client_environment(be), **SIMULATED_EVENTS, **UNFINISHED.env()},
                log=tmp_path / "be.log",
            )
        try:
            if be_process is not None:
                assert be_process.stdout.readline().strip() == "started"
            request = f"repeat {kernels_per_request} launch h 8 64 0 end sync 0"
            script = f"func h 500 repeat {requests} {request} sleep {gap_us} end"
            run_client(harness, tmp_path, run, hp, script, {"FAKE_RESUME_DELAY_US": "1000"})
            return run.client_stats(hp)
        finally:
            if be_process is not None:
                be_process.kill()
                be_process.wait(timeout=10)


def possible_request_starts(events, kernels_per_request: int, gap_us: int) -> int:
    """How many of the launches of hp_requests_felt's HP (client0.log) the library may count as
    starting a request (a launch call 1 ms or more after the call before it, and the first):
    each request's first, and one inside a request only where the stand-in's log leaves room
    for a gap that long, by the order of events alone. A launch call comes after the previous
    call's "launch" line and before its own; a request's first call comes `gap_us` after the
    synchronisation that ended the request before it returned, so after its "stream_sync"
    lines (only the program's thread synchronises streams)."""
    launched = [e.time_ns for e in events if e.kind == "launch"]
    syncs = [e.time_ns for e in events if e.kind == "stream_sync"]
    possible = 0
    for index, launch_ns in enumerate(launched):
        position = index % kernels_per_request
        if position == 0:
            possible += 1  # gap_us (over 1 ms) after the request before it, or the first
            continue
        if position >= 2:
            previous_call_after = launched[index - 2]
        else:
            before = [sync for sync in syncs if sync < launched[index - 1]]
            if not before:  # the first request's second launch: nothing bounds the gap
                possible += 1
                continue
            previous_call_after = max(before) + gap_us * 1000
        if launch_ns - previous_call_after >= MS:
            possible += 1
    return possible


def test_every_request_an_hp_starts_is_counted_and_gives_its_request_shape(harness, tmp_path):
    # Requests of eight profiled 0.5-ms kernels launched back to back, 2 ms apart: each request's
    # first launch (a launch after 1 ms without one, and the very first) starts a request, timed
    # or not, so `orion status` can say how much work a request is (what suits --hp-context).
    from orion_daemon.status import request_shape
    from scheduler_core.profile_sources import profile_sources

    requests, per_request = 40, 8
    stats = hp_requests_felt(
        harness, tmp_path, requests, gap_us=2000, kernels_per_request=per_request
    )
    # A launch inside a request counts only if the machine stalled the program for 1 ms there:
    # where the stand-in's log leaves room for such a stall.
    events = read_log(tmp_path / "client0.log")
    counted = stats["hp_requests"]
    assert requests <= counted <= possible_request_starts(events, per_request, gap_us=2000)
    # The shape is those requests' share of the launches and of their profiled GPU time (every
    # launch is of the 0.5-ms kernel profiled), whatever the count.
    launches = requests * per_request
    assert (stats["launches"], stats["offline_launches"]) == (launches, launches)
    assert stats["offline_ns"] == launches * MS // 2
    shape = request_shape(stats, profile_sources(stats))
    assert shape == {
        "requests": counted,
        "launches_per_request": round(launches / counted, 2),
        "graphs_per_request": 0.0,
        "gpu_ms_per_request": round(launches * 0.5 / counted, 4),
    }


@pytest.mark.parametrize("be_gap_us", [150, 2000])
def test_a_wait_near_be_work_is_not_taken_for_the_hps_own_overhead(harness, tmp_path, be_gap_us):
    # A BE client launches a short kernel every `be_gap_us`: at most HP calls BE has nothing
    # unfinished, yet it launched shortly before the call (a BE context still resident must
    # switch out) or launches while the HP waits. Such a launch did not run alone, so its wait
    # must not become the HP's "overhead alone": on an H200 that made the felt slowdown read
    # 0.57-0.80 while the HP's p99 was 1.5-2.5x of alone, and the latency loop let BE run.
    stats = hp_requests_felt(
        harness,
        tmp_path,
        requests=640,
        gap_us=1000,
        be_kernel=("b", 1, 32, 1, "memory", 0.05),
        be_script=f"func b 50 say started repeat 10000000 launch b 1 32 0 sleep {be_gap_us} end",
    )
    assert stats["felt_samples"] >= 5
    # A busy machine can keep BE's thread off the CPU past the quiet spell, and then an HP launch
    # does run alone by the rule: the logs bound how many may count so.
    may_be_alone = hp_launches_without_be_near(
        read_log(tmp_path / "client0.log"), read_log(tmp_path / "be.log")
    )
    assert stats["felt_alone_samples"] <= may_be_alone
    if may_be_alone == 0:  # BE launched near every HP launch: none ran alone
        assert stats["felt_ns"] / stats["felt_expected_ns"] >= 2.0
        # nor does it count in the tail of launches alone, the baseline a shared tail is read
        # against
        assert stats["felt_alone_samples"] == 0
        assert set(stats["felt_alone_slower"]) == {0}


def hp_launches_without_be_near(hp_events, be_events) -> int:
    """How many HP launches may have run alone by the sampler's rule (no BE launch from
    ``kAloneQuietNs`` before the call to the launch's end), by the stand-in's logs: a launch
    counts unless a BE launch certainly fell in that window. An HP call comes before its own
    "launch" line and its end after its kernel's "exec_end"; a BE launch is timed by the library
    between its thread's previous "launch" line and its own, so it is certainly in the window
    when both lines are."""
    quiet_ns = 5 * MS  # LaunchSampler::kAloneQuietNs
    be_launched = sorted(e.time_ns for e in be_events if e.kind == "launch")
    alone = 0
    for kernel in launch_intervals(hp_events):
        start, end = kernel.launched_ns - quiet_ns, kernel.finished_ns
        first = bisect.bisect_left(be_launched, start)  # the first BE line in the window
        if not (first + 1 < len(be_launched) and be_launched[first + 1] <= end):
            alone += 1
    return alone


def test_an_hp_alone_learns_its_own_wait_as_overhead(harness, tmp_path):
    # No BE work at all: the 1-ms wait is the HP's own (a GPU waking up, say), so it is what
    # "alone" adds to its launches and its felt slowdown stays near 1.
    stats = hp_requests_felt(harness, tmp_path, requests=640, gap_us=1000)
    assert stats["felt_samples"] >= 5
    # What a felt launch is expected to take alone is its 0.5-ms kernel and the overhead learned
    # from its launches alone: each of those took at least the stand-in's 1-ms wait and its
    # kernel (sleeps, which a busy machine only lengthens), so every expectation is 1.5 ms or
    # more. Without the wait learned as the HP's own it would be 0.5 ms (the slowdown near 3x).
    assert stats["felt_expected_ns"] >= stats["felt_samples"] * 3 * MS // 2
    # Every felt launch ran alone, so the tail alone is the whole tail: the HP's own scatter.
    assert stats["felt_alone_samples"] == stats["felt_samples"]
    assert stats["felt_alone_slower"] == stats["felt_slower"]


def test_an_hp_launch_that_waits_for_the_gpu_is_slower_as_felt_than_as_gpu_time(harness, tmp_path):
    # Each HP request finds the stand-in's GPU held elsewhere for 1 ms before its work starts,
    # as a time-sliced GPU keeps a BE context until it drains and switches (the BE client has a
    # kernel unfinished throughout, UNFINISHED). The GPU time of its launches reads as alone (what
    # `interference` compared, 1.00 on an H100 while the HP's p99 was 2.18x); the time from the
    # launch call to the end of its work reads about 3x.
    stats = hp_requests_felt(
        harness,
        tmp_path,
        requests=320,
        gap_us=2000,
        be_script=UNFINISHED_BE,
    )
    assert stats["felt_samples"] >= 4  # one in 64 launches, each finding its own queue empty
    # The GPU time of its launches: exactly alone (SIMULATED_EVENTS: the 1-ms wait is not in it)
    assert stats["sampled_ns"] / stats["sampled_expected_ns"] == pytest.approx(1.0, rel=1e-3)
    assert stats["felt_ns"] / stats["felt_expected_ns"] >= 2.5
    # Its tail, counted per ratio (1.05x to 8x): every sampled request here waited for the GPU,
    # so at least the 2x count has them; each count includes the ones above it.
    slower = stats["felt_slower"]
    ratios = native_module().FELT_TAIL_RATIOS
    assert stats["felt_samples"] >= slower[0]
    assert all(a >= b for a, b in itertools.pairwise(slower))
    assert slower[ratios.index(2.0)] >= 1


def test_a_requests_first_launch_is_timed_as_felt_apart_from_the_rest(harness, tmp_path):
    # An eager HP: requests of eight 0.5-ms kernels launched back to back, 2 ms apart, each
    # finding the stand-in's GPU held elsewhere for 1 ms before its first kernel (as a BE context
    # left resident between requests makes it switch; the BE client has a kernel unfinished
    # throughout, UNFINISHED). One felt launch in 64 is never such a first launch here, so the
    # felt figures miss the wait; each request's start is timed apart.
    requests = 120
    stats = hp_requests_felt(
        harness,
        tmp_path,
        requests=requests,
        gap_us=2000,
        be_script=UNFINISHED_BE,
        kernels_per_request=8,
    )
    # The first request has no launch before it: not a start. The felt timer is free at each
    # other start (the previous request ended 2 ms before), so nearly every one is timed. (A
    # launch inside a request starts one only where the machine stalled the program for 1 ms.)
    starts = possible_request_starts(read_log(tmp_path / "client0.log"), 8, gap_us=2000)
    assert requests // 2 <= stats["start_felt_samples"] <= starts - 1
    assert stats["start_felt_ns"] / stats["start_felt_expected_ns"] >= 2.5
    slower = stats["start_felt_slower"]
    assert slower[native_module().FELT_TAIL_RATIOS.index(2.0)] >= requests // 2
    # The figures the latency loop reads are sampled as before: one launch in 64 at most, and
    # the request starts timed apart are not among them.
    assert stats["felt_samples"] <= requests * 8 // 64
    assert stats["sampled_launches"] <= requests * 8 // 64


def test_an_hps_requests_are_timed_whole_against_its_requests_alone(harness, tmp_path):
    # Requests of two kernels and a synchronisation, 2 ms apart: first alone, then beside a BE
    # client with a kernel unfinished throughout (UNFINISHED) and with kernels ten times as long
    # (the stand-in gives each process a GPU of its own, so what BE does to a request is written
    # into the script). Each timed request is compared with the median of the requests alone
    # before it: beside BE they read ten times slower, and none of them counts as alone.
    per_phase = 40
    with SchedulerRun(settings()) as run:
        hp = run.add_client("hp", "hp", kernel_table(("h", 8, 64, 8, "compute", 0.5)))
        be = run.add_client("be", "be", None)
        run.publish()
        be_go, hp_go = tmp_path / "be-go", tmp_path / "hp-go"
        be_process = harness.start(
            f"await {be_go} {UNFINISHED_BE}",
            env={**run.client_environment(be), **SIMULATED_EVENTS, **UNFINISHED.env()},
            log=tmp_path / "be.log",
        )

        def requests(kernel: str) -> str:
            body = f"launch {kernel} 8 64 0 launch {kernel} 8 64 0 sync 0 sleep 2000"
            return f"repeat {per_phase} {body} end"

        hp_process = harness.start(
            f"func h 500 func g 5000 {requests('h')} say alone await {hp_go} {requests('g')}",
            env={**run.client_environment(hp), **SIMULATED_EVENTS},
            log=tmp_path / "client0.log",
        )
        try:
            assert hp_process.stdout.readline().strip() == "alone", hp_process.stderr.read()
            be_go.touch()
            assert be_process.stdout.readline().strip() == "started"
            hp_go.touch()
            assert hp_process.wait(timeout=300) == 0, hp_process.stderr.read()
            stats = run.client_stats(hp)
        finally:
            for process in (hp_process, be_process):
                process.kill()
                process.wait(timeout=10)
    # One request at a time is timed, whenever the timer is free at a request's start.
    timed = stats["requests_timed"]
    # (A launch inside a request starts one where a busy machine stalled the program for 1 ms.)
    assert 10 <= timed <= stats["hp_requests"] and stats["hp_requests"] >= 2 * per_phase
    # The first eight alone (RequestTimer::kAloneRequests) make the reference, and are compared
    # with nothing; every later one is compared with the median of the latest eight alone.
    window = 8
    assert stats["request_samples"] == timed - window
    alone = stats["request_alone_samples"]
    beside = timed - window - alone
    assert alone <= per_phase - window and alone >= 4 and beside >= 5
    # A request alone took its two 0.5-ms kernels at least; one beside BE its two 5-ms kernels.
    # Against the alone median (over kAloneRequests), each one beside BE is slower than 2x
    # unless the machine slowed the requests alone by more than 5 ms each.
    ratios = native_module().FELT_TAIL_RATIOS
    slower, alone_slower = stats["request_slower"], stats["request_alone_slower"]
    assert slower[ratios.index(2.0)] - alone_slower[ratios.index(2.0)] >= beside - 1
    assert stats["request_ns"] >= alone * MS + beside * 10 * MS
    # The requests alone are the tail's baseline, counted apart (and also in the whole tail).
    assert all(a <= b for a, b in zip(alone_slower, slower, strict=True))


def test_requests_never_alone_are_timed_but_not_compared(harness, tmp_path):
    # An HP whose BE neighbour has work unfinished from before its first request: no request
    # ever ran alone, so there is nothing to compare with and none is counted as a sample (the
    # status says the figure is unknown rather than a ratio against nothing).
    stats = hp_requests_felt(harness, tmp_path, requests=40, gap_us=2000, be_script=UNFINISHED_BE)
    assert stats["requests_timed"] >= 1
    assert stats["request_samples"] == stats["request_alone_samples"] == 0
    assert stats["request_ns"] == stats["request_expected_ns"] == 0


@pytest.mark.parametrize("be_gate", ["gpu", "cpu"])
def test_an_hp_joining_beside_be_that_never_stops_gets_requests_alone_from_holds(
    harness, tmp_path, be_gate
):
    # BE keeps several 2-ms kernels on the GPU from before the HP's first request, so no request
    # would ever find BE idle. While the timer lacks requests alone, the HP's launches ask BE to
    # stand aside (sampling holds), and requests that start with nothing of BE able to run and
    # end inside the hold are its requests alone: its later requests are compared with them.
    with SchedulerRun(dataclasses.replace(settings(queue_limit_ms=10.0), be_gate=be_gate)) as run:
        hp = run.add_client("hp", "hp", kernel_table(("h", 8, 64, 8, "compute", 1.0)))
        be = run.add_client("be", "be")
        run.publish()
        be_process = start_never_idle_be(harness, tmp_path, run, be)
        try:
            hp_script = "func h 1000 repeat 60 launch h 8 64 0 sync 0 sleep 2000 end"
            run_client(harness, tmp_path, run, hp, hp_script)
            stats = run.client_stats(hp)
            assert be_process.poll() is None  # BE never stopped of its own accord
        finally:
            be_process.kill()
            be_process.wait(timeout=10)
    assert stats["request_holds"] >= 1
    assert stats["request_alone_samples"] >= 1
    assert stats["request_samples"] >= stats["request_alone_samples"]
    # Each request alone took its 1-ms kernel at least: the reference is no shorter.
    assert stats["request_expected_ns"] >= stats["request_samples"] * MS


def test_a_request_of_steps_waited_for_one_by_one_is_one_request(harness, tmp_path):
    # A decoder's request: four 1.5-ms steps, each waited for before the next is launched (a
    # token at a time), so its launch calls are 1.5 ms apart or more; 5 ms between requests.
    # A request ends once the HP has launched nothing for 1 ms after its work ended (its wait
    # for the stream returned), not 1 ms after its last launch call: counted so, its steps
    # would be requests of their own (on an H200 a decoder's requests beside BE read 0.1-0.2x of
    # its requests alone, cut into steps whose GPU waits had grown past 1 ms).
    requests = 20
    with SchedulerRun(settings()) as run:
        hp = run.add_client("hp", "hp", kernel_table(("h", 8, 64, 8, "compute", 1.5)))
        run.add_client("be", "be")
        run.publish()
        step = "launch h 8 64 0 sync 0"
        script = f"func h 1500 repeat {requests} repeat 4 {step} end sleep 5000 end"
        run_client(harness, tmp_path, run, hp, script)
        stats = run.client_stats(hp)
    # (A request's step starts one of its own only where the machine stalled the program for
    # 1 ms between a step's end and the next step's launch.)
    assert requests <= stats["hp_requests"] <= requests + 4
    assert stats["requests_timed"] >= requests // 2
    # Each timed request is its four steps: 6 ms at least, the reference too.
    assert stats["request_ns"] >= stats["request_samples"] * 6 * MS
    assert stats["request_expected_ns"] >= stats["request_samples"] * 6 * MS


def test_requests_that_queue_are_compared_per_launch_with_the_requests_alone(harness, tmp_path):
    # A service whose requests queue: after 12 requests of two 0.5-ms kernels 3 ms apart, the
    # next ones come two at a time, the second's first launch right after the first's wait,
    # so the cut (1 ms without a launch after the work ended) takes each pair for one request
    # (on an H200 the decoder's timed requests held 53-57 graphs where one holds 32). All run
    # alone, so the service is no slower: compared per launch with the requests alone, a pair
    # reads as fast as one request alone, not twice as slow.
    single, pairs = 12, 16
    with SchedulerRun(settings()) as run:
        hp = run.add_client("hp", "hp", kernel_table(("h", 8, 64, 8, "compute", 0.5)))
        run.add_client("be", "be")
        run.publish()
        one = "launch h 8 64 0 launch h 8 64 0 sync 0"
        script = (
            f"func h 500 repeat {single} {one} sleep 3000 end "
            f"repeat {pairs} {one} {one} sleep 3000 end"
        )
        run_client(harness, tmp_path, run, hp, script)
        stats = run.client_stats(hp)
    # (A busy machine that stalls the program for 1 ms between a pair's two halves cuts it.)
    assert single + pairs <= stats["hp_requests"] <= single + 2 * pairs
    assert stats["request_samples"] >= pairs // 2
    assert stats["request_samples"] == stats["request_alone_samples"]
    # Each timed request is compared with as many launches of the reference as it made: the
    # pairs' time against twice a single request's, so the mean stays near 1 (read whole, a
    # pair would be 2x of the median request, and the mean of four singles and 16 pairs 1.8x).
    assert stats["request_ns"] < 1.5 * stats["request_expected_ns"]


def test_an_eager_request_is_timed_whole_with_few_event_records(harness, tmp_path):
    # An eager service's request: 40 kernels of 50 us launched back to back, then waited for.
    # Only a launch 1 ms or more after the last one marked records the request timer's event
    # (RequestTimer::kMarkSpacingNs), so a request pays for about one event record, not 40,
    # and its end is still the end of its last kernel: the program's wait for it.
    requests, per_request = 30, 40
    with SchedulerRun(settings()) as run:
        hp = run.add_client("hp", "hp", kernel_table(("h", 8, 64, 8, "compute", 0.05)))
        run.add_client("be", "be")
        run.publish()
        # On a stream of its own: the legacy stream's launches are moved to a priority stream
        # with event records of their own (stream_routing.cpp).
        script = (
            f"func h 50 stream s plain repeat {requests} repeat {per_request} launch h 8 64 s end "
            "sync s sleep 3000 end"
        )
        log = run_client(harness, tmp_path, run, hp, script)
        stats = run.client_stats(hp)
    assert stats["requests_timed"] >= requests // 2
    assert stats["request_samples"] >= 1
    # Each timed request ran its 40 kernels one after another: 2 ms at least, from its first
    # call to the return of the wait for its last.
    assert stats["request_ns"] >= stats["request_samples"] * 2 * MS
    # Event records: the launch sampler's pairs (learning, one launch in 64) and the timer's
    # marks; a mark on every launch of every timed request would be 40 a request.
    records = sum(1 for e in read_log(log) if e.kind == "event_record")
    launches = requests * per_request
    assert records <= 2 * (16 + launches // 16) + stats["requests_timed"] * 4
    assert records < stats["requests_timed"] * per_request


def test_every_counter_the_daemon_samples_is_one_the_library_keeps():
    # The daemon reads its samples' counters from the library's statistics by name
    # (ClientSample.from_stats): a counter renamed on one side would read 0 for good.
    from orion_daemon.status import ClientSample

    with SchedulerRun(settings()) as run:
        hp = run.add_client("hp", "hp")
        run.publish()
        stats = run.client_stats(hp)
    counters = {f.name for f in dataclasses.fields(ClientSample)} - {"time_s"}
    assert counters <= set(stats)
    sample = ClientSample.from_stats(1.0, stats)
    tails = [c for c in counters if isinstance(stats[c], list)]
    assert tails and all(getattr(sample, c) == tuple(stats[c]) for c in tails)
    assert all(getattr(sample, c) == stats[c] for c in counters - set(tails))


def test_a_request_whose_first_launch_failed_leaves_the_timer_free(harness, tmp_path):
    # The HP's very first launch is refused by the driver (the stand-in fails it): nothing of
    # that request ran, so nothing is timed, and the requests after it are timed as ever.
    with SchedulerRun(settings()) as run:
        hp = run.add_client("hp", "hp", kernel_table(("h", 8, 64, 8, "compute", 0.5)))
        run.add_client("be", "be")
        run.publish()
        script = (
            "launch_failures_ok func h 500 launch h 8 64 0 sleep 3000 "
            "repeat 20 launch h 8 64 0 sync 0 sleep 3000 end"
        )
        log = run_client(harness, tmp_path, run, hp, script, {"FAKE_FAIL_LAUNCHES": "1"})
        stats = run.client_stats(hp)
    assert [e.kind for e in read_log(log)].count("launch_failed") == 1
    assert stats["hp_requests"] >= 21
    assert stats["requests_timed"] >= 10
