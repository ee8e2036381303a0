"""`orion status`: what a GPU's daemon and its clients are doing now."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from orion_cli._common import console, handle_errors, interactive
from orion_cli._daemon_options import GpuOpt, StateDirOpt, daemon_folder
from orion_cli.console import print_json, print_table, shown


def _size(value: int | None) -> str:
    from orion_common.sizes import format_size

    return "-" if value is None else format_size(int(value))


def _held(client: dict[str, Any]) -> str:
    if client["role"] == "hp":
        return _request_shape(client)
    reasons = ", ".join(f"{reason} {count}" for reason, count in client["held_by"].items())
    held = f"{client['held_launches']} ({client['held_ms']:.0f} ms)"
    gates = f"{client['gate_waits']} gate waits"
    return "; ".join(part for part in (held, gates, reasons, _graphs(client)) if part)


def _graphs(client: dict[str, Any]) -> str:
    """How its CUDA graphs were held: split, gated inside, or (with why) run whole."""
    parts = []
    if client.get("graphs_segmented"):
        parts.append(
            f"{client['graphs_segmented']} graphs split into {client['graph_segments']} segments"
        )
    if client.get("graphs_gated"):
        parts.append(f"{client['graphs_gated']} graphs gated inside")
    if client.get("graphs_ungated"):
        why = client.get("ungated_graph_why") or "see its log"
        parts.append(f"{client['graphs_ungated']} graphs whole ({shown(why)})")
    return "; ".join(parts)


def _request_shape(client: dict[str, Any]) -> str:
    """An HP's work per request (what suits its --hp-context); BE's held launches instead."""
    shape = client.get("request_shape")
    if shape is None:
        return "-"
    return (
        f"{shape['requests']:,} requests: {shape['gpu_ms_per_request']:.2f} ms of GPU work, "
        f"{shape['launches_per_request']:.1f} launches ({shape['graphs_per_request']:.1f} "
        "graphs) each"
    )


def _sources(client: dict[str, Any]) -> str:
    shares = client["profile_sources"]["launch_share"]
    if shares["offline"] is None:
        return "-"
    return " / ".join(f"{shares[source]:.0%}" for source in ("offline", "online", "unknown"))


def _requests(client: dict[str, Any]) -> str:
    """An HP's requests timed whole against its requests alone ("" when none were timed)."""
    mean = client.get("request_slowdown")
    if mean is None:
        return "requests: none alone yet to compare with" if client.get("requests_timed") else ""
    over_alone = client.get("request_p99_over_alone")
    return f"requests {mean:.2f}x" + (
        f" (p99 {over_alone:.2f}x of alone)" if over_alone is not None else ""
    )


def _slowdown(client: dict[str, Any]) -> str:
    """As the program feels it where measured (whole requests, launches waiting for the GPU
    included), else GPU time."""
    felt = client.get("felt_slowdown")
    if felt is None:
        gpu_time = "-" if client["interference"] is None else f"{client['interference']:.2f}x"
        return _requests(client) or gpu_time
    p99 = client.get("felt_p99")
    start = client.get("start_felt_slowdown")
    launches = (
        f"{felt:.2f}x felt"
        + (f", p99 >= {p99:g}x" if p99 and p99 > 1 else "")
        + (f"; request starts {start:.2f}x" if start is not None else "")
    )
    return "; ".join(part for part in (_requests(client), launches) if part)


def status_table(status: dict[str, Any]) -> Table:
    """One row per client, HP first."""
    title = (
        f"GPU {status['gpu']} ({shown(status.get('gpu_name') or 'unknown')}): policy "
        f"{status['policy']}, "
        f"sharing {status['sharing']}, daemon pid {status['pid']}, up {status['uptime_s']:.0f} s, "
        f"{status['free_slots']} free slots"
    )
    if status.get("context_bytes"):  # counted in each client's memory below
        title += f", a CUDA context takes {_size(status['context_bytes'])} (in each memory)"
    if status.get("hp_quiet_us"):
        title += f", BE waits out a {status['hp_quiet_us']:g}-us quiet spell of the HP"
    if status.get("be_gate_spacing_us"):
        title += f", BE gate waits at least {status['be_gate_spacing_us']:g} us of BE work apart"
    if status.get("be_sm_percent"):
        title += f", BE kernels on {status['be_sm_percent']:g}% of the SMs beside an HP in MPS"
    if status.get("hp_context") == "own":
        title += ", the HP in a context of its own (outside MPS) unless it chooses mps"
    if status.get("owner"):
        title += f"; started by the `orion colocate` run in {shown(status['owner'])}"
    if status.get("records"):  # the daemon schedules on; its records are incomplete
        title += f"; records degraded: {status['records']}"
    loop = status.get("latency_control")
    if loop:
        title += f"; latency loop: {loop['state']}"
        if loop.get("queue_limit_us") is not None:
            held = ", long BE work held" if loop.get("hold_long_be") else ""
            title += f" (BE bound {loop['queue_limit_us']:g} us{held})"
    table = Table(title=title, title_justify="left")
    for column in ("client", "pid", "role", "launches/s", "GPU share", "memory", "limit",
                   "BE held (why) / HP requests", "launches offline/online/unknown", "slowdown",
                   "command"):  # fmt: skip
        table.add_column(column, overflow="fold")
    for client in status["clients"]:
        rate = client["launches_per_s"]
        table.add_row(
            shown(client["name"]),
            str(client["pid"]),
            _role(client),
            "-" if rate is None else f"{rate:,.0f}",
            f"{client['gpu_share']:.2f}",
            _size(client["memory_used_bytes"]),
            _size(client["memory_limit_bytes"]),
            _held(client),
            _sources(client),
            _slowdown(client),
            shown(" ".join(client["command"])),
        )
    return table


