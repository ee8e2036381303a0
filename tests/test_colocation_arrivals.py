"""Arrival schedules: the right rates and distributions, exactly reproducible from a seed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from colocation.arrivals import (
    ArrivalSchedule,
    arrival_offsets,
    derive_seed,
    is_open_loop,
    read_trace_ms,
)
from colocation.config import ClosedArrivals, PoissonArrivals, TraceArrivals, UniformArrivals
from orion_common.errors import OrionError

TRACES = Path(__file__).parent / "data" / "jobs" / "traces"
STEADY_MS = [10.0, 20.0, 0.0, 5.0]  # tests/data/jobs/traces/steady.txt without its comments
N = 20_000


def poisson(rate: float) -> PoissonArrivals:
    return PoissonArrivals(kind="poisson", rate_per_s=rate)


def uniform(rate: float) -> UniformArrivals:
    return UniformArrivals(kind="uniform", rate_per_s=rate)


def trace_of(path: Path, repeat: bool = True) -> TraceArrivals:
    return TraceArrivals(kind="trace", path=path, repeat=repeat)


def ks_exponential(samples: np.ndarray, rate: float) -> float:
    """Kolmogorov-Smirnov distance between the samples and the Exponential(rate) CDF."""
    x = np.sort(samples)
    n = len(x)
    cdf = 1.0 - np.exp(-rate * x)
    above = np.arange(1, n + 1) / n - cdf
    below = cdf - np.arange(0, n) / n
    return float(max(above.max(), below.max()))


# Critical KS value at significance 0.001 is about 1.95 / sqrt(n); with a fixed seed this is a
# deterministic check that still means "statistically indistinguishable from exponential".
KS_BOUND = 1.95 / np.sqrt(N)


@pytest.mark.parametrize("rate", [80.0, 1.5, 2000.0])
@pytest.mark.parametrize("seed", [1, 7])
def test_poisson_gaps_are_exponential_with_the_right_mean(rate: float, seed: int) -> None:
    offsets = arrival_offsets(poisson(rate), seed, count=N)
    assert offsets is not None and len(offsets) == N
    gaps = np.diff(offsets, prepend=0.0)
    assert np.all(gaps >= 0)
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.03)  # coefficient of variation
    assert ks_exponential(gaps, rate) < KS_BOUND


def test_ks_statistic_detects_a_wrong_distribution() -> None:
    """The KS check above is not vacuous: a wrong rate or regular spacing fails it clearly."""
    gaps = np.diff(arrival_offsets(poisson(80), 1, count=N), prepend=0.0)
    assert ks_exponential(gaps, 100.0) > 5 * KS_BOUND
    regular = np.diff(arrival_offsets(uniform(80), 1, count=N + 1))
    assert ks_exponential(regular, 80.0) > 0.3


def test_poisson_counts_per_window_have_poisson_dispersion() -> None:
    rate, horizon = 200.0, 200.0
    offsets = arrival_offsets(poisson(rate), 3, horizon_s=horizon)
    counts = np.bincount(offsets.astype(int), minlength=int(horizon))[: int(horizon)]
    assert len(offsets) == pytest.approx(rate * horizon, abs=4 * np.sqrt(rate * horizon))
    assert counts.var() / counts.mean() == pytest.approx(1.0, abs=0.25)  # index of dispersion


def test_poisson_is_reproducible_and_seed_dependent() -> None:
    a = arrival_offsets(poisson(80), 42, count=1000)
    b = arrival_offsets(poisson(80), 42, count=1000)
    c = arrival_offsets(poisson(80), 43, count=1000)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_poisson_first_arrival_comes_after_the_first_gap() -> None:
    offsets = arrival_offsets(poisson(80), 1, count=10)
    assert offsets[0] > 0
    assert np.all(np.diff(offsets) >= 0)


def test_uniform_spacing_is_exact() -> None:
    rate = 80.0
    offsets = arrival_offsets(uniform(rate), 5, count=N)
    np.testing.assert_array_equal(offsets, np.arange(N) / rate)
    assert offsets[0] == 0.0
    np.testing.assert_allclose(np.diff(offsets), 1 / rate, rtol=1e-9)


def test_uniform_ignores_the_seed() -> None:
    np.testing.assert_array_equal(
        arrival_offsets(uniform(3), 1, count=50), arrival_offsets(uniform(3), 2, count=50)
    )


def test_horizon_keeps_offsets_up_to_and_including_it() -> None:
    offsets = arrival_offsets(uniform(10), 0, horizon_s=1.0)
    np.testing.assert_array_equal(offsets, np.arange(11) / 10)
    assert len(arrival_offsets(uniform(10), 0, horizon_s=0.95)) == 10
    assert len(arrival_offsets(uniform(10), 0, horizon_s=0.0)) == 1  # the one at 0


def test_count_and_horizon_stop_at_whichever_comes_first() -> None:
    assert len(arrival_offsets(uniform(10), 0, count=5, horizon_s=100)) == 5
    assert len(arrival_offsets(uniform(10), 0, count=500, horizon_s=1.0)) == 11
    assert len(arrival_offsets(uniform(10), 0, count=0)) == 0


def test_horizon_and_count_agree_on_the_same_arrivals() -> None:
    """Chunking is internal: a horizon cut and a count cut give bit-identical prefixes."""
    by_count = arrival_offsets(poisson(500), 9, count=30_000)
    by_horizon = arrival_offsets(poisson(500), 9, horizon_s=30.0)
    assert len(by_horizon) > 10_000
    np.testing.assert_array_equal(by_horizon, by_count[: len(by_horizon)])
    assert by_horizon[-1] <= 30.0 < by_count[len(by_horizon)]


def test_trace_reproduced_in_order() -> None:
    path = TRACES / "steady.txt"
    np.testing.assert_array_equal(read_trace_ms(path), STEADY_MS)
    offsets = arrival_offsets(trace_of(path, repeat=False), 1)
    np.testing.assert_allclose(offsets, np.cumsum(STEADY_MS) / 1000, rtol=0, atol=1e-12)


def test_trace_repeats_when_asked() -> None:
    offsets = arrival_offsets(trace_of(TRACES / "steady.txt"), 1, count=4 * 3 + 2)
    period = sum(STEADY_MS) / 1000
    one = np.cumsum(STEADY_MS) / 1000
    expected = np.concatenate([one, one + period, one + 2 * period, one[:2] + 3 * period])
    np.testing.assert_allclose(offsets, expected, rtol=0, atol=1e-12)
    assert np.all(np.diff(offsets) >= 0)


def test_trace_without_repeat_ends_when_exhausted() -> None:
    model = trace_of(TRACES / "steady.txt", repeat=False)
    assert len(arrival_offsets(model, 1, count=100)) == 4
    assert len(arrival_offsets(model, 1, horizon_s=1000.0)) == 4
    assert len(list(ArrivalSchedule(model, 1))) == 4


def test_long_repeating_trace_stays_monotonic(tmp_path: Path) -> None:
    path = tmp_path / "trace.txt"
    path.write_text("0\n1\n")  # a zero gap at each cycle start tempts rounding to go backwards
    offsets = arrival_offsets(trace_of(path), 1, horizon_s=60.0005)
    assert len(offsets) == 60_001 + 60_000  # pairs 1 ms apart: (0, 1 ms), (1 ms, 2 ms), ...
    assert np.all(np.diff(offsets) >= 0)


def test_trace_file_problems_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text("1\n2 3\n")
    with pytest.raises(OrionError, match=r"t\.txt:2: '2 3' is not a number"):
        read_trace_ms(path)
    path.write_text("1\nnan\n")
    with pytest.raises(OrionError, match=r"t\.txt:2: inter-arrival time must be finite"):
        read_trace_ms(path)
    with pytest.raises(OrionError, match="file not found"):
        read_trace_ms(tmp_path / "none.txt")


def test_repeating_all_zero_trace_is_refused_at_schedule_time() -> None:
    # validation refuses it too; this guards models built without validation context
    model = TraceArrivals.model_construct(kind="trace", path=TRACES / "zeros.txt", repeat=True)
    with pytest.raises(OrionError, match="endless requests"):
        arrival_offsets(model, 1, count=5)


def test_closed_loop_has_no_offsets() -> None:
    closed = ClosedArrivals(kind="closed", think_ms=5)
    assert arrival_offsets(closed, 1, count=10) is None
    assert not is_open_loop(closed)
    assert is_open_loop(poisson(1))
    with pytest.raises(ValueError, match="closed-loop arrivals have no schedule"):
        ArrivalSchedule(closed, 1)


def test_infinite_schedule_needs_a_limit() -> None:
    with pytest.raises(ValueError, match="never ends"):
        arrival_offsets(poisson(80), 1)


def test_schedule_pulled_lazily_matches_the_array() -> None:
    expected = arrival_offsets(poisson(80), 11, count=10_000)
    schedule = ArrivalSchedule(poisson(80), 11)
    first = [next(schedule) for _ in range(3)]
    rest = schedule.take(9_997)
    np.testing.assert_array_equal(np.concatenate([first, rest]), expected)
    assert isinstance(first[0], float)


def test_schedule_respects_its_limits() -> None:
    assert len(list(ArrivalSchedule(uniform(100), 0, horizon_s=1.0))) == 101
    schedule = ArrivalSchedule(uniform(100), 0, count=7)
    assert len(schedule.take(5)) == 5
    assert len(schedule.take(5)) == 2
    assert len(schedule.take(5)) == 0


def test_derived_client_seeds_are_stable_and_distinct() -> None:
    assert derive_seed(1, "hp") == derive_seed(1, "hp")
    assert len({derive_seed(1, "hp"), derive_seed(1, "be"), derive_seed(2, "hp")}) == 3
    assert derive_seed(1, "hp") == 16316199748295076952  # pinned: same in every process
    a = arrival_offsets(poisson(80), derive_seed(1, "hp"), count=100)
    b = arrival_offsets(poisson(80), derive_seed(1, "be"), count=100)
    assert not np.allclose(a, b)
