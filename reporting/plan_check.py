"""A plan run (``orion run-plan plan.json``) measured against the plan it ran.

Why: ``orion plan`` places jobs on GPUs by *predicted* figures (alone figures times pair-matrix
ratios), and a plan is only worth following if running it measures what it predicted. The
acceptance rule is the issue's: every HP p99 and every BE throughput within 10 % of the plan's
prediction (:data:`PREDICTION_TOLERANCE`), and every HP within its p99 SLO. This module reads the
plan-run directory (format ``orion-plan-run``, declared and laid out in
``orion_common/plan_run_format.py``), loads each GPU's ordinary run directory, so that the usual
report covers them all, and sets each planned client's measured figure beside its predicted one.

The measured figures come from the functions the report's own tables use
(``reporting.metrics.client_summary`` for the p99 and the throughput, ``hp_p99_interval`` for the
p99's 95 % interval), so this section and the Clients table cannot disagree. Units are the
plan's: an HP's p99 in ms; a BE's throughput in *samples* per second, since that is what the pair
matrix measures alone (``placement/pairs.py``: summed samples over summed iteration durations)
and so what the plan predicts. It is compared with the report's ``samples_per_s`` (samples over
the measured window), not with its ``throughput_per_s`` (iterations per second), which would be
off by the batch size; the two definitions differ only by the idle gaps between iterations.

The plan itself is read by the caller (``placement.plan_file.load_plan``) and passed in:
``placement`` imports ``reporting``, never the other way round (docs/architecture.md), so the
plan is described here only by the attributes this module reads (:class:`PlanLike`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from orion_common.atomic_io import write_text_atomic
from orion_common.errors import OrionError
from orion_common.json_fields import FieldError, array, integer, join, load_checked, obj, string
from orion_common.output_paths import make_folder
from orion_common.plan_run_format import (
    PLAN_RUN_FILE,
    PLAN_RUN_FORMAT,
    PLAN_RUN_STATUSES,
    PLAN_RUN_VERSION,
    gpu_folder,
)
from reporting.metrics import LIMIT_TOLERANCE, client_summary, hp_p99_interval
from reporting.rundata import STATUS_COMPLETE, RunData, load_run
from reporting.summary import (
    REPORT_FILE,
    REPORT_FORMAT,
    REPORT_VERSION,
    markdown_table,
    report_json,
    to_jsonable,
    write_report,
)

PREDICTION_TOLERANCE = 0.10
"""The issue's acceptance rule: "HP p99 and BE throughput within 10 % of the plan's
predictions", either way (a prediction 20 % too pessimistic is as wrong a basis for placing jobs
as one 20 % too optimistic)."""

LENGTH_TOLERANCE = 0.10
"""How far a run's measured length may be from its pair matrix's cells' before the two are said
to measure different things: a daemon learns the HP and settles its latency loop in the first
seconds of a shared run, which weigh more in a short run (measured on two H200s: 30-s plan runs
kept 7-17% less BE throughput than 10-s cells predicted)."""


def length_mismatch(measured_s: float, matrix_s: float | None) -> str | None:
    """Why a run measured for ``measured_s`` seconds may not measure what a matrix of
    ``matrix_s``-second cells predicted, or None when the lengths agree (or the matrix does not
    say). One rule for `orion run-plan`'s warning before a run and the report's after it."""
    if matrix_s is None or abs(measured_s - matrix_s) <= LENGTH_TOLERANCE * matrix_s:
        return None
    return (
        f"a run of {measured_s:.0f} s, where the plan's predictions come from pairs measured for "
        f"{matrix_s:g} s each (a daemon's first seconds weigh differently in runs of other "
        "lengths)"
    )


# Per planned client, what could be made of it.
STATE_OK = "ok"
"""Measured in a complete run: judged."""
STATE_INCOMPLETE = "incomplete"
"""Measured in a run that stopped early: judged on what it recorded, and flagged."""
STATE_FAILED = "failed"
"""The GPU's run (or the client) failed: not judged, and the plan run is not accepted."""
STATE_MISSING = "missing"
"""No run (or no such client in it) to measure: not judged."""

