"""Read one ``orion-run`` directory (docs/architecture.md) into typed tables.

Everything downstream (metrics, plots, the Markdown report) works on :class:`RunData`, never on
files, so the format is checked in one place: a missing required column is one clear error, and
damage a crash can leave behind (a cut last CSV line, a missing table, ``status: running``) is
tolerated and recorded in ``RunData.notes`` instead of failing the whole report. Damage after the
run is caught too: a table holding other than the rows ``run.json`` recorded at close is noted and
makes the run count as not complete, and a ``run.json`` that is not JSON is its own error.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from orion_common import run_format
from orion_common.errors import OrionError
from orion_common.run_format import Column, ColumnType

# The format (name, version, statuses, schemas) is declared once, in orion_common.run_format.
RUN_FORMAT = run_format.FORMAT
RUN_VERSION = run_format.VERSION
STATUS_COMPLETE = run_format.STATUS_COMPLETE
STATUSES_STOPPED_EARLY = (run_format.STATUS_INCOMPLETE, run_format.STATUS_RUNNING)
"""A runner left the run ``incomplete`` when it was stopped (Ctrl-C, SIGTERM, a timeout, an
error) and ``running`` when it was killed; ``failed`` (every client failed) and ``complete`` runs
went through their whole schedule."""

MODE_INFER = "infer"
MODE_TRAIN = "train"
_MODE_ALIASES = {
    "infer": MODE_INFER,
    "inference": MODE_INFER,
    "train": MODE_TRAIN,
    "training": MODE_TRAIN,
}

# Declared schemas, one per table of the run directory (docs/architecture.md, "Run directory").
INFERENCE_COLUMNS = run_format.INFERENCE_COLUMNS
TRAINING_COLUMNS = run_format.TRAINING_COLUMNS
GPU_COLUMNS = run_format.GPU_COLUMNS
TRACE_COLUMNS = run_format.TRACE_COLUMNS
MEMORY_COLUMNS = run_format.MEMORY_COLUMNS
SHARE_COLUMNS = run_format.SHARE_COLUMNS
LIMIT_COLUMNS = run_format.LIMIT_COLUMNS


@dataclass(frozen=True)
class Environment:
    """Software and hardware the run was measured on, as ``run.json`` recorded it."""

    gpu_name: str | None = None
    sm_count: int | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    torch_version: str | None = None
    cudnn_version: str | None = None
    hostname: str | None = None


@dataclass(frozen=True)
class ClientInfo:
    """One client's entry in ``run.json``; its table lives in ``RunData.tables[name]``."""

    name: str
    role: str
    workload: str
    mode: str
    batch_size: int | None
    dtype: str | None
    arrivals: dict[str, Any] | None
    exit_code: int | None
    error: str | None
    table_path: Path
    log_path: Path | None
    window_start_s: float | None
    window_end_s: float | None

    @property
    def is_inference(self) -> bool:
        return self.mode == MODE_INFER

    @property
    def is_closed_loop(self) -> bool:
        """An inference client that issues each request when the previous one finished (a BE
        client replaying a graph as fast as it goes): what it served is its throughput, not an
        arrival rate it was given."""
        return self.is_inference and (self.arrivals or {}).get("kind") == "closed"

    @property
    def offered_rate_per_s(self) -> float | None:
        """The open-loop arrival rate asked for, when the client had one."""
        rate = (self.arrivals or {}).get("rate_per_s")
        return _as_float(rate)

    @property
    def failed(self) -> bool:
        return bool(self.error) or (self.exit_code is not None and self.exit_code != 0)


