"""Serving inference as a CUDA graph: which specs may ask for it, and the capture's error handling.

The capture itself needs a GPU (tests/test_workloads_gpu.py); here it is replaced by stand-ins
so that what a user sees when a capture fails, and what a replayed step does, are checked on CPU.
"""

from __future__ import annotations

import pytest

from orion_common.errors import OrionError
from workloads import WorkloadSpec, get_workload_info, list_workloads
from workloads.graph import GraphedInference, capture_inference

torch = pytest.importorskip("torch")

from workloads.torch_model import TorchModelWorkload  # noqa: E402  (needs torch)

CAPTURABLE = ["resnet50", "resnet101", "mobilenet_v2", "bert", "gpt2"]


def _tiny(device: str = "cuda", mode: str = "infer") -> TorchModelWorkload:
    """A CPU-built model labelled with ``device``: enough for everything but a real capture."""
    spec = WorkloadSpec("resnet50", mode=mode, batch_size=2, device="cpu")
    model = torch.nn.Linear(3, 2)
    images = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    return TorchModelWorkload(
        spec,
        torch.device(device),
        model,
        inputs=(images,),
        infer=lambda m, x: m(x),
        loss=lambda m, x: m(x).sum(),
    )


def test_the_models_can_be_served_as_graphs_and_the_synthetic_kernels_cannot() -> None:
    capturable = [info.name for info in list_workloads() if info.graph_capturable]
    assert capturable == CAPTURABLE
    for name in ("synthetic-compute", "synthetic-memory"):
        assert "only run eagerly" in (get_workload_info(name).graph_capture or "")


def test_a_graph_spec_is_inference_on_cuda_only() -> None:
    WorkloadSpec("bert", cuda_graph=True).validate()
    with pytest.raises(OrionError, match="cuda_graph applies to inference only"):
        WorkloadSpec("resnet50", mode="train", cuda_graph=True).validate()
    with pytest.raises(OrionError, match="cuda_graph needs a CUDA device, got 'cpu'"):
        WorkloadSpec("resnet50", device="cpu", cuda_graph=True).validate()
    with pytest.raises(OrionError, match="'synthetic-compute' cannot be served as a CUDA graph"):
        WorkloadSpec("synthetic-compute", cuda_graph=True).validate()
    with pytest.raises(OrionError, match="cuda_graph must be true or false, got 1"):
        WorkloadSpec("resnet50", cuda_graph=1).validate()  # type: ignore[arg-type]


def test_the_label_names_graph_serving() -> None:
    assert WorkloadSpec("resnet50", batch_size=4, cuda_graph=True).label == (
        "resnet50 infer bs4 fp32 graph"
    )
    assert WorkloadSpec("resnet50", batch_size=4).label == "resnet50 infer bs4 fp32"


def test_a_failed_capture_is_one_line_naming_the_reason() -> None:
    def failing(workload: TorchModelWorkload) -> tuple[object, object]:
        raise RuntimeError(
            "CUDA error: operation not permitted when stream is capturing\n"
            "CUDA kernel errors might be asynchronously reported at some other API call"
        )

    with pytest.raises(OrionError) as info:
        capture_inference(_tiny(), capturer=failing)
    assert info.value.message == (
        "workload 'resnet50' cannot be captured as a CUDA graph: RuntimeError: CUDA error: "
        "operation not permitted when stream is capturing"
    )
    assert "\n" not in info.value.message
    assert info.value.hint == "serve it eagerly (cuda_graph: false)"


def test_a_capture_error_without_text_still_names_its_type() -> None:
    def failing(workload: TorchModelWorkload) -> tuple[object, object]:
        raise MemoryError()

    with pytest.raises(OrionError, match=r"as a CUDA graph: MemoryError$"):
        capture_inference(_tiny(), capturer=failing)


def test_only_cuda_inference_of_a_model_is_captured() -> None:
    def never(workload: TorchModelWorkload) -> tuple[object, object]:
        raise AssertionError("must not be called")

    with pytest.raises(OrionError, match="CUDA graphs need a CUDA device"):
        capture_inference(_tiny(device="cpu"), capturer=never)
    with pytest.raises(OrionError, match=r"\(train\) cannot be served as a CUDA graph"):
        capture_inference(_tiny(mode="train"), capturer=never)


class _Graph:
    def __init__(self, on_replay: object) -> None:
        self.replays = 0
        self._on_replay = on_replay

    def replay(self) -> None:
        self.replays += 1
        self._on_replay()  # type: ignore[operator]


def test_a_replayed_step_copies_the_request_in_and_returns_the_static_output() -> None:
    eager = _tiny()
    expected = eager.forward()
    static_output = torch.zeros_like(expected)
    graph = _Graph(lambda: static_output.copy_(eager.forward()))
    graphed = capture_inference(eager, capturer=lambda wl: (graph, static_output))
    assert isinstance(graphed, GraphedInference)
    # Whatever the static buffer held, a step replays on the request's own input.
    graphed.static_inputs[0].fill_(-1.0)
    out = graphed._step(None)
    assert graph.replays == 1
    assert out is static_output
    assert torch.equal(out, expected)
    assert graphed.request_inputs[0] is not graphed.static_inputs[0]
