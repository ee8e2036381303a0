"""When open-loop inference requests arrive, reproducibly from a seed.

An open-loop client issues requests at times fixed in advance, whether or not earlier requests
have finished, so queueing shows up in latency (measured from arrival). The schedule depends
only on the arrivals model and the seed, so a run can be repeated exactly and two policies can be
compared on identical request streams.

Offsets are seconds from the start of the measurement window:

- ``poisson``: exponential inter-arrival times with mean ``1 / rate_per_s``; the first request
  arrives after the first gap (a Poisson process started at 0).
- ``uniform``: exactly ``1 / rate_per_s`` apart, the first at 0 (request ``k`` at ``k / rate``,
  computed directly so long runs do not drift).
- ``trace``: the file's inter-arrival times in order; the first request arrives after the first
  gap (start the file with ``0`` to have one at the start). With ``repeat`` the gaps start over
  when the file is exhausted; without, the schedule ends there.
- ``closed``: no schedule. The runner issues the next request when the previous one finished,
  after ``think_ms``. :func:`arrival_offsets` returns ``None`` for it; :class:`ArrivalSchedule`
  refuses it with ``ValueError``.

Schedules are generated in fixed-size internal chunks, so the ``k``-th arrival is bit-identical
whether it was obtained from :func:`arrival_offsets` with a count, with a horizon, or one by one
from :class:`ArrivalSchedule`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from colocation.jobs_fields import PathField, StrictModel, existing_file, problem
from orion_common.errors import OrionError

ARRIVAL_KINDS = ("closed", "poisson", "uniform", "trace")

_CHUNK = 4096
"""Arrivals generated per step. Fixed (not a parameter) because Poisson offsets are cumulative
sums per chunk: the same chunking everywhere keeps every consumer's offsets bit-identical."""


