"""The daemon's loop closed on the HP's measured slowdown (orion_daemon.latency_control).

What users rely on: a latency target protects the HP, never loosens BE admission past what orion
uses without one; the daemon tightens at once when the HP runs slower than allowed (the BE queue
bound down to its floor, then long BE work held), loosens by small steps once the room is
confirmed (never past the bound the HP's step gives), and says when the target is out of reach;
a target below the HP's latency alone is refused at join with both numbers. Readings are
scripted: no GPU, no clock.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import replace
from pathlib import Path

import pytest

from orion_common.errors import OrionError
from orion_daemon import latency_control
from orion_daemon.admission import JoinRequest
from orion_daemon.latency_control import (
    LOOSEN_AFTER,
    ControlState,
    Reading,
    allowed_slowdown,
    next_control,
    rebound,
)
from orion_daemon.server import Daemon, DaemonSettings
from orion_daemon.status import ClientSample, recent_reading
from scheduler_core import native_module
from scheduler_core.thresholds import (
    FALLBACK_QUEUE_LIMIT_NS,
    MIN_QUEUE_LIMIT_NS,
    UNLEARNED_HP_QUEUE_LIMIT_NS,
)

US = 1_000
GRAPH_PROFILE = (
    Path(__file__).parent.parent
    / "profiles/nvidia-h100-80gb-hbm3/resnet50-infer-bs4-fp32-graph/profile.csv"
)


def run_loop(state: ControlState, means: list[float | None], allowed: float = 1.05):
    """The loop's states after each reading (a mean slowdown without a tail, or none)."""
    states = []
    for mean in means:
        state = next_control(state, None if mean is None else Reading(mean), allowed)
        states.append(state)
    return states


def test_a_slow_hp_tightens_the_bound_at_once_down_to_the_floor_then_holds_long_be_work():
    start = ControlState(queue_limit_ns=32 * US, floor_ns=MIN_QUEUE_LIMIT_NS, ceiling_ns=32 * US)
    states = run_loop(start, [1.3] * 7)
    assert [s.queue_limit_ns for s in states] == [16 * US, 8 * US, 4 * US, 2 * US, 1 * US, 1 * US,
                                                  1 * US]  # fmt: skip
    assert [s.hold_long_be for s in states] == [False] * 5 + [True, True]
    assert states[-1].tightest
    # Out of reach, and said so with both figures.
    shown = latency_control.status(states[-1], 1.05)
    assert shown["state"].startswith("out of reach")
    assert "1.300x of alone (allowed 1.050x)" in shown["state"]


def test_room_loosens_by_quarters_once_confirmed_long_work_first_never_past_the_ceiling():
    tight = ControlState(
        queue_limit_ns=MIN_QUEUE_LIMIT_NS, floor_ns=MIN_QUEUE_LIMIT_NS, ceiling_ns=2 * US,
        hold_long_be=True,
    )  # fmt: skip
    states = run_loop(tight, [1.0] * (4 * LOOSEN_AFTER))
    # Nothing moves before LOOSEN_AFTER readings in a row with room; then long work first.
    assert [s.hold_long_be for s in states[: LOOSEN_AFTER - 1]] == [True] * (LOOSEN_AFTER - 1)
    assert not states[LOOSEN_AFTER - 1].hold_long_be
    assert states[LOOSEN_AFTER - 1].queue_limit_ns == MIN_QUEUE_LIMIT_NS
    # then a quarter more at each reading while the room lasts, up to the ceiling and no further
    limits = [s.queue_limit_ns for s in states[LOOSEN_AFTER:]]
    assert limits[:4] == [1250, 1562, 1952, 2000]
    assert set(limits[3:]) == {2 * US}


def test_a_step_too_far_costs_one_reading_and_the_room_is_confirmed_again():
    start = ControlState(queue_limit_ns=8 * US, floor_ns=MIN_QUEUE_LIMIT_NS, ceiling_ns=64 * US)
    readings = [1.0] * (LOOSEN_AFTER + 1) + [1.2] + [1.0] * LOOSEN_AFTER
    states = run_loop(start, readings)
    limits = [s.queue_limit_ns for s in states]
    assert limits[LOOSEN_AFTER - 1 : LOOSEN_AFTER + 1] == [10 * US, 12500]
    assert limits[LOOSEN_AFTER + 1] == 6250  # halved at once by the one reading over
    # after it, LOOSEN_AFTER readings with room again before the next step
    assert limits[LOOSEN_AFTER + 2 : -1] == [6250] * (LOOSEN_AFTER - 1)
    assert limits[-1] == 7812


