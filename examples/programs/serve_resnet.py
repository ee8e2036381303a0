"""An inference service as a user would write it: ResNet-50, batch 4, replayed as a CUDA graph.

Requests arrive as a Poisson process; each is served in arrival order by copying its input into
the graph's static input and replaying the graph. Latency is measured from the request's arrival,
so time spent queueing behind earlier requests counts. Nothing here knows about orion: run it
alone, or under `orion run --hp -- python serve_resnet.py ...`.

    python serve_resnet.py --rate 80 --duration 60 --out latencies.csv

One request (``--mark-request``, the 50th by default) is marked for profilers, as services often
do: it runs between ``torch.cuda.profiler.start()`` and ``stop()`` (cudaProfilerStart/Stop) and
inside an NVTX range named ``request``; both cost nothing when no profiler is attached. So
``orion profile --window profiler-api`` or ``--window nvtx:request`` profiles one steady-state
request of the running service.
"""

from __future__ import annotations

import argparse
import csv
import json
import time

import numpy as np
import torch
import torchvision


def build(batch: int) -> tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]:
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50().cuda().eval()
    static_input = torch.randn(batch, 3, 224, 224, device="cuda")
    with torch.inference_mode():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(20):  # warm-up: cuDNN picks its algorithms before capture
                model(static_input)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_output = model(static_input)
    torch.cuda.synchronize()
    return graph, static_input, static_output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=80.0, help="requests per second")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of requests")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", required=True, help="CSV of per-request latencies")
    parser.add_argument(
        "--mark-request", type=int, default=50, help="the request marked for profilers (-1: none)"
    )
    args = parser.parse_args()

    graph, static_input, _ = build(args.batch)
    requests = torch.randn(16, args.batch, 3, 224, 224, device="cuda")
    rng = np.random.default_rng(args.seed)
    gaps = rng.exponential(1.0 / args.rate, size=int(args.rate * args.duration * 1.5) + 10)
    arrivals = np.cumsum(gaps)
    arrivals = arrivals[arrivals < args.duration]

    rows = []
    start = time.perf_counter()
    for index, arrival in enumerate(arrivals):
        now = time.perf_counter() - start
        if now < arrival:
            time.sleep(max(0.0, arrival - now - 0.0005))
            while time.perf_counter() - start < arrival:
                pass
        begin = time.perf_counter() - start
        marked = index == args.mark_request
        if marked:
            torch.cuda.profiler.start()
            torch.cuda.nvtx.range_push("request")
        static_input.copy_(requests[index % len(requests)])
        graph.replay()
        torch.cuda.current_stream().synchronize()
        if marked:
            torch.cuda.nvtx.range_pop()
            torch.cuda.profiler.stop()
        end = time.perf_counter() - start
        rows.append((index, arrival, begin, end, (end - arrival) * 1e3))

    with open(args.out, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["request", "arrival_s", "start_s", "end_s", "latency_ms"])
        writer.writerows(rows)
    latencies = np.array([row[-1] for row in rows])
    print(json.dumps({
        "requests": len(rows),
        "p50_ms": round(float(np.percentile(latencies, 50)), 3),
        "p99_ms": round(float(np.percentile(latencies, 99)), 3),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
