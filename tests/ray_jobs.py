"""Job hosts for the Ray tests: colocation's client with a tiny CPU workload instead of a model
(:class:`orion.ray.jobs.StandInJobHost`), so a plan's jobs warm up in milliseconds and record
real tables on a 2-core machine. Imported by the Ray workers of tests/ray_harness.py's nodes
(their PYTHONPATH holds tests/)."""

from __future__ import annotations

from orion.ray.jobs import StandInJobHost as TinyJobHost

__all__ = ["TinyJobHost"]
