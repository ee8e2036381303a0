"""orion.ray's pieces that need no cluster: the runtime_env it gives an actor, where a plan's GPUs
go among the nodes, what `orion doctor` says about Ray; and the two rules under them, a join's
memory limit from a fraction or a size, and the stand-in GPUs a node can be given."""

from __future__ import annotations

import importlib.util
import json
import socket
import sys
from pathlib import Path

import pytest

from orion.ray import checks
from orion.ray.agent import DaemonNeed, NodeAgent, NodeGpu, NodeInventory
from orion.ray.env import options, runtime_env
from orion.ray.plan import daemon_need, place
from orion_common import sysinfo
from orion_common.errors import OrionError, UsageError
from orion_daemon.admission import JoinRequest, check_join, memory_limit
from placement.plan_file import Plan, PlanClient, PlanGpu, write_plan

ROOT = Path(__file__).resolve().parents[1]
GIB = 1 << 30


# -- the runtime_env ------------------------------------------------------------------------------


def test_a_fraction_of_a_gpu_becomes_a_memory_fraction_unless_a_limit_is_given():
    half = runtime_env("be", num_gpus=0.5)["env_vars"]
    assert (half["ORION_ROLE"], half["ORION_MEMORY_FRACTION"]) == ("be", "0.5")
    assert "ORION_MEMORY_LIMIT" not in half
    # "none" is unset, as None is: the fraction still applies
    assert runtime_env("be", num_gpus=0.5, memory_limit="none")["env_vars"] == half
    limited = runtime_env("be", num_gpus=0.5, memory_limit="2GiB")["env_vars"]
    assert limited["ORION_MEMORY_LIMIT"] == str(2 * GIB) and "ORION_MEMORY_FRACTION" not in limited
    whole = runtime_env("hp", num_gpus=1, latency_target_ms=5, name="web")["env_vars"]
    assert "ORION_HP_CONTEXT" not in whole  # the daemon's, unless the HP says
    own = runtime_env("hp", hp_context="own")["env_vars"]
    assert own["ORION_HP_CONTEXT"] == "own"
    assert "ORION_MEMORY_FRACTION" not in whole
    assert (whole["ORION_NAME"], whole["ORION_LATENCY_TARGET_MS"]) == ("web", "5")


def test_the_runtime_env_loads_the_library_and_numbers_gpus_as_nvidia_smi_does():
    env = runtime_env("be")["env_vars"]
    library, kept = env["LD_PRELOAD"].split(":")
    assert library.endswith("liborion_preload.so") and Path(library).is_file()
    assert kept == "${LD_PRELOAD}"  # a preload of the node's own stays after orion's
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert set(env) == {"ORION_ROLE", "LD_PRELOAD", "CUDA_DEVICE_ORDER"}


def test_options_give_ray_and_orion_the_same_fraction():
    given = options("be", num_gpus=0.25, max_util=0.5)
    assert given["num_gpus"] == 0.25
    env = given["runtime_env"]["env_vars"]
    assert (env["ORION_MEMORY_FRACTION"], env["ORION_MAX_UTIL"]) == ("0.25", "0.5")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"role": "vip"}, "role must be 'hp' or 'be'"),
        ({"role": "be", "num_gpus": 2}, r"at most 1 \(got 2\)"),
        ({"role": "be", "num_gpus": 0}, "above 0"),
        ({"role": "be", "memory_limit": "lots"}, 'memory_limit: "lots" is not a size'),
        ({"role": "be", "num_gpus": float("nan")}, r"at most 1 \(got nan\)"),
        ({"role": "be", "max_util": 1.5}, r"max_util must be between 0 and 1 \(got 1.5\)"),
        ({"role": "be", "min_util": -0.2}, r"min_util must be between 0 and 1 \(got -0.2\)"),
        ({"role": "be", "min_util": 0.6, "max_util": 0.4}, "min_util 0.6 is above max_util"),
        ({"role": "be", "latency_target_ms": 5}, "a BE client has none"),
        ({"role": "hp", "latency_target_ms": -1}, r"must be a positive number \(got -1\)"),
        ({"role": "hp", "latency_target_ms": float("nan")}, r"positive number \(got nan\)"),
        ({"role": "hp", "latency_target_ms": float("inf")}, r"positive number \(got inf\)"),
        ({"role": "be", "name": "n" * 40}, "a client name has 1 to 31 bytes"),
        ({"role": "be", "hp_context": "own"}, "--hp-context is where the HP client runs"),
        ({"role": "hp", "hp_context": "apart"}, "hp_context: hp_context must be one of mps, own"),
    ],
)
def test_a_runtime_env_that_cannot_work_is_refused_where_it_is_declared(arguments, message):
    # the daemon's own join rules (admission.check_request), said where the actor is declared
    with pytest.raises(UsageError, match=message):
        runtime_env(**arguments)


