"""Everything a run needs, checked before anything starts, and the settings derived from it.

A colocation run holds the GPU for minutes and starts an MPS daemon; finding out after all that
that MPS is missing, a profile is stale or torchvision is not installed wastes the user's time
and can leave state behind. :func:`prepare_run` has no side effects: it checks the machine, the
workloads, the preload library, the profiles and the GPU's running orion daemon, if any (it must
schedule as the run needs: :mod:`colocation.gpu_daemon`), and either refuses with every reason
at once or returns a :class:`RunPlan` the runner carries out.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from colocation.config import JobsConfig, JobsConfigError, Problem
from colocation.gpu_daemon import DaemonNeeds, join_request, other_clients_warning, running_daemon
from colocation.policies import Policy
from colocation.profiles import default_profile_for, load_profiles, resolve_profiles
from orion_common import prerequisites, sysinfo
from orion_common.errors import OrionError
from orion_common.sizes import format_size
from orion_daemon.admission import memory_limit_problem
from scheduler_core.library import native_checks
from scheduler_core.shares import sets_a_share

CLIENT_DEVICE_ENV = "ORION_CLIENT_DEVICE"
"""For tests and CPU-only development: ``cpu`` runs every client's workload on the CPU, so the
whole run (processes, protocol, run directory, preload library passing through) can be exercised
without a GPU. Measurements made this way say nothing about GPU sharing."""

_DEVICE = re.compile(r"cpu|cuda(:[0-9]+)?")
_PIP = {"torchvision": "torchvision", "transformers": "transformers", "cupy": "cupy-cuda13x"}


@dataclass(frozen=True)
class RunPlan:
    """A checked run: where clients run, their profiles, the scheduler's settings, warnings."""

    config: JobsConfig
    device: str
    environment: dict[str, Any]
    profile_paths: dict[str, Path | None]
    profiles: dict[str, Any]
    """Client name -> :class:`postprocess.Profile`, loaded when the policy gates by profile."""
    settings: Any
    """:class:`scheduler_core.SchedulerSettings`: how the run's clients are scheduled (its
    thresholds derived as the daemon derives them when the HP client joins)."""
    daemon: DaemonNeeds
    """What the run needs of the daemon its clients join."""
    warnings: tuple[str, ...]

    @property
    def policy(self) -> Policy:
        return self.config.policy


def client_device(config: JobsConfig) -> str:
    """``cuda:<run.gpu>``, unless ``ORION_CLIENT_DEVICE`` says otherwise (tests: ``cpu``)."""
    override = os.environ.get(CLIENT_DEVICE_ENV, "").strip()
    if not override:
        return f"cuda:{config.run.gpu}"
    if not _DEVICE.fullmatch(override):
        raise OrionError(
            f"{CLIENT_DEVICE_ENV}={override!r} is not a device; use cpu, cuda or cuda:N",
            hint=f"unset {CLIENT_DEVICE_ENV} to run on the GPU named by run.gpu",
        )
    return override


def _gpu_problems(device: str, environment: dict[str, Any], gpu: int) -> list[str]:
    if not device.startswith("cuda"):
        return []
    gpu_check = prerequisites.check_gpu(gpu, environment=environment)
    if not gpu_check.ok:
        return [f"{gpu_check.problem}; colocation measures GPU sharing and needs one"]
    torch_build = prerequisites.check_torch_build(environment)
    if not torch_build.ok:
        return [
            f"{torch_build.problem}; clients could not use the GPU (install a CUDA build of torch)"
        ]
    return []


def _workload_problems(config: JobsConfig, device: str) -> list[str]:
    from workloads import get_workload_info

    problems = []
    device_type = device.split(":", 1)[0]
    for client in config.clients:
        info = get_workload_info(client.workload)
        if device_type not in info.devices:
            problems.append(
                f"client {client.name!r}: workload {client.workload!r} runs only on "
                f"{', '.join(info.devices)}, not {device}"
            )
        for module in info.requires:
            if importlib.util.find_spec(module) is None:
                problems.append(
                    f"client {client.name!r}: workload {client.workload!r} needs the Python "
                    f"module {module!r} (pip install {_PIP.get(module, module)})"
                )
    return problems


def _preload_problems() -> list[str]:
    return [check.problem or check.value for check in native_checks() if check.ok is False]


def _system_mps_warning(policy: Policy) -> list[str]:
    """A warning when an MPS daemon outside this run would capture non-MPS clients.

    CUDA connects any process to the daemon of its pipe folder (``/tmp/nvidia-mps`` unless
    ``CUDA_MPS_PIPE_DIRECTORY`` says otherwise), so a machine-wide daemon silently turns a
    ``timeslice`` or ``dedicated`` run into an MPS run. (MPS policies use a private daemon.)
    """
    if policy.uses_mps:
        return []
    pipe_dir = Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps")
    try:
        pid = int((pipe_dir / "nvidia-cuda-mps-control.pid").read_text().strip())
    except (OSError, ValueError):
        return []
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass  # someone else's daemon (root's, typically): it serves us all the same
    return [
        f"an MPS control daemon is running (pid {pid}, pipe folder {pipe_dir}): the clients of "
        f"policy {policy.name!r} will run under it, not alone; stop it for a fair comparison "
        "(echo quit | nvidia-cuda-mps-control)"
    ]