def _role(client: dict[str, Any]) -> str:
    """The client's role; for an HP under MPS where it runs (its `--hp-context`), for a BE
    client on an SM share the share."""
    context = client.get("hp_context")
    if client.get("sm_percent") is not None:
        return f"{client['role']} ({client['sm_percent']:g}% of SMs)"
    if context is None:
        return client["role"]
    return f"{client['role']} ({'own context' if context == 'own' else 'in MPS'})"


def _save_learned(learned: dict[str, Any], path: Path) -> None:
    from postprocess.learned_profile import learned_profile
    from postprocess.profile_format import write_profile

    profile = learned_profile(
        learned["entries"],
        client=learned["client"],
        gpu_name=learned.get("gpu_name"),
        sm_count=int(learned["sm_count"]),
        command=learned.get("command"),
    )
    kernels = profile.kernels
    graphs = kernels["graph"].dropna().nunique()
    written = write_profile(profile, path)
    console.print(
        f"wrote {shown(written)}: {int(kernels['graph'].isna().sum())} kernels and {graphs} "
        f"graphs learned by {shown(repr(learned['client']))} (source: online)"
    )


@handle_errors
def status_command(
    gpu: GpuOpt = 0,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Refresh in place every second (Ctrl-C ends).")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object, for scripts and monitoring.")
    ] = False,
    save_profile: Annotated[
        tuple[str, Path] | None,
        typer.Option(
            "--save-profile",
            metavar="CLIENT PATH",
            help="Write what CLIENT learned online (its kernels' durations and SM needs) to "
            "PATH as a profile file (source: online), for 'orion run --profile PATH' next time.",
            show_default=False,
        ),
    ] = None,
    state_dir: StateDirOpt = None,
) -> None:
    """Show a GPU's orion daemon and its clients: per client its pid, role, kernel launches per
    second, share of GPU time, memory and limit, best-effort launches held and why, which share
    of its launches was gated by its offline profile, by kernels learned online or as unknown
    work, and its slowdown: how much longer its timed launches ran than alone."""
    from orion_common.errors import UsageError
    from orion_common.output_paths import check_output_file
    from orion_daemon import client as daemon_client
    from orion_daemon import state

    # Input first: options that contradict, and where a profile goes, before the daemon.
    shows = [flag for flag, given in (("--json", as_json), ("--watch", watch)) if given]
    if save_profile is not None and shows:
        raise UsageError(f"--save-profile writes a file and shows nothing: not with {shows[0]}")
    if len(shows) == 2:
        raise UsageError("--json prints one object, --watch refreshes a table: give one")
    if save_profile is not None:
        check_output_file(save_profile[1], "profile file")
    folder = daemon_folder(gpu, state_dir)
    if save_profile is not None:
        client, path = save_profile
        record = state.require_daemon(gpu, folder)
        learned = daemon_client.learned(record, client)
        _save_learned(learned, path)
        return

    def fetch() -> dict[str, Any]:
        record = state.require_daemon(gpu, folder)
        return daemon_client.status(record)

    if as_json:
        print_json(fetch())
        return
    if not watch:
        print_table(status_table(fetch()))
        return
    if not interactive():
        while True:
            print_table(status_table(fetch()))
            time.sleep(1.0)
    from rich.live import Live

    with Live(status_table(fetch()), console=console, auto_refresh=False) as live:
        while True:
            time.sleep(1.0)
            live.update(status_table(fetch()), refresh=True)
