"""The daemon itself: it admits clients, finds the ones that are gone, beats, and records.

Nothing a client does can hold the rest up: each connection is served on a thread of its own
within deadlines (:mod:`orion_daemon.connections`), the heartbeat has a thread that does nothing
else, and records are written by another (:mod:`orion_daemon.background`), so neither an idle
connection nor a slow or full disk ungates anyone. The main loop accepts connections and gives
the slots of clients that are gone back. ``_lock`` guards the clients and the scheduler's slots
(requests and the reaper); ``_records_lock`` the recorders (the records thread and the requests
about records).

Started by `orion up` (detached, or in the foreground for systemd and containers) as
``python -m orion_daemon`` (:meth:`Daemon.serve`), or by `orion colocate` for the length of a
run on a thread of its own process (:mod:`orion_daemon.embedded`). Everything it owns is
released on every way out: SIGTERM, Ctrl-C and `orion down` set the shared state's shutdown
flag (clients pass through from then on), stop the gate keeper (which opens every gate), stop
MPS, remove the shared memory's name, the socket and the record. A daemon killed with SIGKILL
leaves a stale record, which the next one removes; its clients notice the silence within a
second and run ungated.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import selectors
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from orion_common import run_format, unix_sockets
from orion_common.atomic_io import write_json_atomic
from orion_common.context_footprint import context_footprint
from orion_common.csv_table import CsvTable
from orion_common.errors import OrionError
from orion_common.processes import is_ancestor, process_alive, process_start_time
from orion_common.run_format import LIMITS_TABLE
from orion_common.runclock import RunClock, utc_now
from orion_daemon import latency_control, state
from orion_daemon.admission import JoinRequest, LiveClient, check_join, memory_limit
from orion_daemon.background import Heartbeat, RecordWriter
from orion_daemon.connections import ConnectionServer
from orion_daemon.limits import apply_change, unenforced_shares_refusal
from orion_daemon.lock import already_running, folder_lock, gpu_claim
from orion_daemon.metrics import REQUEST_OPS, MetricsAddress, parse_address
from orion_daemon.mps import MPS_BE_PRIORITY, MPS_CLIENT_PRIORITY, MPS_THREAD_PERCENTAGE
from orion_daemon.ownership import peer_credentials, peer_may_use_daemon, private_folder
from orion_daemon.protocol import PASSED_FDS, answer
from orion_daemon.records import Recordings, SchedulerRecorder
from orion_daemon.slots import add_profiled_client
from orion_daemon.status import Client, ClientSample, client_status
from scheduler_core.run_state import DEFAULT_BE_GATE
from scheduler_core.settings import (
    BE_GATE,
    BE_GATE_SPACING_US,
    BE_GRAPH_GATE,
    BE_SM_PERCENT,
    DEFAULT_BE_GATE_SPACING_US,
    HP_CONTEXT,
    HP_QUIET_US,
    LOOP_READS,
    Setting,
)
from scheduler_core.shares import sets_a_share
from scheduler_core.sharing import (
    DEFAULT_RUN_BE_GRAPH_GATE,
    be_sm_share_applies,
    default_hp_context,
    default_sharing,
    hp_priority_stream,
    hp_sharing,
    native_sharing_problem,
    policy_defaults,
)

TICK_S = 0.1
"""How often the daemon beats (its heartbeat thread) and looks for gone clients (its loop): a
slot comes back well within a second of its process's end, and the clients' one-second silence
bound is never near."""
SAMPLE_S = 0.5
ATTACH_TIMEOUT_S = 60.0
"""How long a slot waits for its process to attach: `orion run` and the library's own join attach
in the same call; a program started by another claimer (`orion colocate`'s clients) attaches as
it starts."""
_LOG = logging.getLogger(__name__)
"""The daemon's log: ``python -m orion_daemon`` sends it to its stdout, the log file `orion up`
opened; a daemon on a thread of a run logs wherever that process chose."""

POLICIES = ("orion", "reef", "priority", "quota", "passthrough")
GPU_GATED_POLICIES = ("orion", "reef")
"""The policies whose BE streams wait on a GPU-side gate a queue limit (or a gate spacing) of
work apart; ``quota`` spaces its waits by its own window."""

BE_WHEN_DAEMON_GONE = ("open", "hold")
"""What a BE client does when its daemon falls silent (no heartbeat for a second: killed, stopped,
stalled): ``open`` runs it ungated from then on, as it would run without orion; ``hold`` holds its
new launches until the daemon beats again, at most :data:`DAEMON_GONE_HOLD_S`, then runs it
ungated. HP never holds."""
DAEMON_GONE_HOLD_S = 30.0
"""How long a BE client holds for a silent daemon before it runs ungated (scheduler_core/native/
shared_state.h, kDefaultDaemonGoneHoldS, is the library's own default; kMaxDaemonGoneHoldS its
bound)."""
MAX_DAEMON_GONE_HOLD_S = 3600.0


@dataclass(frozen=True)
class DaemonSettings:
    """What one daemon runs with; `orion up` (or `orion colocate`) fills the GPU's facts in.

    Kept in ``daemon.json`` (``settings``), so a run can tell whether a running daemon schedules
    the way it needs (:data:`SCHEDULING`)."""

    gpu: int
    sm_count: int
    folder: Path
    policy: str = "orion"
    sharing: str | None = None  # scheduler_core.settings.SHARING; None: the policy's default
    gpu_uuid: str | None = None
    gpu_name: str | None = None
    memory_bytes: int | None = None
    queue_limit_ns: int | None = None  # None: from the HP client's profile when it joins
    unknown_duration_ns: int | None = None  # None: the queue limit
    shares: bool = False  # GPU-time shares (--min-util / --max-util) enforced
    quota_window_ns: int = 1_000_000_000  # the window GPU-time shares are counted over
    be_gate: str = DEFAULT_BE_GATE
    be_graph_gate: str | None = None
    """:data:`scheduler_core.settings.BE_GRAPH_GATE`; None: every policy's default
    (:data:`scheduler_core.sharing.DEFAULT_RUN_BE_GRAPH_GATE`), resolved here once."""
    hp_completion: str = "estimate"
    trace: bool = False  # the library keeps a kernel trace, which a run's records copy out
    mps_folder: Path | None = None  # where the MPS daemon's folders go (None: the state folder)
    owner: str | None = None
    """The run directory of the `orion colocate` run that started this daemon for itself (None:
    `orion up`): it admits that run's clients only, and `orion down` leaves it to the run."""
    stop_with_pid: int | None = None
    """Stop (cleanly) once this process is gone: the Ray node agent that started the daemon
    (orion.ray), so a daemon never outlives the cluster node it serves."""
    attach_timeout_s: float = ATTACH_TIMEOUT_S
    """A slot taken (``join``) whose process has not attached within this long is given back,
    even while its claimer lives: a claimer that hangs must not hold a slot for ever."""
    metrics_listen: str | None = None
    """Where Prometheus metrics are served (``ADDR:PORT``, :mod:`orion_daemon.metrics`); None:
    nowhere."""
    metrics_allow_remote: bool = False
    """Whether ``metrics_listen`` may be an address other hosts reach."""
    be_when_daemon_gone: str = "open"
    """:data:`BE_WHEN_DAEMON_GONE`. ``open`` by default: a daemon that is gone for good (killed,
    its node drained) then costs BE work nothing, and HP is never worse off than without orion;
    ``hold`` trades BE's progress for HP's latency while a daemon is stopped or stalled."""
    daemon_gone_hold_s: float = DAEMON_GONE_HOLD_S
    """Under ``hold``, how long BE holds for a silent daemon before it runs ungated."""
    hp_quiet_us: float | None = None
    """:data:`scheduler_core.settings.HP_QUIET_US`: the HP's quiet spell BE work waits out under
    reef and orion (0: off; None: the policy's, :func:`scheduler_core.sharing.policy_defaults`,
    resolved here once)."""
    be_gate_spacing_us: float | None = None
    """:data:`scheduler_core.settings.BE_GATE_SPACING_US`: the least BE work let onto the GPU
    between two waits on a BE stream's GPU-side gate. Unset, it becomes
    :data:`~scheduler_core.settings.DEFAULT_BE_GATE_SPACING_US` where a GPU gate spaces waits
    and stays None (nothing to space) elsewhere."""
    be_sm_percent: float | None = None
    """:data:`scheduler_core.settings.BE_SM_PERCENT`: under MPS, the SMs a BE client's kernels
    may use beside an HP in the server (None: all; unset under MPS, the policy's)."""
    hp_context: str | None = None
    """:data:`scheduler_core.settings.HP_CONTEXT`: under MPS, whether the HP client is an MPS
    client too (``mps``) or runs in a context of its own (``own``); unset under MPS, the
    policy's; None time-sliced."""
    loop_reads: str | None = None
    """:data:`scheduler_core.settings.LOOP_READS`: what the latency loop reads as the HP's
    slowdown (unset: its declared default)."""

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise OrionError(f"policy must be one of {', '.join(POLICIES)} (got {self.policy!r})")
        if not self.sharing:
            object.__setattr__(self, "sharing", default_sharing(self.policy))
        problem = native_sharing_problem(self.policy, self.sharing)
        if problem is not None:
            raise OrionError(problem)
        defaults = policy_defaults(self.policy)
        if self._declared(HP_CONTEXT) is not None:
            self._under_mps_only(
                "hp_context", "time-sliced, every client has a context of its own already"
            )
        elif self.sharing == "mps":
            # BE graphs gated inside stop at waits that keep the MPS server on the GPU, which an
            # HP of its own context would wait for the timeslice of: asked for, the HP joins them.
            inside = self._declared(BE_GRAPH_GATE) == "inside"
            default = default_hp_context(self.policy, self.sharing)
            object.__setattr__(self, "hp_context", "mps" if inside else default)
        if self._declared(BE_GATE) is None:
            object.__setattr__(self, "be_gate", DEFAULT_BE_GATE)
        if self._declared(BE_GRAPH_GATE) is None:
            object.__setattr__(self, "be_graph_gate", DEFAULT_RUN_BE_GRAPH_GATE)
        if self.sm_count < 1:
            raise OrionError(f"sm_count must be positive (got {self.sm_count})")
        if self.be_when_daemon_gone not in BE_WHEN_DAEMON_GONE:
            raise OrionError(
                f"be_when_daemon_gone must be one of {', '.join(BE_WHEN_DAEMON_GONE)} "
                f"(got {self.be_when_daemon_gone!r})"
            )
        if not 0 < self.daemon_gone_hold_s <= MAX_DAEMON_GONE_HOLD_S:
            raise OrionError(
                f"daemon_gone_hold_s must be over 0 and at most {MAX_DAEMON_GONE_HOLD_S:g} s "
                f"(got {self.daemon_gone_hold_s:g})"
            )
        quiet = self._declared(HP_QUIET_US)
        object.__setattr__(self, "hp_quiet_us", defaults.hp_quiet_us if quiet is None else quiet)
        object.__setattr__(self, "loop_reads", self._declared(LOOP_READS) or LOOP_READS.default)
        spacing = self._declared(BE_GATE_SPACING_US)
        gpu_gate_spaces_waits = self.policy in GPU_GATED_POLICIES and self.be_gate == "gpu"
        if spacing is None and gpu_gate_spaces_waits:
            spacing = DEFAULT_BE_GATE_SPACING_US
        object.__setattr__(self, "be_gate_spacing_us", spacing)
        if spacing is not None and not gpu_gate_spaces_waits:
            raise OrionError(
                f"be_gate_spacing_us applies to the GPU-side BE gate of policies "
                f"{' and '.join(GPU_GATED_POLICIES)} (this daemon: policy {self.policy!r}, "
                f"be_gate {self.be_gate!r}); it would change nothing here"
            )
        if self._declared(BE_SM_PERCENT) is not None:
            self._under_mps_only("be_sm_percent", "only MPS partitions SMs between clients")
        elif self.sharing == "mps":
            object.__setattr__(self, "be_sm_percent", defaults.be_sm_percent)
        if not self.attach_timeout_s > 0:
            raise OrionError(f"attach_timeout_s must be positive (got {self.attach_timeout_s})")
        if self.metrics_listen is not None:  # checked, and kept in one spelling
            address = parse_address(self.metrics_listen, allow_remote=self.metrics_allow_remote)
            object.__setattr__(self, "metrics_listen", str(address))

    def _declared(self, setting: Setting) -> Any:
        """The field ``setting`` names, checked and parsed by its declaration (and kept parsed),
        or :class:`OrionError` with the declaration's one reason."""
        value = getattr(self, setting.name)
        problem = setting.problem(value)
        if problem is not None:
            raise OrionError(problem)
        parsed = setting.parse(value)
        object.__setattr__(self, setting.name, parsed)
        return parsed

    def _under_mps_only(self, name: str, why: str) -> None:
        """Refuses the set field ``name`` unless the clients share through MPS."""
        if self.sharing != "mps":
            raise OrionError(
                f"{name} applies under sharing 'mps' only (this daemon shares by "
                f"{self.sharing!r}): {why}"
            )

    @property
    def metrics_address(self) -> MetricsAddress | None:
        if self.metrics_listen is None:
            return None
        return parse_address(self.metrics_listen, allow_remote=self.metrics_allow_remote)

    def to_json(self) -> dict[str, Any]:
        return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, data: Any) -> DaemonSettings | None:
        """The settings a ``daemon.json`` holds; None when it holds none that read (a daemon of
        an older orion)."""
        try:
            return cls.parse_json(data)
        except OrionError:
            return None

    @classmethod
    def parse_json(cls, data: Any) -> DaemonSettings:
        """The settings :meth:`to_json` wrote (how ``python -m orion_daemon`` is given them,
        :func:`orion_daemon.client.daemon_command`); :class:`OrionError` for anything else.
        Fields this orion does not know are ignored: a record of a newer one still reads."""
        if not isinstance(data, dict):
            raise OrionError(f"daemon settings are a JSON object, not {type(data).__name__}")
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        for key in ("folder", "mps_folder"):
            if isinstance(values.get(key), str):
                values[key] = Path(values[key])
        try:
            return cls(**values)
        except TypeError as error:
            raise OrionError(f"daemon settings: {error}") from None


