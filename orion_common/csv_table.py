"""An append-only CSV table that stays readable while it grows, and its cell format.

Runs and the daemon write tables a row at a time while readers (``orion report``, ``orion
status``, pandas) read them; see :class:`CsvTable`.
"""

from __future__ import annotations

import csv
import io
import math
import os
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from orion_common import run_format

_rows_at_close: dict[Path, int] = {}
_rows_lock = threading.Lock()


def _note_rows_at_close(path: Path, rows: int) -> None:
    with _rows_lock:
        _rows_at_close[path.resolve()] = rows


def rows_at_close(path: Path) -> int | None:
    """The data rows a :class:`CsvTable` of this process had written to ``path`` when it was
    closed (``None``: no table of this process closed it). The runner records them in run.json
    for the tables it writes itself (gpu.csv, trace.csv)."""
    with _rows_lock:
        return _rows_at_close.get(path.resolve())


def table_rows(path: Path, reported: int | None = None) -> int:
    """The rows to record for the table at ``path``: what its writer reported (``reported``, a
    client process's count) or, for a table of this process, counted at close; failing both
    (a writer killed before it could say), the whole rows on disk now that it has stopped."""
    if reported is not None:
        return reported
    closed = rows_at_close(path)
    return closed if closed is not None else run_format.count_rows(path)


def format_cell(value: Any) -> str:
    """One CSV cell: numbers exactly (``repr``), missing values empty, text always quoted.

    Text is quoted even without a comma because readers use ``comment="#"``, which would cut an
    unquoted kernel name such as ``{lambda()#1}`` at the ``#``.
    """
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, str):
        return '"' + value.replace('"', '""') + '"'
    if isinstance(value, int):
        return str(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        return format_cell(str(value))
    if math.isnan(number):
        return ""
    if number.is_integer() and not isinstance(value, float) and abs(number) < 2**53:
        return str(int(number))  # numpy integers
    return repr(number)


class CsvTable:
    """An append-only CSV table that is always readable while it grows.

    Rows are buffered and written whole, at most ``flush_interval_s`` apart (and on
    :meth:`flush_if_due`, which callers tick while idle), so a reader never sees half a row
    except after a crash, and a crash loses at most the rows of the last interval. Buffering
    keeps a syscall per row out of the latency-critical client loop.
    """

    def __init__(
        self, path: Path, columns: Sequence[str], *, flush_interval_s: float = 0.5
    ) -> None:
        self.path = path
        self.columns = tuple(columns)
        self.flush_interval_s = flush_interval_s
        self.rows_written = 0
        self._lock = threading.Lock()
        self._pending: list[str] = []
        self._last_flush = time.monotonic()
        path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not path.exists() or path.stat().st_size == 0
        self.rows_before = 0 if fresh else run_format.count_rows(path)
        self._file = path.open("a", encoding="utf-8", newline="")
        if fresh:
            buffer = io.StringIO()
            csv.writer(buffer, lineterminator="\n").writerow(self.columns)
            self._file.write(buffer.getvalue())
            self._file.flush()

    def append(self, row: Sequence[Any]) -> None:
        if len(row) != len(self.columns):
            raise ValueError(
                f"{self.path.name}: row has {len(row)} cells, expected {len(self.columns)}"
            )
        line = ",".join(format_cell(value) for value in row) + "\n"
        with self._lock:
            self._pending.append(line)
        self.flush_if_due()

    def append_many(self, rows: Iterable[Sequence[Any]]) -> None:
        for row in rows:
            self.append(row)

    def flush_if_due(self) -> None:
        if self._pending and time.monotonic() - self._last_flush >= self.flush_interval_s:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            self._last_flush = time.monotonic()
            if not self._pending or self._file.closed:
                return
            lines, self._pending = self._pending, []
            self._file.write("".join(lines))
            self._file.flush()
            self.rows_written += len(lines)

    @property
    def rows(self) -> int:
        """Data rows in the file from this writer and any before it (pending ones excluded)."""
        return self.rows_before + self.rows_written

    def close(self) -> None:
        self.flush()
        with self._lock:
            if not self._file.closed:
                os.fsync(self._file.fileno())
                self._file.close()
                _note_rows_at_close(self.path, self.rows)

    def __enter__(self) -> CsvTable:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
