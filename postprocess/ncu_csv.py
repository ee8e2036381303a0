"""Read Nsight Compute's ``--csv --page raw`` output into a typed kernel table plus device limits.

The raw page is ncu's only CSV layout with one row per kernel launch and every metric as a column,
so it maps directly onto orion's table. What the tool writes is not plain CSV, though, and each
quirk below has broken a naive ``pd.read_csv`` at some point:

- ncu's own ``==PROF==`` / ``==WARNING==`` lines, the application's stdout and blank lines come
  before the header row;
- a units row follows the header ("ns", "%", "byte/block");
- numbers carry thousands separators ("16,896", "3,186,486,486.49");
- kernel names are quoted and full of commas (template arguments);
- a metric ncu could not collect is ``n/a`` or empty: that value becomes NaN and the kernel still
  loads, because one missing counter should not lose a whole profile.

Columns are selected, renamed and typed only through :data:`postprocess.metrics.METRICS`. The two
throughputs come from ncu's SOL column when the CSV has it (metric set ``full``), else from the
row-wise maximum of whichever of their sub-metric columns it has (metric set ``fast``).
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pandas as pd

from orion_common.errors import OrionError
from orion_common.prerequisites import COUNTER_PERMISSION_HINT
from postprocess.demangle import demangle
from postprocess.metrics import (
    COMPUTE_CAPABILITY_COLUMN,
    DEVICE_ATTRIBUTES,
    ELAPSED_PCT_SUFFIX,
    METRICS,
    OPTIONAL_DEVICE_ATTRIBUTES,
    TENSOR_PIPE_COLUMNS,
    MetricSpec,
)

_PANDAS_DTYPES = {"int": "Int64", "float": "float64", "str": "string", "dim3": "Int64"}
_MISSING_VALUES = frozenset({"", "n/a", "na", "nan", "none", "-"})
_RAW_HINT = (
    "run ncu with '--csv --page raw' (or convert a saved report with "
    "'ncu --import REPORT.ncu-rep --csv --page raw > FILE.csv')"
)
# ncu time units, as the units row spells them, in nanoseconds.
_TIME_UNITS_NS = {
    "ns": 1.0,
    "nsecond": 1.0,
    "us": 1e3,
    "usecond": 1e3,
    "ms": 1e6,
    "msecond": 1e6,
    "s": 1e9,
    "second": 1e9,
}
_SI_PREFIXED = re.compile(r"^[KMGT][a-z]")


def _kernel_columns() -> dict[str, str]:
    columns: dict[str, str] = {}
    for spec in METRICS:
        for name in spec.columns:
            columns[name] = _PANDAS_DTYPES[spec.dtype]
        if spec.column == "kernel_name":
            columns["demangled_name"] = "string"
    columns["tensor_pipe_pct"] = "float64"
    return columns


KERNEL_COLUMNS: dict[str, str] = _kernel_columns()
"""The declared schema of :attr:`NcuTrace.kernels`: column -> pandas dtype, in table order.
``tensor_pipe_pct`` is the row-wise maximum of the tensor-pipe candidates ncu reported."""


@dataclass(frozen=True)
class DeviceLimits:
    """Per-SM resource limits of the profiled GPU, as ncu read them from the driver.

    Occupancy is computed from these instead of constants so a profile made on any GPU is right
    for that GPU. ``warp_size`` and ``reserved_shared_memory_per_block_bytes`` fall back to CUDA's
    values (32; 1 KiB reserved per block since compute capability 8.0) when ncu omits them.
    """

    name: str
    sm_count: int
    compute_capability: str | None
    max_threads_per_sm: int
    max_blocks_per_sm: int
    max_registers_per_sm: int
    max_shared_memory_per_sm_bytes: int
    max_warps_per_sm: int
    warp_size: int = 32
    reserved_shared_memory_per_block_bytes: int = 1024

    def to_metadata(self) -> dict[str, int]:
        """The ``device_limits`` object of the profile metadata (architecture.md)."""
        return {
            "max_threads_per_sm": self.max_threads_per_sm,
            "max_blocks_per_sm": self.max_blocks_per_sm,
            "max_registers_per_sm": self.max_registers_per_sm,
            "max_shared_memory_per_sm_bytes": self.max_shared_memory_per_sm_bytes,
            "max_warps_per_sm": self.max_warps_per_sm,
        }


@dataclass(frozen=True)
class NcuTrace:
    """One ncu run: kernels in launch order (schema :data:`KERNEL_COLUMNS`) and the GPU's limits.

    ``throughput_source`` says how each throughput column was computed: throughput column ->
    ``"sol"`` (ncu's SOL column) or ``"sub-metric-max"`` (see
    :meth:`~postprocess.metrics.MetricSpec.source_in`).
    """

    kernels: pd.DataFrame
    device: DeviceLimits
    source: Path
    throughput_source: dict[str, str]


def read_ncu_raw_csv(path: str | Path) -> NcuTrace:
    """Parse ncu's raw-page CSV at ``path``; raise :class:`OrionError` on anything unusable."""
    source = Path(path)
    if not source.is_file():
        raise OrionError(
            f"ncu CSV not found: {source}",
            hint="check the path; orion profile writes it next to the profile as ncu_raw.csv",
        )
    text = source.read_text(encoding="utf-8", errors="replace")
    if "ERR_NVGPUCTRPERM" in text:
        raise OrionError(
            f"ncu could not read GPU performance counters (ERR_NVGPUCTRPERM) in {source}: "
            "this user has no permission to profile",
            hint=COUNTER_PERMISSION_HINT,
        )
    header, units, rows = _split_table(text, source)
    _check_required_columns(header, source)
    if not rows:
        raise OrionError(
            f"ncu CSV {source} has a header but no kernel rows: the profiled range contained "
            "no kernels",
            hint="check ncu's kernel filters (--kernel-name, --launch-skip, --launch-count, "
            "--nvtx-include) and that the workload ran on the GPU",
        )
    raw = pd.DataFrame(rows, columns=header, dtype=object)
    unit_of = dict(zip(header, units, strict=True))
    kernels = _kernel_table(raw, unit_of, source)
    device = _device_limits(raw, source)
    return NcuTrace(
        kernels=kernels,
        device=device,
        source=source,
        throughput_source=_throughput_sources(header),
    )


