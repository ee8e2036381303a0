"""An inference service as a user would write it: ResNet-50, batch 4, replayed as a CUDA graph.

Requests arrive as a Poisson process; each is served in arrival order by copying its input into
the graph's static input and replaying the graph. Latency is measured from the request's arrival,
so time spent queueing behind earlier requests counts. Nothing here knows about orion: run it
alone, or under `orion run --hp -- python serve_resnet.py ...`.

    python serve_resnet.py --rate 80 --duration 60 --out latencies.csv
    python serve_resnet.py --closed-loop --batch 32 --duration 60 --out batch.csv   # a BE job

Each row of the CSV is one request, times in Unix seconds (``program_io.py`` says what the
example programs share); ``OUT.ready`` marks the end of the warm-up.

One request (``--mark-request``, the 50th by default) is marked for profilers, as services often
do: it runs between ``torch.cuda.profiler.start()`` and ``stop()`` (cudaProfilerStart/Stop) and
inside an NVTX range named ``request``; both cost nothing when no profiler is attached. So
``orion profile --window profiler-api`` or ``--window nvtx:request`` profiles one steady-state
request of the running service.
"""

from __future__ import annotations

import argparse
import json

import torch
import torchvision
from program_io import capture_graph, serve


def build(batch: int) -> tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]:
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50().cuda().eval()
    static_input = torch.randn(batch, 3, 224, 224, device="cuda")
    graph, static_output = capture_graph(lambda: model(static_input))
    return graph, static_input, static_output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=80.0, help="requests per second")
    parser.add_argument(
        "--duration", type=float, default=60.0, help="seconds of requests (SIGINT ends sooner)"
    )
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--closed-loop",
        action="store_true",
        help="serve requests back to back (a batch inference job) instead of Poisson arrivals",
    )
    parser.add_argument("--out", required=True, help="CSV of per-request latencies")
    parser.add_argument(
        "--mark-request", type=int, default=50, help="the request marked for profilers (-1: none)"
    )
    args = parser.parse_args()

    graph, static_input, _ = build(args.batch)
    requests = torch.randn(16, args.batch, 3, 224, 224, device="cuda")

    def handle(index: int) -> None:
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

    result = serve(
        handle,
        rate=args.rate,
        duration=args.duration,
        seed=args.seed,
        out=args.out,
        closed_loop=args.closed_loop,
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
