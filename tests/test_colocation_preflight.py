"""Preflight's memory-limit checks: a limit above the GPU's memory is refused before anything
starts, limits that only add up to more than it are a warning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from colocation.config import JobsConfigError, parse_jobs
from colocation.preflight import RunPlan, prepare_run
from orion_common import sysinfo

GPU_MIB = 81559  # an H100 80GB HBM3, as NVML reports it
GPU = "GPU 0 (NVIDIA H100 80GB HBM3)"


@pytest.fixture(autouse=True)
def machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """CPU clients, no machine-wide MPS daemon, and a GPU of known memory."""
    monkeypatch.setenv("ORION_CLIENT_DEVICE", "cpu")
    monkeypatch.setenv("ORION_PROFILE_DIR", str(tmp_path / "profiles"))
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "no-mps"))
    monkeypatch.setattr(sysinfo, "find_mps_control", lambda: Path("/bin/true"))
    gpu = {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_memory_mib": GPU_MIB, "sm_count": None}
    monkeypatch.setattr(sysinfo, "software_summary", lambda gpu_index=0: dict(gpu))


def plan(tmp_path: Path, *limits: Any, policy: str = "timeslice") -> RunPlan:
    clients = [
        {
            "name": f"c{i}",
            "workload": "bert",
            "mode": "train",
            "batch_size": 1,
            "options": {"seq_len": 8},
            **({} if limit is None else {"memory_limit": limit}),
        }
        for i, limit in enumerate(limits)
    ]
    data = {"run": {"policy": policy, "duration_s": 1}, "clients": clients}
    return prepare_run(parse_jobs(data, tmp_path))


def test_limits_that_fit_the_gpu_pass_without_a_warning(tmp_path: Path) -> None:
    assert plan(tmp_path, "40GiB", "39GiB", None).warnings == ()
    assert plan(tmp_path, f"{GPU_MIB}MiB").warnings == ()  # the whole GPU is still a limit


def test_a_limit_above_the_gpu_memory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(JobsConfigError) as info:
        plan(tmp_path, "1GiB", "100GiB", None, "80GiB")
    assert info.value.message.splitlines() == [
        f"memory limits for {GPU} (2 problems):",
        f"  clients[1].memory_limit: 100 GiB is more than the 79.65 GiB of {GPU}",
        f"  clients[3].memory_limit: 80 GiB is more than the 79.65 GiB of {GPU}",
    ]
    assert (
        info.value.hint
        == f'lower memory_limit to at most "{GPU_MIB}MiB" (the whole GPU) or remove it'
    )


def test_bytes_are_shown_where_rounding_hides_the_difference(tmp_path: Path) -> None:
    with pytest.raises(JobsConfigError) as info:
        plan(tmp_path, f"{GPU_MIB + 1}MiB")
    total = GPU_MIB * 2**20
    assert [str(p) for p in info.value.problems] == [
        f"clients[0].memory_limit: 79.65 GiB ({total + 2**20} bytes) is more than the "
        f"79.65 GiB ({total} bytes) of {GPU}"
    ]


@pytest.mark.parametrize("policy", ["timeslice", "mps"])
def test_limits_adding_up_to_more_than_the_gpu_are_a_warning(tmp_path: Path, policy: str) -> None:
    (warning,) = plan(tmp_path, "40GiB", "40GiB", None, policy=policy).warnings
    assert warning == (
        f"the clients' memory limits add up to 80 GiB, more than the 79.65 GiB of {GPU}: each "
        "limit caps one client but reserves nothing, so a client can run out of memory below "
        "its limit while the others hold theirs"
    )


def test_clients_that_run_one_after_another_may_add_up_to_more(tmp_path: Path) -> None:
    assert plan(tmp_path, "40GiB", "40GiB", policy="dedicated").warnings == ()


def test_nothing_is_checked_when_the_gpu_memory_is_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sysinfo, "software_summary", lambda gpu_index=0: {"gpu_name": None})
    assert plan(tmp_path, "1000GiB", "1000GiB").warnings == ()