def test_readings_in_the_band_or_missing_change_nothing_and_reset_the_count():
    start = ControlState(queue_limit_ns=8 * US, floor_ns=MIN_QUEUE_LIMIT_NS, ceiling_ns=32 * US)
    # Allowed 1.05: above it tightens, under 1.025 has room, between is the hysteresis band.
    readings = [1.0] * (LOOSEN_AFTER - 1) + [1.04, None] + [1.0] * (LOOSEN_AFTER - 1)
    states = run_loop(start, readings)
    assert all(s.queue_limit_ns == 8 * US for s in states)
    assert states[LOOSEN_AFTER - 1].room_readings == 0  # the band reading reset the count
    assert next_control(states[-1], Reading(1.0), 1.05).queue_limit_ns == 10 * US


def test_out_of_reach_the_loop_keeps_the_hp_within_the_allowed_share_of_its_floor():
    # Time-sliced, every HP request that finds BE resident pays a context switch, however tightly
    # BE is held: the tightest setting still reads 1.2. Holding BE there buys the HP nothing, so
    # the loop gives BE what keeps the HP within 5% of that floor, and tightens past it.
    tightest = ControlState(
        queue_limit_ns=MIN_QUEUE_LIMIT_NS, floor_ns=MIN_QUEUE_LIMIT_NS, ceiling_ns=64 * US,
        hold_long_be=True,
    )  # fmt: skip
    states = run_loop(tightest, [1.2] * (LOOSEN_AFTER + 3))
    assert states[0].floor_reading == pytest.approx(1.2)
    assert not states[LOOSEN_AFTER - 1].hold_long_be  # 1.2 has room over a floor of 1.2
    assert [s.queue_limit_ns for s in states[LOOSEN_AFTER:]] == [1250, 1562, 1952]
    shown = latency_control.status(states[-1], 1.05)
    assert shown["state"] == (
        "out of reach: with BE held as far as orion can, the HP is still 1.200x of alone "
        "(allowed 1.050x); BE gets what keeps it within 5.0% of that"
    )
    assert shown["floor_slowdown"] == pytest.approx(1.2)
    # 1.25 is in the band over a floor of 1.2 (1.23 to 1.26): nothing moves; 1.27 tightens
    band = next_control(states[-1], Reading(1.25), 1.05)
    assert (band.queue_limit_ns, band.room_readings) == (1952, 0)
    assert (
        next_control(band, Reading(1.27), 1.05).queue_limit_ns == MIN_QUEUE_LIMIT_NS
    )  # 1952 halved, floored


def test_a_tail_is_harm_whatever_the_floor_and_never_moves_it():
    # More than 1% of the HP's felt launches at 2x or more: a wait that holding BE is for, which
    # a floor read from means (every request's context switch) must not excuse.
    held = ControlState(
        queue_limit_ns=8 * US, floor_ns=MIN_QUEUE_LIMIT_NS, ceiling_ns=32 * US,
        floor_reading=1.2,
    )  # fmt: skip
    tailed = next_control(held, Reading(1.1, tail=2.0), 1.05)
    assert tailed.queue_limit_ns == 4 * US and tailed.last_over
    assert tailed.floor_reading == 1.2  # a tailed reading's mean says nothing of the floor
    assert tailed.last_slowdown == 2.0  # what status shows: the larger figure
    tightest = replace(held, queue_limit_ns=MIN_QUEUE_LIMIT_NS, hold_long_be=True)
    assert next_control(tightest, Reading(1.0, tail=2.5), 1.05).floor_reading == 1.2
    assert latency_control.status(tailed, 1.05)["state"].startswith("out of reach")


