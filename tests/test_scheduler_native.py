"""The preload library against a stand-in driver that records calls (CPU only).

The stand-in `libcuda.so.1` is reached the way libcudart, cuBLAS/cuDNN, Triton and directly
linked programs reach the real one. These tests check what users rely on: every launch is seen
exactly once, nothing changes when no run is configured, priorities and the Orion/REEF rules hold,
and a client killed mid-run does not stall the others.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from native_harness import (
    MS,
    Harness,
    HeldKernel,
    Interval,
    kernel_table,
    launch_intervals,
    read_log,
    wait_for,
)

from orion_common.errors import OrionError
from scheduler_core import SchedulerRun, SchedulerSettings, native_module, preload_library_path
from scheduler_core.library import with_preload
from scheduler_core.run_state import remove_stale_runs


def settings(
    policy: str,
    queue_limit_ms: float = 5.0,
    trace: int = 0,
    hp_completion: str | None = None,
    be_gate: str = "cpu",  # most tests here check the rules a held launch waits for in its thread
    stale_ns: int | None = None,
) -> SchedulerSettings:
    extra: dict[str, object] = {} if hp_completion is None else {"hp_completion": hp_completion}
    if stale_ns is not None:
        extra["stale_ns"] = stale_ns
    return SchedulerSettings(
        policy=policy,
        sm_count=132,
        queue_limit_ns=int(queue_limit_ms * MS),
        unknown_duration_ns=int(queue_limit_ms * MS),
        trace_capacity=trace,
        be_gate=be_gate,
        **extra,
    )


# A staleness bound (a launch older than it counts as finished) no test outlives: a test whose
# work ends at all was let through by the rule it checks, not by the bound, however slow the
# machine; no clock has to tell the two apart.
NEVER_STALE_NS = 3600 * 10**9
HOUR_MS = 3_600_000


def launches(events: list) -> list:
    return [e for e in events if e.kind == "launch"]


# What a BE launch's decision saw, told from the stand-in's logs by the order of events alone (no
# tolerance: however late a busy machine runs any of it). A launch is in flight, for the
# decisions of its peers, from its entry in its client's ring (before its driver call logs
# "launch") to its completion word written by the GPU (after its kernel logs "exec_end"): it is
# in flight throughout [launched_ns, finished_ns] of its Interval. A BE launch is decided after
# its client's previous launch call logged "launch" and before its own does.


def decision_windows(be_launches: list) -> list[tuple[int, int]]:
    """When each BE launch (in order, one thread) was decided: after the previous launch's log
    line (the first: any time before its own) and before its own."""
    times = [launch.time_ns for launch in be_launches]
    return list(zip([0, *times[:-1]], times, strict=True))


def decided_beside(window: tuple[int, int], hp: list[Interval]) -> bool:
    """Whether a launch decided within ``window`` was decided while an HP kernel was in flight,
    certainly: the whole window lies inside one HP kernel's [launched_ns, finished_ns]. (A window
    across an HP kernel's edge may have been decided outside it; it is never counted.)"""
    after, before = window
    return any(i.launched_ns < after and before < i.finished_ns for i in hp)


def queued_at(interval: Interval, intervals: list[Interval]) -> list[Interval]:
    """The launches of one client still in flight when ``interval``'s launch was decided,
    certainly: launched before it, finished after its launch call (so their completions were
    not yet written when it was decided)."""
    return [i for i in intervals if i.launched_ns < interval.launched_ns < i.finished_ns]


# ---------------------------------------------------------------------------------------------
# Interception: every route, every launch API, exactly once
# ---------------------------------------------------------------------------------------------

ROUTES = ("getproc", "getproc_ptsz", "getproc_v1", "getproc_self", "dlsym", "dlsym_ptsz", "direct")
LAUNCH_SCRIPT = "launch k 4 128 0 launch_ex k 8 64 0 launch_coop k 2 32 legacy graph ptds"


def every_route_script() -> str:
    routes = " ".join(f"route {route} {LAUNCH_SCRIPT}" for route in ROUTES)
    return f"func k 1 {routes} sync 0"


def test_unconfigured_process_gets_the_drivers_own_functions(harness: Harness, tmp_path: Path):
    env = with_preload({"PATH": "/usr/bin:/bin"}, preload_library_path())
    probe = " ".join(
        f"route {route} origin cuLaunchKernel origin cuGraphLaunch"
        for route in ("getproc", "getproc_ptsz", "getproc_v1", "dlsym", "dlsym_ptsz")
    )
    result = harness.run(probe, env=env, log=tmp_path / "log")
    assert result.returncode == 0, result.stderr
    origins = [line.split()[2] for line in result.stdout.splitlines()]
    assert len(origins) == 10
    # No run configured: dlsym and cuGetProcAddress hand out the driver's functions untouched.
    assert all(Path(origin).name == "libcuda.so.1" for origin in origins), origins


def test_unconfigured_process_launches_pass_through_once(harness: Harness, tmp_path: Path):
    env = with_preload({"PATH": "/usr/bin:/bin"}, preload_library_path())
    result = harness.run(every_route_script(), env=env, log=tmp_path / "log")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert len(launches(read_log(tmp_path / "log"))) == 4 * len(ROUTES)


def test_a_log_read_while_a_line_is_half_visible_gives_the_whole_lines_only(tmp_path: Path):
    # A line of the stand-in driver's log that crosses a page of the file shows a page at a time
    # to a test polling the log (a stress run once read "1234 5678" and failed to unpack it).
    log = tmp_path / "log"
    log.write_text("1234 5678 launch bek 8 128\n1234 5679")
    (event,) = read_log(log)
    assert (event.pid, event.time_ns, event.kind, event.fields) == (
        1234,
        5678,
        "launch",
        ("bek", "8", "128"),
    )
    log.write_text("1234 5678 launch bek 8 128\n1234 5679 sync 0\n")
    assert [e.kind for e in read_log(log)] == ["launch", "sync"]


def test_every_launch_is_caught_exactly_once(harness: Harness, tmp_path: Path):
    with SchedulerRun(settings("passthrough")) as run:
        index = run.add_client("job", "be")
        run.publish()
        result = harness.run(
            every_route_script(), env=run.client_environment(index), log=tmp_path / "log"
        )
        assert result.returncode == 0, result.stderr
        stats = run.stats()["job"]
    driver_launches = launches(read_log(tmp_path / "log"))
    # Seven routes x (cuLaunchKernel, cuLaunchKernelEx, cuLaunchCooperativeKernel, cuGraphLaunch).
    assert len(driver_launches) == 4 * len(ROUTES)
    assert stats["launches"] == len(driver_launches)
    assert stats["graph_launches"] == len(ROUTES)
    # The per-thread routes reached the driver's _ptsz entry points, the others the legacy ones.
    apis = [e.fields[0] for e in driver_launches]
    assert apis.count("cuLaunchKernel_ptsz") == 2  # getproc_ptsz and dlsym_ptsz
    assert apis.count("cuLaunchKernel") == len(ROUTES) - 2
    assert stats["state"] == "exited"


