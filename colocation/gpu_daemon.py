"""The daemon a run's clients join: the GPU's running one when it schedules as the run needs,
else one the run starts for itself.

A run is one of the daemon's clients, the benchmark harness: its client processes take their
slots with :func:`orion_daemon.joining.join`, as `orion run` does (there is no second way to
fill a slot), and the daemon writes the run's records into the run directory (a ``record``
request; :class:`orion_daemon.records.Recordings`).

**A daemon of its own runs inside the runner's process, on a thread**
(:mod:`orion_daemon.embedded`), in the GPU's usual state folder, rather than as a child process:

- its life is the run's: nothing outlives a runner that is killed (a detached child daemon
  would stay behind holding the GPU's MPS daemon with nobody to stop it), and the run's
  tear-down stops it in order, after the clients and before run.json's final state;
- it starts in milliseconds and fails with its own error where the run can catch it (a child
  would cost an interpreter start per run and report failures through a log file);
- the shared memory and the gate keeper stay in the runner's process, as they were when runs
  built their own scheduler state: the measurements keep their meaning;
- in the GPU's state folder it is the GPU's daemon for the run's length: `orion status` shows
  the run's clients, `orion up` and a second run on the GPU are refused instead of putting a
  second scheduler on the same GPU, and `orion down` says whose it is (it stops with its run).
  It admits the run's own clients only.

A running daemon (`orion up`) is used when every setting that decides scheduling
(:data:`orion_daemon.server.SCHEDULING`) is the run's; else the run is refused with one line
naming the first that differs. Its other clients, if any, share the GPU with the run (a warning).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orion_common.errors import OrionError
from orion_common.processes import process_alive
from orion_daemon import client as daemon_client
from orion_daemon import state
from orion_daemon.admission import JoinRequest, LiveClient, check_join
from orion_daemon.embedded import DaemonThread, daemon_thread
from orion_daemon.server import SCHEDULING, DaemonSettings
from scheduler_core.shares import NO_PROMISE

SETTING_LABELS = {
    "policy": "policy",
    "sharing": "sharing",
    "be_gate": "BE gate",
    "be_graph_gate": "BE graph gate",
    "hp_completion": "HP completion tracking",
    "shares": "GPU-time shares",
    "quota_window_ns": "quota window",
    "queue_limit_ns": "BE queue limit",
    "unknown_duration_ns": "unprofiled kernel duration",
    "trace": "kernel trace",
    "hp_quiet_us": "HP quiet spell",
    "be_gate_spacing_us": "BE gate spacing",
    "be_sm_percent": "BE SM share",
    "hp_context": "HP context",
    "loop_reads": "latency loop reading",
}
"""Each of :data:`orion_daemon.server.SCHEDULING` in words, for the sentence that says why a run
cannot use a running daemon."""


def _shown(field: str, value: Any) -> str:
    if value is None and field == "queue_limit_ns":
        return "from the HP client's profile"
    if value is None and field == "unknown_duration_ns":
        return "the queue limit"
    if field in ("queue_limit_ns", "unknown_duration_ns"):
        return f"{value / 1e3:g} us"
    if field == "quota_window_ns":
        return f"{value / 1e9:g} s"
    if field == "hp_quiet_us":
        return f"{value:g} us" if value else "off"
    if field == "be_gate_spacing_us":
        return "none (no GPU gate)" if value is None else f"{value:g} us"
    if field == "be_sm_percent":
        return "every SM" if value is None else f"{value:g}%"
    if field == "hp_context":
        return "its own (time-sliced)" if value is None else value
    if isinstance(value, bool):
        return "on" if value else "off"
    return repr(value)


def settings_difference(running: DaemonSettings, wanted: DaemonSettings) -> str | None:
    """The first scheduling setting in which ``running`` is not ``wanted``, in words; None when
    they schedule alike. The quota window counts only where GPU-time shares are enforced."""
    for field in SCHEDULING:
        if field == "quota_window_ns" and not (wanted.shares or wanted.policy == "quota"):
            continue
        have, want = getattr(running, field), getattr(wanted, field)
        if have != want:
            label = SETTING_LABELS[field]
            return f"{label} {_shown(field, have)} where this run needs {_shown(field, want)}"
    return None


@dataclass(frozen=True)
class DaemonNeeds:
    """What a run needs of the daemon its clients join."""

    settings: DaemonSettings
    """How it must schedule; for a daemon of the run's own, what it starts with."""
    clients: tuple[JoinRequest, ...]
    """Each client's join (the runner adds its command line when it starts it)."""
    policy: str
    """The run's policy, as its jobs file names it."""


def join_request(client: Any, profile: Path | None, command: list[str]) -> JoinRequest:
    """How a run's client (a :class:`colocation.config.ClientConfig`) asks for its slot: with
    its profile (an absolute path: a running daemon reads it from its own folder), its limits,
    and strict, since a benchmark client that could not join must not run ungated."""
    return JoinRequest(
        role=client.role,
        name=client.name,
        command=command,
        profile=None if profile is None else str(Path(profile).resolve()),
        memory_limit=client.memory_limit,
        min_util=client.min_util,
        max_util=client.max_util,
        latency_target_ms=client.latency_target_ms if client.role == "hp" else None,
        strict=True,
    )