def test_the_floor_follows_readings_down_and_is_unknown_until_the_tightest_setting():
    loose = ControlState(queue_limit_ns=8 * US, floor_ns=MIN_QUEUE_LIMIT_NS, ceiling_ns=32 * US)
    assert all(s.floor_reading is None for s in run_loop(loose, [1.0, 1.04, 1.3]))
    held = replace(loose, floor_reading=1.3)
    lower = run_loop(held, [1.1, 1.1])
    assert lower[0].floor_reading == pytest.approx(1.3 - 0.25 * 0.2)  # pulled down, not reset
    assert lower[1].floor_reading < lower[0].floor_reading
    assert (
        next_control(held, Reading(1.5), 1.05).floor_reading == 1.3
    )  # away from the tightest: kept
    assert latency_control.status(replace(held, floor_reading=1.04), 1.05)["state"] == (
        "no reading yet"
    )  # a floor within the target: the target is reachable


def test_a_target_asks_for_more_protection_never_for_less():
    assert allowed_slowdown(None, 1.3) == pytest.approx(1.05)
    assert allowed_slowdown(2.6, 1.2) == pytest.approx(1.05)  # a loose target: orion's own goal
    assert allowed_slowdown(1.33, 1.3) == pytest.approx(1.33 / 1.3)  # a tight one: its own
    assert allowed_slowdown(2.0, None) == pytest.approx(1.05)  # nothing known alone yet


def test_new_bounds_keep_what_the_loop_tightened_and_follow_an_untouched_bound():
    untouched = ControlState(queue_limit_ns=50 * US, floor_ns=1 * US, ceiling_ns=50 * US)
    assert rebound(untouched, 30 * US, 1 * US).queue_limit_ns == 30 * US
    tightened = ControlState(queue_limit_ns=4 * US, floor_ns=1 * US, ceiling_ns=50 * US)
    moved = rebound(tightened, 30 * US, 1 * US)
    assert (moved.queue_limit_ns, moved.ceiling_ns) == (4 * US, 30 * US)


@pytest.fixture
def daemon(tmp_path):
    serving = Daemon(DaemonSettings(gpu=0, sm_count=132, folder=tmp_path / "gpu0",
                                    sharing="timeslice", memory_bytes=8 << 30))  # fmt: skip
    with serving.running():
        yield serving


def feed(daemon: Daemon, slot: int, slowdown: float) -> None:
    """One control period of HP samples at ``slowdown``, then one step of the daemon's loop
    (what its sampling tick does every CONTROL_PERIOD_S)."""
    samples = daemon.clients[slot].samples
    last = samples[-1] if samples else ClientSample(0.0, 0)
    expected = 10_000_000  # 10 ms of timed HP launches per period
    samples.append(
        ClientSample(
            time_s=last.time_s + latency_control.CONTROL_PERIOD_S,
            launches=last.launches + 100,
            sampled_ns=last.sampled_ns + int(expected * slowdown),
            sampled_expected_ns=last.sampled_expected_ns + expected,
        )
    )
    daemon._control_latency()


def test_the_daemon_applies_the_loop_to_the_shared_state(daemon):
    joined = daemon._admit(
        JoinRequest(role="hp", name="serve", profile=str(GRAPH_PROFILE), latency_target_ms=3.0),
        os.getpid(),
    )
    slot = joined["slot"]
    ceiling = daemon.queue_limit_ns
    header = daemon._scheduler._run
    assert ceiling is not None and header.queue_limit_ns == ceiling
    for _ in range(2):
        feed(daemon, slot, 1.0)  # no room counted yet: first samples set the start
    feed(daemon, slot, 1.4)
    assert header.queue_limit_ns == ceiling // 2  # what BE clients read at their next launch
    # An unknown kernel still counts as long as before: HP work nobody knows must not count as
    # finished sooner because BE is held tighter.
    assert daemon._scheduler.settings.unknown_duration_ns == ceiling
    while header.queue_limit_ns > MIN_QUEUE_LIMIT_NS:
        feed(daemon, slot, 1.4)
    assert not header.hold_long_be
    feed(daemon, slot, 1.4)
    assert header.hold_long_be  # the gate keeper now holds long BE work
    assert daemon.status()["latency_control"]["state"] == "tightening"
    feed(daemon, slot, 1.4)  # the first reading at the tightest setting: out of reach, and said
    shown = daemon.status()["latency_control"]
    assert shown["state"].startswith("out of reach") and shown["hold_long_be"]
    assert shown["floor_slowdown"] == pytest.approx(1.4)
    for _ in range(LOOSEN_AFTER):
        feed(daemon, slot, 1.0)
    assert not header.hold_long_be
    for _ in range(200):
        feed(daemon, slot, 1.0)
    assert header.queue_limit_ns == ceiling  # back, and no further
    assert daemon.status()["latency_control"]["state"] == "within the target"


