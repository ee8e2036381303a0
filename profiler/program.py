"""Any program as ncu's target (``orion profile -- CMD``): its command, the window of kernels ncu
profiles, and the ncu arguments that choose them.

A workload's profiled step is bracketed by orion's own target process (:mod:`profiler.target`);
a program's steady state is something only its author knows, so the user names the window, one
of three ways:

- ``profiler-api``: between the program's own cudaProfilerStart and cudaProfilerStop
  (``torch.cuda.profiler.start()`` / ``stop()``) -> ``ncu --profile-from-start off``, as for a
  workload.
- ``nvtx``: inside an NVTX push/pop range, by name (``torch.cuda.nvtx.range_push("step")`` /
  ``range_pop()``) -> ``ncu --nvtx --nvtx-include "step/"``. In ncu's syntax the trailing slash
  makes it a push/pop range (without it, a start/end range); ``outer/step`` is ``step`` nested in
  ``outer``, and ``domain@step`` a range of that NVTX domain.
- ``kernels``: skip the first N launches, profile the next M -> ``ncu --launch-skip N
  --launch-count M --kill yes``: ncu ends the program once the M-th is profiled, so a server need
  not stop by itself. (With the other two windows ncu waits for the program to exit.)

There is no default window: under ncu every kernel is replayed several times (4 passes with the
fast metric set), so a whole model server would take hours, and a program's first kernels are
its start-up, not the steady state the scheduler needs.

Nothing here starts a process (:mod:`profiler.program_run` runs ncu); nothing here prints.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orion_common.errors import OrionError
from profiler.ncu_runner import PROFILER_API_WINDOW

WINDOW_KINDS: tuple[str, ...] = ("profiler-api", "nvtx", "kernels")
WINDOW_CHOICES = "--window profiler-api, --window nvtx:RANGE, or --skip N --count M"
"""The three ways to choose a window, as the command line spells them (for messages)."""
NVTX_PREFIX = "nvtx:"
GRAPH_NODES = ("--graph-profiling", "node")
"""A graph-replaying program: ncu profiles each kernel node of a graph launch as a kernel."""
NAME_LIMIT = 64
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


def nvtx_include(range_name: str) -> str:
    """ncu's ``--nvtx-include`` expression for the push/pop range ``range_name``."""
    return range_name if range_name.endswith("/") else range_name + "/"


@dataclass(frozen=True)
class Window:
    """Which kernels of the program ncu profiles (see the module docstring).

    ``nvtx_range`` is set for ``nvtx``; ``skip`` and ``count`` for ``kernels``.
    """

    kind: str
    nvtx_range: str | None = None
    skip: int = 0
    count: int | None = None

    def ncu_args(self) -> list[str]:
        if self.kind == "profiler-api":
            return list(PROFILER_API_WINDOW)
        if self.kind == "nvtx":
            return ["--nvtx", "--nvtx-include", nvtx_include(str(self.nvtx_range))]
        return [
            "--launch-skip",
            str(self.skip),
            "--launch-count",
            str(self.count),
            "--kill",
            "yes",
        ]

    def to_json(self) -> dict[str, Any]:
        """The window as the run record and the profile's metadata hold it."""
        if self.kind == "profiler-api":
            return {"kind": self.kind}
        if self.kind == "nvtx":
            text = str(self.nvtx_range)
            return {"kind": self.kind, "range": text, "ncu_include": nvtx_include(text)}
        return {"kind": self.kind, "skip": self.skip, "count": self.count}

    def describe(self) -> str:
        """The window in words, for the summary."""
        if self.kind == "profiler-api":
            return "between cudaProfilerStart and cudaProfilerStop"
        if self.kind == "nvtx":
            return f"inside NVTX range {self.nvtx_range!r}"
        last = self.skip + int(self.count or 0)
        return f"kernel launches {self.skip + 1} to {last}"

    def nothing_profiled(self) -> str:
        """Why ncu profiled nothing, as far as the window tells (for the error)."""
        if self.kind == "kernels":
            return f"the program launched no kernel after the first {self.skip} (--skip)"
        where = {
            "profiler-api": "between cudaProfilerStart and cudaProfilerStop (does it call them?)",
            "nvtx": f"inside NVTX push/pop range {self.nvtx_range!r} "
            f"(--nvtx-include {nvtx_include(str(self.nvtx_range))})",
        }[self.kind]
        return f"the program launched nothing ncu could see {where}"


