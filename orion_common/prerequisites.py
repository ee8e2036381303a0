"""What orion needs on this machine, whether it is there, and what to do when it is not.

The one place for prerequisite checks and their install hints, used by ``orion doctor`` (every
check, as a table), ``orion profile`` (GPU, ncu, counter permission) and ``orion colocate`` (GPU,
MPS control). Each check is a function returning a :class:`Check`; none raises: a missing piece
is a result, and :func:`require` turns a failed one into an :class:`OrionError` where a command
cannot go on without it.

The native-library checks belong to ``scheduler_core`` (:func:`scheduler_core.library.
native_checks`), which sits above this package; callers add their rows to these.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from orion_common import sysinfo
from orion_common.errors import OrionError

PROFILE = "profile"
COLOCATE = "colocate"
COMMANDS = (PROFILE, COLOCATE)

DRIVER_HINT = "install the NVIDIA driver; nvidia-smi must work"
TORCH_HINT = "pip install torch"
TORCH_CUDA_HINT = "install a CUDA build of torch that matches the driver"
NCU_HINT = "install Nsight Compute, put ncu on PATH, or set ORION_NCU=/path/to/ncu"
COUNTER_PERMISSION_HINT = (
    "run as root, or let all users read counters: add 'options nvidia "
    "NVreg_RestrictProfilingToAdminUsers=0' to /etc/modprobe.d/nvidia-profiling.conf and reload "
    "the driver (see https://developer.nvidia.com/ERR_NVGPUCTRPERM)"
)
MPS_HINT = (
    "install the NVIDIA driver's MPS tools (nvidia-cuda-mps-control) or put them on PATH, "
    "or pick a policy without MPS: dedicated or timeslice, or orion or reef with run.sharing "
    "'timeslice' (`orion up --sharing timeslice`; `orion up` with no sharing options runs orion "
    "time-sliced by itself where MPS is missing)"
)
MPS_POLICIES_NOTE = (
    "needed by the mps, mps-priority, mps-share, priority, reef, orion and quota policies "
    "(reef, orion and quota: unless run.sharing is 'timeslice')"
)


@dataclass(frozen=True)
class Check:
    """The result of one check (one row of ``orion doctor``'s table).

    ``ok`` is True (present), False (missing or broken) or None (informational only); ``value``
    what was found, for the table; ``needed_for`` the commands that cannot work without it;
    ``hint`` what to do when it failed; ``problem`` one sentence saying what is wrong, for a
    command that refuses (``None`` when nothing is); ``found`` what a caller uses next (the
    ncu path, the :class:`~orion_common.sysinfo.GpuFacts`, ...), else None.
    """

    name: str
    ok: bool | None
    value: str
    needed_for: tuple[str, ...] = ()
    hint: str | None = None
    problem: str | None = None
    found: Any = None


def require(check: Check) -> Check:
    """``check`` itself when it did not fail, else its problem as an :class:`OrionError`."""
    if check.ok is False:
        raise OrionError(check.problem or f"{check.name}: {check.value}", hint=check.hint)
    return check


def blockers(checks: Iterable[Check]) -> dict[str, list[str]]:
    """For each command, the names of failed checks it needs (empty list: ready)."""
    checks = list(checks)
    return {
        command: [c.name for c in checks if c.ok is False and command in c.needed_for]
        for command in COMMANDS
    }


# --- the GPU ----------------------------------------------------------------------------------


def check_driver() -> Check:
    driver = sysinfo.driver_version()
    return Check(
        "NVIDIA driver",
        driver is not None,
        driver or "not found (NVML does not answer)",
        (PROFILE, COLOCATE),
        None if driver else DRIVER_HINT,
        None if driver else "the NVIDIA driver does not answer (NVML)",
    )


def check_gpu(index: int = 0, *, environment: Mapping[str, Any] | None = None) -> Check:
    """GPU ``index`` as NVML or torch see it; from ``environment`` (shaped like
    :func:`~orion_common.sysinfo.software_summary`) when the caller already gathered it."""
    if environment is not None:
        name = environment.get("gpu_name")
        if name is None:
            return _no_gpu(index)
        return Check("GPU", True, str(name), (PROFILE, COLOCATE))
    gpu = sysinfo.gpu_facts(index)
    if gpu is None:
        return _no_gpu(index)
    detail = gpu.name
    if gpu.sm_count is not None:
        detail += f", {gpu.sm_count} SMs, compute capability {gpu.compute_capability}"
    if gpu.memory_total_mib is not None:
        detail += f", {gpu.memory_total_mib / 1024:.0f} GiB"
    return Check("GPU", True, detail, (PROFILE, COLOCATE), found=gpu)


def _no_gpu(index: int) -> Check:
    return Check(
        "GPU",
        False,
        "none visible",
        (PROFILE, COLOCATE),
        problem=f"no NVIDIA GPU {index} is visible (NVML and torch see none)",
    )


def check_cuda_driver() -> Check:
    cuda = sysinfo.cuda_driver_version()
    return Check("CUDA (driver supports)", cuda is not None, cuda or "unknown")


# --- the Python stack -------------------------------------------------------------------------


def check_torch(versions: Mapping[str, Any] | None = None) -> Check:
    torch_version = (versions or sysinfo.torch_versions()).get("torch_version")
    return Check(
        "torch",
        torch_version is not None,
        torch_version or "not installed",
        (PROFILE, COLOCATE),
        None if torch_version else TORCH_HINT,
        None if torch_version else "torch is not installed",
    )


def check_torch_cuda() -> Check:
    """Whether torch can use a CUDA GPU here (imports torch); ``problem`` says why not."""
    try:
        import torch
    except ImportError:
        return Check(
            "torch CUDA",
            False,
            "torch not installed",
            (PROFILE, COLOCATE),
            TORCH_HINT,
            "torch is not installed",
        )
    try:
        available = bool(torch.cuda.is_available())
    except Exception:  # a broken driver install raises instead of answering False
        available = False
    built_for = torch.version.cuda
    value = f"built for CUDA {built_for or 'CPU only'}; " + (
        "GPU usable" if available else "no usable GPU"
    )
    if available:
        return Check("torch CUDA", True, value, (PROFILE, COLOCATE))
    why = (
        f"torch {torch.__version__} is a CPU-only build"
        if built_for is None
        else f"torch {torch.__version__} (CUDA {built_for}) sees no CUDA GPU"
    )
    return Check("torch CUDA", False, value, (PROFILE, COLOCATE), TORCH_CUDA_HINT, why)


def check_torch_build(environment: Mapping[str, Any]) -> Check:
    """Whether the installed torch (as in ``environment``) was built with CUDA at all."""
    torch_version = environment.get("torch_version")
    cpu_only = torch_version is not None and environment.get("torch_cuda_version") is None
    if not cpu_only:
        return Check("torch CUDA build", True, environment.get("torch_cuda_version") or "unknown")
    return Check(
        "torch CUDA build",
        False,
        "CPU only",
        (PROFILE, COLOCATE),
        TORCH_CUDA_HINT,
        f"torch {torch_version} is a CPU-only build",
    )


def python_checks() -> list[Check]:
    """torch (and whether it sees the GPU), cuDNN, and the optional workload libraries."""
    versions = sysinfo.torch_versions()
    torch_check = check_torch(versions)
    checks = [torch_check]
    if torch_check.ok:
        checks.append(check_torch_cuda())
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


# --- tools ------------------------------------------------------------------------------------


def check_ncu() -> Check:
    """Nsight Compute's command line (``found``: its path), honouring ``ORION_NCU``."""
    ncu = sysinfo.find_ncu()
    name = "Nsight Compute (ncu)"
    if ncu is None:
        override = os.environ.get("ORION_NCU")
        where = (
            f"ORION_NCU={override} is not an executable file"
            if override
            else "not on PATH nor in /usr/local/cuda/bin"
        )
        return Check(name, False, "not found", (PROFILE,), NCU_HINT, f"{name} not found: {where}")
    version = sysinfo.ncu_version(ncu) or "version unknown"
    return Check(name, True, f"{ncu} ({version})", (PROFILE,), found=ncu)


def check_counters() -> Check:
    """Whether this user may read GPU performance counters (ncu's ERR_NVGPUCTRPERM)."""
    allowed, detail = sysinfo.profiling_counters_allowed()
    refused = allowed is False
    return Check(
        "GPU performance counters",
        allowed,
        detail,
        (PROFILE,) if refused else (),
        COUNTER_PERMISSION_HINT if refused else None,
        f"this user may not read GPU performance counters: {detail}" if refused else None,
    )


def check_mps_control() -> Check:
    """``nvidia-cuda-mps-control`` (``found``: its path), needed by the MPS-based policies."""
    mps = sysinfo.find_mps_control()
    if mps is None:
        return Check(
            "MPS control daemon",
            False,
            "nvidia-cuda-mps-control not found",
            (COLOCATE,),
            MPS_HINT,
            "nvidia-cuda-mps-control was not found",
        )
    return Check("MPS control daemon", True, str(mps), (COLOCATE,), found=mps)


def machine_checks() -> list[Check]:
    """Every check of this machine, in the order a user reads them: GPU, Python stack, tools.

    (orion's own native library is checked by ``scheduler_core``; ``orion doctor`` adds it.)
    """
    gpu = check_gpu(0)
    checks = [check_driver(), gpu]
    if gpu.ok:
        checks.append(check_cuda_driver())
    checks += python_checks()
    ncu = check_ncu()
    checks.append(ncu)
    if gpu.ok and ncu.ok:
        checks.append(check_counters())
    else:  # "ok" would be a claim about counters no one could read here
        missing = "no GPU" if not gpu.ok else "no ncu"
        checks.append(Check("GPU performance counters", None, f"not checked: {missing}"))
    checks.append(check_mps_control())
    return checks