def test_start_daemons_uses_the_sharing_orion_up_uses(tmp_path):
    """`orion up` without --sharing runs the policy's default (orion: MPS, its HP in a context
    of its own); the node agents start their daemons with the same, from the same rule."""
    import inspect

    from orion.ray.agent import DaemonOptions, start_daemons
    from orion_daemon.server import DaemonSettings
    from scheduler_core.sharing import default_sharing

    assert inspect.signature(start_daemons).parameters["sharing"].default is None
    agents = DaemonOptions()
    settings = DaemonSettings(
        gpu=0, sm_count=1, folder=tmp_path, policy=agents.policy, sharing=agents.sharing
    )
    assert settings.sharing == default_sharing("orion") == "mps"
    assert settings.hp_context == "own"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"policy": "nosuch"}, "policy must be one of"),
        ({"policy": "priority", "sharing": "timeslice"}, "runs under 'mps' only"),
        ({"sharing": "mig"}, "sharing must be one of mps, timeslice"),
        ({"queue_limit_us": float("inf")}, "--queue-limit-us must be a positive number"),
        ({"be_when_daemon_gone": "shut"}, "be_when_daemon_gone must be one of open, hold"),
        (
            {"be_when_daemon_gone": "hold", "daemon_gone_hold_s": -1.0},
            "daemon_gone_hold_s must be over 0",
        ),
        # issue 38's cases not listed before: each reached the cluster
        (
            {"daemon_gone_hold_s": 5.0},
            "daemon_gone_hold_s applies only when be_when_daemon_gone is 'hold'",
        ),
        ({"policy": "passthrough", "shares": True}, "GPU-time shares need a policy that holds"),
        ({"timeout_s": -1}, r"timeout_s must be a positive number of seconds \(got -1\)"),
        ({"timeout_s": float("nan")}, r"timeout_s must be a positive number of seconds \(got nan"),
        # `orion up`'s options by their declarations, and its rules between them
        ({"hp_context": "apart"}, "hp_context must be one of mps, own"),
        ({"sharing": "mps", "be_sm_percent": 0}, "be_sm_percent must be 1 to 100"),
        (
            {"sharing": "timeslice", "be_sm_percent": 50},
            "be_sm_percent applies under sharing 'mps' only",
        ),
        ({"be_graph_gate": "bogus"}, "be_graph_gate must be one of inside, whole, segments"),
        ({"hp_quiet_us": -1}, "hp_quiet_us must be 0 to"),
    ],
)
def test_start_daemons_refuses_options_before_reaching_ray(arguments, message, monkeypatch):
    import orion.ray.agent as agent

    def no_cluster(address):
        raise AssertionError("Ray was reached before the options were checked")

    monkeypatch.setattr(agent, "connect", no_cluster)
    with pytest.raises(UsageError, match=message):
        agent.start_daemons(**arguments)


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"duration_s": float("nan")}, UsageError, r"duration_s: must be a finite number"),
        ({"duration_s": 1e9}, UsageError, r"duration_s: must be <= 604800"),
        ({"duration_s": 0}, UsageError, r"duration_s: must be > 0 \(got 0\)"),
        ({"ready_timeout_s": -1}, UsageError, r"ready_timeout_s must be positive \(got -1\)"),
        ({"ready_timeout_s": float("inf")}, UsageError, r"ready_timeout_s must be a number"),
        ({"policy": "nosuch"}, UsageError, "policy must be one of"),
        ({"polcy": "orion"}, UsageError, "start_daemons takes no option 'polcy'"),
        ({"output_dir": "/proc/orion-cannot-create"}, OrionError, "cannot write plan-run folder"),
        ({"output_dir": "{file}"}, OrionError, "it is a file, not a folder"),
        ({"plan": "{dedicated}"}, OrionError, "plan GPU 0: policy 'dedicated' runs each job alone"),
    ],
)
def test_run_plan_refuses_its_input_before_reaching_ray(
    arguments, error, message, tmp_path, monkeypatch
):
    """issue 38: orion.ray.run_plan checks what `orion run-plan` checks (and its own options)
    before the cluster: each of these reached Ray first."""
    import orion.ray.agent as agent
    import orion.ray.plan as ray_plan

    def no_cluster(address):
        raise AssertionError("Ray was reached before the input was checked")

    monkeypatch.setattr(agent, "connect", no_cluster)
    monkeypatch.setattr(ray_plan, "connect", no_cluster)
    plan_path = tmp_path / "plan.json"
    write_plan(plan("h100"), plan_path)
    dedicated = tmp_path / "dedicated.json"
    write_plan(plan("h100", policy="dedicated"), dedicated)
    (tmp_path / "existing.txt").write_text("keep me\n")
    values = {"{file}": str(tmp_path / "existing.txt"), "{dedicated}": str(dedicated)}
    arguments = {key: values.get(value, value) for key, value in arguments.items()}
    arguments.setdefault("plan", plan_path)
    arguments.setdefault("output_dir", tmp_path / "runs")
    with pytest.raises(error, match=message):
        ray_plan.run_plan(**arguments)
    assert not (tmp_path / "runs").exists()