def choose_window(window: str | None, skip: int | None, count: int | None) -> Window:
    """The window from the command line's ``--window`` or ``--skip``/``--count``: exactly one way,
    or a one-line :class:`OrionError`."""
    if window is not None and (skip is not None or count is not None):
        raise OrionError(
            f"choose one window, not two: {WINDOW_CHOICES}",
            hint="--window takes the program's own markers; --skip/--count a range of launches",
        )
    if window is None and skip is None and count is None:
        raise OrionError(
            f"choose which kernels of the program to profile: {WINDOW_CHOICES}",
            hint="profiling a whole program kernel by kernel under ncu takes hours, and its first "
            "kernels are start-up; see orion profile --help",
        )
    if window is not None:
        return _marked_window(window)
    if count is None:
        raise OrionError("--skip needs --count M: how many launches to profile after the skipped")
    if isinstance(count, bool) or count < 1:
        raise OrionError(f"--count must be >= 1, got {count}")
    if skip is not None and skip < 0:
        raise OrionError(f"--skip must be >= 0, got {skip}")
    return Window("kernels", skip=skip or 0, count=count)


def _marked_window(text: str) -> Window:
    if text == "profiler-api":
        return Window("profiler-api")
    if text.startswith(NVTX_PREFIX):
        range_name = text[len(NVTX_PREFIX) :]
        if not range_name.strip("/ "):
            raise OrionError(
                "--window nvtx:RANGE needs the range's name, e.g. --window nvtx:step",
            )
        return Window("nvtx", nvtx_range=range_name)
    raise OrionError(
        f"unknown window {text!r}; allowed: profiler-api, nvtx:RANGE",
        hint="or a range of kernel launches: --skip N --count M",
    )


def check_profile_name(name: str) -> str:
    """``name`` names the profile's folder: letters, digits and ``_ - . +``, at most 64."""
    if len(name) > NAME_LIMIT or _NAME.fullmatch(name) is None:
        raise OrionError(
            f"profile name {name!r} cannot name a folder: use letters, digits, '_', '-', '.' and "
            f"'+' (at most {NAME_LIMIT})",
            hint="give one with --name NAME",
        )
    return name


@dataclass(frozen=True)
class ProgramTarget:
    """A program to profile: its argv (passed to ncu unchanged), the profile's name, the window,
    and whether it replays CUDA graphs (then ncu profiles their kernel nodes, and the profile's
    rows are one graph, as for a workload's ``--cuda-graph``)."""

    command: tuple[str, ...]
    name: str
    window: Window
    cuda_graph: bool = False

    def validate(self) -> None:
        if not self.command or not self.command[0]:
            raise OrionError("no program to profile after --")
        check_profile_name(self.name)
        if self.window.kind not in WINDOW_KINDS:
            raise OrionError(f"unknown window kind {self.window.kind!r}")

    def ncu_args(self) -> list[str]:
        """ncu's arguments that choose the kernels (the window, and graph nodes)."""
        return [*self.window.ncu_args(), *(GRAPH_NODES if self.cuda_graph else ())]

    def labels(self) -> dict[str, Any]:
        """What the profile's metadata says it profiled (no workload: those keys stay None)."""
        return {
            "program": self.name,
            "cuda_graph": self.cuda_graph,
            "window": self.window.to_json(),
        }

    def record(self) -> dict[str, Any]:
        """The run record's target fields: the command as argv, never the environment."""
        return {"target": "program", "name": self.name, "command": list(self.command)}


def program_environment(
    base: Mapping[str, str], *, drop: Iterable[str] = (), preloads: Iterable[str] = ()
) -> dict[str, str]:
    """``base`` without the variables ``drop`` and without the ``LD_PRELOAD`` entries
    ``preloads`` names: a bare file name matches it in any folder, a path only itself.

    The caller names them (orion's preload library and join variables live in higher layers):
    a program profiled under the library would be gated, and its kernels timed under it.
    """
    dropped = set(drop)
    environment = {key: value for key, value in base.items() if key not in dropped}
    unwanted = {item for item in preloads if item}
    kept = [
        item
        for item in re.split(r"[:\s]+", environment.get("LD_PRELOAD", ""))
        if item and item not in unwanted and Path(item).name not in unwanted
    ]
    if kept:
        environment["LD_PRELOAD"] = ":".join(kept)
    else:
        environment.pop("LD_PRELOAD", None)
    return environment


__all__ = [
    "GRAPH_NODES",
    "WINDOW_CHOICES",
    "WINDOW_KINDS",
    "ProgramTarget",
    "Window",
    "check_profile_name",
    "choose_window",
    "nvtx_include",
    "program_environment",
]
