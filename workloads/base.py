"""The one step API that the profiler and the co-location clients drive every workload through.

Importing this module does not import torch (``from workloads import Workload`` must stay cheap);
the methods that need torch import it when they run, by which time a builder has imported it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orion_common.errors import OrionError

if TYPE_CHECKING:
    import torch

    from workloads.spec import WorkloadSpec


class Workload(ABC):
    """A built job: call :meth:`step` for one request (infer) or one iteration (train).

    ``step()`` only enqueues work on torch's current stream of the workload's device and returns
    without waiting, so a client can time it with its own events or overlap it with others.
    A workload should be stepped on one stream: the caching allocator ties the memory a step
    allocates to the stream it ran on.
    """

    def __init__(self, spec: WorkloadSpec, device: torch.device) -> None:
        self.spec = spec
        self.device = device
        self._is_cuda = device.type == "cuda"
        # Streams stepped on since the last synchronize, by handle: synchronize() waits on exactly
        # these, even if the caller switched streams between step() and synchronize().
        self._pending: dict[int, torch.cuda.Stream] = {}

    @property
    def samples_per_step(self) -> int:
        """Samples one step processes (the batch size; kernel launches for synthetic jobs)."""
        return self.spec.batch_size

    def step(self) -> Any:
        """Enqueue one step on the current stream; returns its output tensor, for checks only."""
        stream = None
        if self._is_cuda:
            import torch

            stream = torch.cuda.current_stream(self.device)
            self._pending[stream.cuda_stream] = stream
        return self._step(stream)

    def synchronize(self) -> None:
        """Wait for the work this workload enqueued; a no-op on CPU."""
        if not self._is_cuda:
            return
        pending, self._pending = self._pending, {}
        for stream in pending.values():
            stream.synchronize()

    def warmup(self, steps: int) -> None:
        """Run ``steps`` steps and wait for them (first-call costs, allocator growth, caches)."""
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
            raise OrionError(f"warm-up steps must be an integer >= 0, got {steps!r}")
        for _ in range(steps):
            self.step()
        self.synchronize()

    def run_profiled_step(self, before: Callable[[], None], after: Callable[[], None]) -> None:
        """Run exactly one step between ``before()`` and ``after()``, none of our work in flight.

        This is the one hook profilers use (e.g. ``cudaProfilerStart``/``Stop`` or NVTX ranges):
        synchronizing on both sides keeps earlier and later work out of the profiled range.
        """
        self.synchronize()
        before()
        self.step()
        self.synchronize()
        after()

    @abstractmethod
    def _step(self, stream: torch.cuda.Stream | None) -> Any:
        """Enqueue one step on ``stream`` (torch's current stream; None on CPU)."""