def test_launch_arguments_reach_the_driver_unchanged(harness: Harness, tmp_path: Path):
    with SchedulerRun(settings("orion")) as run:
        index = run.add_client("job", "be", kernel_table(("k", 4, 128, 4, "memory", 0.1)))
        run.publish()
        script = "func k 1 stream s plain launch k 4 128 s launch_ex k 8 64 s sync 0"
        result = harness.run(script, env=run.client_environment(index), log=tmp_path / "log")
        assert result.returncode == 0, result.stderr
    created = [e for e in read_log(tmp_path / "log") if e.kind == "stream_create"]
    stream = created[0].fields[1].removeprefix("stream=")
    fields = [e.fields for e in launches(read_log(tmp_path / "log"))]
    assert fields == [
        ("cuLaunchKernel", "k", "grid=4,1,1", "block=128,1,1", f"stream={stream}"),
        ("cuLaunchKernelEx", "k", "grid=8,1,1", "block=64,1,1", f"stream={stream}"),
    ]


# ---------------------------------------------------------------------------------------------
# Priorities
# ---------------------------------------------------------------------------------------------


def created_priorities(log: Path) -> list[int]:
    return [
        int(e.fields[0].removeprefix("priority="))
        for e in read_log(log)
        if e.kind == "stream_create"
    ]


@pytest.mark.parametrize(
    ("policy", "role", "expected"),
    [
        ("priority", "hp", -5),
        ("orion", "hp", -5),
        ("priority", "be", 0),
        ("passthrough", "hp", None),
    ],
)
def test_streams_get_their_roles_priority(harness, tmp_path, policy, role, expected):
    with SchedulerRun(settings(policy)) as run:
        index = run.add_client("job", role)
        run.publish()
        script = "stream a plain stream_prio b -2 route direct stream c plain"
        result = harness.run(script, env=run.client_environment(index), log=tmp_path / "log")
        assert result.returncode == 0, result.stderr
    # Without orion's priorities (passthrough) the program's own choices stand.
    assert created_priorities(tmp_path / "log") == (
        [0, -2, 0] if expected is None else [expected] * 3
    )


def test_hp_default_stream_launches_move_to_a_priority_stream(harness: Harness, tmp_path: Path):
    with SchedulerRun(settings("priority")) as run:
        index = run.add_client("hp", "hp")
        run.publish()
        script = (
            "func k 1 launch k 1 32 0 launch k 1 32 legacy "
            "route getproc_ptsz launch k 1 32 0 route getproc sync 0"
        )
        result = harness.run(script, env=run.client_environment(index), log=tmp_path / "log")
        assert result.returncode == 0, result.stderr
        stats = run.stats()["hp"]
    events = read_log(tmp_path / "log")
    private = next(e for e in events if e.kind == "stream_create")
    assert private.fields[0] == "priority=-5"
    private_stream = private.fields[1].removeprefix("stream=")
    streams = [e.fields[4].removeprefix("stream=") for e in launches(events)]
    # Legacy default stream (0 and CU_STREAM_LEGACY) moved; the per-thread default stream not.
    assert streams == [private_stream, private_stream, "(nil)"]
    assert stats["redirected_launches"] == 2
    # Each moved launch first waits for what the legacy stream would have waited for, and then
    # the legacy stream waits for it: later legacy work, and any blocking stream's work through
    # the legacy stream, stays ordered after the moved kernel, as the program wrote it.
    order = [
        (e.kind, e.fields[-1].removeprefix("stream="))
        for e in events
        if e.kind in ("event_record", "stream_wait_event", "launch")
    ]
    legacy = "0x1"
    assert order[:5] == [
        ("event_record", legacy),
        ("stream_wait_event", private_stream),
        ("launch", private_stream),
        ("event_record", private_stream),
        ("stream_wait_event", legacy),
    ]
    # Synchronising the legacy stream also waits for the moved work.
    syncs = [e.fields[0] for e in events if e.kind == "stream_sync"]
    assert syncs == ["stream=(nil)", f"stream={private_stream}"]


@pytest.mark.parametrize("decided", ["as the run starts", "as the HP joins"])
def test_time_sliced_hp_launches_keep_their_stream_and_cost_no_extra_driver_calls(
    harness: Harness, tmp_path: Path, decided: str
):
    # Time-sliced, stream priorities order nothing between clients: an HP's legacy-stream launch
    # stays where the program put it, with no private stream and no stream waits around it
    # (events it records are the timing samples every HP client takes). The same for an HP that
    # joins an MPS daemon in a context of its own (`orion run --hp --hp-context own`): the
    # daemon turns the move off as it admits that HP.
    starts_with_move = decided == "as the HP joins"
    with SchedulerRun(replace(settings("orion"), hp_priority_stream=starts_with_move)) as run:
        index = run.add_client("hp", "hp")
        if starts_with_move:
            run.set_hp_priority_stream(False)
            assert run.settings.hp_priority_stream is False
        run.publish()
        script = "func k 1 launch k 1 32 0 launch k 1 32 legacy sync 0"
        result = harness.run(script, env=run.client_environment(index), log=tmp_path / "log")
        assert result.returncode == 0, result.stderr
        stats = run.stats()["hp"]
    events = read_log(tmp_path / "log")
    assert [e.fields[4].removeprefix("stream=") for e in launches(events)] == ["(nil)", "0x1"]
    assert stats["redirected_launches"] == 0
    assert not [e for e in events if e.kind in ("stream_create", "stream_wait_event")]


def _started(log: Path, name: str) -> bool:
    return any(e.kind == "exec_start" and e.fields[0] == name for e in read_log(log))


def _ended(log: Path, name: str) -> bool:
    return any(e.kind == "exec_end" and e.fields[0] == name for e in read_log(log))


def _execution(events: list, name: str) -> tuple[int, int]:
    start = next(e.time_ns for e in events if e.kind == "exec_start" and e.fields[0] == name)
    end = next(e.time_ns for e in events if e.kind == "exec_end" and e.fields[0] == name)
    return start, end


