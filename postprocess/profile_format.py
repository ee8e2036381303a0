"""The profile file (format ``orion-profile``, version 2; spec in docs/architecture.md).

Line 1 names the format and version, line 2 is one JSON object of metadata, then one CSV row per
kernel launch. Metadata sits in ``#`` lines so ``pandas.read_csv(path, comment="#")`` reads the
table with no orion code. The scheduler refuses what it cannot trust: another format, a newer
version, missing columns.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from orion_common.atomic_io import write_text_atomic
from orion_common.errors import OrionError

PROFILE_FORMAT = "orion-profile"
PROFILE_VERSION = 2
READABLE_VERSIONS = (1, 2)
"""Version 2 added the graph columns; a version-1 file reads with them empty (an eager step)."""
GRAPH_COLUMNS = ("graph", "graph_duration_ns")
"""The columns version 2 added: which CUDA graph of the profile a row (a kernel node) belongs to,
and that graph's wall time on the GPU; empty for a kernel of an eager step."""

PROFILE_COLUMNS: dict[str, str] = {
    "order": "Int64",
    "kernel_name": "string",
    "demangled_name": "string",
    "grid_x": "Int64",
    "grid_y": "Int64",
    "grid_z": "Int64",
    "block_x": "Int64",
    "block_y": "Int64",
    "block_z": "Int64",
    "occurrence": "Int64",
    "registers_per_thread": "Int64",
    "static_shared_memory_bytes": "Int64",
    "dynamic_shared_memory_bytes": "Int64",
    "blocks_per_sm": "Int64",
    "sm_needed": "Int64",
    "waves": "float64",
    "compute_throughput_pct": "float64",
    "memory_throughput_pct": "float64",
    "tensor_pipe_pct": "float64",
    "kernel_class": "string",
    "duration_ns": "float64",
    "measured_duration_ns": "float64",
    "graph": "Int64",
    "graph_duration_ns": "float64",
}
"""Column -> pandas dtype, in file order. Nullable dtypes: an ``n/a`` counter stays empty."""

SHAPE_COLUMNS: tuple[str, ...] = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
"""A launch's shape, in the order every table that carries one lists it: declared once, so the
profile, the measured tables and the summaries cannot disagree on it."""

IDENTITY_COLUMNS: tuple[str, ...] = ("kernel_name", *SHAPE_COLUMNS)
"""A kernel's identity: name plus launch shape. Nothing is matched by position alone."""

METADATA_KEYS: tuple[str, ...] = (
    "format",
    "version",
    "created_utc",
    "gpu_name",
    "sm_count",
    "compute_capability",
    "driver_version",
    "cuda_version",
    "torch_version",
    "cudnn_version",
    "ncu_version",
    "workload",
    "mode",
    "batch_size",
    "dtype",
    "classification_rule",
    "metric_set",
    "throughput_source",
    "device_limits",
    "source",
    "ncu_command",
)
"""Every key a version-1 profile's metadata carries (None when unknown), in file order.

``metric_set`` and ``throughput_source`` came later without a version change (the table did not
change): profiles written before them lack both, and readers must not require them."""

_COMPATIBILITY_CHECKS: dict[str, tuple[str, str]] = {
    "gpu_name": ("GPU", "SM needs and durations do not carry over to another GPU"),
    "sm_count": ("SM count", "SM needs do not carry over to another SM count"),
    "driver_version": ("NVIDIA driver", "kernel durations may differ"),
    "cuda_version": ("CUDA version", "libraries may pick other kernels"),
    "torch_version": ("PyTorch version", "the workload may launch other kernels"),
    "cudnn_version": ("cuDNN version", "convolutions may use other kernels"),
}
_FIRST_LINE = re.compile(r"^#\s*orion-profile:\s*(\S+)\s*$")
_SECOND_LINE = re.compile(r"^#\s*metadata:\s*(.*)$")
_REPROFILE_HINT = "re-make it with 'orion profile' (or 'orion profile --from-ncu FILE.csv')"


@dataclass(frozen=True)
class Profile:
    """A profile in memory: ``metadata`` as in the file's line 2, ``kernels`` one row per launch."""

    metadata: dict[str, Any]
    kernels: pd.DataFrame


def complete_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """Every declared key (None when unknown) in file order, format and version forced to this
    writer's, then any extra keys the caller added."""
    ordered: dict[str, Any] = {key: metadata.get(key) for key in METADATA_KEYS}
    ordered["format"] = PROFILE_FORMAT
    ordered["version"] = PROFILE_VERSION
    ordered.update({key: value for key, value in metadata.items() if key not in ordered})
    return ordered