@dataclass(frozen=True, eq=False)
class RunData:
    """One run directory, parsed. Tables keep the file's columns, typed as declared above."""

    path: Path
    status: str
    policy: str
    orion_version: str | None
    git_revision: str | None
    started_utc: str | None
    ended_utc: str | None
    measure_start_s: float | None
    measure_end_s: float | None
    environment: Environment
    clients: tuple[ClientInfo, ...]
    tables: dict[str, pd.DataFrame]
    gpu: pd.DataFrame | None
    scheduler: dict[str, dict[str, Any]] | None
    trace: pd.DataFrame | None
    config: dict[str, Any]
    meta: dict[str, Any]
    notes: tuple[str, ...]
    cut_tables: tuple[str, ...] = ()
    """Tables (relative paths) that do not hold the rows run.json recorded at close: cut or
    otherwise changed after the run, so figures from them are wrong."""
    memory: pd.DataFrame = field(default_factory=lambda: empty_table(MEMORY_COLUMNS))
    """``memory.csv``: each client's GPU memory as orion's library counts it, sampled during the
    run. Empty (declared columns) when the run has none: runs from before it was written, and
    policies that do not load the library."""
    limits: pd.DataFrame = field(default_factory=lambda: empty_table(LIMIT_COLUMNS))
    """``limits.csv``: limits changed while the run was live (``orion quota``); empty when none
    changed or the run predates the file."""
    memory_recorded: bool = False
    """``memory.csv`` exists, so the library counted memory (even if it wrote no row yet): an
    empty ``memory`` table alone cannot tell "nothing counted" from "not a run that counts"."""
    shares: pd.DataFrame = field(default_factory=lambda: empty_table(SHARE_COLUMNS))
    """``shares.csv``: each client's share of GPU time over the last quota window as the gate
    keeper measured it, with the min/max shares in force, sampled during the run. Empty
    (declared columns) when the run has none: runs without GPU-time shares, and older runs."""
    shares_recorded: bool = False
    """``shares.csv`` exists, so the run enforced GPU-time shares (even if no row was written
    yet), as ``memory_recorded`` is for memory."""
    label: str | None = None
    """A name the caller gives the run for the report's tables, in place of its policy or
    directory name: a plan run's GPU runs are ``gpu0``, ``gpu1``, ..., since they share one
    policy and their directory names (``orion-<timestamp>``) can repeat between GPUs."""

    @property
    def name(self) -> str:
        """The run directory's own name (used as its label when policies repeat)."""
        return self.path.name

    @property
    def complete(self) -> bool:
        """False for ``running`` (writer died), ``incomplete`` and ``failed`` runs, and for a
        run whose tables no longer hold the rows recorded at close (``cut_tables``)."""
        return self.status == STATUS_COMPLETE and not self.cut_tables

    @property
    def stopped_early(self) -> bool:
        """The runner stopped before the end of its schedule, so the last window it was in
        ends at the stop, which ``run.json`` does not record, not at its planned end."""
        return self.status in STATUSES_STOPPED_EARLY

    def client(self, name: str) -> ClientInfo:
        for info in self.clients:
            if info.name == name:
                return info
        known = ", ".join(c.name for c in self.clients) or "none"
        raise OrionError(f"run {self.path} has no client {name!r} (clients: {known})")

    def table(self, name: str) -> pd.DataFrame:
        self.client(name)
        return self.tables[name]