PLAN_CHECK_COLUMNS = [
    "gpu",
    "run",
    "policy",
    "client",
    "role",
    "state",
    "predicted_p99_ms",
    "predicted_p99_upper_ms",
    "p99_slo_ms",
    "predicted_throughput_per_s",
    "measured_p99_ms",
    "measured_p99_ci_lo_ms",
    "measured_p99_ci_hi_ms",
    "measured_throughput_per_s",
    "ratio",
    "within_tolerance",
    "slo_met",
    "note",
]
"""One row per planned client. ``*_throughput_per_s``: samples per second (module docstring);
``ratio``: measured / predicted (HP: p99 over ``predicted_p99_ms``); ``within_tolerance`` and
``slo_met``: None where nothing could be judged."""

SECTION_HEADING = "Plan: measured against predicted"
# (column, header) of the section's table; the *_text columns come from display_frame.
PLAN_VIEW = [
    ("gpu", "GPU"),
    ("run", "run"),
    ("client", "client"),
    ("role", "role"),
    ("state", "state"),
    ("predicted_text", "predicted"),
    ("measured_text", "measured [95% CI]"),
    ("ratio_text", "measured / predicted"),
    ("within_tolerance", f"within {PREDICTION_TOLERANCE:.0%}"),
    ("slo_text", "p99 SLO ms"),
    ("slo_met", "SLO met"),
    ("note", "note"),
]


