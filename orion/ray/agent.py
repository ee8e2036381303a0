"""One agent per Ray node that makes sure each of the node's GPUs has an orion daemon.

The agent is a named, detached actor (``orion-agent-<node id>`` in namespace ``orion``) pinned
to its node and holding no resources, so asking for it twice, from any driver, finds the one
there is (``get_if_exists``), and it lives as long as the node. It starts each missing daemon as
`orion up` would (:func:`orion_daemon.control.gpu_settings`), told to stop when the agent's
process is gone (``DaemonSettings.stop_with_pid``): when the node or the cluster stops, or the
agent is killed, its daemons open their gates and stop within a tenth of a second, and no daemon
outlives the node it served. A daemon that was already running (started by hand with `orion up`)
is used as it is and left running.

Which state folder: the node's own (``ORION_STATE_DIR`` in the node's environment, else the
default), the one its workers' preload library looks in.
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from orion.ray._ray import NAMESPACE, connect
from orion_common.errors import OrionError, UsageError
from orion_daemon import state

AGENT_PREFIX = "orion-agent-"
IDLE_POLL_S = 0.1
"""How often a daemon about to be restarted is asked whether its last clients are gone."""


@dataclass(frozen=True)
class DaemonOptions:
    """How the agents start missing daemons (`orion up`'s options)."""

    policy: str = "orion"
    sharing: str | None = None
    """None: the policy's own default (:func:`scheduler_core.sharing.default_sharing`), as
    `orion up` without ``--sharing``."""
    shares: bool = False
    queue_limit_us: float | None = None
    be_when_daemon_gone: str = "open"
    daemon_gone_hold_s: float | None = None
    """None: the daemon's own default (`orion up` without ``--daemon-gone-hold-s``)."""
    hp_context: str | None = None
    be_sm_percent: float | None = None
    hp_quiet_us: float | None = None
    be_graph_gate: str | None = None
    """These four: :mod:`scheduler_core.settings`' declarations, None as `orion up` without the
    option."""


@dataclass(frozen=True)
class DaemonNeed:
    """How a daemon must schedule for a plan GPU's jobs to run as their matrix measured them:
    the native policy, the sharing mode and the queue limit (None: the HP profile's)."""

    policy: str
    sharing: str
    queue_limit_us: float | None = None

    def runs_as(self, record: dict[str, Any]) -> bool:
        """Whether the daemon of ``record`` (its ``daemon.json``) schedules this way."""
        settings = record.get("settings") or {}
        limit_ns = None if self.queue_limit_us is None else round(self.queue_limit_us * 1000)
        return (
            record.get("policy") == self.policy
            and record.get("sharing") == self.sharing
            and settings.get("queue_limit_ns") == limit_ns
        )

    @classmethod
    def of(cls, record: dict[str, Any]) -> DaemonNeed:
        """How the daemon of ``record`` (its ``daemon.json``) schedules."""
        limit_ns = (record.get("settings") or {}).get("queue_limit_ns")
        return cls(
            str(record.get("policy")),
            str(record.get("sharing")),
            None if limit_ns is None else limit_ns / 1000,
        )

    def options(self) -> dict[str, Any]:
        """The :class:`DaemonOptions` fields that start a daemon this way."""
        return {
            "policy": self.policy,
            "sharing": self.sharing,
            "queue_limit_us": self.queue_limit_us,
        }

    def __str__(self) -> str:
        limit = "" if self.queue_limit_us is None else f", queue limit {self.queue_limit_us:g} us"
        return f"{self.policy} {_SHARING_WORDS[self.sharing]}{limit}"


_SHARING_WORDS = {"mps": "under MPS", "timeslice": "time-sliced"}


def _runs(record: dict[str, Any]) -> str:
    limit = (record.get("settings") or {}).get("queue_limit_ns")
    sharing = _SHARING_WORDS.get(str(record.get("sharing")), str(record.get("sharing")))
    return f"{record.get('policy')} {sharing}" + (
        "" if limit is None else f", queue limit {limit / 1000:g} us"
    )


@dataclass(frozen=True)
class NodeGpu:
    """One GPU of a node and its daemon, as the node's agent reports it."""

    index: int
    uuid: str | None
    name: str | None
    kind: str
    """The GPU kind as pair matrices and plans name it (``nvidia-h100-80gb-hbm3``)."""
    memory_bytes: int | None
    folder: str
    daemon_pid: int
    policy: str
    sharing: str
    started_here: bool
    """Whether the agent started this daemon (and it stops with the agent)."""


@dataclass(frozen=True)
class NodeInventory:
    node_id: str
    hostname: str
    gpus: tuple[NodeGpu, ...]
    problem: str | None = None
    """Why daemons could not be started on this node (None: every GPU has one)."""


class NodeAgent:
    """The agent's code (made a Ray actor by :func:`start_daemons`)."""

    def __init__(self, options: dict[str, Any], preload: str) -> None:
        self.options = DaemonOptions(**options)
        self.preload = preload
        self.started: dict[int, Path] = {}

    def ensure(self) -> dict[str, Any]:
        """Starts a daemon for each GPU of this node that has none; the node's inventory."""
        import ray

        node_id = ray.get_runtime_context().get_node_id()
        try:
            gpus = [asdict(gpu) for gpu in self._ensure_all()]
            problem = None
        except OrionError as error:
            gpus, problem = [], error.message + (f" ({error.hint})" if error.hint else "")
        return {"node_id": node_id, "hostname": platform.node(), "gpus": gpus, "problem": problem}

    def _ensure_all(self) -> list[NodeGpu]:
        from orion_common import sysinfo

        if not Path(self.preload).is_file():
            raise OrionError(
                f"orion's preload library is not at {self.preload} on this node, where the "
                "driver's orion has it",
                hint="install orion at the same path on every node (one image for the cluster)",
            )
        return [self._ensure(index) for index in range(sysinfo.gpu_count() or 0)]

    def _ensure(self, index: int) -> NodeGpu:
        from orion_daemon.control import start_detached

        folder = state.state_dir(index)
        record = state.live_record(folder)
        if record is None:
            record = start_detached(self._settings(index, folder, self.options))
            self.started[index] = folder
        return self._gpu(index, folder, record)

    @staticmethod
    def _settings(index: int, folder: Path, options: DaemonOptions) -> Any:
        from orion_daemon.control import gpu_settings, hold_bound

        return gpu_settings(
            index,
            folder,
            policy=options.policy,
            sharing=options.sharing,
            shares=options.shares,
            queue_limit_us=options.queue_limit_us,
            stop_with_pid=os.getpid(),
            be_when_daemon_gone=options.be_when_daemon_gone,
            **hold_bound(options.daemon_gone_hold_s),
            hp_context=options.hp_context,
            be_sm_percent=options.be_sm_percent,
            hp_quiet_us=options.hp_quiet_us,
            be_graph_gate=options.be_graph_gate,
        )

    def _gpu(self, index: int, folder: Path, record: dict[str, Any]) -> NodeGpu:
        from postprocess.profile_format import gpu_slug

        gpu = record.get("gpu") or {}
        name = gpu.get("name")
        return NodeGpu(
            index=index,
            uuid=gpu.get("uuid"),
            name=name,
            kind=gpu_slug(name) if name else "unknown-gpu",
            memory_bytes=gpu.get("memory_bytes"),
            folder=str(folder),
            daemon_pid=int(record["pid"]),
            policy=str(record.get("policy")),
            sharing=str(record.get("sharing")),
            started_here=index in self.started,
        )

    def serve_as(
        self, index: int, wanted: dict[str, Any], idle_wait_s: float = 0.0
    ) -> dict[str, Any]:
        """Makes GPU ``index``'s daemon run as ``wanted`` says (:class:`DaemonNeed`'s fields):
        kept when it does; restarted so when this agent started it, no client is joined to it
        (within ``idle_wait_s``: clients that were just ended take a moment to be gone) and a
        daemon of the new settings can start here (MPS present for ``mps``); else left as it
        is, with the one-line reason. ``{"gpu": NodeGpu's fields or None, "problem", "previous":
        the replaced daemon's DaemonNeed fields, or None}``."""
        from orion_daemon.control import start_detached, stop

        need = DaemonNeed(**wanted)
        folder = state.state_dir(index)
        previous = None
        try:
            record = state.live_record(folder)
            if record is None or not need.runs_as(record):
                if record is not None:
                    self._check_restart(index, record, need, idle_wait_s)
                    previous = DaemonNeed.of(record).options()
                settings = self._settings(index, folder, replace(self.options, **need.options()))
                if record is not None:
                    stop(index, folder)
                    self.started.pop(index, None)
                record = start_detached(settings)
                self.started[index] = folder
            gpu = asdict(self._gpu(index, folder, record))
            return {"gpu": gpu, "problem": None, "previous": previous}
        except OrionError as error:
            return {"gpu": None, "problem": error.message, "previous": None}

    def _check_restart(
        self, index: int, record: dict[str, Any], need: DaemonNeed, idle_wait_s: float
    ) -> None:
        """Raises when GPU ``index``'s daemon (``record``) is not this agent's to restart, or
        still has clients after ``idle_wait_s``."""
        from orion_daemon import client as daemon_client

        runs = f"GPU {index}'s daemon on {platform.node()} runs {_runs(record)}, not {need}"
        if index not in self.started:
            raise OrionError(f"{runs}, and was started by hand: stop it with `orion down`")
        deadline = time.monotonic() + idle_wait_s
        while True:
            clients = daemon_client.status(record)["clients"]
            if not clients:
                return
            if time.monotonic() >= deadline:
                raise OrionError(f"{runs}, and {len(clients)} client(s) are joined to it")
            time.sleep(IDLE_POLL_S)

    def stop(self) -> list[int]:
        """Stops the daemons this agent started (their clients run on ungated)."""
        from orion_daemon.control import stop

        stopped = []
        for index, folder in sorted(self.started.items()):
            try:
                stop(index, folder)
                stopped.append(index)
            except OrionError:
                pass  # gone already
        self.started.clear()
        return stopped

    def monotonic_ns(self) -> int:
        """This node's monotonic clock (the run clock of the jobs on its GPUs)."""
        return time.monotonic_ns()


def _alive_nodes(ray: Any) -> list[dict[str, Any]]:
    return [node for node in ray.nodes() if node.get("Alive")]


def agent(ray: Any, node_id: str, options: DaemonOptions | None = None) -> Any:
    """The agent of node ``node_id``, created there if it has none."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from orion.ray.env import preload_path

    actor = ray.remote(NodeAgent).options(
        name=AGENT_PREFIX + node_id,
        namespace=NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        num_cpus=0,
        max_restarts=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
    )
    return actor.remote(asdict(options or DaemonOptions()), preload_path())


def check_daemon_options(**options: Any) -> dict[str, Any]:
    """Raises :class:`UsageError` for :func:`start_daemons` options (all but ``address``) that
    it does not take, or that no daemon runs with, before Ray is reached: `orion up`'s rules
    (:func:`orion_daemon.control.check_options`, the sharing mode by its declaration,
    :data:`scheduler_core.settings.SHARING`). Returns every option as the daemons take it: the
    defaults of :func:`start_daemons` filled in, the sharing mode parsed (None: the policy's)."""
    import inspect
    import math

    from orion_daemon.control import check_hold_bound, check_options, hold_bound
    from scheduler_core.settings import (
        BE_GRAPH_GATE,
        BE_SM_PERCENT,
        HP_CONTEXT,
        HP_QUIET_US,
        SHARING,
    )

    parameters = inspect.signature(start_daemons).parameters
    known = set(parameters) - {"address"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise UsageError(
            f"start_daemons takes no option {', '.join(map(repr, unknown))}; it takes "
            f"{', '.join(sorted(known))}"
        )
    values = {name: parameters[name].default for name in known} | options
    timeout_s = values["timeout_s"]
    if not (isinstance(timeout_s, int | float) and math.isfinite(timeout_s) and timeout_s > 0):
        raise UsageError(f"timeout_s must be a positive number of seconds (got {timeout_s!r})")
    for setting in (SHARING, HP_CONTEXT, BE_SM_PERCENT, HP_QUIET_US, BE_GRAPH_GATE):
        values[setting.name] = setting.checked(values[setting.name], setting.name)
    check_hold_bound(values["be_when_daemon_gone"], values["daemon_gone_hold_s"])
    check_options(
        policy=values["policy"],
        sharing=values["sharing"],
        shares=bool(values["shares"]),
        queue_limit_us=values["queue_limit_us"],
        be_when_daemon_gone=values["be_when_daemon_gone"],
        **hold_bound(values["daemon_gone_hold_s"]),
        hp_context=values["hp_context"],
        be_sm_percent=values["be_sm_percent"],
        hp_quiet_us=values["hp_quiet_us"],
        be_graph_gate=values["be_graph_gate"],
    )
    return values


def start_daemons(
    address: str | None = None,
    *,
    policy: str = "orion",
    sharing: str | None = None,
    shares: bool = False,
    queue_limit_us: float | None = None,
    be_when_daemon_gone: str = "open",
    daemon_gone_hold_s: float | None = None,
    hp_context: str | None = None,
    be_sm_percent: float | None = None,
    hp_quiet_us: float | None = None,
    be_graph_gate: str | None = None,
    timeout_s: float = 120.0,
) -> list[NodeInventory]:
    """Makes sure every GPU of every node of the Ray cluster has an orion daemon; idempotent.

    Starts one agent per node that has none (nodes without GPUs included: they report none),
    and each agent starts the daemons its node lacks with these options (`orion up`'s). Returns
    each node's GPUs and daemons. Call it again after nodes join the cluster. A node where
    daemons cannot start is reported with its ``problem``; this raises only when none could.
    ``sharing`` None: the policy's default, as `orion up` without ``--sharing``; ``hp_context``,
    ``be_sm_percent``, ``hp_quiet_us`` and ``be_graph_gate`` as `orion up`'s options of those
    names (e.g. ``sharing="mps", hp_context="own", be_sm_percent=50, hp_quiet_us=300``, the
    suite's hp-chooses daemons). Options no daemon runs with are refused here, before Ray is
    reached.
    """
    checked = check_daemon_options(
        policy=policy,
        sharing=sharing,
        shares=shares,
        queue_limit_us=queue_limit_us,
        be_when_daemon_gone=be_when_daemon_gone,
        daemon_gone_hold_s=daemon_gone_hold_s,
        hp_context=hp_context,
        be_sm_percent=be_sm_percent,
        hp_quiet_us=hp_quiet_us,
        be_graph_gate=be_graph_gate,
        timeout_s=timeout_s,
    )
    ray = connect(address)
    options = DaemonOptions(**{field.name: checked[field.name] for field in fields(DaemonOptions)})
    nodes = _alive_nodes(ray)
    agents = [agent(ray, node["NodeID"], options) for node in nodes]
    reports = ray.get([handle.ensure.remote() for handle in agents], timeout=timeout_s)
    inventory = [
        NodeInventory(
            node_id=report["node_id"],
            hostname=report["hostname"],
            gpus=tuple(NodeGpu(**gpu) for gpu in report["gpus"]),
            problem=report["problem"],
        )
        for report in reports
    ]
    problems = [node for node in inventory if node.problem]
    if problems and len(problems) == len(inventory):
        raise OrionError(f"no daemon could start on any node: {problems[0].problem}")
    return inventory


def stop_daemons(address: str | None = None, timeout_s: float = 60.0) -> int:
    """Stops the agents of every live node and the daemons they started; how many agents."""
    ray = connect(address)
    handles = []
    for node in _alive_nodes(ray):
        try:
            handles.append(ray.get_actor(AGENT_PREFIX + node["NodeID"], namespace=NAMESPACE))
        except ValueError:
            continue  # no agent there
    calls = [handle.stop.remote() for handle in handles]
    for call in calls:
        # An agent whose node is going cannot answer: its daemons stop with it (stop_with_pid).
        with contextlib.suppress(ray.exceptions.RayError):
            ray.get(call, timeout=timeout_s)
    for handle in handles:
        ray.kill(handle)
    return len(handles)
