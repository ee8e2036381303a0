"""`orion profile -- CMD` on the example inference service, once per kind of profiling window.

The service (``examples/programs/serve_resnet.py``: ResNet-50 batch 4 replayed as a CUDA graph)
marks one steady-state request for profilers. It is profiled three ways, each with
``--cuda-graph`` (kernel nodes profiled one by one):

- ``profiler-api``: the request between cudaProfilerStart and cudaProfilerStop;
- ``nvtx:request``: the request's NVTX range;
- ``--skip N --count M``: a kernel range counted from the program's start.

Each command is timed end to end (wall seconds, ncu included). The profile's kernel rows and
graph identity are read back with the one profile reader, and the three are compared: the two
marked windows should give the same graph (the same kernel nodes).

    python benchmarks/profile_windows.py --out results/profile-windows [--skip 3000 --count 80]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVICE = ROOT / "examples" / "programs" / "serve_resnet.py"

WINDOWS: dict[str, list[str]] = {
    "profiler-api": ["--window", "profiler-api"],
    "nvtx": ["--window", "nvtx:request"],
}


def service(out: Path) -> list[str]:
    # 40 requests at 40/s: the marked one (the 20th) is well past warm-up, and the program ends
    # soon after it (ncu waits for the program with the marker windows).
    return [sys.executable, str(SERVICE), "--rate", "40", "--duration", "1",
            "--mark-request", "20", "--out", str(out / "latencies.csv")]  # fmt: skip


def profile_once(name: str, window: list[str], out: Path) -> dict:
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "orion_cli.app", "profile", "--name", f"serve-{name}",
               "--cuda-graph", "-o", str(folder / "profile"), *window, "--",
               *service(folder)]  # fmt: skip
    started = time.monotonic()
    with (folder / "orion-profile.log").open("w") as log:
        result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False)
    seconds = time.monotonic() - started
    row = {"window": name, "command": command[2:], "exit_status": result.returncode,
           "seconds": round(seconds, 1)}  # fmt: skip
    csv = folder / "profile" / "profile.csv"
    if result.returncode == 0 and csv.is_file():
        from postprocess.profile_format import read_profile
        from scheduler_core import native_module

        profile = read_profile(csv)
        kernels = profile.kernels
        keys = [
            native_module().kernel_key(
                str(r.kernel_name), (int(r.grid_x), int(r.grid_y), int(r.grid_z)),
                (int(r.block_x), int(r.block_y), int(r.block_z)),
            )
            for r in kernels.itertuples(index=False)
        ]  # fmt: skip
        row.update(
            kernels=len(kernels),
            graph_key=native_module().graph_key(keys) if keys else None,
            gpu_time_us=round(float(kernels["duration_ns"].sum()) / 1e3, 1),
            window_recorded=profile.metadata.get("window"),
        )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--skip", type=int, default=3000, help="kernel launches to skip")
    parser.add_argument("--count", type=int, default=80, help="kernel launches to profile")
    args = parser.parse_args()
    windows = {
        **WINDOWS,
        "kernel-range": ["--skip", str(args.skip), "--count", str(args.count)],
    }
    rows = []
    for name, window in windows.items():
        row = profile_once(name, window, args.out)
        print(json.dumps(row), flush=True)
        rows.append(row)
    marked = [row.get("graph_key") for row in rows if row["window"] in WINDOWS]
    summary = {
        "format": "orion-profile-windows",
        "version": 1,
        "windows": rows,
        "marked_windows_agree": len(set(marked)) == 1 and marked[0] is not None,
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
