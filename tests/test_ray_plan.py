"""``orion.ray.run_plan`` on a local multi-node Ray cluster with stand-in GPUs (CPU; ``ray``).

What users rely on: a plan for several nodes is carried out with each plan GPU's jobs together
on one GPU of a node of the planned kind, each job an actor joined to that GPU's daemon under its
role; the results are one plan-run directory that `orion report` reads as a local plan run's; a
node lost mid-run fails its own GPU's run and leaves complete records for the others.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from native_harness import wait_for
from ray_harness import StandInCluster, kind_slug, ray_available
from typer.testing import CliRunner

from orion_common.plan_run_format import PLAN_RUN_FILE
from placement.plan_file import Plan, PlanClient, PlanGpu, load_plan, write_plan
from reporting.plan_check import check_plan, read_plan_run

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(ray_available() is not None, reason=str(ray_available())),
]
DURATION_S = 3.0


def hp(name: str) -> PlanClient:
    return PlanClient(
        name=name, job=f"{name}-job", role="hp", workload="bert", mode="infer", batch_size=1,
        rate_per_s=50.0, p99_slo_ms=50.0, predicted_p99_ms=5.0, predicted_p99_upper_ms=6.0,
    )  # fmt: skip


def be(name: str) -> PlanClient:
    return PlanClient(
        name=name, job=f"{name}-job", role="be", workload="bert", mode="train", batch_size=4,
        weight=1.0, predicted_throughput_per_s=1000.0, predicted_ratio=0.5,
    )  # fmt: skip


TIME_SLICED = {"sharing": "timeslice"}  # stand-in GPUs have no MPS


def plan_file(
    path: Path, gpus: list[tuple[str, tuple[PlanClient, ...]]], policy: str = "orion"
) -> Path:
    plan = Plan(
        objective="max-total-be",
        gpus=tuple(
            PlanGpu(index=index, kind=kind_slug(kind), policy=policy, settings=TIME_SLICED,
                    clients=clients)
            for index, (kind, clients) in enumerate(gpus)
        ),
        unplaced=(),
        totals={"gpus_used": len(gpus), "be_throughput_per_s": None,
                "weighted_be_throughput_per_s": None, "min_weighted_be_ratio": None},
    )  # fmt: skip
    return write_plan(plan, path)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    running = StandInCluster(tmp_path_factory.mktemp("ray_plan_cluster"))
    try:
        for kind in ("h100", "h200", "l4"):
            running.add_node(kind, gpus=1)
        yield running
    finally:
        running.shutdown()


@pytest.fixture(autouse=True)
def cpu_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORION_CLIENT_DEVICE", "cpu")


def run(plan: Path, output: Path) -> Path:
    from ray_jobs import TinyJobHost

    import orion.ray

    return orion.ray.run_plan(
        plan, duration_s=DURATION_S, output_dir=output, job_host=TinyJobHost, sharing="timeslice"
    )


def test_a_plan_for_three_nodes_puts_each_job_where_the_plan_put_it(cluster, tmp_path):
    layout = [("l4", (hp("search"), be("a"))), ("h100", (hp("b"), be("c"))), ("h200", (hp("ads"),))]
    root = run(plan_file(tmp_path / "plan.json", layout), tmp_path / "runs")

    record = json.loads((root / PLAN_RUN_FILE).read_text())
    assert record["status"] == "complete", record
    for index, (kind, clients) in enumerate(layout):
        entry = next(e for e in record["gpus"] if e["index"] == index)
        assert entry["exit_code"] == 0
        run_json = json.loads((root / entry["run_dir"] / "run.json").read_text())
        assert run_json["status"] == "complete"
        node = next(n for n in cluster.nodes if n.kind == kind)
        entries = {client["name"]: client for client in run_json["clients"]}
        assert sorted(entries) == sorted(client.name for client in clients)
        # Together on one GPU of the node of the planned kind, each joined under its role.
        assert {client["ray_node_id"] for client in entries.values()} == {node.node_id}
        assert {client["cuda_visible_devices"] for client in entries.values()} == {
            node.gpus[0]["uuid"]
        }
        roles = {e["client"]: e["role"] for e in node.events(0) if e["event"] == "join"}
        for client in clients:
            assert roles[client.name] == client.role
            rows = (root / entry["run_dir"] / f"clients/{client.name}.csv").read_text()
            assert len(rows.splitlines()) > 10  # it measured: a header and many rows
        # Its slots come back as the jobs end.
        wait_for(lambda n=node: n.client_names(0) == [], timeout_s=10, what="the slots back")

    # `orion report` reads it as it reads a local plan run.
    plan_run = read_plan_run(root)
    check = check_plan(load_plan(plan_run.plan_path), plan_run)
    assert sorted(check.gpus["state"].unique()) != ["failed"]
    assert len(check.runs) == 3
    from orion_cli.app import app

    report = CliRunner().invoke(app, ["report", str(root), "-o", str(tmp_path / "report")])
    assert report.exit_code == 0, report.output
    assert "Plan: measured against predicted" in (tmp_path / "report" / "report.md").read_text()


def test_a_plan_gpu_runs_under_the_policy_its_matrix_was_measured_in(cluster, tmp_path):
    """The node's daemons were started for orion; the plan's matrix was measured under quota:
    the agent restarts the idle daemon it started, the run says which one served it, and once
    the jobs are gone the daemon is restarted as it was."""
    node = next(n for n in cluster.nodes if n.kind == "h200")
    wait_for(lambda: node.client_names(0) == [], timeout_s=10, what="the slots back")
    assert node.daemon_status(0)["policy"] == "orion"
    layout = [("h200", (be("q1"), be("q2")))]
    root = run(plan_file(tmp_path / "plan.json", layout, policy="quota"), tmp_path / "runs")

    record = json.loads((root / PLAN_RUN_FILE).read_text())
    assert record["status"] == "complete", record
    run_json = json.loads((root / record["gpus"][0]["run_dir"] / "run.json").read_text())
    environment = run_json["environment"]
    assert (environment["daemon_policy"], environment["daemon_sharing"]) == ("quota", "timeslice")
    roles = {e["client"]: e["role"] for e in node.events(0) if e["event"] == "join"}
    assert roles["q1"] == roles["q2"] == "be"
    assert (
        "GPU 0's daemon was restarted as it was before the run (orion time-sliced)"
        in (run_json["notes"])
    )
    assert (node.daemon_status(0)["policy"], node.daemon_status(0)["sharing"]) == (
        "orion",
        "timeslice",
    )


def test_a_plan_gpu_whose_daemon_cannot_run_as_measured_fails_in_one_line(cluster, tmp_path):
    """BE jobs alone on a GPU were measured under plain MPS (`orion pairs`' BE pairs): a node
    without MPS cannot run them so, and says it; its daemon is left serving as it was."""
    node = next(n for n in cluster.nodes if n.kind == "l4")
    wait_for(lambda: node.client_names(0) == [], timeout_s=10, what="the slots back")
    before = node.daemon_status(0)
    root = run(plan_file(tmp_path / "plan.json", [("l4", (be("x"), be("y")))]), tmp_path / "r")

    record = json.loads((root / PLAN_RUN_FILE).read_text())
    assert record["status"] == "failed"
    (entry,) = record["gpus"]
    assert entry["exit_code"] == 1
    assert entry["error"].startswith("OrionError: plan GPU 0: ") and "\n" not in entry["error"]
    assert "mps" in entry["error"].lower()  # what this node lacks for MPS
    after = node.daemon_status(0)
    assert (after["pid"], after["policy"]) == (before["pid"], before["policy"])


def measured_rows(node_tmp: Path, client: str) -> int:
    """Rows job ``client``'s table has so far in its folder on a node (under its TMPDIR)."""
    tables = list(node_tmp.glob(f"orion-job-{client}-*/clients/{client}.csv"))
    return max((len(t.read_text().splitlines()) - 1 for t in tables), default=0)


def test_a_node_lost_mid_run_leaves_complete_records_for_the_others(cluster, tmp_path):
    doomed = cluster.add_node("a100", gpus=1)
    layout = [("h100", (hp("search"), be("a"))), ("a100", (hp("b"),))]
    plan = plan_file(tmp_path / "plan.json", layout)
    result: dict[str, Path] = {}
    runner = threading.Thread(target=lambda: result.update(root=run(plan, tmp_path / "runs")))
    runner.start()
    # Once the lost node's job has joined its daemon and is measuring (its table has rows),
    # the node goes: whenever that is on a busy machine, not a fixed time after the join.
    wait_for(
        lambda: (
            any(doomed.state_dir.glob("gpu0/clients.csv"))
            and any(e["event"] == "join" for e in doomed.events(0))
        ),
        timeout_s=120,
        what="the job on the doomed node to join",
    )
    wait_for(
        lambda: measured_rows(doomed.state_dir / "tmp", "b") > 0,
        timeout_s=120,
        what="the job on the doomed node to measure",
    )
    cluster.remove_node(doomed)
    runner.join(timeout=180)
    assert not runner.is_alive()

    root = result["root"]
    record = json.loads((root / PLAN_RUN_FILE).read_text())
    assert record["status"] == "failed"
    by_index = {entry["index"]: entry for entry in record["gpus"]}
    assert by_index[0]["exit_code"] == 0 and by_index[1]["exit_code"] == 1
    kept = json.loads((root / by_index[0]["run_dir"] / "run.json").read_text())
    assert kept["status"] == "complete"
    assert {name: rows > 10 for name, rows in kept["table_rows"].items()} == {
        "clients/search.csv": True,
        "clients/a.csv": True,
    }
    lost = json.loads((root / by_index[1]["run_dir"] / "run.json").read_text())
    assert lost["status"] == "failed"
    (client,) = lost["clients"]
    assert "actor died" in client["error"]
    # The report still reads the whole plan run, the lost GPU marked as failed.
    check = check_plan(load_plan(root / "plan.json"), read_plan_run(root))
    states = dict(zip(check.gpus["gpu"], check.gpus["state"], strict=True))
    assert states[1] == "failed" and states[0] != "failed"


def test_a_plan_on_ray_runs_as_long_as_its_matrix_measured_each_pair(tmp_path, monkeypatch):
    # The default of `orion run-plan`: a run as long as the matrix's cells, before Ray is reached.
    import orion.ray.plan as ray_plan

    asked: list[float] = []

    def stop(plan_path, duration_s, *rest):
        asked.append(duration_s)
        raise RuntimeError("stopped before Ray")

    monkeypatch.setattr(ray_plan, "check_run_plan", stop)
    plan = load_plan(plan_file(tmp_path / "plan.json", [("h100", (hp("svc"),))]))
    timed = Plan(
        plan.objective,
        tuple(PlanGpu(g.index, g.kind, g.policy, g.settings, g.clients, 30.0) for g in plan.gpus),
        plan.unplaced,
        plan.totals,
    )
    for path, expected in (
        (tmp_path / "plan.json", 60.0),
        (write_plan(timed, tmp_path / "t.json"), 30.0),
    ):
        with pytest.raises(RuntimeError, match="stopped before Ray"):
            ray_plan.run_plan(path, output_dir=tmp_path / "runs")
        assert asked.pop() == expected
