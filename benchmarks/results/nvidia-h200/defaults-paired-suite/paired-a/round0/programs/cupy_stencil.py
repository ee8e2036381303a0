"""A batch job written with CuPy, not PyTorch: repeated matrix products and a reduction.

Runs until ``--duration`` seconds have passed (or SIGINT), recording the rounds done every 20
rounds. Nothing here knows about orion: run it alone, or under
`orion run --be -- python cupy_stencil.py ...`.

    python cupy_stencil.py --duration 60 --out progress.csv
"""

from __future__ import annotations

import argparse
import json

import cupy as cp
from program_io import run_for


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--size", type=int, default=2048, help="matrix side")
    parser.add_argument("--out", required=True, help="CSV of progress over time")
    args = parser.parse_args()

    state = {
        "a": cp.random.random((args.size, args.size), dtype=cp.float32),
        "b": cp.random.random((args.size, args.size), dtype=cp.float32),
    }

    def step() -> None:
        c = state["a"] @ state["b"]
        state["a"] = c / (cp.abs(c).max() + 1)

    for _ in range(5):
        step()
    result = run_for(
        step, cp.cuda.Device().synchronize, duration=args.duration, samples_per_step=1,
        out=args.out, sync_every=20,
    )  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    main()
