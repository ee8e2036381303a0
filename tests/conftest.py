"""Skip GPU tests cleanly on machines without CUDA, and torchvision tests where it cannot import."""

from __future__ import annotations

import functools

import pytest


@functools.cache
def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@functools.cache
def torchvision_works() -> bool:
    try:
        import torchvision  # noqa: F401
    except Exception:  # a CPU torch with a mismatched torchvision fails at import
        return False
    return True


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_gpu = pytest.mark.skip(reason="needs an NVIDIA GPU with CUDA")
    skip_tv = pytest.mark.skip(reason="needs a working torchvision")
    for item in items:
        if "gpu" in item.keywords and not cuda_available():
            item.add_marker(skip_gpu)
        if "torchvision" in item.keywords and not torchvision_works():
            item.add_marker(skip_tv)
