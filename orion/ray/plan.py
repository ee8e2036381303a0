"""An `orion plan` carried out on a Ray cluster: ``orion.ray.run_plan(plan, address=...)``.

The plan says which jobs share each GPU and what kind of GPU it is. Here each plan GPU becomes
a placement group of one bundle, one whole GPU, pinned by its ``ray.io/node-id`` label to a node
whose GPUs are of the planned kind (found through the node agents, which also make sure every
GPU has its daemon); each of its jobs is an actor in that bundle with an equal part of the GPU,
under its role (``orion.ray.runtime_env``), so Ray gives them the one GPU and the library joins
them to its daemon. A bundle of a whole GPU is what keeps a plan GPU's jobs together: Ray packs
fractional requests into GPUs as it sees fit, but the GPUs of a bundle are reserved for the
actors placed in it.

Each job runs colocation's own client (:mod:`orion.ray.jobs`), and the driver plays
`orion colocate`'s part for each plan GPU at once (a thread each): it waits until the GPU's jobs
are warm, gives them one measurement window on their node's clock, stops them, and writes their
tables into an ordinary run directory under one plan-run directory written by the same code as
`orion run-plan`'s (:class:`placement.plan_run.PlanRunRecord`), so `orion report` reads it as it
reads a local plan run. A GPU whose node is lost, or whose jobs fail, is recorded as failed; the
other GPUs' runs are recorded whole.

Each plan GPU runs under the policy, sharing mode and queue limit its pair matrix was measured in
(the plan's ``settings``, as `orion run-plan` runs them), not under whatever its node's daemons
were started with: once the GPU's bundle is reserved, a task in it asks Ray which GPU that is,
and the node's agent makes that GPU's daemon schedule so (:meth:`NodeAgent.serve_as`), restarting
a daemon it started itself while no client is joined to it. A daemon started by hand, or one with
clients, that schedules otherwise is left alone and that GPU's run fails with the one-line reason;
a plan GPU whose policy no daemon carries (``dedicated``: each job alone) is refused before Ray is
reached. The daemon a run had is recorded (``environment.daemon_policy``, ``daemon_sharing``).
A daemon restarted so is restarted as it was once the GPU's jobs are gone (a note of the run says
so, or why not), so a plan leaves the cluster's daemons as it found them.

Differences from a local plan run, all written into each run's ``notes``: nobody samples
``gpu.csv``, and jobs run without memory limits, as `orion pairs` measured them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from colocation.arrivals import derive_seed
from colocation.config import parse_jobs
from colocation.protocol import ClientSpec, spec_path
from colocation.rundir import STATUS_COMPLETE, STATUS_FAILED, RunRecord, create_run_dir
from colocation.runner import DRAIN_S, client_spec
from orion.ray._ray import connect
from orion.ray.agent import DaemonNeed, NodeGpu, NodeInventory, agent, start_daemons
from orion.ray.env import runtime_env
from orion.ray.jobs import JobHost
from orion_common import run_format
from orion_common.csv_table import table_rows
from orion_common.errors import OrionError
from orion_daemon.mps import with_sm_share
from placement.plan_file import Plan, PlanGpu, load_plan
from placement.plan_run import PlanRunRecord, plan_jobs, planned_duration

START_DELAY_S = 1.0
"""Between the last job becoming ready and the window's start: the start reaches every job's
actor (a remote call each) well before it."""
_POLL_S = 0.2
RESTORE_WAIT_S = 30.0
"""How long the daemon of a finished plan GPU may take to see its jobs gone before it is
restarted as it was (its jobs' actors were killed: their slots come back within seconds)."""


def daemon_need(index: int, config: dict[str, Any]) -> DaemonNeed:
    """How the daemon of plan GPU ``index`` must schedule for its jobs file ``config`` (from
    :func:`placement.plan_run.plan_jobs`) to run as measured: the jobs policy's native policy, in
    the file's sharing mode (else the policy's default), with its queue limit. A policy no daemon
    carries is refused in one line."""
    from colocation.policies import POLICIES

    run = config["run"]
    policy = POLICIES[run["policy"]]
    if policy.sequential or not policy.sharings:
        raise OrionError(
            f"plan GPU {index}: policy {policy.name!r} runs each job alone, and a Ray plan GPU "
            "runs its jobs together",
            hint="plan with a policy that shares the GPU, or run the plan with `orion run-plan`",
        )
    sharing = run.get("sharing") or policy.sharing  # a policy that shares has a default
    limit = (run.get("thresholds") or {}).get("queue_limit_us")
    return DaemonNeed(policy.native_policy, sharing, None if limit is None else float(limit))


@dataclass(frozen=True)
class Placement:
    """Where a plan GPU runs: a node with a free GPU of the planned kind."""

    gpu: PlanGpu
    node: NodeInventory


def place(plan: Plan, inventory: list[NodeInventory]) -> list[Placement]:
    """A node for every plan GPU with clients, of the planned kind, at most as many plan GPUs
    per node as it has GPUs of that kind; the nodes in the order the cluster lists them."""
    free: dict[str, dict[str, int]] = {}
    have: dict[str, int] = {}
    for node in inventory:
        kinds: dict[str, int] = {}
        for gpu in node.gpus:
            kinds[gpu.kind] = kinds.get(gpu.kind, 0) + 1
        # A node with GPUs of several kinds cannot be told which one to give: left out.
        if len(kinds) == 1:
            free[node.node_id] = kinds
            for kind, count in kinds.items():
                have[kind] = have.get(kind, 0) + count
    placements = []
    for gpu in plan.gpus:
        if not gpu.clients:
            continue
        node = next(
            (n for n in inventory if free.get(n.node_id, {}).get(gpu.kind, 0) > 0),
            None,
        )
        if node is None:
            wanted = sum(1 for g in plan.gpus if g.clients and g.kind == gpu.kind)
            raise OrionError(
                f"the plan puts jobs on {wanted} GPU(s) of kind {gpu.kind}; the cluster's nodes "
                f"have {have.get(gpu.kind, 0)}",
                hint="add nodes of that kind, or plan for the cluster's GPUs "
                "(start_daemons() lists them)",
            )
        free[node.node_id][gpu.kind] -= 1
        placements.append(Placement(gpu, node))
    return placements


@dataclass
class _Job:
    """One job of a plan GPU, as the driver follows it."""

    client: Any  # colocation's ClientConfig
    actor: Any
    state: str = "starting"  # starting, ready, running, finished, failed
    ready: dict[str, Any] = field(default_factory=dict)
    finished: dict[str, Any] = field(default_factory=dict)
    done: int = 0
    where: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    exit_code: int | None = None


class _GpuRun:
    """One plan GPU on its node: the run `orion colocate` would make of its jobs file."""

    def __init__(
        self,
        ray: Any,
        placement: Placement,
        config: dict[str, Any],
        record: PlanRunRecord,
        host: type,
        ready_timeout_s: float,
    ) -> None:
        self.ray = ray
        self.placement = placement
        self.config = config
        self.need = daemon_need(placement.gpu.index, config)
        self.daemon: NodeGpu | None = None  # the daemon of the GPU Ray reserved, once known
        self.previous: dict[str, Any] | None = None  # how it ran before, if it was restarted
        self.jobs_config = parse_jobs(config, record.gpu_dir(placement.gpu.index))
        self.record = record
        self.host = host
        self.ready_timeout_s = ready_timeout_s
        self.jobs: list[_Job] = []
        self.run: RunRecord | None = None
        self.origin_ns = 0
        self.window: tuple[float, float] | None = None
        self.group: Any = None

    # -- the whole run ----------------------------------------------------------------------
    def execute(self, duration_s: float) -> None:
        gpu = self.placement.gpu
        run_dir = create_run_dir(self.record.gpu_dir(gpu.index), self.jobs_config.run.policy)
        self.record.set_run_dir(gpu.index, run_dir)
        self.run = RunRecord.begin(
            run_dir,
            policy=self.jobs_config.run.policy,
            config=self.jobs_config.to_json_dict(),
            environment=self._environment(),
            clients=[self._entry(client) for client in self.jobs_config.clients],
        )
        with self.run:
            try:
                self._start_jobs()
                if self._wait_ready():
                    self._measure(duration_s)
            finally:
                self._stop_jobs()
                self._write_results()
                self._restore()
            failed = all(job.state == "failed" for job in self.jobs)
            self.run.finish(STATUS_FAILED if failed else STATUS_COMPLETE)
        self.record.gpu(gpu.index)["exit_code"] = 0 if self.run.status == STATUS_COMPLETE else 1

    def _environment(self) -> dict[str, Any]:
        node = self.placement.node
        first = next(g for g in node.gpus if g.kind == self.placement.gpu.kind)
        return {
            "gpu_name": first.name,
            "hostname": node.hostname,
            "ray_node_id": node.node_id,
            # what the matrix was measured in; the daemon's own once it serves the GPU (_serve)
            "daemon_policy": self.need.policy,
            "daemon_sharing": self.need.sharing,
            "daemon_queue_limit_us": self.need.queue_limit_us,
            "client_device": self._device(),
        }

    @staticmethod
    def _device() -> str:
        import os

        from colocation.preflight import CLIENT_DEVICE_ENV

        # The actor sees one GPU, its own: cuda:0 (tests run the jobs on the CPU).
        return os.environ.get(CLIENT_DEVICE_ENV, "").strip() or "cuda:0"

    def _entry(self, client: Any) -> dict[str, Any]:
        """The client's run.json entry, with the fields `orion colocate` writes."""
        from colocation.rundir import client_entry

        return client_entry(
            client,
            seed=derive_seed(self.jobs_config.run.seed, client.name),
            profile=None,
            table=run_format.client_table(client.name),
            log=None,
        )

    def _spec(self, client: Any) -> ClientSpec:
        # The clock's origin is the job's node's (JobHost.begin).
        return client_spec(self.jobs_config, client, device=self._device(), clock_origin_ns=0)

    # -- the jobs ---------------------------------------------------------------------------
    def _start_jobs(self) -> None:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        ray = self.ray
        gpu = self.placement.gpu
        group = placement_group(
            [{"GPU": 1}], bundle_label_selector=[{"ray.io/node-id": self.placement.node.node_id}]
        )
        self.group = group
        try:
            ray.get(group.ready(), timeout=self.ready_timeout_s)
        except Exception as error:
            raise OrionError(
                f"plan GPU {gpu.index}: no GPU came free on node {self.placement.node.node_id}: "
                f"{error}"
            ) from None
        strategy = PlacementGroupSchedulingStrategy(group, 0)
        self._serve(strategy)
        share = 1.0 / len(self.jobs_config.clients)
        remote = ray.remote(self.host)
        for client in self.jobs_config.clients:
            spec = self._spec(client)
            spec.write(spec_path(self.run.run_dir, client.name))
            # The HP's SLO is its latency target: the daemon bounds BE work queued beside it.
            target = self._slo(client.name) if client.is_hp else None
            environment = runtime_env(client.role, name=client.name, latency_target_ms=target)
            # mps-share's SM partition, set where the process starts, as a local run sets it
            environment["env_vars"] = with_sm_share(environment["env_vars"], client.sm_percent)
            actor = remote.options(
                num_gpus=share,
                num_cpus=0,
                max_restarts=0,
                scheduling_strategy=strategy,
                runtime_env=environment,
            ).remote({k: v for k, v in spec.__dict__.items() if k != "clock_origin_ns"})
            self.jobs.append(_Job(client=client, actor=actor))
        for job in self.jobs:
            self._call(
                job, lambda j: j.actor.where.remote(), lambda j, where: j.where.update(where)
            )
        alive = [job for job in self.jobs if job.state != "failed"]
        if alive:
            self.origin_ns = ray.get(alive[0].actor.monotonic_ns.remote())
            # Where the table times come from (not "scheduler": the daemon's state is its own).
            self.run.data["ray"] = {
                "node_id": self.placement.node.node_id,
                "clock_origin_ns": self.origin_ns,
            }
            for job in alive:
                job.actor.begin.remote(self.origin_ns)

    def _serve(self, strategy: Any) -> None:
        """Makes the daemon of the GPU Ray reserved for this plan GPU schedule as the matrix was
        measured (:func:`daemon_need`): a task holding the whole bundle says which GPU it is,
        and the node's agent keeps, restarts or refuses that GPU's daemon."""
        ray = self.ray
        gpu = self.placement.gpu
        probe = ray.remote(_bundle_gpu).options(
            num_gpus=1, num_cpus=0, max_retries=0, scheduling_strategy=strategy
        )
        try:
            index = ray.get(probe.remote(), timeout=self.ready_timeout_s)
            node_agent = agent(ray, self.placement.node.node_id)
            answer = ray.get(
                node_agent.serve_as.remote(index, self.need.options()),
                timeout=self.ready_timeout_s,
            )
        except Exception as error:
            raise OrionError(
                f"plan GPU {gpu.index}: the daemon of its GPU could not be asked: "
                f"{_first_line(error)}"
            ) from None
        if answer["problem"]:
            raise OrionError(f"plan GPU {gpu.index}: {answer['problem']}")
        self.daemon = NodeGpu(**answer["gpu"])
        self.previous = answer.get("previous")
        self.run.data["environment"].update(
            daemon_policy=self.daemon.policy,
            daemon_sharing=self.daemon.sharing,
            daemon_gpu_index=self.daemon.index,
        )
        self.run.save()

    def _restore(self) -> None:
        """A daemon restarted for this run is restarted as it was before it, once the run's
        jobs are gone; what came of it is a note of the run."""
        if self.previous is None or self.daemon is None:
            return
        index = self.daemon.index
        was = DaemonNeed(**self.previous)
        try:
            answer = self.ray.get(
                agent(self.ray, self.placement.node.node_id).serve_as.remote(
                    index, self.previous, RESTORE_WAIT_S
                ),
                timeout=self.ready_timeout_s,
            )
            problem = answer["problem"]
        except Exception as error:
            problem = _first_line(error)
        if problem:
            self.run.note(f"GPU {index}'s daemon was left running {self.need}: {problem}")
        else:
            self.run.note(f"GPU {index}'s daemon was restarted as it was before the run ({was})")
        self.run.save()

    def _slo(self, name: str) -> float | None:
        planned = next(c for c in self.placement.gpu.clients if c.name == name)
        return planned.p99_slo_ms

    def _call(self, job: _Job, call: Callable[[_Job], Any], use: Callable[[_Job, Any], None]):
        """``use(job, result of call(job))``; a job whose actor died is marked failed."""
        if job.state == "failed":
            return
        try:
            use(job, self.ray.get(call(job), timeout=self.ready_timeout_s))
        except Exception as error:
            self._fail(job, f"its actor died: {_first_line(error)}")

    def _fail(self, job: _Job, error: str) -> None:
        if job.state != "failed":
            job.state, job.error = "failed", job.error or error

    def _poll(self) -> None:
        for job in self.jobs:
            self._call(job, lambda j: j.actor.messages.remote(), self._handle)
        self._save()

    def _handle(self, job: _Job, messages: list[dict[str, Any]]) -> None:
        for message in messages:
            kind = message.get("type")
            if kind == "ready":
                job.state, job.ready = "ready", message
            elif kind == "progress":
                job.done = int(message.get("done", job.done))
            elif kind == "finished":
                job.state, job.finished = "finished", message
                job.done = int(message.get("done", job.done))
            elif kind == "error":
                self._fail(job, str(message.get("message")))

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self.ready_timeout_s
        while any(job.state == "starting" for job in self.jobs):
            self._poll()
            if time.monotonic() > deadline:
                for job in self.jobs:
                    if job.state == "starting":
                        self._fail(job, f"not ready after {self.ready_timeout_s:.0f} s")
            time.sleep(_POLL_S)
        return any(job.state == "ready" for job in self.jobs)

    def _measure(self, duration_s: float) -> None:
        ready = [job for job in self.jobs if job.state == "ready"]
        now = self.ray.get(ready[0].actor.now_s.remote(self.origin_ns))
        start = now + START_DELAY_S
        for job in ready:
            job.state = "running"
            job.actor.start.remote(start, duration_s)
        self.window = (start, start + duration_s)
        self.run.data["measure_start_s"] = start
        self.run.data["measure_end_s"] = start + duration_s
        deadline = time.monotonic() + START_DELAY_S + duration_s
        while time.monotonic() < deadline and any(job.state == "running" for job in self.jobs):
            self._poll()
            time.sleep(_POLL_S)
        drain_end = time.monotonic() + DRAIN_S + 1.0
        while time.monotonic() < drain_end and any(
            job.state == "running" and job.client.mode == "infer" for job in self.jobs
        ):
            self._poll()
            time.sleep(_POLL_S)

    def _stop_jobs(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for job in self.jobs:
            self._call(job, lambda j: j.actor.stop.remote(), self._stopped)
            self.ray.kill(job.actor)  # its slot comes back as the process goes
        if self.group is not None:
            remove_placement_group(self.group)  # the GPU is Ray's to give again

    def _stopped(self, job: _Job, result: dict[str, Any]) -> None:
        self._handle(job, result.get("messages", []))
        job.exit_code = result.get("exit_code")
        if result.get("error"):
            self._fail(job, str(result["error"]))
        job.finished["table_text"] = result.get("table")

    # -- the record -------------------------------------------------------------------------
    def _save(self) -> None:
        for job in self.jobs:
            entry = self.run.client(job.client.name)
            entry.update(
                {
                    "pid": job.where.get("pid"),
                    "device": job.ready.get("device"),
                    "stream_priority": job.ready.get("stream_priority"),
                    "warmup_s": job.ready.get("warmup_s"),
                    "done": job.done,
                    "unfinished": job.finished.get("unfinished"),
                    "exit_code": job.exit_code,
                    "error": job.error,
                    "ray_node_id": job.where.get("node_id"),
                    "gpu_ids": job.where.get("gpu_ids"),
                    "cuda_visible_devices": job.where.get("cuda_visible_devices"),
                }
            )
            if self.window is not None and job.state != "failed":
                entry["window_start_s"], entry["window_end_s"] = self.window
        self.run.save()

    def _write_results(self) -> None:
        rows: dict[str, int] = {}
        for job in self.jobs:
            text = job.finished.pop("table_text", None)
            table = run_format.client_table(job.client.name)
            if text is not None:
                path = self.run.run_dir / table
                path.write_text(text)
                reported = job.finished.get("rows")
                rows[table] = table_rows(path, reported if isinstance(reported, int) else None)
            elif job.state != "failed":
                self._fail(job, "its table could not be fetched")
        self.run.note(
            f"run on a Ray cluster (orion.ray.run_plan): scheduled by the node's orion daemon, "
            f"made to run {self.need} as the matrix was measured (environment.daemon_policy, "
            "daemon_sharing); no gpu.csv is sampled"
        )
        if "unknown_kernel_us" in (self.config["run"].get("thresholds") or {}):
            self.run.note(
                "the matrix's unknown_kernel_us is not set on a node's daemon (it takes the "
                "queue limit)"
            )
        self.run.record_table_rows(rows)
        self._save()


def _bundle_gpu() -> int:
    """Which GPU of its node the task runs on (Ray's index, nvidia-smi's order under
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID``): the GPU of the bundle that holds it."""
    import ray

    (gpu_id,) = ray.get_gpu_ids()
    return int(str(gpu_id))


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def check_run_plan(
    plan_path: Path,
    duration_s: float,
    output_dir: Path,
    ready_timeout_s: float,
    daemon_options: dict[str, Any],
) -> Plan:
    """The plan, once everything :func:`run_plan` takes holds, before Ray is reached: the
    durations (:class:`UsageError`), the daemons' options (:func:`start_daemons`' rules), the
    plan, every GPU's jobs file and the daemon it needs, and a writable output folder."""
    import math

    from colocation.config import RunConfig
    from colocation.jobs_errors import value_problem
    from orion.ray.agent import check_daemon_options
    from orion_common.errors import UsageError
    from placement.plan_run import check_plan_run

    problem = value_problem(RunConfig, "duration_s", duration_s)
    if problem is not None:
        raise UsageError(f"duration_s: {problem}")
    if not (isinstance(ready_timeout_s, int | float) and math.isfinite(ready_timeout_s)):
        raise UsageError(f"ready_timeout_s must be a number of seconds (got {ready_timeout_s!r})")
    if ready_timeout_s <= 0:
        raise UsageError(f"ready_timeout_s must be positive (got {ready_timeout_s:g})")
    check_daemon_options(**daemon_options)
    loaded = check_plan_run(plan_path, duration_s, output_dir)
    for index, config in plan_jobs(loaded, duration_s, output_dir.absolute()).items():
        daemon_need(index, config)
    return loaded


def run_plan(
    plan: str | Path,
    *,
    address: str | None = None,
    duration_s: float | None = None,
    output_dir: str | Path = "runs",
    ready_timeout_s: float = 600.0,
    job_host: type = JobHost,
    **daemon_options: Any,
) -> Path:
    """Carries out the plan at ``plan`` on the Ray cluster at ``address`` (None: the one this
    process is connected to, or ``ray.init()``'s); returns the plan-run directory.

    Every GPU of the plan runs at once for ``duration_s`` seconds of measurement (None: as long
    as the plan's pair matrix measured each pair, `orion run-plan`'s default). Daemons that
    are missing are started with ``daemon_options`` (:func:`orion.ray.start_daemons`'). The
    record's status is ``complete`` when every GPU's run completed, else ``failed``.
    ``job_host`` is the actor class that runs a job (tests give one with a tiny workload).
    """
    plan_path = Path(plan)
    output = Path(output_dir)
    if duration_s is None:
        duration_s = planned_duration(load_plan(plan_path))
    loaded = check_run_plan(plan_path, duration_s, output, ready_timeout_s, daemon_options)
    ray = connect(address)
    placements = place(loaded, start_daemons(**daemon_options))
    record = PlanRunRecord.create(plan_path, output, engine="ray")
    configs = plan_jobs(loaded, duration_s, record.root)
    runs = []
    for placement in placements:
        index = placement.gpu.index
        record.add_gpu(index, configs[index], ray_node_id=placement.node.node_id)
        runs.append(_GpuRun(ray, placement, configs[index], record, job_host, ready_timeout_s))
    record.save()
    errors: dict[int, str] = {}

    def execute(run: _GpuRun) -> None:
        try:
            run.execute(duration_s)
        except Exception as error:  # one GPU's failure is its own, recorded, never the plan's
            errors[run.placement.gpu.index] = _first_line(error)
            record.gpu(run.placement.gpu.index)["exit_code"] = 1

    threads = [threading.Thread(target=execute, args=(run,), daemon=True) for run in runs]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except KeyboardInterrupt:
        # The jobs' actors belong to this driver: Ray ends them when it goes.
        record.finish("incomplete")
        raise
    for index, error in errors.items():
        record.gpu(index)["error"] = error
    codes = [entry["exit_code"] for entry in record.data["gpus"]]
    record.finish("complete" if all(code == 0 for code in codes) else "failed")
    return record.root
