"""A trainer compiled with ``torch.compile(mode="reduce-overhead")``, as users speed one up.

A residual MLP (8 blocks of width 2048 with layer norms) over batches of 512 in bf16 autocast,
AdamW, synthetic data. ``reduce-overhead`` has Inductor fuse the model's kernels (Triton) and
replay its forward and backward passes as CUDA graphs, so most of the GPU work reaches the driver
as graph launches, not kernels. Compilation happens during the warm-up, before anything is
measured. Trains until ``--duration`` seconds have passed (or SIGINT), recording progress every
10 steps.

    python train_compile.py --duration 60 --out progress.csv
"""

from __future__ import annotations

import argparse
import json

import torch
from program_io import run_for


class ResidualMlp(torch.nn.Module):
    def __init__(self, width: int, blocks: int, classes: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(
                torch.nn.LayerNorm(width),
                torch.nn.Linear(width, 2 * width),
                torch.nn.GELU(),
                torch.nn.Linear(2 * width, width),
            )
            for _ in range(blocks)
        )
        self.head = torch.nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of measured training")
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--mode", default="reduce-overhead", help="torch.compile's mode")
    parser.add_argument("--warmup", type=int, default=10, help="steps before measuring")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", required=True, help="CSV of progress over time")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = ResidualMlp(args.width, args.blocks, 1000).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    inputs = torch.randn(args.batch, args.width, device=device)
    labels = torch.randint(0, 1000, (args.batch,), device=device)

    @torch.compile(mode=args.mode)
    def loss_of(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device, dtype=torch.bfloat16):
            return torch.nn.functional.cross_entropy(model(x), y)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss_of(inputs, labels).backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    result = run_for(step, sync, duration=args.duration, samples_per_step=args.batch, out=args.out)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
