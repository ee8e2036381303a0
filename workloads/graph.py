"""Inference served as a CUDA graph: captured once after warm-up, replayed for every request.

This is how production inference servers feed the GPU (TensorRT, vLLM, torch.compile's
``reduce-overhead``): one graph launch per request instead of hundreds of kernel launches, so a
request's latency is set by the GPU, not by the host CPU that would otherwise enqueue each
kernel. orion's headline HP client runs this way.

The capture follows PyTorch's recipe: a few eager steps on a side stream (cuDNN and cuBLAS pick
and cache their algorithms and workspaces, the caching allocator grows), then one forward pass
captured with ``torch.cuda.graph`` into the workload's own input tensors, which become the
graph's static input buffers. Each request then copies its input into those buffers, replays
the graph on the caller's current stream and gets the static output tensor back, which the next
replay overwrites (read it before the next step, as a server would copy it out).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orion_common.errors import OrionError
from workloads.base import Workload

if TYPE_CHECKING:
    import torch

    from workloads.torch_model import TorchModelWorkload

# Eager steps on the capture stream before capturing: the first steps pick cuDNN algorithms and
# create library handles, which must not happen inside the capture.
STEPS_BEFORE_CAPTURE = 3

Capturer = Callable[["TorchModelWorkload"], tuple[Any, Any]]
"""Captures one forward pass of a workload: returns (graph, static output)."""


class GraphedInference(Workload):
    """An inference workload whose step copies the request in and replays a captured graph."""

    def __init__(
        self,
        eager: TorchModelWorkload,
        graph: Any,
        static_output: torch.Tensor,
        request_inputs: tuple[torch.Tensor, ...],
    ) -> None:
        super().__init__(eager.spec, eager.device)
        self.eager = eager
        self.graph = graph
        self.static_output = static_output
        self.static_inputs = eager.inputs
        self.request_inputs = request_inputs

    def _step(self, stream: torch.cuda.Stream | None) -> torch.Tensor:
        for static, fresh in zip(self.static_inputs, self.request_inputs, strict=True):
            static.copy_(fresh, non_blocking=True)
        self.graph.replay()
        return self.static_output


def capture_inference(workload: Workload, *, capturer: Capturer | None = None) -> GraphedInference:
    """Capture ``workload``'s inference step as a CUDA graph, or raise a one-line error why not.

    ``capturer`` is the capture itself (default: :func:`capture_with_torch`); it is a parameter
    so that the error handling around it can be tested without a GPU.
    """
    from workloads.torch_model import TorchModelWorkload

    spec = workload.spec
    if not isinstance(workload, TorchModelWorkload) or spec.mode != "infer":
        raise OrionError(
            f"workload {spec.name!r} ({spec.mode}) cannot be served as a CUDA graph: only the "
            "inference step of a torch model is captured"
        )
    if workload.device.type != "cuda":
        raise OrionError(
            f"workload {spec.name!r} cannot be served as a CUDA graph on device "
            f"{workload.device}: CUDA graphs need a CUDA device"
        )
    # The requests' own inputs: copies of the build-time inputs (same values, so a graph run
    # and an eager run of the same workload give the same outputs), copied into the static
    # buffers at every step the way a server copies a request's tensors in.
    request_inputs = tuple(tensor.clone() for tensor in workload.inputs)
    try:
        graph, static_output = (capturer or capture_with_torch)(workload)
    except OrionError:
        raise
    except Exception as exc:
        raise OrionError(
            f"workload {spec.name!r} cannot be captured as a CUDA graph: {_one_line(exc)}",
            hint="serve it eagerly (cuda_graph: false)",
        ) from None
    return GraphedInference(workload, graph, static_output, request_inputs)


def capture_with_torch(workload: TorchModelWorkload) -> tuple[Any, Any]:
    """Warm up on a side stream, then capture one forward pass (PyTorch's documented recipe)."""
    import torch

    current = torch.cuda.current_stream(workload.device)
    side = torch.cuda.Stream(device=workload.device)
    side.wait_stream(current)
    with torch.cuda.stream(side):
        for _ in range(STEPS_BEFORE_CAPTURE):
            workload.forward()
    current.wait_stream(side)
    torch.cuda.synchronize(workload.device)
    graph = torch.cuda.CUDAGraph()
    # thread_local: other threads of the process (a client's command reader, say) may use the
    # CUDA runtime while this thread captures without invalidating the capture.
    # Captured on a stream of the current device, which resolve_device made the workload's.
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        static_output = workload.forward()
    torch.cuda.synchronize(workload.device)
    return graph, static_output


def _one_line(exc: BaseException) -> str:
    """The exception's first non-empty line, short enough for a one-line error."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