def test_the_example_declares_its_actors_with_and_without_orion():
    pytest.importorskip("ray")
    spec = importlib.util.spec_from_file_location(
        "half_a_gpu_each", ROOT / "examples" / "ray" / "half_a_gpu_each.py"
    )
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert example.actor_options("hp", with_orion=False) == {"num_gpus": 0.5}
    hp = example.actor_options("hp", with_orion=True)
    be = example.actor_options("be", with_orion=True)
    assert hp["num_gpus"] == be["num_gpus"] == 0.5
    roles = [o["runtime_env"]["env_vars"]["ORION_ROLE"] for o in (hp, be)]
    assert roles == ["hp", "be"]


# -- where a plan's GPUs go -----------------------------------------------------------------------


def node(node_id: str, *kinds: str) -> NodeInventory:
    gpus = tuple(
        NodeGpu(index=index, uuid=f"GPU-{node_id}-{index}", name=kind, kind=kind,
                memory_bytes=GIB, folder=f"/s/gpu{index}", daemon_pid=1, policy="orion",
                sharing="mps", started_here=True)
        for index, kind in enumerate(kinds)
    )  # fmt: skip
    return NodeInventory(node_id=node_id, hostname=node_id, gpus=gpus)


def plan(*kinds: str, policy: str = "orion") -> Plan:
    client = PlanClient(name="x", job="x", role="be", workload="bert", mode="train",
                        batch_size=1, weight=1.0, predicted_throughput_per_s=1.0,
                        predicted_ratio=1.0)  # fmt: skip
    gpus = tuple(
        PlanGpu(index=index, kind=kind, policy=policy, settings={},
                clients=(PlanClient(**{**client.__dict__, "name": f"job{index}"}),))
        for index, kind in enumerate(kinds)
    )  # fmt: skip
    totals = {"gpus_used": len(kinds), "be_throughput_per_s": None,
              "weighted_be_throughput_per_s": None, "min_weighted_be_ratio": None}  # fmt: skip
    return Plan(objective="max-total-be", gpus=gpus, unplaced=(), totals=totals)


def test_each_plan_gpu_goes_to_a_node_of_its_kind_no_more_than_it_has():
    nodes = [node("a", "h100", "h100"), node("b", "l4"), node("c", "h200")]
    placed = place(plan("h200", "h100", "l4", "h100"), nodes)
    assert [(p.gpu.index, p.node.node_id) for p in placed] == [
        (0, "c"),
        (1, "a"),
        (2, "b"),
        (3, "a"),
    ]


def test_a_plan_for_more_gpus_of_a_kind_than_the_cluster_has_is_refused():
    with pytest.raises(
        OrionError, match="jobs on 2 GPU\\(s\\) of kind l4; the cluster's nodes have 1"
    ):
        place(plan("l4", "l4"), [node("a", "h100"), node("b", "l4")])


def test_a_node_of_mixed_kinds_is_left_out():
    # Ray would give whichever GPU of it it liked: the plan's kind could not be kept.
    with pytest.raises(OrionError, match="of kind l4"):
        place(plan("l4"), [node("a", "h100", "l4")])


# -- the daemon a plan GPU runs under: its matrix's policy and sharing ----------------------------


def jobs_run(policy: str, **run: object) -> dict:
    return {"run": {"policy": policy, "thresholds": {}, **run}, "clients": []}