SCHEDULING = (
    "policy",
    "sharing",
    "hp_context",  # before what it decides by default (the BE graph gate): the cause is named
    "be_gate",
    "be_graph_gate",
    "hp_completion",
    "shares",
    "quota_window_ns",
    "queue_limit_ns",
    "unknown_duration_ns",
    "trace",
    "hp_quiet_us",
    "be_gate_spacing_us",
    "be_sm_percent",
    "loop_reads",
)
"""The settings that decide how clients are scheduled and recorded: a run uses a running daemon
only when these are what it needs."""


class Daemon:
    """One GPU's daemon. :meth:`serve` runs it until it is told to stop."""

    def __init__(self, settings: DaemonSettings) -> None:
        self.settings = settings
        self.folder = settings.folder
        self.clock = RunClock.starting_now()
        self._started_utc = utc_now()
        self.clients: dict[int, Client] = {}
        self.stopping = False
        self.queue_limit_ns = settings.queue_limit_ns
        self._scheduler: Any = None
        self.context_bytes = 0
        """What one process's CUDA context takes on the GPU, measured as the daemon starts (0:
        unknown): every client counts it in its memory use, and a limit below it is refused."""
        self._mps: Any = None
        self._outside_mps: dict[str, str] = {}
        """What keeps a client meant to run outside MPS out of any MPS daemon: every client of a
        time-sliced daemon, the HP of one with ``hp_context`` ``own`` (set as it starts)."""
        self._events: CsvTable | None = None
        self._limits: CsvTable | None = None  # opened at the first `orion quota`
        self._recorder: SchedulerRecorder | None = None
        self._recordings: Recordings | None = None
        self._next_sample = 0.0
        self._lock = threading.RLock()
        self._records_lock = threading.Lock()
        self._reap_lock = threading.Lock()
        self._writer: RecordWriter | None = None
        self._heartbeat: Heartbeat | None = None
        self._connections = ConnectionServer(self._handle, self._refusal)
        self._closed = False
        self._refused_uids: set[int] = set()
        self._expired: set[int] = set()  # slots given back because nothing attached in time
        self._control: latency_control.ControlState | None = None
        self._next_control = 0.0
        # What `orion status --json` and the metrics say of the daemon's own health: clients'
        # comings and goings by event (clients.csv's), and each request's count and time.
        self._client_events: dict[str, int] = {}
        self._request_times: dict[str, list[float]] = {}
        self._request_times_lock = threading.Lock()
        self.notes: list[str] = []
        """What happened that the one who started the daemon should know (printed at the end
        of :meth:`serve`)."""

    # -- life cycle ------------------------------------------------------------------------
    def serve(self) -> int:
        """Runs until SIGTERM, Ctrl-C or `orion down`; 0 on a clean stop (the main thread of a
        process of its own: ``python -m orion_daemon``)."""
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            with self.running():
                for note in self.notes:
                    _LOG.info(note)
                self.notes.clear()
                _LOG.info(self._started_line())
                self.loop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        for note in self.notes:
            _LOG.info(note)
        _LOG.info("orion daemon stopped: every gate open, clients run on ungated")
        return 0

    @contextlib.contextmanager
    def running(self) -> Iterator[Daemon]:
        """Everything the daemon owns, set up for the block (refused while another daemon runs
        for the GPU) and released on every way out of it; :meth:`loop` serves meanwhile."""
        from scheduler_core.run_state import remove_stale_runs

        private_folder(self.folder)
        with contextlib.ExitStack() as stack:
            # Before anything is looked at or bound: of daemons racing for the folder, one goes on.
            stack.enter_context(folder_lock(self.folder, self.settings.gpu))
            running = state.live_record(self.folder)
            if running is not None:  # a daemon of an orion that took no lock
                raise already_running(self.settings.gpu, running)
            # Then the GPU, whoever's daemon and state folder: one daemon schedules it.
            stack.enter_context(gpu_claim(self.settings.gpu, self.settings.gpu_uuid))
            for removed in state.remove_stale(self.folder):
                self.notes.append(f"removed {removed} left by a daemon that died")
            remove_stale_runs()
            stack.callback(self._remove_own_files)
            self._start(stack)
            yield self

    def _on_signal(self, signum: int, frame: object) -> None:
        self.stopping = True

    def _start(self, stack: contextlib.ExitStack) -> None:
        from scheduler_core import SchedulerRun, SchedulerSettings
        from scheduler_core.run_state import TRACE_CAPACITY
        from scheduler_core.thresholds import FALLBACK_QUEUE_LIMIT_NS

        s = self.settings
        metrics_address = s.metrics_address
        if metrics_address is not None:
            from orion_daemon import metrics

            # First of all: a port in use stops the start before anything else is made.
            metrics_server = metrics.bind(metrics_address)
            stack.callback(metrics_server.server_close)
        queue_limit = self.queue_limit_ns or FALLBACK_QUEUE_LIMIT_NS
        # Before MPS starts and before any client: one bare context, measured in a process of
        # its own (this one never holds a context), counted in every client's memory use.
        gpu = s.gpu_uuid or str(s.gpu)
        footprint = context_footprint(gpu)
        self.context_bytes = footprint.bytes
        _LOG.info(footprint.log_line(gpu))
        self._scheduler = stack.enter_context(
            SchedulerRun(
                SchedulerSettings(
                    policy=s.policy,
                    sm_count=s.sm_count,
                    queue_limit_ns=queue_limit,
                    unknown_duration_ns=self._unknown_duration_ns(queue_limit),
                    trace_capacity=TRACE_CAPACITY if s.trace else 0,
                    be_gate=s.be_gate,
                    be_graph_gate=s.be_graph_gate,
                    hp_completion=s.hp_completion,
                    quotas=s.shares,
                    quota_window_ns=s.quota_window_ns,
                    open_slots=True,
                    hp_quiet_ns=round(s.hp_quiet_us * 1000),
                    be_gate_spacing_ns=(
                        0 if s.be_gate_spacing_us is None else round(s.be_gate_spacing_us * 1000)
                    ),
                    hp_priority_stream=hp_priority_stream(hp_sharing(s.sharing, s.hp_context)),
                    context_bytes=self.context_bytes,
                )
            )
        )
        self._scheduler.heartbeat()
        self._scheduler.publish()
        # Stopped last of all (after `shut_down` has told the clients): they never see silence.
        self._heartbeat = Heartbeat(self._scheduler.heartbeat, TICK_S)
        self._heartbeat.start()
        stack.callback(self._heartbeat.stop)
        if s.sharing == "mps":
            from orion_daemon.mps import private_mps_daemon

            if s.gpu_uuid:
                os.environ["CUDA_VISIBLE_DEVICES"] = s.gpu_uuid
            self._mps = stack.enter_context(
                private_mps_daemon(
                    s.mps_folder or self.folder / f"mps-{os.getpid()}",
                    notes=self.notes,
                    keep_running=self._running_client_pids,
                    sigterm_interrupts=False,  # serve() stops cleanly on SIGTERM
                )
            )
        # Where a client outside any MPS server joins from: every client of a time-sliced daemon,
        # and an HP that runs in a context of its own (the daemon's default or its own choice).
        from orion_daemon.mps import outside_any_mps

        self._outside_mps = outside_any_mps(self.folder)
        # Whatever way the daemon ends, first of all: clients pass through, every gate opens.
        stack.callback(self._scheduler.shut_down)
        writer = self._writer = RecordWriter(self._sample_records, SAMPLE_S, self._log)
        self._events = CsvTable(self.folder / state.CLIENTS_TABLE, state.CLIENT_EVENT_COLUMNS)
        stack.callback(writer.attempt, self._events.close)
        stack.callback(writer.attempt, self._close_limits)
        self._recorder = SchedulerRecorder(self._scheduler, self.folder, self.clock, trace=False)
        stack.callback(writer.attempt, self._close_records)  # before the shared state goes
        self._recordings = Recordings(self._scheduler)
        self._listener = stack.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
        socket_path = self.folder / state.SOCKET
        with contextlib.suppress(FileNotFoundError):
            socket_path.unlink()
        with unix_sockets.reachable(socket_path) as address:  # a deep state folder too
            self._listener.bind(address)
        os.chmod(socket_path, 0o600)  # the folder is 0700 already; the socket says so too
        self._listener.listen(128)
        self._listener.setblocking(False)
        writer.start()
        stack.callback(writer.stop)  # what was submitted is written before the files close
        stack.callback(self._close_requests)  # first of all: no request half-answered
        # The first record is written here and now: without it no client finds the daemon, so
        # a disk that cannot take it stops the start (later ones only degrade records).
        write_json_atomic(self.folder / state.RECORD, self._record())
        if metrics_address is not None:
            stack.enter_context(metrics.serving(metrics_server, self.snapshot, self._log))

    def _unknown_duration_ns(self, queue_limit_ns: int) -> int:
        from scheduler_core.thresholds import default_unknown_duration_ns

        fixed = self.settings.unknown_duration_ns
        return fixed if fixed is not None else default_unknown_duration_ns(queue_limit_ns)

    def _running_client_pids(self) -> list[int]:
        """The processes of the clients still running (asked when the daemon stops)."""
        pids = []
        for slot, client in self.clients.items():
            stats = self._scheduler.client_stats(slot)
            if stats.get("state") in ("attached", "registered"):
                pids.append(int(stats.get("pid") or 0) or client.claim_pid)
        return [pid for pid in pids if pid > 0]

    def _started_line(self) -> str:
        s = self.settings
        line = (
            f"orion daemon for GPU {s.gpu} ({s.gpu_name or 'unknown GPU'}) running: policy "
            f"{s.policy}, sharing {s.sharing}, pid {os.getpid()}, state folder {self.folder}"
        )
        address = s.metrics_address
        return line if address is None else f"{line}, metrics {address.url}"

    def _close_limits(self) -> None:
        if self._limits is not None:
            self._limits.close()

    def _close_records(self) -> None:
        with self._records_lock:
            if self._recordings is not None:
                self._recordings.close()  # the runs' last records
            if self._recorder is not None:
                self._recorder.close()

    def _close_requests(self) -> None:
        """No request is answered from here on; those being answered finish first (briefly:
        none waits on anything but the state lock and the records)."""
        with self._lock:
            self._closed = True
        self._connections.idle(timeout_s=10.0)

    def _log(self, line: str) -> None:
        """A line in the daemon's log, at warning level so that it still shows (on stderr) where
        no entry point chose a place for it; logging reports a full disk rather than raising."""
        _LOG.warning(line)

    def _remove_own_files(self) -> None:
        for name in (state.SOCKET, state.RECORD):
            with contextlib.suppress(FileNotFoundError):
                (self.folder / name).unlink()

    # -- the loop --------------------------------------------------------------------------
    def loop(self) -> None:
        """Accepts connections (each served on a thread of its own), reaps and samples until
        :attr:`stopping` (inside :meth:`running`). A loop that fails stops the heartbeat, so its
        clients notice within a second rather than stay gated by a daemon that serves no one."""
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ)
        try:
            while not self.stopping:
                for _key, _events in selector.select(timeout=TICK_S):
                    self._accept()
                self._tick()
        except BaseException:
            if self._heartbeat is not None:
                self._heartbeat.stop()
            raise
        finally:
            selector.close()

    def _accept(self) -> None:
        try:
            connection, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as error:  # out of file descriptors: the others are served meanwhile
            self._log(f"cannot accept a connection: {error}")
            return
        try:
            _pid, uid, _gid = peer_credentials(connection)
        except OSError:
            connection.close()
            return
        if peer_may_use_daemon(uid):
            self._connections.serve(connection)
            return
        if uid not in self._refused_uids:  # one line per uid, not one per attempt
            self._refused_uids.add(uid)
            self._log(f"refused a connection from uid {uid}: this daemon serves uid "
                      f"{os.getuid()} (and root) only")  # fmt: skip
        with connection:
            connection.settimeout(0.1)
            answer(connection, self._refusal(
                f"this orion daemon serves uid {os.getuid()} (and root) only, not uid {uid}"
            ))  # fmt: skip

    def _tick(self) -> None:
        owner = self.settings.stop_with_pid
        if owner is not None and not process_alive(owner):
            self._log(f"the process this daemon stops with (pid {owner}) is gone; stopping")
            self.stopping = True
        self._expire_unattached()
        self._reap()
        now = self.clock.now()
        if now >= self._next_sample:
            self._next_sample = now + SAMPLE_S
            with self._lock:
                self._sample(now)

    def _sample(self, now: float) -> None:
        """In memory only (the clients' samples, the BE queue bound): the records thread
        writes (:meth:`_sample_records`)."""
        for slot, client in self.clients.items():
            stats = self._scheduler.client_stats(slot)
            client.samples.append(ClientSample.from_stats(now, stats))
        self._follow_learned_hp()
        if now >= self._next_control:
            self._next_control = now + latency_control.CONTROL_PERIOD_S
            self._control_latency()

    def _sample_records(self) -> None:
        """Every half second, on the records thread."""
        with self._records_lock:
            if self._recorder is not None:
                self._recorder.sample_memory()
                self._recorder.write_stats()
            if self._recordings is not None:
                for note in self._recordings.sample():
                    self.notes.append(note)
        if self._events is not None:
            self._events.flush_if_due()

    # -- requests --------------------------------------------------------------------------
    def _refusal(self, error: str) -> dict[str, Any]:
        return {"ok": False, "error": error}

    def _handle(self, message: dict[str, Any], connection: socket.socket) -> dict[str, Any]:
        """The answer to one request (on the connection's own thread); every failure is one."""
        started = time.monotonic()
        try:
            return self._dispatch(message, peer_credentials(connection)[0])
        except OrionError as error:
            return {"ok": False, "error": error.message, "hint": error.hint}
        except (OSError, ValueError) as error:
            return self._refusal(f"bad request: {error}")
        except Exception as error:  # a bug must cost one request, never the daemon
            traceback.print_exc()
            return self._refusal(f"the daemon failed on this request: {error!r}")
        finally:
            op = message.get("op")
            op = op if op in REQUEST_OPS else "other"  # bounded: a metric's label
            with self._request_times_lock:
                timed = self._request_times.setdefault(op, [0, 0.0])
                timed[0] += 1
                timed[1] += time.monotonic() - started

    def _dispatch(self, message: dict[str, Any], pid: int) -> dict[str, Any]:
        op = message.get("op")
        if op in ("record", "record_end"):
            return self._record_request(op, message, pid)
        with self._lock:
            if self._closed:
                raise OrionError("the orion daemon is stopping")
            if op == "join":
                return self._join(JoinRequest.from_message(message), pid)
            if op == "check":  # would a join be admitted now? (`orion run`, before it starts)
                self._check(JoinRequest.from_message(message))
                return {"ok": True}
            if op == "status":
                return {"ok": True, "status": self.status()}
            if op == "down":
                if self.settings.owner is not None:
                    raise state.owned_refusal(self._record())
                self.stopping = True
                return {"ok": True, "pid": os.getpid()}
            if op == "learned":
                return {"ok": True, "learned": self.learned(str(message.get("client", "")))}
            if op == "quota":
                return {"ok": True, "changes": self._change_limits(message)}
        raise OrionError(
            f"unknown request {op!r} (join, check, status, learned, quota, down, record, "
            "record_end)"
        )

    def _change_limits(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        """`orion quota` on a client: checked as a join is, against the live promises, then
        kept where admission reads it and appended to ``limits.csv`` (records thread)."""
        s = self.settings
        changes = apply_change(message, self.clients.values(), self._scheduler, policy=s.policy,
                               shares=s.shares, gpu_memory_bytes=s.memory_bytes,
                               context_bytes=self.context_bytes)  # fmt: skip
        now, utc, name = round(self.clock.now(), 6), utc_now(), str(message.get("client"))
        if changes:
            rows = [(now, utc, name, c["field"], c["old"], c["new"], c["in_use"]) for c in changes]
            self._submit_limits(rows)
            self._write_record()
        return [{**change, "time_s": now} for change in changes]

    def _submit_limits(self, rows: list[tuple[Any, ...]]) -> None:
        writer = self._writer
        if writer is None:
            return

        def write() -> None:
            if self._limits is None:
                self._limits = CsvTable(
                    self.folder / LIMITS_TABLE, run_format.column_names(run_format.LIMIT_COLUMNS)
                )
            self._limits.append_many(rows)
            self._limits.flush()

        writer.submit(write)

    def _record_request(self, op: str, message: dict[str, Any], pid: int) -> dict[str, Any]:
        """``record`` and ``record_end``: they wait on the disk (the run asked for its records
        written), so they hold the records, never the clients."""
        if op == "record_end":
            self._reap()  # a client that has just ended is recorded as gone
        with self._records_lock:
            if self._closed or self._recordings is None:
                raise OrionError("the orion daemon is stopping")
            if op == "record":
                self._recordings.start(message, pid)
            else:
                self._recordings.end(message.get("folder"))
        return {"ok": True}

    def _join(self, request: JoinRequest, pid: int) -> dict[str, Any]:
        try:
            return self._admit(request, pid)
        except OrionError as error:
            self._event("refused", request.name, request.role, None, pid, request.command,
                        error.message)  # fmt: skip
            raise

    def _check(self, request: JoinRequest) -> int | None:
        """Raises the reason ``request`` cannot join now; its memory limit in bytes if it can."""
        live = [LiveClient(c.name, c.role, c.min_util) for c in self.clients.values()]
        check_join(request, live, self.settings.memory_bytes, self.context_bytes)
        if self.settings.owner is not None and request.name not in self._recorded_names():
            raise state.owned_refusal(self._record())
        if sets_a_share(request.min_util, request.max_util):
            # policy quota grants GPU time by the shares whether --shares was given or not
            refusal = unenforced_shares_refusal(self.settings.policy, self.settings.shares)
            if refusal is not None:
                raise refusal
        if len(self.clients) >= self._max_clients():  # as SchedulerRun.add_client says it
            raise OrionError(
                f"cannot add client {request.name!r}: all {self._max_clients()} client slots "
                "are taken",
                hint="wait for a client to finish, or stop one",
            )
        self._check_hp_context(request)
        return memory_limit(request, self.settings.memory_bytes)

    def _check_hp_context(self, request: JoinRequest) -> None:
        """Raises why the HP cannot run in the context it asks for (``--hp-context``) here."""
        s = self.settings
        if request.hp_context is None:
            return
        if s.sharing != "mps":
            if request.hp_context == "own":
                return  # what every client of a time-sliced daemon has already
            raise OrionError(
                f"this daemon shares its GPU by {s.sharing!r}: there is no MPS server for the HP "
                "to run in",
                hint="start the daemon with `orion up --sharing mps`, or leave out --hp-context",
            )
        # Only a choice away from the daemon's own: one started with own and inside both asked
        # for runs as its user chose.
        default = s.hp_context or "mps"
        if request.hp_context == "own" and default != "own" and s.be_graph_gate == "inside":
            raise OrionError(
                "this daemon gates BE graphs inside (--be-graph-gate inside): a BE graph stopped "
                "at one of its waits keeps the MPS server on the GPU, and an HP in a context of "
                "its own would wait for the server's timeslice",
                hint="start the daemon with `orion up --sharing mps --hp-context own` (its BE "
                "graphs split into segments, an HP may still choose mps) or "
                "`--be-graph-gate segments`",
            )

    def _hp_context(self, request: JoinRequest) -> str | None:
        """Where a joining HP runs under MPS: its own choice, else the daemon's, else ``mps``;
        None for a BE client and on a time-sliced daemon (every client has its own context)."""
        if request.role != "hp" or self.settings.sharing != "mps":
            return None
        return request.hp_context or self.settings.hp_context or "mps"

    def _be_sm_percent(self, role: str) -> float | None:
        """The SM share a joining client's kernels get under MPS: ``--be-sm-percent`` for a BE
        client where an HP may run beside it in the MPS server
        (:func:`scheduler_core.sharing.be_sm_share_applies`), else None (every SM)."""
        share = self.settings.be_sm_percent
        if role != "be" or share is None or self._mps is None:
            return None
        joined = [c.hp_context for c in self.clients.values() if c.hp_context is not None]
        return share if be_sm_share_applies(self.settings.hp_context, joined) else None

    def _note_be_on_every_sm(self, hp_name: str) -> None:
        """Says so where an HP joins the MPS server beside BE clients that joined on every SM
        (its share is fixed as a client starts), so that a slower HP has its cause named."""
        if self.settings.be_sm_percent is None:
            return
        full = sorted(
            c.name for c in self.clients.values() if c.role == "be" and c.sm_percent is None
        )
        if full:
            self._log(
                f"HP {hp_name!r} joins the MPS server beside BE clients on every SM "
                f"({', '.join(full)}: they joined while no HP could run beside them); "
                f"--be-sm-percent {self.settings.be_sm_percent:g} applies to BE clients "
                "that join from now on"
            )

    def _admit(self, request: JoinRequest, pid: int) -> dict[str, Any]:
        limit = self._check(request)
        profile = None
        if request.profile is not None:
            from postprocess import read_profile

            profile = read_profile(request.profile)
        if request.role == "hp" and request.latency_target_ms is not None and profile is not None:
            from scheduler_core.thresholds import alone_latency_ns, target_below_alone_refusal

            alone = alone_latency_ns(profile.kernels, profile.metadata)
            refusal = target_below_alone_refusal(alone, request.latency_target_ms * 1e6)
            if refusal:
                raise OrionError(refusal, hint="give a target above it, or none")
        slot = add_profiled_client(
            self._scheduler,
            request.name,
            request.role,
            profile,
            memory_limit=limit,
            min_util=request.min_util,
            max_util=request.max_util,
        )
        hp_context = self._hp_context(request)
        sm_percent = self._be_sm_percent(request.role)
        try:
            if request.role == "hp":
                self._scheduler.set_hp_priority_stream(
                    hp_priority_stream(hp_sharing(self.settings.sharing, hp_context))
                )
            if request.role == "hp" and profile is not None:
                self._set_queue_limit(profile.kernels, request.latency_target_ms)
            elif request.role == "hp":
                self._protect_unlearned_hp()
            holder = self._memory_holder(request, pid)
            if holder is not None:
                self._scheduler.share_memory(slot, holder.slot)
                limit = holder.memory_limit
            self._scheduler.register(slot, pid)
        except OrionError:
            self._scheduler.release(slot)
            raise
        client = Client(
            slot=slot,
            name=request.name,
            role=request.role,
            claim_pid=pid,
            command=request.command,
            profile=request.profile,
            memory_limit=limit,
            min_util=request.min_util,
            max_util=request.max_util,
            latency_target_ms=request.latency_target_ms,
            joined_s=self.clock.now(),
            hp_context=hp_context,
            sm_percent=sm_percent,
        )
        if hp_context == "mps":
            self._note_be_on_every_sm(client.name)
        self.clients[slot] = client
        self._event("join", client.name, client.role, slot, pid, client.command, "")
        self._write_record()
        return {
            "ok": True,
            "run": self._scheduler.name,
            "slot": slot,
            "environment": self._env(slot, request.strict, request.role, hp_context, sm_percent),
            # What the daemon decides, sealed: the client maps it read-only (RunDecisions).
            PASSED_FDS: [self._scheduler.decisions_fd],
        }

    def _memory_holder(self, request: JoinRequest, pid: int) -> Client | None:
        """The client whose memory limit a joining child shares: the BE client it names as its
        parent (``request.parent``, which a BE client's library sets for its children), once the
        parent's process is an ancestor of ``pid``, or the client that parent shares with
        itself; None for any other join, which keeps a limit of its own. The check is the
        kernel's, not the request's: any process may name any client."""
        if request.parent is None or request.role != "be":
            return None
        parent = next((c for c in self.clients.values() if c.name == request.parent), None)
        if parent is None or parent.role != "be":
            return None
        stats = self._scheduler.client_stats(parent.slot)
        if not is_ancestor(int(stats.get("pid", 0)), pid):
            return None
        shared = int(stats.get("memory_account", -1))
        return self.clients.get(shared, parent) if shared >= 0 else parent

    def _recorded_names(self) -> frozenset[str]:
        return self._recordings.names() if self._recordings is not None else frozenset()

    def _set_queue_limit(self, rows: Any, latency_target_ms: float | None) -> None:
        """The BE queue bound follows the HP client's profile and target, unless `orion up` fixed
        it (``--queue-limit-us``)."""
        from scheduler_core.thresholds import default_queue_limit_ns

        if self.settings.queue_limit_ns is not None:
            return
        target = latency_target_ms * 1e6 if latency_target_ms is not None else None
        self.queue_limit_ns = default_queue_limit_ns(rows, target)
        self._scheduler.set_queue_limit(
            self.queue_limit_ns, self._unknown_duration_ns(self.queue_limit_ns)
        )

    def _protect_unlearned_hp(self) -> None:
        """An HP client joins with no profile: until its step is learned the BE queue bound is
        the tight one of scheduler_core.thresholds.UNLEARNED_HP_QUEUE_LIMIT_NS, so BE work
        already running cannot hold its first requests up by the fallback's 50 us (its first
        launches also hold BE back while they are timed: sampling holds, docs/scheduler.md)."""
        from scheduler_core.thresholds import UNLEARNED_HP_QUEUE_LIMIT_NS

        if self.settings.queue_limit_ns is not None:
            return
        self._apply_queue_limit(UNLEARNED_HP_QUEUE_LIMIT_NS)

    def _apply_queue_limit(self, limit: int, untightened: int | None = None) -> None:
        """Sets the BE bound; the duration assumed for an unknown kernel follows the bound
        before the latency loop tightened it (``untightened``): an HP kernel nobody knows
        must not count as finished sooner because BE is held tighter."""
        if limit != self.queue_limit_ns:
            self.queue_limit_ns = limit
            self._scheduler.set_queue_limit(limit, self._unknown_duration_ns(untightened or limit))

    def _hp_step_ns(self, hp: Client) -> tuple[float, float]:
        """The HP's step as the daemon knows it, (GPU time, latency alone): its profile's (the
        kernels' time as the join's bound used, the graph's span), else its longest learned
        graph's for both; 0 while not known."""
        from scheduler_core.thresholds import learned_step_ns

        if hp.profile is not None:
            return _profile_step_ns(hp.profile)
        step = learned_step_ns(self._scheduler.learned(hp.slot))
        return step, step

    def _follow_learned_hp(self) -> None:
        """An HP client without an offline profile: the BE queue bound follows its step as it is
        learned (scheduler_core.thresholds.learned_step_ns), unless `orion up` fixed it; an
        eager HP (no step the library can see) gets the fallback once nearly all its launches
        have learned durations (scheduler_core.thresholds.learned_enough)."""
        from scheduler_core.thresholds import (
            FALLBACK_QUEUE_LIMIT_NS,
            learned_enough,
            learned_step_ns,
            queue_limit_for_step_ns,
        )

        if self.settings.queue_limit_ns is not None:
            return
        hp = next((c for c in self.clients.values() if c.role == "hp"), None)
        if hp is None or hp.profile is not None:
            return
        if self._control is not None:
            return  # the latency loop moves the bound now (_control_latency), within its ceiling
        learned = self._scheduler.learned(hp.slot)
        step = learned_step_ns(learned)
        if step <= 0:
            if learned_enough(learned):
                self._apply_queue_limit(FALLBACK_QUEUE_LIMIT_NS)
            return
        target = hp.latency_target_ms * 1e6 if hp.latency_target_ms is not None else None
        self._apply_queue_limit(queue_limit_for_step_ns(step, target))

    def _control_latency(self) -> None:
        """One step of the loop closed on the HP's measured slowdown (orion_daemon.
        latency_control): the BE queue bound between its floor and the bound the HP's step gives
        without the loop, and long BE work held at the floor. Not when `orion up` fixed the bound,
        nor before the HP's step is known."""
        from scheduler_core.thresholds import (
            FALLBACK_QUEUE_LIMIT_NS,
            MIN_QUEUE_LIMIT_NS,
            queue_limit_for_step_ns,
        )

        hp = next((c for c in self.clients.values() if c.role == "hp"), None)
        if hp is None or self.settings.queue_limit_ns is not None:
            self._stop_control()
            return
        step, alone = self._hp_step_ns(hp)
        target = hp.latency_target_ms * 1e6 if hp.latency_target_ms is not None else None
        if step > 0:
            ceiling = queue_limit_for_step_ns(step, target)
        elif self._control is not None or self.queue_limit_ns == FALLBACK_QUEUE_LIMIT_NS:
            ceiling = FALLBACK_QUEUE_LIMIT_NS  # an eager HP, learned: no step, the fallback
        else:
            return  # not learned yet: the tight bound of its join holds
        state = self._control
        if state is None:
            state = latency_control.ControlState(ceiling, MIN_QUEUE_LIMIT_NS, ceiling)
        elif state.ceiling_ns != ceiling:
            state = latency_control.rebound(state, ceiling, MIN_QUEUE_LIMIT_NS)
        allowed = latency_control.allowed_slowdown(
            hp.latency_target_ms, alone / 1e6 if alone > 0 else None
        )
        state = latency_control.next_control(
            state, _hp_reading(hp, self.settings.loop_reads), allowed
        )
        self._control = state
        self._apply_queue_limit(state.queue_limit_ns, state.ceiling_ns)
        self._scheduler.set_hold_long_be(state.hold_long_be)

    def _stop_control(self) -> None:
        if self._control is not None:
            self._control = None
            self._scheduler.set_hold_long_be(False)

    def _latency_status(self) -> dict[str, Any] | None:
        hp = next((c for c in self.clients.values() if c.role == "hp"), None)
        if hp is None:
            return None
        if self.settings.queue_limit_ns is not None:
            return {"state": "off: `orion up --queue-limit-us` fixed the bound"}
        _, alone = self._hp_step_ns(hp)
        allowed = latency_control.allowed_slowdown(
            hp.latency_target_ms, alone / 1e6 if alone > 0 else None
        )
        return latency_control.status(self._control, allowed)

    def _env(
        self,
        slot: int,
        strict: bool,
        role: str,
        hp_context: str | None = None,
        sm_percent: float | None = None,
    ) -> dict[str, str]:
        environment = {
            "ORION_RUN": self._scheduler.name,
            "ORION_CLIENT": str(slot),
            # A client that cannot join (the daemon stopped meanwhile) runs ungated, as it would
            # have without orion; a benchmark run's is strict instead: it attaches as it starts
            # and exits rather than spoil a measurement.
            "ORION_STRICT": "1" if strict else "0",
            # What a BE client does when this daemon falls silent (the library reads these).
            "ORION_BE_WHEN_DAEMON_GONE": self.settings.be_when_daemon_gone,
            "ORION_DAEMON_GONE_HOLD_S": repr(self.settings.daemon_gone_hold_s),
        }
        if self.settings.gpu_uuid:
            environment["CUDA_VISIBLE_DEVICES"] = self.settings.gpu_uuid
        if self._mps is None or (role == "hp" and hp_context == "own"):
            environment.update(self._outside_mps)
        else:
            environment.update(self._mps.environment)
            if role == "be":
                # Under MPS a BE client's kernels also yield to the HP's where the GPU schedules
                # blocks: on the device, MPS with the BE at low priority halved the HP's tail
                # by itself (docs/scheduler.md); orion's gates bound what is queued on top.
                environment[MPS_CLIENT_PRIORITY] = MPS_BE_PRIORITY
                if sm_percent is not None:
                    environment[MPS_THREAD_PERCENTAGE] = f"{sm_percent:g}"
        return environment

    # -- clients that are gone ---------------------------------------------------------------
    def _reap(self) -> None:
        with self._reap_lock:  # the loop, and a record_end request
            for slot in self._scheduler.reap():
                self._client_gone(slot)

    def _expire_unattached(self) -> None:
        """Ends the slots whose process has not attached within the bound (the next reap gives
        them back, recorded as ``expired``); a process that attaches meanwhile keeps its slot."""
        bound = self.settings.attach_timeout_s
        with self._lock:
            now = self.clock.now()
            for slot, client in self.clients.items():
                if slot in self._expired or now - client.joined_s < bound:
                    continue
                if self._scheduler.client_state(slot) != "registered":
                    continue  # attached (it keeps its slot), or already gone
                if self._scheduler.expire(slot):
                    self._expired.add(slot)

    def _client_gone(self, slot: int) -> None:
        if self._recordings is not None and self._writer is not None:
            # Its last trace and statistics, for its run, before its slot is given back.
            def last_records() -> None:
                with self._records_lock:
                    if self._recordings is not None:
                        self._recordings.client_gone(slot)

            self._writer.attempt(last_records)
        with self._lock:
            if self.clients.get(slot) is not None and self.clients[slot].role == "hp":
                self._stop_control()  # the next HP starts from its own bounds
            stats = self._scheduler.client_stats(slot)
            client = self.clients.pop(slot, None)
            if client is not None:
                event = "dead" if stats.get("state") == "dead" else "leave"
                detail = f"{stats.get('launches', 0)} launches"
                if not stats.get("pid"):
                    detail = "ended without using the GPU"
                if slot in self._expired:
                    event = "expired"
                    detail = (f"no process attached within {self.settings.attach_timeout_s:g} s "
                              f"of the join (claimer pid {client.claim_pid})")  # fmt: skip
                pid = int(stats.get("pid") or client.claim_pid)
                self._event(event, client.name, client.role, slot, pid, client.command, detail)
            self._expired.discard(slot)
            self._scheduler.release(slot)
            self._write_record()

    # -- records ---------------------------------------------------------------------------
    def _event(
        self,
        event: str,
        name: str,
        role: str,
        slot: int | None,
        pid: int,
        command: list[str],
        detail: str,
    ) -> None:
        self._client_events[event] = self._client_events.get(event, 0) + 1
        events, writer = self._events, self._writer
        if events is None or writer is None:
            return
        row = (round(self.clock.now(), 6), utc_now(), event, name, role, slot, pid,
               " ".join(command), detail)  # fmt: skip

        def write() -> None:
            events.append(row)
            events.flush()

        writer.submit(write)

    def _write_record(self) -> None:
        """``daemon.json`` as it is now, written by the records thread (in order: the last
        one submitted is the one on disk)."""
        if self._writer is None:
            return
        path, record = self.folder / state.RECORD, self._record()
        self._writer.submit(lambda: write_json_atomic(path, record))

    def _record(self) -> dict[str, Any]:
        s = self.settings
        return {
            "format": state.FORMAT,
            "version": state.VERSION,
            "status": "running",
            "pid": os.getpid(),
            # With the pid, what names this very process: a pid is reused once a daemon is gone.
            "pid_start": process_start_time(os.getpid()),
            "started_utc": self._started_utc,
            "gpu": {
                "index": s.gpu,
                "uuid": s.gpu_uuid,
                "name": s.gpu_name,
                "sm_count": s.sm_count,
                "memory_bytes": s.memory_bytes,
                "context_bytes": self.context_bytes,
            },
            "policy": s.policy,
            "sharing": s.sharing,
            "shares": s.shares,
            "be_gate": s.be_gate,
            "be_graph_gate": s.be_graph_gate,
            "hp_completion": s.hp_completion,
            "queue_limit_ns": self.queue_limit_ns,
            "socket": str(self.folder / state.SOCKET),
            "log": str(self.folder / state.LOG),
            "python": sys.executable,
            # The shared state's name, where its sealed decisions are (read-only to all but this
            # process), its process and the daemon clock's origin (a run's run.json has its own
            # entry, with the daemon's state folder).
            "scheduler": {
                "shm": self._scheduler.name,
                "decisions": self._scheduler.decisions_path,
                "controller_pid": os.getpid(),
                "clock_origin_ns": self.clock.origin_ns,
            },
            "mps": None
            if self._mps is None
            else {
                "pid": self._mps.pid,
                "pipe_dir": str(self._mps.pipe_dir),
                "log_dir": str(self._mps.log_dir),
            },
            "clients": [c.record() for c in self.clients.values()],
            "settings": s.to_json(),
            "owner": s.owner,
        }

    def status(self) -> dict[str, Any]:
        """What `orion status` shows (see :mod:`orion_daemon.status`)."""
        return {
            "gpu": self.settings.gpu,
            "gpu_name": self.settings.gpu_name,
            "policy": self.settings.policy,
            "sharing": self.settings.sharing,
            "pid": os.getpid(),
            "uptime_s": round(self.clock.now(), 3),
            "queue_limit_us": None if self.queue_limit_ns is None else self.queue_limit_ns / 1e3,
            "hp_quiet_us": self.settings.hp_quiet_us,
            "be_gate_spacing_us": self.settings.be_gate_spacing_us,
            "be_sm_percent": self.settings.be_sm_percent,
            "hp_context": self.settings.hp_context,
            "loop_reads": self.settings.loop_reads,
            "context_bytes": self.context_bytes,
            "latency_control": self._latency_status(),
            "free_slots": self._free_slots(),
            "owner": self.settings.owner,
            "records": None if self._writer is None else self._writer.degraded,
            "records_pending": 0 if self._writer is None else self._writer.pending,
            "record_writes": 0 if self._writer is None else self._writer.written,
            "record_write_failures": 0 if self._writer is None else self._writer.failed_writes,
            "heartbeat_age_s": None if self._heartbeat is None else self._heartbeat.age_s(),
            "client_events": dict(self._client_events),
            "requests": self._request_summary(),
            "clients": [
                client_status(c, self._scheduler.client_stats(c.slot))
                for c in sorted(self.clients.values(), key=lambda c: (c.role != "hp", c.slot))
            ],
        }

    def snapshot(self) -> dict[str, Any]:
        """:meth:`status` as the ``status`` request takes it (under the state lock, briefly):
        what the metrics are built from, so they and `orion status --json` agree."""
        with self._lock:
            if self._closed:
                raise OrionError("the orion daemon is stopping")
            return self.status()

    def _request_summary(self) -> dict[str, dict[str, float]]:
        with self._request_times_lock:
            return {op: {"count": int(count), "seconds": round(seconds, 6)}
                    for op, (count, seconds) in self._request_times.items()}  # fmt: skip

    def learned(self, name: str) -> dict[str, Any]:
        """What client ``name`` learned online (``SchedulerRun.learned``), with what a saved
        profile records of it: its command, the GPU."""
        client = next((c for c in self.clients.values() if c.name == name), None)
        if client is None:
            names = ", ".join(sorted(c.name for c in self.clients.values())) or "none"
            raise OrionError(f"no client named {name!r} (clients: {names})")
        return {
            "client": client.name,
            "command": list(client.command),
            "gpu_name": self.settings.gpu_name,
            "sm_count": self.settings.sm_count,
            "entries": self._scheduler.learned(client.slot),
        }

    def _max_clients(self) -> int:
        from scheduler_core import native_module

        return int(native_module().MAX_CLIENTS)

    def _free_slots(self) -> int:
        return self._max_clients() - len(self.clients)


def _hp_reading(hp: Client, reads: str) -> latency_control.Reading | None:
    """The HP's slowdown over the last control period, from the daemon's samples of its timed
    launches (orion_daemon.status): its requests timed whole where the daemon reads requests
    (``loop_reads``) and some were timed against its requests alone, else the felt one (launch
    call to the end of its work, against alone) where the library measured it, else the
    GPU-time one, with the felt tail; None without timed launches."""
    from orion_daemon.status import recent_reading

    return recent_reading(list(hp.samples), latency_control.CONTROL_PERIOD_S, reads=reads)


@functools.lru_cache(maxsize=16)
def _profile_step_ns(path: str) -> tuple[float, float]:
    """An HP profile's step, (GPU time, latency alone: scheduler_core.thresholds), read once:
    the loop and `orion status` ask every few seconds."""
    from postprocess import read_profile
    from scheduler_core.thresholds import alone_latency_ns, step_gpu_time_ns

    profile = read_profile(path)
    return step_gpu_time_ns(profile.kernels), alone_latency_ns(profile.kernels, profile.metadata)
