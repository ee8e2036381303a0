"""What the example programs share: a clean stop on a signal, the ready mark, and their records.

The programs are written as users write them and know nothing of orion. What they share is only
how they report, so that a benchmark can line up several of them on one clock:

- each runs until ``--duration`` seconds of measured work have passed or it gets SIGINT or
  SIGTERM, whichever comes first, and then writes its record (a stop never loses the record);
- each writes ``OUT.ready`` (the Unix time, one line) once its warm-up is over (models built,
  graphs captured, XLA and Inductor compiled), so that a benchmark can start the measured window
  when every program sharing the GPU is in its steady state;
- a service's Poisson arrivals start over from their seed at the time a benchmark writes into
  ``OUT.window`` (Unix time, one line), so that every run compared (alone, and beside each
  neighbour) serves the very same arrivals in its measured window: a p99 of a few hundred
  requests is set by the window's largest burst, and two windows cut from different stretches
  of one schedule differ by their bursts more than by their neighbours;
- a service writes one row per request (``REQUEST_COLUMNS``), a trainer or batch job one row per
  point at which it waited for the GPU anyway (``PROGRESS_COLUMNS``: the work done so far), all
  times as Unix seconds, so a throughput can be taken over exactly the window another program
  ran in.
"""

from __future__ import annotations

import csv
import itertools
import signal
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REQUEST_COLUMNS = ("request", "arrival_unix_s", "start_unix_s", "end_unix_s", "latency_ms")
PROGRESS_COLUMNS = ("unix_s", "steps", "samples")