def test_a_target_below_the_hp_alone_is_refused_at_join_with_both_numbers(daemon):
    with pytest.raises(OrionError) as refused:
        daemon._admit(
            JoinRequest(role="hp", name="serve", profile=str(GRAPH_PROFILE),
                        latency_target_ms=0.5),
            os.getpid(),
        )  # fmt: skip
    assert "latency target 0.5 ms is below this HP's latency alone, 1.3" in refused.value.message
    assert daemon.clients == {}


def test_an_hp_joining_with_nothing_known_gets_a_tight_bound_until_it_is_learned(daemon):
    assert daemon.status()["queue_limit_us"] is None
    daemon._admit(JoinRequest(role="hp", name="serve"), os.getpid())
    assert daemon.status()["queue_limit_us"] == UNLEARNED_HP_QUEUE_LIMIT_NS / 1e3
    assert daemon._scheduler._run.queue_limit_ns == UNLEARNED_HP_QUEUE_LIMIT_NS


def test_an_eager_hps_bound_stays_where_the_loop_put_it_between_readings(daemon, monkeypatch):
    # An eager HP (no graph, so no step) learned: its bound is the fallback and the loop starts
    # from it. The daemon samples its clients more often than the loop reads them; a sample
    # must not put the fallback back over what the loop tightened (on an H200 it did, every
    # sample: the suite's eager encoder service ran at 50 us while the loop said 1 us).
    joined = daemon._admit(JoinRequest(role="hp", name="serve"), os.getpid())
    slot = joined["slot"]
    kernels = [{"graph": False, "launches": 1000, "duration_ns": 20_000}]
    monkeypatch.setattr(daemon._scheduler, "learned", lambda _slot: kernels)
    daemon._follow_learned_hp()
    header = daemon._scheduler._run
    assert header.queue_limit_ns == FALLBACK_QUEUE_LIMIT_NS
    for _ in range(2):
        feed(daemon, slot, 1.0)
    feed(daemon, slot, 1.4)
    tightened = header.queue_limit_ns
    assert tightened == FALLBACK_QUEUE_LIMIT_NS // 2
    daemon._follow_learned_hp()  # a sampling tick between two readings
    assert header.queue_limit_ns == tightened
    assert daemon.status()["queue_limit_us"] == tightened / 1e3


