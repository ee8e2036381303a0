"""Which kernel profile each client of a run uses, whether it fits, and loading it.

The profile file is parsed by :mod:`postprocess.profile_format` only: its header through
:func:`~postprocess.profile_format.read_profile_header` (cheap, to check every client before
anything starts), the whole file through :func:`~postprocess.profile_format.read_profile`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from colocation.jobs_fields import JobsConfigError, Problem, show
from colocation.jobs_schema import ClientConfig, JobsConfig
from orion_common.errors import OrionError
from postprocess.profile_format import (
    Profile,
    find_profile,
    profile_compatibility_warnings,
    read_profile,
    read_profile_header,
)


def profile_command(client: ClientConfig) -> str:
    """The command that writes the profile ``client`` needs at its default location."""
    return (
        f"orion profile {client.workload} --mode {client.mode} "
        f"--batch-size {client.batch_size} --dtype {client.dtype}"
        + (" --cuda-graph" if client.cuda_graph else "")
    )


class ResolvedProfiles(NamedTuple):
    """Where each client's kernel profile is, and what makes a usable profile less trustworthy.

    ``paths`` maps client name to profile path (``None``: no profile). ``warnings`` are one
    sentence each, naming the client: a profile made on another GPU or with other software
    versions still gates kernels, only less accurately, so the run goes on and records them.
    """

    paths: dict[str, Path | None]
    warnings: list[str]


def resolve_profiles(
    config: JobsConfig,
    gpu_name: str | None,
    default_path: Callable[[ClientConfig], Path],
    *,
    environment: Mapping[str, Any] | None = None,
) -> ResolvedProfiles:
    """The kernel profile of each client, by name: its ``profile``, else ``default_path(client)``.

    A client without either gets ``None``, which is only allowed when the policy does not gate
    kernels by profile, or when the client says ``profile_source: online`` (its kernels are
    learned while it runs). When it does (``needs_profiles``), each profile's header must match the
    client (workload, mode, batch size, dtype); every missing or mismatched profile is reported in
    one :class:`JobsConfigError` whose hint gives the ``orion profile`` commands to run.

    A profile made on another GPU (``gpu_name``) or with other software (``environment``, shaped
    like :func:`orion_common.sysinfo.software_summary`) is not an error but a warning: the
    scheduler can still use it, and refusing would force a re-profile (minutes of ncu) before
    every experiment on a slightly different machine.
    """
    policy = config.policy
    current: dict[str, Any] = dict(environment or {})
    if gpu_name:
        current["gpu_name"] = gpu_name
    paths: dict[str, Path | None] = {}
    warnings: list[str] = []
    problems: list[Problem] = []
    commands: list[str] = []
    for i, client in enumerate(config.clients):
        where = f"clients[{i}].profile"
        if client.profile_source == "online":
            paths[client.name] = None  # learned while it runs: nothing to find or check
            continue
        candidate = client.profile or Path(default_path(client))
        path = candidate if candidate.is_file() else None
        paths[client.name] = path
        if not policy.needs_profiles:
            continue
        if path is None:
            problems.append(
                Problem(
                    where,
                    f"policy {policy.name!r} needs a kernel profile for client "
                    f"{client.name!r}, and {candidate} does not exist",
                )
            )
            commands.append(profile_command(client))
            continue
        try:
            meta = read_profile_header(path)
        except OrionError as exc:
            problems.append(Problem(where, exc.message))
            commands.append(profile_command(client))
            continue
        mismatch = _client_mismatch(meta, client)
        if mismatch:
            problems.append(Problem(where, f"{path} {mismatch}"))
            commands.append(profile_command(client))
            continue
        warnings.extend(
            f"client {client.name!r} ({path}): {text}"
            for text in profile_compatibility_warnings(meta, current)
        )
        graph_warning = _graph_mismatch(meta, client)
        if graph_warning:
            warnings.append(f"client {client.name!r} ({path}): {graph_warning}")
    if problems:
        unique = list(dict.fromkeys(commands))
        count = f"{len(problems)} problem" + ("" if len(problems) == 1 else "s")
        raise JobsConfigError(
            f"kernel profiles for policy {policy.name!r} ({count}):",
            problems,
            hint="run: " + "\nrun: ".join(unique),
        )
    return ResolvedProfiles(paths, warnings)


def _client_mismatch(meta: Mapping[str, Any], client: ClientConfig) -> str | None:
    """Why a profile with metadata ``meta`` cannot serve ``client`` (``None`` when it can)."""
    wanted = {
        "workload": client.workload,
        "mode": client.mode,
        "batch_size": client.batch_size,
        "dtype": client.dtype,
    }
    wrong = [
        f"{key} {show(meta[key])}"
        for key, value in wanted.items()
        if key in meta and meta[key] != value
    ]
    if wrong:
        return (
            f"was made for {', '.join(wrong)}, but client {client.name!r} runs "
            f"{client.workload} {client.mode} batch size {client.batch_size} {client.dtype}"
        )
    return None


def _graph_mismatch(meta: Mapping[str, Any], client: ClientConfig) -> str | None:
    """A profile of the eager step used for a CUDA-graph client, or the reverse.

    Not an error: the kernels are the same, so the profile still describes the GPU work; but the
    library then sees launches the profile does not list (one graph launch instead of the
    kernels, or the reverse) and gates them as unknown work, conservatively.
    """
    profiled_graph = bool(meta.get("cuda_graph", False))
    if profiled_graph == client.cuda_graph:
        return None
    graph, eager = "as a CUDA graph", "eagerly"
    made, runs = (graph, eager) if profiled_graph else (eager, graph)
    command = profile_command(client)
    return (
        f"the profile was made {made} but the client runs {runs}; launches it does not list are "
        f"gated as unknown work (profile it with: {command})"
    )


def default_profile_for(gpu_name: str | None) -> Callable[[ClientConfig], Path]:
    """Where a client's profile is found on this GPU: the user's ``orion profile`` output, else
    orion's reference profile for this GPU kind (:func:`postprocess.find_profile`)."""

    def where(client: ClientConfig) -> Path:
        # A graph client falls back to an eager profile (the same kernels); resolve_profiles
        # warns about the mismatch.
        return find_profile(
            client.workload,
            client.mode,
            client.batch_size,
            client.dtype,
            gpu_name or "",
            cuda_graph=client.cuda_graph,
        )

    return where


def load_profiles(paths: Mapping[str, Path | None]) -> dict[str, Profile]:
    """Each client's whole profile (clients without one left out); errors name the client."""
    profiles: dict[str, Profile] = {}
    for name, path in paths.items():
        if path is None:
            continue
        try:
            profiles[name] = read_profile(path)
        except OrionError as exc:
            raise OrionError(f"client {name!r}: {exc.message}", hint=exc.hint) from None
    return profiles