@pytest.mark.parametrize(("reader", "ordered"), [("plain", True), ("nonblocking", False)])
def test_the_stand_in_gpu_keeps_cudas_stream_ordering(harness, tmp_path, reader, ordered):
    # No library: a kernel on a blocking stream waits for earlier legacy-stream work; one on a
    # non-blocking stream does not. (The stand-in must show the difference for the tests below
    # to mean anything.) "slow" runs until the test releases it: on a non-blocking stream "fast"
    # runs to its end before that, however late a busy machine starts it.
    hold = HeldKernel("slow", tmp_path / "release-slow")
    script = f"func slow 1000 func fast 1000 stream s {reader} launch slow 1 32 0 "
    script += "launch fast 1 32 s sync 0"
    process = harness.start(script, env=hold.env(), log=tmp_path / "log")
    try:
        if ordered:
            wait_for(lambda: _started(tmp_path / "log", "slow"), what="slow to start")
        else:
            wait_for(lambda: _ended(tmp_path / "log", "fast"), what="fast to run beside slow")
        hold.release()
        assert process.wait(timeout=30) == 0, process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    events = read_log(tmp_path / "log")
    _, slow_end = _execution(events, "slow")
    fast_start, _ = _execution(events, "fast")
    assert (fast_start >= slow_end) == ordered


def test_a_moved_hp_launch_still_orders_the_programs_blocking_streams(harness, tmp_path):
    # The HP client's legacy-stream kernel is moved to orion's private priority stream; a kernel
    # the program then puts on a blocking stream of its own must still start after it ends.
    with SchedulerRun(settings("priority")) as run:
        index = run.add_client("hp", "hp")
        run.publish()
        script = "func slow 50000 func fast 1000 stream s plain launch slow 1 32 0 "
        script += "launch fast 1 32 s sync 0"
        result = harness.run(script, env=run.client_environment(index), log=tmp_path / "log")
        assert result.returncode == 0, result.stderr
        stats = run.stats()["hp"]
    assert stats["redirected_launches"] == 1
    events = read_log(tmp_path / "log")
    _, slow_end = _execution(events, "slow")
    fast_start, _ = _execution(events, "fast")
    assert fast_start >= slow_end


def test_be_default_stream_launches_stay_put(harness: Harness, tmp_path: Path):
    with SchedulerRun(settings("priority")) as run:
        index = run.add_client("be", "be")
        run.publish()
        result = harness.run(
            "func k 1 launch k 1 32 0 sync 0",
            env=run.client_environment(index),
            log=tmp_path / "log",
        )
        assert result.returncode == 0, result.stderr
    assert [e.fields[4] for e in launches(read_log(tmp_path / "log"))] == ["stream=(nil)"]


# ---------------------------------------------------------------------------------------------
# Policies
# ---------------------------------------------------------------------------------------------

# HP "requests": an 8 ms kernel every 16 ms, so HP is idle half of the time, far longer than any
# test lasts (run_pair stops it once BE is done).
HP_REQUESTS = "func hpk 8000 repeat 100000 launch hpk 4 128 0 sleep 16000 end sync 0"


def wait_until_launched(run: SchedulerRun, client: str, timeout_s: float = 20) -> None:
    """Until a launch of ``client`` is in its in-flight ring, where its peers' decisions see it.
    (The launch counter goes up as the launch call begins, before that: a peer deciding in
    between would find the client idle.)"""
    wait_for(
        lambda: run.stats()[client]["tracked_launches"] > 0,
        timeout_s=timeout_s,
        what=f"{client} to launch",
    )


def lone_be_stats(harness, tmp_path, kernels: pd.DataFrame, script: str) -> dict:
    """Runs ``script`` as the only client (BE, policy orion, profile ``kernels``) to its end;
    returns its statistics. Its stand-in log is ``tmp_path / "be.log"``."""
    with SchedulerRun(settings("orion")) as run:
        be = run.add_client("be", "be", kernels)
        run.publish()
        result = harness.run(script, env=run.client_environment(be), log=tmp_path / "be.log")
        assert result.returncode == 0, result.stderr
        return run.stats()["be"]


def be_beside_running_hp(harness, tmp_path, run, hp, be, hp_script, be_script, hp_env=None) -> dict:
    """Starts the HP script (which keeps running), runs the BE script to its end once HP has
    launched, and returns the run's statistics taken then; the HP process is killed after."""
    hp_process = harness.start(
        hp_script, env={**run.client_environment(hp), **(hp_env or {})}, log=tmp_path / "hp.log"
    )
    try:
        wait_until_launched(run, "hp")
        result = harness.run(be_script, env=run.client_environment(be), log=tmp_path / "be.log")
        assert result.returncode == 0, result.stderr
        return run.stats()
    finally:
        hp_process.kill()
        hp_process.wait(timeout=10)


def run_pair(harness, tmp_path, policy, hp_table, be_table, be_script, queue_limit_ms=5.0):
    # The HP client's completions are written by the (fake) GPU here: these tests check the
    # policy's rules, which must hold exactly, not the estimates a default HP client makes (an
    # estimate errs by the stand-in GPU's scheduling delay, which a loaded 2-core machine can
    # push past any tolerance); test_be_waits_for_an_estimated_hp_kernel_... covers estimates.
    with SchedulerRun(settings(policy, queue_limit_ms, hp_completion="gpu-write")) as run:
        hp = run.add_client("hp", "hp", hp_table)
        be = run.add_client("be", "be", be_table)
        run.publish()
        hp_process = harness.start(
            HP_REQUESTS, env=run.client_environment(hp), log=tmp_path / "hp.log"
        )
        be_process = None
        try:
            wait_until_launched(run, "hp")  # BE overlaps HP's requests from its first launch ...
            be_process = harness.start(
                be_script, env=run.client_environment(be), log=tmp_path / "be.log"
            )
            assert be_process.wait(timeout=60) == 0, be_process.stderr.read()
            # ... to its last, however slowly a busy machine ran either: HP is still requesting.
            assert hp_process.poll() is None, hp_process.stderr.read()
            stats = run.stats()
        finally:
            for process in (hp_process, be_process):
                if process is not None and process.poll() is None:
                    process.kill()
                    process.wait(timeout=10)
    # HP's kernels that ended (the one it was killed in is left out: launch_intervals pairs each
    # launch with its end in order).
    hp_intervals = launch_intervals(read_log(tmp_path / "hp.log"))
    be_launches = launches(read_log(tmp_path / "be.log"))
    assert hp_intervals
    return hp_intervals, be_launches, stats