@pytest.mark.parametrize(
    ("config", "need"),
    [
        (jobs_run("orion", sharing="timeslice"), DaemonNeed("orion", "timeslice")),
        (jobs_run("orion", sharing="mps"), DaemonNeed("orion", "mps")),
        (
            jobs_run("orion", sharing="mps", thresholds={"queue_limit_us": 200}),
            DaemonNeed("orion", "mps", 200.0),
        ),
        (jobs_run("reef"), DaemonNeed("reef", "mps")),
        (jobs_run("mps"), DaemonNeed("passthrough", "mps")),
        (jobs_run("timeslice"), DaemonNeed("passthrough", "timeslice")),
        (jobs_run("mps-priority"), DaemonNeed("passthrough", "mps")),
        (jobs_run("quota", sharing="timeslice"), DaemonNeed("quota", "timeslice")),
    ],
)
def test_a_plan_gpu_needs_the_daemon_its_matrix_was_measured_under(config, need):
    assert daemon_need(0, config) == need


def test_a_plan_gpu_whose_policy_no_daemon_carries_is_one_line():
    with pytest.raises(OrionError, match="plan GPU 3: policy 'dedicated' runs each job alone"):
        daemon_need(3, jobs_run("dedicated"))


def test_plan_gpus_of_matrices_measured_in_different_modes_need_different_daemons(tmp_path):
    from placement.plan_run import plan_jobs

    gpus = tuple(
        PlanGpu(index=index, kind="h100", policy="orion", settings=settings,
                clients=(PlanClient(name=f"j{index}", job="j", role="be", workload="bert",
                                    mode="train", batch_size=1, weight=1.0,
                                    predicted_throughput_per_s=1.0, predicted_ratio=1.0),
                         PlanClient(name=f"h{index}", job="h", role="hp", workload="bert",
                                    mode="infer", batch_size=1, rate_per_s=10.0, p99_slo_ms=9.0,
                                    predicted_p99_ms=1.0, predicted_p99_upper_ms=1.0)))
        for index, settings in enumerate(
            [{"sharing": "timeslice"}, {"sharing": "mps", "queue_limit_us": 150}, {}]
        )
    )  # fmt: skip
    configs = plan_jobs(Plan("max-total-be", gpus, (), {}), 30.0, tmp_path)
    needs = [daemon_need(index, config) for index, config in configs.items()]
    # a matrix naming no mode was measured through MPS (placement.jobs_files), whatever the
    # daemons' default is now
    assert needs == [
        DaemonNeed("orion", "timeslice"),
        DaemonNeed("orion", "mps", 150.0),
        DaemonNeed("orion", "mps"),
    ]


