"""Best-effort CUDA graphs gated inside (``be_gate="gpu"``), on the stand-in driver (CPU only).

The stand-in driver keeps graphs with dependencies, instantiates them in a topological order,
and runs a wait node of an executable as it runs ``cuStreamWaitValue32`` on a stream: the rest of
the graph holds until the gate word is open. What users rely on: a BE graph gets a wait before
each queue limit of its profiled work (every kernel node when unprofiled), an arriving HP request
finds at most that much BE work let through, the program's graph is left as it made it (so its
executables can be updated and re-instantiated), and a graph orion cannot rewrite runs ungated
as a whole, counted and warned once, never a crash. A run told ``be_graph_gate="whole"``
rewrites no graph: each is admitted whole behind its launch's gate, as before inside gating.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from native_harness import (
    MS,
    Harness,
    build_harness,
    hp_beside_be_graph,
    kernel_table,
    read_log,
)

from orion_common.errors import OrionError
from scheduler_core import SchedulerRun, SchedulerSettings, native_module


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    try:
        return build_harness(tmp_path_factory.mktemp("fake_cuda_graph_gate"))
    except RuntimeError as error:
        pytest.skip(str(error))


def gate_settings(policy: str = "reef", queue_limit_ms: float = 2.5) -> SchedulerSettings:
    return SchedulerSettings(
        policy=policy,
        sm_count=132,
        queue_limit_ns=int(queue_limit_ms * MS),
        unknown_duration_ns=int(queue_limit_ms * MS),
        hp_completion="gpu-write",
        be_gate="gpu",
    )


# Five kernel nodes in a chain (as one captured stream makes): 1, 1, 1, 2 and 0.5 ms profiled.
# With a 2.5 ms queue limit the waits go before g1 (the first), g3 (1+1+1 > 2.5), g4 (1+2 > 2.5);
# g5 joins g4 (2+0.5 = 2.5, not past the limit).
CHAIN = (
    "func g1 1000 func g2 1000 func g3 1000 func g4 2000 func g5 500 graph_new G "
    "graph_node G g1 1 32 graph_node G g2 1 32 graph_node G g3 1 32 graph_node G g4 1 32 "
    "graph_node G g5 1 32"
)
CHAIN_PROFILE = kernel_table(
    ("g1", 1, 32, 8, "memory", 1),
    ("g2", 1, 32, 8, "memory", 1),
    ("g3", 1, 32, 8, "memory", 1),
    ("g4", 1, 32, 8, "memory", 2),
    ("g5", 1, 32, 8, "memory", 0.5),
)
CHAIN_GATED = "wait,g1,g2,wait,g3,wait,g4,g5"
CHAIN_WHOLE = "g1,g2,g3,g4,g5"


def field(event, name: str) -> str:
    return next(f.split("=", 1)[1] for f in event.fields if f.startswith(name + "="))


def instantiations(log: Path) -> list:
    return [e for e in read_log(log) if e.kind == "graph_instantiate"]


def run_client(
    harness: Harness,
    tmp_path: Path,
    script: str,
    *,
    role: str = "be",
    profile=CHAIN_PROFILE,
    settings: SchedulerSettings | None = None,
    env: dict[str, str] | None = None,
):
    """Runs ``script`` as the one client of a run; returns (its stats, its log, its stderr)."""
    log = tmp_path / f"{role}.log"
    with SchedulerRun(settings or gate_settings()) as run:
        index = run.add_client(role, role, profile)
        run.publish()
        result = harness.run(script, env={**run.client_environment(index), **(env or {})}, log=log)
        assert result.returncode == 0, result.stderr
        stats = run.stats()[role]
    return stats, log, result.stderr


def test_a_be_graph_gets_a_wait_before_each_queue_limit_of_profiled_work(harness, tmp_path):
    # Instantiated twice: the program's graph is as it made it after the first instantiation
    # (8 nodes when the driver instantiates it, 5 kernels and 3 waits, both times).
    script = f"{CHAIN} graph_inst G flags graph_inst G params graph_run G 0 sync 0"
    stats, log, _ = run_client(harness, tmp_path, script)
    made = instantiations(log)
    assert [field(e, "ops") for e in made] == [CHAIN_GATED, CHAIN_GATED]
    assert [field(e, "nodes") for e in made] == ["8", "8"]
    assert stats["graphs_gated"] == 2
    assert stats["graph_gate_waits"] == 6
    assert stats["graphs_ungated"] == 0
    assert stats["graphs_identified"] == 2  # identity reads the kernel nodes only
    # Three waits per instantiation, each taken out of the program's graph again.
    kinds = [e.kind for e in read_log(log)]
    assert kinds.count("graph_add_wait") == 6
    assert kinds.count("graph_destroy_node") == 6
    assert kinds.count("wait_passed") >= 3  # the executable's waits, met on the GPU
    assert kinds.count("exec_end") == 3  # its kernels ran as three pieces, between the waits


@pytest.mark.parametrize("queue_limit_ms", [0.9, 10.0])
def test_wait_positions_follow_the_queue_limit(harness, tmp_path, queue_limit_ms):
    # Below every kernel's duration: a wait before each. Above the whole graph: one, first.
    expected = {0.9: "wait,g1,wait,g2,wait,g3,wait,g4,wait,g5", 10.0: "wait," + CHAIN_WHOLE}
    stats, log, _ = run_client(
        harness,
        tmp_path,
        f"{CHAIN} graph_inst G flags",
        settings=gate_settings(queue_limit_ms=queue_limit_ms),
    )
    (made,) = instantiations(log)
    assert field(made, "ops") == expected[queue_limit_ms]
    assert stats["graph_gate_waits"] == expected[queue_limit_ms].count("wait")


def test_an_unprofiled_kernel_node_is_fenced_by_waits_on_both_sides(harness, tmp_path):
    # "gx" is not in the profile: how long it holds the GPU is unknown, so it gets a wait of its
    # own and the node after it another; profiled g1, g2 (1 ms each) share one.
    script = (
        "func g1 1000 func g2 1000 func gx 1000 func g3 1000 graph_new G graph_node G g1 1 32 "
        "graph_node G g2 1 32 graph_node G gx 1 32 graph_node G g3 1 32 graph_inst G flags"
    )
    _, log, _ = run_client(harness, tmp_path, script)
    (made,) = instantiations(log)
    assert field(made, "ops") == "wait,g1,g2,wait,gx,wait,g3"


def test_a_graph_with_no_profile_gets_a_wait_at_every_kernel_node(harness, tmp_path):
    stats, log, _ = run_client(
        harness, tmp_path, f"{CHAIN} graph_inst G flags", profile=kernel_table()
    )
    (made,) = instantiations(log)
    assert field(made, "ops") == "wait,g1,wait,g2,wait,g3,wait,g4,wait,g5"
    assert stats["graph_gate_waits"] == 5


@pytest.mark.parametrize(
    ("role", "policy", "be_gate"),
    [("hp", "reef", "gpu"), ("be", "reef", "cpu"), ("be", "priority", "gpu")],
    ids=["hp-client", "cpu-gate", "policy-without-gates"],
)
def test_graphs_of_clients_not_gated_on_the_gpu_are_left_whole(
    harness, tmp_path, role, policy, be_gate
):
    settings = SchedulerSettings(
        policy=policy,
        sm_count=132,
        queue_limit_ns=int(2.5 * MS),
        unknown_duration_ns=int(2.5 * MS),
        be_gate=be_gate,
    )
    stats, log, _ = run_client(
        harness, tmp_path, f"{CHAIN} graph_inst G flags", role=role, settings=settings
    )
    (made,) = instantiations(log)
    assert field(made, "ops") == CHAIN_WHOLE
    assert stats["graphs_gated"] == 0
    assert stats["graphs_ungated"] == 0


@pytest.mark.parametrize(
    ("policy", "be_graph_gate", "ops", "gated", "pieces"),
    [
        ("reef", "inside", CHAIN_GATED, 1, 3),
        ("reef", "whole", CHAIN_WHOLE, 0, 1),
        ("orion", "whole", CHAIN_WHOLE, 0, 1),
        ("quota", "whole", CHAIN_WHOLE, 0, 1),  # every client's graphs are gated under quota
    ],
)
def test_be_graph_gate_whole_admits_graphs_whole_behind_their_launchs_gate(
    harness, tmp_path, policy, be_graph_gate, ops, gated, pieces
):
    # The same graph and run but for the setting: inside, three waits and three pieces; whole,
    # the graph as the program made it, one piece, behind the launch's stream wait.
    settings = dataclasses.replace(gate_settings(policy), be_graph_gate=be_graph_gate)
    stats, log, stderr = run_client(
        harness, tmp_path, f"{CHAIN} graph_inst G flags graph_run G 0 sync 0", settings=settings
    )
    (made,) = instantiations(log)
    assert field(made, "ops") == ops
    assert stats["graphs_gated"] == gated
    assert stats["graph_gate_waits"] == ops.count("wait")
    assert stats["graphs_ungated"] == 0  # whole by choice: nothing failed to be rewritten
    assert "gated inside" not in stderr
    events = read_log(log)
    assert [e.kind for e in events].count("graph_add_wait") == ops.count("wait")
    assert [e.kind for e in events].count("exec_end") == pieces
    # Either way the launch itself waits at the gate first.
    launch_path = [e.kind for e in events if e.kind in ("wait_value", "launch")]
    assert launch_path == ["wait_value", "launch"]
    assert stats["gate_waits"] == 1
    assert stats["graph_launches"] == 1


def test_the_run_header_says_how_graphs_are_gated_and_refuses_another_word():
    with SchedulerRun(dataclasses.replace(gate_settings(), be_graph_gate="whole")) as run:
        assert native_module().Run.attach(run.name, run.decisions_path).be_graph_gate == "whole"
    with SchedulerRun(gate_settings()) as run:
        assert native_module().Run.attach(run.name, run.decisions_path).be_graph_gate == "inside"
    with pytest.raises(
        OrionError, match=r"be_graph_gate must be one of inside, whole, segments \(got 'x'\)"
    ):
        dataclasses.replace(gate_settings(), be_graph_gate="x")
    with pytest.raises(
        ValueError, match="be_graph_gate must be 'inside', 'whole' or 'segments', not 'x'"
    ):
        native_module().Run.create(
            "/orion-test-bad-graph-gate", "orion", 132, 1, 1, 1, be_graph_gate="x"
        )


def test_a_graph_without_kernel_nodes_is_left_alone(harness, tmp_path):
    script = "graph_new E graph_other E 5 graph_other E 5 graph_inst E flags graph_run E 0 sync 0"
    stats, log, stderr = run_client(harness, tmp_path, script)
    (made,) = instantiations(log)
    assert field(made, "nodes") == "2"
    assert "graph_add_wait" not in [e.kind for e in read_log(log)]
    assert stats["graphs_gated"] == 0
    assert stats["graphs_ungated"] == 0
    assert "gated inside" not in stderr


def test_an_updated_graph_is_regated_and_its_nodes_stay_the_programs(harness, tmp_path):
    # The stand-in driver, like the real one, updates an executable only from a graph of its
    # topology, waits included, and takes node changes only for nodes of the graph it was made
    # from. G's executable holds three waits: updating it from H (G's shape, other kernels)
    # succeeds only if orion gives H the same waits; g2's node of G, given new parameters, is
    # still a node the executable knows; and an instantiation afresh is gated afresh.
    other = (
        "func h1 3000 graph_new H graph_node H h1 1 32 graph_node H g2 1 32 graph_node H g3 1 32 "
        "graph_node H g4 1 32 graph_node H g5 1 32"
    )
    script = (
        f"{CHAIN} {other} graph_inst G flags graph_update G H graph_run G 0 "
        "graph_set G G 1 h1 1 32 graph_run G 0 graph_inst G flags graph_run G 0 sync 0"
    )
    stats, log, _ = run_client(harness, tmp_path, script)
    events = read_log(log)
    (update,) = [e for e in events if e.kind == "graph_exec_update"]
    # The waits keep their places (h1 is 3 ms and unprofiled: new waits would differ).
    assert field(update, "ops") == "wait,h1,g2,wait,g3,wait,g4,g5"
    assert [e.fields[0] for e in events if e.kind == "graph_exec_set_kernel"] == ["h1"]
    assert "graph_exec_update_refused" not in [e.kind for e in events]
    assert stats["graphs_gated"] == 2  # the first instantiation and the second
    assert stats["graph_launches"] == 3
    # Every wait added for the update was taken out of H again (3 + 3 + 3 destroyed).
    assert [e.kind for e in events].count("graph_destroy_node") == 9


def test_an_update_from_another_shape_is_refused_as_without_orion(harness, tmp_path):
    # A graph with one kernel node fewer cannot update G's executable, gated or not; the program
    # sees the driver's refusal (the launcher exits on it) and nothing is left in the graph.
    other = "graph_new S graph_node S g1 1 32 graph_node S g2 1 32"
    result_log = tmp_path / "be.log"
    with SchedulerRun(gate_settings()) as run:
        be = run.add_client("be", "be", CHAIN_PROFILE)
        run.publish()
        result = harness.run(
            f"{CHAIN} {other} graph_inst G flags graph_update G S",
            env=run.client_environment(be),
            log=result_log,
        )
    assert result.returncode != 0
    assert "graph update failed" in result.stderr
    kinds = [e.kind for e in read_log(result_log)]
    assert kinds.count("graph_exec_update_refused") == 1
    assert kinds.count("graph_add_wait") == kinds.count("graph_destroy_node") == 3


@pytest.mark.parametrize(
    ("script_extra", "env", "why"),
    [
        ("", {"FAKE_GRAPH_WAIT_REFUSED": "add"}, "the driver refused a wait node"),
        ("", {"FAKE_GRAPH_WAIT_REFUSED": "instantiate"}, "refused to instantiate it"),
        ("graph_other G 10", {}, "memory allocation or free nodes"),
    ],
    ids=["wait-node-refused", "instantiation-refused", "memory-nodes"],
)
def test_a_graph_orion_cannot_rewrite_runs_whole_counted_and_warned_once(
    harness, tmp_path, script_extra, env, why
):
    script = (
        f"{CHAIN} {script_extra} graph_inst G flags graph_inst G flags graph_run G 0 "
        "graph_run G 0 sync 0"
    )
    stats, log, stderr = run_client(harness, tmp_path, script, env=env)
    made = instantiations(log)
    assert len(made) == 2
    assert all(field(e, "ops") == CHAIN_WHOLE for e in made)
    assert stats["graphs_ungated"] == 2
    assert stats["graphs_gated"] == 0
    assert stderr.count("could not be gated inside") == 1
    assert why in stderr
    # The launch itself is still gated as a unit, behind a stream wait.
    assert stats["gate_waits"] >= 1
    assert stats["graph_launches"] == 2


def test_an_hp_arrival_finds_at_most_one_queue_limit_of_a_be_graph_let_through(harness, tmp_path):
    # BE replays one graph of ten 20 ms kernels; with a 25 ms queue limit every kernel has a wait
    # of its own. HP arrives once the graph runs and keeps the GPU 300 ms: the BE kernel running
    # then may finish, the next waits for HP. Admitted whole, the graph's remaining 150+ ms would
    # run beside HP.
    seen = hp_beside_be_graph(harness, tmp_path, gate_settings(queue_limit_ms=25))
    assert seen.stats["be"]["graph_gate_waits"] == 10
    seen.assert_at_most_one_piece_beside_hp()
