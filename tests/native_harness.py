"""Builds and drives the stand-in CUDA driver used to test the preload library on CPU.

`tests/native/fake_cuda.cpp` becomes a `libcuda.so.1` that records every call and simulates a
GPU (kernels take their duration, stream write-values land in host memory in stream order);
`tests/native/launcher.cpp` reaches it the ways CUDA libraries do (dlopen + dlsym +
cuGetProcAddress_v2, dlsym of driver symbols, direct linking). Its scripts are whitespace-separated
commands (see the launcher's header), e.g. "func k 1000 repeat 3 launch k 4 128 0 end sync 0".
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

NATIVE_TEST_DIR = Path(__file__).resolve().parent / "native"
MS = 1_000_000


@dataclass(frozen=True)
class Harness:
    directory: Path
    launcher: Path

    def run(
        self,
        script: str,
        env: dict[str, str] | None = None,
        log: Path | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.launcher), *script.split()],
            env=self.environment(env, log),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(
        self, script: str, env: dict[str, str] | None = None, log: Path | None = None
    ) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(self.launcher), *script.split()],
            env=self.environment(env, log),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def environment(self, env: dict[str, str] | None, log: Path | None) -> dict[str, str]:
        environment = dict(os.environ if env is None else env)
        environment["LD_LIBRARY_PATH"] = str(self.directory)
        if log is not None:
            environment["FAKE_CUDA_LOG"] = str(log)
        return environment


def build_harness(directory: Path) -> Harness:
    """Compiles the stand-in driver and the launcher into ``directory``."""
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        raise RuntimeError("no C++ compiler")
    fake = directory / "libcuda.so.1"
    # -Bsymbolic: like the real driver, the stand-in binds its own symbols internally, so its
    # cuGetProcAddress hands out its own functions, not whatever LD_PRELOAD interposed.
    subprocess.run(
        [compiler, "-std=c++17", "-O1", "-shared", "-fPIC", "-Wl,-Bsymbolic",
         "-Wl,-soname,libcuda.so.1", "-o", str(fake), str(NATIVE_TEST_DIR / "fake_cuda.cpp"),
         "-lpthread"],
        check=True,
    )  # fmt: skip
    launcher = directory / "launcher"
    subprocess.run(
        [compiler, "-std=c++17", "-O1", "-o", str(launcher), str(NATIVE_TEST_DIR / "launcher.cpp"),
         f"-L{directory}", "-l:libcuda.so.1", f"-Wl,-rpath,{directory}", "-ldl"],
        check=True,
    )  # fmt: skip
    return Harness(directory=directory, launcher=launcher)


@dataclass(frozen=True)
class Event:
    pid: int
    time_ns: int
    kind: str
    fields: tuple[str, ...]


def read_log(path: Path) -> list[Event]:
    """Events the stand-in driver logged: `<pid> <time_ns> <kind> <fields...>`. A log read while
    a process writes it may end in part of a line: the driver writes each line whole with one
    write(), but one that crosses a page of the file becomes visible a page at a time, so the
    text after the last newline is left for the next read."""
    if not path.exists():
        return []
    events = []
    for line in path.read_text().split("\n")[:-1]:
        pid, time_ns, kind, *fields = line.split()
        events.append(Event(int(pid), int(time_ns), kind, tuple(fields)))
    return events


@dataclass(frozen=True)
class Interval:
    name: str
    launched_ns: int
    finished_ns: int


def launch_intervals(events: list[Event]) -> list[Interval]:
    """Each kernel from its launch call to the simulated GPU finishing it, in order.

    A stand-in process whose kernels all go to one stream runs them in submission order (the
    simulated GPU keeps one queue per stream), so the n-th finished kernel belongs to the n-th
    launch. (The end of execution, not the completion write:
    a client whose finish times are estimated has no writes.)
    """
    launches = [e for e in events if e.kind == "launch"]
    ends = [e for e in events if e.kind == "exec_end"]
    return [
        Interval(name=launch.fields[1], launched_ns=launch.time_ns, finished_ns=end.time_ns)
        for launch, end in zip(launches, ends, strict=False)
    ]


def kernel_table(*rows: tuple[str, int, int, int, str, float]) -> pd.DataFrame:
    """Identity table rows: (name, grid_x, block_x, sm_needed, class, duration_ms)."""
    return pd.DataFrame(
        [
            {
                "kernel_name": name,
                "demangled_name": name,
                "grid_x": grid,
                "grid_y": 1,
                "grid_z": 1,
                "block_x": block,
                "block_y": 1,
                "block_z": 1,
                "sm_needed": sm,
                "kernel_class": kernel_class,
                "duration_ns": duration_ms * MS,
            }
            for name, grid, block, sm, kernel_class, duration_ms in rows
        ]
    )


@dataclass(frozen=True)
class HeldKernel:
    """A kernel the stand-in runs until the test releases it (``FAKE_HOLD_KERNEL``; a launched
    graph runs as one kernel named "graph"): a clock the test controls, so "while HP's kernel
    runs" and "after it ended" are told apart by the order of events, not by how long it takes."""

    name: str
    release_file: Path

    def env(self) -> dict[str, str]:
        return {"FAKE_HOLD_KERNEL": self.name, "FAKE_RELEASE_FILE": str(self.release_file)}

    def release(self) -> int:
        """Lets the held kernel end; returns a monotonic time (ns, the stand-in's clock) taken
        before it can."""
        released_ns = time.monotonic_ns()
        self.release_file.touch()
        return released_ns


