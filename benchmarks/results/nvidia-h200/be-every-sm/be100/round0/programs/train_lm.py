"""A language-model trainer as a user would write it: a bf16 decoder-only transformer with AdamW.

8 layers of width 1024 (16 heads) over batches of 8 sequences of 512 tokens, causal attention,
a cross-entropy over a 32,000-token vocabulary, weights and activations in bf16, AdamW; synthetic
tokens. Its kernels are long (large GEMMs, attention, the vocabulary's softmax), which is what
sets it apart from a vision trainer when it shares a GPU with a latency-bound service. Trains
until ``--duration`` seconds have passed (or SIGINT), recording progress every 10 steps.

    python train_lm.py --duration 60 --out progress.csv
"""

from __future__ import annotations

import argparse
import json

import torch
from program_io import run_for


class LanguageModel(torch.nn.Module):
    def __init__(self, vocab: int, width: int, heads: int, layers: int, tokens: int) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(vocab, width)
        self.positions = torch.nn.Parameter(torch.randn(tokens, width) * 0.02)
        layer = torch.nn.TransformerEncoderLayer(
            width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.layers = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab, bias=False)
        self.register_buffer("causal", torch.nn.Transformer.generate_square_subsequent_mask(tokens))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens) + self.positions
        mask = self.causal.to(x.dtype)
        return self.head(self.norm(self.layers(x, mask=mask, is_causal=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of measured training")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--warmup", type=int, default=5, help="steps before measuring")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", required=True, help="CSV of progress over time")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    model = LanguageModel(args.vocab, 1024, 16, args.layers, args.tokens)
    model = model.to(device="cuda", dtype=torch.bfloat16).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    data = torch.randint(0, args.vocab, (args.batch, args.tokens + 1), device="cuda")
    inputs, targets = data[:, :-1], data[:, 1:]

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        logits = model(inputs)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
        loss.backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    result = run_for(
        step, torch.cuda.synchronize, duration=args.duration,
        samples_per_step=args.batch * args.tokens, out=args.out,
    )  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    main()
