"""orion on a local multi-node Ray cluster with stand-in GPUs (CPU only; marked ``ray``).

What users rely on: every GPU of every node gets one daemon, however often they ask; actors
declared with fractional GPUs under ``orion.ray.options`` join the daemon of the GPU Ray gave
them, with their role and the fraction of the GPU's memory as their limit (which the actor itself
sees as the GPU's size), while an actor declared without it joins nothing; a killed actor gives
its slot back; a second HP on one GPU fails visibly instead of running unprotected.
"""

from __future__ import annotations

import ctypes
import os

import pytest
from native_harness import Harness, build_harness, wait_for
from ray_harness import STAND_IN_MEMORY_MIB, StandInCluster, kind_slug, ray_available

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(ray_available() is not None, reason=str(ray_available())),
]


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    try:
        return build_harness(tmp_path_factory.mktemp("fake_cuda_ray"))
    except RuntimeError as error:
        pytest.skip(str(error))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, harness: Harness):
    import orion.ray

    running = StandInCluster(tmp_path_factory.mktemp("ray_cluster"))
    try:
        running.add_node("h100", gpus=2)
        running.add_node("l4", gpus=1)
        orion.ray.start_daemons(sharing="timeslice")
        yield running
    finally:
        running.shutdown()


def test_every_gpu_of_every_node_has_one_daemon_however_often_asked(cluster):
    import orion.ray

    first = {node.node_id: node for node in orion.ray.start_daemons(sharing="timeslice")}
    again = {node.node_id: node for node in orion.ray.start_daemons(sharing="timeslice")}
    for node in cluster.nodes:
        gpus = first[node.node_id].gpus
        assert [gpu.uuid for gpu in gpus] == [gpu["uuid"] for gpu in node.gpus]
        assert {gpu.kind for gpu in gpus} == {kind_slug("h100" if len(gpus) == 2 else "l4")}
        assert all(gpu.memory_bytes == STAND_IN_MEMORY_MIB << 20 for gpu in gpus)
        # Asked again: the same daemons, none started twice.
        assert [gpu.daemon_pid for gpu in again[node.node_id].gpus] == [
            gpu.daemon_pid for gpu in gpus
        ]
        for gpu in range(len(gpus)):
            assert node.daemon_status(gpu)["sharing"] == "timeslice"
    head = [
        node for node in first.values() if node.node_id not in {n.node_id for n in cluster.nodes}
    ]
    assert [node.gpus for node in head] == [()]  # the head has no GPU and no daemon


def probe_actor(ray, harness: Harness):
    """An actor that reports where Ray put it, what it joined, and the GPU memory it sees."""

    class Probe:
        def report(self) -> dict:
            from orion.ray.jobs import join_now

            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            joined = join_now()
            driver = ctypes.CDLL(str(harness.directory / "libcuda.so.1"))
            free, total = ctypes.c_size_t(), ctypes.c_size_t()
            driver.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
            return {
                **joined,
                "ray_visible": visible,
                "node_id": ray.get_runtime_context().get_node_id(),
                "memory_total": total.value,
            }

    return ray.remote(Probe)


