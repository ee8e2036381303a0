"""Build and run the Nsight Compute commands over :mod:`profiler.target`'s one profiled step.

Two ncu runs: the profiling run exports a report (``profile.ncu-rep``, which users can open in
the Nsight Compute GUI), then ``ncu --import`` turns that report into the raw CSV postprocess
reads. Profiling straight to CSV would be one run, but in CSV mode ncu prints no per-kernel
``==PROF== Profiling`` lines, and those lines are the only live progress there is.

Choices that are not negotiable, and why:

- ``--export <out>/profile.ncu-rep --force-overwrite`` (profiling run): a report, not CSV, so ncu
  prints its progress line per kernel; overwritten because a folder holds one run.
- ``--clock-control none`` (profiling run): ncu's default locks the GPU clocks; the card's
  settings must never be changed (and other jobs on the GPU would feel it).
- ``--profile-from-start off`` (profiling run, a workload's window): only the step between
  cudaProfilerStart/Stop is profiled, not the model build or the warm-up. A program's window is
  its own choice (:mod:`profiler.program`): the same, an NVTX range, or a range of launches.
- ``--import <report> --csv --page raw`` (conversion): one row per launch, every metric a column
  (what postprocess reads).
- ``--print-kernel-base mangled`` (conversion): the scheduler identifies a launch by the name
  ``cuFuncGetName`` returns, which is the mangled one; ncu's own demangled spelling differs from
  libstdc++'s and would not match it.
- ``--print-units base`` (conversion): the parser refuses SI-prefixed units rather than guess.

Replay mode: with ``kernel`` replay ncu saves and restores all device memory the process has
allocated, for every pass of every kernel (on the GPU machine 121 s of 140 s was system time for a
132 MB inference footprint); a training step holds gigabytes, which would take hours. So training
defaults to ``application`` replay, which re-runs the whole program once per metric pass and
matches launches across runs by name and grid (``--app-replay-match grid``): keep its warm-up short.

Metric set: the number of passes (kernel replays, or whole-program runs under application replay)
is set by the metrics asked for. ``fast`` (the default) asks for the throughputs' main
sub-metrics instead of ncu's two SOL metrics, which need 10 passes; see
:data:`postprocess.metrics.COMPUTE_SOL_SUBMETRICS`. ``full`` asks for the exact SOL metrics.

Nothing here prints: progress goes to callbacks, failures are :class:`OrionError`.
"""

from __future__ import annotations

import functools
import json
import os
import re
import selectors
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from orion_common.errors import OrionError
from orion_common.prerequisites import COUNTER_PERMISSION_HINT, NCU_HINT
from postprocess import (
    DEFAULT_METRIC_SET,
    METRIC_SETS,
    NCU_METRIC_SETS,
    OPTIONAL_TENSOR_METRIC_BASES,
    TENSOR_PIPE_SUFFIX,
)

REPLAY_MODES: tuple[str, ...] = ("kernel", "application")
DEFAULT_REPLAY_MODE: dict[str, str] = {"infer": "kernel", "train": "application"}
DEFAULT_WARMUP: dict[str, int] = {"infer": 10, "train": 3}
"""Warm-up steps before the profiled one. Training is short because application replay repeats
the whole program (warm-up included) once per metric pass."""

PROFILER_API_WINDOW: tuple[str, ...] = ("--profile-from-start", "off")
"""ncu's arguments for the window between the program's cudaProfilerStart and cudaProfilerStop."""
NOTHING_IN_THE_STEP = (
    "the step between cudaProfilerStart and cudaProfilerStop launched nothing ncu could see"
)

REPORT = "profile.ncu-rep"
RAW_CSV = "ncu_raw.csv"
PARTIAL_RAW_CSV = "ncu_raw.partial.csv"
NCU_LOG = "ncu.log"

COUNTER_PERMISSION_ERROR = "ERR_NVGPUCTRPERM"
_LOG_TAIL_LINES = 15
_QUERY_TIMEOUT_S = 120
_TERMINATE_GRACE_S = 10

