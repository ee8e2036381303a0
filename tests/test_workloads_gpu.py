"""Every workload on CUDA, and the synthetic kernels' numbers and launch shapes.

Steps run under ``torch.cuda.set_sync_debug_mode("error")``: a step must only enqueue work, since
a co-location client times it and overlaps it with other jobs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from workloads import Workload, WorkloadSpec, build_workload, get_workload_info, list_workloads
from workloads._kernels import FMA_A, FMA_B
from workloads.synthetic import UPDATE_ALPHA

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu


def _marks(name: str) -> list[pytest.MarkDecorator]:
    return [pytest.mark.torchvision] if "torchvision" in get_workload_info(name).requires else []


CASES = [
    pytest.param(info.name, mode, "fp32", marks=_marks(info.name), id=f"{info.name}-{mode}-fp32")
    for info in list_workloads()
    for mode in ("infer", "train")
] + [
    pytest.param(name, mode, "bf16", marks=_marks(name), id=f"{name}-{mode}-bf16")
    for name in ("resnet50", "bert")
    for mode in ("infer", "train")
]


def _build(name: str, mode: str = "infer", dtype: str = "fp32", **options: int) -> Workload:
    if "cupy" in get_workload_info(name).requires:
        pytest.importorskip("cupy")
    spec = WorkloadSpec(name, mode=mode, batch_size=2, dtype=dtype, device="cuda", options=options)
    return build_workload(spec)


@pytest.mark.filterwarnings("ignore:Synchronization debug mode is a prototype")
@pytest.mark.parametrize(("name", "mode", "dtype"), CASES)
def test_every_workload_steps_on_cuda(name: str, mode: str, dtype: str) -> None:
    wl = _build(name, mode, dtype)
    assert wl.device.type == "cuda" and wl.samples_per_step == 2
    wl.warmup(1)
    torch.cuda.set_sync_debug_mode("error")
    try:
        outputs = [wl.step() for _ in range(3)]
    finally:
        torch.cuda.set_sync_debug_mode(0)
    wl.synchronize()
    for out in outputs:
        assert out.is_cuda
        assert torch.isfinite(out.float()).all()


def test_synchronize_waits_for_the_stream_the_steps_ran_on() -> None:
    wl = _build("synthetic-compute", iterations=1 << 22)  # tens of milliseconds per launch
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        wl.step()
    assert not side.query()  # enqueued on the current (side) stream, not waited for
    assert torch.cuda.default_stream().query()
    wl.synchronize()  # outside the stream context: still waits for the side stream
    assert side.query()


def test_run_profiled_step_has_an_idle_gpu_at_both_hooks() -> None:
    wl = _build("bert", seq_len=32)
    seen: list[bool] = []
    wl.step()  # pending work the hook must not see
    wl.run_profiled_step(
        lambda: seen.append(torch.cuda.current_stream().query()),
        lambda: seen.append(torch.cuda.current_stream().query()),
    )
    assert seen == [True, True]


def test_model_builds_are_reproducible() -> None:
    first = _build("bert", seq_len=32).step()
    second = _build("bert", seq_len=32).step()
    assert torch.equal(first, second)


# --- synthetic kernels: numbers and launch shapes -------------------------------------------------


def _chains(values: torch.Tensor) -> torch.Tensor:
    """The input buffer as (chain, value): chain k of every thread is one contiguous quarter."""
    return values.cpu().reshape(4, -1)


def _compute_reference(inputs: torch.Tensor, iterations: int, dtype: str) -> torch.Tensor:
    x = _chains(inputs)
    if dtype == "fp32":
        x = x.double()
        for _ in range(iterations):
            x = x * FMA_A + FMA_B
        return ((x[0] + x[1]) + x[2]) + x[3]
    # bf16: each FMA and add rounds once; fp32 holds these exact sums, so rounding
    # them to bf16 reproduces the GPU's single rounding.
    for _ in range(iterations):
        x = (x.float() * FMA_A + FMA_B).bfloat16()

    def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a.float() + b.float()).bfloat16()

    return add(add(add(x[0], x[1]), x[2]), x[3])


def _axpy_reference(x: torch.Tensor, y: torch.Tensor, dtype: str) -> torch.Tensor:
    if dtype == "fp32":
        return x.double() * UPDATE_ALPHA + y.double()
    return (x.float() * UPDATE_ALPHA + y.float()).bfloat16()


def _assert_matches(actual: torch.Tensor, expected: torch.Tensor, dtype: str) -> None:
    actual = actual.cpu()
    assert torch.isfinite(actual.float()).all()  # NaN-initialised: every element was written
    if dtype == "fp32":
        torch.testing.assert_close(actual.double(), expected, rtol=1e-5, atol=1e-6)
    else:
        assert torch.equal(actual, expected)


@pytest.mark.parametrize("mode", ["infer", "train"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_synthetic_compute_numbers(dtype: str, mode: str) -> None:
    wl = _build("synthetic-compute", mode, dtype, grid=8, block=128, iterations=64)
    inputs = wl.inputs  # type: ignore[attr-defined]
    per_thread = 1 if dtype == "fp32" else 2
    assert wl.output.numel() == 8 * 128 * per_thread  # type: ignore[attr-defined]
    assert inputs.numel() == 4 * wl.output.numel()  # type: ignore[attr-defined]
    out = wl.step()
    wl.synchronize()
    expected = _compute_reference(inputs, 64, dtype)
    if mode == "train":
        expected = _axpy_reference(_chains(inputs)[0], expected, dtype)
    _assert_matches(out, expected, dtype)


@pytest.mark.parametrize("mode", ["infer", "train"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_synthetic_memory_numbers(dtype: str, mode: str) -> None:
    wl = _build("synthetic-memory", mode, dtype, grid=4, block=64, mib=1)
    source = wl.inputs  # type: ignore[attr-defined]
    assert source.numel() * source.element_size() == 1 << 20
    out = wl.step()
    wl.synchronize()
    expected = source.cpu().double() if dtype == "fp32" else source.cpu()
    if mode == "train":
        expected = _axpy_reference(source.cpu(), source.cpu(), dtype)
    _assert_matches(out, expected, dtype)


def _kernel_launches(wl: Workload, tmp_path: Path) -> list[dict[str, Any]]:
    """Kernel records (name, grid, block) of one step, from a torch profiler (CUPTI) trace."""
    wl.warmup(1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        wl.step()
        wl.synchronize()
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    events = json.loads(trace.read_text())["traceEvents"]
    return [e for e in events if e.get("cat") == "kernel" and e["name"].startswith("orion_")]


@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events")
@pytest.mark.parametrize(
    ("name", "mode", "options", "kernels"),
    [
        (
            "synthetic-compute",
            "infer",
            {"grid": 20, "block": 96, "iterations": 16},
            ["orion_fma_chain_f32"] * 2,
        ),
        (
            "synthetic-memory",
            "train",
            {"grid": 7, "block": 512, "mib": 4},
            ["orion_copy_f32", "orion_copy_f32", "orion_axpy_f32"],
        ),
    ],
)
def test_synthetic_launches_the_requested_grid(
    name: str, mode: str, options: dict[str, int], kernels: list[str], tmp_path: Path
) -> None:
    wl = _build(name, mode, **options)
    launches = _kernel_launches(wl, tmp_path)
    assert [e["name"] for e in launches] == kernels  # batch size 2: two launches per step
    for event in launches:
        assert event["args"]["grid"] == [options["grid"], 1, 1]
        assert event["args"]["block"] == [options["block"], 1, 1]


def test_synthetic_default_grid_is_one_block_per_sm() -> None:
    wl = _build("synthetic-memory", mib=1)
    assert wl.grid == torch.cuda.get_device_properties(0).multi_processor_count  # type: ignore[attr-defined]
    assert wl.block == 256  # type: ignore[attr-defined]


GRAPH_CASES = [
    pytest.param(info.name, marks=_marks(info.name), id=info.name)
    for info in list_workloads()
    if info.graph_capturable
]


@pytest.mark.filterwarnings("ignore:Synchronization debug mode is a prototype")
@pytest.mark.parametrize("name", GRAPH_CASES)
def test_a_graph_replay_gives_the_eager_outputs(name: str) -> None:
    from workloads.graph import GraphedInference

    spec = WorkloadSpec(name, mode="infer", batch_size=2, device="cuda")
    eager = build_workload(spec)
    graphed = build_workload(WorkloadSpec(name, mode="infer", batch_size=2, cuda_graph=True))
    assert isinstance(graphed, GraphedInference)
    expected = eager.step().clone()
    eager.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        outputs = []
        for _ in range(3):
            outputs.append(graphed.step().clone())  # the next replay overwrites the output
    finally:
        torch.cuda.set_sync_debug_mode(0)
    graphed.synchronize()
    for out in outputs:
        assert torch.equal(out, expected), (out - expected).abs().max().item()
