"""Starting a daemon in the background, and stopping one: what `orion up` and `orion down` do.

A detached daemon is ``python -m orion_daemon`` in a session of its own (a terminal closing
does not stop it), its output in the state folder's ``daemon.log``. Starting waits until the
daemon answers on its socket, or says why it could not start.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from orion_common.errors import OrionError, UsageError
from orion_common.processes import same_process
from orion_daemon import client as daemon_client
from orion_daemon import state
from orion_daemon.lock import claim_holder, gpu_claim_name, gpu_claimed
from orion_daemon.ownership import private_folder
from orion_daemon.server import DAEMON_GONE_HOLD_S, DaemonSettings

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


def check_hold_bound(be_when_daemon_gone: str, daemon_gone_hold_s: float | None) -> None:
    """Raises :class:`UsageError` for a hold bound given where BE never holds: it would be
    taken and never used (`orion up --daemon-gone-hold-s 5` without ``--be-when-daemon-gone
    hold``)."""
    if daemon_gone_hold_s is not None and be_when_daemon_gone != "hold":
        raise UsageError(
            "daemon_gone_hold_s applies only when be_when_daemon_gone is 'hold' (got "
            f"{be_when_daemon_gone!r}): BE holds for a silent daemon only then",
            hint="add --be-when-daemon-gone hold, or leave out --daemon-gone-hold-s",
        )


def hold_bound(daemon_gone_hold_s: float | None) -> dict[str, float]:
    """The ``daemon_gone_hold_s`` keyword when one was given: None leaves the daemon's default
    (:data:`orion_daemon.server.DAEMON_GONE_HOLD_S`) in the one place it is declared."""
    return {} if daemon_gone_hold_s is None else {"daemon_gone_hold_s": daemon_gone_hold_s}


def check_options(
    *,
    policy: str = "orion",
    sharing: str | None = None,
    queue_limit_us: float | None = None,
    be_gate: str = "gpu",
    be_graph_gate: str | None = None,
    folder: Path | None = None,
    be_when_daemon_gone: str = "open",
    daemon_gone_hold_s: float = DAEMON_GONE_HOLD_S,
    shares: bool = False,
    hp_quiet_us: float | None = None,
    be_gate_spacing_us: float | None = None,
    be_sm_percent: float | None = None,
    hp_context: str | None = None,
    loop_reads: str | None = None,
) -> None:
    """Raises :class:`UsageError` for options no daemon runs with, before any GPU is looked at:
    `orion up` and orion.ray's :func:`~orion.ray.start_daemons` say a bad ``--policy`` as such,
    not as "no GPU". The policy and sharing rules are :class:`DaemonSettings`' own, applied to
    stand-in facts of a GPU; ``folder``, the state folder, must be a folder this user can
    write (else :class:`OrionError`, as for any folder orion cannot write)."""
    from orion_common.output_paths import check_output_folder
    from scheduler_core.run_state import SchedulerSettings

    if queue_limit_us is not None and not (math.isfinite(queue_limit_us) and queue_limit_us > 0):
        raise UsageError(
            f"--queue-limit-us must be a positive number of microseconds (got {queue_limit_us:g})"
        )
    try:
        DaemonSettings(
            gpu=0,
            sm_count=1,
            folder=Path("."),
            policy=policy,
            sharing=sharing,
            be_gate=be_gate,
            be_graph_gate=be_graph_gate,
            be_when_daemon_gone=be_when_daemon_gone,
            daemon_gone_hold_s=daemon_gone_hold_s,
            hp_quiet_us=hp_quiet_us,
            be_gate_spacing_us=be_gate_spacing_us,
            be_sm_percent=be_sm_percent,
            hp_context=hp_context,
            loop_reads=loop_reads,
        )
        # the scheduler's own rule for shares (a policy that can hold work back)
        SchedulerSettings(policy=policy, sm_count=1, queue_limit_ns=0, unknown_duration_ns=0,
                          quotas=shares)  # fmt: skip
    except OrionError as error:
        raise UsageError(error.message, error.hint) from None
    if folder is not None:
        check_output_folder(folder, "state folder")  # an error of the file system: status 1


def gpu_settings(
    gpu: int,
    folder: Path,
    *,
    policy: str = "orion",
    sharing: str | None = None,
    shares: bool = False,
    queue_limit_us: float | None = None,
    be_gate: str = "gpu",
    be_graph_gate: str | None = None,
    stop_with_pid: int | None = None,
    metrics_listen: str | None = None,
    metrics_allow_remote: bool = False,
    be_when_daemon_gone: str = "open",
    daemon_gone_hold_s: float = DAEMON_GONE_HOLD_S,
    hp_quiet_us: float | None = None,
    be_gate_spacing_us: float | None = None,
    be_sm_percent: float | None = None,
    hp_context: str | None = None,
    loop_reads: str | None = None,
) -> DaemonSettings:
    """The settings of a daemon for GPU ``gpu`` of this machine, its facts read here (so the
    daemon itself never makes a CUDA context); what `orion up` and orion.ray's node agent start.
    Refuses options no daemon runs with first (:func:`check_options`), then, with what is
    missing, a GPU that is not there, a missing preload library, and
    ``mps`` sharing (asked for, or the policy's default when ``sharing`` is None) without the
    MPS control daemon."""
    from orion_common import prerequisites, sysinfo
    from scheduler_core import check_preload_library

    check_options(
        policy=policy,
        sharing=sharing,
        queue_limit_us=queue_limit_us,
        be_gate=be_gate,
        be_graph_gate=be_graph_gate,
        folder=folder,
        be_when_daemon_gone=be_when_daemon_gone,
        daemon_gone_hold_s=daemon_gone_hold_s,
        shares=shares,
        hp_quiet_us=hp_quiet_us,
        be_gate_spacing_us=be_gate_spacing_us,
        be_sm_percent=be_sm_percent,
        hp_context=hp_context,
        loop_reads=loop_reads,
    )
    ok, problem = check_preload_library()
    if not ok:
        raise OrionError(problem)
    count = sysinfo.gpu_count()
    if count is not None and gpu >= count:
        raise OrionError(f"no GPU {gpu}: this machine has {count} (0-{count - 1})")
    facts = sysinfo.gpu_facts(gpu)
    if facts is None or facts.sm_count is None:
        raise OrionError(
            f"no NVIDIA GPU {gpu} that CUDA can use on this machine",
            hint="`orion doctor` shows what is missing",
        )
    settings = DaemonSettings(
        gpu=gpu,
        sm_count=facts.sm_count,
        folder=folder,
        policy=policy,
        sharing=sharing,
        gpu_uuid=sysinfo.gpu_uuid(gpu),
        gpu_name=facts.name,
        memory_bytes=None if facts.memory_total_mib is None else facts.memory_total_mib << 20,
        queue_limit_ns=None if queue_limit_us is None else round(queue_limit_us * 1000),
        shares=shares,
        be_gate=be_gate,
        be_graph_gate=be_graph_gate,
        stop_with_pid=stop_with_pid,
        metrics_listen=metrics_listen,
        metrics_allow_remote=metrics_allow_remote,
        be_when_daemon_gone=be_when_daemon_gone,
        daemon_gone_hold_s=daemon_gone_hold_s,
        hp_quiet_us=hp_quiet_us,
        be_gate_spacing_us=be_gate_spacing_us,
        be_sm_percent=be_sm_percent,
        hp_context=hp_context,
        loop_reads=loop_reads,
    )
    if settings.sharing != "mps":
        return settings
    mps = prerequisites.check_mps_control()
    if not mps.ok and mps_is_only_the_default(policy, sharing, hp_context, be_sm_percent):
        # As asked, but time-sliced: what was resolved for MPS is resolved again.
        # (`orion up` and `orion status` say which it runs.)
        return replace(
            settings, sharing="timeslice", hp_context=None, be_sm_percent=None,
            hp_quiet_us=hp_quiet_us, be_graph_gate=be_graph_gate,
        )  # fmt: skip
    prerequisites.require(mps)
    return settings


def mps_is_only_the_default(
    policy: str, sharing: str | None, hp_context: str | None, be_sm_percent: float | None
) -> bool:
    """Whether MPS is only the policy's default here, nothing asked for needing it, and the
    policy runs time-sliced too: a machine without the MPS tools then runs it time-sliced,
    as orion ran before MPS became its default, rather than refusing to start."""
    from scheduler_core.sharing import NATIVE_SHARINGS

    asked = sharing is not None or hp_context is not None or be_sm_percent is not None
    return not asked and "timeslice" in NATIVE_SHARINGS.get(policy, ())


def _log_tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


def start_detached(settings: DaemonSettings, timeout_s: float = START_TIMEOUT_S) -> dict[str, Any]:
    """Starts the daemon in the background; its record once it answers."""
    private_folder(settings.folder)
    running = state.live_record(settings.folder)
    if running is not None:
        raise OrionError(
            f"an orion daemon already runs for GPU {settings.gpu} (pid {running.get('pid')}, "
            f"since {running.get('started_utc')})",
            hint=f"`orion status --gpu {settings.gpu}` shows it; `orion down --gpu "
            f"{settings.gpu}` stops it",
        )
    if settings.gpu_uuid:  # another state folder's or user's daemon: refused before it starts
        holder = claim_holder(gpu_claim_name(settings.gpu_uuid))
        if holder is not None:
            raise gpu_claimed(settings.gpu, settings.gpu_uuid, holder)
    log_path = settings.folder / state.LOG
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            daemon_client.daemon_command(settings),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            # A daemon keeps no folder of the user's busy; and `python -m` puts its working
            # folder first on the import path, where a source checkout would shadow the install.
            cwd=settings.folder,
        )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:
            raise OrionError(
                f"the orion daemon exited at start (status {code}): {_log_tail(log_path)}",
                hint=f"its log is {log_path}",
            )
        record = state.live_record(settings.folder)
        ours = record is not None and record.get("pid") == process.pid
        if ours and daemon_client.answers(record):
            return record
        time.sleep(0.05)
    process.terminate()
    raise OrionError(
        f"the orion daemon did not answer within {timeout_s:g} s; stopped it",
        hint=f"its log is {log_path}",
    )


def stop(gpu: int, folder: Path, timeout_s: float = STOP_TIMEOUT_S) -> dict[str, Any]:
    """Stops the daemon of ``gpu``: asks it, then SIGTERM, then SIGKILL if it will not go.
    Its clients run on ungated. Returns its record as it was. A daemon an `orion colocate` run
    started for itself is refused: it runs inside the run's process and stops with the run."""
    record = state.require_daemon(gpu, folder)
    if record.get("owner"):
        raise state.owned_refusal(record)  # a run's own: signalling it would stop the run
    pid, started = int(record["pid"]), record.get("pid_start")
    try:
        daemon_client.down(record)
    except OrionError:
        with_signal(pid, started, signal.SIGTERM)
    if not _wait_gone(pid, started, timeout_s):
        with_signal(pid, started, signal.SIGKILL)
        _wait_gone(pid, started, 5.0)
        state.remove_stale(folder)
        raise OrionError(
            f"the orion daemon (pid {pid}) did not stop within {timeout_s:g} s; killed it",
            hint="its clients notice within a second and run ungated",
        )
    return record


def _wait_gone(pid: int, start_time: int | None, timeout_s: float) -> bool:
    """Whether the daemon (``pid`` started at ``start_time``) ended within ``timeout_s``; a pid
    taken meanwhile by another process is not the daemon."""
    deadline = time.monotonic() + timeout_s
    while same_process(pid, start_time):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def with_signal(pid: int, start_time: int | None, signum: int) -> None:
    """Sends ``signum`` to ``pid`` only while it is still the daemon that started at
    ``start_time`` (its record's ``pid_start``): a pid reused by another process is never
    signalled."""
    if not same_process(pid, start_time):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)
