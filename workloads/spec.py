"""The description of one workload run: which job, in which mode, with what batch, dtype and device.

A spec is plain data (a frozen dataclass of str/int/dict) so that it can travel through
``jobs.json``, profile metadata and process boundaries, and validating it never imports torch:
the CLI checks a user's request before paying for a framework import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from orion_common.errors import OrionError
from workloads.registry import get_workload_info, short_repr

MODES: tuple[str, ...] = ("infer", "train")
DTYPES: tuple[str, ...] = ("fp32", "bf16")

# Devices orion can place a workload on; other torch device types have no stream to share.
_DEVICE_PATTERN = re.compile(r"cpu|cuda(:[0-9]+)?")


@dataclass(frozen=True)
class WorkloadSpec:
    """Which workload to build and how: the identity the profiler and co-location runs share.

    ``options`` holds the per-workload integer knobs (see ``WorkloadInfo.options``); anything not
    given takes its default, so two specs that differ only by spelling out a default build the
    same job.

    ``cuda_graph`` serves inference the way production servers do: the step is captured once as
    a CUDA graph and every request replays it (see :mod:`workloads.graph`). It changes how the
    GPU is fed (one launch per request instead of hundreds), so it is part of the identity.
    """

    name: str
    mode: str = "infer"
    batch_size: int = 1
    dtype: str = "fp32"
    device: str = "cuda"
    options: dict[str, int] = field(default_factory=dict)
    cuda_graph: bool = False

    def __post_init__(self) -> None:
        # A private copy: the caller mutating its dict later must not change a frozen spec.
        if isinstance(self.options, dict):
            object.__setattr__(self, "options", dict(self.options))

    def validate(self) -> None:
        """Raise :class:`OrionError` (one line) for anything a builder could not honour."""
        info = get_workload_info(self.name)
        if self.mode not in MODES:
            raise OrionError(
                f"unknown mode {short_repr(self.mode)}; allowed modes: {', '.join(MODES)}"
            )
        if self.dtype not in DTYPES:
            raise OrionError(
                f"unknown dtype {short_repr(self.dtype)}; allowed dtypes: {', '.join(DTYPES)}"
            )
        if not _is_int(self.batch_size) or self.batch_size < 1:
            raise OrionError(
                f"batch size must be an integer >= 1, got {short_repr(self.batch_size)}"
            )
        if not isinstance(self.device, str) or not _DEVICE_PATTERN.fullmatch(self.device):
            raise OrionError(
                f"invalid device {short_repr(self.device)}; expected 'cpu', 'cuda' or 'cuda:N'"
            )
        info.check_options(self.options)
        self._check_cuda_graph(info.graph_capture)

    def _check_cuda_graph(self, not_capturable_because: str | None) -> None:
        if not isinstance(self.cuda_graph, bool):
            raise OrionError(f"cuda_graph must be true or false, got {short_repr(self.cuda_graph)}")
        if not self.cuda_graph:
            return
        if self.mode != "infer":
            raise OrionError(
                f"cuda_graph applies to inference only; {self.name!r} in mode {self.mode!r} "
                "runs eagerly (training steps allocate and update state a replay cannot)"
            )
        if not_capturable_because is not None:
            raise OrionError(
                f"workload {self.name!r} cannot be served as a CUDA graph: {not_capturable_because}"
            )
        if not self.device.startswith("cuda"):
            raise OrionError(f"cuda_graph needs a CUDA device, got {short_repr(self.device)}")

    @property
    def label(self) -> str:
        """``resnet50 infer bs4 fp32`` (with `` graph`` when replayed as a CUDA graph)."""
        text = f"{self.name} {self.mode} bs{self.batch_size} {self.dtype}"
        return text + " graph" if self.cuda_graph else text

    def resolved_options(self) -> dict[str, int]:
        """Every option of this workload, the given ones over the defaults (validates first)."""
        self.validate()
        resolved = {opt.name: opt.default for opt in get_workload_info(self.name).options}
        resolved.update(self.options)
        return resolved


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