def running_daemon(needs: DaemonNeeds) -> dict[str, Any] | None:
    """The record of the GPU's running daemon, when the run's clients can join it; None when
    none runs. Refuses (one line) a daemon that schedules otherwise, one that another run
    started for itself, and one where a client could not join (a second HP, a name taken)."""
    wanted = needs.settings
    record = state.live_record(wanted.folder)
    if record is None:
        return None
    gpu, pid = wanted.gpu, record.get("pid")
    if record.get("owner"):
        raise state.owned_refusal(record)
    hint = f"stop it with `orion down --gpu {gpu}` (this run then starts a daemon of its own)"
    running = DaemonSettings.from_json(record.get("settings"))
    if running is None:
        raise OrionError(
            f"the orion daemon of GPU {gpu} (pid {pid}) does not record its settings (an older "
            "orion), so this run cannot tell whether it schedules as the run needs",
            hint=hint,
        )
    difference = settings_difference(running, wanted)
    if difference is not None:
        raise OrionError(
            f"the orion daemon running on GPU {gpu} (pid {pid}) has {difference} (run policy "
            f"{needs.policy!r})",
            hint=f"{hint}, or run with the daemon's settings",
        )
    live = [
        LiveClient(str(c.get("name")), str(c.get("role")), float(c.get("min_util") or NO_PROMISE))
        for c in record.get("clients", [])
        if isinstance(c, dict)
    ]
    gpu_record = record.get("gpu")
    context = gpu_record.get("context_bytes") if isinstance(gpu_record, dict) else None
    context_bytes = context if isinstance(context, int) and not isinstance(context, bool) else 0
    for client in needs.clients:
        try:
            check_join(client, live, running.memory_bytes, context_bytes)
        except OrionError as error:
            raise OrionError(
                f"client {client.name!r} cannot join the orion daemon running on GPU {gpu} "
                f"(pid {pid}): {error.message}",
                hint=error.hint,
            ) from None
    return record


def other_clients_warning(record: dict[str, Any] | None) -> list[str]:
    """A warning when the running daemon a run will join serves other programs too."""
    names = [str(c.get("name")) for c in (record or {}).get("clients", []) if isinstance(c, dict)]
    if not names:
        return []
    gpu = record.get("gpu", {}).get("index") if record else None
    return [
        f"the orion daemon of GPU {gpu} also serves {', '.join(names)}: they share the GPU with "
        "this run's clients and change what it measures"
    ]


@dataclass
class RunDaemon:
    """The daemon a run's clients join, as the runner uses it."""

    record: dict[str, Any]
    """Its ``daemon.json`` as the run began with it."""
    folder: Path
    own: DaemonThread | None
    """The run's own daemon (stopped at the run's end); None: a running one, left running."""

    @property
    def gpu(self) -> int:
        return int(self.record["gpu"]["index"])

    @property
    def pid(self) -> int:
        return int(self.record["pid"])

    def start_recording(self, run_dir: Path, names: list[str], origin_ns: int, trace: bool) -> None:
        """The daemon writes the records of the clients ``names`` into ``run_dir`` from now on."""
        daemon_client.start_records(self.record, run_dir.resolve(), names, origin_ns, trace)

    def end_recording(self, run_dir: Path) -> None:
        """Returns once the run's last records are written."""
        daemon_client.end_records(self.record, run_dir.resolve())

    def check(self) -> None:
        """Raises when the daemon stopped during the run (its clients then run ungated)."""
        if self.own is not None:
            self.own.check()
        elif not process_alive(self.pid):
            raise OrionError(
                f"the orion daemon of GPU {self.gpu} (pid {self.pid}) stopped during the run; "
                "the clients ran ungated from then on"
            )

    def scheduler_entry(self, clock_origin_ns: int) -> dict[str, Any]:
        """run.json's ``scheduler``: the daemon that holds the run's shared state (its process
        and its state folder, where `orion quota` finds its socket), the shared memory's name,
        and the run clock's origin."""
        return {
            "shm": self.record["scheduler"]["shm"],
            "controller_pid": self.pid,
            "state_dir": str(self.folder.resolve()),
            "clock_origin_ns": clock_origin_ns,
        }

    def client_device(self, device: str) -> str:
        """How a client addresses the run's GPU: a daemon that pins its GPU
        (``CUDA_VISIBLE_DEVICES``, `orion up`'s) shows its clients that one GPU as ``cuda:0``."""
        pinned = bool(self.record.get("gpu", {}).get("uuid"))
        return "cuda:0" if pinned and device.startswith("cuda") else device


@contextlib.contextmanager
def run_daemon(needs: DaemonNeeds, run_dir: Path, notes: list[str]) -> Iterator[RunDaemon]:
    """The daemon the run's clients join for the block: the GPU's running one (checked again
    now: it may have stopped or started since the run was prepared), else the run's own, on a
    thread, its MPS folders in ``run_dir/mps`` as a run's always were."""
    wanted = needs.settings
    record = running_daemon(needs)
    if record is not None:
        notes.append(
            f"the clients joined the orion daemon running on GPU {wanted.gpu} (pid "
            f"{record['pid']}, state folder {wanted.folder}), which was left running"
        )
        yield RunDaemon(record, wanted.folder, None)
        return
    own = dataclasses.replace(wanted, mps_folder=run_dir, owner=str(run_dir.resolve()))
    with daemon_thread(own, notes) as serving:
        record = state.read_record(own.folder)
        if record is None:
            raise OrionError(f"the run's orion daemon wrote no record in {own.folder}")
        yield RunDaemon(record, own.folder, serving)
