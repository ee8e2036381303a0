"""A stand-in for Nsight Compute's `ncu` for CPU tests (stdlib only; see README.md here).

It never runs the profiled program. Like ncu it has two roles: `--export PATH` (the profiling
run) prints ncu-style progress lines for every kernel of a real run
(`../ncu/h200_resnet50_infer_bs4_x2_raw.csv`) and writes a placeholder report to PATH, and
`--import PATH` prints that real run's CSV.
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURE = HERE.parent / "ncu" / "h200_resnet50_infer_bs4_x2_raw.csv"
PERM_ERROR = (
    "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
    "Performance Counters on the target device 0. For instructions on enabling permissions and "
    "to get more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM"
)
QUERY_OUTPUT = """\
Device NVIDIA H200 (GH100)
-------------------------------------------------- ---------------------------------------------
Metric Name                                        Metric Description
-------------------------------------------------- ---------------------------------------------
dram__bytes                                        # of bytes accessed in DRAM
gpu__time_duration                                 total duration in nanoseconds
sm__pipe_shared_cycles_active                      # of cycles where the shared pipe was active
sm__pipe_tensor_op_gmma_cycles_active              # of cycles where the GMMA pipe was active
sm__throughput                                     SM throughput
"""


def out(line: str = "") -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def record_argv(argv: list[str]) -> None:
    target = os.environ.get("FAKE_NCU_ARGV")
    if target:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(argv) + "\n")


def option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv[:-1] else None


def kernel_names() -> list[str]:
    lines = FIXTURE.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.reader(lines[start:]))
    column = rows[0].index("Kernel Name")
    return [row[column] for row in rows[2:] if row and row[0].strip()]


def progress(index: int, name: str, passes: int = 9) -> str:
    short = name if len(name) <= 30 else name[:27] + "..."
    return f'==PROF== Profiling "{short}" - {index}: 0%....50%....100% - {passes} passes'


def write_software(argv: list[str]) -> None:
    output = option(argv, "--output")
    if output and "--pass" in argv and option(argv, "--pass") == "ncu":
        Path(output).write_text(
            json.dumps(
                {
                    "gpu_name": "NVIDIA H200",
                    "driver_version": "580.159.04",
                    "cuda_version": "13.0",
                    "torch_version": "2.11.0+cu130",
                    "cudnn_version": "9.19.0",
                }
            ),
            encoding="utf-8",
        )


def write_report(argv: list[str]) -> None:
    report = option(argv, "--export")
    if report:
        Path(report).write_text("fake ncu report\n", encoding="utf-8")
        out(f"==PROF== Report: {report}")


def write_pid() -> None:
    pid_file = os.environ.get("FAKE_NCU_PID")
    if pid_file:
        Path(pid_file).write_text(str(os.getpid()), encoding="utf-8")


def sleep_ran_out() -> None:
    """A sleep that was not cut short leaves ``$FAKE_NCU_PID.ended``: a test tells "orion
    stopped it" from "orion waited for it" by that file, not by how long it took."""
    pid_file = os.environ.get("FAKE_NCU_PID")
    if pid_file:
        Path(f"{pid_file}.ended").write_text("ended", encoding="utf-8")


def import_report(argv: list[str]) -> int:
    """`ncu --import PATH --csv ...`: the real run's CSV, unchanged, on stdout."""
    report = option(argv, "--import") or ""
    if not Path(report).is_file():
        out(f"==ERROR== Failed to open file {report}: no such file")
        return 1
    mode = os.environ.get("FAKE_NCU_IMPORT", "ok")
    text = FIXTURE.read_text(encoding="utf-8")
    if mode == "fail":
        print("[fake ncu] the report is damaged (fake)", file=sys.stderr, flush=True)
        out(f"==ERROR== Failed to import report {report} (fake)")
        return 1
    if mode == "empty":
        out("==WARNING== No kernels were profiled.")
        return 0
    if mode == "sleep":
        sys.stdout.write("".join(text.splitlines(keepends=True)[:6]))
        sys.stdout.flush()
        write_pid()
        time.sleep(60)
        sleep_ran_out()
        return 0
    sys.stdout.write(text)
    return 0


def main(argv: list[str]) -> int:
    record_argv(argv)
    mode = os.environ.get("FAKE_NCU_MODE", "ok")
    if "--version" in argv:
        out("NVIDIA (R) Nsight Compute Command Line Profiler")
        out("Copyright (c) 2018-2025 NVIDIA Corporation")
        out("Version 2025.3.1.0 (build 36398880) (public-release)")
        return 0
    if "--query-metrics" in argv:
        if os.environ.get("FAKE_NCU_QUERY") == "fail":
            out("==ERROR== Failed to query metrics: no supported device found")
            return 1
        sys.stdout.write(QUERY_OUTPUT)
        return 0
    if "--import" in argv:
        return import_report(argv)
    if "--csv" in argv:
        # orion profiles to a report; ncu in CSV mode would print no progress lines.
        out("==ERROR== fake ncu: the profiling run must use --export, not --csv")
        return 2

    print("[orion target] building workload (fake)", file=sys.stderr, flush=True)
    out(
        "==WARNING== Note: Running with unmodified GPU clocks. If not controlled otherwise, "
        "profiling results may be inconsistent."
    )
    out("==PROF== Connected to process 4242 (/usr/bin/python3.12)")
    names = kernel_names()
    if mode == "perm":
        out(PERM_ERROR)
        out("==PROF== Disconnected from process 4242")
        return 0
    if mode == "nokernels":
        out("==PROF== Disconnected from process 4242")
        out("==WARNING== No kernels were profiled.")
        return 0
    if mode == "fail":
        for index in range(3):
            out(progress(index, names[index]))
        print("[orion target] error: CUDA out of memory (fake)", file=sys.stderr, flush=True)
        out("==PROF== Disconnected from process 4242")
        out("==ERROR== The application returned an error code (3).")
        write_report(argv)  # ncu keeps what it profiled before the program failed
        return 1
    if mode == "sleep":
        write_pid()
        deadline = time.monotonic() + 60
        index = 0
        while time.monotonic() < deadline:
            out(progress(index, names[index % len(names)]))
            index += 1
            time.sleep(0.05)
        sleep_ran_out()
        return 0
    passes = 3 if mode == "app" else 1
    to_stderr = os.environ.get("FAKE_NCU_PROGRESS_STREAM") == "stderr"
    for number in range(passes):
        if number:
            out(f"==PROF== Connected to process {4242 + number} (/usr/bin/python3.12)")
        for index, name in enumerate(names):
            if to_stderr:
                print(progress(index, name), file=sys.stderr, flush=True)
            else:
                out(progress(index, name))
    write_software(argv)
    out(f"==PROF== Disconnected from process {4242 + passes - 1}")
    write_report(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
