"""The files a new user starts from: the quickstart's jobs file and the reference profiles."""

from __future__ import annotations

from pathlib import Path

import pytest

from colocation.config import load_jobs
from colocation.profiles import default_profile_for
from postprocess import kernel_identity_table, read_profile

ROOT = Path(__file__).resolve().parents[1]
PROFILES = sorted((ROOT / "profiles").glob("*/*/profile.csv"))


@pytest.mark.parametrize(
    ("name", "graph"), [("headline.json", True), ("host-bound-hp.json", False)]
)
def test_the_example_jobs_files_are_valid_and_name_existing_profiles(
    name: str, graph: bool
) -> None:
    config = load_jobs(ROOT / "examples" / name)
    assert config.run.policy == "orion"
    assert [client.role for client in config.clients] == ["hp", "be"]
    # the headline serves HP as a CUDA graph, as production servers do; the second scenario
    # keeps the eager HP, whose latency is bound by the host CPU
    assert [client.cuda_graph for client in config.clients] == [graph, False]
    for client in config.clients:
        if name == "headline.json":  # found by GPU kind: the quickstart names no profile
            assert client.profile is None
        else:
            assert client.profile is not None and client.profile.is_file()


@pytest.mark.parametrize(
    ("gpu_name", "hp_folder"),
    [
        ("NVIDIA H100 80GB HBM3", "resnet50-infer-bs4-fp32-graph"),
        ("NVIDIA H200", "resnet50-infer-bs4-fp32"),  # no graph profile there: the eager one
    ],
)
def test_the_quickstart_finds_the_reference_profiles_of_each_gpu_kind(
    gpu_name: str, hp_folder: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORION_PROFILE_DIR", str(tmp_path))  # no profiles of the user's own
    config = load_jobs(ROOT / "examples" / "headline.json")
    hp, be = (default_profile_for(gpu_name)(client) for client in config.clients)
    assert (hp.parent.name, be.parent.name) == (hp_folder, "resnet50-train-bs32-fp32")
    assert hp.is_file() and be.is_file()


def test_a_profile_of_the_users_own_wins_over_the_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORION_PROFILE_DIR", str(tmp_path))
    own = tmp_path / "nvidia-h100-80gb-hbm3" / "resnet50-train-bs32-fp32" / "profile.csv"
    own.parent.mkdir(parents=True)
    own.write_text("")
    config = load_jobs(ROOT / "examples" / "headline.json")
    assert default_profile_for("NVIDIA H100 80GB HBM3")(config.clients[1]) == own


def test_the_be_graph_example_replays_a_graph_in_a_closed_loop_beside_the_graph_headline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The BE client replays the same ResNet-50 bs4 inference graph as fast as it can: each of
    # its graphs is gated inside (docs/scheduler.md), with the reference graph profile's
    # per-kernel durations where the wait nodes go.
    monkeypatch.setenv("ORION_PROFILE_DIR", str(tmp_path))
    config = load_jobs(ROOT / "examples" / "be-graph.json")
    headline = load_jobs(ROOT / "examples" / "headline.json")
    hp, be = config.clients
    assert hp == headline.clients[0]
    assert (be.role, be.mode, be.cuda_graph, be.arrivals.kind) == ("be", "infer", True, "closed")
    profile = default_profile_for("NVIDIA H100 80GB HBM3")(be)
    assert profile.parent.name == "resnet50-infer-bs4-fp32-graph"
    assert read_profile(profile).metadata["cuda_graph"] is True


def test_the_quota_example_splits_the_gpu_by_caps() -> None:
    config = load_jobs(ROOT / "examples" / "quota.json")
    assert config.run.policy == "quota"
    assert [(c.min_util, c.max_util) for c in config.clients] == [(0.0, 0.3), (0.0, 0.7)]
    assert config.clients[0].memory_limit == 2 * 2**30


@pytest.mark.parametrize("path", PROFILES, ids=[p.parent.name for p in PROFILES])
def test_reference_profiles_load_and_give_the_scheduler_a_table(path: Path) -> None:
    profile = read_profile(path)
    workload, mode, batch, dtype, *graph = path.parent.name.split("-")
    # A CUDA-graph profile's folder ends in "-graph" (orion's default location for one).
    assert bool(profile.metadata.get("cuda_graph", False)) == (graph == ["graph"])
    assert profile.metadata["workload"] == workload
    assert profile.metadata["mode"] == mode
    assert f"bs{profile.metadata['batch_size']}" == batch
    assert profile.metadata["dtype"] == dtype
    assert profile.kernels["kernel_name"].str.startswith("_Z").any()  # mangled identities
    table = kernel_identity_table(profile)
    assert len(table) < len(profile.kernels)
    assert table["sm_needed"].between(1, profile.metadata["sm_count"]).all()
    assert set(table["kernel_class"]) <= {"compute", "memory", "unknown"}


def test_the_pairs_example_is_the_three_by_four_serving_matrix() -> None:
    # The pair matrix `orion plan` reads: three graph-served HP services beside four trainers.
    from placement.pairs import load_pairs_jobs, planned_cells

    spec = load_pairs_jobs(ROOT / "examples" / "pairs.json")
    hp = [job for job in spec.jobs.values() if job.kind == "hp"]
    be = [job for job in spec.jobs.values() if job.kind == "be"]
    assert {job.workload for job in hp} == {"resnet50", "mobilenet_v2", "bert"}
    assert all(job.cuda_graph and job.mode == "infer" for job in hp)
    assert {job.workload for job in be} == {"resnet50", "mobilenet_v2", "bert", "gpt2"}
    assert all(job.mode == "train" for job in be)
    assert spec.policy == "orion" and spec.rounds == 3
    assert len(planned_cells(spec)) > len(spec.jobs)


def test_the_two_gpu_fleet_names_only_jobs_its_pairs_example_measures() -> None:
    # examples/fleet-h200x2.json is planned from the matrix examples/pairs-h200-plan.json makes.
    from placement.fleet import load_fleet
    from placement.pairs import load_pairs_jobs

    spec = load_pairs_jobs(ROOT / "examples" / "pairs-h200-plan.json")
    fleet = load_fleet(ROOT / "examples" / "fleet-h200x2.json")
    assert fleet.gpu_kinds() == ["nvidia-h200", "nvidia-h200"]
    named = [service.job for service in fleet.hp] + [job.job for job in fleet.be]
    assert set(named) <= set(spec.jobs)
    assert len(fleet.hp) == 2 and len(fleet.be) == 2
