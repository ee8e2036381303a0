"""The run directory (format ``orion-run`` version 1, docs/architecture.md) as it is written.

Runs take minutes and end in many ways (finished, Ctrl-C, a client killed, the runner killed), and
``orion report`` must read whatever is left. So ``run.json`` is only ever replaced atomically
(a reader sees the old or the new record, never half of one) and says ``running`` until the end
is known; tables are appended a row at a time and flushed at least every half second, so a crash
loses at most the last few rows, and a row cut mid-write has no newline, which the reader drops.
"""

from __future__ import annotations

import csv
import io
import math
import os
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import Any

from orion_common import run_format
from orion_common.atomic_io import write_json_atomic
from orion_common.errors import OrionError

# The format itself (name, version, statuses, table schemas) is declared in orion_common.run_format;
# these names are what the writers use: a table's header is every declared column.
RUN_FORMAT = run_format.FORMAT
RUN_VERSION = run_format.VERSION
DISTRIBUTION = "orion-gpu-share"

STATUS_RUNNING = run_format.STATUS_RUNNING
STATUS_COMPLETE = run_format.STATUS_COMPLETE
STATUS_INCOMPLETE = run_format.STATUS_INCOMPLETE
STATUS_FAILED = run_format.STATUS_FAILED

INFERENCE_COLUMNS = run_format.column_names(run_format.INFERENCE_COLUMNS)
TRAINING_COLUMNS = run_format.column_names(run_format.TRAINING_COLUMNS)
GPU_COLUMNS = run_format.column_names(run_format.GPU_COLUMNS)
TRACE_COLUMNS = run_format.column_names(run_format.TRACE_COLUMNS)


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def create_run_dir(output_dir: Path, policy: str, now: datetime | None = None) -> Path:
    """A new, empty ``<output_dir>/<policy>-<UTC yyyymmdd-HHMMSS>[-n]`` folder.

    Named by policy and start time so a folder of runs sorts and reads naturally; ``-n`` keeps
    two runs started within one second apart. ``mkdir`` without ``exist_ok`` is the claim, so
    two runners can never share a folder.
    """
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%d-%H%M%S")
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OrionError(
            f"cannot create output folder {output_dir}: {exc.strerror or exc}"
        ) from None
    for attempt in range(1000):
        name = f"{policy}-{stamp}" if attempt == 0 else f"{policy}-{stamp}-{attempt}"
        path = output_dir / name
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise OrionError(f"cannot create run folder {path}: {exc.strerror or exc}") from None
        (path / "clients").mkdir()
        (path / "logs").mkdir()
        return path
    raise OrionError(f"too many runs named {policy}-{stamp} in {output_dir}")


def orion_version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def git_revision(source_root: Path | None = None) -> str | None:
    """The commit of the orion source tree, when it is a git checkout (else ``None``).

    Only a ``.git`` right at the source root counts: an installed orion inside some other
    repository (a venv in a project folder) must not report that project's commit.
    """
    root = source_root or Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        result = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    revision = result.stdout.strip()
    return revision if result.returncode == 0 and revision else None


class RunRecord:
    """``run.json`` in memory. Every :meth:`save` replaces the file atomically.

    As a context manager it guarantees an end state: leaving the block by an exception (Ctrl-C
    included) or without :meth:`finish` marks the run ``incomplete``, so a directory is never
    left saying ``running`` by a runner that is still alive to say otherwise.
    """

    def __init__(self, run_dir: Path, data: dict[str, Any]) -> None:
        self.run_dir = run_dir
        self.path = run_dir / "run.json"
        self.data = data

    @classmethod
    def begin(
        cls,
        run_dir: Path,
        *,
        policy: str,
        config: dict[str, Any],
        environment: dict[str, Any],
        clients: Iterable[dict[str, Any]],
        warnings: Sequence[str] = (),
    ) -> RunRecord:
        """Write the first ``run.json`` (status ``running``) before any client starts."""
        record = cls(
            run_dir,
            {
                "format": RUN_FORMAT,
                "version": RUN_VERSION,
                "status": STATUS_RUNNING,
                "orion_version": orion_version(),
                "git_revision": git_revision(),
                "policy": policy,
                "config": config,
                "environment": environment,
                "started_utc": utc_now(),
                "ended_utc": None,
                "measure_start_s": None,
                "measure_end_s": None,
                "warnings": list(warnings),
                "notes": [],
                "clients": [dict(entry) for entry in clients],
            },
        )
        record.save()
        return record

    @property
    def status(self) -> str:
        return str(self.data["status"])

    def client(self, name: str) -> dict[str, Any]:
        for entry in self.data["clients"]:
            if entry["name"] == name:
                return entry
        raise KeyError(name)

    def note(self, text: str) -> None:
        """Something a reader of the results should know (kept in ``notes``)."""
        if text not in self.data["notes"]:
            self.data["notes"].append(text)

    def save(self) -> None:
        write_json_atomic(self.path, self.data)

    def record_table_rows(self, rows: dict[str, int]) -> None:
        """Keep, per table (path relative to the run directory), the data rows its writer wrote,
        so a reader can tell a table cut after the run from one that was short all along."""
        self.data[run_format.TABLE_ROWS_KEY] = {str(k): int(v) for k, v in sorted(rows.items())}

    def finish(self, status: str) -> None:
        """Record the end state and time; the run's record is final after this."""
        self.data["status"] = status
        self.data["ended_utc"] = utc_now()
        self.save()

    def __enter__(self) -> RunRecord:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.status != STATUS_RUNNING:
            return
        if exc_type is None:
            self.note("the runner ended without recording an end state")
        elif issubclass(exc_type, KeyboardInterrupt):
            self.note("interrupted (Ctrl-C, SIGTERM or a stop request) before the end")
        else:
            self.note(f"the runner stopped on an error: {exc_type.__name__}: {exc}")
        self.finish(STATUS_INCOMPLETE)


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