def _throughput_sources(header: list[str]) -> dict[str, str]:
    sources = {spec.column: spec.source_in(header) for spec in METRICS if spec.sub_metrics}
    return {column: how for column, how in sources.items() if how is not None}


def _is_header(line: str) -> bool:
    return line.lstrip("\ufeff").startswith(('"ID",', "ID,"))


def _split_table(text: str, source: Path) -> tuple[list[str], list[str], list[list[str]]]:
    """(header, units, kernel rows) with everything ncu or the application printed around them."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _is_header(line)), None)
    if start is None:
        errors = [line.strip() for line in lines if line.startswith("==ERROR==")]
        if errors:
            raise OrionError(f"ncu failed and wrote no kernel table: {errors[0]}", hint=_RAW_HINT)
        raise OrionError(
            f'{source} is not an ncu raw CSV: no header row starting with "ID" found',
            hint=_RAW_HINT,
        )
    records = [
        record
        for record in csv.reader(io.StringIO("\n".join(lines[start:])))
        if any(cell.strip() for cell in record) and not record[0].startswith("==")
    ]
    header = [name.lstrip("\ufeff") for name in records[0]]
    if {"Metric Name", "Metric Value"} <= set(header):
        raise OrionError(
            f"{source} is ncu's details page (one row per metric), not the raw page orion reads",
            hint=_RAW_HINT,
        )
    if "Kernel Name" not in header:
        raise OrionError(
            f'{source} is not an ncu raw CSV: its header has no "Kernel Name" column',
            hint=_RAW_HINT,
        )
    body = records[1:]
    units = [""] * len(header)
    if body and body[0] and body[0][0].strip() == "":
        units = [unit.strip() for unit in body[0]]
        body = body[1:]
    for number, record in enumerate(body, start=1):
        if len(record) != len(header):
            raise OrionError(
                f"ncu CSV {source}: kernel row {number} has {len(record)} fields but the header "
                f"has {len(header)}",
                hint="the file looks truncated or edited; re-export it from ncu",
            )
    if len(units) != len(header):
        raise OrionError(
            f"ncu CSV {source}: the units row has {len(units)} fields but the header has "
            f"{len(header)}",
            hint="the file looks truncated or edited; re-export it from ncu",
        )
    return header, units, body


def _is_satisfied(spec: MetricSpec, present: set[str]) -> bool:
    return spec.ncu_name in present or any(name in present for name in spec.sub_metrics)


def _short_names(names: tuple[str, ...]) -> str:
    """``a.avg.pct_of_peak_sustained_elapsed, b...`` -> ``a, b (each .avg.pct_of_...)``."""
    bases = [name.removesuffix(ELAPSED_PCT_SUFFIX) for name in names]
    return f"{', '.join(bases)} (each {ELAPSED_PCT_SUFFIX})"


def _check_required_columns(header: list[str], source: Path) -> None:
    present = set(header)
    missing = [spec for spec in METRICS if spec.required and not _is_satisfied(spec, present)]
    if not missing:
        return
    fixed = [spec.ncu_name for spec in missing if not spec.is_metric]
    if fixed:
        raise OrionError(
            f"ncu CSV {source} lacks column(s) {', '.join(fixed)} that ncu's raw page always has",
            hint=_RAW_HINT,
        )
    _raise_missing_metrics(missing, source)


def _raise_missing_metrics(missing: list[MetricSpec], source: Path) -> NoReturn:
    """The error for required metrics the CSV lacks, naming what would do for each."""
    plain = [spec.ncu_name for spec in missing if not spec.sub_metrics]
    throughputs = [spec for spec in missing if spec.sub_metrics]
    described = plain + [
        f"{spec.column} (either {spec.ncu_name} or any of its sub-metrics "
        f"{_short_names(spec.sub_metrics)})"
        for spec in throughputs
    ]
    message = f"ncu CSV {source} lacks required metric column(s): {'; '.join(described)}"
    if not throughputs:
        hint = f"add them to ncu's metric list: --metrics {','.join(plain)}"
    else:
        sol = [*plain, *(spec.ncu_name for spec in throughputs)]
        subs = [*plain, *(name for spec in throughputs for name in spec.sub_metrics)]
        hint = (
            f"add to ncu's metric list either the exact SOL metrics: --metrics {','.join(sol)}\n"
            f"or the sub-metrics: --metrics {','.join(subs)}"
        )
    raise OrionError(
        message,
        hint=hint + "\n(`orion profile --metric-set full` or `fast` requests one or the other: "
        "postprocess.metrics.NCU_METRIC_SETS)",
    )


def _float_or_nan(text: Any) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def _numbers(values: pd.Series) -> pd.Series:
    """Floats from ncu's text: thousands separators dropped, ``n/a`` and blanks as NaN.

    Parsed with Python's ``float`` (pandas 2's ``to_numeric`` can be one ulp off); text that is
    no number at all becomes NaN like ``n/a``.
    """
    text = values.astype("string").str.strip()
    text = text.where(~text.str.lower().isin(_MISSING_VALUES)).str.replace(",", "", regex=False)
    try:
        return text.astype("float64")
    except (TypeError, ValueError):
        return pd.Series(
            [_float_or_nan(value) for value in text.tolist()], index=values.index, dtype="float64"
        )


def _unit_factor(spec: MetricSpec, unit: str, source: Path, column: str | None = None) -> float:
    """Multiplier taking ncu's unit to ours; refuses units we would otherwise misread.

    ``column`` names the CSV column when it is not ``spec.ncu_name`` (a sub-metric).
    """
    if spec.unit == "ns":
        factor = _TIME_UNITS_NS.get(unit or "ns")
    elif spec.unit == "pct":
        factor = 1.0 if unit in ("", "%") else None
    elif spec.unit == "bytes":
        factor = 1.0 if unit == "" or unit.startswith("byte") else None
    elif spec.unit == "count":
        factor = None if _SI_PREFIXED.match(unit) else 1.0
    else:
        factor = 1.0
    if factor is None:
        raise OrionError(
            f"ncu CSV {source}: column {column or spec.ncu_name} is in unit '{unit}', which "
            f"orion does not convert to {spec.unit}",
            hint="re-run ncu with '--print-units base' so every value is in its base unit",
        )
    return factor


def _typed(values: pd.Series, dtype: str, column: str, source: Path) -> pd.Series:
    if dtype != "Int64":
        return values.astype(dtype)
    whole = values.dropna()
    if not (whole == whole.round()).all():
        raise OrionError(
            f"ncu CSV {source}: column {column} should hold whole numbers but has fractions",
            hint="the file looks edited; re-export it from ncu",
        )
    return values.round().astype("Int64")


def _kernel_table(raw: pd.DataFrame, unit_of: dict[str, str], source: Path) -> pd.DataFrame:
    table: dict[str, pd.Series] = {}
    index = pd.RangeIndex(len(raw))
    for spec in METRICS:
        if spec.sub_metrics and spec.ncu_name not in raw.columns:
            table[spec.column] = _submetric_maximum(raw, spec, unit_of, source)
            continue
        if spec.ncu_name not in raw.columns:
            for name in spec.columns:
                table[name] = pd.Series(None, index=index, dtype=object).astype(
                    KERNEL_COLUMNS[name]
                )
            continue
        values = raw[spec.ncu_name].reset_index(drop=True)
        if spec.dtype == "str":
            table[spec.column] = values.astype("string")
        elif spec.dtype == "dim3":
            inner = values.astype("string").str.strip().str.strip("()")
            # Dimensions are separated by ", "; a thousands separator has no space after it.
            parts = inner.str.split(", ", regex=False, expand=True).reindex(columns=range(3))
            for axis, name in enumerate(spec.columns):
                table[name] = _typed(_numbers(parts[axis]), "Int64", spec.ncu_name, source)
        else:
            factor = _unit_factor(spec, unit_of.get(spec.ncu_name, ""), source)
            numbers = _numbers(values) * factor
            table[spec.column] = _typed(numbers, KERNEL_COLUMNS[spec.column], spec.ncu_name, source)
        if spec.column == "kernel_name":
            table["demangled_name"] = (
                table["kernel_name"]
                .map(lambda name: demangle(name) if isinstance(name, str) else name)
                .astype("string")
            )
    kernels = pd.DataFrame(table, index=index)
    kernels["tensor_pipe_pct"] = kernels[list(TENSOR_PIPE_COLUMNS)].max(axis=1, skipna=True)
    return kernels[list(KERNEL_COLUMNS)].astype(KERNEL_COLUMNS)


def _submetric_maximum(
    raw: pd.DataFrame, spec: MetricSpec, unit_of: dict[str, str], source: Path
) -> pd.Series:
    """Row-wise maximum of whichever of ``spec``'s sub-metric columns the CSV has (NaN where a
    row has none of them): the fast metric set's stand-in for ncu's SOL value."""
    values = [
        _numbers(raw[name].reset_index(drop=True))
        * _unit_factor(spec, unit_of.get(name, ""), source, column=name)
        for name in spec.sub_metrics
        if name in raw.columns
    ]
    if not values:
        return pd.Series(math.nan, index=pd.RangeIndex(len(raw)), dtype="float64")
    return pd.concat(values, axis=1).max(axis=1, skipna=True)


def _single_value(raw: pd.DataFrame, column: str, source: Path) -> str | None:
    """The one value a device column has on every row (None when all rows lack it)."""
    values = raw[column].astype(str).str.strip()
    values = values[~values.str.lower().isin(_MISSING_VALUES)].unique()
    if len(values) > 1:
        raise OrionError(
            f"ncu CSV {source} covers kernels on more than one GPU ({column} has values "
            f"{', '.join(sorted(values)[:4])})",
            hint="profile one GPU at a time: set CUDA_VISIBLE_DEVICES to a single device",
        )
    return values[0] if len(values) else None


def _device_int(raw: pd.DataFrame, column: str, source: Path) -> int | None:
    value = _single_value(raw, column, source)
    if value is None:
        return None
    try:
        return int(float(value.replace(",", "")))
    except ValueError:
        raise OrionError(
            f"ncu CSV {source}: device attribute {column} is not a number: {value!r}",
            hint="the file looks edited; re-export it from ncu",
        ) from None


def _device_limits(raw: pd.DataFrame, source: Path) -> DeviceLimits:
    missing = [col for col in DEVICE_ATTRIBUTES.values() if col not in raw.columns]
    if missing:
        raise OrionError(
            f"ncu CSV {source} lacks device attribute column(s): {', '.join(missing)}",
            hint="ncu's raw page always carries device__attribute_*; " + _RAW_HINT,
        )
    values: dict[str, int] = {}
    for field, column in DEVICE_ATTRIBUTES.items():
        if field == "name":
            continue
        number = _device_int(raw, column, source)
        if number is None or number <= 0:
            raise OrionError(
                f"ncu CSV {source}: device attribute {column} is missing or zero",
                hint="the file looks edited; re-export it from ncu",
            )
        values[field] = number
    optional = {
        field: _device_int(raw, column, source) if column in raw.columns else None
        for field, column in OPTIONAL_DEVICE_ATTRIBUTES.items()
    }
    compute_capability: str | None = None
    if optional["cc_major"] is not None and optional["cc_minor"] is not None:
        compute_capability = f"{optional['cc_major']}.{optional['cc_minor']}"
    elif COMPUTE_CAPABILITY_COLUMN in raw.columns:
        compute_capability = _single_value(raw, COMPUTE_CAPABILITY_COLUMN, source)
    name = _single_value(raw, DEVICE_ATTRIBUTES["name"], source) or "unknown GPU"
    extras: dict[str, int] = {}
    if optional["warp_size"]:
        extras["warp_size"] = optional["warp_size"]
    if optional["reserved_shared_memory_per_block_bytes"] is not None:
        extras["reserved_shared_memory_per_block_bytes"] = optional[
            "reserved_shared_memory_per_block_bytes"
        ]
    return DeviceLimits(name=name, compute_capability=compute_capability, **values, **extras)