def test_at_its_tightest_the_keeper_holds_long_be_work_until_the_hp_is_quiet(harness, tmp_path):
    # An eager HP request: 50-us kernels launched about 0.5 ms apart, so between two of them
    # the HP has no work on the GPU, where `reef` lets BE in. A BE kernel profiled at 5 ms
    # (longer than the 2.5-ms bound) is held through all of them: it starts only once the HP has
    # launched nothing for 2 ms.
    from native_harness import MS, kernel_table, read_log

    from scheduler_core import SchedulerRun, SchedulerSettings

    settings = SchedulerSettings(
        policy="reef", sm_count=132, queue_limit_ns=int(2.5 * MS),
        unknown_duration_ns=int(2.5 * MS), hp_completion="gpu-write", be_gate="gpu",
        trace_capacity=2048,  # the HP's launches as the library stamped them (its quiet clock)
    )  # fmt: skip
    # Warmed up first: a first launch sets up completion tracking, so it is stamped well before it
    # reaches the driver.
    request = "repeat 800 launch h 8 64 0 sleep 500 end"
    hp_script = f"func h 50 launch h 8 64 0 sync 0 say go {request} sync 0"
    with SchedulerRun(settings) as run:
        hp = run.add_client("hp", "hp", kernel_table(("h", 8, 64, 8, "compute", 0.05)))
        be = run.add_client("be", "be", kernel_table(("bek", 8, 128, 8, "memory", 5)))
        run.publish()
        run.set_hold_long_be(True)
        hp_process = harness.start(hp_script, env=run.client_environment(hp),
                                   log=tmp_path / "hp.log")  # fmt: skip
        try:
            assert hp_process.stdout.readline().strip() == "go"
            be_script = "func bek 5000 launch bek 8 128 0 sync 0"
            result = harness.run(be_script, env=run.client_environment(be),
                                 log=tmp_path / "be.log")  # fmt: skip
            assert result.returncode == 0, result.stderr
            assert hp_process.wait(timeout=60) == 0
            long_holds = run._run.gate_stats()["long_holds"]
            trace = run.drain_trace()
        finally:
            hp_process.kill()
            hp_process.wait(timeout=10)
    hp_launches = [e.time_ns for e in read_log(tmp_path / "hp.log") if e.kind == "launch"]
    be_launch = next(e.time_ns for e in read_log(tmp_path / "be.log") if e.kind == "launch")
    be_start = next(e.time_ns for e in read_log(tmp_path / "be.log") if e.kind == "exec_start")
    assert be_launch < hp_launches[-1]  # BE asked while the HP request went on
    assert long_holds >= 1
    # It ran only once the HP had been quiet: the gate opened at some moment, no later than BE's
    # start, when the HP had launched nothing for 2 ms by the library's own stamps (the clock the
    # keeper reads, not the stand-in's log, which a busy machine delays). Quiet moments come in
    # stretches from 2 ms after one HP launch to the next; the first of each at or after BE asked
    # stands for the stretch; so does the end of the request (the HP then synchronises and
    # exits, and a gone HP holds nobody). `reef` alone would let it in at the end of any 50-us
    # HP kernel, hundreds of milliseconds before the request ends.
    assert not trace.attrs["records_lost"]
    stamps = sorted(trace.loc[trace["client"] == "hp", "launch_ns"].tolist())
    assert len(stamps) == 801  # the warm-up launch and the request's 800

    def quiet_at(moment: int) -> bool:
        return not any(moment - 2 * MS < stamp <= moment for stamp in stamps)

    candidates = [be_launch, *(stamp + 2 * MS for stamp in stamps)]
    quiet_before_start = any(
        quiet_at(moment) for moment in candidates if be_launch <= moment <= be_start
    )
    assert quiet_before_start or be_start > stamps[-1], (
        "BE started inside the HP's request before the HP had been quiet for 2 ms"
    )


def test_the_loop_reads_the_slowdown_as_felt_where_it_was_measured():
    def samples(*periods: tuple[float, float, float | None]) -> list[ClientSample]:
        """Cumulative counters after each (end time, GPU-time slowdown, felt slowdown) period,
        10 ms of expected work per second."""
        out = [ClientSample(0.0, 0)]
        for end, gpu, felt in periods:
            last = out[-1]
            expected = int((end - last.time_s) * 1e7)
            out.append(
                ClientSample(
                    end, last.launches + 100,
                    last.sampled_ns + int(expected * gpu), last.sampled_expected_ns + expected,
                    last.felt_ns + int(expected * (felt or 0)),
                    last.felt_expected_ns + (expected if felt else 0),
                )
            )  # fmt: skip
        return out

    # The GPU time of the HP's launches reads as alone; from call to end they took twice as long.
    assert recent_reading(samples((2, 1.0, 2.0), (4, 1.0, 2.0)), 2.0).value == pytest.approx(2.0)
    # No launch timed as felt in the span: the GPU-time figure.
    assert recent_reading(samples((2, 1.2, None), (4, 1.2, None)), 2.0).value == pytest.approx(1.2)
    # Only the last period counts.
    assert recent_reading(samples((2, 3.0, 3.0), (4, 1.0, 1.0)), 2.0).value == pytest.approx(1.0)


