"""The fleet file: GPUs by kind, the HP services with their SLOs, the BE jobs, an objective."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from colocation.arrivals import MAX_RATE_PER_S  # a service's rate, bounded as a client's is
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

OBJECTIVES = ("max-total-be", "max-min-be", "fewest-gpus")
MAX_GPUS = 4096
MAX_SLO_MS = 3.6e6  # an hour
MAX_WEIGHT = 1e6
"""Weights and rates enter the planner's program as coefficients: bounded, so that an
overflowing one is refused here instead of breaking the solver."""
"""GPUs of one kind in a fleet: the planner's program grows with GPUs x options, and a count of
1e9 would build it for hours."""


@dataclass(frozen=True)
class GpuGroup:
    kind: str
    count: int


@dataclass(frozen=True)
class HpService:
    name: str
    job: str
    rate_per_s: float
    p99_slo_ms: float


@dataclass(frozen=True)
class BeJob:
    name: str
    job: str
    weight: float = 1.0


@dataclass(frozen=True)
class Fleet:
    gpus: tuple[GpuGroup, ...]
    objective: str
    hp: tuple[HpService, ...]
    be: tuple[BeJob, ...]

    def gpu_kinds(self) -> list[str]:
        """The kind of every GPU, index by index (groups in file order)."""
        return [group.kind for group in self.gpus for _ in range(group.count)]


HINT = "see `orion plan --help` for the fleet file"


def load_fleet(path: str | Path) -> Fleet:
    return load_checked(path, "fleet file", _parse, HINT)


def parse_fleet(data: Any, source: str = "fleet") -> Fleet:
    """Validates a parsed fleet document; raises OrionError `SOURCE: field.path: message`."""
    return checked(_parse, data, source, HINT)


def _parse(data: Any) -> Fleet:
    top = obj(data, "", ("gpus", "hp"), ("objective", "be"))
    gpus = []
    kinds: set[str] = set()
    for index, item in enumerate(array(top["gpus"], "gpus", nonempty=True)):
        path = join("gpus", index)
        spec = obj(item, path, ("kind", "count"))
        kind = string(spec["kind"], join(path, "kind"))
        if kind in kinds:
            raise FieldError(join(path, "kind"), f"{kind!r} is listed twice")
        kinds.add(kind)
        gpus.append(
            GpuGroup(kind, integer(spec["count"], join(path, "count"), minimum=1, maximum=MAX_GPUS))
        )
    objective = string(top.get("objective", "max-total-be"), "objective", OBJECTIVES)
    names: dict[str, str] = {}
    hp = []
    for index, item in enumerate(array(top["hp"], "hp")):
        path = join("hp", index)
        spec = obj(item, path, ("name", "job", "rate_per_s", "p99_slo_ms"))
        name = _unique(spec["name"], join(path, "name"), names)
        hp.append(
            HpService(
                name,
                string(spec["job"], join(path, "job")),
                number(spec["rate_per_s"], join(path, "rate_per_s"), maximum=MAX_RATE_PER_S),
                number(spec["p99_slo_ms"], join(path, "p99_slo_ms"), maximum=MAX_SLO_MS),
            )
        )
    be = []
    for index, item in enumerate(array(top.get("be", []), "be")):
        path = join("be", index)
        spec = obj(item, path, ("name", "job"), ("weight",))
        name = _unique(spec["name"], join(path, "name"), names)
        weight = number(spec.get("weight", 1.0), join(path, "weight"), maximum=MAX_WEIGHT)
        be.append(BeJob(name, string(spec["job"], join(path, "job")), weight))
    return Fleet(tuple(gpus), objective, tuple(hp), tuple(be))


def _unique(name: Any, path: str, names: dict[str, str]) -> str:
    name = string(name, path)
    if name in names:
        raise FieldError(path, f"{name!r} is already the name of {names[name]}")
    names[name] = path.rsplit(".", 1)[0]
    return name
