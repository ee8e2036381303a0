"""Best-effort CUDA graphs split into segments (``be_graph_gate="segments"``), stand-in driver.

Time-sliced runs split a BE client's graph into pieces of at most one queue limit of profiled work
(one kernel node where the work is unknown) and launch them one after another through the gate,
as eager launches are: what users rely on is that an arriving HP request finds at most one piece
let through, that the program's own graph and executable are left as it made them (its updates
and node changes still work, and reach the pieces), and that a graph orion cannot split runs whole,
counted, warned once and named in the client's statistics, never a crash.
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

from scheduler_core import SchedulerRun, SchedulerSettings, native_module
from scheduler_core.sharing import DEFAULT_RUN_BE_GRAPH_GATE


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    try:
        return build_harness(tmp_path_factory.mktemp("fake_cuda_graph_segments"))
    except RuntimeError as error:
        pytest.skip(str(error))


def split_settings(queue_limit_ms: float = 2.5, be_gate: str = "gpu") -> SchedulerSettings:
    return SchedulerSettings(
        policy="orion",
        sm_count=132,
        queue_limit_ns=int(queue_limit_ms * MS),
        unknown_duration_ns=int(queue_limit_ms * MS),
        hp_completion="gpu-write",
        be_gate=be_gate,
        be_graph_gate="segments",
    )


# Five kernel nodes in a chain: 1, 1, 1, 2 and 0.5 ms profiled. With a 2.5 ms queue limit the
# pieces are g1+g2 (2 ms), g3 (1+1+1 would pass 2.5), g4+g5 (2.5, not past it).
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
CHAIN_WHOLE = "g1,g2,g3,g4,g5"


def field(event, name: str) -> str:
    return next(f.split("=", 1)[1] for f in event.fields if f.startswith(name + "="))


def instantiated_ops(log: Path) -> list[str]:
    """What each instantiation made, in order: the program's first, then its segments."""
    return [field(e, "ops") for e in read_log(log) if e.kind == "graph_instantiate"]


def run_client(
    harness: Harness,
    tmp_path: Path,
    script: str,
    *,
    profile=CHAIN_PROFILE,
    settings: SchedulerSettings | None = None,
    env: dict[str, str] | None = None,
):
    """Runs ``script`` as the one BE client of a run; returns (its stats, its log, its stderr)."""
    log = tmp_path / "be.log"
    with SchedulerRun(settings or split_settings()) as run:
        index = run.add_client("be", "be", profile)
        run.publish()
        result = harness.run(script, env={**run.client_environment(index), **(env or {})}, log=log)
        assert result.returncode == 0, result.stderr
        stats = run.stats()["be"]
    return stats, log, result.stderr


def test_a_be_graph_runs_as_pieces_of_at_most_one_queue_limit_each(harness, tmp_path):
    script = f"{CHAIN} graph_inst G flags graph_run G 0 sync 0"
    stats, log, _ = run_client(harness, tmp_path, script)
    # The program's executable as it made it, then one per piece.
    assert instantiated_ops(log) == [CHAIN_WHOLE, "g1,g2", "g3", "g4,g5"]
    assert stats["graphs_segmented"] == 1
    assert stats["graph_segments"] == 3
    assert stats["graphs_ungated"] == 0
    assert stats["graph_launches"] == 1  # the program launched one graph
    events = read_log(log)
    # Each piece is a launch of its own behind its own gate wait, and runs as one piece of work.
    launch_path = [e.kind for e in events if e.kind in ("wait_value", "launch")]
    assert launch_path == ["wait_value", "launch"] * 3
    assert [e.kind for e in events].count("exec_end") == 3
    assert stats["gate_waits"] == 3
    # Nothing of the program's graph was touched: no wait nodes added, none taken out.
    assert "graph_add_wait" not in [e.kind for e in events]


@pytest.mark.parametrize("queue_limit_ms", [0.9, 10.0])
def test_pieces_follow_the_queue_limit(harness, tmp_path, queue_limit_ms):
    # Below every kernel's duration: a piece per kernel. Above the whole graph: one piece.
    expected = {0.9: ["g1", "g2", "g3", "g4", "g5"], 10.0: [CHAIN_WHOLE]}
    stats, log, _ = run_client(
        harness,
        tmp_path,
        f"{CHAIN} graph_inst G flags",
        settings=split_settings(queue_limit_ms=queue_limit_ms),
    )
    assert instantiated_ops(log)[1:] == expected[queue_limit_ms]
    assert stats["graph_segments"] == len(expected[queue_limit_ms])


def test_unprofiled_kernels_run_a_piece_each_described_as_their_kernel(harness, tmp_path):
    # Only g1 is profiled: every other kernel node is a piece of its own, launched as that kernel
    # would be eagerly (so it is reported, and learned, under its own name).
    stats, log, _ = run_client(
        harness,
        tmp_path,
        f"{CHAIN} graph_inst G flags graph_run G 0 sync 0",
        profile=kernel_table(("g1", 1, 32, 8, "memory", 1)),
    )
    assert instantiated_ops(log)[1:] == ["g1", "g2", "g3", "g4", "g5"]
    assert stats["graph_segments"] == 5
    assert stats["launches"] == 5
    unknown = sorted(name.split()[0] for name in stats["unknown_kernels"])
    assert unknown == ["g2", "g3", "g4", "g5"]