def derive_seed(run_seed: int, client_name: str) -> int:
    """A per-client seed from the run's seed, stable across processes and Python versions.

    Two Poisson clients given the same seed would arrive in lockstep; runners should pass
    ``derive_seed(run.seed, client.name)`` to :func:`arrival_offsets` instead. (Python's own
    ``hash`` of a string is salted per process, hence a real digest.)
    """
    digest = hashlib.sha256(f"{run_seed}\0{client_name}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def read_trace_ms(path: str | Path) -> np.ndarray:
    """The inter-arrival times (milliseconds) in a trace file, in order.

    One value per line; blank lines and everything after ``#`` are ignored. Every value must be a
    finite number >= 0 and there must be at least one. Problems raise :class:`OrionError` naming
    the file and line (``trace.txt:3: 'abc' is not a number``).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise OrionError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise OrionError(f"{path}: is a folder, not a trace file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise OrionError(f"{path}: cannot read trace file ({exc})") from None

    values: list[float] = []
    for line_no, raw in enumerate(text.splitlines(), start=1):
        token = raw.split("#", 1)[0].strip()
        if not token:
            continue
        try:
            value = float(token)
        except ValueError:
            raise OrionError(
                f"{path}:{line_no}: {token!r} is not a number "
                "(one inter-arrival time in milliseconds per line)"
            ) from None
        if not math.isfinite(value):
            raise OrionError(f"{path}:{line_no}: inter-arrival time must be finite (got {token})")
        if value < 0:
            raise OrionError(f"{path}:{line_no}: inter-arrival time must be >= 0 ms (got {token})")
        values.append(value)
    if not values:
        raise OrionError(f"{path}: no inter-arrival times in the file (only blanks or comments)")
    return np.asarray(values, dtype=np.float64)


# --------------------------------------------------------------------------------------------
# the arrivals models of jobs.json (clients[].arrivals)


class ClosedArrivals(StrictModel):
    """The next request is issued when the previous one finished, after ``think_ms``."""

    kind: Literal["closed"]
    think_ms: Annotated[float, Field(ge=0)] = 0.0


MAX_RATE_PER_S = 1_000_000.0
"""The highest request rate a client may be given: a million a second is far past what one GPU
serves, so a larger one (``1e308``) is a slip in the number, said before the machine is checked
(the same bound as a fleet's HP services, ``placement.fleet``)."""
RatePerS = Annotated[float, Field(gt=0, le=MAX_RATE_PER_S)]


class PoissonArrivals(StrictModel):
    """Open loop: exponential inter-arrival times with mean ``1 / rate_per_s``."""

    kind: Literal["poisson"]
    rate_per_s: RatePerS


class UniformArrivals(StrictModel):
    """Open loop: one request every ``1 / rate_per_s`` seconds, the first at the start."""

    kind: Literal["uniform"]
    rate_per_s: RatePerS


class TraceArrivals(StrictModel):
    """Open loop: inter-arrival times (ms) read from a text file, one per line."""

    kind: Literal["trace"]
    path: PathField
    repeat: bool = Field(default=True, validate_default=True)

    @field_validator("path")
    @classmethod
    def _trace_file_is_usable(cls, value: Path, info: ValidationInfo) -> Path:
        resolved = existing_file(value, info)
        try:
            read_trace_ms(resolved)
        except OrionError as exc:
            raise problem(exc.message) from None
        return resolved

    @field_validator("repeat")
    @classmethod
    def _repeat_needs_time_to_pass(cls, value: bool, info: ValidationInfo) -> bool:
        path = info.data.get("path")
        if value and path is not None and float(read_trace_ms(path).sum()) <= 0:
            raise problem(
                "every inter-arrival time in the trace is 0, so repeating it would issue endless "
                "requests at one instant; set repeat to false or add a non-zero gap"
            )
        return value


ArrivalsModel = Annotated[
    ClosedArrivals | PoissonArrivals | UniformArrivals | TraceArrivals,
    Field(discriminator="kind"),
]
ARRIVAL_MODELS: dict[str, type[StrictModel]] = {
    "closed": ClosedArrivals,
    "poisson": PoissonArrivals,
    "uniform": UniformArrivals,
    "trace": TraceArrivals,
}


# --------------------------------------------------------------------------------------------
# schedules


def is_open_loop(arrivals: ArrivalsModel) -> bool:
    """Whether requests follow a precomputed schedule (everything except ``closed``)."""
    return arrivals.kind != "closed"


class ArrivalSchedule:
    """Arrival offsets pulled lazily, for runs too long to hold the whole schedule.

    Iterating yields offsets (float seconds, non-decreasing) until ``count`` arrivals were given,
    the next offset would exceed ``horizon_s``, or a non-repeating trace is exhausted. With
    neither limit an infinite schedule simply never ends, so pull with ``next`` or :meth:`take`.
    """

    def __init__(
        self,
        arrivals: ArrivalsModel,
        seed: int,
        *,
        count: int | None = None,
        horizon_s: float | None = None,
    ) -> None:
        if arrivals.kind == "closed":
            raise ValueError(
                "closed-loop arrivals have no schedule: issue the next request when the previous "
                "one finished (after think_ms)"
            )
        if count is not None and count < 0:
            raise ValueError(f"count must be >= 0 (got {count})")
        if horizon_s is not None and not horizon_s >= 0:
            raise ValueError(f"horizon_s must be >= 0 (got {horizon_s})")
        self._count = count
        self._horizon_s = horizon_s
        self._finite = (
            count is not None
            or horizon_s is not None
            or (arrivals.kind == "trace" and not arrivals.repeat)
        )
        self._given = 0
        self._buffer = np.empty(0)
        self._pos = 0
        self._chunks = self._limited(_chunks_for(arrivals, seed))

    def __iter__(self) -> Iterator[float]:
        return self

    def __next__(self) -> float:
        while self._pos >= len(self._buffer):
            self._buffer = next(self._chunks)  # StopIteration ends the iteration
            self._pos = 0
        value = float(self._buffer[self._pos])
        self._pos += 1
        return value

    def take(self, n: int) -> np.ndarray:
        """The next ``n`` offsets (fewer when the schedule ends first)."""
        if n < 0:
            raise ValueError(f"n must be >= 0 (got {n})")
        parts: list[np.ndarray] = []
        wanted = n
        while wanted > 0:
            if self._pos >= len(self._buffer):
                try:
                    self._buffer = next(self._chunks)
                except StopIteration:
                    break
                self._pos = 0
            part = self._buffer[self._pos : self._pos + wanted]
            self._pos += len(part)
            wanted -= len(part)
            parts.append(part)
        return np.concatenate(parts) if parts else np.empty(0)

    def remaining(self) -> np.ndarray:
        """Every offset left; only for schedules that end (a count, a horizon or a finite trace)."""
        if not self._finite:
            raise ValueError("this schedule never ends: give count or horizon_s")
        parts = [self._buffer[self._pos :]]
        self._pos = len(self._buffer)
        parts.extend(self._chunks)
        return np.concatenate(parts)

    def _limited(self, chunks: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
        """Cut the raw chunks at the count and the horizon."""
        for raw in chunks:
            chunk = raw
            if self._count is not None:
                chunk = chunk[: self._count - self._given]
            past_horizon = False
            if self._horizon_s is not None:
                # offsets are sorted: keep those <= horizon; a cut means the next one exceeds it
                kept = int(np.searchsorted(chunk, self._horizon_s, side="right"))
                past_horizon = kept < len(chunk)
                chunk = chunk[:kept]
            self._given += len(chunk)
            if len(chunk):
                yield chunk
            if past_horizon or (self._count is not None and self._given >= self._count):
                return


def arrival_offsets(
    arrivals: ArrivalsModel,
    seed: int,
    count: int | None = None,
    horizon_s: float | None = None,
) -> np.ndarray | None:
    """The arrival offsets (seconds from the measurement start) of an open-loop client.

    Stops after ``count`` arrivals or before the first offset greater than ``horizon_s``,
    whichever comes first; a non-repeating trace also stops when exhausted. At least one limit is
    required unless the schedule is finite. Returns ``None`` for ``closed`` arrivals, which have
    no schedule (see the module docstring).
    """
    if arrivals.kind == "closed":
        return None
    return ArrivalSchedule(arrivals, seed, count=count, horizon_s=horizon_s).remaining()


def _chunks_for(arrivals: ArrivalsModel, seed: int) -> Iterator[np.ndarray]:
    if arrivals.kind == "poisson":
        return _poisson_chunks(arrivals.rate_per_s, seed)
    if arrivals.kind == "uniform":
        return _uniform_chunks(arrivals.rate_per_s)
    if arrivals.kind == "trace":
        return _trace_chunks(read_trace_ms(arrivals.path) / 1000.0, arrivals.repeat)
    raise ValueError(f"unknown arrivals kind {arrivals.kind!r}")


def _poisson_chunks(rate_per_s: float, seed: int) -> Iterator[np.ndarray]:
    rng = np.random.default_rng(seed)
    scale = 1.0 / rate_per_s
    last = 0.0
    while True:
        chunk = last + np.cumsum(rng.exponential(scale, _CHUNK))
        last = float(chunk[-1])
        yield chunk


def _uniform_chunks(rate_per_s: float) -> Iterator[np.ndarray]:
    start = 0
    while True:
        yield np.arange(start, start + _CHUNK, dtype=np.float64) / rate_per_s
        start += _CHUNK


def _trace_chunks(gaps_s: np.ndarray, repeat: bool) -> Iterator[np.ndarray]:
    cycle = np.cumsum(gaps_s)
    if not repeat:
        yield cycle
        return
    period = float(cycle[-1])
    if period <= 0:
        raise OrionError(
            "a repeating trace whose inter-arrival times are all 0 would issue endless requests "
            "at one instant",
            hint='set "repeat": false or give the trace a non-zero gap',
        )
    # several whole cycles per chunk, so a one-line trace does not cost one chunk per arrival
    cycles_per_chunk = max(1, _CHUNK // len(cycle))
    first_cycle = 0
    floor = 0.0
    while True:
        index = np.arange(first_cycle, first_cycle + cycles_per_chunk, dtype=np.float64)
        chunk = (index[:, None] * period + cycle[None, :]).ravel()
        # c * period + period and (c + 1) * period may round apart by one ulp; never go back
        chunk = np.maximum.accumulate(np.maximum(chunk, floor))
        floor = float(chunk[-1])
        yield chunk
        first_cycle += cycles_per_chunk