def load_run(path: str | Path) -> RunData:
    """Parse the run directory at ``path``; a directory that is not a run is a one-line error."""
    root = Path(path)
    meta = _read_run_json(root)
    notes: list[str] = []

    status = _as_str(meta.get("status")) or "unknown"
    if status != STATUS_COMPLETE:
        notes.append(
            f"run status is {status!r}, not 'complete': numbers cover only what was written"
        )
    policy = _as_str(meta.get("policy")) or _as_str(_dig(meta, "config", "run", "policy"))
    if not policy:
        raise OrionError(f"{root / 'run.json'} names no policy", hint="the run.json is damaged")

    raw_clients = meta.get("clients")
    if not isinstance(raw_clients, list):
        raise OrionError(
            f"{root / 'run.json'} has no 'clients' list", hint="the run.json is damaged"
        )
    clients = tuple(_client_info(root, entry, index) for index, entry in enumerate(raw_clients))
    names = [c.name for c in clients]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise OrionError(f"{root / 'run.json'} lists client(s) twice: {', '.join(duplicates)}")

    recorded = _recorded_rows(meta, root, notes)
    if recorded is None and status == STATUS_COMPLETE:
        recorded = _rows_done(root, raw_clients, clients)
    cut: list[str] = []
    tables: dict[str, pd.DataFrame] = {}
    for info in clients:
        columns = INFERENCE_COLUMNS if info.is_inference else TRAINING_COLUMNS
        relative = _relative(root, info.table_path)
        if info.table_path.is_file():
            table = read_table(info.table_path, columns, notes=notes)
            rows_ok = _check_rows(relative, len(table), recorded, notes, cut)
            rows_ok = _check_unique_ids(table, columns[0].name, relative, notes, cut) and rows_ok
            rows_ok = _check_cut_line(table, relative, status, cut) and rows_ok
            tables[info.name] = _without_bad_values(table, columns, relative, notes, cut)
            if rows_ok and tables[info.name].empty and status == STATUS_COMPLETE:
                notes.append(
                    f"client {info.name!r}: {relative} has no rows although the run is "
                    "complete: there are no figures for this client"
                )
        else:
            notes.append(f"client {info.name!r} wrote no table ({info.table_path.name} is missing)")
            tables[info.name] = empty_table(columns)
            _check_rows(relative, None, recorded, notes, cut)
        if info.failed:
            notes.append(f"client {info.name!r} failed: {_client_error_text(info)}")

    gpu = _read_extra_table(root, run_format.GPU_TABLE, GPU_COLUMNS, recorded, notes, cut, status)
    trace = _read_extra_table(
        root, run_format.TRACE_TABLE, TRACE_COLUMNS, recorded, notes, cut, status
    )
    if trace is not None:
        trace["kernel_class"] = trace["kernel_class"].fillna("unknown")
    memory = _read_extra_table(
        root, run_format.MEMORY_TABLE, MEMORY_COLUMNS, recorded, notes, cut, status
    )
    limits = _read_extra_table(
        root, run_format.LIMITS_TABLE, LIMIT_COLUMNS, recorded, notes, cut, status
    )
    shares = _read_extra_table(
        root, run_format.SHARES_TABLE, SHARE_COLUMNS, recorded, notes, cut, status
    )

    return RunData(
        path=root,
        status=status,
        policy=policy,
        orion_version=_as_str(meta.get("orion_version")),
        git_revision=_as_str(meta.get("git_revision")),
        started_utc=_as_str(meta.get("started_utc")),
        ended_utc=_as_str(meta.get("ended_utc")),
        measure_start_s=_as_float(meta.get("measure_start_s")),
        measure_end_s=_as_float(meta.get("measure_end_s")),
        environment=_environment(meta.get("environment")),
        clients=clients,
        tables=tables,
        gpu=gpu,
        scheduler=_read_scheduler(root / "scheduler.json", notes),
        trace=trace,
        config=meta.get("config") if isinstance(meta.get("config"), dict) else {},
        meta=meta,
        notes=tuple(notes),
        cut_tables=tuple(cut),
        memory=_or_empty(memory, MEMORY_COLUMNS),
        limits=_or_empty(limits, LIMIT_COLUMNS),
        memory_recorded=memory is not None,
        shares=_or_empty(shares, SHARE_COLUMNS),
        shares_recorded=shares is not None,
    )


def _recorded_rows(meta: dict[str, Any], root: Path, notes: list[str]) -> dict[str, int] | None:
    """``run.json``'s rows per table at close; ``None`` for runs from before it was recorded
    (or a run whose writer never got to the end), whose tables are read unchecked."""
    raw = meta.get(run_format.TABLE_ROWS_KEY)
    if raw is None:
        return None
    if not isinstance(raw, dict):
        notes.append(f"run.json's {run_format.TABLE_ROWS_KEY!r} is not an object; rows unchecked")
        return None
    recorded = {}
    for key, value in raw.items():
        count = _as_int(value)
        if count is not None and count >= 0:
            recorded[str(key)] = count
    return recorded