def wait_for(condition, timeout_s: float = 20, what: str = "condition") -> None:
    """Polls ``condition`` every 2 ms until it holds; fails the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.002)


@dataclass(frozen=True)
class HpBesideBeGraph:
    """What an HP arrival beside a BE graph of ten 20-ms kernels showed (hp_beside_be_graph)."""

    stats: dict
    be_starts: list[int]  # each piece of the BE graph's work on the stand-in GPU
    be_ends: list[int]
    hp_start: int
    hp_end: int

    def assert_at_most_one_piece_beside_hp(self) -> None:
        """Counted in pieces, not milliseconds (a busy machine stretches every 20-ms sleep):
        besides the piece running when HP arrived, at most one let through in a race with HP's
        close starts while HP's kernel runs; a graph admitted whole would start its remaining 7+
        pieces then."""
        assert len(self.be_starts) == len(self.be_ends) == 10  # ten pieces
        beside = [start for start in self.be_starts if self.hp_start < start < self.hp_end]
        assert len(beside) <= 1
        assert sum(1 for start in self.be_starts if start < self.hp_start) >= 1  # HP came mid-way
        assert self.be_ends[-1] > self.hp_end  # the rest ran after HP


def hp_beside_be_graph(harness: Harness, tmp_path: Path, settings) -> HpBesideBeGraph:
    """BE replays one graph of ten 20 ms kernels under ``settings`` (a 25 ms queue limit: a piece
    per kernel); HP arrives once the graph runs and keeps the GPU 300 ms."""
    from scheduler_core import SchedulerRun

    be_script = "func bk 20000 graph_new B " + "graph_node B bk 1 32 " * 10
    be_script += "graph_inst B flags graph_run B 0 sync 0"
    with SchedulerRun(settings) as run:
        hp = run.add_client("hp", "hp", kernel_table(("long", 1, 32, 132, "compute", 300)))
        be = run.add_client("be", "be", kernel_table(("bk", 1, 32, 8, "memory", 20)))
        run.publish()
        be_log, hp_log = tmp_path / "be.log", tmp_path / "hp.log"
        be_process = harness.start(be_script, env=run.client_environment(be), log=be_log)
        wait_for(
            lambda: any(e.kind == "exec_start" for e in read_log(be_log)),
            what="the BE graph to start",
        )
        hp_result = harness.run(
            "func long 300000 launch long 1 32 0 sync 0",
            env=run.client_environment(hp),
            log=hp_log,
        )
        assert hp_result.returncode == 0, hp_result.stderr
        assert be_process.wait(timeout=60) == 0, be_process.stderr.read()
        stats = run.stats()
    hp_events = read_log(hp_log)
    be_events = read_log(be_log)
    return HpBesideBeGraph(
        stats=stats,
        be_starts=[e.time_ns for e in be_events if e.kind == "exec_start"],
        be_ends=[e.time_ns for e in be_events if e.kind == "exec_end"],
        hp_start=next(e.time_ns for e in hp_events if e.kind == "exec_start"),
        hp_end=next(e.time_ns for e in hp_events if e.kind == "exec_end"),
    )
