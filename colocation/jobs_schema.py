"""The ``jobs.json`` models: what a run and its clients are, and the rules across fields.

Validation conventions are described in :mod:`colocation.config` (the public entry point). The
arrivals models live in :mod:`colocation.arrivals`, next to the schedules they describe; the
pieces shared by every model (strict base, path fields, problems) in
:mod:`colocation.jobs_fields`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from colocation.arrivals import (
    ArrivalsModel,
    ClosedArrivals,
    PoissonArrivals,
    TraceArrivals,
    UniformArrivals,
)
from colocation.jobs_fields import (
    PathField,
    Problem,
    StrictModel,
    existing_file,
    problem,
    resolve_path,
    show,
)
from colocation.policies import POLICIES, POLICY_NAMES, SHARE_POLICIES, Policy
from orion_common.errors import OrionError
from scheduler_core.run_state import DEFAULT_BE_GATE, BeGraphGate
from scheduler_core.settings import MAX_UTIL, MEMORY_LIMIT, MIN_UTIL, SHARING
from scheduler_core.shares import promises_problem, share_problem, shares_problem
from scheduler_core.sharing import DEFAULT_RUN_BE_GRAPH_GATE, Sharing
from workloads.registry import WorkloadInfo, get_workload_info

CLIENT_NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,32}")
MAX_DURATION_S = 7 * 24 * 3600.0
MAX_REQUESTS = 100_000_000
MAX_WARMUP_STEPS = 100_000
MAX_BATCH_SIZE = 65_536


class Thresholds(StrictModel):
    """Scheduler thresholds; ``None`` lets the runner derive them from the profiles."""

    queue_limit_us: Annotated[float, Field(gt=0)] | None = None
    unknown_kernel_us: Annotated[float, Field(gt=0)] | None = None


class RunConfig(StrictModel):
    """How the run is carried out and measured."""

    policy: str
    # Bounded, so that a typo (10^30 warm-up steps, a year of measuring) is refused up front.
    duration_s: Annotated[float, Field(gt=0, le=MAX_DURATION_S)] | None = None
    requests: Annotated[int, Field(ge=1, le=MAX_REQUESTS)] | None = None
    warmup_steps: Annotated[int, Field(ge=0, le=MAX_WARMUP_STEPS)] = 20
    seed: Annotated[int, Field(ge=0)] = 1
    output_dir: PathField = Field(default=Path("runs"), validate_default=True)
    trace: bool = False
    thresholds: Thresholds = Field(default_factory=Thresholds)
    # How the HP client's kernel completions are tracked under reef/orion: "estimate" (at the
    # profiled expected end; no driver call on HP's critical path) or "gpu-write" (written by the
    # GPU after each HP launch: exact, one more driver call per launch). BE always uses gpu-write.
    hp_completion: Literal["estimate", "gpu-write"] = "estimate"
    # Where a held BE launch waits under reef/orion: "gpu" (the default: the launch returns at
    # once and the BE stream waits on the GPU for a gate the controller opens when the policy
    # admits the work) or "cpu" (in the program's launching thread, which stops, so its GPU queue
    # drains).
    be_gate: Literal["cpu", "gpu"] = DEFAULT_BE_GATE
    # How the CUDA graphs of gated clients are held (scheduler_core.run_state.BeGraphGate: wait
    # nodes inside, whole, or split into segments). None: every policy's default
    # (scheduler_core.sharing.DEFAULT_RUN_BE_GRAPH_GATE; JobsConfig.be_graph_gate).
    be_graph_gate: BeGraphGate | None = None
    # The sliding window over which clients' min_util / max_util shares of GPU time hold.
    quota_window_s: Annotated[float, Field(gt=0, le=60)] = 1.0
    # None: the policy's default (colocation.policies); the rest is SHARING's declaration.
    sharing: Sharing | None = Field(default=None, description=SHARING.help)
    gpu: Annotated[int, Field(ge=0)] = 0

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        if value not in POLICIES:
            raise problem(f"must be one of {', '.join(POLICY_NAMES)} (got {show(value)})")
        return value

    @field_validator("output_dir")
    @classmethod
    def _output_dir_is_a_folder(cls, value: Path, info: ValidationInfo) -> Path:
        resolved = resolve_path(value, info)
        if resolved.exists() and not resolved.is_dir():
            raise problem(f"exists and is not a folder: {resolved}")
        return resolved


class ClientConfig(StrictModel):
    """One client process: a workload, how it runs, and (for inference) when requests arrive."""

    name: str
    workload: str
    mode: Literal["infer", "train"]
    batch_size: Annotated[int, Field(ge=1, le=MAX_BATCH_SIZE)]
    dtype: Literal["fp32", "bf16"] = "fp32"
    role: Literal["hp", "be"] = "be"
    arrivals: ArrivalsModel | None = Field(default=None, validate_default=True)
    profile: PathField | None = None
    profile_source: Literal["offline", "online"] = "offline"
    """``online``: no offline profile; the preload library learns every kernel while the client
    runs (docs/scheduler.md, "Online profiles"). ``offline``: ``profile``, else the one found
    for the workload."""
    options: dict[str, Any] = Field(default_factory=dict)
    cuda_graph: bool = False
    """Serve inference by replaying the step captured once as a CUDA graph."""
    sm_percent: Annotated[int, Field(ge=1, le=100)] | None = None
    """Percent of the SMs this client may use (policy ``mps-share``; default all)."""
    min_util: float = Field(default=MIN_UTIL.default, description=MIN_UTIL.help)
    max_util: float = Field(default=MAX_UTIL.default, description=MAX_UTIL.help)
    latency_target_ms: Annotated[float, Field(gt=0)] | None = None
    """HP only: the p99 latency its requests may take; sets the default BE queue bound
    (:mod:`scheduler_core.thresholds`). None: 5% over the HP step's profiled GPU time."""
    memory_limit: int | None = Field(default=None, description=MEMORY_LIMIT.help)
    """Bytes of GPU memory this client may allocate (``"4GiB"`` in the file, parsed by
    :data:`scheduler_core.settings.MEMORY_LIMIT`); None: no limit.
    Enforced by the preload library, which every policy loads; checked against the GPU's memory
    in :mod:`colocation.preflight`."""

    @field_validator("name")
    @classmethod
    def _name_is_simple(cls, value: str) -> str:
        # the name becomes file names (clients/<name>.csv, logs/<name>.log)
        if not CLIENT_NAME_PATTERN.fullmatch(value):
            raise problem(
                f"must be 1-32 characters of letters, digits, '_' or '-' (got {show(value)})"
            )
        return value

    @field_validator("workload")
    @classmethod
    def _workload_is_known(cls, value: str) -> str:
        _workload_info(value)
        return value

    @field_validator("arrivals")
    @classmethod
    def _arrivals_fit_mode(
        cls,
        value: ClosedArrivals | PoissonArrivals | UniformArrivals | TraceArrivals | None,
        info: ValidationInfo,
    ) -> ClosedArrivals | PoissonArrivals | UniformArrivals | TraceArrivals | None:
        mode = info.data.get("mode")
        if mode == "train" and value is not None:
            raise problem(
                "only inference clients take arrivals; a training client runs back-to-back "
                'iterations (remove "arrivals" or set mode to "infer")'
            )
        if mode == "infer" and value is None:
            return ClosedArrivals(kind="closed")
        return value

    @field_validator("profile")
    @classmethod
    def _profile_exists(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return None if value is None else existing_file(value, info)

    @field_validator("profile_source")
    @classmethod
    def _one_source(cls, value: str, info: ValidationInfo) -> str:
        if value == "online" and info.data.get("profile") is not None:
            raise problem(
                'a client learned online has no offline profile: remove "profile" or set '
                '"profile_source" to "offline"'
            )
        return value

    @field_validator("cuda_graph")
    @classmethod
    def _graph_fits_workload(cls, value: bool, info: ValidationInfo) -> bool:
        if value:
            reason = _cuda_graph_problem(info.data.get("workload"), info.data.get("mode"))
            if reason:
                raise problem(reason)
        return value

    @field_validator("options")
    @classmethod
    def _options_fit_workload(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        workload = info.data.get("workload")
        if workload is not None:
            _check_options(_workload_info(workload), value)
        return value

    @field_validator("memory_limit", mode="before")
    @classmethod
    def _memory_limit_is_a_size(cls, value: Any) -> int | None:
        # before pydantic's own check: the file may say "4GiB", the model keeps bytes
        try:
            return MEMORY_LIMIT.parse(value)
        except ValueError as exc:
            raise problem(str(exc)) from None

    @field_validator("min_util", "max_util", mode="before")
    @classmethod
    def _a_share(cls, value: Any, info: ValidationInfo) -> float:
        setting = MIN_UTIL if info.field_name == MIN_UTIL.name else MAX_UTIL
        try:
            return setting.or_default(value)
        except ValueError as exc:
            raise problem(str(exc)) from None

    @property
    def is_hp(self) -> bool:
        return self.role == "hp"


class JobsConfig(StrictModel):
    """A whole validated ``jobs.json``."""

    run: RunConfig
    clients: Annotated[list[ClientConfig], Field(min_length=1)]

    @model_validator(mode="after")
    def _clients_fit_together(self) -> JobsConfig:
        problems = cross_field_problems(self.model_dump())
        if problems:
            raise PydanticCustomError(
                "orion_cross",
                "{summary}",
                {"summary": "; ".join(map(str, problems)), "problems": problems},
            )
        return self

    @property
    def policy(self) -> Policy:
        """The run's policy, carried out with the run's sharing mode (``run.sharing``, else the
        policy's default): what the runner starts (an MPS daemon or not) follows from it."""
        return POLICIES[self.run.policy].with_sharing(self.run.sharing)

    @property
    def be_graph_gate(self) -> str:
        """How the run holds BE graphs: ``run.be_graph_gate``, else every policy's default."""
        return self.run.be_graph_gate or DEFAULT_RUN_BE_GRAPH_GATE

    @property
    def hp_client(self) -> ClientConfig | None:
        return next((client for client in self.clients if client.is_hp), None)

    def client(self, name: str) -> ClientConfig:
        for client in self.clients:
            if client.name == name:
                return client
        raise KeyError(name)

    def to_json_dict(self) -> dict[str, Any]:
        """Plain JSON data (paths as absolute strings) for ``run.json``; validates again as is.
        ``run.sharing`` is the mode the run used, also when the jobs file left it to the policy's
        default: defaults change as measurements come in (orion's became ``timeslice``), and a
        report must not read an old run by today's default. A run recorded without it predates
        time slicing for these policies and shared through MPS. ``run.be_graph_gate`` likewise:
        recorded, a run says how it held BE graphs whatever the default became."""
        data = self.model_dump(mode="json")
        data["run"]["sharing"] = self.policy.sharing
        data["run"]["be_graph_gate"] = self.be_graph_gate
        return data


def _share_problems(
    run: Mapping[str, Any], clients: list[tuple[int, Mapping[str, Any]]], policy: Policy | None
) -> list[Problem]:
    """GPU-time shares that cannot hold together or cannot be enforced."""
    problems: list[Problem] = []
    shared: list[tuple[int, str]] = []  # (client index, the share field it sets)
    total_min = 0.0
    for i, client in clients:
        low, high = client.get("min_util", 0.0), client.get("max_util", 1.0)
        if not (isinstance(low, (int, float)) and isinstance(high, (int, float))):
            continue
        if share_problem(MIN_UTIL.name, low) or share_problem(MAX_UTIL.name, high):
            continue  # said as the field's own problem
        total_min += low
        reason = shares_problem(low, high)
        if reason is not None:
            problems.append(Problem(f"clients[{i}]", reason))
        if low != 0.0:
            shared.append((i, "min_util"))
        elif high != 1.0:
            shared.append((i, "max_util"))
    reason = promises_problem(total_min)
    if reason is not None:
        problems.append(Problem("clients", reason))
    if not shared or policy is None:
        return problems
    roles = {i: client.get("role") for i, client in clients}
    if policy.native_policy not in SHARE_POLICIES:
        allowed = ", ".join(p.name for p in POLICIES.values() if p.native_policy in SHARE_POLICIES)
        i, field = shared[0]
        problems.append(
            Problem(
                f"clients[{i}].{field}",
                f"policy {policy.name!r} cannot hold work back; GPU-time shares apply under "
                f"{allowed}",
            )
        )
    elif run.get("be_gate", DEFAULT_BE_GATE) != "gpu":
        problems.append(Problem("run.be_gate", "GPU-time shares are held on the GPU: use 'gpu'"))
    elif policy.native_policy != "quota":
        for i, field in shared:
            if roles.get(i) == "hp":
                problems.append(
                    Problem(
                        f"clients[{i}].{field}",
                        f"policy {policy.name!r} never holds HP work back; GPU-time shares "
                        "apply to BE clients here (every client under policy 'quota')",
                    )
                )
    return problems


# --------------------------------------------------------------------------------------------
# workload registry (cheap to import: no framework is loaded)


def _workload_info(name: str) -> WorkloadInfo:
    """The registry's entry for ``name``; its error (listing the known names) as a problem."""
    try:
        return get_workload_info(name)
    except OrionError as exc:
        hint = f" ({exc.hint})" if exc.hint else ""
        raise problem(exc.message + hint) from None


def _cuda_graph_problem(workload: Any, mode: Any) -> str | None:
    """Why a client of ``workload`` in ``mode`` cannot be served as a CUDA graph (None: it can)."""
    if mode == "train":
        return (
            "applies to inference clients only; training runs eagerly "
            '(remove "cuda_graph" or set mode to "infer")'
        )
    if not isinstance(workload, str):
        return None
    try:
        reason = get_workload_info(workload).graph_capture
    except OrionError:
        return None  # the workload field reports it
    return None if reason is None else f"workload {workload!r} cannot be captured: {reason}"


def _check_options(info: WorkloadInfo, options: dict[str, Any]) -> None:
    """Option names and values, as the registry checks them when it builds the workload."""
    try:
        info.check_options(options)
    except OrionError as exc:
        raise problem(exc.message) from None


# --------------------------------------------------------------------------------------------
# checks that span several fields


def cross_field_problems(data: Any) -> list[Problem]:
    """Rules relating fields to each other, checked on raw or validated data alike.

    Field-level errors stop pydantic before model validators run; checking the raw data as well
    lets one pass report a duplicate name next to a bad batch size. Values of the wrong type are
    skipped here (the field checks report them).
    """
    if not isinstance(data, Mapping):
        return []
    problems: list[Problem] = []
    run = data.get("run") if isinstance(data.get("run"), Mapping) else {}
    raw_clients = data.get("clients") if isinstance(data.get("clients"), list) else []
    clients = [(i, c) for i, c in enumerate(raw_clients) if isinstance(c, Mapping)]

    duration, requests = run.get("duration_s"), run.get("requests")
    if isinstance(data.get("run"), Mapping):
        if duration is None and requests is None:
            problems.append(
                Problem(
                    "run",
                    "set exactly one of duration_s (seconds to measure) or requests "
                    "(HP requests to serve)",
                )
            )
        elif duration is not None and requests is not None:
            problems.append(
                Problem(
                    "run",
                    "set only one of duration_s and requests "
                    f"(got duration_s={show(duration)}, requests={show(requests)})",
                )
            )

    first_with_name: dict[str, int] = {}
    for i, client in clients:
        name = client.get("name")
        if not isinstance(name, str):
            continue
        if name in first_with_name:
            problems.append(
                Problem(
                    f"clients[{i}].name",
                    f"duplicate client name {show(name)} (clients[{first_with_name[name]}] "
                    "has it too)",
                )
            )
        else:
            first_with_name[name] = i

    hp = [(i, c) for i, c in clients if c.get("role") == "hp"]
    for i, client in clients:
        if client.get("latency_target_ms") is not None and client.get("role") != "hp":
            problems.append(
                Problem(
                    f"clients[{i}].latency_target_ms",
                    "only the HP client has a latency target (it sets how much BE work may "
                    "queue ahead of its requests)",
                )
            )
    for i, _client in hp[1:]:
        problems.append(
            Problem(
                f"clients[{i}].role",
                f"at most one client may have role 'hp' (clients[{hp[0][0]}] already has it)",
            )
        )
    policy = POLICIES.get(run.get("policy")) if isinstance(run.get("policy"), str) else None
    if policy is not None and policy.needs_hp and not hp and raw_clients:
        problems.append(
            Problem(
                "clients",
                f"policy {policy.name!r} needs exactly one client with role 'hp' (got none)",
            )
        )

    problems += _share_problems(run, clients, policy)

    sharing = run.get("sharing")
    if policy is not None and SHARING.problem(sharing) is None and sharing is not None:
        reason = policy.sharing_problem(sharing)
        if reason is not None:
            problems.append(Problem("run.sharing", reason))

    if policy is not None and not policy.sm_partitions:
        for i, client in clients:
            if client.get("sm_percent") is not None:
                partitioned = ", ".join(p.name for p in POLICIES.values() if p.sm_partitions)
                problems.append(
                    Problem(
                        f"clients[{i}].sm_percent",
                        f"policy {policy.name!r} has no SM partitions; sm_percent applies "
                        f"under {partitioned} only",
                    )
                )

    if requests is not None and len(hp) <= 1:
        hp_mode = hp[0][1].get("mode") if hp else None
        if hp_mode != "infer":
            why = (
                "there is no client with role 'hp'"
                if not hp
                else f"the hp client clients[{hp[0][0]}] has mode {show(hp_mode)}"
            )
            problems.append(
                Problem(
                    "run.requests",
                    f"counts requests served by an inference client with role 'hp', but {why}; "
                    "use duration_s instead",
                )
            )
    return problems
