"""A JAX training loop as a user would write it: an MLP trained with SGD under ``jax.jit``.

Six dense layers of width 4096 over batches of 2048 in bf16, momentum SGD written with
``jax.tree_util`` (no optimiser library), synthetic data. XLA compiles the whole step and, by
default, replays it on the GPU as a CUDA graph, and preallocates 75% of the GPU memory it sees:
both are what a JAX job brings to a shared GPU. Trains until ``--duration`` seconds have passed
(or SIGINT), waiting for the step's loss every 10 steps as a loop that logs it does.

    python train_jax.py --duration 60 --out progress.csv
"""

from __future__ import annotations

import argparse
import itertools
import json

import jax
import jax.numpy as jnp
from program_io import run_for


def init(key: jax.Array, width: int, layers: int, classes: int) -> list[dict[str, jax.Array]]:
    sizes = [width] * layers + [classes]
    params = []
    for fan_in, fan_out in itertools.pairwise(sizes):
        key, sub = jax.random.split(key)
        weight = jax.random.normal(sub, (fan_in, fan_out), jnp.float32) / jnp.sqrt(fan_in)
        params.append({"w": weight.astype(jnp.bfloat16), "b": jnp.zeros(fan_out, jnp.bfloat16)})
    return params


def loss_fn(params: list[dict[str, jax.Array]], x: jax.Array, y: jax.Array) -> jax.Array:
    for layer in params[:-1]:
        x = jax.nn.gelu(x @ layer["w"] + layer["b"])
    logits = (x @ params[-1]["w"] + params[-1]["b"]).astype(jnp.float32)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of measured training")
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=10, help="steps before measuring")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", required=True, help="CSV of progress over time")
    args = parser.parse_args()

    key = jax.random.PRNGKey(args.seed)
    params = init(key, args.width, args.layers, 1000)
    momentum = jax.tree_util.tree_map(jnp.zeros_like, params)
    x = jax.random.normal(key, (args.batch, args.width), jnp.bfloat16)
    y = jax.random.randint(key, (args.batch,), 0, 1000)

    @jax.jit
    def train_step(params, momentum, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        momentum = jax.tree_util.tree_map(lambda m, g: 0.9 * m + g, momentum, grads)
        params = jax.tree_util.tree_map(lambda p, m: p - 1e-3 * m, params, momentum)
        return params, momentum, loss

    state = {"params": params, "momentum": momentum, "loss": jnp.zeros(())}

    def step() -> None:
        state["params"], state["momentum"], state["loss"] = train_step(
            state["params"], state["momentum"], x, y
        )

    for _ in range(args.warmup):
        step()
    result = run_for(
        step, lambda: state["loss"].block_until_ready(), duration=args.duration,
        samples_per_step=args.batch, out=args.out,
    )  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    main()
