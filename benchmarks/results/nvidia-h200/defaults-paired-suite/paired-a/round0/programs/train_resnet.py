"""A training job as a user would write it: ResNet-50, batch 32, SGD, synthetic data.

Trains until ``--duration`` seconds have passed (or SIGINT) and records its progress every 10
steps, where it waits for the GPU as a trainer that logs its loss does. Nothing here knows about
orion: run it alone, or under `orion run --be -- python train_resnet.py ...`.

    python train_resnet.py --duration 60 --out progress.csv
"""

from __future__ import annotations

import argparse
import json

import torch
import torchvision
from program_io import run_for


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of measured training")
    parser.add_argument("--warmup", type=int, default=10, help="iterations before measuring")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--out", required=True, help="CSV of progress over time")
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
    result = run_for(
        step, torch.cuda.synchronize, duration=args.duration, samples_per_step=args.batch,
        out=args.out,
    )  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    main()