def test_reef_runs_be_kernels_only_while_hp_is_idle(harness: Harness, tmp_path: Path):
    hp_table = kernel_table(("hpk", 4, 128, 4, "compute", 8))
    be_table = kernel_table(("bek", 8, 128, 8, "memory", 1))
    be_script = "func bek 1000 repeat 60 launch bek 8 128 0 end sync 0"
    hp, be, stats = run_pair(harness, tmp_path, "reef", hp_table, be_table, be_script)
    assert len(be) == 60
    # Every BE launch went because HP had nothing in flight (REEF's one reason to go) ...
    assert stats["be"]["reasons"]["hp_idle"] == 60
    # ... and none was decided while an HP kernel ran, as the logs order them.
    for window in decision_windows(be):
        assert not decided_beside(window, hp), f"BE decided during an HP kernel at {window}"
    # BE used HP's idle gaps rather than waiting for HP to finish altogether: its work all ran
    # while HP was still requesting (run_pair), and some of it waited for HP's kernels.
    assert stats["be"]["reasons"]["hp_busy"] > 0
    assert stats["be"]["blocked_launches"] > 0


@pytest.mark.parametrize(
    ("kernel", "sm_needed", "kernel_class", "allowed", "reason"),
    [
        ("fits", 20, "memory", True, "fits_beside"),  # 20 <= 32 free SMs, memory beside compute
        ("wide", 50, "memory", False, "not_enough_sms"),  # needs more SMs than HP leaves free
        ("same", 10, "compute", False, "class_clash"),  # compute beside compute
    ],
)
def test_orion_runs_be_beside_hp_only_when_it_fits_and_complements(
    harness, tmp_path, kernel, sm_needed, kernel_class, allowed, reason
):
    # HP kernels need 100 of 132 SMs and are compute-bound: 32 SMs stay free.
    hp_table = kernel_table(("hpk", 4, 128, 100, "compute", 8))
    be_table = kernel_table((kernel, 1, 64, sm_needed, kernel_class, 1))
    be_script = f"func {kernel} 1000 repeat 60 launch {kernel} 1 64 0 end sync 0"
    hp, be, stats = run_pair(harness, tmp_path, "orion", hp_table, be_table, be_script)
    assert len(be) == 60
    # Each BE launch went because HP was idle or because it fits beside HP's kernel, the latter
    # only where the rule allows it; where it does not, the reason it waited is counted.
    reasons = stats["be"]["reasons"]
    assert reasons["hp_idle"] + reasons["fits_beside"] == 60
    assert (reasons["fits_beside"] > 0) == allowed
    assert reasons[reason] > 0
    # The logs agree: launches decided while an HP kernel ran exist where allowed, never where not.
    beside_hp = [window for window in decision_windows(be) if decided_beside(window, hp)]
    assert bool(beside_hp) == allowed


def test_unknown_be_kernels_never_run_beside_hp(harness: Harness, tmp_path: Path):
    hp_table = kernel_table(("hpk", 4, 128, 10, "compute", 8))
    be_table = kernel_table(("bek", 8, 128, 8, "memory", 1))
    # "mystery" is absent from the profile: treated conservatively.
    be_script = "func mystery 1000 repeat 40 launch mystery 1 32 0 end sync 0"
    hp, be, stats = run_pair(
        harness, tmp_path, "orion", hp_table, be_table, be_script, queue_limit_ms=1
    )
    assert stats["be"]["reasons"]["hp_idle"] == 40  # never "fits_beside"
    assert not any(decided_beside(window, hp) for window in decision_windows(be))
    assert stats["be"]["unknown_launches"] == 40
    assert stats["be"]["unknown_kernels"] == ["mystery grid(1,1,1) block(32,1,1)"]


def test_library_kernels_are_identified_by_cuKernelGetName(harness: Harness, tmp_path: Path):
    # The CUDA runtime launches library kernels (PyTorch, cuDNN) through CUkernel handles, which
    # cuFuncGetName does not know: their names, and so their profile rows, come from
    # cuKernelGetName. "bek" is in the profile; "libmystery" is not and is reported by name.
    hp_table = kernel_table(("hpk", 4, 128, 10, "compute", 8))
    be_table = kernel_table(("bek", 8, 128, 8, "memory", 1))
    be_script = (
        "library_kernel bek 100 library_kernel libmystery 100 "
        "repeat 5 launch bek 8 128 0 launch libmystery 1 32 0 end sync 0"
    )
    _, be, stats = run_pair(
        harness, tmp_path, "orion", hp_table, be_table, be_script, queue_limit_ms=1
    )
    assert len(be) == 10
    assert stats["be"]["unknown_launches"] == 5
    assert stats["be"]["unknown_kernels"] == ["libmystery grid(1,1,1) block(32,1,1)"]


def test_be_queue_stays_under_the_limit(harness: Harness, tmp_path: Path):
    # 1 ms kernels against a 2.5 ms limit: one queued kernel plus the one launching (2 ms) fits,
    # a third (3 ms) would not.
    with SchedulerRun(settings("orion", queue_limit_ms=2.5)) as run:
        be = run.add_client("be", "be", kernel_table(("bek", 8, 128, 8, "memory", 1)))
        run.publish()
        script = "func bek 1000 repeat 40 launch bek 8 128 0 end sync 0"
        result = harness.run(script, env=run.client_environment(be), log=tmp_path / "be.log")
        assert result.returncode == 0, result.stderr
        stats = run.stats()["be"]
    intervals = launch_intervals(read_log(tmp_path / "be.log"))
    assert len(intervals) == 40
    assert stats["reasons"]["queue_full"] >= 1  # the limit held some launches back
    most_queued = max(len(queued_at(i, intervals)) for i in intervals)
    assert most_queued <= 1


# ---------------------------------------------------------------------------------------------
# Robustness
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("be_gate", ["cpu", "gpu"])  # gpu: the keeper must reopen the BE gate
def test_killed_hp_client_does_not_stall_best_effort(harness: Harness, tmp_path: Path, be_gate):
    # The alternatives to finding HP dead are waiting out its kernel (profiled at an hour, and
    # held on the stand-in GPU until released: never) or the staleness bound (an hour here):
    # BE's ten 1-ms kernels finishing at all, within harness.run's timeout, rules both out.
    hold = HeldKernel("long", tmp_path / "release-long")
    with SchedulerRun(settings("reef", be_gate=be_gate, stale_ns=NEVER_STALE_NS)) as run:
        hp = run.add_client("hp", "hp", kernel_table(("long", 1, 32, 1, "compute", HOUR_MS)))
        be = run.add_client("be", "be", kernel_table(("bek", 8, 128, 8, "memory", 1)))
        run.publish()
        # HP launches its kernel and is SIGKILLed while it is in flight (and not reaped).
        hp_process = harness.start(
            f"func long {HOUR_MS * 1000} launch long 1 32 0 sleep 50000 kill_self",
            env={**run.client_environment(hp), **hold.env()},
            log=tmp_path / "hp.log",
        )
        wait_until_launched(run, "hp")
        result = harness.run(
            "func bek 1000 repeat 10 launch bek 8 128 0 end sync 0",
            env=run.client_environment(be),
            log=tmp_path / "be.log",
        )
        assert result.returncode == 0, result.stderr
        assert run.client_state(hp) == "dead"
        hp_process.wait(timeout=10)
    assert len(launches(read_log(tmp_path / "be.log"))) == 10
    assert not [e for e in read_log(tmp_path / "hp.log") if e.kind == "exec_end"]  # never ended


