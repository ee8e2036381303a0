"""Two Ray actors on one GPU with ``num_gpus=0.5`` each, with and without orion.

An HP inference deployment (ResNet-50, batch 4, Poisson arrivals) and a BE trainer (ResNet-50,
batch 32) each ask Ray for half a GPU, so Ray puts both on one GPU. Ray's half is a count, not a
boundary: without orion the trainer's kernels queue in front of every request and either actor
can take all the GPU's memory. With ``orion.ray.options`` the deployment joins the GPU's orion
daemon as the high-priority client and the trainer as a best-effort one, each limited to half
the GPU's memory, and orion lets trainer kernels onto the GPU only beside requests they fit
beside. Run it both ways and compare the HP p99 and the trainer's throughput:

    ray start --head --num-gpus 1            # or an existing cluster (RAY_ADDRESS)
    python examples/ray/half_a_gpu_each.py --without-orion
    python examples/ray/half_a_gpu_each.py                 # starts the daemons if missing

The same dict goes into Ray Serve: ``@serve.deployment(ray_actor_options=orion.ray.options("hp",
num_gpus=0.5, latency_target_ms=10))``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import ray

import orion.ray


@ray.remote
class InferenceDeployment:
    """Serves requests arriving as a Poisson process; latency counts queueing from arrival."""

    def __init__(self, batch: int = 4) -> None:
        import torch
        import torchvision

        self.torch = torch
        self.model = torchvision.models.resnet50().cuda().eval()
        self.input = torch.randn(batch, 3, 224, 224, device="cuda")

    def serve(self, rate_per_s: float, duration_s: float) -> list[float]:
        import numpy as np

        gaps = np.random.default_rng(1).exponential(1.0 / rate_per_s, int(rate_per_s * duration_s))
        latencies, start = [], time.perf_counter()
        arrival = start
        with self.torch.inference_mode():
            for gap in gaps:
                arrival += gap
                time.sleep(max(0.0, arrival - time.perf_counter()))
                self.model(self.input)
                self.torch.cuda.synchronize()
                latencies.append((time.perf_counter() - arrival) * 1000.0)
        return latencies


@ray.remote
class Trainer:
    """Back-to-back training iterations; samples per second."""

    def __init__(self, batch: int = 32) -> None:
        import torch
        import torchvision

        self.torch = torch
        self.batch = batch
        self.model = torchvision.models.resnet50().cuda().train()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.input = torch.randn(batch, 3, 224, 224, device="cuda")
        self.labels = torch.randint(0, 1000, (batch,), device="cuda")

    def train(self, duration_s: float) -> float:
        loss_fn = self.torch.nn.CrossEntropyLoss()
        iterations, start = 0, time.perf_counter()
        while time.perf_counter() - start < duration_s:
            self.optimizer.zero_grad()
            loss_fn(self.model(self.input), self.labels).backward()
            self.optimizer.step()
            self.torch.cuda.synchronize()
            iterations += 1
        return iterations * self.batch / (time.perf_counter() - start)


def actor_options(role: str, with_orion: bool) -> dict[str, Any]:
    if not with_orion:
        return {"num_gpus": 0.5}  # Ray's bookkeeping only
    if role == "hp":
        return orion.ray.options("hp", num_gpus=0.5, latency_target_ms=10.0, name="inference")
    return orion.ray.options("be", num_gpus=0.5, name="trainer")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default=None, help="Ray cluster (default: RAY_ADDRESS/auto)")
    parser.add_argument("--without-orion", action="store_true", help="Ray's num_gpus=0.5 alone")
    parser.add_argument("--rate", type=float, default=80.0, help="HP requests per second")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of measurement")
    args = parser.parse_args()

    ray.init(address=args.address)
    with_orion = not args.without_orion
    if with_orion:
        orion.ray.start_daemons()  # idempotent: each GPU of each node gets its daemon once
    # One placement group of one GPU keeps both actors on the same GPU, as on a one-GPU node.
    group = ray.util.placement_group([{"GPU": 1, "CPU": 2}])
    ray.get(group.ready())
    strategy = ray.util.scheduling_strategies.PlacementGroupSchedulingStrategy(group, 0)
    server = InferenceDeployment.options(
        **actor_options("hp", with_orion), num_cpus=1, scheduling_strategy=strategy
    ).remote()
    trainer = Trainer.options(
        **actor_options("be", with_orion), num_cpus=1, scheduling_strategy=strategy
    ).remote()
    latencies, throughput = ray.get(
        [server.serve.remote(args.rate, args.duration), trainer.train.remote(args.duration)]
    )
    latencies.sort()
    p99 = latencies[int(0.99 * (len(latencies) - 1))]
    label = "with orion" if with_orion else "Ray alone"
    print(f"{label}: HP p99 {p99:.1f} ms over {len(latencies)} requests, "
          f"BE {throughput:.0f} samples/s")  # fmt: skip


if __name__ == "__main__":
    main()
