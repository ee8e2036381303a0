"""One run's shared scheduler state, as the controller sees it.

The controller creates the POSIX shared-memory object (0600, a name unique to the run), registers
each client with its role and kernel table, publishes it, hands each client process its
environment, reads statistics and the kernel trace while and after the clients run, and removes
the object at the end, also when the controller itself stops early.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import secrets
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from orion_common.context_footprint import first_visible_gpu, footprint_once
from orion_common.errors import OrionError
from orion_common.processes import process_alive
from orion_common.run_format import RAW_TRACE_COLUMN_NAMES as TRACE_COLUMNS
from scheduler_core.library import native_module, preload_library_path, with_preload
from scheduler_core.shares import shares_problem
from scheduler_core.thresholds import DEFAULT_STALE_NS

if TYPE_CHECKING:
    # pandas is imported where a kernel table is read or a trace built: `orion up`, `orion run`,
    # `orion status` and the daemon import this module for its constants and settings, and must
    # start without loading pandas (~0.3 s of CPU beside a latency-critical service).
    import pandas as pd

NATIVE_POLICIES = ("passthrough", "priority", "reef", "orion", "quota")
"""What the preload library enforces (``SchedulerSettings.policy``); not the user-facing policies
of :mod:`colocation.policies`, each of which maps to one of these (``Policy.native_policy``)."""
ROLES = ("hp", "be")
# How the HP client's launch completions are tracked under the gating policies (reef, orion):
# "estimate" (a launch counts as finished at its profiled expected end: no driver call on HP's
# critical path) or "gpu-write" (the GPU writes each completion into shared memory: exact, but one
# more driver call after every HP launch). BE clients always use GPU writes.
HP_COMPLETION_MODES = ("estimate", "gpu-write")
# Where a held BE launch waits under the gating policies: "cpu" (in the launching thread, inside
# the launch call, until the policy admits it: the program's thread stops and its GPU queue
# drains) or "gpu" (the launch returns at once; the BE stream waits on the GPU on a gate word that
# a keeper thread of the controller opens when the policy admits the work behind it).
BE_GATES = ("cpu", "gpu")
DEFAULT_BE_GATE = "gpu"
"""Measured on an H100 with the CUDA-graph headline (benchmarks/results/nvidia-h100-80gb-hbm3/
headline-graph-gate): BE kept 0.63 of its throughput alone with the CPU gate and 0.87 with the
GPU gate, at the same HP p99 within the runs' intervals."""
# How a CUDA graph of a gated client is held: "inside" (wait nodes on the client's gate word are
# put inside the graph when it is instantiated, one per queue limit of its work; GPU gate only),
# "whole" (the graph is not rewritten: it is admitted whole behind its launch's gate, as before
# graphs were gated; for comparing, and for graphs that misbehave rewritten) or "segments" (the
# graph is split into pieces of at most a queue limit of work each, one kernel where the work is
# unknown, launched one after another through the gate like eager launches).
BeGraphGate = Literal["inside", "whole", "segments"]
BE_GRAPH_GATES: tuple[str, ...] = get_args(BeGraphGate)
DEFAULT_BE_GRAPH_GATE = "inside"
"""For settings made without a sharing mode (the library's own); runs and daemons pass theirs
(:data:`scheduler_core.sharing.DEFAULT_RUN_BE_GRAPH_GATE`)."""
MAX_HP_QUIET_NS = 1_000_000_000
"""The longest quiet spell of the HP a run may ask for (``SchedulerSettings.hp_quiet_ns``; the
library's ``kMaxHpQuietNs``)."""
MAX_BE_GATE_SPACING_NS = 10_000_000
"""The most BE work a run may let through between two gate waits (``SchedulerSettings.
be_gate_spacing_ns``; the library's ``kMaxBeGateSpacingNs``): 10 ms."""
TRACE_CAPACITY = 65536
"""Trace records per client kept between two drains when a run records a kernel trace."""
DECISIONS_VARIABLE = "ORION_DECISIONS"
"""Where a client's library finds the run's decisions (a path to a descriptor of the sealed
segment, ``/proc/<pid>/fd/<n>``): what the controller decides (roles, limits, shares, the BE
mask, the daemon's heartbeat) lives there, read-only to every client (shared_state.h,
RunDecisions). Set by the controller for a closed run's clients and by the joining process for a
daemon's, never by a daemon's answer."""
_LOG = logging.getLogger(__name__)
"""Where a closed run says what it measured of a CUDA context (its controller's log)."""
_SHM_PREFIX = "orion-"
_SHM_DIR = Path("/dev/shm")