def test_killed_be_client_does_not_stall_other_be_clients(harness: Harness, tmp_path: Path):
    # As above: be1's kernel never ends and nothing goes stale, so be2 finishing at all is the
    # queue letting go of a dead client's work.
    hold = HeldKernel("long", tmp_path / "release-long")
    table = kernel_table(("long", 1, 32, 1, "memory", HOUR_MS), ("bek", 8, 128, 8, "memory", 1))
    with SchedulerRun(settings("orion", stale_ns=NEVER_STALE_NS)) as run:
        first = run.add_client("be1", "be", table)
        second = run.add_client("be2", "be", table)
        run.publish()
        # be1 fills the shared BE queue with its kernel, then dies holding it.
        doomed = harness.start(
            f"func long {HOUR_MS * 1000} launch long 1 32 0 sleep 50000 kill_self",
            env={**run.client_environment(first), **hold.env()},
            log=tmp_path / "be1.log",
        )
        wait_until_launched(run, "be1")
        result = harness.run(
            "func bek 1000 repeat 10 launch bek 8 128 0 end sync 0",
            env=run.client_environment(second),
            log=tmp_path / "be2.log",
        )
        assert result.returncode == 0, result.stderr
        doomed.wait(timeout=10)
        assert run.client_state(first) == "dead"
    assert len(launches(read_log(tmp_path / "be2.log"))) == 10
    assert not [e for e in read_log(tmp_path / "be1.log") if e.kind == "exec_end"]


def test_without_gpu_completion_writes_finish_times_are_estimated(harness: Harness, tmp_path: Path):
    with SchedulerRun(settings("orion", queue_limit_ms=2.5)) as run:
        be = run.add_client("be", "be", kernel_table(("bek", 8, 128, 8, "memory", 1)))
        run.publish()
        env = run.client_environment(be)
        env["FAKE_NO_HOST_REGISTER"] = "1"
        script = "func bek 1000 repeat 20 launch bek 8 128 0 end sync 0"
        result = harness.run(script, env=env, log=tmp_path / "be.log")
        assert result.returncode == 0, result.stderr
        stats = run.stats()["be"]
    assert "estimating finish times" in result.stderr
    assert stats["completion_mode"] == "estimate"
    assert stats["launches"] == 20
    assert stats["blocked_launches"] > 0  # the queue limit still applies


def count_events(log: Path, kind: str) -> int:
    return sum(1 for e in read_log(log) if e.kind == kind)


@pytest.mark.parametrize(
    ("policy", "hp_completion", "hp_writes"),
    [
        ("orion", None, False),  # the default: HP estimates its finish times
        ("orion", "estimate", False),
        ("orion", "gpu-write", True),
        ("reef", None, False),
    ],
)
def test_hp_completion_decides_whether_the_hp_client_makes_gpu_writes(
    harness, tmp_path, policy, hp_completion, hp_writes
):
    table = kernel_table(("k", 4, 128, 100, "compute", 0.2))
    with SchedulerRun(settings(policy, hp_completion=hp_completion)) as run:
        assert run.settings.hp_completion == (hp_completion or "estimate")
        hp = run.add_client("hp", "hp", table)
        be = run.add_client("be", "be", table)
        run.publish()
        script = "func k 200 repeat 5 launch k 4 128 0 end sync 0"
        for index, name in ((hp, "hp"), (be, "be")):
            result = harness.run(
                script, env=run.client_environment(index), log=tmp_path / f"{name}.log"
            )
            assert result.returncode == 0, result.stderr
            assert "estimating" not in result.stderr  # nothing failed: the setting decided
        stats = run.stats()
    hp_log, be_log = tmp_path / "hp.log", tmp_path / "be.log"
    assert stats["hp"]["tracked_launches"] == 5
    if hp_writes:
        assert stats["hp"]["completion_mode"] == "gpu-write"
        assert count_events(hp_log, "host_register") == 1
        # One per launch, on the stream the launch went to (HP's private priority stream).
        events = read_log(hp_log)
        writes = [e.fields[1] for e in events if e.kind == "write_value"]
        assert writes == [e.fields[4] for e in launches(events)]
    else:
        # Not a fallback: the HP client never asks the driver for anything to track completions.
        assert stats["hp"]["completion_mode"] == "estimate"
        assert count_events(hp_log, "host_register") == 0
        assert count_events(hp_log, "write_value") == 0
    # Best-effort clients always get GPU-written completions: their queue accounting is exact.
    assert stats["be"]["completion_mode"] == "gpu-write"
    assert count_events(be_log, "host_register") == 1
    assert count_events(be_log, "write_value") == 5


def test_hp_completion_must_be_a_known_mode():
    with pytest.raises(OrionError, match=r"hp_completion must be one of estimate, gpu-write"):
        settings("orion", hp_completion="fast")
    # The shared header refuses it too (and says what it holds), whoever creates the run.
    native = native_module()
    with pytest.raises(ValueError, match="'estimate' or 'gpu-write', not 'fast'"):
        native.Run.create("/orion-test-bad-mode", "orion", 132, 1, 1, 1, 0, "fast")
    with SchedulerRun(settings("orion", hp_completion="gpu-write")) as run:
        assert native.Run.attach(run.name, run.decisions_path).hp_completion == "gpu-write"


