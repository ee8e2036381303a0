"""A batch job written with CuPy, not PyTorch: repeated matrix products and a reduction.

Runs for a fixed time and reports how many rounds it finished. Nothing here knows about orion:
run it alone, or under `orion run --be -- python cupy_stencil.py ...`.

    python cupy_stencil.py --duration 60 --out cupy.json
"""

from __future__ import annotations

import argparse
import json
import time

import cupy as cp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--size", type=int, default=2048, help="matrix side")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    a = cp.random.random((args.size, args.size), dtype=cp.float32)
    b = cp.random.random((args.size, args.size), dtype=cp.float32)
    for _ in range(5):
        c = a @ b
    cp.cuda.Device().synchronize()
    rounds = 0
    start = time.perf_counter()
    while time.perf_counter() - start < args.duration:
        c = a @ b
        a = c / (cp.abs(c).max() + 1)
        rounds += 1
        if rounds % 20 == 0:
            cp.cuda.Device().synchronize()
    cp.cuda.Device().synchronize()
    elapsed = time.perf_counter() - start
    result = {
        "rounds": rounds,
        "seconds": round(elapsed, 3),
        "rounds_per_s": round(rounds / elapsed, 2),
    }
    with open(args.out, "w") as handle:
        json.dump(result, handle)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