def test_fractional_actors_join_their_gpus_daemon_with_role_and_memory_limit(cluster, harness):
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    import orion.ray

    node = next(n for n in cluster.nodes if len(n.gpus) == 2)
    pinned = NodeAffinitySchedulingStrategy(node.node_id, soft=False)
    probe = probe_actor(ray, harness)
    # Fractions two HP actors cannot share one GPU with (Ray could pack two at 0.5 each onto one,
    # and the daemon refuses the second HP): each GPU gets one HP and one BE, whatever the order.
    fractions = {"hp": 0.75, "be": 0.25}
    roles = [role for _ in range(2) for role in ("hp", "be")]
    actors = [
        probe.options(**orion.ray.options(role, num_gpus=fractions[role], name=f"{role}{index}"),
                      scheduling_strategy=pinned).remote()
        for index, role in enumerate(roles)
    ]  # fmt: skip
    reports = ray.get([actor.report.remote() for actor in actors], timeout=120)
    try:
        total = STAND_IN_MEMORY_MIB << 20
        shares = {int(total * fraction) for fraction in fractions.values()}
        by_gpu: dict[str, list[str]] = {}
        for role, report in zip(roles, reports, strict=True):
            assert report["attached"] and report["node_id"] == node.node_id
            by_gpu.setdefault(report["ray_visible"], []).append(report["cuda_visible_devices"])
            # the GPU Ray gave it, by index; after joining, the same GPU by UUID
            gpu = node.gpus[int(report["ray_visible"])]
            assert report["cuda_visible_devices"] == gpu["uuid"]
            # what the program sees: its share
            assert report["memory_total"] == int(total * fractions[role])
        assert sorted(by_gpu) == ["0", "1"]
        for gpu in range(2):
            clients = node.daemon_status(gpu)["clients"]
            assert sorted(c["role"] for c in clients) == ["be", "hp"]
            assert {c["memory_limit_bytes"] for c in clients} == shares
            # The command the status shows is the worker's title, without Ray's padding.
            assert all(c["command"] and c["command"][-1] for c in clients)
    finally:
        for actor in actors:
            ray.kill(actor)


def test_an_actor_without_orion_joins_nothing(cluster, harness):
    import ray

    node = next(n for n in cluster.nodes if len(n.gpus) == 1)
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    plain = probe_actor(ray, harness).options(
        num_gpus=0.5, scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False)
    )
    actor = plain.remote()
    with pytest.raises(ray.exceptions.RayTaskError, match="preload library is not loaded"):
        ray.get(actor.report.remote(), timeout=120)
    ray.kill(actor)
    assert node.client_names(0) == []


def test_a_killed_actor_gives_its_slot_back(cluster, harness):
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    import orion.ray

    node = next(n for n in cluster.nodes if len(n.gpus) == 1)
    actor = (
        probe_actor(ray, harness)
        .options(
            **orion.ray.options("be", num_gpus=0.5, name="doomed"),
            scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
        )
        .remote()
    )
    pid = ray.get(actor.report.remote(), timeout=120)["pid"]
    assert node.client_names(0) == ["doomed"]
    ray.kill(actor)
    wait_for(lambda: node.client_names(0) == [], timeout_s=10, what="the slot to come back")

    def events() -> list[tuple[str, str, str]]:
        return [(e["event"], e["client"], e["pid"]) for e in node.events(0)]

    # the record writer appends the departure after the slot is back: waited for, not assumed
    wait_for(lambda: events()[-1][0] != "join", timeout_s=10, what="the departure's record")
    assert events()[-2:] == [("join", "doomed", str(pid)), ("dead", "doomed", str(pid))]


def test_a_second_hp_on_one_gpu_fails_visibly(cluster, harness):
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    import orion.ray

    node = next(n for n in cluster.nodes if len(n.gpus) == 1)
    group = placement_group([{"GPU": 1}], bundle_label_selector=[{"ray.io/node-id": node.node_id}])
    ray.get(group.ready(), timeout=60)
    in_group = PlacementGroupSchedulingStrategy(group, 0)
    probe = probe_actor(ray, harness)
    first, second = (
        probe.options(**orion.ray.options("hp", num_gpus=0.5, name=name),
                      num_cpus=0, scheduling_strategy=in_group, max_restarts=0).remote()
        for name in ("web", "other")
    )  # fmt: skip
    try:
        assert ray.get(first.report.remote(), timeout=120)["attached"]
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(second.report.remote(), timeout=120)
        assert node.client_names(0) == ["web"]
        refused = [e for e in node.events(0) if e["event"] == "refused"]
        assert refused[-1]["client"] == "other"
        assert "already has a high-priority client, 'web'" in refused[-1]["detail"]
    finally:
        ray.kill(first)
        ray.kill(second)
        remove_placement_group(group)