def test_be_waits_for_an_estimated_hp_kernel_for_its_profiled_duration(harness, tmp_path):
    # The HP kernel needs 100 of 132 SMs for 300 ms; the BE kernel needs 50: it cannot run beside
    # it. HP writes no completions, so BE must take the kernel as finished at its expected end,
    # about 300 ms after its launch, not wait for the staleness bound (an hour here) or for HP to
    # exit (it holds on until killed).
    duration_ms = 300
    with SchedulerRun(settings("orion", stale_ns=NEVER_STALE_NS)) as run:
        hp = run.add_client("hp", "hp", kernel_table(("hpk", 4, 128, 100, "compute", duration_ms)))
        be = run.add_client("be", "be", kernel_table(("wide", 1, 64, 50, "memory", 1)))
        run.publish()
        stats = be_beside_running_hp(
            harness,
            tmp_path,
            run,
            hp,
            be,
            f"func hpk {duration_ms * 1000} launch hpk 4 128 0 hold",
            "func wide 1000 launch wide 1 64 0 sync 0",
        )
    assert stats["hp"]["state"] == "attached"  # HP was still there the whole time
    assert stats["hp"]["completion_mode"] == "estimate"
    assert stats["be"]["blocked_launches"] == 1, "BE arrived after the HP kernel had ended"
    assert stats["be"]["reasons"]["not_enough_sms"] == 1
    (hp_launch,) = launches(read_log(tmp_path / "hp.log"))
    (be_launch,) = launches(read_log(tmp_path / "be.log"))
    # Which rule held it is asserted above, and neither the staleness bound nor HP's exit could
    # have let it go; it waited (a busy machine only lengthens the wait: the launch stamps are
    # the processes' own, not the scheduler's).
    assert be_launch.time_ns - hp_launch.time_ns > duration_ms * MS // 2


@pytest.mark.parametrize("policy", ["orion", "reef"])
def test_be_waits_for_a_whole_hp_graph_however_long(harness, tmp_path, policy):
    # The HP client launches one 300 ms CUDA graph and estimates its kernels' ends (the default).
    # A graph's length is unknown at its launch: it must count as running until the GPU writes
    # its completion, not for the unknown-kernel duration (5 ms here), so a BE kernel that
    # cannot run beside it waits about 300 ms (nothing goes stale here, and HP never exits).
    duration_ms = 300
    with SchedulerRun(settings(policy, stale_ns=NEVER_STALE_NS)) as run:
        hp = run.add_client("hp", "hp", kernel_table(("hpk", 4, 128, 100, "compute", 1)))
        be = run.add_client("be", "be", kernel_table(("bek", 1, 64, 8, "memory", 1)))
        run.publish()
        stats = be_beside_running_hp(
            harness,
            tmp_path,
            run,
            hp,
            be,
            "graph 0 hold",
            "func bek 1000 launch bek 1 64 0 sync 0",
            hp_env={"FAKE_GRAPH_NS": str(duration_ms * MS)},
        )
    assert stats["hp"]["completion_mode"] == "estimate"  # for its kernels
    assert stats["hp"]["graph_launches"] == 1
    assert stats["hp"]["graph_gpu_writes"] == 1  # the graph's completion, written by the GPU
    hp_events = read_log(tmp_path / "hp.log")
    assert count_events(tmp_path / "hp.log", "host_register") == 1
    assert [e.kind for e in hp_events if e.kind in ("launch", "write_value")] == [
        "launch",
        "write_value",
    ]
    assert stats["be"]["blocked_launches"] == 1
    (hp_launch,) = launches(hp_events)
    (be_launch,) = launches(read_log(tmp_path / "be.log"))
    # Held until the graph's completion was written: not for the unknown-kernel duration, and
    # (no staleness, no exit) by nothing else.
    assert be_launch.time_ns - hp_launch.time_ns > duration_ms * MS // 2


def test_an_estimating_hp_client_without_graphs_registers_nothing(harness, tmp_path):
    with SchedulerRun(settings("orion")) as run:
        hp = run.add_client("hp", "hp", kernel_table(("hpk", 4, 128, 100, "compute", 0.2)))
        run.publish()
        result = harness.run(
            "func hpk 200 repeat 3 launch hpk 4 128 0 end sync 0",
            env=run.client_environment(hp),
            log=tmp_path / "hp.log",
        )
        assert result.returncode == 0, result.stderr
        stats = run.stats()["hp"]
    assert stats["graph_gpu_writes"] == 0
    assert count_events(tmp_path / "hp.log", "host_register") == 0
    assert count_events(tmp_path / "hp.log", "write_value") == 0


# A graph of two kernel nodes, "ga" (60 SMs) then "gb" (40 SMs), both compute-bound, 100 ms each.
GRAPH_A = "func ga 100000 func gb 100000 graph_new A graph_node A ga 4 128 graph_node A gb 2 64"
GRAPH_A_NODES = kernel_table(("ga", 4, 128, 60, "compute", 100), ("gb", 2, 64, 40, "compute", 100))
# Another graph in the same process: the same kernels in other shapes.
GRAPH_B = "graph_new B graph_node B ga 8 128 graph_node B gb 2 64"


@pytest.mark.parametrize(
    ("route", "instantiate"),
    [("getproc", "flags"), ("getproc", "params"), ("dlsym", "flags"), ("direct", "flags")],
)
def test_a_graph_is_identified_whatever_route_instantiated_it(
    harness, tmp_path, route, instantiate
):
    with SchedulerRun(settings("orion")) as run:
        hp = run.add_client("hp", "hp", kernel_table(("hpk", 4, 128, 100, "compute", 1)))
        key = run.add_graph(hp, GRAPH_A_NODES, 200 * MS)
        run.publish()
        result = harness.run(
            f"route {route} {GRAPH_A} graph_inst A {instantiate} graph_run A 0 sync 0",
            env=run.client_environment(hp),
            log=tmp_path / "hp.log",
        )
        assert result.returncode == 0, result.stderr
        stats = run.stats()["hp"]
    assert key != 0
    assert stats["profiled_graphs"] == 1
    assert stats["graphs_identified"] == 1
    assert stats["graph_launches"] == 1
    assert stats["unknown_graph_launches"] == 0
    assert stats["unknown_launches"] == 0


def test_two_graphs_of_one_process_are_told_apart(harness: Harness, tmp_path: Path):
    with SchedulerRun(settings("orion")) as run:
        hp = run.add_client("hp", "hp", kernel_table(("hpk", 4, 128, 100, "compute", 1)))
        run.add_graph(hp, GRAPH_A_NODES, 200 * MS)  # only A is profiled
        run.publish()
        script = f"{GRAPH_A} {GRAPH_B} graph_inst A flags graph_inst B flags "
        script += "graph_run A 0 graph_run B 0 graph_run A 0 sync 0"
        result = harness.run(script, env=run.client_environment(hp), log=tmp_path / "hp.log")
        assert result.returncode == 0, result.stderr
        stats = run.stats()["hp"]
    assert stats["graphs_identified"] == 2
    assert stats["graph_launches"] == 3
    assert stats["unknown_graph_launches"] == 1  # B


