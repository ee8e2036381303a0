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