def daemon_record(policy: str, sharing: str, queue_limit_ns: int | None = None) -> dict:
    return {
        "pid": 42,
        "policy": policy,
        "sharing": sharing,
        "socket": "/nowhere/daemon.sock",
        "gpu": {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1", "memory_bytes": GIB},
        "settings": {"queue_limit_ns": queue_limit_ns},
    }


class FakeNode:
    """A node's daemons as the agent sees them: records per GPU, stops and starts counted."""

    def __init__(self, monkeypatch, records: dict[int, dict], clients: int | list = 0) -> None:
        import orion_daemon.client
        import orion_daemon.control
        from orion.ray import agent as agent_module

        self.records = records
        self.stopped: list[int] = []
        self.started: list[dict] = []
        folder = Path("/state")
        monkeypatch.setattr(agent_module.state, "state_dir", lambda index: folder / f"gpu{index}")
        monkeypatch.setattr(
            agent_module.state, "live_record", lambda f: self.records.get(int(f.name[3:]))
        )
        monkeypatch.setattr(orion_daemon.control, "stop", self.stop)
        monkeypatch.setattr(orion_daemon.control, "gpu_settings", self.settings)
        self.refuse: str | None = None  # what gpu_settings says of this node (MPS missing)
        monkeypatch.setattr(orion_daemon.control, "start_detached", self.start)
        # the clients each status request finds, the last one from then on
        self.clients = list(clients) if isinstance(clients, list) else [clients]
        self.asked = 0
        monkeypatch.setattr(orion_daemon.client, "status", self.status)
        monkeypatch.setattr(agent_module, "IDLE_POLL_S", 0.0)

    def status(self, daemon: dict) -> dict:
        count = self.clients[min(self.asked, len(self.clients) - 1)]
        self.asked += 1
        return {"clients": [{"name": f"c{i}"} for i in range(count)]}

    def stop(self, index: int, folder: Path) -> dict:
        self.stopped.append(index)
        del self.records[index]
        return {}

    def settings(self, index: int, folder: Path, **options) -> dict:
        if self.refuse:
            raise OrionError(self.refuse)
        return {"index": index, **options}

    def start(self, settings: dict) -> dict:
        self.started.append(settings)
        limit = settings["queue_limit_us"]
        record = daemon_record(
            settings["policy"], settings["sharing"], None if limit is None else round(limit * 1e3)
        )
        self.records[settings["index"]] = record
        return record


def node_agent(started: tuple[int, ...] = ()) -> NodeAgent:
    agent = NodeAgent({"policy": "orion", "sharing": "mps"}, "/lib/liborion_preload.so")
    agent.started = {index: Path(f"/state/gpu{index}") for index in started}
    return agent


def test_a_daemon_that_runs_as_the_matrix_was_measured_is_kept(monkeypatch):
    node = FakeNode(monkeypatch, {0: daemon_record("orion", "timeslice")})
    answer = node_agent().serve_as(0, DaemonNeed("orion", "timeslice").options())
    assert answer["problem"] is None and answer["gpu"]["sharing"] == "timeslice"
    assert answer["previous"] is None
    assert node.stopped == [] and node.started == []


def test_an_idle_daemon_the_agent_started_otherwise_is_restarted_as_measured(monkeypatch):
    node = FakeNode(monkeypatch, {1: daemon_record("orion", "mps")})
    agent = node_agent(started=(1,))
    answer = agent.serve_as(1, DaemonNeed("reef", "timeslice", 200.0).options())
    assert answer["problem"] is None
    assert node.stopped == [1]
    (started,) = node.started
    assert (started["policy"], started["sharing"], started["queue_limit_us"]) == (
        "reef",
        "timeslice",
        200.0,
    )
    assert (answer["gpu"]["policy"], answer["gpu"]["sharing"]) == ("reef", "timeslice")
    assert answer["gpu"]["started_here"] and 1 in agent.started
    # how it ran before, for run_plan to restart it so after the run
    assert answer["previous"] == DaemonNeed("orion", "mps").options()


def test_a_daemon_is_restarted_once_the_clients_just_ended_are_gone(monkeypatch):
    node = FakeNode(monkeypatch, {0: daemon_record("quota", "timeslice", 200_000)}, [2, 1, 0])
    agent = node_agent(started=(0,))
    answer = agent.serve_as(0, DaemonNeed("orion", "timeslice").options(), idle_wait_s=60)
    assert answer["problem"] is None and node.asked == 3 and node.stopped == [0]
    assert answer["previous"] == DaemonNeed("quota", "timeslice", 200.0).options()


@pytest.mark.parametrize(
    ("started", "clients", "message"),
    [
        ((), 0, "runs orion under MPS, not orion time-sliced, and was started by hand"),
        ((0,), 2, "runs orion under MPS, not orion time-sliced, and 2 client(s) are joined"),
    ],
)
def test_a_daemon_that_cannot_be_restarted_is_one_line_and_left_running(
    monkeypatch, started, clients, message
):
    node = FakeNode(monkeypatch, {0: daemon_record("orion", "mps")}, clients=clients)
    answer = node_agent(started).serve_as(0, DaemonNeed("orion", "timeslice").options())
    assert answer["gpu"] is None and message in answer["problem"]
    assert "\n" not in answer["problem"]
    assert node.stopped == [] and node.started == []


def test_a_daemon_is_not_stopped_for_settings_this_node_cannot_start(monkeypatch):
    node = FakeNode(monkeypatch, {0: daemon_record("orion", "timeslice")})
    node.refuse = "nvidia-cuda-mps-control was not found"
    answer = node_agent(started=(0,)).serve_as(0, DaemonNeed("passthrough", "mps").options())
    assert answer == {
        "gpu": None,
        "problem": "nvidia-cuda-mps-control was not found",
        "previous": None,
    }
    assert node.stopped == [] and node.started == []  # the daemon it had still serves


# -- orion doctor ---------------------------------------------------------------------------------


def test_doctor_says_when_ray_is_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    (row,) = checks.ray_checks()
    assert (row.name, row.ok) == ("Ray", None) and "orion-gpu-share[ray]" in row.value


def test_doctor_says_whether_the_cluster_answers(monkeypatch, tmp_path):
    monkeypatch.setattr(checks, "CURRENT_CLUSTER_FILE", tmp_path / "none")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert checks.check_cluster().ok is None
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
        assert checks.check_cluster().ok is True
    closed = checks.check_cluster()
    assert closed.ok is False and f"not reachable at 127.0.0.1:{port}" in closed.value
    assert closed.needed_for == ()  # Ray is optional: nothing orion does stops for it


# -- the rules underneath -------------------------------------------------------------------------


def test_a_join_fraction_is_that_share_of_the_gpus_memory_an_explicit_limit_wins():
    assert memory_limit(JoinRequest("be", "x", memory_fraction=0.25), 8 * GIB) == 2 * GIB
    assert (
        memory_limit(JoinRequest("be", "x", memory_fraction=0.25, memory_limit=GIB), 8 * GIB) == GIB
    )
    assert memory_limit(JoinRequest("be", "x"), 8 * GIB) is None
    with pytest.raises(OrionError, match="does not know its GPU's memory"):
        memory_limit(JoinRequest("be", "x", memory_fraction=0.5), None)
    with pytest.raises(OrionError, match="at most 1"):
        check_join(JoinRequest("be", "x", memory_fraction=2.0), [], 8 * GIB)


@pytest.mark.parametrize("target", ["nan", "inf", "-inf"])
def test_the_daemon_refuses_a_join_whose_latency_target_is_not_a_number(target):
    """ORION_LATENCY_TARGET_MS=nan set by hand passed the daemon, and the program died at its
    first CUDA call; the join is refused with the reason instead."""
    message = {"role": "hp", "name": "web", "latency_target_ms": float(target)}
    with pytest.raises(OrionError, match="--latency-target-ms must be a positive number"):
        check_join(JoinRequest.from_message(message), [], 8 * GIB)


def test_a_join_message_may_give_its_limit_as_people_write_sizes():
    request = JoinRequest.from_message({"role": "be", "name": "x", "memory_limit": "1.5GiB"})
    assert request.memory_limit == 3 * GIB // 2
    with pytest.raises(OrionError, match="is not a size"):
        JoinRequest.from_message({"role": "be", "name": "x", "memory_limit": "much"})


def test_stand_in_gpus_answer_every_gpu_question(monkeypatch):
    gpus = [
        {"uuid": "GPU-aaaa", "name": "NVIDIA H200"},
        {"uuid": "GPU-bbbb", "name": "NVIDIA L4", "memory_mib": 1024, "sm_count": 58},
    ]
    monkeypatch.setenv("ORION_STAND_IN_GPUS", json.dumps(gpus))
    assert sysinfo.gpu_count() == 2
    assert sysinfo.gpu_uuid(1) == "GPU-bbbb" and sysinfo.gpu_uuid(2) is None
    facts = sysinfo.gpu_facts(1)
    assert (facts.name, facts.memory_total_mib, facts.sm_count) == ("NVIDIA L4", 1024, 58)
    assert sysinfo.gpu_facts(0).sm_count == 132


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[{", "is not JSON"),
        ('{"uuid": "GPU-a"}', "must be a JSON list"),
        ('[{"uuid": "a", "name": "x"}]', "uuid must be a string starting with GPU-"),
        ('[{"uuid": "GPU-a", "name": "x", "cores": 3}]', "unknown keys: cores"),
        ('[{"uuid": "GPU-a", "name": "x"}, {"uuid": "GPU-a", "name": "y"}]', "the same uuid"),
    ],
)
def test_stand_in_gpus_that_make_no_sense_are_refused_in_one_line(monkeypatch, value, message):
    monkeypatch.setenv("ORION_STAND_IN_GPUS", value)
    with pytest.raises(OrionError, match=message):
        sysinfo.gpu_count()


def test_start_daemons_takes_orion_ups_options_parsed_by_their_declarations():
    # The suite's hp-chooses daemons on a Ray cluster: each value as `orion up` would take it.
    from orion.ray.agent import check_daemon_options

    values = check_daemon_options(
        sharing="mps", hp_context="own", be_sm_percent="50", hp_quiet_us="300"
    )
    assert (values["hp_context"], values["be_sm_percent"], values["hp_quiet_us"]) == (
        "own",
        50.0,
        300.0,
    )
    assert values["be_graph_gate"] is None  # unset: the daemon's default for the HP's side
