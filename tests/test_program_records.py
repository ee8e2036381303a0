"""The example programs' records: a trainer's progress reaches the moment it was stopped."""

from __future__ import annotations

import csv
import os
import signal
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "programs"))
import program_io


def test_a_trainer_stopped_right_after_a_record_still_records_the_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The suite stops a trainer with SIGINT once the window has closed and takes its work over
    # exactly that window, so its record must reach the stop. Here the stop lands just after a
    # record, with no step between (the process off the CPU for a while, as on a loaded machine).
    record = program_io.ProgressLog.record
    stopped_at: list[float] = []

    def record_then_stop(self: program_io.ProgressLog, steps: int) -> None:
        record(self, steps)
        if steps == 10 and not stopped_at:
            time.sleep(0.01)  # a record made before the window's end ...
            stopped_at.append(time.time())
            os.kill(os.getpid(), signal.SIGINT)  # ... a stop after it

    monkeypatch.setattr(program_io.ProgressLog, "record", record_then_stop)
    previous = signal.getsignal(signal.SIGINT)
    out = tmp_path / "train.csv"
    try:
        program_io.run_for(lambda: None, lambda: None, duration=60, samples_per_step=4,
                           out=str(out))  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, previous)
    with out.open() as handle:
        rows = list(csv.DictReader(handle))
    assert int(rows[-1]["steps"]) == 10  # no step after the stop
    assert float(rows[-1]["unix_s"]) >= stopped_at[0]  # and yet the record reaches it


@pytest.fixture
def service_signals() -> object:
    """A service sets SIGINT and SIGTERM handlers (program_io.Stop); put pytest's back."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


@pytest.mark.usefixtures("service_signals")
def test_a_service_serves_its_seeded_arrivals_from_where_the_window_opens(tmp_path: Path) -> None:
    # Runs compared (alone, beside each neighbour) must serve the same arrivals in their windows:
    # once the benchmark names the window's opening in OUT.window, the schedule starts over from
    # its seed there, whatever stretch of it the service had reached.
    out = tmp_path / "hp.csv"
    window: list[float] = []

    def handle(index: int) -> None:
        if index == 3:  # a few requests into the old schedule
            window.append(time.time() + 0.05)
            Path(f"{out}.window").write_text(f"{window[0]:.6f}\n")

    program_io.serve(handle, rate=400.0, duration=1.5, seed=7, out=str(out))
    with out.open() as handle_out:
        arrivals = [float(row["arrival_unix_s"]) for row in csv.DictReader(handle_out)]
    opened = window[0]
    before = [a for a in arrivals if a < opened]
    inside = [a - opened for a in arrivals if a >= opened]
    offsets = program_io.poisson_arrivals(400.0, 1.5, 7)
    assert len(before) >= 4  # the old schedule's arrivals before the window were served
    assert inside, "no arrival in the window"
    assert inside == pytest.approx(list(offsets[: len(inside)]), abs=1e-5)


@pytest.mark.usefixtures("service_signals")
def test_a_service_without_a_window_keeps_its_schedule(tmp_path: Path) -> None:
    out = tmp_path / "hp.csv"
    program_io.serve(lambda index: None, rate=400.0, duration=1.0, seed=7, out=str(out))
    with out.open() as handle_out:
        rows = list(csv.DictReader(handle_out))
    first = float(rows[0]["arrival_unix_s"])
    offsets = program_io.poisson_arrivals(400.0, 1.0, 7)
    assert [float(row["arrival_unix_s"]) - first for row in rows] == pytest.approx(
        list(offsets[: len(rows)] - offsets[0]), abs=1e-5
    )