@pytest.mark.parametrize("route", ["getproc", "dlsym"])
def test_an_executable_changed_in_place_is_identified_again(harness, tmp_path, route):
    # An executable of B (unprofiled) updated from A runs A; one of its kernel nodes given B's
    # shape makes it B again, and back; a change orion cannot read leaves it unidentified.
    with SchedulerRun(settings("orion")) as run:
        hp = run.add_client("hp", "hp", kernel_table(("hpk", 4, 128, 100, "compute", 1)))
        run.add_graph(hp, GRAPH_A_NODES, 200 * MS)  # only A is profiled
        run.publish()
        script = " ".join(
            [
                f"route {route} {GRAPH_A} {GRAPH_B} graph_inst B flags graph_run B 0",  # unknown
                "graph_update B A graph_run B 0",  # known: A
                "graph_set B A 0 ga 8 128 graph_run B 0",  # unknown: B's first node
                "graph_set B A 0 ga 4 128 graph_run B 0",  # known: A again
                "graph_set_generic B A 1 graph_run B 0 sync 0",  # unknown: unreadable change
            ]
        )
        result = harness.run(script, env=run.client_environment(hp), log=tmp_path / "hp.log")
        assert result.returncode == 0, result.stderr
        stats = run.stats()["hp"]
    assert stats["graph_launches"] == 5
    assert stats["graphs_identified"] == 2  # B at instantiation, A at the update
    assert stats["unknown_graph_launches"] == 3


def test_graph_identity_does_not_depend_on_node_order():
    native = native_module()
    keys = [
        native.kernel_key("ga", (4, 1, 1), (128, 1, 1)),
        native.kernel_key("gb", (2, 1, 1), (64, 1, 1)),
    ]
    assert native.graph_key(keys) == native.graph_key(keys[::-1])
    assert native.graph_key(keys) != native.graph_key(keys[:1])
    assert native.graph_key(keys + keys[:1]) != native.graph_key(keys)  # a repeated node counts


def test_a_destroyed_graph_is_forgotten(harness: Harness, tmp_path: Path):
    with SchedulerRun(settings("orion")) as run:
        be = run.add_client("be", "be", kernel_table(("bek", 1, 64, 8, "memory", 1)))
        run.add_graph(be, GRAPH_A_NODES, 200 * MS)
        run.publish()
        # The fake driver hands out a new executable each time; destroying one must not leave
        # its identity behind for whatever reuses the handle.
        script = f"{GRAPH_A} graph_inst A flags graph_run A 0 sync 0 graph_destroy A"
        result = harness.run(script, env=run.client_environment(be), log=tmp_path / "be.log")
        assert result.returncode == 0, result.stderr
        stats = run.stats()["be"]
    assert stats["graphs_identified"] == 1
    assert stats["unknown_graph_launches"] == 0
    assert count_events(tmp_path / "be.log", "graph_exec_destroy") == 1


def test_a_profiled_hp_graph_gates_be_by_its_widest_kernel_and_wall_time(harness, tmp_path):
    # HP's profiled graph needs 60 SMs (its widest kernel) for 2 s and is compute-bound. A
    # memory-bound BE kernel on 20 SMs fits beside it; one on 100 SMs waits for the whole graph.
    # The stand-in runs the graph until the test releases it (its GPU-written completion ends
    # it), well inside its profiled 2 s: "beside" and "after" are orders of events.
    nodes = kernel_table(("ga", 4, 128, 60, "compute", 1000), ("gb", 2, 64, 40, "compute", 1000))
    hold = HeldKernel("graph", tmp_path / "release-graph")
    be_log = tmp_path / "be.log"
    with SchedulerRun(settings("orion")) as run:
        hp = run.add_client("hp", "hp", kernel_table(("hpk", 4, 128, 100, "compute", 1)))
        run.add_graph(hp, nodes, 2000 * MS)
        be = run.add_client(
            "be",
            "be",
            kernel_table(("narrow", 1, 64, 20, "memory", 1), ("wide", 2, 64, 100, "memory", 1)),
        )
        run.publish()
        hp_process = harness.start(
            f"{GRAPH_A} graph_inst A flags graph_run A 0 sync 0",
            env={**run.client_environment(hp), **hold.env()},
            log=tmp_path / "hp.log",
        )
        be_process = None
        try:
            wait_until_launched(run, "hp")
            be_process = harness.start(
                "func narrow 1000 func wide 1000 launch narrow 1 64 0 launch wide 2 64 0 sync 0",
                env=run.client_environment(be),
                log=be_log,
            )
            wait_for(lambda: launches(read_log(be_log)), what="narrow's launch beside the graph")
            released_ns = hold.release()
            assert be_process.wait(timeout=30) == 0, be_process.stderr.read()
            assert hp_process.wait(timeout=30) == 0, hp_process.stderr.read()
        finally:
            for process in (hp_process, be_process):
                if process is not None and process.poll() is None:
                    process.kill()
                    process.wait(timeout=10)
        stats = run.stats()
    assert stats["hp"]["unknown_graph_launches"] == 0
    assert stats["be"]["reasons"]["fits_beside"] >= 1
    assert stats["be"]["reasons"]["not_enough_sms"] == 1
    hp_events = read_log(tmp_path / "hp.log")
    (graph_launch,) = launches(hp_events)
    graph_end = next(e for e in hp_events if e.kind == "exec_end").time_ns
    narrow, wide = launches(read_log(be_log))
    # beside the graph, not after it; wide after the whole graph (its written completion), not
    # after the 5-ms unknown-kernel bound
    assert graph_launch.time_ns < narrow.time_ns < released_ns
    assert released_ns < graph_end < wide.time_ns


def test_be_runs_beside_an_hp_graph_once_its_wide_kernels_are_done(harness, tmp_path):
    # HP's graph: "wide" (all 132 SMs) for 100 ms, then "narrow" (40 SMs) for 100 ms, both
    # compute-bound. A memory-bound BE kernel on 20 SMs launched during "wide" must wait for it
    # to end, then may run beside "narrow": long before the graph as a whole ends. (Gated as a
    # unit, the graph would need 132 SMs for all 200 ms.)
    nodes = kernel_table(
        ("wide", 4, 128, 132, "compute", 100), ("narrow", 2, 64, 40, "compute", 100)
    )
    with SchedulerRun(settings("orion")) as run:
        hp = run.add_client("hp", "hp", kernel_table(("hpk", 4, 128, 100, "compute", 1)))
        run.add_graph(hp, nodes, 200 * MS)
        be = run.add_client("be", "be", kernel_table(("bek", 1, 64, 20, "memory", 5)))
        run.publish()
        stats = be_beside_running_hp(
            harness,
            tmp_path,
            run,
            hp,
            be,
            "func wide 100000 func narrow 100000 graph_new G graph_node G wide 4 128 "
            "graph_node G narrow 2 64 graph_inst G flags graph_run G 0 hold",
            "sleep 20000 func bek 5000 launch bek 1 64 0 sync 0",
        )
    assert stats["be"]["reasons"]["not_enough_sms"] == 1  # waited for "wide"
    assert stats["be"]["reasons"]["fits_beside"] == 1  # then ran beside "narrow"
    (graph_launch,) = launches(read_log(tmp_path / "hp.log"))
    (be_launch,) = launches(read_log(tmp_path / "be.log"))
    # The reasons above say it waited for "wide" and then ran beside "narrow" (not after the
    # graph); its launch came after the graph's, whatever a busy machine did to the timing.
    assert be_launch.time_ns > graph_launch.time_ns


