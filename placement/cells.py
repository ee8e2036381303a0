"""One resumable runner of measured cells, for `orion pairs` and ``benchmarks/matrix.py``.

A cell is one `orion colocate` run of a jobs config. A measurement (a pair matrix, a benchmark
matrix) plans its cells in the order they must run (round by round, so slow drift of the machine
spreads over every cell alike) and hands them here; this module runs the ones not yet complete,
records each run directory in the folder's index file as soon as the run ends (so Ctrl-C leaves
the index as it was after the last finished cell and the next invocation resumes), and stops at
the first cell that does not fit the time budget (keeping the planned order for the next
invocation rather than skipping ahead to smaller cells).

The two index files, each declared here once: ``index.json`` (format ``orion-pairs-index``,
`orion pairs`: the cells by key, and the spec they measure, so that a folder is never resumed
for other jobs) and ``matrix.json`` (format ``orion-matrix``, the benchmark matrix: the cells by
group, then by key, and every invocation's command line). A cell's entry is its run directory
relative to the folder, or null when the run was refused.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orion_common.atomic_io import write_json_atomic
from orion_common.errors import OrionError
from orion_common.run_format import RUN_JSON

SETUP_ESTIMATE_S = 10.0
"""Start-up per client phase (process start, model build, warm-up), for the time budget: 7-8 s
measured on an H200 with ResNet-50 clients."""


@dataclass(frozen=True)
class IndexFormat:
    """An index file's name and header."""

    file: str
    format: str
    version: int = 1


PAIRS_INDEX = IndexFormat("index.json", "orion-pairs-index")
MATRIX_INDEX = IndexFormat("matrix.json", "orion-matrix")


@dataclass(frozen=True)
class PlannedCell:
    """One run to make: its jobs config, its key in the index (within ``group`` when the index
    keeps its cells by group) and how many client phases run back to back (a benchmark's
    ``dedicated`` cell runs HP alone, then BE alone), for the time budget."""

    key: str
    jobs: dict[str, Any]
    group: str | None = None
    phases: int = 1

    @property
    def label(self) -> str:
        return self.key if self.group is None else f"{self.group} {self.key}"

    @property
    def source(self) -> str:
        """How a refusal of its jobs config names it."""
        return self.key if self.group is None else f"{self.group}/{self.key}"

    def estimate_s(self) -> float:
        return self.phases * (float(self.jobs["run"]["duration_s"]) + SETUP_ESTIMATE_S)


RunCell = Callable[[dict[str, Any], str], Path]
"""Runs one cell's jobs config (named by the second argument) and returns its run directory."""


def run_cell_real(jobs: dict[str, Any], source: str) -> Path:
    """The real runner: the jobs config validated as `orion colocate` does, then run_jobs."""
    from colocation.config import parse_jobs
    from colocation.runner import run_jobs

    return run_jobs(parse_jobs(jobs, Path.cwd(), source=source)).run_dir


def complete_run(folder: Path, entry: str | None) -> Path | None:
    """The run directory of an index entry when its run completed, else None."""
    if not entry:
        return None
    path = folder / entry
    try:
        status = json.loads((path / RUN_JSON).read_text(encoding="utf-8"))["status"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return path if status == "complete" else None


class CellIndex:
    """A folder's index file: which run directory measured each cell."""

    def __init__(self, folder: Path, kind: IndexFormat, data: dict[str, Any]) -> None:
        self.folder = folder
        self.kind = kind
        self.data = data

    @classmethod
    def load(cls, folder: Path, kind: IndexFormat, spec: dict[str, Any] | None = None) -> CellIndex:
        """The index in ``folder`` (a new one when there is none). With ``spec``, what the
        cells measure: an index made for another spec is refused."""
        path = folder / kind.file
        if not path.exists():
            data: dict[str, Any] = {"format": kind.format, "version": kind.version, "cells": {}}
            if spec is not None:
                data["spec"] = spec
            return cls(folder, kind, data)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise OrionError(f"cannot read the index {path}: {error}") from None
        if not isinstance(data, dict) or data.get("format") != kind.format:
            raise OrionError(f"{path} is not an index of format {kind.format!r}")
        if spec is not None and data.get("spec") != json.loads(json.dumps(spec)):
            raise OrionError(
                f"{path} was made for other jobs, policy, settings or duration",
                hint="use another --out folder, or remove that folder to measure again",
            )
        return cls(folder, kind, data)

    def cells(self, group: str | None = None) -> dict[str, str | None]:
        """The entries by key (of ``group``, when the index keeps its cells by group)."""
        cells = self.data.setdefault("cells", {})
        return cells if group is None else cells.setdefault(group, {})

    def complete(self, group: str | None, key: str) -> Path | None:
        return complete_run(self.folder, self.cells(group).get(key))

    def record(self, cell: PlannedCell, run_dir: Path | None) -> str | None:
        """Records (and saves) the run of ``cell``; None for a refused one. Returns the entry."""
        entry = None
        if run_dir is not None:
            run_dir = Path(run_dir).absolute()
            try:
                entry = str(run_dir.relative_to(self.folder.absolute()))
            except ValueError:
                entry = str(run_dir)
        self.cells(cell.group)[cell.key] = entry
        self.save()
        return entry

    def save(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.folder / self.kind.file, self.data)


def run_cells(
    index: CellIndex,
    planned: Sequence[PlannedCell],
    *,
    time_budget_s: float | None = None,
    run_cell: RunCell = run_cell_real,
    progress: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Runs the planned cells not yet complete, in order, recording each; True when none is left.

    A cell whose run is refused (OrionError) is recorded as null and the next one runs.
    """
    index.save()
    started = clock()
    for number, cell in enumerate(planned, start=1):
        if index.complete(cell.group, cell.key):
            continue
        elapsed = clock() - started
        if time_budget_s is not None and elapsed + cell.estimate_s() > time_budget_s:
            return False
        progress(f"[{elapsed:6.0f} s] cell {number}/{len(planned)}: {cell.label}")
        try:
            run_dir = run_cell(cell.jobs, f"cell {cell.source}")
        except OrionError as error:
            progress(f"  refused: {error.message}")
            index.record(cell, None)
            continue
        entry = index.record(cell, run_dir)
        state = "complete" if complete_run(index.folder, entry) else "not complete"
        progress(f"  {state}: {run_dir}")
    return True
