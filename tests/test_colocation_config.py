"""jobs.json validation: every rule reports `field.path: message`, all problems at once."""

from __future__ import annotations

import copy
import json
import math
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from colocation.config import (
    EXAMPLE_JOBS,
    ClientConfig,
    ClosedArrivals,
    JobsConfig,
    JobsConfigError,
    PoissonArrivals,
    TraceArrivals,
    load_jobs,
    parse_jobs,
    resolve_profiles,
)
from colocation.policies import POLICIES, POLICY_NAMES, get_policy
from orion_common.errors import OrionError

DATA = Path(__file__).parent / "data" / "jobs"
EXAMPLE_FILE = Path(__file__).parent.parent / "colocation" / "examples" / "resnet50_pair.json"
TRAIN_PROFILE_COMMAND = "orion profile resnet50 --mode train --batch-size 32 --dtype fp32"
ALL_POLICIES = "dedicated, timeslice, mps, mps-priority, mps-share, priority, reef, orion, quota"
SIZES = (
    "use bytes or a number with k, M, G (powers of 10) or Ki, Mi, Gi (powers of 2), "
    "optionally followed by B"
)


def base() -> dict[str, Any]:
    """A valid config (orion policy, HP inference + BE training) to break one rule at a time."""
    return {
        "run": {"policy": "orion", "duration_s": 30},
        "clients": [
            {
                "name": "hp",
                "workload": "resnet50",
                "mode": "infer",
                "batch_size": 4,
                "role": "hp",
                "arrivals": {"kind": "poisson", "rate_per_s": 80},
            },
            {"name": "be", "workload": "resnet50", "mode": "train", "batch_size": 32},
        ],
    }


def problems(data: Any, base_dir: Path = DATA) -> list[str]:
    with pytest.raises(JobsConfigError) as info:
        parse_jobs(data, base_dir)
    error = info.value
    lines = error.message.splitlines()
    # the message is a header plus one indented `field: message` line per problem
    assert lines[1:] == [f"  {problem}" for problem in error.problems]
    n = len(error.problems)
    assert lines[0] == f"invalid jobs config ({n} problem{'' if n == 1 else 's'}):"
    return [str(problem) for problem in error.problems]