def test_launches_into_a_capturing_stream_pass_through(harness: Harness, tmp_path: Path):
    script = "func bek 1000 stream cap capture repeat 5 launch bek 8 128 cap end sync 0"
    stats = lone_be_stats(harness, tmp_path, kernel_table(("bek", 8, 128, 8, "memory", 1)), script)
    assert stats["capture_launches"] == 5
    assert stats["tracked_launches"] == 0
    assert not [e for e in read_log(tmp_path / "be.log") if e.kind == "write"]


@pytest.mark.parametrize("route", ["getproc", "dlsym"])
def test_deprecated_launch_routes_are_counted_and_gated(harness, tmp_path, route):
    # cuLaunch, cuLaunchGrid, cuLaunchGridAsync and cuLaunchCooperativeKernelMultiDevice (two
    # devices: two launches): five launches, each seen once and tracked. The legacy three carry no
    # block shape, so they are unknown to the profile; the multi-device one is profiled.
    script = (
        f"route {route} func k 100 launch_legacy k launch_grid k 4 launch_grid k 4 async "
        "launch_multi k 4 128 sync 0"
    )
    stats = lone_be_stats(harness, tmp_path, kernel_table(("k", 4, 128, 8, "memory", 1)), script)
    assert stats["launches"] == 5
    assert stats["tracked_launches"] == 5
    assert stats["unknown_launches"] == 3
    assert len(launches(read_log(tmp_path / "be.log"))) == 5


def test_a_failed_capture_query_does_not_open_the_gate(harness: Harness, tmp_path: Path):
    # The driver cannot say whether the stream captures: the launches are still gated and
    # tracked, never passed through as if they were being captured.
    script = "func bek 1000 stream odd broken repeat 5 launch bek 8 128 odd end sync 0"
    stats = lone_be_stats(harness, tmp_path, kernel_table(("bek", 8, 128, 8, "memory", 1)), script)
    assert stats["capture_launches"] == 0
    assert stats["tracked_launches"] == 5


@pytest.mark.parametrize(
    ("unload", "unknown"),
    # without an unload the cached name stays "old": both launches unknown
    [("", 2), ("unload module", 1), ("unload library", 1)],
)
def test_a_function_handle_reused_after_an_unload_is_named_again(
    harness, tmp_path, unload, unknown
):
    # "old" is not in the profile, "new" is. The handle of "old" comes back for "new" (the fake
    # renames it, as a reloaded module may reuse a handle): only after an unload may orion know.
    script = f"func old 100 launch old 1 64 0 rename old new {unload} launch old 1 64 0 sync 0"
    stats = lone_be_stats(harness, tmp_path, kernel_table(("new", 1, 64, 8, "memory", 1)), script)
    assert stats["unknown_launches"] == unknown
    assert stats["launches"] == 2


def test_trace_records_every_launch(harness: Harness, tmp_path: Path):
    with SchedulerRun(settings("orion", trace=64)) as run:
        be = run.add_client("be", "be", kernel_table(("bek", 8, 128, 8, "memory", 0.5)))
        run.publish()
        script = (
            "func bek 500 func other 100 repeat 3 launch bek 8 128 0 end launch other 1 1 0 sync 0"
        )
        result = harness.run(script, env=run.client_environment(be), log=tmp_path / "be.log")
        assert result.returncode == 0, result.stderr
        trace = run.drain_trace()
        assert run.drain_trace().empty  # drained
    assert trace["kernel_name"].tolist() == ["bek", "bek", "bek", "<unprofiled>"]
    assert trace["known"].tolist() == [True, True, True, False]
    assert (trace["launch_ns"] >= trace["enqueue_ns"]).all()
    assert trace.loc[0, "duration_ns"] == 500_000


# ---------------------------------------------------------------------------------------------
# Joining a run
# ---------------------------------------------------------------------------------------------


def test_a_client_that_cannot_join_exits_when_strict(harness: Harness, tmp_path: Path):
    env = with_preload(
        {"ORION_RUN": "/orion-0-missing", "ORION_CLIENT": "0", "ORION_STRICT": "1"},
        preload_library_path(),
    )
    result = harness.run("func k 1 launch k 1 1 0", env=env, log=tmp_path / "log")
    assert result.returncode == 70
    assert "cannot join run" in result.stderr
    env["ORION_STRICT"] = "0"
    result = harness.run("func k 1 launch k 1 1 0", env=env, log=tmp_path / "log")
    assert result.returncode == 0
    assert "passing every call through" in result.stderr


def test_a_second_process_with_the_same_client_index_passes_through(harness, tmp_path):
    with SchedulerRun(settings("passthrough")) as run:
        index = run.add_client("job", "be")
        run.publish()
        env = run.client_environment(index)
        # The first holds its slot (its kernel runs until released) while the second runs.
        hold = HeldKernel("k", tmp_path / "release-first")
        first = harness.start("func k 1 launch k 1 1 0 sync 0", env={**env, **hold.env()})
        try:
            wait_for(lambda: run.stats()["job"]["launches"] == 1, what="the first's launch")
            # e.g. a compiler worker that inherited its parent's environment
            second = harness.run("func k 1 launch k 1 1 0", env=env)
            assert second.returncode == 0
            hold.release()
            assert first.wait(timeout=10) == 0
        finally:
            if first.poll() is None:
                first.kill()
                first.wait(timeout=10)
        assert run.stats()["job"]["launches"] == 1


def test_shared_memory_is_removed_on_close_and_after_a_dead_controller(tmp_path: Path):
    run = SchedulerRun(settings("orion"))
    path = Path("/dev/shm") / run.name.lstrip("/")
    assert path.exists()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    run.close()
    assert not path.exists()
    # A controller killed by SIGKILL leaves its object behind; the next run removes it.
    leftover = Path("/dev/shm/orion-999999999-deadbeef")
    leftover.write_bytes(b"")
    assert "orion-999999999-deadbeef" in remove_stale_runs()
    assert not leftover.exists()
