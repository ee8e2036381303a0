"""``jobs.json``: what ``orion colocate`` runs, validated completely before the GPU is touched.

A colocation run takes minutes and holds the GPU (and an MPS daemon), so every mistake a user can
make in ``jobs.json`` is found here, all at once: :func:`load_jobs` raises one
:class:`JobsConfigError` listing each problem on its own line as ``field.path: message``, e.g.
``clients[1].batch_size: must be >= 1 (got 0)``.

Conventions the runner can rely on after validation:

- every path (``run.output_dir``, ``clients[].profile``, ``clients[].arrivals.path``) is absolute;
  relative paths in the file are resolved against the folder holding ``jobs.json``;
- inference clients always have ``arrivals`` (default ``{"kind": "closed"}``), training clients
  never do;
- exactly one of ``run.duration_s`` / ``run.requests`` is set, and ``requests`` only with an
  inference HP client;
- the number of ``hp`` clients fits the policy (see :mod:`colocation.policies`).

The models are strict (``"4"`` is not a batch size, ``1`` is not ``true``) and forbid unknown
keys, so a typo is an error instead of a silently ignored setting.

This module is the public face of the jobs file; the pieces live in small modules:
:mod:`colocation.jobs_fields` (problems, path fields, the strict base model),
:mod:`colocation.arrivals` (the arrivals models), :mod:`colocation.jobs_schema` (run and client
models, cross-field rules), :mod:`colocation.jobs_errors` (pydantic errors -> problem lines) and
:mod:`colocation.profiles` (which profile each client uses).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from colocation.arrivals import (
    ARRIVAL_KINDS,
    ArrivalsModel,
    ClosedArrivals,
    PoissonArrivals,
    TraceArrivals,
    UniformArrivals,
)
from colocation.jobs_errors import problem_order, problems_from
from colocation.jobs_fields import EXAMPLE_HINT, JobsConfigError, PathField, Problem, show
from colocation.jobs_schema import (
    CLIENT_NAME_PATTERN,
    ClientConfig,
    JobsConfig,
    RunConfig,
    Thresholds,
    cross_field_problems,
)
from colocation.profiles import ResolvedProfiles, profile_command, resolve_profiles
from orion_common.errors import OrionError

__all__ = [
    "ARRIVAL_KINDS",
    "CLIENT_NAME_PATTERN",
    "EXAMPLE_JOBS",
    "ArrivalsModel",
    "ClientConfig",
    "ClosedArrivals",
    "JobsConfig",
    "JobsConfigError",
    "PathField",
    "PoissonArrivals",
    "Problem",
    "ResolvedProfiles",
    "RunConfig",
    "Thresholds",
    "TraceArrivals",
    "UniformArrivals",
    "example_jobs",
    "load_jobs",
    "parse_jobs",
    "profile_command",
    "resolve_profiles",
]

EXAMPLE_PACKAGE_PATH = ("examples", "resnet50_pair.json")
"""The example jobs file, package data of :mod:`colocation` (shipped in the wheel)."""


def example_jobs() -> str:
    """A complete, valid jobs.json (HP ResNet-50 inference at 80 req/s, BE ResNet-50 training),
    printed by ``orion colocate --example``: ``colocation/examples/resnet50_pair.json``."""
    resource = resources.files("colocation")
    for part in EXAMPLE_PACKAGE_PATH:
        resource = resource / part  # one step at a time: Python 3.10's joinpath takes one
    return resource.read_text(encoding="utf-8")


EXAMPLE_JOBS = example_jobs()
""":func:`example_jobs`, read once at import."""


def parse_jobs(
    data: Any, base_dir: str | os.PathLike[str], *, source: str = "jobs config"
) -> JobsConfig:
    """Validate jobs data already parsed from JSON; relative paths start at ``base_dir``.

    Raises :class:`JobsConfigError` listing every problem (``source`` names the input in its
    first line).
    """
    if not isinstance(data, Mapping):
        got = "a list" if isinstance(data, list) else show(data)
        raise JobsConfigError(
            f"invalid {source} (1 problem):",
            [Problem("", f'must be a JSON object with "run" and "clients" (got {got})')],
            hint=EXAMPLE_HINT,
        )
    context = {"base_dir": Path(base_dir).absolute()}
    try:
        return JobsConfig.model_validate(data, context=context)
    except ValidationError as exc:
        problems = problems_from(exc)
    for problem in cross_field_problems(data):
        if problem not in problems:
            problems.append(problem)
    problems.sort(key=problem_order)
    count = f"{len(problems)} problem" + ("" if len(problems) == 1 else "s")
    raise JobsConfigError(f"invalid {source} ({count}):", problems, hint=EXAMPLE_HINT)


class _DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKeyError(key)
        result[key] = value
    return result


def load_jobs(path: str | os.PathLike[str]) -> JobsConfig:
    """Read and validate a ``jobs.json`` file; relative paths in it start at its folder.

    Unreadable files and JSON syntax errors (``jobs.json:12:5: Expecting ',' delimiter``) raise
    :class:`OrionError`; invalid content raises :class:`JobsConfigError` with every problem.
    """
    file = Path(path)
    if not file.exists():
        raise OrionError(f"jobs file not found: {file}", hint=EXAMPLE_HINT)
    if not file.is_file():
        raise OrionError(f"jobs file is not a file: {file}", hint="give the path of a jobs.json")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise OrionError(f"{file}: not UTF-8 text; a jobs file is JSON") from None
    except OSError as exc:
        raise OrionError(f"cannot read jobs file {file}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise OrionError(
            f"{file}:{exc.lineno}:{exc.colno}: {exc.msg}",
            hint="jobs files are plain JSON: strings in double quotes, no comments, "
            "no trailing commas",
        ) from None
    except _DuplicateKeyError as exc:
        raise OrionError(
            f"{file}: key {exc.key!r} appears twice in one object (JSON would keep only the last)",
            hint="remove one of them",
        ) from None
    except RecursionError:
        raise _nested_too_deeply(file) from None
    except ValueError:  # an integer too long for Python to convert
        raise OrionError(
            f"{file}: a number is too long to read (over {sys.get_int_max_str_digits():,} digits)",
            hint="numbers in a jobs file need a few digits",
        ) from None
    if isinstance(data, dict) and str(data.get("format", "")).startswith("orion-plan"):
        # a plan (any version), not a jobs file: one line, not a dozen unrelated field errors
        raise OrionError(
            f"{file} is a plan (format {data.get('format')!r}), not a jobs file",
            hint=f"run a plan with `orion run-plan {file}`",
        )
    try:
        return parse_jobs(data, file.parent, source=f"jobs file {file}")
    except RecursionError:
        raise _nested_too_deeply(file) from None


def _nested_too_deeply(file: Path) -> OrionError:
    """Python's JSON reader gives up on deep nesting; a jobs file needs a few levels."""
    return OrionError(
        f"jobs file {file}: nested too deeply (arrays or objects inside each other)",
        hint="a jobs file needs only a few levels: an object with a list of client objects",
    )
