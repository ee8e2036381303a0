"""Bootstrap intervals against answers known in advance: a quantile of a known distribution and
its asymptotic spread, ratios that are 1 or exactly 2 by construction, and determinism."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from reporting.metrics import percentile_summary
from reporting.stats import (
    as_sample,
    bootstrap_percentile_ci,
    interval_half_width,
    mean_statistic,
    paired_ratio_over_rounds_ci,
    per_resample,
    percentile_statistic,
    ratio_over_rounds_ci,
    throughput_statistic,
)

SCALE_MS = 2.0
TRUE_P99 = -math.log(0.01) * SCALE_MS  # exponential: F(x) = 1 - exp(-x / scale)


def _exponential(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).exponential(SCALE_MS, n)


def test_p99_interval_of_a_large_exponential_sample_has_the_truth_and_asymptotic_width() -> None:
    n = 20_000
    point, lo, hi = bootstrap_percentile_ci(_exponential(n, seed=7), q=99)
    assert lo < TRUE_P99 < hi
    assert lo < point < hi
    # Asymptotically a sample quantile is normal with sd sqrt(p(1-p)/n) / f(x_p); for the
    # exponential f(x_p) = (1 - p) / scale, so sd = scale * sqrt(p / ((1 - p) n)).
    sd = SCALE_MS * math.sqrt(0.99 / (0.01 * n))
    expected_width = 2 * 1.959964 * sd
    assert expected_width / 1.5 < hi - lo < expected_width * 1.5


def test_p99_interval_covers_the_truth_in_most_repeats():
    """Coverage, coarsely: of 20 independent samples of 5000, the 95% interval should miss the
    true p99 about once; more than four misses would be a broken interval (binomial p < 0.003)."""
    misses = 0
    for seed in range(20):
        _, lo, hi = bootstrap_percentile_ci(_exponential(5000, seed=100 + seed), resamples=500)
        misses += not lo <= TRUE_P99 <= hi
    assert misses <= 4


def test_point_is_the_same_percentile_the_summaries_report():
    values = np.arange(1.0, 101.0)
    point, lo, hi = bootstrap_percentile_ci(values, q=99)
    assert point == pytest.approx(percentile_summary(values)["p99_ms"]) == pytest.approx(99.01)
    assert lo <= point <= hi <= 100.0


def test_deterministic_for_a_seed_and_different_across_seeds():
    values = _exponential(3000, seed=1)
    assert bootstrap_percentile_ci(values, seed=3) == bootstrap_percentile_ci(values, seed=3)
    assert bootstrap_percentile_ci(values, seed=3) != bootstrap_percentile_ci(values, seed=4)
    pairs = [(values, _exponential(3000, seed=2))]
    stat = percentile_statistic(99)
    assert ratio_over_rounds_ci(pairs, stat, seed=5) == ratio_over_rounds_ci(pairs, stat, seed=5)


def test_nan_values_are_ignored_and_empty_or_single_samples_are_handled():
    values = np.concatenate([np.arange(1.0, 101.0), [np.nan, np.nan]])
    assert bootstrap_percentile_ci(values) == bootstrap_percentile_ci(np.arange(1.0, 101.0))
    assert all(math.isnan(v) for v in bootstrap_percentile_ci([]))
    assert bootstrap_percentile_ci([4.0]) == (4.0, 4.0, 4.0)


@pytest.mark.parametrize(
    "kwargs", [{"q": 101}, {"confidence": 1.0}, {"confidence": 0.0}, {"resamples": 0}]
)
def test_bad_arguments_are_refused(kwargs) -> None:
    with pytest.raises(ValueError):
        bootstrap_percentile_ci([1.0, 2.0, 3.0], **kwargs)


def test_ratio_of_two_samples_of_one_distribution_contains_one():
    pairs = [(_exponential(5000, seed=11), _exponential(5000, seed=12))]
    point, lo, hi = ratio_over_rounds_ci(pairs, percentile_statistic(99))
    assert lo < 1.0 < hi
    assert lo < point < hi


def test_rounds_scaled_by_exactly_two_give_two():
    """Each round's shared sample is its dedicated sample doubled, so every per-round ratio is
    exactly 2 and so is their geometric mean; the interval, from independent resamples of the
    two, still has width and still contains 2."""
    rounds = [_exponential(4000, seed=20 + r) * (1 + 0.3 * r) for r in range(3)]
    pairs = [(2.0 * alone, alone) for alone in rounds]
    point, lo, hi = ratio_over_rounds_ci(pairs, percentile_statistic(99))
    assert point == pytest.approx(2.0, rel=1e-12)
    assert lo < 2.0 < hi


def test_point_is_the_geometric_mean_of_the_per_round_ratios():
    alone = np.arange(1.0, 1001.0)
    pairs = [(0.5 * alone, alone), (2.0 * alone, alone), (4.0 * alone, alone)]
    point, _, _ = ratio_over_rounds_ci(pairs, percentile_statistic(50), resamples=10)
    assert point == pytest.approx((0.5 * 2.0 * 4.0) ** (1 / 3))


def test_one_round_is_the_within_run_bootstrap_of_the_ratio():
    shared, alone = _exponential(3000, seed=31), _exponential(3000, seed=32)
    one_round = ratio_over_rounds_ci([(shared, alone)], percentile_statistic(99), seed=9)
    # The same draws by hand: picks of the (only) round, then the shared and alone resamples.
    rng = np.random.default_rng(9)
    rng.integers(0, 1, size=(2000, 1))
    stat = percentile_statistic(99)
    num = stat(shared[rng.integers(0, 3000, size=(2000, 3000))])
    den = stat(alone[rng.integers(0, 3000, size=(2000, 3000))])
    lo, hi = np.percentile(num / den, [2.5, 97.5])
    assert one_round[1:] == pytest.approx((lo, hi))


def test_runs_that_served_the_same_requests_are_compared_request_by_request():
    """Two runs of the same arrivals: where a request queued in one it queued in the other. The
    shared run is each request 10% slower plus a little noise of its own. Paired, the shared
    noise of the arrivals cancels and the interval is narrow around 1.1; the independent
    bootstrap of the same values is several times wider, though both hold 1.1."""
    rng = np.random.default_rng(5)
    alone = _exponential(4000, seed=50)
    shared = alone * 1.1 * rng.normal(1.0, 0.02, alone.size)
    stat = percentile_statistic(99)
    paired = paired_ratio_over_rounds_ci([np.column_stack([shared, alone])], stat)
    unpaired = ratio_over_rounds_ci([(shared, alone)], stat)
    assert paired[0] == pytest.approx(unpaired[0])
    assert paired[1] < 1.1 < paired[2] and unpaired[1] < 1.1 < unpaired[2]
    assert (paired[2] - paired[1]) * 3 < unpaired[2] - unpaired[1]


def test_paired_rounds_take_rows_of_two_and_an_empty_round_is_unknown():
    stat = percentile_statistic(99)
    with pytest.raises(ValueError, match="rows of"):
        paired_ratio_over_rounds_ci([np.ones(10)], stat)
    assert all(math.isnan(v) for v in paired_ratio_over_rounds_ci([np.empty((0, 2))], stat))
    rows = np.column_stack([np.arange(1.0, 101.0) * 2, np.arange(1.0, 101.0)])
    assert paired_ratio_over_rounds_ci([rows, rows], stat)[0] == pytest.approx(2.0)


def test_spread_between_rounds_widens_the_interval():
    """Rounds whose ratios differ (drift) give a wider interval than the same data in one
    round: the between-round level of the bootstrap is doing its job."""
    alone = [_exponential(3000, seed=40 + r) for r in range(4)]
    steady = [(a * 1.2, a) for a in alone]
    drifting = [(a * f, a) for a, f in zip(alone, (0.9, 1.1, 1.3, 1.6), strict=True)]
    _, lo_s, hi_s = ratio_over_rounds_ci(steady, percentile_statistic(99))
    _, lo_d, hi_d = ratio_over_rounds_ci(drifting, percentile_statistic(99))
    assert hi_d - lo_d > 2 * (hi_s - lo_s)


def test_throughput_ratio_from_rows_of_durations_and_samples():
    """A BE job twice as fast shared (half the iteration time, same samples) has throughput
    ratio 2; rows come as an array or a DataFrame of (duration, samples)."""
    rng = np.random.default_rng(50)
    durations = rng.uniform(0.02, 0.04, 1500)
    alone = pd.DataFrame({"duration_s": durations, "samples": 32.0})
    shared = np.column_stack([durations / 2.0, np.full(1500, 32.0)])
    point, lo, hi = ratio_over_rounds_ci([(shared, alone)], throughput_statistic)
    assert point == pytest.approx(2.0)
    assert lo < 2.0 < hi
    assert hi / lo < 1.05  # 1500 iterations pin a throughput down to about a percent


def test_a_per_sample_function_works_like_the_batched_statistic():
    values = _exponential(500, seed=60)
    pairs = [(values * 1.1, values)]
    batched = ratio_over_rounds_ci(pairs, percentile_statistic(90), resamples=200)
    lifted = ratio_over_rounds_ci(
        pairs, per_resample(lambda s: float(np.percentile(s, 90))), resamples=200
    )
    assert batched == pytest.approx(lifted)


def test_ratio_with_an_empty_sample_is_unknown():
    assert all(math.isnan(v) for v in ratio_over_rounds_ci([([], [1.0])], percentile_statistic(99)))
    assert all(math.isnan(v) for v in ratio_over_rounds_ci([], percentile_statistic(99)))


def test_rows_with_a_missing_value_are_dropped_and_half_width_is_relative():
    rows = as_sample(pd.DataFrame({"a": [1.0, np.nan, 3.0], "b": [1.0, 2.0, 3.0]}))
    assert rows.tolist() == [[1.0, 1.0], [3.0, 3.0]]
    assert interval_half_width((100.0, 96.0, 103.0)) == pytest.approx(0.04)
    assert math.isnan(interval_half_width((float("nan"), 1.0, 2.0)))


def test_a_mean_ratio_of_service_times_twice_as_long_is_two_within_its_interval() -> None:
    rng = np.random.default_rng(3)
    alone = rng.exponential(1.0, 4000) + 1.0
    shared = 2.0 * (rng.exponential(1.0, 4000) + 1.0)
    point, low, high = ratio_over_rounds_ci([(shared, alone)], mean_statistic)
    assert low <= point <= high
    assert low < 2.0 < high
    assert mean_statistic(np.array([[1.0, 3.0], [2.0, 2.0]])).tolist() == [2.0, 2.0]