class Stop:
    """Set by SIGINT or SIGTERM: loops check it between steps and end cleanly, so the record is
    written whichever way the program is stopped."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        self.requested = True


def mark_ready(out: str) -> float:
    """Writes ``OUT.ready`` with the Unix time: the warm-up is over from here on."""
    now = time.time()
    Path(f"{out}.ready").write_text(f"{now:.6f}\n")
    return now


class Clock:
    """Unix time read through ``perf_counter``: precise intervals on the clock other processes
    share."""

    def __init__(self) -> None:
        self._unix0 = time.time()
        self._perf0 = time.perf_counter()

    def unix(self, perf: float | None = None) -> float:
        return self._unix0 + ((time.perf_counter() if perf is None else perf) - self._perf0)


class ProgressLog:
    """A trainer's work done, recorded at the points where it synchronises with the GPU."""

    def __init__(self, samples_per_step: int) -> None:
        self.clock = Clock()
        self.samples_per_step = samples_per_step
        self.rows: list[tuple[float, int, int]] = []

    def record(self, steps: int) -> None:
        self.rows.append((self.clock.unix(), steps, steps * self.samples_per_step))

    def write(self, out: str) -> dict[str, float]:
        with open(out, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(PROGRESS_COLUMNS)
            writer.writerows((f"{t:.6f}", steps, samples) for t, steps, samples in self.rows)
        if len(self.rows) < 2:
            return {"steps": self.rows[-1][1] if self.rows else 0}
        (t0, s0, n0), (t1, s1, n1) = self.rows[0], self.rows[-1]
        return {
            "steps": s1,
            "seconds": round(t1 - t0, 3),
            "steps_per_s": round((s1 - s0) / (t1 - t0), 3),
            "samples_per_s": round((n1 - n0) / (t1 - t0), 2),
        }


def run_for(
    step: Callable[[], None],
    sync: Callable[[], None],
    *,
    duration: float,
    samples_per_step: int,
    out: str,
    sync_every: int = 10,
) -> dict[str, float]:
    """A training loop's measured part: ``step`` until ``duration`` seconds or a stop, waiting
    for the GPU (``sync``) every ``sync_every`` steps as a trainer that logs its loss does, and
    recording the progress there. Call it after the warm-up; it writes the ready mark first."""
    stop = Stop()
    log = ProgressLog(samples_per_step)
    sync()
    mark_ready(out)
    steps = 0
    log.record(steps)
    end = time.perf_counter() + duration
    while not stop.requested and time.perf_counter() < end:
        step()
        steps += 1
        if steps % sync_every == 0:
            sync()
            log.record(steps)
    sync()
    # Always a row at the stop, even with no step since the last one: a stop that lands right
    # after a record (a loaded machine, the process off the CPU in between) would otherwise
    # leave the record ending before the stop, short of a window that closed in that gap.
    log.record(steps)
    return log.write(out)


def poisson_arrivals(rate: float, duration: float, seed: int) -> np.ndarray:
    """Arrival times (seconds from the start) of a Poisson process of ``rate`` per second."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate, size=int(rate * duration * 1.5) + 10)
    arrivals = np.cumsum(gaps)
    return arrivals[arrivals < duration]


class Schedule:
    """A Poisson schedule of arrivals (``perf_counter`` times) that starts over from its seed
    once ``OUT.window`` names the time the measured window opens: the arrivals of the old
    schedule before that time are still served (they have arrived), and from it on the window
    gets the seed's own sequence."""

    def __init__(self, rate: float, duration: float, seed: int, out: str, clock: Clock) -> None:
        self.offsets = poisson_arrivals(rate, duration, seed)
        self.window_file = Path(f"{out}.window")
        self.clock = clock
        self.base = time.perf_counter()
        self.next_index = 0
        self.restarted = False

    def _window_opens(self) -> float | None:
        """The window's opening as a ``perf_counter`` time, once the benchmark has named it."""
        if self.restarted:
            return None
        try:
            text = self.window_file.read_text().strip()
        except OSError:
            return None
        if not text:
            return None
        unix = float(text)
        return self.base + (unix - self.clock.unix(self.base))

    def upcoming(self) -> float | None:
        """The next arrival, the window's schedule taken up where it opens before it; None
        once the schedule is spent."""
        arrival = (
            self.base + float(self.offsets[self.next_index])
            if self.next_index < len(self.offsets)
            else None
        )
        opens = self._window_opens()
        if opens is not None and (arrival is None or arrival >= opens):
            self.base, self.next_index, self.restarted = opens, 0, True
            arrival = self.base + float(self.offsets[0]) if len(self.offsets) else None
        return arrival

    def take(self) -> None:
        self.next_index += 1


def _wait_until(moment: float, stop: Stop, schedule: Schedule | None = None) -> bool:
    """Sleeps until half a millisecond before ``moment`` (``perf_counter`` time), in slices
    short enough to notice a stop or a window named for ``schedule``, then spins: a request
    starts on time, not a scheduler tick late. False if the schedule changed under the wait
    (the arrival waited for is no longer the next one)."""
    while not stop.requested:
        if schedule is not None and schedule.upcoming() != moment:
            return False
        left = moment - time.perf_counter() - 0.0005
        if left <= 0:
            break
        time.sleep(min(0.05, left))
    while time.perf_counter() < moment:
        pass
    return True


def serve(
    handle: Callable[[int], tuple[float, ...] | None],
    *,
    rate: float,
    duration: float,
    seed: int,
    out: str,
    closed_loop: bool = False,
    extra_columns: tuple[str, ...] = (),
) -> dict[str, float]:
    """A service's measured part: requests arrive as a Poisson process of ``rate`` per second
    (started over where ``OUT.window`` says: :class:`Schedule`), or back to back
    (``closed_loop``), and are served in arrival order by ``handle(index)``,
    which returns when the request's result is ready, with the values of ``extra_columns`` for
    the request if there are any (a decoder's time per token, say). Latency counts from the
    arrival, so time spent queueing behind earlier requests counts, as a user sees it. Call it
    after the warm-up; it writes the ready mark first."""
    stop = Stop()
    clock = Clock()
    rows = []
    mark_ready(out)
    start = time.perf_counter()
    schedule = None if closed_loop else Schedule(rate, duration, seed, out, clock)
    for index in itertools.count():
        if stop.requested or time.perf_counter() - start >= duration:
            break
        if schedule is None:
            arrival = time.perf_counter()
        else:
            upcoming = schedule.upcoming()
            while upcoming is not None and not _wait_until(upcoming, stop, schedule):
                upcoming = schedule.upcoming()
            if upcoming is None or stop.requested:
                break
            arrival = upcoming
            schedule.take()
        begin = time.perf_counter()
        extra = handle(index) or ()
        end = time.perf_counter()
        rows.append((index, clock.unix(arrival), clock.unix(begin), clock.unix(end),
                     (end - arrival) * 1e3, *extra))  # fmt: skip
    with open(out, "w", newline="") as handle_out:
        writer = csv.writer(handle_out)
        writer.writerow((*REQUEST_COLUMNS, *extra_columns))
        writer.writerows(
            (index, f"{a:.6f}", f"{b:.6f}", f"{e:.6f}", *(f"{v:.4f}" for v in values))
            for index, a, b, e, *values in rows
        )
    latencies = np.array([row[4] for row in rows]) if rows else np.array([np.nan])
    return {
        "requests": len(rows),
        "p50_ms": round(float(np.percentile(latencies, 50)), 3),
        "p99_ms": round(float(np.percentile(latencies, 99)), 3),
    }


def capture_graph(forward: Callable[[], object], warmup: int = 20) -> tuple[object, object]:
    """``forward`` captured as a CUDA graph, the way services replay models: warmed up first on a
    side stream (cuDNN and cuBLAS pick their algorithms, allocators settle), then captured once.
    Returns the graph and the output tensor(s) its replays write."""
    import torch

    with torch.inference_mode():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                forward()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            output = forward()
    torch.cuda.synchronize()
    return graph, output
