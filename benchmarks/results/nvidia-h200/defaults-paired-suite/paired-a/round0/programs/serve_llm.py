"""An LLM decode service as a user would write it: a GPT-2-sized decoder generating token by token.

The decoder takes its sizes from a `transformers` GPT-2 config (12 layers, width 768, 12 heads,
a 50,257-token vocabulary; random weights, nothing downloaded) and keeps a key/value cache, so
each new token costs one step over one position. As production servers do, the prompt's prefill
and the decode step are each captured once as a CUDA graph and replayed: a request is one
prefill replay and then one decode replay per generated token (greedy), each token waited for
as a streaming server sends it. Requests arrive as a Poisson process; the CSV has each request's
latency from its arrival, its time to first token (from the start of its service) and its
time per output token.

    python serve_llm.py --rate 20 --duration 60 --out latencies.csv
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F
from program_io import capture_graph, serve
from transformers import GPT2Config


class Block(torch.nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.ln2 = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(
        self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: torch.Tensor
    ) -> torch.Tensor:
        batch, tokens, width = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(width, dim=2)
        shape = (batch, tokens, self.heads, width // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        cache[0].index_copy_(2, positions, k)  # cache: (2, batch, heads, max_len, head width)
        cache[1].index_copy_(2, positions, v)
        attended = F.scaled_dot_product_attention(q, cache[0], cache[1], attn_mask=mask)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, tokens, width))
        return x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))


class Decoder(torch.nn.Module):
    """GPT-2's shape with a static key/value cache, so that a step's shapes never change."""

    def __init__(self, config: GPT2Config, batch: int, max_len: int) -> None:
        super().__init__()
        width, heads = config.n_embd, config.n_head
        self.token_embedding = torch.nn.Embedding(config.vocab_size, width)
        self.position_embedding = torch.nn.Embedding(config.n_positions, width)
        self.blocks = torch.nn.ModuleList(Block(width, heads) for _ in range(config.n_layer))
        self.ln_f = torch.nn.LayerNorm(width)
        cache = (config.n_layer, 2, batch, heads, max_len, width // heads)
        self.register_buffer("cache", torch.zeros(cache))
        self.register_buffer("key_positions", torch.arange(max_len))

    def forward(self, tokens: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        """Logits of the last position; ``start`` (a 1-element tensor) is the position of
        ``tokens[:, 0]`` and moves on by the tokens' count, inside the graph."""
        positions = start + torch.arange(tokens.shape[1], device=tokens.device)
        mask = self.key_positions[None, :] <= positions[:, None]
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        for block, cache in zip(self.blocks, self.cache, strict=True):
            x = block(x, positions, mask, cache)
        start.add_(tokens.shape[1])
        return self.ln_f(x[:, -1]) @ self.token_embedding.weight.T


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=20.0, help="requests per second")
    parser.add_argument(
        "--duration", type=float, default=60.0, help="seconds of requests (SIGINT ends sooner)"
    )
    parser.add_argument("--batch", type=int, default=4, help="sequences per request")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens generated")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", required=True, help="CSV of per-request latencies")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    config = GPT2Config()
    model = Decoder(config, args.batch, args.prompt + args.new_tokens).cuda().half().eval()
    start = torch.zeros(1, dtype=torch.long, device="cuda")
    prompt = torch.zeros(args.batch, args.prompt, dtype=torch.long, device="cuda")
    token = torch.zeros(args.batch, 1, dtype=torch.long, device="cuda")
    prompts = torch.randint(0, config.vocab_size, (16, *prompt.shape), device="cuda")

    def prefill() -> torch.Tensor:
        start.zero_()
        token.copy_(model(prompt, start).argmax(dim=-1, keepdim=True))
        return token

    def decode() -> torch.Tensor:
        token.copy_(model(token, start).argmax(dim=-1, keepdim=True))
        return token

    prefill_graph, _ = capture_graph(prefill, warmup=3)
    decode_graph, _ = capture_graph(decode, warmup=3)

    def handle(index: int) -> tuple[float, float]:
        begin = time.perf_counter()
        prompt.copy_(prompts[index % len(prompts)])
        prefill_graph.replay()
        torch.cuda.current_stream().synchronize()
        first = time.perf_counter()
        for _ in range(args.new_tokens - 1):
            decode_graph.replay()
            torch.cuda.current_stream().synchronize()  # the token is sent as it is made
        end = time.perf_counter()
        per_token = (end - first) / max(1, args.new_tokens - 1)
        return (first - begin) * 1e3, per_token * 1e3

    result = serve(
        handle, rate=args.rate, duration=args.duration, seed=args.seed, out=args.out,
        extra_columns=("ttft_ms", "tpot_ms"),
    )  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    main()