class PlannedClient(Protocol):
    """What is read of a plan client (``placement.plan_file.PlanClient``)."""

    @property
    def name(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def p99_slo_ms(self) -> float | None: ...
    @property
    def predicted_p99_ms(self) -> float | None: ...
    @property
    def predicted_p99_upper_ms(self) -> float | None: ...
    @property
    def predicted_throughput_per_s(self) -> float | None: ...


class PlannedGpu(Protocol):
    """What is read of a plan GPU (``placement.plan_file.PlanGpu``)."""

    @property
    def index(self) -> int: ...
    @property
    def policy(self) -> str: ...
    @property
    def clients(self) -> Sequence[PlannedClient]: ...
    @property
    def matrix_duration_s(self) -> float | None: ...


class PlanLike(Protocol):
    """What is read of a plan (``placement.plan_file.Plan``)."""

    @property
    def gpus(self) -> Sequence[PlannedGpu]: ...


@dataclass(frozen=True)
class PlanRunGpu:
    """One GPU's entry of ``plan_run.json``; paths resolved against the plan-run directory."""

    index: int
    jobs: Path
    run_dir: Path | None
    """None while (or because) the GPU's scheduler run has not written a run directory."""
    exit_code: int | None
    """None while it runs (or when it never started)."""


@dataclass(frozen=True)
class PlanRun:
    """``plan_run.json``, checked."""

    path: Path
    plan_path: Path
    status: str
    started_utc: str
    ended_utc: str | None
    gpus: tuple[PlanRunGpu, ...]

    def gpu(self, index: int) -> PlanRunGpu | None:
        return next((gpu for gpu in self.gpus if gpu.index == index), None)


@dataclass(frozen=True)
class PlanCheck:
    """A plan run's GPU runs (for the usual report) and its measured-against-predicted table."""

    plan_run: PlanRun
    runs: tuple[RunData, ...]
    """The GPU runs that could be loaded, in GPU order, labelled ``gpu<k>``."""
    rows: pd.DataFrame
    """:data:`PLAN_CHECK_COLUMNS`."""
    gpus: pd.DataFrame
    """Per GPU of the plan with clients: ``gpu``, ``run``, ``state``, ``note``, ``run_dir``,
    ``exit_code``."""
    accepted: bool | None
    """True: every planned client measured within the tolerance and every HP within its SLO;
    False: one is outside, missed its SLO, or failed; None: some could not be judged (no run,
    no measurement) and none is outside."""
    summary: tuple[str, ...]
    """Plain sentences: the verdict, the counts, each failed or missing GPU."""
    warnings: tuple[str, ...]


def is_plan_run(path: str | Path) -> bool:
    """Whether ``path`` is a plan-run directory: it holds a ``plan_run.json`` (checked when read:
    a damaged one is an error, not a directory taken for something else)."""
    return (Path(path) / PLAN_RUN_FILE).is_file()


def read_plan_run(path: str | Path) -> PlanRun:
    """``PATH/plan_run.json``, checked; raises a one-line OrionError naming the file and field
    for a malformed one, and for a missing copy of the plan. Unknown fields are ignored, so a
    reader keeps reading files that a later writer adds a field to (a change in meaning would
    bump the version)."""
    root = Path(path)
    file = root / PLAN_RUN_FILE
    if not file.exists():
        raise OrionError(
            f"{root} is not a plan-run directory (no {PLAN_RUN_FILE})",
            hint="pass a directory written by `orion run-plan plan.json`",
        )
    hint = f"{PLAN_RUN_FILE} is written by `orion run-plan plan.json`"
    return load_checked(file, "plan-run record", lambda data: _parse_plan_run(root, data), hint)


def check_plan(plan: PlanLike, plan_run: PlanRun) -> PlanCheck:
    """Loads each GPU's run of ``plan_run`` and sets every planned client's measured figure
    beside the plan's prediction. GPUs the plan leaves empty are skipped (nothing predicted);
    a GPU whose run failed or is missing gets rows saying so instead of figures."""
    runs: list[RunData] = []
    rows: list[dict[str, Any]] = []
    gpu_rows: list[dict[str, Any]] = []
    length_warnings: list[str] = []
    for gpu in plan.gpus:
        if not gpu.clients:
            continue
        entry = plan_run.gpu(gpu.index)
        run, state, note = _load_gpu_run(gpu.index, entry, plan_run.status)
        if run is not None:
            runs.append(run)
            length = _measured_length(run)
            mismatch = None if length is None else length_mismatch(length, gpu.matrix_duration_s)
            if mismatch is not None:
                length_warnings.append(f"gpu{gpu.index}: {mismatch}")
        gpu_rows.append(
            {
                "gpu": gpu.index,
                "run": run.label if run is not None else None,
                "state": state,
                "note": note,
                "run_dir": str(entry.run_dir) if entry and entry.run_dir else None,
                "exit_code": entry.exit_code if entry else None,
            }
        )
        measured = _measured(run) if run is not None and state != STATE_FAILED else {}
        for client in gpu.clients:
            rows.append(_client_row(gpu, client, run, state, note, measured))
    frame = _with_none(pd.DataFrame(rows, columns=PLAN_CHECK_COLUMNS), _OBJECT_COLUMNS)
    gpus = _with_none(
        pd.DataFrame(gpu_rows, columns=["gpu", "run", "state", "note", "run_dir", "exit_code"]),
        ("run", "note", "run_dir", "exit_code"),
    )
    accepted = _accepted(frame)
    warnings = []
    if plan_run.status != STATUS_COMPLETE:
        warnings.append(
            f"the plan run's status is {plan_run.status!r}, not 'complete': "
            + (
                "it is still running, so its GPUs' figures are not final"
                if plan_run.status == "running"
                else "some GPU runs did not finish normally"
            )
        )
    warnings += length_warnings
    planned = set(gpus["gpu"])
    for entry in plan_run.gpus:
        if entry.index not in planned:
            warnings.append(
                f"{PLAN_RUN_FILE} lists GPU {entry.index}, which the plan gives no clients"
            )
    return PlanCheck(
        plan_run=plan_run,
        runs=tuple(runs),
        rows=frame,
        gpus=gpus,
        accepted=accepted,
        summary=tuple(_summary(frame, gpus, accepted)),
        warnings=tuple(warnings),
    )


def display_frame(rows: pd.DataFrame, missing: str = "-") -> pd.DataFrame:
    """``rows`` with the text columns :data:`PLAN_VIEW` shows: the predicted and measured figure
    of each role in one column with its unit (HP ``p99 ms (upper U)`` / ``p99 ms [lo, hi]``, BE
    ``samples/s``), so HP and BE rows read in one table; ``missing`` stands for no value (the
    terminal's ``-``, report.md's ``–``)."""
    shown = rows.copy()
    predicted, measured, ratio, slo = [], [], [], []
    for row in rows.to_dict("records"):
        if row["role"] == "hp":
            text = _number(row["predicted_p99_ms"], "{:.2f} ms", missing)
            if text != missing and _finite(row["predicted_p99_upper_ms"]):
                text += f" (upper {row['predicted_p99_upper_ms']:.2f})"
            predicted.append(text)
            text = _number(row["measured_p99_ms"], "{:.2f} ms", missing)
            if text != missing and _finite(row["measured_p99_ci_lo_ms"]):
                lo, hi = row["measured_p99_ci_lo_ms"], row["measured_p99_ci_hi_ms"]
                text += f" [{lo:.2f}, {hi:.2f}]"
            measured.append(text)
            slo.append(_number(row["p99_slo_ms"], "{:.2f}", missing))
        else:
            unit = "{:.1f} samples/s"
            predicted.append(_number(row["predicted_throughput_per_s"], unit, missing))
            measured.append(_number(row["measured_throughput_per_s"], unit, missing))
            slo.append(missing)
        ratio.append(_number(row["ratio"], "{:.3f}", missing))
    shown["predicted_text"] = predicted
    shown["measured_text"] = measured
    shown["ratio_text"] = ratio
    shown["slo_text"] = slo
    shown["note"] = [note if isinstance(note, str) else "" for note in rows["note"]]
    return shown


def plan_check_lines(check: PlanCheck) -> list[str]:
    """The report.md section: what was run, the verdict, the table and how to read it."""
    run = check.plan_run
    lines = [f"## {SECTION_HEADING}", ""]
    lines.append(
        f"Plan run `{run.path.name}` (status `{run.status}`, started {run.started_utc}"
        + (f", ended {run.ended_utc}" if run.ended_utc else "")
        + f"), plan `{_relative(run.plan_path, run.path)}`."
    )
    lines.append("")
    lines += [f"- {sentence}" for sentence in check.summary]
    lines += [f"- warning: {warning}" for warning in check.warnings]
    lines += ["", markdown_table(display_frame(check.rows, "–"), PLAN_VIEW), ""]
    lines.append(
        f"{_RULE} HP: p99 latency of the in-window requests, with its 95% bootstrap interval; "
        "predicted is the plan's (alone p99 × pair ratio), upper its value at the ratio "
        "interval's upper end, which the plan checked the SLO with; the SLO is met when the "
        "measured p99 is at most the SLO. BE: samples per second over the measured window (the "
        "Clients table's samples/s); predicted is the plan's (alone samples/s × pair ratio). "
        "States: ok (judged), incomplete (judged on what a run stopped early recorded), failed "
        "and missing (not judged)."
    )
    lines.append("")
    return lines


def plan_check_json(check: PlanCheck) -> dict[str, Any]:
    """The section as plain JSON types (NaN and missing values become ``None``)."""
    run = check.plan_run
    return to_jsonable(
        {
            "plan_run": {
                "path": str(run.path),
                "plan": str(run.plan_path),
                "status": run.status,
                "started_utc": run.started_utc,
                "ended_utc": run.ended_utc,
            },
            "tolerance": PREDICTION_TOLERANCE,
            "rule": _RULE,
            "units": {
                "hp": "p99 latency in ms",
                "be": "throughput in samples per second (the clients' samples_per_s)",
            },
            "accepted": check.accepted,
            "gpus": check.gpus.to_dict("records"),
            "clients": check.rows.to_dict("records"),
            "summary": list(check.summary),
            "warnings": list(check.warnings),
        }
    )


def plan_report_json(check: PlanCheck) -> dict[str, Any]:
    """``orion report --json`` of a plan run: the usual report of its GPU runs with the plan
    check under ``"plan"``; with no GPU run to report on, the plan check alone."""
    if check.runs:
        data = report_json(check.runs)
    else:
        data = {"format": REPORT_FORMAT, "version": REPORT_VERSION, "runs": [], "warnings": []}
    data["plan"] = plan_check_json(check)
    return data


def write_plan_report(check: PlanCheck, out_dir: str | Path) -> Path:
    """``report.md`` (and its figures) of a plan run: the plan section first, then the usual
    report of its GPU runs; with no GPU run to report on, the plan section alone."""
    lines = plan_check_lines(check)
    if check.runs:
        return write_report(check.runs, out_dir, preface=lines)
    out = make_folder(out_dir, "report folder")
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = ["# orion run report", "", f"No GPU run to report on. Generated {generated}.", ""]
    path = out / REPORT_FILE
    write_text_atomic(path, "\n".join(head + lines).rstrip() + "\n")
    return path


# --- reading plan_run.json -----------------------------------------------------------------------

_RULE = (
    f"Accepted when every HP p99 and every BE throughput is within {PREDICTION_TOLERANCE:.0%} "
    "of the plan's prediction (|measured / predicted − 1| ≤ "
    f"{PREDICTION_TOLERANCE:g}) and every HP meets its p99 SLO."
)


EXIT_CODE_MIN = -(2**31)
"""A process's exit status is negative when a signal ended it (subprocess's convention)."""


def _parse_plan_run(root: Path, data: Any) -> PlanRun:
    required = ("format", "version", "plan", "started_utc", "ended_utc", "status", "gpus")
    data = obj(data, "", required, unknown_ok=True)
    if data["format"] != PLAN_RUN_FORMAT:
        raise FieldError("format", f"must be {PLAN_RUN_FORMAT!r}, not {data['format']!r}")
    version = integer(data["version"], "version")
    if version != PLAN_RUN_VERSION:
        raise FieldError("version", f"is {version}; this orion reads version {PLAN_RUN_VERSION}")
    status = string(data["status"], "status", PLAN_RUN_STATUSES)
    ended = data["ended_utc"]
    plan_path = root / string(data["plan"], "plan")
    if not plan_path.is_file():
        raise OrionError(
            f"plan run {root} has no {plan_path.name} (the copy of the plan it ran): "
            f"{plan_path} is missing",
            hint="the plan-run directory is incomplete; copy the plan it ran there",
        )
    gpus: list[PlanRunGpu] = []
    for position, item in enumerate(array(data["gpus"], "gpus")):
        path = join("gpus", position)
        gpu = _gpu_entry(root, item, path)
        if any(seen.index == gpu.index for seen in gpus):
            raise FieldError(join(path, "index"), f"GPU {gpu.index} is listed twice")
        gpus.append(gpu)
    return PlanRun(
        path=root,
        plan_path=plan_path,
        status=status,
        started_utc=string(data["started_utc"], "started_utc"),
        ended_utc=None if ended is None else string(ended, "ended_utc"),
        gpus=tuple(gpus),
    )


def _gpu_entry(root: Path, item: Any, path: str) -> PlanRunGpu:
    item = obj(item, path, ("index", "jobs", "run_dir", "exit_code"), unknown_ok=True)
    run_dir = item["run_dir"]
    exit_code = item["exit_code"]
    return PlanRunGpu(
        index=integer(item["index"], join(path, "index")),
        jobs=root / string(item["jobs"], join(path, "jobs")),
        run_dir=None if run_dir is None else root / string(run_dir, join(path, "run_dir")),
        exit_code=None
        if exit_code is None
        else integer(exit_code, join(path, "exit_code"), minimum=EXIT_CODE_MIN),
    )


# --- measuring -----------------------------------------------------------------------------------


def _load_gpu_run(
    index: int, entry: PlanRunGpu | None, plan_status: str
) -> tuple[RunData | None, str, str | None]:
    """GPU ``index``'s run (labelled ``gpu<index>``) when it can be loaded, its state and why."""
    if entry is None:
        return None, STATE_MISSING, f"{PLAN_RUN_FILE} lists no run for this GPU"
    failed_code = entry.exit_code not in (None, 0)
    if entry.run_dir is None:
        if failed_code:
            note = f"exited with code {entry.exit_code} before writing a run directory"
            return None, STATE_FAILED, note
        if plan_status == "running" and entry.exit_code is None:
            return None, STATE_MISSING, "no run directory yet (the plan run is still running)"
        return None, STATE_MISSING, "wrote no run directory"
    try:
        run = replace(load_run(entry.run_dir), label=gpu_folder(index))
    except OrionError as error:
        prefix = f"exited with code {entry.exit_code}; " if failed_code else ""
        return None, STATE_FAILED if failed_code else STATE_MISSING, prefix + error.message
    code = f", exit code {entry.exit_code}" if failed_code else ""
    if run.status == "failed":
        return run, STATE_FAILED, f"run failed (every client failed){code}"
    if not run.complete:
        # Ctrl-C or SIGTERM stops every GPU's run (exit code 130): what each recorded is judged.
        note = f"run {run.status}{code}: figures cover only what it recorded"
        return run, STATE_INCOMPLETE, note
    if failed_code:
        # The run itself went through and recorded everything: its figures stand.
        return run, STATE_OK, f"`orion colocate` exited with code {entry.exit_code} after the run"
    return run, STATE_OK, None


def _measured_length(run: RunData) -> float | None:
    """Seconds of the run's measured window, None when its record lacks one."""
    if run.measure_start_s is None or run.measure_end_s is None:
        return None
    return run.measure_end_s - run.measure_start_s


def _measured(run: RunData) -> dict[str, dict[str, Any]]:
    """The report's Clients-table row of each client of ``run``, by name."""
    summary = client_summary(run, run.label)
    return {str(row["client"]): row for row in summary.to_dict("records")}


def _client_row(
    gpu: PlannedGpu,
    client: PlannedClient,
    run: RunData | None,
    state: str,
    note: str | None,
    measured: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    nan = float("nan")
    hp = client.role == "hp"
    row: dict[str, Any] = {
        "gpu": gpu.index,
        "run": run.label if run is not None else None,
        "policy": gpu.policy,
        "client": client.name,
        "role": client.role,
        "state": state,
        "predicted_p99_ms": _value(client.predicted_p99_ms) if hp else nan,
        "predicted_p99_upper_ms": _value(client.predicted_p99_upper_ms) if hp else nan,
        "p99_slo_ms": _value(client.p99_slo_ms) if hp else nan,
        "predicted_throughput_per_s": nan if hp else _value(client.predicted_throughput_per_s),
        "measured_p99_ms": nan,
        "measured_p99_ci_lo_ms": nan,
        "measured_p99_ci_hi_ms": nan,
        "measured_throughput_per_s": nan,
        "ratio": nan,
        "within_tolerance": None,
        "slo_met": None,
        "note": note,
    }
    if run is None or state == STATE_FAILED:
        return row
    figures = measured.get(client.name)
    if figures is None:
        row["state"] = STATE_MISSING
        row["note"] = _join(note, f"the GPU's run has no client {client.name!r}")
        return row
    info = run.client(client.name)
    if info.failed:
        row["state"] = STATE_FAILED
        row["note"] = _join(note, f"client failed: {figures['errors']}")
        return row
    if hp:
        value = float(figures["p99_ms"])
        row["measured_p99_ms"] = value
        if info.is_inference and _finite(value):
            _, lo, hi = hp_p99_interval(run, info)
            row["measured_p99_ci_lo_ms"], row["measured_p99_ci_hi_ms"] = lo, hi
        predicted = row["predicted_p99_ms"]
        if _finite(value) and _finite(row["p99_slo_ms"]):
            row["slo_met"] = bool(value <= row["p99_slo_ms"] + LIMIT_TOLERANCE)
    else:
        value = float(figures["samples_per_s"])
        row["measured_throughput_per_s"] = value
        predicted = row["predicted_throughput_per_s"]
    if not _finite(value):
        row["note"] = _join(note, "nothing measured in its window")
        return row
    if _finite(predicted) and predicted > 0:
        ratio = value / predicted
        row["ratio"] = ratio
        row["within_tolerance"] = bool(abs(ratio - 1.0) <= PREDICTION_TOLERANCE + LIMIT_TOLERANCE)
    return row


def _accepted(rows: pd.DataFrame) -> bool | None:
    records = rows.to_dict("records")
    if not records:
        return None
    if any(
        r["within_tolerance"] is False or r["slo_met"] is False or r["state"] == STATE_FAILED
        for r in records
    ):
        return False
    judged = all(
        r["within_tolerance"] is True and (r["role"] != "hp" or r["slo_met"] is True)
        for r in records
    )
    return True if judged else None


def _summary(rows: pd.DataFrame, gpus: pd.DataFrame, accepted: bool | None) -> list[str]:
    records = rows.to_dict("records")
    if accepted is True:
        head = (
            f"plan met: every HP p99 and BE throughput within {PREDICTION_TOLERANCE:.0%} of its "
            "prediction and every HP within its p99 SLO"
        )
    elif accepted is False:
        head = "plan not met"
    else:
        head = "plan cannot be judged: some planned clients have no measurement"
    lines = [head]
    within = sum(r["within_tolerance"] is True for r in records)
    judged = sum(r["within_tolerance"] is not None for r in records)
    count = (
        f"{within} of {len(records)} planned clients within {PREDICTION_TOLERANCE:.0%} of the "
        "plan's prediction"
    )
    if judged < len(records):
        count += f" ({len(records) - judged} not judged)"
    lines.append(count)
    hp = [r for r in records if r["role"] == "hp"]
    if hp:
        met = sum(r["slo_met"] is True for r in hp)
        lines.append(f"{met} of {len(hp)} HP clients met their p99 SLO")
    for row in records:
        if row["within_tolerance"] is False:
            lines.append(
                f"gpu{row['gpu']} {row['client']} ({row['role']}): measured {row['ratio']:.3f}× "
                f"the prediction, outside ±{PREDICTION_TOLERANCE:.0%}"
            )
        if row["slo_met"] is False:
            lines.append(
                f"gpu{row['gpu']} {row['client']} (hp): p99 {row['measured_p99_ms']:.2f} ms "
                f"over its {row['p99_slo_ms']:.2f} ms SLO"
            )
    for gpu in gpus.to_dict("records"):
        if gpu["state"] in (STATE_FAILED, STATE_MISSING):
            lines.append(f"gpu{gpu['gpu']} {gpu['state']}: {gpu['note']}")
    return lines


_OBJECT_COLUMNS = ("run", "note", "within_tolerance", "slo_met")
"""Columns whose missing values stay None (pandas would make a text column's None a NaN and a
yes/no column with a None a float)."""


def _with_none(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """``frame`` with ``columns`` as object columns, a missing value in them being None."""
    for column in columns:
        values = frame[column].astype(object)
        frame[column] = values.where(values.notna(), None)
    return frame


def _value(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def _finite(value: Any) -> bool:
    try:
        return value is not None and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _number(value: Any, spec: str, missing: str) -> str:
    return spec.format(float(value)) if _finite(value) else missing


def _join(first: str | None, second: str) -> str:
    return f"{first}; {second}" if first else second


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)