def test_the_loop_reads_the_felt_tail_where_more_than_one_percent_is_slow():
    # A p99 target is about the slowest 1%: 3% of the felt samples slower than 4x alone moves the
    # reading to 4 even though the mean reads about as alone; 0.5% does not, nor does a tail
    # below 2x (alone jitter), nor a window of too few samples to say.
    def window(samples: int, slow: list[float], mean: float = 0.95) -> list[ClientSample]:
        """A window of `samples` felt samples, `slow` the ratios of those slower than alone."""
        expected = 10_000_000
        ratios = native_module().FELT_TAIL_RATIOS
        return [
            ClientSample(0.0, 0, felt_slower=(0,) * len(ratios)),
            ClientSample(
                2.0, 100, felt_ns=int(expected * mean), felt_expected_ns=expected,
                felt_samples=samples,
                felt_slower=tuple(sum(x > r for x in slow) for r in ratios),
            ),
        ]  # fmt: skip

    assert recent_reading(window(200, [5.0] * 6 + [1.6] * 6), 2.0).value == pytest.approx(4.0)
    assert recent_reading(window(200, [5.0] + [2.2] * 5 + [1.6] * 6), 2.0).value == pytest.approx(
        2.0
    )
    assert recent_reading(window(200, [5.0]), 2.0).value == pytest.approx(0.95)
    assert recent_reading(window(200, [1.6] * 20 + [1.3] * 20), 2.0).value == pytest.approx(0.95)
    assert recent_reading(window(20, [5.0] * 20), 2.0).value == pytest.approx(0.95)


def test_status_bounds_the_felt_p99_from_below_within_one_step():
    # 3% of 200 felt samples at 1.4x alone, the rest as alone: the p99 is 1.4x, and the status
    # says at least 1.35x (the largest of the library's ratios more than 1% exceeded); with none
    # slower than the smallest ratio, 1.0; with too few samples, nothing.
    from scheduler_core.profile_sources import felt_p99, felt_tail

    ratios = native_module().FELT_TAIL_RATIOS
    steps = [b / a for a, b in itertools.pairwise(ratios) if b <= 3.0]
    assert max(steps) <= 1.25  # so the bound is within 20% of the p99 it bounds, up to 3x

    def counts(slow: list[float]) -> list[int]:
        return [sum(x > r for x in slow) for r in ratios]

    assert felt_p99(felt_tail(200, counts([1.4] * 6))) == pytest.approx(1.35)
    assert felt_p99(felt_tail(200, counts([1.4] * 2))) == pytest.approx(1.0)  # 1%: not more
    assert felt_p99(felt_tail(200, counts([]))) == pytest.approx(1.0)
    assert felt_p99(felt_tail(20, counts([1.4] * 6))) is None


def test_a_shared_tail_is_read_against_the_hps_own_tail_alone():
    # The HP's launches alone scatter: 3% of them at 1.25x (host wake-ups). Beside BE, 3% at
    # 1.6x. Against 1.0 the shared p99 reads 1.5x or more; against the HP's own tail alone,
    # about 1.3x: what BE added. Interpolated between the library's ratios, so two tails one
    # step apart still read apart.
    from orion_daemon.status import ClientSample, felt_p99_over_alone
    from scheduler_core.profile_sources import felt_tail, tail_quantile

    ratios = native_module().FELT_TAIL_RATIOS

    def counts(slow: list[float]) -> tuple[int, ...]:
        return tuple(sum(x > r for x in slow) for r in ratios)

    alone = counts([1.25] * 6)  # of 200
    alone_p99 = tail_quantile(felt_tail(200, alone))
    assert 1.2 < alone_p99 < 1.35
    shared_p99 = tail_quantile(felt_tail(200, counts([1.6] * 6)))
    assert 1.5 < shared_p99 < 1.75
    assert tail_quantile(felt_tail(200, counts([]))) == 1.0
    assert tail_quantile(felt_tail(200, counts([9.0] * 6))) == max(ratios)
    assert tail_quantile(None) is None

    def sample(time_s: float, shared: tuple[int, ...], felt: int) -> ClientSample:
        return ClientSample(time_s, 0, felt_samples=felt, felt_slower=shared,
                            felt_alone_samples=200, felt_alone_slower=alone)  # fmt: skip

    zero = counts([])
    later = tuple(a + b for a, b in zip(alone, counts([1.6] * 6), strict=True))
    shown_alone, over = felt_p99_over_alone([sample(0.0, alone, 200), sample(2.0, later, 400)])
    assert shown_alone == pytest.approx(alone_p99)
    assert over == pytest.approx(shared_p99 / alone_p99)
    assert 1.2 < over < 1.4
    # no alone baseline yet (an HP that joined beside busy BE): nothing to read against
    empty = ClientSample(2.0, 0, felt_samples=400, felt_slower=later)
    assert felt_p99_over_alone([ClientSample(0.0, 0, felt_slower=zero), empty]) == (None, None)