def write_profile(profile: Profile, path: str | os.PathLike[str]) -> Path:
    """Write ``profile`` atomically (a reader never sees half a file) and return the path."""
    missing = [column for column in PROFILE_COLUMNS if column not in profile.kernels.columns]
    if missing:
        raise ValueError(f"profile table lacks column(s): {', '.join(missing)}")
    metadata = complete_metadata(profile.metadata)
    buffer = io.StringIO()
    buffer.write(f"# {PROFILE_FORMAT}: {PROFILE_VERSION}\n")
    buffer.write(f"# metadata: {json.dumps(metadata, default=str, allow_nan=False)}\n")
    table = profile.kernels[list(PROFILE_COLUMNS)].astype(PROFILE_COLUMNS)
    # Quote every text cell: libstdc++ spells lambdas "{lambda()#1}", and pandas'
    # comment="#" cuts an unquoted cell at the '#'.
    table.to_csv(buffer, index=False, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    target = Path(path)
    write_text_atomic(target, buffer.getvalue())
    return target


def _parse_version(first_line: str, source: Path) -> int:
    match = _FIRST_LINE.match(first_line.strip())
    if match is None:
        raise OrionError(
            f"{source} is not an orion profile: line 1 should be "
            f"'# {PROFILE_FORMAT}: {PROFILE_VERSION}'",
            hint=_REPROFILE_HINT,
        )
    try:
        version = int(match.group(1))
    except ValueError:
        raise OrionError(
            f"{source}: profile version {match.group(1)!r} is not an integer",
            hint=_REPROFILE_HINT,
        ) from None
    if version not in READABLE_VERSIONS:
        newer = version > PROFILE_VERSION
        raise OrionError(
            f"{source} is an {PROFILE_FORMAT} version {version} file; this orion reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}",
            hint="upgrade orion" if newer else "re-profile the workload with `orion profile`",
        )
    return version


def _parse_metadata(second_line: str, version: int, source: Path) -> dict[str, Any]:
    match = _SECOND_LINE.match(second_line.strip())
    if match is None:
        raise OrionError(
            f"{source}: line 2 should be '# metadata: {{...}}' (one JSON object)",
            hint=_REPROFILE_HINT,
        )
    try:
        metadata = json.loads(match.group(1))
    except json.JSONDecodeError as error:
        raise OrionError(
            f"{source}: the metadata on line 2 is not valid JSON ({error.msg})",
            hint=_REPROFILE_HINT,
        ) from None
    if not isinstance(metadata, dict):
        raise OrionError(f"{source}: the metadata on line 2 is not a JSON object", _REPROFILE_HINT)
    if metadata.get("format") != PROFILE_FORMAT or metadata.get("version") != version:
        raise OrionError(
            f"{source}: metadata says format {metadata.get('format')!r} version "
            f"{metadata.get('version')!r}, expected {PROFILE_FORMAT!r} version {version}",
            hint=_REPROFILE_HINT,
        )
    return metadata


def _not_found(source: Path) -> OrionError:
    return OrionError(f"profile not found: {source}", hint="make one with 'orion profile'")


def _cannot_read(source: Path, error: OSError | UnicodeDecodeError) -> OrionError:
    reason = error.strerror if isinstance(error, OSError) and error.strerror else error
    return OrionError(f"cannot read profile {source}: {reason}", hint=_REPROFILE_HINT)


def _too_short(source: Path) -> OrionError:
    return OrionError(
        f"{source} is not an orion profile: expected a format line, a metadata line and a table",
        hint=_REPROFILE_HINT,
    )


def read_profile_header(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A profile's metadata (line 2), its format and version checked, without the kernel table.

    Reads the two header lines only, so checking many profiles stays cheap; raises the same
    :class:`OrionError` as :func:`read_profile` for anything wrong in them.
    """
    source = Path(path)
    if not source.is_file():
        raise _not_found(source)
    try:
        with source.open(encoding="utf-8") as handle:
            first, second = handle.readline(), handle.readline()
    except (OSError, UnicodeDecodeError) as error:
        raise _cannot_read(source, error) from None
    if not second.endswith("\n"):
        raise _too_short(source)
    return _parse_metadata(second, _parse_version(first, source), source)


def read_profile(path: str | os.PathLike[str]) -> Profile:
    """Load and validate a profile; raise :class:`OrionError` when it cannot be trusted."""
    source = Path(path)
    if not source.is_file():
        raise _not_found(source)
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise _cannot_read(source, error) from None
    lines = text.split("\n", 2)
    if len(lines) < 3:
        raise _too_short(source)
    version = _parse_version(lines[0], source)
    metadata = _parse_metadata(lines[1], version, source)
    try:
        # Only empty cells are missing: a kernel could be called "NA".
        table = pd.read_csv(io.StringIO(lines[2]), dtype=str, keep_default_na=False, na_values=[""])
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as error:
        raise OrionError(f"{source}: the kernel table is not valid CSV ({error})") from None
    if version == 1:  # before the graph columns: an eager step's kernels
        for column in GRAPH_COLUMNS:
            table[column] = float("nan")  # as an empty cell reads
    missing = [column for column in PROFILE_COLUMNS if column not in table.columns]
    if missing:
        raise OrionError(
            f"{source}: the kernel table lacks column(s) {', '.join(missing)}",
            hint=_REPROFILE_HINT,
        )
    kernels = pd.DataFrame(index=table.index)
    for column, dtype in PROFILE_COLUMNS.items():
        values = table[column]
        try:
            if dtype == "Int64":
                kernels[column] = pd.to_numeric(values, errors="raise").astype(dtype)
            else:
                # astype parses floats exactly; pandas 2's to_numeric can be one ulp off.
                kernels[column] = values.astype(dtype)
        except (ValueError, TypeError):
            raise OrionError(
                f"{source}: column {column} has values that are not {dtype}",
                hint=_REPROFILE_HINT,
            ) from None
    return Profile(metadata=metadata, kernels=kernels)


def _differs(old: Any, new: Any) -> bool:
    return str(old).strip() != str(new).strip()


def profile_compatibility_warnings(
    profile: Profile | Mapping[str, Any], current: Mapping[str, Any]
) -> list[str]:
    """One sentence per fact that differs between where the profile was made and ``current``.

    ``profile`` is a :class:`Profile` or just its metadata (:func:`read_profile_header`).
    ``current`` is shaped like :func:`orion_common.sysinfo.software_summary`. A value unknown on
    either side (None or absent) is skipped: no evidence is not a mismatch.
    """
    metadata = profile.metadata if isinstance(profile, Profile) else profile
    warnings: list[str] = []
    for key, (label, consequence) in _COMPATIBILITY_CHECKS.items():
        made_with, here = metadata.get(key), current.get(key)
        if made_with is None or here is None or not _differs(made_with, here):
            continue
        warnings.append(
            f"profile was made with {label} {made_with}, this machine has {here}: {consequence}."
        )
    return warnings


def gpu_slug(gpu_name: str) -> str:
    """``NVIDIA H200`` -> ``nvidia-h200``: a folder name that is safe everywhere."""
    slug = re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")
    return slug or "unknown-gpu"


def default_profile_path(
    workload: str,
    mode: str,
    batch_size: int,
    dtype: str,
    gpu_name: str,
    *,
    cuda_graph: bool = False,
) -> Path:
    """Where ``orion profile`` writes and the scheduler looks by default.

    ``$ORION_PROFILE_DIR`` (else ``~/.cache/orion/profiles``) /
    ``<gpu slug>/<workload>-<mode>-bs<N>-<dtype>[-graph]/profile.csv``: keyed by GPU because SM
    needs and durations do not carry over from one GPU to another, and by ``-graph`` for a step
    captured as a CUDA graph, which the scheduler sees as one graph launch, not as kernels.
    """
    if not workload or "/" in workload or os.sep in workload or workload in (".", ".."):
        raise OrionError(
            f"workload name {workload!r} cannot be used in a file name",
            hint="use the workload's registered name",
        )
    return profile_root() / _profile_relative_path(
        workload, mode, batch_size, dtype, gpu_name, cuda_graph
    )


def profile_root() -> Path:
    """``$ORION_PROFILE_DIR``, else ``~/.cache/orion/profiles``: where profiles go by default."""
    root_env = os.environ.get("ORION_PROFILE_DIR")
    return Path(root_env).expanduser() if root_env else Path.home() / ".cache/orion/profiles"


def program_profile_path(name: str, gpu_name: str, *, cuda_graph: bool = False) -> Path:
    """Where ``orion profile --name NAME -- CMD`` writes by default: beside the workloads'
    profiles, ``<root>/<gpu slug>/<name>[-graph]/profile.csv`` (``name`` is a folder name the
    caller has checked)."""
    folder = name + ("-graph" if cuda_graph else "")
    return profile_root() / gpu_slug(gpu_name) / folder / "profile.csv"


def _profile_relative_path(
    workload: str, mode: str, batch_size: int, dtype: str, gpu_name: str, cuda_graph: bool
) -> Path:
    folder = f"{workload}-{mode}-bs{int(batch_size)}-{dtype}" + ("-graph" if cuda_graph else "")
    return Path(gpu_slug(gpu_name)) / folder / "profile.csv"


def reference_profile_root() -> Path | None:
    """The reference profiles orion ships: ``orion_profiles/`` beside the installed packages
    (the wheel's copy of the repository's ``profiles/``), else ``profiles/`` of a source tree."""
    packages = Path(__file__).resolve().parent.parent
    for candidate in (packages / "orion_profiles", packages / "profiles"):
        if candidate.is_dir():
            return candidate
    return None


def find_profile(
    workload: str,
    mode: str,
    batch_size: int,
    dtype: str,
    gpu_name: str,
    *,
    cuda_graph: bool = False,
) -> Path:
    """The profile a client gets when it names none: the user's own (:func:`default_profile_path`)
    first, then orion's reference profile for this GPU kind; for a graph client the graph
    profile before the eager one (the same kernels, launched as a unit). When none exists, the
    user's default path, for the error that says how to make it."""
    own = default_profile_path(workload, mode, batch_size, dtype, gpu_name, cuda_graph=cuda_graph)
    reference = reference_profile_root()
    for graph in (True, False) if cuda_graph else (False,):
        candidates = [
            default_profile_path(workload, mode, batch_size, dtype, gpu_name, cuda_graph=graph)
        ]
        if reference is not None:
            relative = _profile_relative_path(workload, mode, batch_size, dtype, gpu_name, graph)
            candidates.append(reference / relative)
        for candidate in candidates:
            if candidate.is_file():
                return candidate
    return own