def graph_timeline(
    nodes: pd.DataFrame, duration_ns: float, sm_count: int
) -> list[tuple[int, int, int, str]]:
    """(start_ns, end_ns, sm_needed, class) per kernel node, in run order, on the graph's clock.

    Each node lasts its measured duration (ncu's replayed one when none was measured); the time
    the graph spends between kernels (its wall time minus their sum) is spread evenly over the
    gaps, so the last node ends at the graph's wall time. Rows run in profile order (``order``).
    """
    import pandas as pd

    if "order" in nodes.columns:
        nodes = nodes.sort_values("order", kind="stable")
    replayed = pd.to_numeric(nodes["duration_ns"], errors="coerce")
    durations = replayed
    if "measured_duration_ns" in nodes.columns:
        durations = pd.to_numeric(nodes["measured_duration_ns"], errors="coerce").fillna(replayed)
    durations = durations.fillna(0.0)
    needs = pd.to_numeric(nodes["sm_needed"], errors="coerce").fillna(sm_count)
    classes = nodes["kernel_class"].fillna("unknown").astype(str)
    gaps = max(len(nodes) - 1, 1)
    gap = max(0.0, (float(duration_ns) - float(durations.sum())) / gaps)
    timeline = []
    start = 0.0
    for duration, sm_needed, kernel_class in zip(durations, needs, classes, strict=True):
        end = start + float(duration)
        timeline.append((round(start), round(end), int(sm_needed), kernel_class))
        start = end + gap
    return timeline