_PROFILING = re.compile(r'^==PROF==\s+Profiling\s+"(?P<name>.*?)"(?:\s*-\s*(?P<index>\d+))?\s*:')
_CONNECTED = re.compile(r"^==PROF==\s+Connected to process")

KernelCallback = Callable[[int, "int | None", str], None]
"""``on_kernel(done, total, name)``: kernels profiled so far (in the current application-replay
pass), the expected total (None when unknown) and the kernel's name as ncu abbreviates it."""


def default_replay_mode(mode: str) -> str:
    """``kernel`` for inference, ``application`` for training (see the module docstring)."""
    return DEFAULT_REPLAY_MODE.get(mode, "kernel")


def default_warmup(mode: str) -> int:
    return DEFAULT_WARMUP.get(mode, DEFAULT_WARMUP["infer"])


def check_replay_mode(replay_mode: str) -> str:
    if replay_mode not in REPLAY_MODES:
        raise OrionError(
            f"unknown replay mode {replay_mode!r}; allowed: {', '.join(REPLAY_MODES)}",
            hint="kernel replays each kernel in place (fast for small memory footprints); "
            "application re-runs the program once per metric pass (for training)",
        )
    return replay_mode


def check_metric_set(metric_set: str) -> str:
    if metric_set not in METRIC_SETS:
        raise OrionError(
            f"unknown metric set {metric_set!r}; allowed: {', '.join(METRIC_SETS)}",
            hint="fast (the default) computes the throughputs from their main sub-metrics in "
            "4 replay passes per kernel on an H200; full asks ncu for its exact SOL throughputs "
            "(10 passes)",
        )
    return metric_set


# --- metrics --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorMetricQuery:
    """Which tensor-pipe metrics this ncu offers for the GPU present (full names, with suffix).

    ``error`` says why the list is empty when ``ncu --query-metrics`` failed; the profile then
    has no ``tensor_pipe_pct`` and its metadata says so.
    """

    metrics: tuple[str, ...]
    error: str | None = None


def metric_names(query_output: str) -> set[str]:
    """Base metric names in ``ncu --query-metrics`` output (first column, ``unit__counter``)."""
    names = set()
    for line in query_output.splitlines():
        token = line.strip().split(maxsplit=1)[0] if line.strip() else ""
        if "__" in token and not token.startswith("=="):
            names.add(token)
    return names


