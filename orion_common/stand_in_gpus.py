"""Stand-in GPUs: the GPUs a machine without any claims to have, for tests and demonstrations.

``ORION_STAND_IN_GPUS`` holds a JSON list, one object per GPU in index order::

    [{"uuid": "GPU-11111111-...", "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559,
      "sm_count": 132}]

``uuid`` and ``name`` are required; ``memory_mib`` defaults to :data:`DEFAULT_MEMORY_MIB` and
``sm_count`` to :data:`DEFAULT_SM_COUNT`. ``context_mib`` (default 0) is what a CUDA context
takes on it: the footprint :mod:`orion_common.context_footprint` reports for it instead of
measuring one, so tests can give a client's context a size the stand-in driver never takes.
When it is set, :mod:`orion_common.sysinfo` answers every question about GPUs (how many, which
UUID, name, memory, SMs) from it instead of NVML, so
`orion up` starts daemons for them and a Ray node started with it in its environment has them.
The programs that then run "on" those GPUs reach the stand-in driver of ``tests/native/`` (put on
the library path as ``libcuda.so.1``), never a real one: nothing else in orion changes.

Why a variable, read in this one place: a multi-node Ray cluster on one CPU machine gives each
node a different environment, so each node can have GPUs of its own kind and UUIDs, which is what
tests of placement across nodes need; and a bad value is refused with one line, like any input.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from orion_common.errors import OrionError

VARIABLE = "ORION_STAND_IN_GPUS"
CLAIM_SCOPE_VARIABLE = "ORION_STAND_IN_CLAIM_SCOPE"
"""Where set beside :data:`VARIABLE`, the scope of the stand-in GPUs' machine-wide claims (one
daemon per GPU, ``orion_daemon/lock.py``): the test suite sets one per session, so two sessions
on one machine, whose stand-ins share UUIDs, do not refuse each other's daemons. Ignored without
stand-in GPUs: a real GPU's claim is the machine's."""
DEFAULT_MEMORY_MIB = 16384
DEFAULT_SM_COUNT = 132
DRIVER_VERSION = "stand-in"


@dataclass(frozen=True)
class StandInGpu:
    index: int
    uuid: str
    name: str
    memory_mib: int
    sm_count: int
    context_mib: int = 0


def stand_in_gpus() -> list[StandInGpu] | None:
    """The stand-in GPUs ``ORION_STAND_IN_GPUS`` declares; None when it is unset or empty."""
    raw = os.environ.get(VARIABLE, "").strip()
    if not raw:
        return None
    try:
        items = json.loads(raw)
    except ValueError as error:
        raise OrionError(f"{VARIABLE} is not JSON: {error}") from None
    if not isinstance(items, list):
        raise OrionError(f"{VARIABLE} must be a JSON list of GPUs")
    gpus = []
    for index, item in enumerate(items):
        where = f"{VARIABLE}[{index}]"
        if not isinstance(item, dict):
            raise OrionError(f"{where} must be an object with uuid and name")
        unknown = set(item) - {"uuid", "name", "memory_mib", "sm_count", "context_mib"}
        if unknown:
            raise OrionError(f"{where} has unknown keys: {', '.join(sorted(unknown))}")
        uuid, name = item.get("uuid"), item.get("name")
        if not isinstance(uuid, str) or not uuid.startswith("GPU-"):
            raise OrionError(f"{where}.uuid must be a string starting with GPU- (got {uuid!r})")
        if not isinstance(name, str) or not name:
            raise OrionError(f"{where}.name must be a non-empty string")
        numbers = {}
        for key, default in (("memory_mib", DEFAULT_MEMORY_MIB), ("sm_count", DEFAULT_SM_COUNT)):
            value = item.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise OrionError(f"{where}.{key} must be a positive integer (got {value!r})")
            numbers[key] = value
        context_mib = item.get("context_mib", 0)
        if isinstance(context_mib, bool) or not isinstance(context_mib, int) or context_mib < 0:
            raise OrionError(
                f"{where}.context_mib must be a whole number of MiB, 0 or more "
                f"(got {context_mib!r})"
            )
        numbers["context_mib"] = context_mib
        gpus.append(StandInGpu(index=index, uuid=uuid, name=name, **numbers))
    if len({gpu.uuid for gpu in gpus}) != len(gpus):
        raise OrionError(f"{VARIABLE} gives two GPUs the same uuid")
    return gpus


def stand_in_claim_scope() -> str:
    """The scope of stand-in GPUs' claims (:data:`CLAIM_SCOPE_VARIABLE`); "" without stand-ins."""
    if not os.environ.get(VARIABLE, "").strip():
        return ""
    return os.environ.get(CLAIM_SCOPE_VARIABLE, "").strip()