@dataclass(frozen=True)
class SchedulerSettings:
    """What the preload library of every client of one run obeys."""

    policy: str
    sm_count: int
    queue_limit_ns: int
    unknown_duration_ns: int
    stale_ns: int = DEFAULT_STALE_NS
    trace_capacity: int = 0  # records per client kept between two reads; 0 = no trace
    hp_completion: str = "estimate"  # one of HP_COMPLETION_MODES
    be_gate: str = DEFAULT_BE_GATE  # one of BE_GATES
    be_graph_gate: str = DEFAULT_BE_GRAPH_GATE  # one of BE_GRAPH_GATES
    # GPU-time shares (min_util / max_util) are enforced by the gate keeper over a sliding window
    # of this length; `quotas` says some client has one (always so under policy "quota").
    quotas: bool = False
    quota_window_ns: int = 1_000_000_000
    # An open run (a daemon's): clients join after publication (`join`) and their slots are
    # reused once their processes are gone (`reap`); a closed run's clients are fixed first.
    open_slots: bool = False
    # The HP's quiet spell (0 = off): under reef and orion no BE work is admitted until the HP
    # has launched nothing for this long, so BE stays out of the short gaps between the kernels
    # of one HP request (time-sliced, each such gap costs the HP two context switches).
    hp_quiet_ns: int = 0
    # The least BE work a BE stream lets onto the GPU between two waits on its GPU-side gate (0:
    # one queue limit, as the latency loop sets it). Each wait, and the write that marks the
    # launch after it started, is a stream operation between two BE kernels: at a queue limit of
    # a microsecond every BE kernel pays for them. An HP request may find this much let through.
    be_gate_spacing_ns: int = 0
    # An HP client's launches on the legacy default stream move to a private highest-priority
    # stream. Worth it only where stream priorities order work between clients (MPS): time-
    # sliced, the driver never runs two clients' kernels at once, and each moved launch costs
    # four more driver calls on an eager HP's critical path.
    hp_priority_stream: bool = True
    # Bytes one process's CUDA context takes on the GPU (RunDecisions::context_bytes): every
    # client process counts it in its memory use. None: measured when the run is created
    # (orion_common.context_footprint, once per process); a daemon passes its own measurement.
    context_bytes: int | None = None

    @property
    def holds_be_on_gpu(self) -> bool:
        """Work is held on the GPU (the run then has a gate keeper): ``be_gate`` "gpu" under a
        gating policy, or with GPU-time shares under any policy but passthrough."""
        gating = self.policy in ("reef", "orion", "quota")
        shares = self.quotas and self.policy != "passthrough"
        return self.be_gate == "gpu" and (gating or shares)

    def __post_init__(self) -> None:
        if self.policy not in NATIVE_POLICIES:
            raise OrionError(
                f"scheduler policy must be one of {', '.join(NATIVE_POLICIES)} "
                f"(got {self.policy!r})"
            )
        if self.hp_completion not in HP_COMPLETION_MODES:
            raise OrionError(
                "hp_completion must be one of "
                f"{', '.join(HP_COMPLETION_MODES)} (got {self.hp_completion!r})"
            )
        if self.be_gate not in BE_GATES:
            raise OrionError(f"be_gate must be one of {', '.join(BE_GATES)} (got {self.be_gate!r})")
        if self.be_graph_gate not in BE_GRAPH_GATES:
            raise OrionError(
                f"be_graph_gate must be one of {', '.join(BE_GRAPH_GATES)} "
                f"(got {self.be_graph_gate!r})"
            )
        if self.quota_window_ns < 1:
            raise OrionError(f"quota_window_ns must be positive (got {self.quota_window_ns})")
        if (self.quotas or self.policy == "quota") and self.be_gate != "gpu":
            raise OrionError("GPU-time shares are enforced on the GPU: they need be_gate 'gpu'")
        if self.quotas and self.policy == "passthrough":
            raise OrionError(
                "GPU-time shares need a policy that holds work back (quota, priority, reef, orion)"
            )
        if self.sm_count < 1:
            raise OrionError(f"sm_count must be positive (got {self.sm_count})")
        if self.context_bytes is not None and self.context_bytes < 0:
            raise OrionError(f"context_bytes must not be negative (got {self.context_bytes})")
        for name in ("queue_limit_ns", "unknown_duration_ns", "stale_ns", "trace_capacity"):
            if getattr(self, name) < 0:
                raise OrionError(f"{name} must not be negative (got {getattr(self, name)})")
        if not 0 <= self.hp_quiet_ns <= MAX_HP_QUIET_NS:
            raise OrionError(
                f"hp_quiet_ns must be 0 (off) to {MAX_HP_QUIET_NS} (1 s) (got {self.hp_quiet_ns})"
            )
        if not 0 <= self.be_gate_spacing_ns <= MAX_BE_GATE_SPACING_NS:
            raise OrionError(
                f"be_gate_spacing_ns must be 0 (one queue limit) to {MAX_BE_GATE_SPACING_NS} "
                f"(10 ms) (got {self.be_gate_spacing_ns})"
            )


def remove_stale_runs() -> list[str]:
    """Removes shared-memory objects left by controllers that died (SIGKILL) without cleaning up.

    Names carry the controller's pid (``orion-<pid>-<token>``), so a dead owner is recognisable.
    """
    removed = []
    if not _SHM_DIR.is_dir():
        return removed
    for entry in _SHM_DIR.glob(f"{_SHM_PREFIX}*"):
        parts = entry.name.split("-")
        if len(parts) < 3 or not parts[1].isdigit() or process_alive(int(parts[1])):
            continue
        try:
            entry.unlink()
            removed.append(entry.name)
        except OSError:
            pass
    return removed


