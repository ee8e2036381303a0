"""What orion needs on this machine, and whether it is there (``orion doctor``).

Each check says which commands need it, so the CLI can tell a user exactly what blocks
``orion profile`` or ``orion colocate``. Checks never raise: a missing piece is a row, not a crash.
"""

from __future__ import annotations

from dataclasses import dataclass

from orion_common import sysinfo

PROFILE = "profile"
COLOCATE = "colocate"
COMMANDS = (PROFILE, COLOCATE)


@dataclass(frozen=True)
class Check:
    """One row of the doctor's table.

    ``ok`` is True (present), False (missing or broken) or None (informational only).
    ``needed_for`` names the commands that cannot work without it.
    """

    name: str
    ok: bool | None
    value: str
    needed_for: tuple[str, ...] = ()
    hint: str | None = None


def _gpu_checks() -> list[Check]:
    gpu = sysinfo.gpu_facts(0)
    driver = sysinfo.driver_version()
    checks = [
        Check(
            "NVIDIA driver",
            driver is not None,
            driver or "not found (NVML does not answer)",
            (PROFILE, COLOCATE),
            None if driver else "install the NVIDIA driver; nvidia-smi must work",
        )
    ]
    if gpu is None:
        checks.append(Check("GPU", False, "none visible", (PROFILE, COLOCATE)))
        return checks
    detail = gpu.name
    if gpu.sm_count is not None:
        detail += f", {gpu.sm_count} SMs, compute capability {gpu.compute_capability}"
    if gpu.memory_total_mib is not None:
        detail += f", {gpu.memory_total_mib / 1024:.0f} GiB"
    checks.append(Check("GPU", True, detail, (PROFILE, COLOCATE)))
    cuda = sysinfo.cuda_driver_version()
    checks.append(Check("CUDA (driver supports)", cuda is not None, cuda or "unknown"))
    return checks


def _python_checks() -> list[Check]:
    versions = sysinfo.torch_versions()
    torch_version = versions["torch_version"]
    checks = [
        Check(
            "torch",
            torch_version is not None,
            torch_version or "not installed",
            (PROFILE, COLOCATE),
            None if torch_version else "pip install torch",
        )
    ]
    if torch_version is not None:
        cuda_ok = _torch_cuda_available()
        built_for = versions["torch_cuda_version"] or "CPU only"
        checks.append(
            Check(
                "torch CUDA",
                cuda_ok,
                f"built for CUDA {built_for}; " + ("GPU usable" if cuda_ok else "no usable GPU"),
                (PROFILE, COLOCATE),
                None if cuda_ok else "install a CUDA build of torch that matches the driver",
            )
        )
        checks.append(Check("cuDNN", None, versions["cudnn_version"] or "not available"))
    checks.append(
        Check(
            "torchvision",
            None,
            versions["torchvision_version"] or "not installed (resnet50, resnet101, mobilenet_v2)",
        )
    )
    checks.append(
        Check("cupy", None, versions["cupy_version"] or "not installed (synthetic workloads)")
    )
    transformers = sysinfo._module_version("transformers")
    checks.append(Check("transformers", None, transformers or "not installed (bert, gpt2)"))
    return checks


def _torch_cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _tool_checks() -> list[Check]:
    checks = []
    ncu = sysinfo.find_ncu()
    if ncu is None:
        checks.append(
            Check(
                "Nsight Compute (ncu)",
                False,
                "not found",
                (PROFILE,),
                "install Nsight Compute, put ncu on PATH, or set ORION_NCU=/path/to/ncu",
            )
        )
    else:
        version = sysinfo.ncu_version(ncu) or "version unknown"
        checks.append(Check("Nsight Compute (ncu)", True, f"{ncu} ({version})", (PROFILE,)))
    allowed, detail = sysinfo.profiling_counters_allowed()
    checks.append(
        Check(
            "GPU performance counters",
            allowed,
            detail,
            (PROFILE,) if allowed is False else (),
            sysinfo.COUNTER_PERMISSION_HINT if allowed is False else None,
        )
    )
    mps = sysinfo.find_mps_control()
    checks.append(
        Check(
            "MPS control daemon",
            mps is not None,
            str(mps) if mps else "nvidia-cuda-mps-control not found",
            (COLOCATE,),
            None if mps else "needed by the mps, mps-priority, priority, reef and orion policies",
        )
    )
    return checks


def _library_checks() -> list[Check]:
    from scheduler_core.library import check_preload_library, native_module

    loads, detail = check_preload_library()
    checks = [
        Check(
            "preload library",
            loads,
            detail,
            (COLOCATE,),
            None if loads else "reinstall orion with 'pip install .'",
        )
    ]
    try:
        native_module()
        checks.append(Check("controller module", True, "scheduler_core._native", (COLOCATE,)))
    except Exception as error:  # OrionError with the reason
        checks.append(Check("controller module", False, str(error), (COLOCATE,)))
    return checks


def run_checks() -> list[Check]:
    """Every check, in the order a user reads them: GPU, Python stack, tools, orion itself."""
    return [*_gpu_checks(), *_python_checks(), *_tool_checks(), *_library_checks()]


def blockers(checks: list[Check]) -> dict[str, list[str]]:
    """For each command, the names of failed checks it needs (empty list: ready)."""
    return {
        command: [c.name for c in checks if c.ok is False and command in c.needed_for]
        for command in COMMANDS
    }
