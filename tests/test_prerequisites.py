"""One module owns the prerequisite checks and their hints (orion doctor, profile, colocate)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from orion_common import prerequisites, sysinfo
from orion_common.errors import OrionError
from orion_common.prerequisites import (
    COLOCATE,
    MPS_HINT,
    NCU_HINT,
    PROFILE,
    Check,
    blockers,
    require,
)
from scheduler_core.library import native_checks


def test_missing_ncu_says_where_it_looked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ORION_NCU", str(tmp_path / "no-ncu"))
    check = prerequisites.check_ncu()
    assert (check.ok, check.value, check.needed_for, check.hint) == (
        False,
        "not found",
        (PROFILE,),
        NCU_HINT,
    )
    assert check.problem == (
        f"Nsight Compute (ncu) not found: ORION_NCU={tmp_path / 'no-ncu'} is not an executable file"
    )
    with pytest.raises(OrionError) as info:
        require(check)
    assert (info.value.message, info.value.hint) == (check.problem, NCU_HINT)


def test_found_ncu_is_handed_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORION_NCU", "/bin/true")
    monkeypatch.setattr(sysinfo, "ncu_version", lambda ncu: "2025.3.1.0")
    check = require(prerequisites.check_ncu())
    assert (check.ok, check.found, check.value) == (
        True,
        Path("/bin/true"),
        "/bin/true (2025.3.1.0)",
    )


@pytest.mark.parametrize(("allowed", "needed"), [(True, ()), (None, ()), (False, (PROFILE,))])
def test_counter_permission(
    monkeypatch: pytest.MonkeyPatch, allowed: bool | None, needed: tuple[str, ...]
) -> None:
    monkeypatch.setattr(sysinfo, "profiling_counters_allowed", lambda: (allowed, "why"))
    check = prerequisites.check_counters()
    assert (check.ok, check.value, check.needed_for) == (allowed, "why", needed)
    if allowed is False:
        assert check.hint == prerequisites.COUNTER_PERMISSION_HINT
        with pytest.raises(OrionError, match="may not read GPU performance counters: why"):
            require(check)
    else:
        assert require(check) is check


def test_mps_control(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sysinfo, "find_mps_control", lambda: None)
    missing = prerequisites.check_mps_control()
    assert (missing.ok, missing.needed_for, missing.hint) == (False, (COLOCATE,), MPS_HINT)
    monkeypatch.setattr(sysinfo, "find_mps_control", lambda: Path("/bin/true"))
    assert prerequisites.check_mps_control().found == Path("/bin/true")


def test_gpu_from_a_gathered_environment() -> None:
    assert prerequisites.check_gpu(1, environment={"gpu_name": "NVIDIA H200"}).ok
    none = prerequisites.check_gpu(1, environment={"gpu_name": None})
    assert (none.ok, none.problem) == (
        False,
        "no NVIDIA GPU 1 is visible (NVML and torch see none)",
    )
    cpu_torch = prerequisites.check_torch_build(
        {"torch_version": "2.9", "torch_cuda_version": None}
    )
    assert (cpu_torch.ok, cpu_torch.problem) == (False, "torch 2.9 is a CPU-only build")
    assert prerequisites.check_torch_build(
        {"torch_version": "2.9", "torch_cuda_version": "13.0"}
    ).ok


def test_blockers_name_failed_checks_per_command() -> None:
    checks = [
        Check("a", False, "", (PROFILE,)),
        Check("b", False, "", (PROFILE, COLOCATE)),
        Check("c", None, ""),
        Check("d", True, "", (COLOCATE,)),
    ]
    assert blockers(checks) == {PROFILE: ["a", "b"], COLOCATE: ["b"]}


def test_native_checks_report_a_missing_preload_library(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ORION_PRELOAD_LIBRARY", str(tmp_path / "missing.so"))
    library, _controller = native_checks()
    assert library.name == "preload library"
    assert library.ok is False
    assert library.problem == f"orion's preload library is missing: {tmp_path / 'missing.so'}"
    assert library.needed_for == (COLOCATE,)


def test_doctor_shows_every_check(monkeypatch: pytest.MonkeyPatch) -> None:
    import typer

    from orion_cli.doctor import doctor_command, run_checks

    names = [check.name for check in run_checks()]
    assert names[:2] == ["NVIDIA driver", "GPU"]
    # Ray last (optional): whether it is installed, and when it is, whether a cluster answers.
    ray_rows = names[names.index("Ray") :]
    assert ray_rows in (["Ray"], ["Ray", "Ray cluster"])
    names = names[: names.index("Ray")]
    assert names[-5:] == [
        "Nsight Compute (ncu)",
        "GPU performance counters",
        "MPS control daemon",
        "preload library",
        "controller module",
    ]
    app = typer.Typer()
    app.command("doctor")(doctor_command)
    app.command("other")(lambda: None)
    result = CliRunner().invoke(app, ["doctor"])
    assert "orion doctor" in result.output
    assert ("cannot run" in result.output) == (result.exit_code == 1)