def _rows_done(root: Path, raw_clients: list[Any], clients: Sequence[ClientInfo]) -> dict[str, int]:
    """The rows of each client's table in a complete run from before ``table_rows`` was
    recorded: its entry's ``done`` (requests or iterations finished), which its writer put one
    row for each of (so in all 455 tables of such runs committed under benchmarks/results/);
    a client without one is read unchecked, as before."""
    rows = {}
    for entry, info in zip(raw_clients, clients, strict=True):
        done = _as_int(entry.get("done")) if isinstance(entry, dict) else None
        if done is not None and done >= 0:
            rows[_relative(root, info.table_path)] = done
    return rows


def _check_cut_line(frame: pd.DataFrame, relative: str, status: str, cut: list[str]) -> bool:
    """A complete run's writers ended every table with a whole line: a cut last line there (its
    note is :func:`read_table`'s) is damage after the run, so the run is not complete. In a run
    that did not finish, a cut line is what its end left, and the status says so already."""
    if not frame.attrs.pop(_CUT_LINE, False) or status != STATUS_COMPLETE:
        return True
    if relative not in cut:
        cut.append(relative)
    return False


def _check_unique_ids(
    table: pd.DataFrame, column: str, relative: str, notes: list[str], cut: list[str]
) -> bool:
    """A client table numbers its rows (``request``, ``iteration``) once each: a number
    written twice is a table copied into itself or edited, whose figures cannot be trusted (a
    run from before row counts were recorded has nothing else to tell it by)."""
    if column not in table.columns:
        return True
    repeated = int(table[column].dropna().duplicated().sum())
    if not repeated:
        return True
    notes.append(
        f"{relative} has {repeated:,} row(s) whose {column} appears earlier in the table: the "
        "table was changed after the run; figures from it are wrong"
    )
    if relative not in cut:
        cut.append(relative)
    return False


