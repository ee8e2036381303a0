"""The plan file, format `orion-plan` version 1: which clients run on which GPU, and why.

Written by `orion plan -o plan.json`; :func:`load_plan` validates it (a hand-edited file included)
with one-line `field.path: message` errors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from colocation.policies import POLICY_NAMES
from orion_common.atomic_io import write_text_atomic
from orion_common.json_fields import (
    FieldError,
    array,
    checked,
    integer,
    join,
    load_checked,
    number,
    obj,
    string,
)
from placement.fleet import OBJECTIVES
from placement.pair_matrix import MODES

FORMAT = "orion-plan"
VERSION = 1
ROLES = ("hp", "be")


@dataclass(frozen=True)
class PlanClient:
    """One client on one GPU, with the figures the pair matrix predicts for it there."""

    name: str
    job: str
    role: str
    workload: str
    mode: str
    batch_size: int
    rate_per_s: float | None = None  # HP only
    p99_slo_ms: float | None = None  # HP only
    predicted_p99_ms: float | None = None  # HP only: alone p99 x ratio
    predicted_p99_upper_ms: float | None = None  # HP only: alone p99 x upper end of the ratio
    weight: float | None = None  # BE only
    predicted_throughput_per_s: float | None = None  # BE only: alone throughput x ratio
    predicted_ratio: float | None = None  # BE only: shared / alone throughput
    dtype: str = "fp32"
    cuda_graph: bool = False  # HP only: served by replaying a CUDA graph, as measured


@dataclass(frozen=True)
class PlanGpu:
    index: int
    kind: str
    policy: str
    settings: dict[str, Any]
    clients: tuple[PlanClient, ...]
    matrix_duration_s: float | None = None
    """Seconds each pair of the matrix was measured for: a run of the plan that long measures
    what was predicted. None when the matrix did not record it (older matrices and plans)."""


@dataclass(frozen=True)
class Plan:
    objective: str
    gpus: tuple[PlanGpu, ...]
    unplaced: tuple[str, ...]
    totals: dict[str, float | int | None]
    notes: tuple[str, ...] = ()
    matrices: dict[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "objective": self.objective,
            "matrices": dict(self.matrices or {}),
            "gpus": [
                {
                    "index": gpu.index,
                    "kind": gpu.kind,
                    "policy": gpu.policy,
                    "settings": dict(gpu.settings),
                    **(
                        {}
                        if gpu.matrix_duration_s is None
                        else {"matrix_duration_s": gpu.matrix_duration_s}
                    ),
                    "clients": [_client_dict(client) for client in gpu.clients],
                }
                for gpu in self.gpus
            ],
            "unplaced": list(self.unplaced),
            "totals": dict(self.totals),
            "notes": list(self.notes),
        }


_CLIENT_FIELDS = (
    "name",
    "job",
    "role",
    "workload",
    "mode",
    "batch_size",
    "dtype",
    "cuda_graph",
    "rate_per_s",
    "p99_slo_ms",
    "predicted_p99_ms",
    "predicted_p99_upper_ms",
    "weight",
    "predicted_throughput_per_s",
    "predicted_ratio",
)
_HP_FIELDS = ("rate_per_s", "p99_slo_ms", "predicted_p99_ms", "predicted_p99_upper_ms")
_BE_FIELDS = ("weight", "predicted_throughput_per_s", "predicted_ratio")
_OPTIONAL_FIELDS = ("dtype", "cuda_graph")  # absent from plans written before them
_TOTALS = (
    "gpus_used",
    "be_throughput_per_s",
    "weighted_be_throughput_per_s",
    "min_weighted_be_ratio",
)


def _client_dict(client: PlanClient) -> dict[str, Any]:
    skip = _BE_FIELDS if client.role == "hp" else _HP_FIELDS
    return {key: getattr(client, key) for key in _CLIENT_FIELDS if key not in skip}


def write_plan(plan: Plan, path: str | Path) -> Path:
    path = Path(path)
    write_text_atomic(path, json.dumps(plan.to_dict(), indent=2) + "\n")
    return path


HINT = f"see the {FORMAT} format in docs/architecture.md"


def load_plan(path: str | Path) -> Plan:
    return load_checked(path, "plan file", _parse, HINT)


def parse_plan(data: Any, source: str = "plan") -> Plan:
    """Validates a parsed plan document; raises OrionError `SOURCE: field.path: message`."""
    return checked(_parse, data, source, HINT)


def _parse(data: Any) -> Plan:
    # format and version first: a plan of another version is that one error, not its fields'
    obj(data, "", ("format", "version"), unknown_ok=True)
    if data["format"] != FORMAT:
        raise FieldError("format", f"must be {FORMAT!r}, not {data['format']!r}")
    if isinstance(data["version"], bool) or data["version"] != VERSION:
        raise FieldError("version", f"must be {VERSION}, not {data['version']!r}")
    top = obj(
        data,
        "",
        ("format", "version", "objective", "gpus", "unplaced", "totals"),
        ("matrices", "notes"),
    )
    objective = string(top["objective"], "objective", OBJECTIVES)
    matrices = top.get("matrices") or {}
    if not isinstance(matrices, dict):
        raise FieldError("matrices", "must be an object of GPU kind to file")
    for kind, file in matrices.items():
        string(file, join("matrices", kind))
    names: dict[str, str] = {}
    gpus = []
    for position, item in enumerate(array(top["gpus"], "gpus")):
        path = join("gpus", position)
        spec = obj(
            item,
            path,
            ("index", "kind", "policy", "settings", "clients"),
            ("matrix_duration_s",),
        )
        if not isinstance(spec["settings"], dict):
            raise FieldError(join(path, "settings"), "must be an object")
        index = integer(spec["index"], join(path, "index"))
        if index != position:
            raise FieldError(join(path, "index"), f"must be {position} (GPUs in index order)")
        clients_path = join(path, "clients")
        raw_clients = array(spec["clients"], clients_path)
        if len(raw_clients) > 2:
            raise FieldError(clients_path, f"holds {len(raw_clients)} clients, at most 2")
        clients = tuple(
            _client(raw, join(clients_path, number_), names)
            for number_, raw in enumerate(raw_clients)
        )
        if sum(client.role == "hp" for client in clients) > 1:
            raise FieldError(clients_path, "holds more than one hp client")
        gpus.append(
            PlanGpu(
                index,
                string(spec["kind"], join(path, "kind")),
                # the jobs file's policy names: each plan GPU runs as a jobs file
                string(spec["policy"], join(path, "policy"), POLICY_NAMES),
                dict(spec["settings"]),
                clients,
                _optional_seconds(spec.get("matrix_duration_s"), join(path, "matrix_duration_s")),
            )
        )
    unplaced = []
    for position, name in enumerate(array(top["unplaced"], "unplaced")):
        name = string(name, join("unplaced", position))
        if name in names:
            raise FieldError(
                join("unplaced", position), f"{name!r} is also placed, at {names[name]}"
            )
        names[name] = join("unplaced", position)
        unplaced.append(name)
    totals_raw = obj(top["totals"], "totals", _TOTALS)
    totals: dict[str, float | int | None] = {
        "gpus_used": integer(totals_raw["gpus_used"], "totals.gpus_used")
    }
    for key in _TOTALS[1:]:
        value = totals_raw[key]
        totals[key] = None if value is None else number(value, join("totals", key), positive=False)
    notes = tuple(
        string(note, join("notes", i))
        for i, note in enumerate(array(top.get("notes", []), "notes"))
    )
    return Plan(objective, tuple(gpus), tuple(unplaced), totals, notes, dict(matrices))


def _optional_seconds(value: Any, path: str) -> float | None:
    return None if value is None else number(value, path)


def _client(data: Any, path: str, names: dict[str, str]) -> PlanClient:
    if not isinstance(data, dict):
        raise FieldError(path, "must be an object")
    if "role" not in data:
        raise FieldError(join(path, "role"), "is required")
    role = string(data["role"], join(path, "role"), ROLES)
    extra = _HP_FIELDS if role == "hp" else _BE_FIELDS
    spec = obj(
        data,
        path,
        ("name", "job", "role", "workload", "mode", "batch_size", *extra),
        _OPTIONAL_FIELDS,
    )
    name = string(spec["name"], join(path, "name"))
    if name in names:
        raise FieldError(join(path, "name"), f"{name!r} is also at {names[name]}")
    names[name] = path
    values: dict[str, Any] = {
        "name": name,
        "job": string(spec["job"], join(path, "job")),
        "role": spec["role"],
        "workload": string(spec["workload"], join(path, "workload")),
        "mode": string(spec["mode"], join(path, "mode"), MODES),
        "batch_size": integer(spec["batch_size"], join(path, "batch_size"), minimum=1),
        "dtype": string(spec.get("dtype", "fp32"), join(path, "dtype"), ("fp32", "bf16")),
        "cuda_graph": spec.get("cuda_graph", False),
    }
    if not isinstance(values["cuda_graph"], bool):
        raise FieldError(join(path, "cuda_graph"), "must be true or false")
    for key in _HP_FIELDS if spec["role"] == "hp" else _BE_FIELDS:
        values[key] = number(spec[key], join(path, key))
    return PlanClient(**values)
