"""`orion up`: start the daemon of one GPU; `orion down`: stop it."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from orion_cli._common import console, handle_errors
from orion_cli._daemon_options import GpuOpt, StateDirOpt, daemon_folder
from orion_cli._metrics_options import MetricsAllowRemoteOpt, MetricsListenOpt, MetricsPortOpt
from orion_cli._settings import parsed, setting_option
from scheduler_core.run_state import DEFAULT_BE_GATE
from scheduler_core.settings import (
    BE_GATE,
    BE_GATE_SPACING_US,
    BE_GRAPH_GATE,
    BE_SM_PERCENT,
    HP_CONTEXT,
    HP_QUIET_US,
    LOOP_READS,
    SHARING,
)
from scheduler_core.sharing import default_sharing


@handle_errors
def up_command(
    gpu: GpuOpt = 0,
    policy: Annotated[
        str,
        typer.Option(
            "--policy",
            help="How BE work is let onto the GPU: orion (beside HP kernels it fits with), reef "
            "(only while HP is idle), priority (stream priorities only), quota (GPU-time "
            "shares), passthrough (nothing gated).",
        ),
    ] = "orion",
    sharing: Annotated[str | None, setting_option(SHARING)] = None,
    shares: Annotated[
        bool,
        typer.Option(
            "--shares", help="Enforce GPU-time shares (`orion run --min-util/--max-util`)."
        ),
    ] = False,
    queue_limit_us: Annotated[
        float | None,
        typer.Option(
            "--queue-limit-us",
            help="BE work allowed on the GPU at once beside HP (default: from the HP client's "
            "profile and latency target when it joins, then moved by the daemon's latency loop; "
            "fixed, the loop is off).",
            show_default=False,
            min=1,
        ),
    ] = None,
    be_gate: Annotated[str | None, setting_option(BE_GATE)] = None,
    be_graph_gate: Annotated[str | None, setting_option(BE_GRAPH_GATE)] = None,
    hp_quiet_us: Annotated[str | None, setting_option(HP_QUIET_US)] = None,
    be_gate_spacing_us: Annotated[str | None, setting_option(BE_GATE_SPACING_US)] = None,
    be_sm_percent: Annotated[str | None, setting_option(BE_SM_PERCENT)] = None,
    hp_context: Annotated[str | None, setting_option(HP_CONTEXT)] = None,
    loop_reads: Annotated[str | None, setting_option(LOOP_READS)] = None,
    be_when_daemon_gone: Annotated[
        str,
        typer.Option(
            "--be-when-daemon-gone",
            help="What a BE client does when this daemon falls silent (killed, stopped, "
            "stalled for a second): open (runs ungated from then on, as without orion) or hold "
            "(holds its new launches until the daemon beats again, at most "
            "--daemon-gone-hold-s, then runs ungated). HP never holds.",
        ),
    ] = "open",
    daemon_gone_hold_s: Annotated[
        float | None,
        typer.Option(
            "--daemon-gone-hold-s",
            help="Under --be-when-daemon-gone hold, how long BE holds for a silent daemon "
            "(default: 30 s).",
            show_default=False,
        ),
    ] = None,
    foreground: Annotated[
        bool,
        typer.Option("--foreground", help="Stay in the foreground (systemd, containers)."),
    ] = False,
    state_dir: StateDirOpt = None,
    metrics_port: MetricsPortOpt = None,
    metrics_listen: MetricsListenOpt = None,
    metrics_allow_remote: MetricsAllowRemoteOpt = False,
) -> None:
    """Start the orion daemon of one GPU: programs join it with `orion run`.

    The daemon holds the GPU's scheduler state, opens best-effort work onto the GPU when it
    fits beside the high-priority client, starts an MPS daemon under `--sharing mps`, and keeps
    live records in its state folder. One daemon per GPU. It detaches and prints where it is,
    unless `--foreground`. Stop it with `orion down` or SIGTERM: gates open, clients run on.
    """
    # gpu_settings checks every option (control.check_options) before it looks at the GPU
    from orion_daemon import metrics

    sharing = parsed(SHARING, sharing)
    be_gate = parsed(BE_GATE, be_gate) or DEFAULT_BE_GATE
    be_graph_gate = parsed(BE_GRAPH_GATE, be_graph_gate)
    hp_quiet = parsed(HP_QUIET_US, hp_quiet_us)
    be_gate_spacing = parsed(BE_GATE_SPACING_US, be_gate_spacing_us)
    be_sm = parsed(BE_SM_PERCENT, be_sm_percent)
    hp_context = parsed(HP_CONTEXT, hp_context)
    loop_reads = parsed(LOOP_READS, loop_reads)

    # Before the GPU is read or anything starts: a bad address or a port in use, in one line.
    address = metrics.address_from_options(
        metrics_port, metrics_listen, allow_remote=metrics_allow_remote
    )
    if address is not None:
        metrics.check_free(address)
    from orion_daemon.client import daemon_command
    from orion_daemon.control import check_hold_bound, gpu_settings, hold_bound, start_detached
    from orion_daemon.ownership import private_folder

    check_hold_bound(be_when_daemon_gone, daemon_gone_hold_s)

    folder = daemon_folder(gpu, state_dir)
    settings = gpu_settings(
        gpu,
        folder,
        policy=policy,
        sharing=sharing,
        shares=shares,
        queue_limit_us=queue_limit_us,
        be_gate=be_gate,
        be_graph_gate=be_graph_gate,
        hp_quiet_us=hp_quiet,
        be_gate_spacing_us=be_gate_spacing,
        be_sm_percent=be_sm,
        hp_context=hp_context,
        loop_reads=loop_reads,
        metrics_listen=None if address is None else str(address),
        metrics_allow_remote=metrics_allow_remote,
        be_when_daemon_gone=be_when_daemon_gone,
        **hold_bound(daemon_gone_hold_s),
    )
    if foreground:
        # A fresh process: this one initialised the CUDA driver reading the GPU's facts.
        sys.stdout.flush()
        arguments = daemon_command(settings)
        private_folder(folder)  # 0700 and this user's, or refused in one line
        os.chdir(folder)  # as start_detached: no source checkout shadows the installed orion
        os.execv(arguments[0], arguments)
    record = start_detached(settings)
    fell_back = sharing is None and settings.sharing != default_sharing(policy)
    console.print(
        f"orion daemon for GPU {gpu} ({settings.gpu_name}) running: pid {record['pid']}, policy "
        f"{policy}, sharing {settings.sharing}"
        + (" (nvidia-cuda-mps-control not found: its default, mps, needs it)" if fell_back else "")
        + f"\nstate folder {folder} (log: {record['log']})\n"
        f"join it with `orion run --gpu {gpu} --hp|--be -- COMMAND`"
        + ("" if address is None else f"\nmetrics at {address.url}"),
        highlight=False,
        soft_wrap=True,
    )


@handle_errors
def down_command(gpu: GpuOpt = 0, state_dir: StateDirOpt = None) -> None:
    """Stop the orion daemon of one GPU.

    Every best-effort gate opens and every client runs on, ungated; the MPS daemon (if any)
    stops once its clients are gone. Waits until the daemon has exited.
    """
    from orion_daemon.control import stop

    folder = daemon_folder(gpu, state_dir)
    record = stop(gpu, folder)
    clients = len(record.get("clients", []))
    console.print(
        f"orion daemon for GPU {gpu} stopped (pid {record['pid']}); "
        f"{clients} client{'s' if clients != 1 else ''} run on ungated",
        highlight=False,
        soft_wrap=True,
    )
