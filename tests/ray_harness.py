"""A multi-node Ray cluster on this machine whose nodes have stand-in GPUs (CPU only).

Ray's own test utility (``ray.cluster_utils.Cluster``) starts a head and worker nodes as local
processes; each worker node here gets logical GPUs (``num_gpus``) and, in its environment, the
same GPUs as stand-ins for orion (``ORION_STAND_IN_GPUS``: UUID, name, memory) and a state
folder of its own (``ORION_STATE_DIR``), so the daemons of "GPU 0" of two nodes do not meet.
Everything listens on the loopback address only. Tests that use it are marked ``ray`` and skip
cleanly when Ray is not installed.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Before Ray is imported: every Ray process of these tests binds and dials 127.0.0.1 only
# (Ray reads this once, at import, in the test process and in each node it starts).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from orion_daemon import client as daemon_client
from orion_daemon import state

REPO = Path(__file__).resolve().parents[1]
GIB = 1 << 30
STAND_IN_MEMORY_MIB = 8192

KINDS = {
    "h100": "NVIDIA H100 80GB HBM3",
    "h200": "NVIDIA H200",
    "a100": "NVIDIA A100-SXM4-80GB",
    "l4": "NVIDIA L4",
}


def kind_slug(short: str) -> str:
    from postprocess.profile_format import gpu_slug

    return gpu_slug(KINDS[short])


@dataclass
class StandInNode:
    """One worker node: its Ray node, id, state folder and stand-in GPUs."""

    node: Any
    kind: str
    node_id: str
    state_dir: Path
    gpus: list[dict[str, Any]]

    def daemon_status(self, gpu: int) -> dict[str, Any]:
        record = state.require_daemon(gpu, state.state_dir(gpu, self.state_dir))
        return daemon_client.status(record)

    def client_names(self, gpu: int) -> list[str]:
        return [client["name"] for client in self.daemon_status(gpu)["clients"]]

    def events(self, gpu: int) -> list[dict[str, str]]:
        """clients.csv as written so far. The daemon's records thread appends to it while this
        reads: one snapshot of the text, whole lines only, so a header or a row not yet complete
        is left for the next read (a reader racing the header once found rows and no columns)."""
        import csv
        import io

        table = state.state_dir(gpu, self.state_dir) / state.CLIENTS_TABLE
        text = table.read_text()
        return list(csv.DictReader(io.StringIO(text[: text.rfind("\n") + 1])))


class StandInCluster:
    """A head without GPUs and worker nodes added with :meth:`add_node`; the driver connects.

    ``from_checkout``: the driver works from the repository's root, as a user runs
    ``python examples/ray/half_a_gpu_each.py``, and its workers are given no path to orion:
    Ray puts the driver's folder first on their import path, so they import the checkout's
    packages (which hold no built library). Otherwise the driver works from the cluster's folder
    and its workers import the orion this test imports."""

    def __init__(self, folder: Path, *, from_checkout: bool = False) -> None:
        import ray
        from ray.cluster_utils import Cluster

        self.folder = folder
        self.from_checkout = from_checkout
        self.nodes: list[StandInNode] = []
        self._count = 0
        self._previous_folder = os.getcwd()
        os.chdir(REPO if from_checkout else folder)
        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 1,
                "include_dashboard": False,
                "env_vars": self._environment(folder / "head", []),
            },
        )
        ray.init(address=self.cluster.address)

    def _environment(self, state_dir: Path, gpus: list[dict[str, Any]]) -> dict[str, str]:
        # Workers import the orion this test imports (installed, or the checkout with its built
        # library), unless the test is of a checkout, and tests/ for the tests' job hosts; they
        # see the node's stand-in GPUs and state folder, as a real node's workers see its GPUs.
        import orion_daemon

        installed = Path(orion_daemon.__file__).resolve().parent.parent
        first = [] if self.from_checkout else [str(installed)]
        path = os.pathsep.join([*first, str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])
        # The node's temporary files (its jobs' folders, where their tables grow) under its
        # state folder, where a test can watch them.
        (state_dir / "tmp").mkdir(parents=True, exist_ok=True)
        environment = {
            "PYTHONPATH": path,
            "ORION_STATE_DIR": str(state_dir),
            "TMPDIR": str(state_dir / "tmp"),
        }
        if gpus:
            environment["ORION_STAND_IN_GPUS"] = json.dumps(gpus)
        return environment

    def add_node(self, kind: str, gpus: int, num_cpus: int = 8) -> StandInNode:
        import ray

        index = self._count
        self._count += 1
        stand_ins = [
            {
                "uuid": f"GPU-{index:04d}{gpu:04d}-0000-4000-8000-{kind:0>12}",
                "name": KINDS[kind],
                "memory_mib": STAND_IN_MEMORY_MIB,
            }
            for gpu in range(gpus)
        ]
        # Logical CPUs: actors that ask for none are still scheduled one per CPU at start.
        state_dir = self.folder / f"node{index}"
        node = self.cluster.add_node(
            num_cpus=num_cpus, num_gpus=gpus, env_vars=self._environment(state_dir, stand_ins)
        )
        known = {n.node_id for n in self.nodes}
        node_id = next(
            n["NodeID"]
            for n in ray.nodes()
            if n["Alive"] and n["Resources"].get("GPU") and n["NodeID"] not in known
        )
        added = StandInNode(node, kind, node_id, state_dir, stand_ins)
        self.nodes.append(added)
        return added

    def remove_node(self, node: StandInNode) -> None:
        self.cluster.remove_node(node.node, allow_graceful=False)
        self.nodes.remove(node)

    def shutdown(self) -> None:
        import ray

        from orion.ray import stop_daemons

        try:
            stop_daemons()
        finally:
            ray.shutdown()
            self.cluster.shutdown()
            os.chdir(self._previous_folder)


def ray_available() -> str | None:
    """Why the Ray tests cannot run here (None: they can)."""
    try:
        import ray
        import ray.cluster_utils  # noqa: F401
    except ImportError:
        return 'Ray is not installed (pip install "orion-gpu-share[ray]")'
    if sys.platform != "linux":
        return "the preload library and the daemons are Linux-only"
    return None
