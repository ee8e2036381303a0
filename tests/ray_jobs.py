"""Job hosts for the Ray tests: colocation's client with a tiny CPU workload instead of a model.

Imported by the Ray workers of tests/ray_harness.py's nodes (their PYTHONPATH holds tests/), so
a plan's jobs warm up in milliseconds and record real tables on a 2-core machine.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

from colocation.client import Client
from orion.ray.jobs import JobHost

STEP_S = 0.002


class TinyWorkload:
    """The workload API colocation's client drives (``workloads.base``), sleeping a little."""

    def __init__(self, batch_size: int) -> None:
        self.device = SimpleNamespace(type="cpu")
        self.samples_per_step = batch_size

    def warmup(self, steps: int) -> None:
        for _ in range(steps):
            self.step()

    def step(self) -> None:
        time.sleep(STEP_S)

    def synchronize(self) -> None:
        pass


class TinyClient(Client):
    def _build(self) -> TinyWorkload:
        return TinyWorkload(self.spec.batch_size)


class TinyJobHost(JobHost):
    def client_class(self) -> type:
        return TinyClient