def _memory_limit_warnings(config: JobsConfig, environment: Mapping[str, Any]) -> list[str]:
    """Refuses a client ``memory_limit`` above the GPU's memory; warns when the limits add up to
    more than it.

    A limit above the GPU's memory limits nothing and is most likely a slip in the number or its
    unit, which the run itself would never reveal. Limits that merely add up to more are allowed:
    each caps one client but reserves nothing, so a client may still run out of memory below its
    limit while the others hold theirs; clients of a sequential policy never share the GPU, so
    there is nothing to warn about. With the GPU's memory unknown (no GPU, no NVML) nothing is
    checked.
    """
    total_mib = environment.get("gpu_memory_mib")
    if not isinstance(total_mib, int) or total_mib <= 0:
        return []
    total = total_mib * 2**20  # NVML's total, in whole MiB
    name = environment.get("gpu_name")
    gpu = f"GPU {config.run.gpu}" + (f" ({name})" if name else "")
    limits = [
        (i, client.memory_limit)
        for i, client in enumerate(config.clients)
        if client.memory_limit is not None
    ]
    problems: list[Problem] = []
    for i, limit in limits:
        if memory_limit_problem(limit, total) is not None:  # the rule a join meets
            asked, has = _sizes(limit, total)
            problems.append(
                Problem(f"clients[{i}].memory_limit", f"{asked} is more than the {has} of {gpu}")
            )
    if problems:
        count = f"{len(problems)} problem" + ("" if len(problems) == 1 else "s")
        raise JobsConfigError(
            f"memory limits for {gpu} ({count}):",
            problems,
            hint=f'lower memory_limit to at most "{total_mib}MiB" (the whole GPU) or remove it',
        )
    combined = sum(limit for _, limit in limits)
    if config.policy.sequential or len(limits) < 2 or combined <= total:
        return []
    asked, has = _sizes(combined, total)
    return [
        f"the clients' memory limits add up to {asked}, more than the {has} of {gpu}: each "
        "limit caps one client but reserves nothing, so a client can run out of memory below "
        "its limit while the others hold theirs"
    ]


def _sizes(a: int, b: int) -> tuple[str, str]:
    """``a`` and ``b`` for a message comparing them; in bytes too where rounding hides which is
    larger."""
    shown = format_size(a), format_size(b)
    if shown[0] == shown[1]:
        return f"{shown[0]} ({a} bytes)", f"{shown[1]} ({b} bytes)"
    return shown


def _sm_count(environment: dict[str, Any], config: JobsConfig, profiles: dict[str, Any]) -> int:
    """The GPU's SM count; without a GPU (CPU runs), the profiles' (HP first); else 1."""
    if environment.get("sm_count"):
        return int(environment["sm_count"])
    hp = config.hp_client
    names = ([hp.name] if hp is not None else []) + [c.name for c in config.clients]
    for name in names:
        count = profiles[name].metadata.get("sm_count") if name in profiles else None
        if isinstance(count, int) and count > 0:
            return count
    return 1


def _hp_target_ns(config: JobsConfig) -> float | None:
    hp = config.hp_client
    target = hp.latency_target_ms if hp is not None else None
    return target * 1e6 if target is not None else None


def _hp_kernels(config: JobsConfig, profiles: dict[str, Any]) -> Any:
    hp = config.hp_client
    return profiles[hp.name].kernels if hp is not None and hp.name in profiles else None


def _target_warnings(config: JobsConfig, profiles: dict[str, Any]) -> list[str]:
    """An HP latency target that cannot be met even alone, when it sets the queue bound."""
    from scheduler_core.thresholds import target_below_step_warning

    target = _hp_target_ns(config)
    if target is None or config.run.thresholds.queue_limit_us is not None:
        return []
    warning = target_below_step_warning(_hp_kernels(config, profiles), target)
    return [warning] if warning else []


