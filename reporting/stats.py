"""Bootstrap confidence intervals for the figures policies are judged by.

Why intervals at all: the target is "HP p99 within 5 % of dedicated", and a p99 estimated from a
few thousand requests is itself noisy. Two runs of the same policy can differ by more than 5 %
through sampling alone, so a ratio without an interval cannot say whether a policy met or missed
the target. Every p99 and every ratio in the reports therefore carries a 95 % interval, and a
dedicated run whose own p99 is not known to within ±5 % is flagged as too short or too noisy.

Why the bootstrap: latency distributions are skewed and often multi-modal (queueing behind a BE
kernel, host hiccups), so no formula for a quantile's variance can be trusted without knowing
the density at the quantile, which is exactly what is unknown. Resampling the measured values
needs no such assumption, works unchanged for a ratio of two runs' statistics and for a
throughput, and is easy to audit. Its known weakness, coarse intervals for extreme quantiles of
small samples (a resampled p99 can only land near the top few values), is harmless here: the
runs are sized to thousands of requests, tens of them above the p99.

Everything is vectorised with numpy and deterministic for a given ``seed``, so a report written
twice from the same runs shows the same intervals.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

PERCENTILE_METHOD = "linear"
"""numpy's default interpolation, which every percentile of the reports uses: rank q/100·(n−1)."""
DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 2000
"""Enough that the 2.5 % and 97.5 % points of the bootstrap distribution move by well under the
interval's own width from one seed to another; more only costs time."""
_CHUNK_ELEMENTS = 4_000_000
"""At most this many resampled values are held at once (32 MB of float64), whatever the sample."""

Interval = tuple[float, float, float]
"""(point estimate, lower bound, upper bound)."""

Statistic = Callable[[np.ndarray], np.ndarray]
"""Maps a batch of resamples to one value each: shape (m, n) for samples of single values, or
(m, n, k) for samples of rows with k columns, to shape (m,). Batched so that thousands of
resamples cost a few numpy calls, not thousands of Python calls."""

SampleLike = Sequence[float] | np.ndarray | pd.Series | pd.DataFrame


def percentile_statistic(q: float) -> Statistic:
    """The q-th percentile of each resample of single values (the same interpolation as
    ``reporting.metrics.percentile_summary``)."""

    def statistic(batch: np.ndarray) -> np.ndarray:
        return np.percentile(batch, q, axis=1, method=PERCENTILE_METHOD)

    return statistic


