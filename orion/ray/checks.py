"""What `orion doctor` says about Ray: whether it is installed, and whether a cluster answers.

Both rows are informational: Ray is optional, and no `orion` command needs it. The cluster is
the one ``ray.init()`` would join (``RAY_ADDRESS``, else the one last started on this machine),
checked by opening a TCP connection to its address, which neither joins it nor starts one.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from orion.ray._ray import INSTALL_HINT
from orion_common.prerequisites import Check

CURRENT_CLUSTER_FILE = Path("/tmp/ray/ray_current_cluster")
"""Where `ray start` writes the address of the cluster it started (``ray.init()`` reads it)."""
CONNECT_TIMEOUT_S = 1.0


def check_ray() -> Check:
    try:
        import ray
    except ImportError:
        return Check("Ray", None, f"not installed (optional: {INSTALL_HINT})")
    return Check("Ray", True, f"{ray.__version__} (orion.ray)")


def cluster_address() -> str | None:
    """The address ``ray.init()`` would connect to, or None when there is none."""
    address = os.environ.get("RAY_ADDRESS", "").strip()
    if address and address != "auto":
        return address
    try:
        return CURRENT_CLUSTER_FILE.read_text().strip() or None
    except OSError:
        return None


def reachable(address: str) -> bool:
    """Whether something listens at ``address`` (``host:port``, ``ray://host:port``)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S):
            return True
    except (OSError, ValueError):
        return False


def check_cluster() -> Check:
    address = cluster_address()
    if address is None:
        return Check("Ray cluster", None, "none found (RAY_ADDRESS unset, no `ray start` here)")
    if reachable(address):
        return Check("Ray cluster", True, f"reachable at {address}")
    return Check(
        "Ray cluster",
        False,
        f"not reachable at {address}",
        hint="start one with `ray start --head`, or set RAY_ADDRESS to a running cluster",
        problem=f"the Ray cluster at {address} does not answer",
    )


def ray_checks() -> list[Check]:
    """Ray's rows of `orion doctor`: the cluster row only when Ray is installed."""
    installed = check_ray()
    return [installed, check_cluster()] if installed.ok else [installed]
