"""A transformer encoder service as a user would write it: 12 layers, fp16, a CUDA graph.

A BERT-base-sized encoder (12 layers, width 768, 12 heads) over batches of 8 sequences of 256
tokens, in fp16, served from a CUDA graph by default (``--eager``: layer by layer from Python, as
services that skip graphs run). Requests arrive as a Poisson process and are served in arrival
order; latency counts from the arrival. Nothing here knows about orion.

    python serve_encoder.py --rate 100 --duration 60 --out latencies.csv
    python serve_encoder.py --eager --rate 100 --duration 60 --out latencies.csv
"""

from __future__ import annotations

import argparse
import json

import torch
from program_io import capture_graph, serve


def build_encoder(layers: int, width: int, heads: int) -> torch.nn.Module:
    layer = torch.nn.TransformerEncoderLayer(
        d_model=width, nhead=heads, dim_feedforward=4 * width, batch_first=True, dropout=0.0
    )
    encoder = torch.nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)
    return encoder.cuda().half().eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100.0, help="requests per second")
    parser.add_argument(
        "--duration", type=float, default=60.0, help="seconds of requests (SIGINT ends sooner)"
    )
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--eager", action="store_true", help="no CUDA graph")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", required=True, help="CSV of per-request latencies")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    model = build_encoder(args.layers, 768, 12)
    static_input = torch.randn(args.batch, args.tokens, 768, device="cuda", dtype=torch.half)
    requests = torch.randn(16, *static_input.shape, device="cuda", dtype=torch.half)
    if args.eager:
        with torch.inference_mode():
            for _ in range(20):
                model(static_input)
        torch.cuda.synchronize()

        def handle(index: int) -> None:
            with torch.inference_mode():
                model(requests[index % len(requests)])
            torch.cuda.current_stream().synchronize()

    else:
        graph, _ = capture_graph(lambda: model(static_input))

        def handle(index: int) -> None:
            static_input.copy_(requests[index % len(requests)])
            graph.replay()
            torch.cuda.current_stream().synchronize()

    result = serve(handle, rate=args.rate, duration=args.duration, seed=args.seed, out=args.out)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