def _relative(root: Path, path: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def _check_rows(
    relative: str,
    rows: int | None,
    recorded: dict[str, int] | None,
    notes: list[str],
    cut: list[str],
) -> bool:
    """Compare a table's rows (``None``: the file is missing) with those recorded at close;
    a mismatch is noted and the table listed in ``cut``. True when nothing is wrong."""
    expected = recorded.get(relative) if recorded is not None else None
    if expected is None:
        return True
    if rows is None:
        if expected == 0:
            return True
        notes.append(
            f"{relative} is missing, though {expected:,} rows were recorded at close: the "
            "table was lost; figures from it are missing"
        )
    elif rows < expected:
        notes.append(
            f"{relative} has {rows:,} of {expected:,} rows recorded at close: the table was "
            "cut; figures from it are wrong"
        )
    elif rows > expected:
        notes.append(
            f"{relative} has {rows:,} rows, more than the {expected:,} recorded at close: the "
            "table was changed after the run; figures from it are wrong"
        )
    else:
        return True
    cut.append(relative)
    return False


def _read_extra_table(
    root: Path,
    relative: str,
    columns: Sequence[Column],
    recorded: dict[str, int] | None,
    notes: list[str],
    cut: list[str],
    status: str,
) -> pd.DataFrame | None:
    """An optional table (``gpu.csv``, ``trace.csv``, ``memory.csv``, ``shares.csv``,
    ``limits.csv``): ``None`` when absent, and checked against its recorded rows where run.json
    has them."""
    path = root / relative
    if not path.is_file():
        expected = (recorded or {}).get(relative)
        if relative == run_format.TRACE_TABLE and expected:
            # a trace is large and often not kept (nor committed) with the run; the latencies
            # and throughputs do not come from it, so the run stays complete without it
            notes.append(
                f"{relative} is missing ({expected:,} kernel launches were traced): the tail "
                "attribution needs it; every other figure is unaffected"
            )
            return None
        _check_rows(relative, None, recorded, notes, cut)
        return None
    frame = read_table(path, columns, notes=notes)
    frame.attrs.pop(_BAD_VALUES, None)
    _check_rows(relative, len(frame), recorded, notes, cut)
    _check_cut_line(frame, relative, status, cut)
    return frame


_SHOWN_BAD_ROWS = 3
_BAD_VALUES = "orion_bad_values"
_CUT_LINE = "orion_cut_last_line"
"""Set in a table's ``attrs`` by :func:`read_table` when it dropped a cut last line."""


def _without_bad_values(
    frame: pd.DataFrame,
    columns: Sequence[Column],
    relative: str,
    notes: list[str],
    cut: list[str],
) -> pd.DataFrame:
    """``frame`` without the rows :func:`read_table` found bad values in (text, NaN or infinity
    where a number belongs, a negative count or duration; an empty cell is no value, as an
    unfinished request's end). Such a table is named with its first bad rows in ``notes`` and
    listed in ``cut``: figures from a table its writer never wrote that way cannot be trusted,
    so the run counts as not complete."""
    reasons: dict[int, str] = frame.attrs.get(_BAD_VALUES, {})
    if not reasons:
        return frame
    # rows numbered as data rows from 1 (the header is the file's first line)
    listed = "; ".join(
        f"row {index + 1}: {reason}" for index, reason in sorted(reasons.items())[:_SHOWN_BAD_ROWS]
    )
    more = len(reasons) - _SHOWN_BAD_ROWS
    notes.append(
        f"{relative} has {len(reasons):,} row(s) with bad values ({listed}"
        + (f"; and {more:,} more" if more > 0 else "")
        + "): they are left out and the run counts as incomplete"
    )
    if relative not in cut:
        cut.append(relative)
    kept = frame.drop(index=list(reasons)).reset_index(drop=True)
    kept.attrs.pop(_BAD_VALUES, None)
    return kept


def _bad_values(frame: pd.DataFrame, columns: Sequence[Column]) -> dict[int, str]:
    """{row index: why} for cells that hold something other than a number where the schema
    declares one (an empty cell is a missing value, not a bad one)."""
    reasons: dict[int, str] = {}
    for column in columns:
        if column.kind == "str":
            continue
        raw = frame[column.name]
        numbers = pd.to_numeric(raw, errors="coerce").astype("float64").to_numpy()
        present = (raw.notna() & (raw.astype(str).str.strip() != "")).to_numpy()
        not_number = present & ~np.isfinite(numbers)
        negative = present & (numbers < 0) if column.nonnegative else np.zeros(len(raw), bool)
        for position in np.flatnonzero(not_number | negative):
            what = "not a number" if not_number[position] else "negative"
            text = str(raw.iloc[position]).strip()
            reasons.setdefault(int(frame.index[position]), f"{column.name} is {text!r}, {what}")
    return reasons


def _or_empty(frame: pd.DataFrame | None, columns: Sequence[Column]) -> pd.DataFrame:
    """An optional table as RunData keeps it: an absent one as an empty table of its declared
    columns, so code downstream needs no ``None`` check (the ``*_recorded`` flags keep "absent"
    apart from "empty")."""
    return frame if frame is not None else empty_table(columns)


def load_runs(paths: Iterable[str | Path]) -> list[RunData]:
    """Load several run directories, in the order given (that order is kept in every table)."""
    paths = list(paths)
    seen: dict[Path, str | Path] = {}
    for path in paths:
        key = Path(path).resolve()
        if key in seen:
            raise OrionError(
                f"run directory {path} is given twice (also as {seen[key]}): it would be "
                "counted twice in every comparison",
                hint="give each run directory once",
            )
        seen[key] = path
    runs = [load_run(p) for p in paths]
    if not runs:
        raise OrionError("no run directories given", hint="pass one or more RUN_DIR paths")
    return runs


def empty_table(columns: Sequence[Column]) -> pd.DataFrame:
    return pd.DataFrame({c.name: pd.Series(dtype=_pandas_dtype(c.kind)) for c in columns})


def read_table(path: Path, columns: Sequence[Column], *, notes: list[str]) -> pd.DataFrame:
    """Read one CSV table of the run directory and type its declared columns.

    Writers end every row with a newline, so a last line without one is what a crash leaves
    when it cuts a write: it is dropped (and noted) even if it happens to parse, because a cut
    number still parses (``12.3`` from ``12.345``) and would be silently wrong.
    """
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise OrionError(f"cannot read {path}: {exc.strerror or exc}") from None
    cut_line = ""
    if text and not text.endswith("\n"):
        keep = text.rfind("\n") + 1
        cut_line = text[keep:].strip()
        text = text[:keep]
        if cut_line:
            notes.append(f"{path.name}: dropped a cut last line ({_shorten(cut_line)!r})")
    frame = _parse_table(path, text, columns)
    if cut_line:
        frame.attrs[_CUT_LINE] = True
    return frame


def _parse_table(path: Path, text: str, columns: Sequence[Column]) -> pd.DataFrame:
    """The table ``text`` (whole lines) of ``path``, its declared columns typed and its bad
    values found (``attrs``)."""
    if not text.strip():
        return empty_table(columns)
    text_dtypes = {c.name: str for c in columns if c.kind == "str"}
    try:
        # only an empty cell is a missing value: "nan", "inf" or "NA" written into a table is
        # kept as text, so that it is found as a bad value rather than read as a gap
        frame = pd.read_csv(
            io.StringIO(text),
            comment="#",
            dtype=text_dtypes,
            keep_default_na=False,
            na_values=[""],
        )
    except pd.errors.EmptyDataError:
        return empty_table(columns)
    except (pd.errors.ParserError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise OrionError(f"{path} is not a readable CSV table: {reason}") from None
    frame.columns = [str(c).strip() for c in frame.columns]
    for column in columns:
        if column.optional and column.name not in frame.columns:
            frame[column.name] = pd.Series(None, index=frame.index, dtype=object)
    missing = [c.name for c in columns if c.name not in frame.columns]
    if missing:
        raise OrionError(
            f"{path} lacks column(s) {', '.join(missing)}",
            hint="expected columns: " + ",".join(c.name for c in columns if not c.optional),
        )
    frame = frame.reset_index(drop=True)
    bad = _bad_values(frame, columns)
    for column in columns:
        frame[column.name] = _typed(frame[column.name], column.kind)
    if bad:
        frame.attrs[_BAD_VALUES] = bad
    return frame


def _typed(values: pd.Series, kind: ColumnType) -> pd.Series:
    if kind == "str":
        return values.astype(object).where(values.notna(), None)
    numbers = pd.to_numeric(values, errors="coerce")
    if kind == "int" and not numbers.isna().any():
        return numbers.astype("int64")
    return numbers.astype("float64")


def _pandas_dtype(kind: ColumnType) -> str:
    return {"int": "int64", "float": "float64", "str": "object"}[kind]


def _read_run_json(root: Path) -> dict[str, Any]:
    not_a_run = OrionError(
        f"{root} is not an orion run directory (no run.json)",
        hint="pass a directory written by `orion colocate`",
    )
    path = root / run_format.RUN_JSON
    try:
        raw = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        raise not_a_run from None
    except OSError as exc:
        raise OrionError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        meta = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise OrionError(
            f"run.json in {root} is nested too deeply to be a run record",
            hint="the run's record is damaged (the runner only ever replaces it whole)",
        ) from None
    except ValueError as exc:  # UnicodeDecodeError (binary) is a ValueError too
        reason = _shorten(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, 80)
        raise OrionError(
            f"run.json in {root} is not valid JSON (cut or corrupted): {reason}",
            hint="the run's record is damaged (the runner only ever replaces it whole)",
        ) from None
    if not isinstance(meta, dict):
        # there is a run.json: say what it holds, not that it is missing
        raise OrionError(
            f"{path} holds a JSON {_json_kind(meta)}, not a run record (an object)",
            hint="the run's record is damaged (the runner only ever replaces it whole)",
        )
    if meta.get("format") != RUN_FORMAT:
        raise OrionError(
            f"{path} is not an orion run record (format {meta.get('format')!r}, not "
            f"{RUN_FORMAT!r})",
            hint="pass a directory written by `orion colocate`",
        )
    version = meta.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise OrionError(f"{root / 'run.json'} has no integer 'version'")
    if version > RUN_VERSION:
        raise OrionError(
            f"{root} is an orion-run version {version}; this orion reads up to {RUN_VERSION}",
            hint="report it with the orion version that wrote it",
        )
    return meta


def _json_kind(value: Any) -> str:
    """What a JSON document holds, in JSON's words (a list, a string, a number, ...)."""
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool) or value is None:
        return "literal (true, false or null)"
    return "number"


def _client_info(root: Path, entry: Any, index: int) -> ClientInfo:
    where = f"{root / 'run.json'} client #{index}"
    if not isinstance(entry, dict) or not _as_str(entry.get("name")):
        raise OrionError(f"{where} has no name")
    name = str(entry["name"])
    raw_mode = _as_str(entry.get("mode")) or ""
    mode = _MODE_ALIASES.get(raw_mode.lower())
    if mode is None:
        raise OrionError(f"{where} ({name}) has mode {raw_mode!r}; expected 'infer' or 'train'")
    table = _as_str(entry.get("table")) or f"clients/{name}.csv"
    log = _as_str(entry.get("log"))
    arrivals = entry.get("arrivals")
    return ClientInfo(
        name=name,
        role=(_as_str(entry.get("role")) or "be").lower(),
        workload=_as_str(entry.get("workload")) or "?",
        mode=mode,
        batch_size=_as_int(entry.get("batch_size")),
        dtype=_as_str(entry.get("dtype")),
        arrivals=arrivals if isinstance(arrivals, dict) else None,
        exit_code=_as_int(entry.get("exit_code")),
        error=_as_str(entry.get("error")),
        table_path=root / table,
        log_path=root / log if log else None,
        window_start_s=_as_float(entry.get("window_start_s")),
        window_end_s=_as_float(entry.get("window_end_s")),
    )


def _client_error_text(info: ClientInfo) -> str:
    parts = []
    if info.error:
        parts.append(info.error)
    if info.exit_code not in (None, 0):
        parts.append(f"exit code {info.exit_code}")
    return "; ".join(parts)


def _environment(raw: Any) -> Environment:
    env = raw if isinstance(raw, dict) else {}
    return Environment(
        gpu_name=_as_str(env.get("gpu_name")),
        sm_count=_as_int(env.get("sm_count")),
        driver_version=_as_str(env.get("driver_version")),
        cuda_version=_as_str(env.get("cuda_version")),
        torch_version=_as_str(env.get("torch_version")),
        cudnn_version=_as_str(env.get("cudnn_version")),
        hostname=_as_str(env.get("hostname")),
    )


def _read_scheduler(path: Path, notes: list[str]) -> dict[str, dict[str, Any]] | None:
    """Per-client preload statistics; damage here only loses that table, so it is a note."""
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        notes.append("scheduler.json is not readable JSON; scheduler statistics left out")
        return None
    clients = raw.get("clients") if isinstance(raw, dict) else None
    if not isinstance(clients, dict):
        notes.append("scheduler.json has no 'clients' object; scheduler statistics left out")
        return None
    return {str(k): v for k, v in clients.items() if isinstance(v, dict)}


def _dig(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _as_str(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _as_float(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _as_int(value: Any) -> int | None:
    number = _as_float(value)
    return int(number) if number is not None and number.is_integer() else None


def _shorten(text: str, limit: int = 40) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"
