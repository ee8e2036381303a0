"""A JAX/XLA training step on the GPU, for the GPU tests: XLA replays it as a CUDA graph.

    python tests/gpu_jax_probe.py RESULT.json

Trains a small bf16 MLP with momentum SGD under ``jax.jit`` for a fixed number of steps on fixed
data (run with XLA_PYTHON_CLIENT_PREALLOCATE=false, so several probes share one GPU) and writes
the SHA-256 of the final parameters: the same on a GPU with or without orion's library, whatever
it does to XLA's graphs, if it keeps their meaning.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

STEPS = 30


def main() -> int:
    key = jax.random.PRNGKey(0)
    sizes = (512, 512, 512, 10)
    params = []
    for fan_in, fan_out in itertools.pairwise(sizes):
        key, sub = jax.random.split(key)
        params.append(
            (jax.random.normal(sub, (fan_in, fan_out), jnp.float32) / 32).astype(jnp.bfloat16)
        )
    x = jax.random.normal(key, (256, sizes[0]), jnp.bfloat16)
    y = jax.random.randint(key, (256,), 0, sizes[-1])

    def loss_fn(weights, x, y):
        for weight in weights[:-1]:
            x = jax.nn.gelu(x @ weight)
        logits = (x @ weights[-1]).astype(jnp.float32)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

    @jax.jit
    def step(weights, momentum):
        grads = jax.grad(loss_fn)(weights, x, y)
        momentum = [0.9 * m + g for m, g in zip(momentum, grads, strict=True)]
        return [w - 1e-2 * m for w, m in zip(weights, momentum, strict=True)], momentum

    momentum = [jnp.zeros_like(w) for w in params]
    for _ in range(STEPS):
        params, momentum = step(params, momentum)
    data = b"".join(np.asarray(w.astype(jnp.float32)).tobytes() for w in params)
    with open(sys.argv[1], "w", encoding="utf-8") as handle:
        json.dump({"output_sha256": hashlib.sha256(data).hexdigest(), "steps": STEPS}, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