def _unlink_quietly(handle: Any) -> None:
    with contextlib.suppress(Exception):  # already removed, or never fully created
        handle.unlink()


class SchedulerRun:
    """The shared state of one run. Use as a context manager; it is removed on exit."""

    def __init__(self, settings: SchedulerSettings) -> None:
        native = native_module()
        remove_stale_runs()
        if settings.context_bytes is None:
            footprint = footprint_once()
            _LOG.info(footprint.log_line(first_visible_gpu()))
            settings = dataclasses.replace(settings, context_bytes=footprint.bytes)
        self.settings = settings
        self.name = f"/{_SHM_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        try:
            self._run = native.Run.create(
                self.name,
                settings.policy,
                settings.sm_count,
                settings.queue_limit_ns,
                settings.unknown_duration_ns,
                settings.stale_ns,
                settings.trace_capacity,
                settings.hp_completion,
                settings.be_gate,
                settings.quotas or settings.policy == "quota",
                settings.quota_window_ns,
                settings.open_slots,
                settings.be_graph_gate,
                settings.hp_quiet_ns,
                settings.hp_priority_stream,
                settings.context_bytes,
                settings.be_gate_spacing_ns,
            )
        except (RuntimeError, ValueError) as error:
            raise OrionError(f"cannot create the run's shared state: {error}") from None
        # Removed even if the controller forgets to close (or raises before it could).
        self._finalizer = weakref.finalize(self, _unlink_quietly, self._run)
        # By slot index: a closed run's are 0..n-1; an open run's come and go.
        self._clients: dict[int, str] = {}
        self._names_by_key: dict[int, dict[int, str]] = {}
        self._trace_cursor: dict[int, int] = {}
        self._trace_lost = 0

    # -- set-up ---------------------------------------------------------------------------
    def add_client(
        self,
        name: str,
        role: str,
        kernels: pd.DataFrame | None = None,
        memory_limit: int | None = None,
        min_util: float = 0.0,
        max_util: float = 1.0,
    ) -> int:
        """Registers a client; ``kernels`` is its kernel identity table (postprocess);
        ``memory_limit`` caps the bytes its allocations may hold (None: no limit); ``min_util``
        and ``max_util`` are its promised and capped shares of GPU time (the run's settings must
        say ``quotas`` for a share other than 0-1 to be enforced)."""
        if role not in ROLES:
            raise OrionError(f"client role must be 'hp' or 'be' (got {role!r})")
        try:
            if self.settings.open_slots:
                index = self._run.reserve_client(name, role)
                if index < 0:
                    raise OrionError(
                        f"cannot add client {name!r}: all {native_module().MAX_CLIENTS} client "
                        "slots are taken",
                        hint="wait for a client to finish, or stop one",
                    )
            else:
                index = self._run.add_client(name, role)
        except (RuntimeError, ValueError) as error:
            raise OrionError(f"cannot add client {name!r}: {error}") from None
        self._clients[index] = name
        self._trace_cursor[index] = 0
        self._names_by_key[index] = {}
        try:
            if memory_limit is not None:
                self.set_memory_limit(index, memory_limit)
            if (min_util, max_util) != (0.0, 1.0):
                self.set_quota(index, min_util, max_util)
            if kernels is not None and not kernels.empty:
                self._names_by_key[index] = self._load_kernels(index, name, kernels)
        except OrionError:
            if self.settings.open_slots:
                self.release(index)
            raise
        return index

    # -- open runs: clients join and leave while the run is published ---------------------
    def register(self, index: int, claim_pid: int) -> None:
        """Makes slot ``index`` (added, its profile loaded) attachable; the daemon watches
        ``claim_pid`` (the process that asked for it) until a process attaches."""
        self._run.register_client(index, claim_pid)

    def reap(self) -> list[int]:
        """Slots whose process has exited or died (SIGKILL too) or whose claimer ended before
        attaching, found now. Read their statistics, then :meth:`release` them."""
        return [int(index) for index in self._run.reap()]

    def expire(self, index: int) -> bool:
        """Ends slot ``index`` if it is still registered with no process attached (its claimer
        took it and never attached); :meth:`reap` then reports it. False when a process attached
        meanwhile (then nothing changes)."""
        return bool(self._run.expire_client(index))

    def release(self, index: int) -> None:
        """Empties slot ``index`` (its process gone) so a new client can take it."""
        self._run.release_client(index)
        self._clients.pop(index, None)
        self._names_by_key.pop(index, None)
        self._trace_cursor.pop(index, None)

    def set_queue_limit(self, queue_limit_ns: int, unknown_duration_ns: int) -> None:
        """The BE queue bound, set when an HP client joins a daemon or once its step is learned
        (clients read it at their next launch); :attr:`settings` says the new figures from then
        on, as the run's records do."""
        self._run.set_queue_limit(queue_limit_ns, unknown_duration_ns)
        self.settings = dataclasses.replace(
            self.settings, queue_limit_ns=queue_limit_ns, unknown_duration_ns=unknown_duration_ns
        )

    def set_hold_long_be(self, hold: bool) -> None:
        """The latency controller's strictest step (orion_daemon.latency_control): the gate
        keeper holds BE work longer than the queue limit while the HP client is active."""
        self._run.set_hold_long_be(hold)

    def set_hp_priority_stream(self, move: bool) -> None:
        """Whether the joining HP's legacy-stream launches move to a private highest-priority
        stream (``scheduler_core.sharing.hp_priority_stream`` of the context it joins in);
        :attr:`settings` says it from then on, as the run's records do."""
        self._run.set_hp_priority_stream(move)
        self.settings = dataclasses.replace(self.settings, hp_priority_stream=move)

    def heartbeat(self) -> None:
        """The daemon's pulse: clients of an open run stop gating when it falls silent."""
        self._run.heartbeat()

    def shut_down(self) -> None:
        """Every client passes through from now on; the gate keeper opens every gate."""
        self._run.shut_down()

    def client_indices(self) -> dict[int, str]:
        """The clients by slot index."""
        return dict(self._clients)

    def _load_kernels(self, index: int, client: str, kernels: pd.DataFrame) -> dict[int, str]:
        import pandas as pd

        native = native_module()
        names: dict[int, str] = {}
        for row in kernels.itertuples(index=False):
            key = native.kernel_key(
                str(row.kernel_name),
                (int(row.grid_x), int(row.grid_y), int(row.grid_z)),
                (int(row.block_x), int(row.block_y), int(row.block_z)),
            )
            if pd.isna(row.duration_ns):
                # No duration, no profile entry: a graph node of a learned profile (only timed
                # as part of its graph) gates as unknown if it is ever launched on its own.
                continue
            duration = round(float(row.duration_ns))
            sm_needed = self.settings.sm_count if pd.isna(row.sm_needed) else int(row.sm_needed)
            kernel_class = "unknown" if pd.isna(row.kernel_class) else str(row.kernel_class)
            try:
                self._run.add_kernel(index, key, sm_needed, kernel_class, duration)
            except (RuntimeError, ValueError) as error:
                raise OrionError(f"cannot load the profile of client {client!r}: {error}") from None
            demangled = getattr(row, "demangled_name", None)
            names[key] = (
                str(demangled) if isinstance(demangled, str) and demangled else str(row.kernel_name)
            )
        return names

    def add_graph(self, index: int, nodes: pd.DataFrame, duration_ns: float) -> int:
        """Registers one CUDA graph of client ``index``; returns its identity (key).

        ``nodes`` has one row per kernel node of the graph (a graph profile's rows: name, grid,
        block, SMs needed, class); ``duration_ns`` is the graph's wall time on the GPU. The
        library identifies a launched graph by the same key, computed from the kernel nodes it
        reads when the program instantiates the graph, in any order. Launched as a unit, the
        graph needs the SMs of its widest kernel; its class is its kernels' common class, else
        unknown (nothing is paired with a graph of mixed classes).

        For an HP graph the library also needs its timeline: each kernel node's expected start and
        end on the graph's clock (:func:`graph_timeline`), so that a BE kernel is checked only
        against the HP kernels expected to run while it would.
        """
        import pandas as pd

        native = native_module()
        if nodes.empty:
            raise OrionError(f"client {self._clients[index]!r}: a graph needs kernel nodes")
        keys = [
            native.kernel_key(
                str(row.kernel_name),
                (int(row.grid_x), int(row.grid_y), int(row.grid_z)),
                (int(row.block_x), int(row.block_y), int(row.block_z)),
            )
            for row in nodes.itertuples(index=False)
        ]
        key = native.graph_key(keys)
        needs = pd.to_numeric(nodes["sm_needed"], errors="coerce")
        sm_needed = self.settings.sm_count if needs.isna().any() else int(needs.max())
        classes = set(nodes["kernel_class"].fillna("unknown").astype(str))
        kernel_class = classes.pop() if len(classes) == 1 else "unknown"
        # A graph whose nodes were not each timed (a learned one) has no timeline: it is gated
        # as a unit, for its whole wall time.
        node_durations = pd.to_numeric(nodes["duration_ns"], errors="coerce")
        if "measured_duration_ns" in nodes.columns:
            node_durations = node_durations.fillna(
                pd.to_numeric(nodes["measured_duration_ns"], errors="coerce")
            )
        timeline = (
            []
            if node_durations.isna().any()
            else graph_timeline(nodes, duration_ns, self.settings.sm_count)
        )
        try:
            self._run.add_graph(
                index, key, sm_needed, kernel_class, round(float(duration_ns)), len(keys), timeline
            )
        except (RuntimeError, ValueError) as error:
            name = self._clients[index]
            raise OrionError(f"cannot load the graph profile of client {name!r}: {error}") from None
        return key

    def publish(self) -> None:
        """Makes the run visible to clients; nothing can be added afterwards.

        Under ``be_gate="gpu"`` this also starts the gate keeper, a native thread of this
        (controller) process that opens the BE clients' GPU-side gates when the policy admits
        their work; :meth:`close` stops it and opens every gate.
        """
        self._run.publish()

    def gate_stats(self) -> dict[str, Any]:
        """The gate keeper's counters (opens, closes, wake-ups) and whether it runs."""
        return dict(self._run.gate_stats())

    def gate_open(self, index: int) -> bool:
        """Whether client ``index``'s GPU-side gate is open now."""
        return bool(self._run.gate_open(index))

    def client_environment(
        self, index: int, base: dict[str, str] | None = None, strict: bool = True
    ) -> dict[str, str]:
        """The environment a client process needs: its run, its index, the preload library.

        With ``strict`` a client that cannot join the run exits at once (status 70) instead of
        running ungated, which would silently spoil a measurement.
        """
        if index not in self._clients:
            raise OrionError(f"no client {index} in this run")
        environment = dict(os.environ if base is None else base)
        environment["ORION_RUN"] = self.name
        environment["ORION_CLIENT"] = str(index)
        environment[DECISIONS_VARIABLE] = self.decisions_path
        environment["ORION_STRICT"] = "1" if strict else "0"
        return with_preload(environment, preload_library_path())

    @property
    def decisions_fd(self) -> int:
        """The descriptor of the run's sealed decisions (close-on-exec): a daemon passes it to
        each client it admits, which maps it read-only."""
        return int(self._run.decisions_fd)

    @property
    def decisions_path(self) -> str:
        """Where a process of this user opens the run's decisions read-only (through this
        process's descriptor, so only while it runs): what a closed run's clients are given."""
        return str(self._run.decisions_path)

    # -- while running --------------------------------------------------------------------
    def client_state(self, index: int) -> str:
        return str(self._run.client_state(index))

    def set_memory_limit(self, index: int, limit: int | None) -> None:
        """Caps client ``index``'s GPU memory at ``limit`` bytes (None: no limit), also while the
        run is live: its next allocation obeys it. A limit below what the client holds refuses
        new allocations and frees nothing."""
        if limit is not None and limit < 1:
            raise OrionError(f"a memory limit must be at least 1 byte (got {limit})")
        self._run.set_memory_limit(index, 0 if limit is None else int(limit))

    def share_memory(self, index: int, holder: int) -> None:
        """Client ``index``'s allocations count against client ``holder``'s memory limit (a BE
        client's child against its parent's), also in ``holder``'s use; ``index`` keeps the
        limit on its own once ``holder``'s slot is released."""
        try:
            self._run.share_memory(index, holder)
        except (RuntimeError, ValueError) as error:
            raise OrionError(f"cannot share a memory limit: {error}") from None

    def set_quota(self, index: int, min_util: float, max_util: float) -> None:
        """Client ``index``'s shares of GPU time (fractions of the quota window), also while the
        run is live: the gate keeper applies them at its next pass (within a millisecond)."""
        problem = shares_problem(min_util, max_util)
        if problem is not None:
            raise OrionError(problem)
        self._run.set_quota(index, float(min_util), float(max_util))

    def mark_gone(self, index: int, crashed: bool) -> None:
        """The controller saw client ``index`` end: nobody waits on its launches any more."""
        self._run.mark_gone(index, crashed)

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per-client statistics keyed by client name (launches, unknown kernels, blocking)."""
        result = {}
        for index, name in self._clients.items():
            result[name] = self.client_stats(index)
        result_meta = {"trace_records_lost": self._trace_lost}
        return {**result, **({"_run": result_meta} if self.settings.trace_capacity else {})}

    def client_stats(self, index: int) -> dict[str, Any]:
        """Statistics of the client in slot ``index`` (launches, blocking, memory, share)."""
        stats = dict(self._run.client_stats(index))
        stats["blocked_ms"] = stats["blocked_ns"] / 1e6
        stats["unknown_kernels"] = list(self._run.unknown_kernels(index))
        return stats

    def learned(self, index: int) -> list[dict[str, Any]]:
        """What the client in slot ``index`` learned online: one dict per kernel or graph (key,
        graph, name, grid, block, shared_bytes, blocks_per_sm, sm_needed, samples, duration_ns
        (0 until enough samples), launches, nodes: a graph's node kernel keys)."""
        return [dict(entry) for entry in self._run.learned(index)]

    def drain_trace(self, indices: Iterable[int] | None = None) -> pd.DataFrame:
        """Trace records written since the last call, as a table (TRACE_COLUMNS): of the clients
        in slots ``indices`` (None: every client). ``attrs["records_lost"]`` counts the records
        the ring overwrote before this call could read them."""
        import pandas as pd

        rows = []
        lost_now = 0
        chosen = self._clients if indices is None else {i: self._clients[i] for i in indices}
        for index, client in chosen.items():
            records, cursor, lost = self._run.read_trace(index, self._trace_cursor[index])
            self._trace_cursor[index] = cursor
            self._trace_lost += lost
            lost_now += lost
            names = self._names_by_key[index]
            for seq, key, enqueue, launch, duration, sm, kernel_class, reason, known in records:
                rows.append(
                    (
                        client,
                        seq,
                        names.get(key, "<graph>" if key == 0 else "<unprofiled>"),
                        kernel_class,
                        sm,
                        duration,
                        known,
                        reason,
                        enqueue,
                        launch,
                    )
                )
        frame = pd.DataFrame(rows, columns=list(TRACE_COLUMNS))
        frame.attrs["records_lost"] = lost_now
        return frame

    # -- teardown -------------------------------------------------------------------------
    def close(self) -> None:
        """Removes the shared memory (idempotent). Clients still running keep their mapping."""
        if self._finalizer.alive:
            self._finalizer()
        self._run.close()

    def __enter__(self) -> SchedulerRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
