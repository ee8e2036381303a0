"""The preload library on a real GPU: every kernel caught once, outputs unchanged.

For PyTorch (cuDNN/cuBLAS) inference and training, BERT (cuBLASLt), a torch.compile'd function
(Triton) and a CuPy kernel, the launches the library counts during one step equal the kernels
torch.profiler sees in that step, and the step's output is bit-identical with and without the
library (under pass-through and under the gating `orion` policy as the HP client, with its
completions estimated, the default, and written by the GPU).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

from scheduler_core import SchedulerRun, SchedulerSettings

PROBE = Path(__file__).resolve().parent / "gpu_probe.py"
CASES = ["resnet50-infer", "resnet50-train", "bert-infer", "compiled", "cupy"]
# Training uses non-deterministic cuDNN backward kernels: compare counts, not outputs.
DETERMINISTIC = {"resnet50-infer", "bert-infer", "compiled", "cupy"}

pytestmark = pytest.mark.gpu


def _sm_count() -> int:
    import torch

    return torch.cuda.get_device_properties(0).multi_processor_count


def _concurrently(*calls: Callable[[], dict]) -> list[dict]:
    """The calls' results, in order, the calls made at the same time: each starts a probe process
    of its own (about 25 s of start-up, import and warm-up apiece), and none of what the tests
    compare (launch counts, output hashes; cuDNN's autotuning is off) depends on the GPU being
    shared meanwhile."""
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
        return [future.result() for future in futures]


def _probe(case: str, tmp_path: Path, env: dict[str, str], tag: str) -> dict:
    result = tmp_path / f"{case}-{tag}.json"
    done = subprocess.run(
        [sys.executable, str(PROBE), case, str(result)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(result.read_text())


# A one-kernel profile that matches nothing: every real launch is then looked up by name and
# reported as unknown, with its name, which proves names resolve on this driver.
DECOY_PROFILE = pd.DataFrame(
    [
        {
            "kernel_name": "orion_decoy_kernel",
            "demangled_name": "orion_decoy_kernel",
            **dict.fromkeys(("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"), 1),
            "sm_needed": 1,
            "kernel_class": "memory",
            "duration_ns": 1000.0,
        }
    ]
)


def _run_program(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _with_library(
    case: str,
    tmp_path: Path,
    policy: str,
    role: str,
    hp_completion: str = "estimate",
    be_gate: str = "gpu",
    be_graph_gate: str = "inside",
) -> dict:
    settings = SchedulerSettings(
        policy=policy,
        sm_count=_sm_count(),
        queue_limit_ns=100_000,
        unknown_duration_ns=100_000,
        hp_completion=hp_completion,
        be_gate=be_gate,
        be_graph_gate=be_graph_gate,
    )
    with SchedulerRun(settings) as run:
        index = run.add_client("probe", role, DECOY_PROFILE)
        run.publish()
        tag = f"{policy}-{role}-{hp_completion}-{be_gate}-{be_graph_gate}"
        result = _probe(case, tmp_path, run.client_environment(index), tag)
        result["stats"] = run.stats()["probe"]
    return result


@pytest.mark.parametrize("case", CASES)
def test_every_kernel_is_caught_once_and_outputs_are_unchanged(case: str, tmp_path: Path) -> None:
    plain, passthrough, gated_hp, gated_hp_write = _concurrently(
        lambda: _probe(case, tmp_path, dict(os.environ), "plain"),
        lambda: _with_library(case, tmp_path, "passthrough", "be"),
        lambda: _with_library(case, tmp_path, "orion", "hp"),
        lambda: _with_library(case, tmp_path, "orion", "hp", "gpu-write"),
    )
    assert plain["library_launches"] is None
    for result in (passthrough, gated_hp, gated_hp_write):
        assert result["profiler_kernels"] > 0
        assert result["library_launches"] == result["profiler_kernels"], result
        if case in DETERMINISTIC:
            assert result["output_sha256"] == plain["output_sha256"]
    # Kernel names resolve (cuFuncGetName or cuKernelGetName): identity by name works.
    names = gated_hp["stats"]["unknown_kernels"]
    assert names and not any(name.startswith("<unnamed>") for name in names), names
    # Under orion the HP client's launches are tracked: by default with estimated finish times,
    # on request with GPU-written completions (the driver accepted the registration and writes).
    assert gated_hp["stats"]["completion_mode"] == "estimate"
    assert gated_hp_write["stats"]["completion_mode"] == "gpu-write"
    for result in (gated_hp, gated_hp_write):
        assert result["stats"]["tracked_launches"] > 0


@pytest.mark.parametrize("case", CASES)
def test_be_work_behind_gpu_side_gates_runs_once_with_unchanged_outputs(
    case: str, tmp_path: Path
) -> None:
    # A BE client under orion with its launches held on the GPU (be_gate "gpu"): a stream wait
    # on its gate word goes before its work (an unprofiled kernel counts as 100 us, the queue
    # limit, until it is learned online: a wait before each such launch, then one per queue limit
    # of learned work), every launch returns at once behind a wait and reaches the GPU once,
    # nothing blocks, and the outputs are those without the library (training: the same launch
    # count, as its cuDNN backward kernels are not deterministic).
    plain, gated = _concurrently(
        lambda: _probe(case, tmp_path, dict(os.environ), "plain"),
        lambda: _with_library(case, tmp_path, "orion", "be", be_gate="gpu"),
    )
    stats = gated["stats"]
    assert gated["library_launches"] == gated["profiler_kernels"] > 0
    if case in DETERMINISTIC:
        assert gated["output_sha256"] == plain["output_sha256"]
    else:
        assert gated["profiler_kernels"] == plain["profiler_kernels"]
    gated_launches = stats["launches"] - stats["capture_launches"]
    assert 0 < stats["gate_waits"] <= gated_launches
    assert stats["reasons"]["gpu_gate"] == gated_launches
    assert stats["blocked_launches"] == 0
    assert stats["completion_mode"] == "gpu-write"


def test_a_captured_graph_is_identified_and_its_completions_are_written(tmp_path: Path) -> None:
    # ResNet-50 inference replayed as a CUDA graph under the orion policy as an HP client that
    # estimates its kernels' ends: the instantiation is seen and the graph's kernel nodes read
    # (graphs_identified), each replay is one graph launch whose completion the GPU writes, and
    # the outputs are those of the same graph without the library.
    plain, gated = _concurrently(
        lambda: _probe("resnet50-graph", tmp_path, dict(os.environ), "plain"),
        lambda: _with_library("resnet50-graph", tmp_path, "orion", "hp"),
    )
    stats = gated["stats"]
    assert gated["library_launches"] == 1  # the step is one graph launch
    assert gated["profiler_kernels"] > 100  # ... of ResNet-50's kernels
    assert gated["output_sha256"] == plain["output_sha256"]
    assert stats["graphs_identified"] == 1
    assert stats["graph_launches"] >= 7  # 5 warm-up steps, the profiled one, the checked one
    assert stats["graph_gpu_writes"] == stats["graph_launches"]
    assert stats["unknown_graph_launches"] == stats["graph_launches"]  # the decoy profile
    assert stats["completion_mode"] == "estimate"  # its kernels: the HP default


@pytest.mark.parametrize("case", ["resnet50-graph", "compiled-graph"])
def test_a_be_graph_is_gated_inside_with_unchanged_outputs(case: str, tmp_path: Path) -> None:
    # A BE client replaying a CUDA graph under orion with the GPU gate: at instantiation the
    # graph takes wait nodes, at least one and at most one per kernel node (a wait before each
    # queue limit of the kernels' learned work, before every kernel still unknown), nothing is
    # left ungated, every replay runs (the keeper opens the gate, HP being idle) and the outputs
    # are those of the same graph without the library. With be_graph_gate "whole" the graph is
    # left as the program made it (no wait node) and still runs, unchanged.
    plain, gated, whole = _concurrently(
        lambda: _probe(case, tmp_path, dict(os.environ), "plain"),
        lambda: _with_library(case, tmp_path, "orion", "be", be_gate="gpu"),
        lambda: _with_library(case, tmp_path, "orion", "be", be_gate="gpu", be_graph_gate="whole"),
    )
    assert whole["output_sha256"] == plain["output_sha256"]
    assert whole["stats"]["graphs_gated"] == whole["stats"]["graph_gate_waits"] == 0
    assert whole["stats"]["graphs_ungated"] == 0 and whole["stats"]["graph_launches"] >= 1
    stats = gated["stats"]
    assert gated["output_sha256"] == plain["output_sha256"]
    assert stats["graphs_ungated"] == 0
    assert stats["graphs_gated"] >= 1
    if case == "resnet50-graph":  # one graph of more than 100 kernels, as the profiler counts them
        assert stats["graphs_gated"] == 1
        assert 1 <= stats["graph_gate_waits"] <= gated["profiler_kernels"]
        assert gated["profiler_kernels"] > 100
    assert stats["graph_launches"] >= 1


@pytest.mark.parametrize("case", ["resnet50-graph", "compiled-graph"])
def test_a_be_graph_split_into_segments_gives_unchanged_outputs(case: str, tmp_path: Path) -> None:
    # The time-sliced default for BE graphs: each graph split into pieces (a kernel node each,
    # the decoy profile knowing none), launched one after another through the gate. Every piece
    # runs once and the outputs are those of the program's own graph without the library.
    plain, split = _concurrently(
        lambda: _probe(case, tmp_path, dict(os.environ), "plain"),
        lambda: _with_library(case, tmp_path, "orion", "be", be_graph_gate="segments"),
    )
    stats = split["stats"]
    assert split["output_sha256"] == plain["output_sha256"]
    assert stats["graphs_ungated"] == 0, stats["ungated_graph_why"]
    assert stats["graphs_segmented"] >= 1
    if case == "resnet50-graph":
        # One graph of 229 kernels. The warm-up ran them eagerly first, so most are learned by
        # the time the graph is instantiated and share pieces of up to the 100 us queue limit;
        # each replay is one launch per piece.
        assert 1 < stats["graph_segments"] <= split["profiler_kernels"]
        assert split["library_launches"] == stats["graph_segments"]
    assert stats["graph_launches"] >= 1


JAX_DETERMINISTIC = {
    "XLA_PYTHON_CLIENT_PREALLOCATE": "false",  # several probes on one GPU
    # XLA picks GEMM algorithms by timing them: with probes running side by side the timings, so
    # the picks and the low bits of the results, differ between processes. Fixed picks and
    # deterministic ops make two runs comparable bit for bit.
    "XLA_FLAGS": "--xla_gpu_autotune_level=0 --xla_gpu_deterministic_ops=true",
}


def test_a_jax_training_step_split_into_segments_gives_unchanged_results(tmp_path: Path) -> None:
    # XLA replays a jitted step as CUDA graphs: under orion as BE they are split into pieces, and
    # 30 training steps end with the same parameters, bit for bit, as without the library.
    pytest.importorskip("jax")
    probe = Path(__file__).resolve().parent / "gpu_jax_probe.py"

    def run(env: dict[str, str], tag: str) -> dict:
        result = tmp_path / f"jax-{tag}.json"
        done = subprocess.run(
            [sys.executable, str(probe), str(result)],
            env={**env, **JAX_DETERMINISTIC},
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(result.read_text())

    def split() -> dict:
        settings = SchedulerSettings(
            policy="orion", sm_count=_sm_count(), queue_limit_ns=100_000,
            unknown_duration_ns=100_000, be_gate="gpu", be_graph_gate="segments",
        )  # fmt: skip
        with SchedulerRun(settings) as scheduler:
            index = scheduler.add_client("probe", "be", DECOY_PROFILE)
            scheduler.publish()
            result = run(scheduler.client_environment(index), "split")
            result["stats"] = scheduler.stats()["probe"]
        return result

    plain, again, gated = _concurrently(
        lambda: run(dict(os.environ), "plain"), lambda: run(dict(os.environ), "again"), split
    )
    assert again["output_sha256"] == plain["output_sha256"]  # the comparison means something
    stats = gated["stats"]
    assert gated["output_sha256"] == plain["output_sha256"]
    assert stats["graphs_ungated"] == 0, stats["ungated_graph_why"]
    assert stats["graphs_segmented"] >= 1
    assert stats["graph_segments"] > stats["graphs_segmented"]


def test_a_torch_compile_reduce_overhead_graph_is_identified_and_written(tmp_path: Path) -> None:
    # Held-out check of graph identity: inductor's own graphs (torch.compile
    # mode="reduce-overhead"), instantiated by PyTorch, are read at instantiation like orion's
    # workload graphs, every replay's completion is written by the GPU, outputs are unchanged.
    plain, gated = _concurrently(
        lambda: _probe("compiled-graph", tmp_path, dict(os.environ), "plain"),
        lambda: _with_library("compiled-graph", tmp_path, "orion", "hp"),
    )
    stats = gated["stats"]
    assert gated["output_sha256"] == plain["output_sha256"]
    assert stats["graphs_identified"] >= 1
    assert stats["graph_launches"] >= 1
    assert stats["graph_gpu_writes"] == stats["graph_launches"]
    assert stats["unknown_graph_launches"] == stats["graph_launches"]  # the decoy profile


def test_moving_hp_legacy_stream_launches_keeps_the_programs_ordering(tmp_path: Path) -> None:
    # An HP client's legacy-stream kernels run on orion's private high-priority stream; a kernel
    # the program then launches on a blocking stream of its own must still see their results.
    pytest.importorskip("cupy")
    settings = SchedulerSettings(
        policy="priority", sm_count=_sm_count(), queue_limit_ns=100_000, unknown_duration_ns=100_000
    )
    program = Path(__file__).resolve().parent / "gpu_legacy_order.py"
    with SchedulerRun(settings) as run:
        index = run.add_client("hp", "hp")
        run.publish()
        done = _run_program([str(program)], run.client_environment(index))
        stats = run.stats()["hp"]
    assert stats["redirected_launches"] >= 5  # the slow kernels were moved
    assert done.stdout.split()[-1] == "0", done.stdout  # ... and every read saw their writes


@pytest.mark.parametrize("allocator", ["default", "expandable_segments:True"])
def test_a_memory_limit_is_what_torch_sees_and_gets(tmp_path: Path, allocator: str) -> None:
    # 4 GiB for the client: torch reports a 4 GiB device, a 5 GiB tensor raises torch's usual
    # out-of-memory error (also with expandable segments, which allocate through cuMemCreate),
    # and a 1 GiB tensor still works afterwards.
    gib = 1 << 30
    program = Path(__file__).resolve().parent / "gpu_memory_probe.py"
    settings = SchedulerSettings(
        policy="orion", sm_count=_sm_count(), queue_limit_ns=100_000, unknown_duration_ns=100_000
    )
    with SchedulerRun(settings) as run:
        index = run.add_client("limited", "be", memory_limit=4 * gib)
        run.publish()
        env = {**run.client_environment(index), "PYTORCH_CUDA_ALLOC_CONF": allocator}
        if allocator == "default":
            env.pop("PYTORCH_CUDA_ALLOC_CONF")
        done = _run_program([str(program), str(5 * gib), str(gib)], env)
        stats = run.stats()["limited"]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["total"] == 4 * gib
    assert seen["free"] <= 4 * gib
    assert seen["big_refused"] and seen["small_ok"]
    assert stats["allocations_refused"] >= 1
    assert gib <= stats["memory_peak"] <= 4 * gib


def test_a_limited_client_sees_its_limit_everywhere_and_every_route_is_refused(
    tmp_path: Path,
) -> None:
    # 4 GiB for the client: torch, the driver and NVML inside the client all report a 4 GiB
    # device with the same free memory, and a CUDA array or a graph memory node of 5 GiB is
    # refused as an allocation is (CUDA_ERROR_OUT_OF_MEMORY), while 1 GiB of each works.
    pytest.importorskip("pynvml")
    gib = 1 << 30
    out_of_memory = 2  # CUDA_ERROR_OUT_OF_MEMORY
    program = Path(__file__).resolve().parent / "gpu_memory_routes.py"
    settings = SchedulerSettings(
        policy="orion", sm_count=_sm_count(), queue_limit_ns=100_000, unknown_duration_ns=100_000
    )
    with SchedulerRun(settings) as run:
        index = run.add_client("limited", "be", memory_limit=4 * gib)
        run.publish()
        done = _run_program([str(program), str(5 * gib), str(gib)], run.client_environment(index))
        stats = run.stats()["limited"]
    seen = json.loads(done.stdout.splitlines()[-1])
    for view in ("torch", "driver", "nvml"):
        assert seen[view][1] == 4 * gib, (view, seen)
    # Read back to back with nothing allocated between: one ledger, one answer.
    assert seen["torch"][0] == seen["driver"][0] == seen["nvml"][0], seen
    assert seen["nvml_used"] == 4 * gib - seen["nvml"][0]
    assert seen["array_big"] == out_of_memory and seen["array_small"] == 0, seen
    assert seen["graph_big"] == out_of_memory and seen["graph_small"] == 0, seen
    assert seen["graph_small_launch"] == 0, seen
    assert stats["allocations_refused"] >= 2


def test_a_limited_clients_free_memory_leaves_out_its_measured_cuda_context(
    tmp_path: Path,
) -> None:
    # The context is measured (> 0, from NVML) and counted from the client's first call: with a
    # 4 GiB limit torch sees 4 GiB less the context free, a tensor that fits 4 GiB only without
    # the context raises torch's usual out-of-memory error, and with a 1 GiB tensor alive the
    # free figure is the limit less the context less that tensor (NVML inside agrees).
    from orion_common.context_footprint import context_footprint

    gib = 1 << 30
    footprint = context_footprint()
    assert footprint.bytes > 0, footprint.how
    assert "NVML" in footprint.how
    program = Path(__file__).resolve().parent / "gpu_context_probe.py"
    settings = SchedulerSettings(
        policy="orion", sm_count=_sm_count(), queue_limit_ns=100_000, unknown_duration_ns=100_000
    )
    with SchedulerRun(settings) as run:
        context = run.settings.context_bytes
        assert context is not None and context > 0
        # One context measured twice: the same figure within a driver's rounding (2 MiB pages).
        assert abs(context - footprint.bytes) <= 8 << 20
        index = run.add_client("limited", "be", memory_limit=4 * gib)
        run.publish()
        ask = 4 * gib - context // 2  # fits the limit, not beside the context
        done = _run_program([str(program), str(ask), str(gib)], run.client_environment(index))
        stats = run.stats()["limited"]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["total"] == 4 * gib
    assert seen["free0"] == 4 * gib - context
    assert seen["ask_refused"]
    assert seen["free1"] == 4 * gib - context - gib
    if seen["nvml_total"] is not None:
        assert (seen["nvml_total"], seen["nvml_free"]) == (4 * gib, seen["free1"])
    assert stats["allocations_refused"] >= 1
    assert stats["memory_peak"] >= context + gib
