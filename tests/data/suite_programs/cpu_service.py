"""A stand-in service for the suite's CPU tests: each request burns ``--work-ms`` of CPU."""

import argparse
import sys
import time

# program_io: examples/programs, on PYTHONPATH from the test (a round runs a copy of this file)
from program_io import serve

parser = argparse.ArgumentParser()
parser.add_argument("--rate", type=float, default=50.0)
parser.add_argument("--work-ms", type=float, default=1.0)
parser.add_argument("--fail", action="store_true", help="exit 3 before the warm-up ends")
parser.add_argument("--duration", type=float, required=True)
parser.add_argument("--out", required=True)
args = parser.parse_args()
if args.fail:
    print("cpu_service: failing as asked", flush=True)
    sys.exit(3)


def handle(index: int) -> None:
    end = time.perf_counter() + args.work_ms / 1e3
    while time.perf_counter() < end:
        pass


print(serve(handle, rate=args.rate, duration=args.duration, seed=1, out=args.out))