def edit(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set (or with ``...`` delete) the value at a dotted path such as ``clients.1.batch_size``."""

    def apply(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        key: Any = int(last) if isinstance(node, list) else last
        if value is ...:
            del node[key]
        else:
            node[key] = value

    return apply


def trace(name: str) -> str:
    return str(DATA / "traces" / name)


# (id, edits, the exact problem lines)
CASES: list[tuple[str, list[Callable[[dict[str, Any]], None]], list[str]]] = [
    (
        "unknown policy",
        [edit("run.policy", "foo")],
        [f"run.policy: must be one of {ALL_POLICIES} (got 'foo')"],
    ),
    (
        "policy not a string",
        [edit("run.policy", 3)],
        ["run.policy: must be a string (got 3)"],
    ),
    ("missing policy", [edit("run.policy", ...)], ["run.policy: required field is missing"]),
    (
        "both duration and requests",
        [edit("run.requests", 100)],
        ["run: set only one of duration_s and requests (got duration_s=30, requests=100)"],
    ),
    (
        "neither duration nor requests",
        [edit("run.duration_s", ...)],
        [
            "run: set exactly one of duration_s (seconds to measure) or requests "
            "(HP requests to serve)"
        ],
    ),
    ("zero duration", [edit("run.duration_s", 0)], ["run.duration_s: must be > 0 (got 0)"]),
    (
        "infinite duration",
        [edit("run.duration_s", math.inf)],
        ["run.duration_s: must be a finite number (got inf)"],
    ),
    (
        "zero requests",
        [edit("run.duration_s", ...), edit("run.requests", 0)],
        ["run.requests: must be >= 1 (got 0)"],
    ),
    (
        "requests with a training hp client",
        [
            edit("run.duration_s", ...),
            edit("run.requests", 100),
            edit("clients.0.mode", "train"),
            edit("clients.0.arrivals", ...),
        ],
        [
            "run.requests: counts requests served by an inference client with role 'hp', but "
            "the hp client clients[0] has mode 'train'; use duration_s instead"
        ],
    ),
    (
        "requests without an hp client",
        [
            edit("run.policy", "mps"),
            edit("run.duration_s", ...),
            edit("run.requests", 100),
            edit("clients.0.role", "be"),
        ],
        [
            "run.requests: counts requests served by an inference client with role 'hp', but "
            "there is no client with role 'hp'; use duration_s instead"
        ],
    ),
    (
        "negative warmup",
        [edit("run.warmup_steps", -1)],
        ["run.warmup_steps: must be >= 0 (got -1)"],
    ),
    ("negative seed", [edit("run.seed", -1)], ["run.seed: must be >= 0 (got -1)"]),
    ("gpu as a string", [edit("run.gpu", "0")], ["run.gpu: must be an integer (got '0')"]),
    (
        "trace not a bool",
        [edit("run.trace", "yes")],
        ["run.trace: must be true or false (got 'yes')"],
    ),
    (
        "zero queue limit",
        [edit("run.thresholds", {"queue_limit_us": 0})],
        ["run.thresholds.queue_limit_us: must be > 0 (got 0)"],
    ),
    (
        "negative unknown-kernel threshold",
        [edit("run.thresholds", {"queue_limit_us": None, "unknown_kernel_us": -5.5})],
        ["run.thresholds.unknown_kernel_us: must be > 0 (got -5.5)"],
    ),
    (
        "unknown hp completion mode",
        [edit("run.hp_completion", "fast")],
        ["run.hp_completion: must be one of estimate, gpu-write (got 'fast')"],
    ),
    (
        "hp completion mode not a string",
        [edit("run.hp_completion", True)],
        ["run.hp_completion: must be one of estimate, gpu-write (got true)"],
    ),
    (
        "unknown be gate",
        [edit("run.be_gate", "gpu-side")],
        ["run.be_gate: must be one of cpu, gpu (got 'gpu-side')"],
    ),
    (
        "unknown be graph gate",
        [edit("run.be_graph_gate", "outside")],
        ["run.be_graph_gate: must be one of inside, whole, segments (got 'outside')"],
    ),
    (
        "misspelt run field",
        [edit("run.duraton_s", 3)],
        ["run.duraton_s: unknown field; did you mean 'duration_s'?"],
    ),
    (
        "unknown top-level field",
        [edit("jobs", [])],
        ["jobs: unknown field; allowed: run, clients"],
    ),
    ("no clients", [edit("clients", [])], ["clients: must list at least one client"]),
    ("clients not a list", [edit("clients", {})], ["clients: must be a JSON list (got {})"]),
    (
        "duplicate names",
        [edit("clients.1.name", "hp")],
        ["clients[1].name: duplicate client name 'hp' (clients[0] has it too)"],
    ),
    (
        "name with a space",
        [edit("clients.1.name", "my client")],
        [
            "clients[1].name: must be 1-32 characters of letters, digits, '_' or '-' "
            "(got 'my client')"
        ],
    ),
    (
        "empty name",
        [edit("clients.1.name", "")],
        ["clients[1].name: must be 1-32 characters of letters, digits, '_' or '-' (got '')"],
    ),
    (
        "name too long",
        [edit("clients.1.name", "b" * 33)],
        [
            "clients[1].name: must be 1-32 characters of letters, digits, '_' or '-' "
            f"(got '{'b' * 33}')"
        ],
    ),
    ("missing name", [edit("clients.1.name", ...)], ["clients[1].name: required field is missing"]),
    (
        "unknown mode",
        [edit("clients.1.mode", "training")],
        ["clients[1].mode: must be one of infer, train (got 'training')"],
    ),
    (
        "zero batch size",
        [edit("clients.1.batch_size", 0)],
        ["clients[1].batch_size: must be >= 1 (got 0)"],
    ),
    (
        "batch size as a string",
        [edit("clients.1.batch_size", "32")],
        ["clients[1].batch_size: must be an integer (got '32')"],
    ),
    (
        "batch size as a bool",
        [edit("clients.1.batch_size", True)],
        ["clients[1].batch_size: must be an integer (got true)"],
    ),
    (
        "unknown dtype",
        [edit("clients.1.dtype", "fp16")],
        ["clients[1].dtype: must be one of fp32, bf16 (got 'fp16')"],
    ),
    (
        "unknown role",
        [edit("clients.1.role", "HP")],
        ["clients[1].role: must be one of hp, be (got 'HP')"],
    ),
    (
        "two hp clients",
        [edit("clients.1.role", "hp")],
        ["clients[1].role: at most one client may have role 'hp' (clients[0] already has it)"],
    ),
    (
        "two hp clients under a policy without hp",
        [edit("run.policy", "timeslice"), edit("clients.1.role", "hp")],
        ["clients[1].role: at most one client may have role 'hp' (clients[0] already has it)"],
    ),
    (
        "no hp client under orion",
        [edit("clients.0.role", "be")],
        ["clients: policy 'orion' needs exactly one client with role 'hp' (got none)"],
    ),
    (
        "no hp client under mps-priority",
        [edit("run.policy", "mps-priority"), edit("clients.0.role", ...)],
        ["clients: policy 'mps-priority' needs exactly one client with role 'hp' (got none)"],
    ),
    (
        "arrivals on a training client",
        [edit("clients.1.arrivals", {"kind": "closed"})],
        [
            "clients[1].arrivals: only inference clients take arrivals; a training client runs "
            'back-to-back iterations (remove "arrivals" or set mode to "infer")'
        ],
    ),
    (
        "unknown arrival kind",
        [edit("clients.0.arrivals", {"kind": "poison", "rate_per_s": 80})],
        ["clients[0].arrivals.kind: must be one of closed, poisson, uniform, trace (got 'poison')"],
    ),
    (
        "arrival kind missing",
        [edit("clients.0.arrivals", {"rate_per_s": 80})],
        [
            "clients[0].arrivals.kind: required field is missing "
            "(one of closed, poisson, uniform, trace)"
        ],
    ),
    (
        "arrivals not an object",
        [edit("clients.0.arrivals", "poisson")],
        ["clients[0].arrivals: must be a JSON object (got 'poisson')"],
    ),
    (
        "negative poisson rate",
        [edit("clients.0.arrivals.rate_per_s", -80)],
        ["clients[0].arrivals.rate_per_s: must be > 0 (got -80)"],
    ),
    (
        "zero uniform rate",
        [edit("clients.0.arrivals", {"kind": "uniform", "rate_per_s": 0})],
        ["clients[0].arrivals.rate_per_s: must be > 0 (got 0)"],
    ),
    (
        "poisson without a rate",
        [edit("clients.0.arrivals", {"kind": "poisson"})],
        ["clients[0].arrivals.rate_per_s: required field is missing"],
    ),
    (
        "negative think time",
        [edit("clients.0.arrivals", {"kind": "closed", "think_ms": -1})],
        ["clients[0].arrivals.think_ms: must be >= 0 (got -1)"],
    ),
    (
        "rate on closed arrivals",
        [edit("clients.0.arrivals", {"kind": "closed", "rate_per_s": 80})],
        [
            "clients[0].arrivals.rate_per_s: unknown field for closed arrivals; "
            "allowed: kind, think_ms"
        ],
    ),
    (
        "trace file missing",
        [edit("clients.0.arrivals", {"kind": "trace", "path": "traces/none.txt"})],
        [
            f"clients[0].arrivals.path: file not found: {DATA / 'traces' / 'none.txt'} "
            f"(relative paths are resolved against {DATA})"
        ],
    ),
    (
        "trace path is a folder",
        [edit("clients.0.arrivals", {"kind": "trace", "path": str(DATA / "traces")})],
        [f"clients[0].arrivals.path: not a file: {DATA / 'traces'}"],
    ),
    (
        "trace path not a string",
        [edit("clients.0.arrivals", {"kind": "trace", "path": 5})],
        ["clients[0].arrivals.path: must be a path string (got 5)"],
    ),
    (
        "empty trace",
        [edit("clients.0.arrivals", {"kind": "trace", "path": trace("empty.txt")})],
        [
            f"clients[0].arrivals.path: {trace('empty.txt')}: no inter-arrival times in the "
            "file (only blanks or comments)"
        ],
    ),
    (
        "negative trace value",
        [edit("clients.0.arrivals", {"kind": "trace", "path": trace("negative.txt")})],
        [
            f"clients[0].arrivals.path: {trace('negative.txt')}:2: inter-arrival time must be "
            ">= 0 ms (got -1.5)"
        ],
    ),
    (
        "trace value not a number",
        [edit("clients.0.arrivals", {"kind": "trace", "path": trace("not_a_number.txt")})],
        [
            f"clients[0].arrivals.path: {trace('not_a_number.txt')}:2: 'abc' is not a number "
            "(one inter-arrival time in milliseconds per line)"
        ],
    ),
    (
        "repeating an all-zero trace",
        [edit("clients.0.arrivals", {"kind": "trace", "path": trace("zeros.txt")})],
        [
            "clients[0].arrivals.repeat: every inter-arrival time in the trace is 0, so "
            "repeating it would issue endless requests at one instant; set repeat to false or "
            "add a non-zero gap"
        ],
    ),
    (
        "profile file missing",
        [edit("clients.0.profile", "profiles/missing.profile.csv")],
        [
            f"clients[0].profile: file not found: {DATA / 'profiles' / 'missing.profile.csv'} "
            f"(relative paths are resolved against {DATA})"
        ],
    ),
    (
        "misspelt client field",
        [edit("clients.1.batchsize", 32)],
        ["clients[1].batchsize: unknown field; did you mean 'batch_size'?"],
    ),
    (
        "unknown client field",
        [edit("clients.1.priority", 1)],
        [
            "clients[1].priority: unknown field; allowed: name, workload, mode, batch_size, "
            "dtype, role, arrivals, profile, profile_source, options, cuda_graph, sm_percent, "
            "min_util, max_util, latency_target_ms, memory_limit"
        ],
    ),
    (
        "cuda_graph on a training client",
        [edit("clients.1.cuda_graph", True)],
        [
            "clients[1].cuda_graph: applies to inference clients only; training runs eagerly "
            '(remove "cuda_graph" or set mode to "infer")'
        ],
    ),
    (
        "cuda_graph not a boolean",
        [edit("clients.0.cuda_graph", 1)],
        ["clients[0].cuda_graph: must be true or false (got 1)"],
    ),
    (
        "cuda_graph on a workload that cannot be captured",
        [edit("clients.0.workload", "synthetic-memory"), edit("clients.0.cuda_graph", True)],
        [
            "clients[0].cuda_graph: workload 'synthetic-memory' cannot be captured: synthetic "
            "kernels exist to test per-launch gating and are only run eagerly; serve a model "
            "workload as a graph instead"
        ],
    ),
    (
        "max_util above 1",
        [edit("clients.1.max_util", 1.5)],
        ["clients[1].max_util: max_util must be between 0 and 1 (got 1.5)"],
    ),
    (
        "min_util negative",
        [edit("clients.1.min_util", -0.1)],
        ["clients[1].min_util: min_util must be between 0 and 1 (got -0.1)"],
    ),
    (
        "max_util below min_util",
        [edit("clients.1.min_util", 0.5), edit("clients.1.max_util", 0.3)],
        ["clients[1]: min_util 0.5 is above max_util 0.3"],
    ),
    (
        "min_util adding up above 1",
        [
            edit("run.policy", "quota"),
            edit("clients.0.min_util", 0.6),
            edit("clients.1.min_util", 0.5),
        ],
        ["clients: min_util adds up to 1.1 over the clients; at most 1"],
    ),
    (
        "shares under a policy that cannot hold work",
        [edit("run.policy", "mps"), edit("clients.1.max_util", 0.5)],
        [
            "clients[1].max_util: policy 'mps' cannot hold work back; GPU-time shares apply "
            "under priority, reef, orion, quota"
        ],
    ),
    (
        "shares with the CPU gate",
        [edit("run.be_gate", "cpu"), edit("clients.1.min_util", 0.2)],
        ["run.be_gate: GPU-time shares are held on the GPU: use 'gpu'"],
    ),
    (
        "shares on the HP client of a policy that never holds it",
        [edit("clients.0.max_util", 0.5)],
        [
            "clients[0].max_util: policy 'orion' never holds HP work back; GPU-time shares "
            "apply to BE clients here (every client under policy 'quota')"
        ],
    ),
    (
        "quota window not positive",
        [edit("run.quota_window_s", 0)],
        ["run.quota_window_s: must be > 0 (got 0)"],
    ),
    (
        "sm_percent zero",
        [edit("run.policy", "mps-share"), edit("clients.1.sm_percent", 0)],
        ["clients[1].sm_percent: must be >= 1 (got 0)"],
    ),
    (
        "sm_percent above 100",
        [edit("run.policy", "mps-share"), edit("clients.1.sm_percent", 101)],
        ["clients[1].sm_percent: must be <= 100 (got 101)"],
    ),
    (
        "sm_percent not an integer",
        [edit("run.policy", "mps-share"), edit("clients.1.sm_percent", 50.5)],
        ["clients[1].sm_percent: must be an integer (got 50.5)"],
    ),
    (
        "sm_percent under a policy without partitions",
        [edit("run.policy", "mps-priority"), edit("clients.1.sm_percent", 50)],
        [
            "clients[1].sm_percent: policy 'mps-priority' has no SM partitions; sm_percent "
            "applies under mps-share only"
        ],
    ),
    (
        "memory_limit with an unknown suffix",
        [edit("clients.1.memory_limit", "2XB")],
        [f'clients[1].memory_limit: "2XB" is not a size: {SIZES}'],
    ),
    (
        "memory_limit with a lower-case suffix",
        [edit("clients.1.memory_limit", "4gib")],
        [
            'clients[1].memory_limit: "4gib" is not a size: suffixes are case-sensitive '
            f'("gib" is not "GiB"); {SIZES}'
        ],
    ),
    (
        "memory_limit negative",
        [edit("clients.1.memory_limit", -1)],
        [f"clients[1].memory_limit: -1 is not a size: it must be at least 1 byte; {SIZES}"],
    ),
    (
        "memory_limit zero",
        [edit("clients.0.memory_limit", 0)],
        [f"clients[0].memory_limit: 0 is not a size: it must be at least 1 byte; {SIZES}"],
    ),
    (
        "memory_limit true",
        [edit("clients.1.memory_limit", True)],
        [f"clients[1].memory_limit: true is not a size: {SIZES}"],
    ),
    (
        "memory_limit a fraction of a byte",
        [edit("clients.1.memory_limit", "0.5")],
        [f'clients[1].memory_limit: "0.5" is not a size: it must be at least 1 byte; {SIZES}'],
    ),
    (
        "latency target on a BE client",
        [edit("clients.1.latency_target_ms", 5)],
        [
            "clients[1].latency_target_ms: only the HP client has a latency target (it sets how "
            "much BE work may queue ahead of its requests)"
        ],
    ),
    (
        "latency target zero",
        [edit("clients.0.latency_target_ms", 0)],
        ["clients[0].latency_target_ms: must be > 0 (got 0)"],
    ),
    (
        "options not an object",
        [edit("clients.1.options", [])],
        ["clients[1].options: must be a JSON object (got [])"],
    ),
    (
        "sharing unknown",
        [edit("run.sharing", "mig")],
        ["run.sharing: must be one of mps, timeslice (got 'mig')"],
    ),
    (
        "timeslice sharing under mps-share",
        [edit("run.policy", "mps-share"), edit("run.sharing", "timeslice")],
        [
            "run.sharing: policy 'mps-share' runs under 'mps' only: its SM shares are MPS's "
            "(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE)"
        ],
    ),
    (
        "timeslice sharing under mps-priority",
        [edit("run.policy", "mps-priority"), edit("run.sharing", "timeslice")],
        [
            "run.sharing: policy 'mps-priority' runs under 'mps' only: it is MPS sharing by "
            "definition (priorities order MPS clients' work)"
        ],
    ),
    (
        "timeslice sharing under mps",
        [edit("run.policy", "mps"), edit("run.sharing", "timeslice")],
        ["run.sharing: policy 'mps' runs under 'mps' only: it is MPS sharing by definition"],
    ),
    (
        "timeslice sharing under priority",
        [edit("run.policy", "priority"), edit("run.sharing", "timeslice")],
        [
            "run.sharing: policy 'priority' runs under 'mps' only: stream priorities order work "
            "inside one context or between MPS clients, not between contexts the driver switches"
        ],
    ),
    (
        "mps sharing under timeslice",
        [edit("run.policy", "timeslice"), edit("run.sharing", "mps")],
        [
            "run.sharing: policy 'timeslice' runs under 'timeslice' only: it is the driver's "
            "time-slicing of separate contexts, without MPS"
        ],
    ),
    (
        "sharing under dedicated",
        [edit("run.policy", "dedicated"), edit("run.sharing", "mps")],
        ["run.sharing: policy 'dedicated' runs each client alone: nothing is shared"],
    ),
]


@pytest.mark.parametrize(("edits", "expected"), [pytest.param(e, x, id=i) for i, e, x in CASES])
def test_each_rule_reports_field_and_message(
    edits: list[Callable[[dict[str, Any]], None]], expected: list[str]
) -> None:
    data = base()
    for apply in edits:
        apply(data)
    assert problems(data) == expected


def test_unknown_workload_lists_the_known_ones() -> None:
    data = base()
    data["clients"][1]["workload"] = "resnet5O"
    [problem] = problems(data)
    assert problem.startswith("clients[1].workload: unknown workload 'resnet5O'; known workloads: ")
    for name in (
        "resnet50",
        "resnet101",
        "mobilenet_v2",
        "bert",
        "gpt2",
        "synthetic-compute",
        "synthetic-memory",
    ):
        assert name in problem


def test_options_are_checked_against_the_workload() -> None:
    data = base()
    data["clients"][1]["options"] = {"seq_len": 128}
    [problem] = problems(data)
    assert problem.startswith(
        "clients[1].options: unknown option 'seq_len' for workload 'resnet50'"
    )

    data["clients"][1].update(workload="bert", options={"seq_len": 128})
    config = parse_jobs(data, DATA)
    assert config.clients[1].options == {"seq_len": 128}

    data["clients"][1]["options"] = {"seq_len": 0}  # values are checked too
    [problem] = problems(data)
    assert problem.startswith("clients[1].options: option 'seq_len' of workload 'bert' must be")


def test_every_problem_is_reported_at_once_in_file_order() -> None:
    data = base()
    data["clients"][1]["batch_size"] = 0
    data["clients"][1]["name"] = "hp"
    data["run"]["policy"] = "foo"
    data["clients"][0]["arrivals"]["rate_per_s"] = -1
    assert problems(data) == [
        f"run.policy: must be one of {ALL_POLICIES} (got 'foo')",
        "clients[0].arrivals.rate_per_s: must be > 0 (got -1)",
        "clients[1].batch_size: must be >= 1 (got 0)",
        "clients[1].name: duplicate client name 'hp' (clients[0] has it too)",
    ]


def test_not_an_object() -> None:
    assert problems([1, 2]) == ['must be a JSON object with "run" and "clients" (got a list)']


def test_defaults() -> None:
    data = base()
    data["clients"][0].pop("arrivals")
    config = parse_jobs(data, DATA)
    run = config.run
    assert (run.duration_s, run.requests, run.warmup_steps, run.seed) == (30, None, 20, 1)
    assert run.output_dir == DATA / "runs"
    assert (run.trace, run.gpu) == (False, 0)
    assert (run.thresholds.queue_limit_us, run.thresholds.unknown_kernel_us) == (None, None)
    assert run.hp_completion == "estimate"
    assert run.be_gate == "gpu"
    assert run.be_graph_gate is None
    assert config.be_graph_gate == "segments"  # orion's default sharing is time-sliced
    assert run.quota_window_s == 1.0
    hp, be = config.clients
    assert hp.arrivals == ClosedArrivals(kind="closed", think_ms=0.0)
    assert be.arrivals is None
    assert (be.dtype, be.role, be.profile, be.options) == ("fp32", "be", None, {})
    assert (hp.memory_limit, be.memory_limit) == (None, None)
    assert config.hp_client is hp
    assert config.policy is POLICIES["orion"]


@pytest.mark.parametrize("mode", ["estimate", "gpu-write"])
def test_hp_completion_modes(mode: str) -> None:
    data = base()
    data["run"]["hp_completion"] = mode
    config = parse_jobs(data, DATA)
    assert config.run.hp_completion == mode
    assert config.to_json_dict()["run"]["hp_completion"] == mode  # as run.json records it


@pytest.mark.parametrize("policy", ["reef", "orion", "quota"])
@pytest.mark.parametrize("sharing", ["mps", "timeslice"])
def test_gating_policies_run_under_mps_or_time_sliced(policy: str, sharing: str) -> None:
    data = base()
    data["run"].update(policy=policy, sharing=sharing)
    config = parse_jobs(data, DATA)
    assert config.policy.name == policy
    assert config.policy.sharing == sharing
    assert config.policy.uses_mps == (sharing == "mps")  # what the runner starts
    assert config.to_json_dict()["run"]["sharing"] == sharing  # as run.json records it


@pytest.mark.parametrize(
    ("policy", "sharing"),
    [
        ("dedicated", None),
        ("timeslice", "timeslice"),
        ("mps", "mps"),
        ("mps-priority", "mps"),
        ("mps-share", "mps"),
        ("priority", "mps"),
        ("reef", "mps"),
        ("orion", "mps"),
        ("quota", "mps"),
    ],
)
def test_each_policy_shares_the_gpu_its_default_way(policy: str, sharing: str | None) -> None:
    data = base()
    data["run"]["policy"] = policy
    if policy == "mps-share":
        data["clients"][1]["sm_percent"] = 50
    config = parse_jobs(data, DATA)
    assert config.run.sharing is None
    assert config.policy.sharing == sharing
    assert config.policy.uses_mps == (sharing == "mps")
    # run.json records the mode used, so a report never reads it by a later default.
    assert config.to_json_dict()["run"]["sharing"] == sharing


def test_a_policy_override_keeps_an_explicit_sharing_and_checks_it(tmp_path: Path) -> None:
    from colocation.overrides import with_overrides

    data = base()
    data["run"]["sharing"] = "timeslice"
    config = parse_jobs(data, DATA)
    source = tmp_path / "jobs.json"
    assert with_overrides(config, source=source, policy="reef").policy.sharing == "timeslice"
    with pytest.raises(JobsConfigError, match="policy 'mps' runs under 'mps' only"):
        with_overrides(config, source=source, policy="mps")


@pytest.mark.parametrize(
    "policy", ["dedicated", "timeslice", "mps", "mps-priority", "mps-share", "priority", "reef"]
)
def test_a_policy_override_of_the_example_runs_that_policys_own_defaults(
    policy: str, tmp_path: Path
) -> None:
    """`orion colocate --example > jobs.json && orion colocate jobs.json --policy P` (the
    README's second command): the example leaves sharing and the BE graph gate to its policy,
    so the override gets P's defaults, exactly as P written in the file would."""
    from colocation.config import example_jobs
    from colocation.overrides import with_overrides

    source = tmp_path / "jobs.json"
    source.write_text(example_jobs())
    overridden = with_overrides(load_jobs(source), source=source, policy=policy)
    written = json.loads(example_jobs())
    written["run"]["policy"] = policy
    in_file = parse_jobs(written, tmp_path)
    assert overridden.policy == in_file.policy
    assert overridden.policy.sharing == POLICIES[policy].sharing  # the table's default
    assert overridden.be_graph_gate == in_file.be_graph_gate
    assert overridden.run.sharing is None and overridden.run.be_graph_gate is None


def test_a_policy_override_keeps_an_explicit_be_graph_gate(tmp_path: Path) -> None:
    from colocation.overrides import with_overrides

    data = base()
    data["run"]["be_graph_gate"] = "inside"  # orion's time-sliced default would be "segments"
    source = tmp_path / "jobs.json"
    config = with_overrides(parse_jobs(data, DATA), source=source, policy="reef")
    assert config.policy.sharing == "mps"
    assert config.be_graph_gate == "inside"
    data["run"]["be_graph_gate"] = None
    data["run"]["policy"] = "reef"
    assert with_overrides(parse_jobs(data, DATA), source=source, policy="orion").be_graph_gate == (
        "segments"
    )


@pytest.mark.parametrize("policy", ["dedicated", "timeslice", "mps"])
def test_policies_without_hp_accept_zero_hp_clients(policy: str) -> None:
    data = base()
    data["run"]["policy"] = policy
    data["clients"][0]["role"] = "be"
    assert parse_jobs(data, DATA).hp_client is None


@pytest.mark.parametrize(("limit", "expected"), [("4GiB", 4 * 2**30), (" 500M ", 500 * 10**6)])
def test_memory_limit_is_kept_in_bytes(limit: str, expected: int) -> None:
    data = base()
    data["clients"][1]["memory_limit"] = limit
    data["clients"][0]["memory_limit"] = 1_000_000
    config = parse_jobs(data, DATA)
    assert [c.memory_limit for c in config.clients] == [1_000_000, expected]
    stored = config.to_json_dict()  # run.json records bytes, which validate again as is
    assert stored["clients"][1]["memory_limit"] == expected
    assert parse_jobs(stored, DATA).to_json_dict() == stored


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_memory_limit_applies_under_every_policy(policy: str) -> None:
    # The runner gives every client the preload library, which enforces the limit, under every
    # policy (passthrough ones included), so no policy refuses the field.
    data = base()
    data["run"]["policy"] = policy
    data["clients"][1]["memory_limit"] = "2GiB"
    assert parse_jobs(data, DATA).clients[1].memory_limit == 2 * 2**30


def test_requests_with_an_inference_hp_client() -> None:
    data = base()
    data["run"] = {"policy": "orion", "requests": 500}
    assert parse_jobs(data, DATA).run.requests == 500


def test_trace_without_repeat_may_be_all_zeros() -> None:
    data = base()
    data["clients"][0]["arrivals"] = {"kind": "trace", "path": trace("zeros.txt"), "repeat": False}
    arrivals = parse_jobs(data, DATA).clients[0].arrivals
    assert isinstance(arrivals, TraceArrivals)
    assert arrivals.repeat is False


# ---------------------------------------------------------------------------- files


def test_relative_paths_resolve_against_the_jobs_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the working directory must not matter
    config = load_jobs(DATA / "pair_relative.json")
    hp = config.clients[0]
    assert isinstance(hp.arrivals, TraceArrivals)
    assert hp.arrivals.path == DATA / "traces" / "steady.txt"
    assert hp.profile == DATA / "profiles" / "hp.profile.csv"
    assert config.run.output_dir == DATA / "out"


def test_relative_paths_follow_the_file_when_it_moves(tmp_path: Path) -> None:
    shutil.copytree(DATA, tmp_path / "copy")
    config = load_jobs(tmp_path / "copy" / "pair_relative.json")
    assert config.clients[0].profile == tmp_path / "copy" / "profiles" / "hp.profile.csv"


def test_malformed_json_reports_line_and_column() -> None:
    path = DATA / "malformed.json"
    with pytest.raises(OrionError) as info:
        load_jobs(path)
    assert info.value.message == f"{path}:5:5: Expecting ',' delimiter"
    assert info.value.hint is not None


def test_relative_jobs_path_is_reported_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(DATA)
    with pytest.raises(OrionError, match=r"^malformed\.json:5:5: Expecting ',' delimiter$"):
        load_jobs("malformed.json")


def test_empty_file_is_a_json_error(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    path.write_text("")
    with pytest.raises(OrionError, match=r"jobs\.json:1:1: Expecting value$"):
        load_jobs(path)


def test_duplicate_keys_are_an_error() -> None:
    with pytest.raises(OrionError, match="key 'duration_s' appears twice in one object"):
        load_jobs(DATA / "duplicate_key.json")


def test_missing_jobs_file(tmp_path: Path) -> None:
    with pytest.raises(OrionError) as info:
        load_jobs(tmp_path / "jobs.json")
    assert info.value.message == f"jobs file not found: {tmp_path / 'jobs.json'}"
    assert "--example" in (info.value.hint or "")


def test_jobs_path_is_a_folder(tmp_path: Path) -> None:
    with pytest.raises(OrionError, match=r"^jobs file is not a file: "):
        load_jobs(tmp_path)


def test_load_jobs_names_the_file_in_its_header(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    data = base()
    data["clients"][1]["batch_size"] = 0
    path.write_text(json.dumps(data))
    with pytest.raises(JobsConfigError) as info:
        load_jobs(path)
    assert info.value.message == (
        f"invalid jobs file {path} (1 problem):\n  clients[1].batch_size: must be >= 1 (got 0)"
    )


def test_example_is_valid_and_matches_the_shipped_file() -> None:
    assert EXAMPLE_FILE.read_text() == EXAMPLE_JOBS
    config = load_jobs(EXAMPLE_FILE)
    assert config.run.policy == "orion"
    assert config.run.duration_s == 30
    hp, be = config.clients
    assert (hp.workload, hp.mode, hp.batch_size, hp.role) == ("resnet50", "infer", 4, "hp")
    assert hp.arrivals == PoissonArrivals(kind="poisson", rate_per_s=80)
    assert (be.workload, be.mode, be.batch_size, be.role) == ("resnet50", "train", 32, "be")


def test_example_is_package_data_shipped_in_the_wheel() -> None:
    from importlib import resources

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    from colocation.config import EXAMPLE_PACKAGE_PATH, example_jobs

    # Read from the installed package (site-packages in a plain install, the checkout in an
    # editable one): the same text as the file in the repository.
    shipped = resources.files("colocation") / EXAMPLE_PACKAGE_PATH[0] / EXAMPLE_PACKAGE_PATH[1]
    assert shipped.read_text(encoding="utf-8") == EXAMPLE_FILE.read_text(encoding="utf-8")
    assert example_jobs() == EXAMPLE_JOBS == EXAMPLE_FILE.read_text()
    # scikit-build-core puts every file of a listed package folder in the wheel (not ignored ones)
    pyproject = tomllib.loads((EXAMPLE_FILE.parents[2] / "pyproject.toml").read_text())
    assert "colocation" in pyproject["tool"]["scikit-build"]["wheel"]["packages"]
    excluded = pyproject["tool"]["scikit-build"]["wheel"].get("exclude", [])
    assert not any(pattern.startswith("colocation") for pattern in excluded)
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", str(EXAMPLE_FILE)],
        cwd=EXAMPLE_FILE.parents[2],
        capture_output=True,
        check=False,
    )
    assert ignored.returncode != 0, "the example must not be git-ignored"


def test_to_json_dict_is_plain_json_and_validates_again(tmp_path: Path) -> None:
    config = load_jobs(DATA / "pair_relative.json")
    data = config.to_json_dict()
    text = json.dumps(data)  # plain JSON types only
    assert data["clients"][0]["profile"] == str(DATA / "profiles" / "hp.profile.csv")
    assert data["clients"][0]["arrivals"]["path"] == str(DATA / "traces" / "steady.txt")
    # absolute paths: the stored config means the same from anywhere; it differs from the file
    # only in naming the sharing mode the policy's default chose, and the BE graph gate the
    # sharing mode's default chose
    again = parse_jobs(json.loads(text), tmp_path)
    assert again.to_json_dict() == data
    assert data["run"]["be_graph_gate"] == "segments"  # orion, time-sliced by default
    defaults = {"sharing": None, "be_graph_gate": None}
    assert again.model_copy(update={"run": again.run.model_copy(update=defaults)}) == config


def test_direct_construction_checks_cross_field_rules() -> None:
    data = copy.deepcopy(base())
    data["clients"][1]["role"] = "hp"
    with pytest.raises(ValueError, match="at most one client may have role 'hp'"):
        JobsConfig.model_validate(data)


# ---------------------------------------------------------------------------- profiles


def _default_in(folder: Path) -> Callable[[ClientConfig], Path]:
    return lambda c: folder / f"{c.workload}_{c.mode}_bs{c.batch_size}_{c.dtype}.profile.csv"


def _write_profile(path: Path, **meta: Any) -> Path:
    fields = {
        "format": "orion-profile",
        "version": 1,
        "gpu_name": "NVIDIA H200",
        "workload": "resnet50",
        "mode": "train",
        "batch_size": 32,
        "dtype": "fp32",
    }
    fields.update(meta)
    path.write_text(f"# orion-profile: 1\n# metadata: {json.dumps(fields)}\norder\n0\n")
    return path


def test_explicit_and_default_profiles(tmp_path: Path) -> None:
    config = load_jobs(DATA / "pair_relative.json")
    default = _write_profile(tmp_path / "resnet50_train_bs32_fp32.profile.csv")
    resolved = resolve_profiles(config, "NVIDIA H200", _default_in(tmp_path))
    assert resolved.paths == {"hp": DATA / "profiles" / "hp.profile.csv", "be": default}
    assert resolved.warnings == []


def test_missing_default_profile_when_the_policy_needs_one(tmp_path: Path) -> None:
    config = load_jobs(DATA / "pair_relative.json")
    with pytest.raises(JobsConfigError) as info:
        resolve_profiles(config, None, _default_in(tmp_path))
    missing = tmp_path / "resnet50_train_bs32_fp32.profile.csv"
    assert [str(p) for p in info.value.problems] == [
        f"clients[1].profile: policy 'orion' needs a kernel profile for client 'be', "
        f"and {missing} does not exist"
    ]
    assert info.value.message.splitlines()[0] == "kernel profiles for policy 'orion' (1 problem):"
    assert info.value.hint == f"run: {TRAIN_PROFILE_COMMAND}"


def test_every_missing_profile_gets_a_command(tmp_path: Path) -> None:
    data = base()
    data["clients"].append({"name": "be2", "workload": "bert", "mode": "infer", "batch_size": 8})
    data["clients"].append({"name": "be3", "workload": "bert", "mode": "infer", "batch_size": 8})
    config = parse_jobs(data, DATA)
    with pytest.raises(JobsConfigError) as info:
        resolve_profiles(config, None, _default_in(tmp_path))
    assert len(info.value.problems) == 4
    assert info.value.hint == (
        "run: orion profile resnet50 --mode infer --batch-size 4 --dtype fp32\n"
        "run: orion profile resnet50 --mode train --batch-size 32 --dtype fp32\n"
        "run: orion profile bert --mode infer --batch-size 8 --dtype fp32"
    )


@pytest.mark.parametrize("policy", ["dedicated", "timeslice", "mps", "mps-priority", "priority"])
def test_missing_profiles_are_fine_when_the_policy_does_not_use_them(
    policy: str, tmp_path: Path
) -> None:
    data = base()
    data["run"]["policy"] = policy
    config = parse_jobs(data, DATA)
    assert resolve_profiles(config, None, _default_in(tmp_path)).paths == {"hp": None, "be": None}


def test_clients_learned_online_need_no_profile_under_a_gating_policy(tmp_path: Path) -> None:
    data = base()
    for client in data["clients"]:
        client["profile_source"] = "online"
        client.pop("profile", None)
    config = parse_jobs(data, DATA)
    assert config.policy.needs_profiles
    assert resolve_profiles(config, None, _default_in(tmp_path)).paths == {"hp": None, "be": None}


def test_a_client_learned_online_cannot_also_name_a_profile() -> None:
    data = base()
    data["clients"][0]["profile"] = "profiles/hp.profile.csv"
    data["clients"][0]["profile_source"] = "online"
    (message,) = problems(data)
    assert message.startswith("clients[0].profile_source: a client learned online has no offline")


def test_profile_that_does_not_fit_the_client(tmp_path: Path) -> None:
    config = load_jobs(DATA / "pair_relative.json")
    path = _write_profile(tmp_path / "resnet50_train_bs32_fp32.profile.csv", batch_size=16)
    with pytest.raises(JobsConfigError) as info:
        resolve_profiles(config, "NVIDIA H200", _default_in(tmp_path))
    reason = "was made for batch_size 16, but client 'be' runs resnet50 train batch size 32 fp32"
    assert [str(p) for p in info.value.problems] == [f"clients[1].profile: {path} {reason}"]
    assert info.value.hint == f"run: {TRAIN_PROFILE_COMMAND}"


def test_profile_from_another_gpu_is_a_warning(tmp_path: Path) -> None:
    config = load_jobs(DATA / "pair_relative.json")
    path = _write_profile(
        tmp_path / "resnet50_train_bs32_fp32.profile.csv",
        gpu_name="NVIDIA H100 80GB HBM3",
        torch_version="2.11.0+cu130",
    )
    resolved = resolve_profiles(
        config,
        "NVIDIA H200",
        _default_in(tmp_path),
        environment={"gpu_name": "ignored: the gpu_name argument wins", "torch_version": "2.12.0"},
    )
    assert resolved.paths["be"] == path
    assert resolved.warnings == [
        f"client 'be' ({path}): profile was made with GPU NVIDIA H100 80GB HBM3, this machine "
        "has NVIDIA H200: SM needs and durations do not carry over to another GPU.",
        f"client 'be' ({path}): profile was made with PyTorch version 2.11.0+cu130, this machine "
        "has 2.12.0: the workload may launch other kernels.",
    ]


def test_file_that_is_not_a_profile(tmp_path: Path) -> None:
    config = load_jobs(DATA / "pair_relative.json")
    path = tmp_path / "resnet50_train_bs32_fp32.profile.csv"
    path.write_text("order,kernel_name\n")
    with pytest.raises(JobsConfigError, match="is not an orion profile"):
        resolve_profiles(config, None, _default_in(tmp_path))


# ---------------------------------------------------------------------------- policies


def test_policy_table() -> None:
    assert ", ".join(POLICY_NAMES) == ALL_POLICIES
    assert [p for p in POLICY_NAMES if POLICIES[p].uses_mps] == [
        "mps",
        "mps-priority",
        "mps-share",
        "priority",
        "reef",
        "orion",
        "quota",
    ]
    assert {p: POLICIES[p].native_policy for p in POLICY_NAMES} == {
        "dedicated": "passthrough",
        "timeslice": "passthrough",
        "mps": "passthrough",
        "mps-priority": "passthrough",
        "mps-share": "passthrough",
        "priority": "priority",
        "reef": "reef",
        "orion": "orion",
        "quota": "quota",
    }
    assert [p for p in POLICY_NAMES if POLICIES[p].needs_hp] == [
        "mps-priority",
        "mps-share",
        "priority",
        "reef",
        "orion",
    ]
    assert [p for p in POLICY_NAMES if POLICIES[p].needs_profiles] == ["reef", "orion"]
    assert [p for p in POLICY_NAMES if POLICIES[p].hp_stream_priority_by_client] == [
        "mps-priority",
        "mps-share",
    ]
    assert [p for p in POLICY_NAMES if POLICIES[p].sm_partitions] == ["mps-share"]
    assert [p for p in POLICY_NAMES if POLICIES[p].sequential] == ["dedicated"]


def test_unknown_policy_lookup() -> None:
    with pytest.raises(OrionError, match=f"unknown policy 'x'; known policies: {ALL_POLICIES}"):
        get_policy("x")


# ------------------------------------------------------------------------ CUDA graphs, SM shares


def test_graph_client_and_sm_shares_validate_under_mps_share() -> None:
    data = base()
    data["run"]["policy"] = "mps-share"
    data["clients"][0]["cuda_graph"] = True
    data["clients"][1]["sm_percent"] = 30
    config = parse_jobs(data, DATA)
    assert config.clients[0].cuda_graph is True
    assert config.clients[0].sm_percent is None
    assert config.clients[1].sm_percent == 30
    assert config.to_json_dict()["clients"][1]["sm_percent"] == 30


def test_a_graph_client_is_told_to_profile_with_cuda_graph(tmp_path: Path) -> None:
    data = base()
    data["clients"][0]["cuda_graph"] = True
    config = parse_jobs(data, DATA)
    with pytest.raises(JobsConfigError) as info:
        resolve_profiles(config, None, _default_in(tmp_path))
    assert "run: orion profile resnet50 --mode infer --batch-size 4 --dtype fp32 --cuda-graph" in (
        info.value.hint or ""
    )


@pytest.mark.parametrize(("client_graph", "profile_graph"), [(True, False), (False, True)])
def test_an_eager_profile_for_a_graph_client_is_a_warning(
    tmp_path: Path, client_graph: bool, profile_graph: bool
) -> None:
    data = base()
    data["clients"][0]["cuda_graph"] = client_graph
    config = parse_jobs(data, DATA)
    hp = _write_profile(
        tmp_path / "resnet50_infer_bs4_fp32.profile.csv",
        mode="infer",
        batch_size=4,
        cuda_graph=profile_graph,
    )
    _write_profile(tmp_path / "resnet50_train_bs32_fp32.profile.csv")
    resolved = resolve_profiles(config, "NVIDIA H200", _default_in(tmp_path))
    assert resolved.paths["hp"] == hp
    made, runs = ("eagerly", "as a CUDA graph") if client_graph else ("as a CUDA graph", "eagerly")
    assert len(resolved.warnings) == 1
    assert resolved.warnings[0].startswith(
        f"client 'hp' ({hp}): the profile was made {made} but the client runs {runs}; launches "
        "it does not list are gated as unknown work"
    )


@pytest.mark.parametrize(
    ("run", "gate"),
    [
        # under MPS with its HP in a context of its own, time-sliced against BE's server
        ({"policy": "orion"}, "segments"),
        ({"policy": "orion", "sharing": "timeslice"}, "segments"),
        ({"policy": "reef"}, "segments"),  # MPS by default, its HP in the server
        ({"policy": "reef", "sharing": "timeslice"}, "segments"),
        ({"policy": "orion", "be_graph_gate": "inside"}, "inside"),  # said: kept
        ({"policy": "reef", "be_graph_gate": "whole"}, "whole"),
    ],
)
def test_be_graphs_are_split_into_segments_unless_the_run_says(run: dict, gate: str) -> None:
    """Time-sliced, a BE graph stopped at a wait node inside it keeps its context on the GPU
    (docs/scheduler.md), and under MPS one reads as running to an HP's sampling holds, so a run
    splits BE graphs into segments unless it says otherwise; run.json records which."""
    data = base()
    data["run"].update(run)
    config = parse_jobs(data, DATA)
    assert config.be_graph_gate == gate
    assert config.to_json_dict()["run"]["be_graph_gate"] == gate
