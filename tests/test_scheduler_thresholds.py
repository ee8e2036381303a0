"""The default BE queue bound: what an HP request can afford to wait, from its profile and
latency target (scheduler_core.thresholds)."""

from __future__ import annotations

import pandas as pd
import pytest

from scheduler_core.thresholds import (
    FALLBACK_QUEUE_LIMIT_NS,
    MIN_QUEUE_LIMIT_NS,
    alone_latency_ns,
    default_queue_limit_ns,
    target_below_alone_refusal,
    target_below_step_warning,
)

MS = 1_000_000


def hp_step(*durations_ms: float, measured_ms: float | None = None) -> pd.DataFrame:
    """An HP profile's kernels: ncu durations, and the measured one of the first if given."""
    measured: list[float | None] = [None] * len(durations_ms)
    if measured_ms is not None:
        measured[0] = measured_ms * MS
    return pd.DataFrame(
        {"duration_ns": [d * MS for d in durations_ms], "measured_duration_ns": measured}
    )


@pytest.mark.parametrize(
    ("kernels", "target_ms", "limit_ms"),
    [
        # No target: 5% over the step, half of that slack: the Orion paper's 2.5% of the step.
        (hp_step(0.6, 0.4), None, 0.025),
        (hp_step(1.31), None, 0.03275),
        # A target tighter than 5% over the step: half of what it leaves beyond the request's
        # own GPU work.
        (hp_step(1.0), 1.02, 0.01),
        (hp_step(0.5, 0.5), 1.01, 0.005),
        # Measured durations count where the profile has them.
        (hp_step(2.0, 1.0, measured_ms=1.0), 2.01, 0.005),
        # A looser target never loosens the bound: a p99 target is not the step's GPU time plus
        # slack (an H100 HP with a 1.2-ms step, 2.39 ms p99 alone and a 2.6-ms target got a
        # 790-us bound, and 1.83x of its p99 alone).
        (hp_step(1.2), 2.6, 0.03),
        (hp_step(1.0), 40.0, 0.025),
        # Never below the minimum, even for a target below the step (warned about).
        (hp_step(1.0), 0.5, MIN_QUEUE_LIMIT_NS / MS),
    ],
)
def test_the_queue_bound_is_half_the_slack_and_a_target_only_tightens_it(
    kernels, target_ms, limit_ms
):
    target_ns = target_ms * MS if target_ms is not None else None
    assert default_queue_limit_ns(kernels, target_ns) == pytest.approx(limit_ms * MS, abs=1)


def test_without_an_hp_profile_the_bound_is_the_fallback():
    assert default_queue_limit_ns(None, 5 * MS) == FALLBACK_QUEUE_LIMIT_NS
    assert default_queue_limit_ns(hp_step(), None) == FALLBACK_QUEUE_LIMIT_NS


def test_a_target_the_hp_step_cannot_meet_alone_is_warned_about():
    message = target_below_step_warning(hp_step(1.0), 0.8 * MS)
    assert "0.8 ms is not above the HP step's profiled GPU time 1 ms" in message
    assert target_below_step_warning(hp_step(1.0), 1.5 * MS) == ""
    assert target_below_step_warning(None, 0.1 * MS) == ""


def test_a_target_below_the_hp_alone_is_refused_with_both_numbers():
    alone = alone_latency_ns(hp_step(1.0, 0.2), {"step_gpu_span_ns": 1.3 * MS})
    assert alone == 1.3 * MS  # a graph's span on the GPU, when the profile has one
    message = target_below_alone_refusal(alone, 1.1 * MS)
    assert "1.1 ms is below this HP's latency alone, 1.3 ms" in message
    assert target_below_alone_refusal(alone, 2.6 * MS) == ""
    assert target_below_alone_refusal(0.0, 0.1 * MS) == ""  # no profile: nothing to refuse by


def test_an_eager_hp_is_learned_enough_when_nearly_all_its_launches_are():
    # A kernel launched a handful of times may never get its samples; it must not keep the HP's
    # queue bound at its join's forever (the suite's eager encoder: 99.94% of launches learned).
    from scheduler_core.thresholds import learned_enough

    common = {"launches": 99_940, "duration_ns": 40_000}
    rare = {"launches": 60, "duration_ns": 0}
    assert learned_enough([common, rare])
    assert not learned_enough([{"launches": 900, "duration_ns": 40_000}, {"launches": 100}])
    assert not learned_enough([])
    assert not learned_enough([{"launches": 0, "duration_ns": 0}])