def test_whole_requests_are_read_against_the_hps_requests_alone():
    # 200 requests timed over the window, 6 of them (3%) at 1.6x the alone median; the HP's
    # requests alone scatter, 3% at 1.25x. Their mean slowdown is what the request time sums
    # say; their p99 over the p99 alone about 1.3x; before any request ran alone, nothing but
    # the count of requests timed.
    from orion_daemon.status import request_figures

    ratios = native_module().FELT_TAIL_RATIOS

    def counts(slow: list[float]) -> tuple[int, ...]:
        return tuple(sum(x > r for x in slow) for r in ratios)

    zero = (0,) * len(ratios)
    first = ClientSample(0.0, 0, request_slower=zero, requests_timed=3)
    last = ClientSample(
        2.0, 100, requests_timed=203, request_ns=226_000_000, request_expected_ns=200_000_000,
        request_samples=200, request_slower=counts([1.6] * 6), request_alone_samples=200,
        request_alone_slower=counts([1.25] * 6),
    )  # fmt: skip
    figures = request_figures([first, last])
    assert figures["requests_timed"] == 203
    assert figures["request_slowdown"] == pytest.approx(1.13)
    assert figures["request_p99"] == pytest.approx(1.5)  # from below: the largest ratio passed
    assert 1.2 < figures["request_alone_p99"] < 1.35
    assert 1.1 < figures["request_p99_over_alone"] < 1.45
    never_alone = replace(
        last, request_ns=0, request_expected_ns=0, request_samples=0, request_slower=zero,
        request_alone_samples=0, request_alone_slower=zero,
    )  # fmt: skip
    figures = request_figures([first, never_alone])
    assert figures["requests_timed"] == 203
    assert {k: v for k, v in figures.items() if k != "requests_timed"} == dict.fromkeys(
        ("request_slowdown", "request_p99", "request_alone_p99", "request_p99_over_alone")
    )
    assert request_figures([])["requests_timed"] == 0


def test_a_loop_reading_requests_reads_them_where_they_were_timed_and_launches_elsewhere():
    # The same two seconds: the felt launches read 1.06 (a decoder's step beside BE), its
    # requests timed whole 1.02 against its requests alone. Reading launches (the default) the
    # loop sees 1.06; reading requests, 1.02, and the requests' own tail, not the launches'.
    ratios = native_module().FELT_TAIL_RATIOS
    zero = (0,) * len(ratios)
    first = ClientSample(0.0, 0, felt_slower=zero, request_slower=zero)
    two_x = tuple(3 if r <= 2.0 else 0 for r in ratios)  # 3 of 100 above 2x
    last = ClientSample(
        2.0, 500, felt_ns=1_060_000, felt_expected_ns=1_000_000, felt_samples=100,
        felt_slower=zero, request_ns=10_200_000, request_expected_ns=10_000_000,
        request_samples=100, request_slower=two_x,
    )  # fmt: skip
    assert recent_reading([first, last], 2.0) == latency_control.Reading(1.06, None)
    assert recent_reading([first, last], 2.0, reads="launches").mean == pytest.approx(1.06)
    by_requests = recent_reading([first, last], 2.0, reads="requests")
    assert by_requests.mean == pytest.approx(1.02) and by_requests.tail == 2.0
    # No request compared with one alone in the span (none ran alone yet): the launches.
    untimed = replace(last, request_ns=0, request_expected_ns=0, request_samples=0,
                      request_slower=zero)  # fmt: skip
    assert recent_reading([first, untimed], 2.0, reads="requests").mean == pytest.approx(1.06)


def test_the_loop_reading_is_a_declared_choice_of_the_daemon():
    assert DaemonSettings(gpu=0, sm_count=1, folder=Path(".")).loop_reads == "launches"
    chosen = DaemonSettings(gpu=0, sm_count=1, folder=Path("."), loop_reads="requests")
    assert chosen.loop_reads == "requests"
    with pytest.raises(OrionError, match="loop_reads"):
        DaemonSettings(gpu=0, sm_count=1, folder=Path("."), loop_reads="p99")