def throughput_statistic(batch: np.ndarray) -> np.ndarray:
    """Work per unit time of each resample of rows ``(duration, amount)``: the summed amount
    over the summed duration (e.g. training samples per second from per-iteration durations).

    A ratio of sums, not a mean of per-iteration rates, so that long iterations weigh as much as
    the time they took, as they do in a throughput measured over a window.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        return batch[:, :, 1].sum(axis=1) / batch[:, :, 0].sum(axis=1)


def mean_statistic(batch: np.ndarray) -> np.ndarray:
    """The mean of each resample of single values."""
    return batch.mean(axis=1)


def per_resample(function: Callable[[np.ndarray], float]) -> Statistic:
    """Lifts a function of one sample (an array of values or of rows) to a :data:`Statistic`;
    slower than a batched statistic, for anything the two ready-made ones do not cover."""

    def statistic(batch: np.ndarray) -> np.ndarray:
        return np.array([function(sample) for sample in batch], dtype=float)

    return statistic


def as_sample(values: SampleLike) -> np.ndarray:
    """``values`` as a float array of values (1-D) or of rows (2-D, a DataFrame's columns in
    order), without the entries (rows) that hold a NaN: a missing value is no observation."""
    data = np.asarray(values.to_numpy() if isinstance(values, pd.DataFrame) else values)
    data = data.astype(float)
    if data.ndim == 1:
        return data[~np.isnan(data)]
    if data.ndim == 2:
        return data[~np.isnan(data).any(axis=1)]
    raise ValueError(f"a sample is 1-D (values) or 2-D (rows), got {data.ndim} dimensions")


def bootstrap_percentile_ci(
    values: SampleLike,
    q: float = 99.0,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """The q-th percentile of ``values`` and its percentile-bootstrap interval.

    The values are resampled with replacement ``resamples`` times; the interval is the central
    ``confidence`` share of the resampled percentiles. NaN values are ignored; with no values the
    result is all NaN, with one value the interval is that value.
    """
    _check(confidence, resamples)
    if not 0 <= q <= 100:
        raise ValueError(f"q must be within [0, 100], got {q}")
    data = as_sample(values)
    if data.ndim != 1:
        raise ValueError("bootstrap_percentile_ci takes single values, not rows")
    if data.size == 0:
        return (float("nan"),) * 3
    statistic = percentile_statistic(q)
    point = float(statistic(data[np.newaxis, :])[0])
    boot = _resampled(data, resamples, np.random.default_rng(seed), statistic)
    return (point, *_central(boot, confidence))


def ratio_over_rounds_ci(
    pairs: Sequence[tuple[SampleLike, SampleLike]],
    statistic: Statistic,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """shared / dedicated over rounds: ``pairs`` holds one (shared sample, dedicated sample) per
    round, the dedicated run being that round's own.

    Point estimate: the geometric mean over rounds of ``statistic(shared) / statistic(dedicated)``.
    A geometric mean because ratios multiply: 0.5× in one round and 2× in another average to 1×.

    Interval: a two-level bootstrap. Each resample draws as many rounds as there are, with
    replacement (the spread between rounds: drift of the machine, placement, clocks), then
    resamples each drawn round's two samples with replacement (the sampling noise within a run),
    recomputes the per-round ratios and takes their geometric mean. The interval is the central
    ``confidence`` share of those means. With one round it is the plain within-run bootstrap of
    the ratio; with few rounds the between-round part can only be as varied as the rounds were.

    Returns all NaN when there is no pair, a sample is empty or a ratio is not positive and
    finite.
    """
    _check(confidence, resamples)
    samples = [(as_sample(shared), as_sample(alone)) for shared, alone in pairs]
    if not samples or any(len(s) == 0 or len(d) == 0 for s, d in samples):
        return (float("nan"),) * 3

    def ratio(sample: tuple[np.ndarray, np.ndarray]) -> float:
        shared, alone = sample
        return statistic(shared[np.newaxis])[0] / statistic(alone[np.newaxis])[0]

    def resampled(
        sample: tuple[np.ndarray, np.ndarray], count: int, rng: np.random.Generator
    ) -> np.ndarray:
        shared, alone = sample
        return _resampled(shared, count, rng, statistic) / _resampled(alone, count, rng, statistic)

    return _geometric_mean_over_rounds(samples, ratio, resampled, confidence, resamples, seed)


def paired_ratio_over_rounds_ci(
    rounds: Sequence[SampleLike],
    statistic: Statistic,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """shared / dedicated over rounds whose two runs served the same requests (the same
    arrivals): ``rounds`` holds one sample of rows ``(shared value, dedicated value)`` per
    round, a row per request both runs served.

    As :func:`ratio_over_rounds_ci`, except that within a round the rows are resampled together:
    a request drawn is drawn in both runs. The noise the two runs share (a burst of arrivals that
    queues in both) then moves both statistics alike and cancels in the ratio instead of widening
    its interval; what is left is the difference the sharing made.
    """
    _check(confidence, resamples)
    samples = [as_sample(rows) for rows in rounds]
    if any(sample.ndim != 2 or sample.shape[1] != 2 for sample in samples if len(sample)):
        raise ValueError("paired_ratio_over_rounds_ci takes rows of (shared, dedicated) values")
    if not samples or any(len(sample) == 0 for sample in samples):
        return (float("nan"),) * 3

    def of_rows(batch: np.ndarray) -> np.ndarray:
        return statistic(batch[:, :, 0]) / statistic(batch[:, :, 1])

    def ratio(sample: np.ndarray) -> float:
        return float(of_rows(sample[np.newaxis])[0])

    def resampled(sample: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
        return _resampled(sample, count, rng, of_rows)

    return _geometric_mean_over_rounds(samples, ratio, resampled, confidence, resamples, seed)


def _geometric_mean_over_rounds(
    samples: Sequence[Any],
    ratio: Callable[[Any], float],
    resampled: Callable[[Any, int, np.random.Generator], np.ndarray],
    confidence: float,
    resamples: int,
    seed: int,
) -> Interval:
    """The two-level bootstrap of a geometric mean of per-round ratios: rounds drawn with
    replacement, then each drawn round's ``resampled`` ratios (``count`` of them at once)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.array([ratio(sample) for sample in samples])
    if not (np.isfinite(ratios).all() and (ratios > 0).all()):
        return (float("nan"),) * 3
    point = float(np.exp(np.log(ratios).mean()))
    rng = np.random.default_rng(seed)
    rounds = len(samples)
    picks = rng.integers(0, rounds, size=(resamples, rounds))
    log_ratios = np.empty((resamples, rounds))
    for index, sample in enumerate(samples):
        slots = picks == index
        count = int(slots.sum())
        if count == 0:
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            log_ratios[slots] = np.log(resampled(sample, count, rng))
    boot = np.exp(log_ratios.mean(axis=1))
    return (point, *_central(boot, confidence))


def interval_half_width(interval: Interval) -> float:
    """The larger distance from the point to either bound, relative to the point: 0.05 means
    the interval lies within ±5 % of the estimate. NaN when any part is unknown or the point is
    not positive."""
    point, lo, hi = interval
    if not all(np.isfinite([point, lo, hi])) or point <= 0:
        return float("nan")
    return float(max(point - lo, hi - point) / point)


def _resampled(
    sample: np.ndarray, count: int, rng: np.random.Generator, statistic: Statistic
) -> np.ndarray:
    """``statistic`` of ``count`` resamples (with replacement, same size) of ``sample``."""
    size = len(sample)
    per_row = int(np.prod(sample.shape[1:])) if sample.ndim > 1 else 1
    chunk = max(1, _CHUNK_ELEMENTS // (size * per_row))
    out = np.empty(count)
    for start in range(0, count, chunk):
        stop = min(count, start + chunk)
        picks = rng.integers(0, size, size=(stop - start, size))
        out[start:stop] = statistic(sample[picks])
    return out


def _central(boot: np.ndarray, confidence: float) -> tuple[float, float]:
    """The central ``confidence`` share of the finite bootstrap values (percentile method)."""
    finite = boot[np.isfinite(boot)]
    if finite.size == 0:
        return float("nan"), float("nan")
    tail = (1.0 - confidence) / 2.0 * 100.0
    lo, hi = np.percentile(finite, [tail, 100.0 - tail], method=PERCENTILE_METHOD)
    return float(lo), float(hi)


def _check(confidence: float, resamples: Any) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be within (0, 1), got {confidence}")
    if not isinstance(resamples, int) or isinstance(resamples, bool) or resamples < 1:
        raise ValueError(f"resamples must be a positive integer, got {resamples!r}")
