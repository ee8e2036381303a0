"""orion.ray from a source checkout's root (CPU only; marked ``ray``), as the README runs
``python examples/ray/half_a_gpu_each.py``: Ray puts the driver's folder first on its workers'
import path, so they import the checkout's packages, which hold no built library; the library
the installed orion built is found all the same, every GPU gets its daemon and an actor joins."""

from __future__ import annotations

import os

import pytest
from native_harness import Harness, build_harness
from ray_harness import REPO, StandInCluster, ray_available

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(ray_available() is not None, reason=str(ray_available())),
]


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    try:
        return build_harness(tmp_path_factory.mktemp("fake_cuda_ray_checkout"))
    except RuntimeError as error:
        pytest.skip(str(error))


def test_an_actor_joins_from_a_checkouts_root(tmp_path_factory, harness):
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    import orion.ray

    if not (REPO / "scheduler_core" / "__init__.py").is_file():
        pytest.skip("not run from a source checkout")
    cluster = StandInCluster(tmp_path_factory.mktemp("ray_checkout"), from_checkout=True)
    try:
        node = cluster.add_node("h100", gpus=1)
        nodes = {n.node_id: n for n in orion.ray.start_daemons()}
        assert nodes[node.node_id].problem is None
        assert [gpu.sharing for gpu in nodes[node.node_id].gpus] == ["timeslice"]  # orion up's

        class Where:
            def report(self) -> dict:
                import scheduler_core
                from orion.ray.jobs import join_now

                return {"package": scheduler_core.__file__, "cwd": os.getcwd(), **join_now()}

        pinned = NodeAffinitySchedulingStrategy(node.node_id, soft=False)
        actor = (
            ray.remote(Where)
            .options(**orion.ray.options("be", num_gpus=0.5, name="from-checkout"),
                     scheduling_strategy=pinned)
            .remote()
        )  # fmt: skip
        report = ray.get(actor.report.remote(), timeout=120)
        ray.kill(actor)
        assert report["attached"]
        assert report["package"].startswith(str(REPO))  # the checkout's packages were imported
        assert node.client_names(0) in ([], ["from-checkout"])  # joined (the kill may be seen)
    finally:
        cluster.shutdown()
