"""A stand-in trainer for the suite's CPU tests: each step burns ``--step-ms`` of CPU."""

import argparse
import time

# program_io: examples/programs, on PYTHONPATH from the test (a round runs a copy of this file)
from program_io import run_for

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
