"""torchvision image classifiers with random weights on random 224x224 images (no downloads)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from workloads import _runtime
from workloads.spec import WorkloadSpec
from workloads.torch_model import TorchModelWorkload

IMAGE_SIZE = 224
NUM_CLASSES = 1000


def _build(spec: WorkloadSpec, architecture: str) -> TorchModelWorkload:
    device = _runtime.resolve_device(spec)
    torchvision = _runtime.require("torchvision", spec.name)
    factory = getattr(torchvision.models, architecture)
    batch = spec.batch_size
    with _runtime.seeded(device), torch.device(device):
        model = factory(weights=None, num_classes=NUM_CLASSES)
        images = torch.randn(batch, 3, IMAGE_SIZE, IMAGE_SIZE)
        labels = torch.randint(0, NUM_CLASSES, (batch,))
    _runtime.finish_build(device)
    return TorchModelWorkload(
        spec,
        device,
        model,
        inputs=(images,),
        infer=lambda m, x: m(x),
        loss=lambda m, x: F.cross_entropy(m(x), labels),
    )


def build_resnet50(spec: WorkloadSpec) -> TorchModelWorkload:
    return _build(spec, "resnet50")


def build_resnet101(spec: WorkloadSpec) -> TorchModelWorkload:
    return _build(spec, "resnet101")


def build_mobilenet_v2(spec: WorkloadSpec) -> TorchModelWorkload:
    return _build(spec, "mobilenet_v2")
