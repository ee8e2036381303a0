"""A training job as a user would write it: ResNet-50, batch 32, SGD, synthetic data.

Trains for a fixed time and reports its throughput. Nothing here knows about orion: run it alone,
or under `orion run --be -- python train_resnet.py ...`.

    python train_resnet.py --duration 60 --out train.json
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torchvision


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of measured training")
    parser.add_argument("--warmup", type=int, default=10, help="iterations before measuring")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--out", required=True, help="JSON with iterations and samples per second")
    args = parser.parse_args()

    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50().cuda().train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    images = torch.randn(args.batch, 3, 224, 224, device="cuda")
    labels = torch.randint(0, 1000, (args.batch,), device="cuda")

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(images), labels).backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    iterations = 0
    start = time.perf_counter()
    while time.perf_counter() - start < args.duration:
        step()
        iterations += 1
        if iterations % 10 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    result = {
        "iterations": iterations,
        "seconds": round(elapsed, 3),
        "iterations_per_s": round(iterations / elapsed, 3),
        "samples_per_s": round(iterations * args.batch / elapsed, 2),
    }
    with open(args.out, "w") as handle:
        json.dump(result, handle)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
