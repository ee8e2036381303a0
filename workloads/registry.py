"""The named workloads orion knows and what each needs (`workloads.build` builds them).

This module must stay cheap to import: ``orion workloads`` lists these instantly and works on
machines without torch, torchvision, transformers or CuPy. Builders therefore import their
implementation modules (and through them the frameworks) only when called.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orion_common.errors import OrionError

if TYPE_CHECKING:
    # Annotations only: workloads.spec imports this module (a spec validates against the
    # registry), so the registry never imports it at run time.
    from workloads.base import Workload
    from workloads.spec import WorkloadSpec


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)`` squeezed onto one short line, so error messages stay one line."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class OptionInfo:
    """One integer knob of a workload, with its default and allowed range (inclusive)."""

    name: str
    default: int
    meaning: str
    minimum: int
    maximum: int | None = None

    def check(self, workload: str, value: Any) -> None:
        in_range = (
            isinstance(value, int)
            and not isinstance(value, bool)
            and value >= self.minimum
            and (self.maximum is None or value <= self.maximum)
        )
        if not in_range:
            upper = "" if self.maximum is None else f" and <= {self.maximum}"
            raise OrionError(
                f"option {self.name!r} of workload {workload!r} must be an integer "
                f">= {self.minimum}{upper}, got {short_repr(value)}"
            )


@dataclass(frozen=True)
class WorkloadInfo:
    """What a workload is, what it needs, and how to build it.

    ``requires`` names importable modules beyond torch; ``devices`` the device types it runs on
    (the synthetic kernels are CUDA-only), so callers can tell before building.
    ``graph_capture`` is None when the inference step can be served as a CUDA graph, else why not.
    """

    name: str
    description: str
    kind: str
    requires: tuple[str, ...]
    options: tuple[OptionInfo, ...]
    builder: Callable[[WorkloadSpec], Workload]
    devices: tuple[str, ...] = ("cpu", "cuda")
    graph_capture: str | None = None

    @property
    def graph_capturable(self) -> bool:
        return self.graph_capture is None

    def check_options(self, options: Any) -> None:
        """Raise a one-line :class:`OrionError` for an unknown option or a bad value."""
        if not isinstance(options, Mapping):
            raise OrionError(
                f"options of workload {self.name!r} must be a mapping of name to integer, "
                f"got {short_repr(options)}"
            )
        known = {opt.name: opt for opt in self.options}
        for key, value in options.items():
            if key not in known:
                allowed = (
                    f"allowed options: {', '.join(known)}"
                    if known
                    else "this workload takes no options"
                )
                raise OrionError(
                    f"unknown option {short_repr(key)} for workload {self.name!r}; {allowed}"
                )
            known[key].check(self.name, value)


def _lazy(module: str, function: str) -> Callable[[WorkloadSpec], Workload]:
    """A builder that imports ``module`` (and so the frameworks) only when it is called."""

    def build(spec: WorkloadSpec) -> Workload:
        import importlib

        from workloads._runtime import require

        require("torch", spec.name)  # before the module import, for a one-line error
        return getattr(importlib.import_module(module), function)(spec)

    build.__qualname__ = build.__name__ = f"{module}.{function}"
    return build


_SEQ_LEN_BERT = OptionInfo("seq_len", 128, "tokens per sequence", 1, 512)
_SEQ_LEN_GPT2 = OptionInfo("seq_len", 128, "tokens per sequence", 1, 1024)
# Why the synthetic kernels are not offered as graphs: they exist to give the scheduler single
# launches of a known shape, which a graph would hide behind one graph launch.
_SYNTHETIC_NO_GRAPH = (
    "synthetic kernels exist to test per-launch gating and are only run eagerly; "
    "serve a model workload as a graph instead"
)
_GRID = OptionInfo("grid", 0, "blocks per launch; 0 means one block per SM", 0, 2**31 - 1)
_BLOCK = OptionInfo("block", 256, "threads per block", 1, 1024)


@dataclass(frozen=True)
class _Kind:
    """What every workload of one kind shares: the package it needs, the module that builds it,
    where it runs, whether it serves as a graph and the options all of the kind take."""

    requires: tuple[str, ...]
    module: str
    devices: tuple[str, ...] = ("cpu", "cuda")
    graph_capture: str | None = None
    options: tuple[OptionInfo, ...] = ()


_KINDS: dict[str, _Kind] = {
    "vision": _Kind(("torchvision",), "workloads.vision"),
    "nlp": _Kind(("transformers",), "workloads.nlp"),
    "synthetic": _Kind(
        ("cupy",), "workloads.synthetic", ("cuda",), _SYNTHETIC_NO_GRAPH, (_GRID, _BLOCK)
    ),
}


def _workload(kind: str, name: str, description: str, *options: OptionInfo) -> WorkloadInfo:
    """A workload of ``kind``, built by ``build_<name>`` (dashes as underscores) of the kind's
    module; ``options`` come after the kind's own."""
    shared = _KINDS[kind]
    return WorkloadInfo(
        name=name,
        description=description,
        kind=kind,
        requires=shared.requires,
        options=(*shared.options, *options),
        builder=_lazy(shared.module, f"build_{name.replace('-', '_')}"),
        devices=shared.devices,
        graph_capture=shared.graph_capture,
    )


_REGISTRY: tuple[WorkloadInfo, ...] = (
    _workload("vision", "resnet50", "torchvision ResNet-50, random weights, 224x224 images"),
    _workload("vision", "resnet101", "torchvision ResNet-101, random weights, 224x224 images"),
    _workload("vision", "mobilenet_v2", "torchvision MobileNetV2, random weights, 224x224 images"),
    _workload(
        "nlp",
        "bert",
        "BERT-base sequence classifier (2 labels) from a transformers config",
        _SEQ_LEN_BERT,
    ),
    _workload(
        "nlp", "gpt2", "GPT-2 small language model from a transformers config", _SEQ_LEN_GPT2
    ),
    _workload(
        "synthetic",
        "synthetic-compute",
        "CuPy kernel of per-thread FMA chains (compute-bound), tunable grid",
        OptionInfo("iterations", 4096, "FMA-chain loop length per thread", 1, 2**31 - 1),
    ),
    _workload(
        "synthetic",
        "synthetic-memory",
        "CuPy grid-stride copy between two device buffers (memory-bound)",
        OptionInfo("mib", 256, "bytes copied per launch, in MiB", 1, 2**20),
    ),
)
_BY_NAME: dict[str, WorkloadInfo] = {info.name: info for info in _REGISTRY}


def list_workloads() -> list[WorkloadInfo]:
    """All workloads, in a stable order (models first, then synthetic kernels)."""
    return list(_REGISTRY)


def get_workload_info(name: str) -> WorkloadInfo:
    """The workload called ``name``, or a one-line :class:`OrionError` listing the known ones."""
    info = _BY_NAME.get(name) if isinstance(name, str) else None
    if info is None:
        close = difflib.get_close_matches(name, _BY_NAME, n=1) if isinstance(name, str) else []
        raise OrionError(
            f"unknown workload {short_repr(name)}; known workloads: {', '.join(_BY_NAME)}",
            hint=f"did you mean {close[0]!r}?" if close else None,
        )
    return info