@functools.lru_cache(maxsize=8)
def available_tensor_metrics(ncu: str | os.PathLike[str]) -> TensorMetricQuery:
    """The tensor-pipe metrics to request; asked once per ncu path (the answer is cached)."""
    try:
        result = subprocess.run(
            [str(ncu), "--query-metrics"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=_QUERY_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return TensorMetricQuery((), f"ncu --query-metrics failed: {type(error).__name__}")
    if result.returncode != 0:
        detail = (result.stdout + result.stderr).strip().splitlines()
        last = detail[-1][:160] if detail else "no output"
        return TensorMetricQuery(
            (), f"ncu --query-metrics exited with status {result.returncode}: {last}"
        )
    offered = metric_names(result.stdout)
    if not offered:
        return TensorMetricQuery((), "ncu --query-metrics listed no metrics")
    kept = [base + TENSOR_PIPE_SUFFIX for base in OPTIONAL_TENSOR_METRIC_BASES if base in offered]
    return TensorMetricQuery(tuple(kept))


def ncu_metrics(
    tensor_metrics: Iterable[str] = (), metric_set: str = DEFAULT_METRIC_SET
) -> list[str]:
    """What ``--metrics`` gets: every metric ``metric_set`` requires
    (:data:`postprocess.metrics.NCU_METRIC_SETS`), then the available tensor-pipe ones."""
    required = NCU_METRIC_SETS[check_metric_set(metric_set)]
    return list(dict.fromkeys([*required, *tensor_metrics]))


# --- command lines --------------------------------------------------------------------------------


def target_command(
    *,
    workload: str,
    mode: str,
    batch_size: int,
    dtype: str,
    options: Mapping[str, int] | None,
    warmup: int,
    pass_: str,
    cuda_graph: bool = False,
    output: str | os.PathLike[str],
    steps: int | None = None,
    steps_output: str | os.PathLike[str] | None = None,
    python: str | None = None,
) -> list[str]:
    """``python -m profiler.target ...`` for one pass (see :mod:`profiler.target`)."""
    command = [
        python or sys.executable,
        "-m",
        "profiler.target",
        "--workload",
        workload,
        "--mode",
        mode,
        "--batch-size",
        str(batch_size),
        "--dtype",
        dtype,
    ]
    if options:
        command += ["--options", json.dumps(dict(options), sort_keys=True)]
    if cuda_graph:
        command.append("--cuda-graph")
    command += ["--warmup", str(warmup), "--pass", pass_, "--output", str(output)]
    if steps is not None:
        command += ["--steps", str(steps)]
    if steps_output is not None:
        command += ["--steps-output", str(steps_output)]
    return command


def build_ncu_command(
    ncu: str | os.PathLike[str],
    target: Sequence[str],
    *,
    replay_mode: str,
    metrics: Sequence[str],
    report: str | os.PathLike[str],
    window: Sequence[str] = PROFILER_API_WINDOW,
) -> list[str]:
    """The profiling run around ``target`` (itself a command line), exporting to ``report``.

    ``window`` is what chooses the kernels ncu profiles (default: those between
    cudaProfilerStart and cudaProfilerStop); :mod:`profiler.program` makes the others.
    """
    check_replay_mode(replay_mode)
    command = [
        str(ncu),
        "--export",
        str(report),
        "--force-overwrite",
        "--clock-control",
        "none",
        *window,
        "--metrics",
        ",".join(metrics),
        "--replay-mode",
        replay_mode,
    ]
    if replay_mode == "application":
        command += ["--app-replay-match", "grid"]
    return command + list(target)


def build_import_command(ncu: str | os.PathLike[str], report: str | os.PathLike[str]) -> list[str]:
    """The conversion of ``report`` to the raw CSV postprocess reads (on stdout)."""
    return [
        str(ncu),
        "--import",
        str(report),
        "--csv",
        "--page",
        "raw",
        "--print-kernel-base",
        "mangled",
        "--print-units",
        "base",
    ]


def export_path(command: Sequence[str]) -> Path:
    """The report a profiling command (from :func:`build_ncu_command`) exports to."""
    parts = [str(part) for part in command]
    if "--export" not in parts[:-1]:
        raise ValueError(f"not an ncu profiling command with --export: {command_text(parts)}")
    return Path(parts[parts.index("--export") + 1])


def command_text(command: Sequence[str]) -> str:
    """A command as one shell-ready string (for metadata and logs)."""
    return shlex.join(str(part) for part in command)


# --- progress -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProgressLine:
    """One ncu line that tells progress: a kernel being profiled, or a process connected.

    ncu writes ``==PROF== Profiling "name" - 12: 0%....50%....100% - 9 passes`` per kernel (the
    name cut to about 30 characters; older versions omit `` - 12``), and
    ``==PROF== Connected to process ...`` once per process: under application replay, once per
    pass, since every pass re-runs the program.
    """

    kind: str  # "kernel" or "connected"
    index: int | None = None
    name: str = ""


def parse_progress_line(line: str) -> ProgressLine | None:
    text = line.lstrip("\ufeff").rstrip("\r\n")
    match = _PROFILING.match(text)
    if match:
        index = match.group("index")
        return ProgressLine("kernel", int(index) if index is not None else None, match["name"])
    if _CONNECTED.match(text):
        return ProgressLine("connected")
    return None


class _ProgressCounter:
    """Turns progress lines into ``on_kernel``/``on_pass`` calls."""

    def __init__(
        self,
        total: int | None,
        on_kernel: KernelCallback | None,
        on_pass: Callable[[int], None] | None,
    ) -> None:
        self.total = total
        self.on_kernel = on_kernel
        self.on_pass = on_pass
        self.passes = 0
        self.in_pass = 0
        self.most_in_a_pass = 0
        self.lines = 0

    def feed(self, line: str) -> None:
        event = parse_progress_line(line)
        if event is None:
            return
        if event.kind == "connected":
            self.passes += 1
            self.in_pass = 0
            if self.on_pass is not None:
                self.on_pass(self.passes)
            return
        self.lines += 1
        self.in_pass = event.index + 1 if event.index is not None else self.in_pass + 1
        self.most_in_a_pass = max(self.most_in_a_pass, self.in_pass)
        if self.on_kernel is not None:
            self.on_kernel(self.in_pass, self.total, event.name)


# --- running --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NcuRun:
    """What the two ncu runs left behind and how they went.

    ``kernels_profiled`` counts the profiling run's per-kernel progress lines (the most in one
    pass); ``passes`` its process connections (1 for kernel replay, one per pass for application
    replay). ``wall_s`` is the profiling run's wall time, ``import_wall_s`` the conversion's.
    """

    command: tuple[str, ...]
    import_command: tuple[str, ...]
    report: Path
    raw_csv: Path
    log: Path
    returncode: int
    wall_s: float
    import_wall_s: float
    kernels_profiled: int
    passes: int
    progress_lines: int


def _start(
    command: Sequence[str],
    *,
    stdout: int | BinaryIO,
    stderr: int | BinaryIO,
    env: Mapping[str, str] | None,
) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            list(command),
            stdout=stdout,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None,
            start_new_session=True,  # its own process group: Ctrl-C handling stops it all
        )
    except OSError as error:
        raise OrionError(
            f"could not start ncu ({command[0]}): {error.strerror or error}",
            hint=NCU_HINT,
        ) from None


def _terminate(process: subprocess.Popen[bytes]) -> None:
    """Stop ncu and the program it launched (its own process group), politely, then not.

    The whole group is signalled even when ncu has already exited: the program it launched may
    still run. A second Ctrl-C while waiting goes straight to SIGKILL.
    """
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=_TERMINATE_GRACE_S)
    except ProcessLookupError:
        return
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    process.wait()


