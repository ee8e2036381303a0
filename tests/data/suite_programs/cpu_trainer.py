"""A stand-in trainer for the suite's CPU tests: each step burns ``--step-ms`` of CPU."""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "programs"))
from program_io import run_for  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--step-ms", type=float, default=2.0)
parser.add_argument("--duration", type=float, required=True)
parser.add_argument("--out", required=True)
args = parser.parse_args()


def step() -> None:
    end = time.perf_counter() + args.step_ms / 1e3
    while time.perf_counter() < end:
        pass


print(run_for(step, lambda: None, duration=args.duration, samples_per_step=4, out=args.out))