def test_other_nodes_go_with_the_kernel_before_them(harness, tmp_path):
    # An empty node after g2 goes with g1+g2's piece; a child-graph node (4: work unknown) gets a
    # piece of its own, and so does the kernel after it.
    script = (
        "func g1 1000 func g2 1000 func g3 1000 graph_new G graph_node G g1 1 32 "
        "graph_node G g2 1 32 graph_other G 5 graph_other G 4 graph_node G g3 1 32 "
        "graph_inst G flags"
    )
    stats, log, _ = run_client(harness, tmp_path, script)
    made = [e for e in read_log(log) if e.kind == "graph_instantiate"]
    assert [field(e, "nodes") for e in made] == ["5", "3", "1", "1"]
    assert [field(e, "ops") for e in made] == ["g1,g2,g3", "g1,g2", "-", "g3"]
    assert stats["graph_segments"] == 3


def test_changes_the_program_makes_reach_the_pieces(harness, tmp_path):
    # A kernel node given new parameters and a node switched off: the driver takes each for the
    # program's executable and for the piece holding the node; the changed piece is then
    # launched as its new kernel (h1, unprofiled: reported under its name).
    script = (
        f"{CHAIN} func h1 3000 graph_inst G flags graph_set G G 1 h1 1 32 "
        "graph_enable G G 3 0 graph_run G 0 sync 0"
    )
    stats, log, _ = run_client(harness, tmp_path, script)
    events = read_log(log)
    assert [e.fields[0] for e in events if e.kind == "graph_exec_set_kernel"] == ["h1", "h1"]
    assert [e.fields[0] for e in events if e.kind == "graph_exec_set_enabled"] == ["0", "0"]
    assert stats["graphs_ungated"] == 0
    assert stats["graphs_segmented"] == 1


def test_an_update_splits_the_executable_again_and_destroying_it_frees_its_pieces(
    harness, tmp_path
):
    other = (
        "func h1 3000 graph_new H graph_node H h1 1 32 graph_node H g2 1 32 graph_node H g3 1 32 "
        "graph_node H g4 1 32 graph_node H g5 1 32"
    )
    script = (
        f"{CHAIN} {other} graph_inst G flags graph_update G H graph_run G 0 graph_destroy G sync 0"
    )
    stats, log, _ = run_client(harness, tmp_path, script)
    # h1 is unprofiled: a piece of its own, then g2+g3 (2 ms), then g4+g5.
    assert instantiated_ops(log) == [CHAIN_WHOLE, "g1,g2", "g3", "g4,g5", "h1", "g2,g3", "g4,g5"]
    assert stats["graphs_segmented"] == 2
    kinds = [e.kind for e in read_log(log)]
    # The first split's three pieces when updated, the second's three and the program's own.
    assert kinds.count("graph_exec_destroy") == 7
    assert kinds.count("graph_destroy") == 6  # orion's clones, never the program's graphs


@pytest.mark.parametrize(
    ("script_extra", "env", "why"),
    [
        ("", {"FAKE_GRAPH_CLONE_REFUSED": "1"}, "the driver did not clone it"),
        ("graph_other G 10", {}, "memory allocation or free nodes"),
    ],
    ids=["clone-refused", "memory-nodes"],
)
def test_a_graph_orion_cannot_split_runs_whole_counted_warned_once_and_named(
    harness, tmp_path, script_extra, env, why
):
    script = (
        f"{CHAIN} {script_extra} graph_inst G flags graph_inst G flags graph_run G 0 "
        "graph_run G 0 sync 0"
    )
    stats, log, stderr = run_client(harness, tmp_path, script, env=env)
    assert len(instantiated_ops(log)) == 2  # the program's two, no pieces
    assert stats["graphs_ungated"] == 2
    assert stats["graphs_segmented"] == 0
    assert stderr.count("could not be split into segments") == 1
    assert why in stderr
    assert why in stats["ungated_graph_why"]
    assert stats["graph_launches"] == 2
    assert stats["gate_waits"] >= 1  # each launch still waits at the gate as a unit


def test_a_graph_whose_edges_carry_data_is_split_too(harness, tmp_path):
    # XLA's graphs have edges with data (programmatic launch), which the CUDA 10.0 listing
    # refuses: orion lists them again with the CUDA 12.3 form and splits the graph as usual.
    stats, log, _ = run_client(
        harness, tmp_path, f"{CHAIN} graph_inst G flags", env={"FAKE_GRAPH_EDGE_DATA": "1"}
    )
    assert instantiated_ops(log)[1:] == ["g1,g2", "g3", "g4,g5"]
    assert stats["graphs_ungated"] == 0


def test_the_cpu_gate_splits_graphs_too(harness, tmp_path):
    stats, log, _ = run_client(
        harness,
        tmp_path,
        f"{CHAIN} graph_inst G flags graph_run G 0 sync 0",
        settings=split_settings(be_gate="cpu"),
    )
    assert stats["graph_segments"] == 3
    assert [e.kind for e in read_log(log)].count("exec_end") == 3


def test_an_hp_arrival_finds_at_most_one_piece_of_a_be_graph_let_through(harness, tmp_path):
    # BE replays one graph of ten 20 ms kernels; with a 25 ms queue limit each is a piece. HP
    # arrives once the graph runs and keeps the GPU 300 ms: the piece running then may finish,
    # the next waits for HP. Admitted whole, the graph's remaining 150+ ms would run beside HP.
    seen = hp_beside_be_graph(harness, tmp_path, split_settings(queue_limit_ms=25))
    assert seen.stats["be"]["graph_segments"] == 10
    seen.assert_at_most_one_piece_beside_hp()


def test_runs_split_graphs_unless_told_and_the_header_says_so():
    settings = dataclasses.replace(split_settings(), be_graph_gate=DEFAULT_RUN_BE_GRAPH_GATE)
    with SchedulerRun(settings) as run:
        assert native_module().Run.attach(run.name, run.decisions_path).be_graph_gate == "segments"