def _settings(config: JobsConfig, sm_count: int, profiles: dict[str, Any]) -> Any:
    from scheduler_core import (
        SchedulerSettings,
        default_queue_limit_ns,
        default_unknown_duration_ns,
    )
    from scheduler_core.run_state import TRACE_CAPACITY
    from scheduler_core.sharing import hp_priority_stream

    thresholds = config.run.thresholds
    if thresholds.queue_limit_us is not None:
        queue_limit_ns = round(thresholds.queue_limit_us * 1000)
    else:
        queue_limit_ns = default_queue_limit_ns(
            _hp_kernels(config, profiles), _hp_target_ns(config)
        )
    if thresholds.unknown_kernel_us is not None:
        unknown_ns = round(thresholds.unknown_kernel_us * 1000)
    else:
        unknown_ns = default_unknown_duration_ns(queue_limit_ns)
    return SchedulerSettings(
        policy=config.policy.native_policy,
        sm_count=sm_count,
        queue_limit_ns=queue_limit_ns,
        unknown_duration_ns=unknown_ns,
        trace_capacity=TRACE_CAPACITY if config.run.trace else 0,
        hp_completion=config.run.hp_completion,
        be_gate=config.run.be_gate,
        be_graph_gate=config.be_graph_gate,
        quotas=any(sets_a_share(c.min_util, c.max_util) for c in config.clients),
        quota_window_ns=round(config.run.quota_window_s * 1e9),
        hp_priority_stream=hp_priority_stream(config.policy.hp_sharing),
    )


def _sharing(config: JobsConfig) -> str:
    """How the run's clients share the GPU: its policy's mode, ``run.sharing`` already applied."""
    return "mps" if config.policy.uses_mps else "timeslice"


def _nanoseconds(microseconds: float | None) -> int | None:
    return None if microseconds is None else round(microseconds * 1000)


def _daemon_needs(
    config: JobsConfig,
    environment: Mapping[str, Any],
    settings: Any,
    profile_paths: Mapping[str, Path | None],
    profiles: Mapping[str, Any],
) -> DaemonNeeds:
    """The daemon the run needs: the scheduling ``settings`` say, with the thresholds the jobs
    file fixes (None: derived from the HP client's profile and target when it joins)."""
    from orion_daemon import state
    from orion_daemon.server import DaemonSettings

    thresholds = config.run.thresholds
    memory_mib = environment.get("gpu_memory_mib")
    daemon = DaemonSettings(
        gpu=config.run.gpu,
        sm_count=settings.sm_count,
        folder=state.state_dir(config.run.gpu),
        policy=settings.policy,
        sharing=_sharing(config),
        gpu_name=environment.get("gpu_name"),
        memory_bytes=memory_mib << 20 if isinstance(memory_mib, int) and memory_mib > 0 else None,
        queue_limit_ns=_nanoseconds(thresholds.queue_limit_us),
        unknown_duration_ns=_nanoseconds(thresholds.unknown_kernel_us),
        shares=settings.quotas,
        quota_window_ns=settings.quota_window_ns,
        be_gate=settings.be_gate,
        be_graph_gate=settings.be_graph_gate,
        hp_completion=settings.hp_completion,
        trace=settings.trace_capacity > 0,
    )
    clients = tuple(
        join_request(c, profile_paths.get(c.name) if c.name in profiles else None, [])
        for c in config.clients
    )
    return DaemonNeeds(daemon, clients, config.policy.name)


def prepare_run(config: JobsConfig) -> RunPlan:
    """Check every prerequisite of ``config`` and derive the run's settings; no side effects.

    Refuses with one :class:`OrionError` listing every missing prerequisite (GPU, workload
    modules, MPS, preload library), then with the clients' memory limits that exceed the GPU's
    memory and with the profile problems (each a :class:`colocation.config.JobsConfigError`),
    then with a running daemon of the GPU the run cannot use, so nothing starts that cannot
    finish.
    """
    policy = config.policy
    device = client_device(config)
    environment = sysinfo.software_summary(config.run.gpu)
    problems = _gpu_problems(device, environment, config.run.gpu)
    problems += _workload_problems(config, device)
    if policy.uses_mps:
        mps = prerequisites.check_mps_control()
        if not mps.ok:
            problems.append(f"policy {policy.name!r} runs under MPS: {mps.problem} ({mps.hint})")
    problems += _preload_problems()
    if problems:
        lines = "\n".join(f"  {problem}" for problem in problems)
        count = f"{len(problems)} problem" + ("" if len(problems) == 1 else "s")
        raise OrionError(
            f"cannot run policy {policy.name!r} on this machine ({count}):\n{lines}",
            hint="`orion doctor` shows what is installed",
        )
    memory_warnings = _memory_limit_warnings(config, environment)
    gpu_name = environment.get("gpu_name") if device.startswith("cuda") else None
    resolved = resolve_profiles(
        config, gpu_name, default_profile_for(environment.get("gpu_name")), environment=environment
    )
    profiles = load_profiles(resolved.paths) if policy.needs_profiles else {}
    sm_count = _sm_count(environment, config, profiles)
    settings = _settings(config, sm_count, profiles)
    daemon = _daemon_needs(config, environment, settings, resolved.paths, profiles)
    running = running_daemon(daemon)
    return RunPlan(
        config=config,
        device=device,
        environment=environment,
        profile_paths=resolved.paths,
        profiles=profiles,
        settings=settings,
        daemon=daemon,
        warnings=tuple(
            _system_mps_warning(policy)
            + memory_warnings
            + resolved.warnings
            + _target_warnings(config, profiles)
            + other_clients_warning(running)
        ),
    )