def _lines(path: Path, offset: int = 0) -> list[str]:
    """``path``'s lines from byte ``offset`` on (none when it cannot be read)."""
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return []


def _tail(lines: Sequence[str], count: int = _LOG_TAIL_LINES) -> list[str]:
    return [line for line in lines if line.strip()][-count:]


def _errors(lines: Iterable[str]) -> list[str]:
    return [line.strip() for line in lines if line.startswith("==ERROR==")]


def _mentions(path: Path, needle: str) -> bool:
    try:
        return needle in path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def _has_kernel_table(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            return any(line.lstrip("\ufeff").startswith(('"ID",', "ID,")) for line in handle)
    except OSError:
        return False


def _keep_partial(raw: Path) -> Path:
    partial = raw.with_name(PARTIAL_RAW_CSV)
    if raw.exists():
        os.replace(raw, partial)
    return partial


def _pump(sinks: Mapping[int, Callable[[str], None]]) -> None:
    """Hand every line of the child's pipes to its stream's sink, as it arrives, in this thread.

    Both streams are read (not just stdout) because which one ncu uses for its progress lines
    is not documented; one thread keeps a callback's KeyboardInterrupt (and Ctrl-C, which
    interrupts ``select``) in the caller's hands.
    """
    pending = dict.fromkeys(sinks, b"")
    with selectors.DefaultSelector() as selector:
        for fd in sinks:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            for key, _ in selector.select():
                fd = int(key.fd)
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    selector.unregister(fd)
                    if pending[fd]:
                        sinks[fd](pending[fd].decode("utf-8", errors="replace"))
                    continue
                *lines, pending[fd] = (pending[fd] + chunk).split(b"\n")
                for line in lines:
                    sinks[fd](line.decode("utf-8", errors="replace") + "\n")


def run_ncu(
    command: Sequence[str],
    out_dir: str | os.PathLike[str],
    *,
    import_command: Sequence[str] | None = None,
    total: int | None = None,
    on_kernel: KernelCallback | None = None,
    on_pass: Callable[[int], None] | None = None,
    env: Mapping[str, str] | None = None,
    nothing_profiled: str = NOTHING_IN_THE_STEP,
    ends_program_after: int | None = None,
) -> NcuRun:
    """Run the profiling ``command`` (from :func:`build_ncu_command`), then ``import_command``
    (default: :func:`build_import_command` of the same ncu and report).

    The profiling run's stdout and stderr (ncu's lines and the profiled program's) go to
    ``ncu.log`` as they arrive, and progress lines from either to the callbacks. The import's
    stdout becomes ``ncu_raw.csv``; its stderr is appended to ``ncu.log``.

    ``nothing_profiled`` says why, when ncu profiled no kernel (which window saw none).
    ``ends_program_after``: ncu was told to end the program once it profiled that many kernels
    (``--kill yes``), so a failing exit status after that many is ncu's doing, not an error.

    On failure or Ctrl-C, ncu and its program are terminated and the error (or
    KeyboardInterrupt) propagates; what was produced stays: the report if ncu wrote one, the log,
    and the import's output so far as ``ncu_raw.partial.csv`` (so an ``ncu_raw.csv`` always holds
    a finished conversion).
    """
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    raw, log = folder / RAW_CSV, folder / NCU_LOG
    report = export_path(command)
    for stale in (raw, folder / PARTIAL_RAW_CSV, report):
        stale.unlink(missing_ok=True)
    counter = _ProgressCounter(total, on_kernel, on_pass)

    started = time.monotonic()
    returncode, denied = _profile(command, log, counter, env)
    wall_s = time.monotonic() - started
    ended_by_ncu = ends_program_after is not None and counter.lines >= ends_program_after
    _check_profiling(
        command, log, report, 0 if ended_by_ncu else returncode, denied, nothing_profiled
    )

    conversion = (
        list(import_command)
        if import_command is not None
        else build_import_command(command[0], report)
    )
    started = time.monotonic()
    try:
        import_returncode, log_offset = _import(conversion, raw, log, env)
    except BaseException:
        _keep_partial(raw)
        raise
    import_wall_s = time.monotonic() - started
    _check_import(conversion, raw, log, log_offset, import_returncode, report)
    return NcuRun(
        command=tuple(command),
        import_command=tuple(conversion),
        report=report,
        raw_csv=raw,
        log=log,
        returncode=returncode,
        wall_s=wall_s,
        import_wall_s=import_wall_s,
        kernels_profiled=counter.most_in_a_pass,
        passes=counter.passes,
        progress_lines=counter.lines,
    )


def _profile(
    command: Sequence[str],
    log: Path,
    counter: _ProgressCounter,
    env: Mapping[str, str] | None,
) -> tuple[int, bool]:
    """The profiling run: (exit status, whether a line said ERR_NVGPUCTRPERM).

    Both pipes go to one log in arrival order; ``==`` lines (ncu's) are flushed at once, so the
    log is current while a long run is watched.
    """
    denied = False
    process = _start(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert process.stdout is not None and process.stderr is not None
    with log.open("w", encoding="utf-8") as log_file:

        def take(line: str) -> None:
            nonlocal denied
            log_file.write(line)
            if line.startswith("=="):
                log_file.flush()
                denied = denied or COUNTER_PERMISSION_ERROR in line
                counter.feed(line)

        try:
            _pump({process.stdout.fileno(): take, process.stderr.fileno(): take})
            returncode = process.wait()
        except BaseException:
            _terminate(process)
            raise
        finally:
            process.stdout.close()
            process.stderr.close()
    return returncode, denied


def _import(
    command: Sequence[str], raw: Path, log: Path, env: Mapping[str, str] | None
) -> tuple[int, int]:
    """The conversion: (exit status, where its part of the log starts).

    Nothing is read from it while it runs (it prints no progress), so its output goes straight
    to the files.
    """
    with raw.open("wb") as raw_file, log.open("ab") as log_file:
        log_file.write(f"[orion] converting the report: {command_text(command)}\n".encode())
        log_file.flush()
        offset = log_file.tell()
        process = _start(command, stdout=raw_file, stderr=log_file, env=env)
        try:
            return process.wait(), offset
        except BaseException:
            _terminate(process)
            raise


def _check_profiling(
    command: Sequence[str],
    log: Path,
    report: Path,
    returncode: int,
    permission_denied: bool,
    nothing_profiled: str = NOTHING_IN_THE_STEP,
) -> None:
    """Raise a clear OrionError for every way the profiling run can fail."""
    if permission_denied or _mentions(log, COUNTER_PERMISSION_ERROR):
        raise OrionError(
            "ncu may not read the GPU performance counters (ERR_NVGPUCTRPERM): this user has no "
            "permission to profile",
            hint=f"{COUNTER_PERMISSION_HINT}\nncu's output: {log}",
        )
    if returncode != 0:
        lines = _lines(log)
        errors = _errors(lines)
        detail = f": {errors[0]}" if errors else ""
        tail = _tail(lines)
        hint_lines = [f"last lines of {log}:", *(f"  {line}" for line in tail)] if tail else []
        if report.is_file():
            hint_lines.append(f"the report ncu wrote: {report}")
        hint_lines.append(f"the command: {command_text(command)}")
        raise OrionError(f"ncu exited with status {returncode}{detail}", hint="\n".join(hint_lines))
    if not report.is_file():
        raise OrionError(
            f"ncu profiled no kernels: {nothing_profiled} (it wrote no report {report.name})",
            hint=f"check {log} for errors of the profiled program, and that the workload runs "
            "on the GPU",
        )


def _check_import(
    command: Sequence[str], raw: Path, log: Path, log_offset: int, returncode: int, report: Path
) -> None:
    """Raise a clear OrionError for every way the conversion can fail."""
    if returncode != 0:
        own_log = _lines(log, log_offset)
        errors = _errors([*_lines(raw), *own_log])
        partial = _keep_partial(raw)
        detail = f": {errors[0]}" if errors else ""
        tail = _tail(own_log)
        hint_lines = [f"its last lines in {log}:", *(f"  {line}" for line in tail)] if tail else []
        hint_lines.append(f"its stdout: {partial}; the report: {report}")
        hint_lines.append(f"the command: {command_text(command)}")
        raise OrionError(
            f"ncu --import (the report to CSV) exited with status {returncode}{detail}",
            hint="\n".join(hint_lines),
        )
    if not _has_kernel_table(raw):
        partial = _keep_partial(raw)
        raise OrionError(
            f"ncu profiled no kernels: its report {report.name} converts to no kernel table",
            hint=f"check {log} for errors of the profiled program, and that the workload runs "
            f"on the GPU; ncu's CSV output: {partial}",
        )


__all__ = [
    "DEFAULT_REPLAY_MODE",
    "DEFAULT_WARMUP",
    "NCU_LOG",
    "NOTHING_IN_THE_STEP",
    "PARTIAL_RAW_CSV",
    "PROFILER_API_WINDOW",
    "RAW_CSV",
    "REPLAY_MODES",
    "REPORT",
    "NcuRun",
    "ProgressLine",
    "TensorMetricQuery",
    "available_tensor_metrics",
    "build_import_command",
    "build_ncu_command",
    "check_metric_set",
    "check_replay_mode",
    "command_text",
    "default_replay_mode",
    "default_warmup",
    "export_path",
    "metric_names",
    "ncu_metrics",
    "parse_progress_line",
    "run_ncu",
    "target_command",
]
