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


def _with_library(
    case: str, tmp_path: Path, policy: str, role: str, hp_completion: str = "estimate"
) -> dict:
    settings = SchedulerSettings(
        policy=policy,
        sm_count=_sm_count(),
        queue_limit_ns=100_000,
        unknown_duration_ns=100_000,
        hp_completion=hp_completion,
    )
    with SchedulerRun(settings) as run:
        index = run.add_client("probe", role, DECOY_PROFILE)
        run.publish()
        tag = f"{policy}-{role}-{hp_completion}"
        result = _probe(case, tmp_path, run.client_environment(index), tag)
        result["stats"] = run.stats()["probe"]
    return result


@pytest.mark.parametrize("case", CASES)
def test_every_kernel_is_caught_once_and_outputs_are_unchanged(case: str, tmp_path: Path) -> None:
    plain = _probe(case, tmp_path, dict(os.environ), "plain")
    assert plain["library_launches"] is None
    passthrough = _with_library(case, tmp_path, "passthrough", "be")
    gated_hp = _with_library(case, tmp_path, "orion", "hp")
    gated_hp_write = _with_library(case, tmp_path, "orion", "hp", "gpu-write")
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
