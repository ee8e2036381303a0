"""Figures as PNG files. Each function takes the DataFrames that ``metrics``/``series`` return,
writes one PNG and returns its path; none computes a figure of merit itself.

Figures are drawn on matplotlib's Agg canvas directly, never through pyplot, so no display is
needed, no global backend is switched under a caller (a notebook keeps its own), and no figure
is left open in pyplot's registry. ``order`` arguments fix the
run order (and so each run's colour) across figures; by default runs appear as in the data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import NullLocator

from orion_common.output_paths import make_folder, write_with
from reporting.metrics import BE_FRACTION_MIN, HP_P99_SLOWDOWN_MAX
from reporting.tail import PARTS

DPI = 110
# A scatter of more points than this is thinned with a fixed stride: the eye cannot tell, the
# PNG stays small, and the result does not depend on a random seed.
MAX_POINTS_PER_RUN = 40_000
CLASS_COLOURS = {"compute": "tab:blue", "memory": "tab:orange", "unknown": "tab:gray"}


def run_colours(labels: Sequence[str]) -> dict[str, str]:
    """A stable colour per run label (tab10, then tab20 beyond ten runs)."""
    cmap = matplotlib.colormaps["tab10" if len(labels) <= 10 else "tab20"]
    return {label: to_hex(cmap(i % cmap.N)) for i, label in enumerate(labels)}


# Percentile levels labelled on the latency CDF's tail axis: (1 - F, label).
_TAIL_TICKS = [(0.5, "p50"), (0.1, "p90"), (0.01, "p99"), (0.001, "p99.9"), (0.0001, "p99.99")]


def plot_latency_cdf(
    latencies: pd.DataFrame,
    out_path: str | Path,
    *,
    order: Sequence[str] | None = None,
    target_ms: float | None = None,
    title: str = "HP request latency CDF (requests in the measurement window)",
) -> Path:
    """Latency distribution of HP requests, one line per run; the p99 of each run is marked.

    ``latencies`` is ``series.request_latencies(...)``; only ``in_window`` rows are drawn.
    ``target_ms`` draws the latency target (1.05 × dedicated p99) as a vertical line.
    The y axis is the tail fraction 1 - F on a log scale, turned upside down and labelled with
    percentiles (p50, p90, p99, p99.9), so the tail gets as much room as the median:
    see :func:`latency_cdf_figure`.
    """
    fig = latency_cdf_figure(latencies, order=order, target_ms=target_ms, title=title)
    return _save(fig, out_path)


def latency_cdf_figure(
    latencies: pd.DataFrame,
    *,
    order: Sequence[str] | None = None,
    target_ms: float | None = None,
    title: str = "HP request latency CDF (requests in the measurement window)",
) -> Figure:
    """The figure :func:`plot_latency_cdf` saves. Each run is drawn as the fraction of its
    requests at least as slow as x (1 - F, from 1 down to 1/n) on a log axis."""
    data = latencies[latencies["in_window"].astype(bool)] if len(latencies) else latencies
    labels = _order(data, order)
    colours = run_colours(labels)
    fig, ax = _figure((8, 5))
    drawn = False
    all_values = []
    smallest_tail = 1e-3
    for label in labels:
        values = np.sort(data.loc[data["run"] == label, "latency_ms"].to_numpy(dtype=float))
        values = values[~np.isnan(values)]
        if not values.size:
            continue
        all_values.append(values)
        # Fraction of requests at least as slow as each value: 1, ..., 1/n (never 0, so it has a
        # place on the log axis).
        tail = (values.size - np.arange(values.size)) / values.size
        smallest_tail = min(smallest_tail, 1 / values.size)
        p99 = float(np.percentile(values, 99))
        ax.step(
            values,
            tail,
            where="post",
            color=colours[label],
            label=f"{label} (n={values.size}, p99 {p99:.2f} ms)",
        )
        ax.plot([p99], [0.01], "o", color=colours[label], markersize=4)
        drawn = True
    if target_ms is not None and np.isfinite(target_ms):
        ax.axvline(target_ms, color="black", linestyle="--", linewidth=1, label="p99 target")
    ax.set_yscale("log")
    if drawn:
        merged = np.concatenate(all_values)
        low, high = float(merged.min()), float(merged.max())
        if low > 0 and high / low > 20:
            ax.set_xscale("log")
        ax.axhline(0.01, color="grey", linestyle=":", linewidth=0.8)
        ax.legend(loc="upper left", fontsize=8)
    else:
        _no_data(ax, "no completed HP requests in any measurement window")
    # Upside down (1 at the bottom) so the curve rises like a CDF, the tail at the top.
    ax.set_ylim(1.0, smallest_tail * 0.7)
    ticks = [(level, name) for level, name in _TAIL_TICKS if level >= smallest_tail * 0.7]
    ax.set_yticks([1.0] + [level for level, _ in ticks], ["p0"] + [name for _, name in ticks])
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("request latency (ms, from arrival)")
    ax.set_ylabel("percentile of requests (log scale of 1 - F)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    return fig


def plot_tradeoff(
    headline: pd.DataFrame,
    out_path: str | Path,
    *,
    order: Sequence[str] | None = None,
    hp_slowdown_max: float = HP_P99_SLOWDOWN_MAX,
    be_fraction_min: float = BE_FRACTION_MIN,
    title: str | None = None,
) -> Path:
    """HP tail latency against BE throughput, one labelled point per run (a policy or a knob
    setting of one), with error bars where ``headline`` has intervals.

    With a dedicated baseline (``headline`` has slowdowns) the axes are ratios to it and the
    target region (slowdown ≤ 1.05, fraction ≥ 0.90) is shaded; without one, absolute HP p99
    (ms) and summed BE throughput are drawn and nothing is shaded. Error bars come from the
    ``<column>_ci_lo``/``<column>_ci_hi`` columns (``hp_p99_ci_lo_ms``/``hp_p99_ci_hi_ms`` for
    the absolute p99) when present and finite: a point whose bars reach into the target region
    cannot be said to miss it, nor one whose bars leave it to meet it.
    """
    given_title = title
    relative = len(headline) > 0 and bool(headline["is_baseline"].astype(bool).any())
    if relative:
        x_col, y_col = "hp_p99_slowdown", "be_throughput_fraction"
        x_ci = ("hp_p99_slowdown_ci_lo", "hp_p99_slowdown_ci_hi")
        y_ci = ("be_throughput_fraction_ci_lo", "be_throughput_fraction_ci_hi")
        x_label = "HP p99 latency slowdown (× dedicated p99)"
        y_label = "BE throughput (fraction of dedicated, mean over BE clients)"
    else:
        x_col, y_col = "hp_p99_ms", "be_throughput_per_s"
        x_ci, y_ci = ("hp_p99_ci_lo_ms", "hp_p99_ci_hi_ms"), ("", "")
        x_label = "HP p99 latency (ms)"
        y_label = "BE throughput (iterations or requests / s, summed over BE clients)"
    labels = _order(headline, order)
    colours = run_colours(labels)
    fig, ax = _figure((8, 5.5))
    xs, ys = [], []
    for label in labels:
        row = headline[headline["run"] == label].iloc[0]
        x, y = float(row[x_col]), float(row[y_col])
        if not (np.isfinite(x) and np.isfinite(y)):
            continue
        xs.append(x)
        ys.append(y)
        x_err, y_err = _error_bar(row, x, x_ci), _error_bar(row, y, y_ci)
        if x_err is not None or y_err is not None:
            ax.errorbar(
                [x],
                [y],
                xerr=x_err,
                yerr=y_err,
                fmt="none",
                ecolor=colours[label],
                elinewidth=1.2,
                capsize=3,
                zorder=2,
            )
            if x_err is not None:
                xs += [x - float(x_err[0][0]), x + float(x_err[1][0])]
            if y_err is not None:
                ys += [y - float(y_err[0][0]), y + float(y_err[1][0])]
        marker = "*" if bool(row["is_baseline"]) else "o"
        ax.scatter(
            [x],
            [y],
            s=120 if marker == "*" else 60,
            marker=marker,
            color=colours[label],
            zorder=3,
            label=label if label == row["policy"] else f"{label} ({row['policy']})",
        )
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(6, 6), fontsize=9)
    handles, legend_labels = ax.get_legend_handles_labels()
    if relative:
        x_low = min([0.95, *xs]) * 0.97
        x_high = max([hp_slowdown_max * 1.15, *xs]) * 1.05
        y_high = max([1.1, *ys]) * 1.05
        ax.set_xlim(x_low, x_high)
        ax.set_ylim(0, y_high)
        ax.add_patch(
            Rectangle(
                (x_low, be_fraction_min),
                hp_slowdown_max - x_low,
                y_high - be_fraction_min,
                color="tab:green",
                alpha=0.15,
                zorder=1,
            )
        )
        handles.append(Patch(color="tab:green", alpha=0.15))
        legend_labels.append(
            f"target: HP p99 ≤ {hp_slowdown_max:g}×, BE ≥ {be_fraction_min:.0%} of dedicated"
        )
        title = "Trade-off against dedicated: HP tail latency vs BE throughput"
    else:
        if xs:
            ax.set_xlim(0, max(xs) * 1.2)
            ax.set_ylim(0, max(ys) * 1.2 if max(ys) > 0 else 1)
        title = "Trade-off (no dedicated run: absolute values, target not shown)"
    if not xs:
        _no_data(ax, "no run has both an HP p99 and a BE throughput")
    if handles:
        ax.legend(handles, legend_labels, loc="best", fontsize=8)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title(title if given_title is None else given_title)
    ax.grid(True, alpha=0.3)
    return _save(fig, out_path)


def _error_bar(row: pd.Series, value: float, columns: tuple[str, str]) -> list[list[float]] | None:
    """matplotlib's asymmetric error ``[[below], [above]]`` from an interval's two columns; None
    when the row has no finite interval. A bound on the wrong side of the point (an interval
    computed on a slightly different estimate) is drawn as zero length."""
    lo_col, hi_col = columns
    if lo_col not in row.index or hi_col not in row.index:
        return None
    try:
        lo, hi = float(row[lo_col]), float(row[hi_col])
    except (TypeError, ValueError):
        return None
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return None
    return [[max(0.0, value - lo)], [max(0.0, hi - value)]]


def plot_latency_over_time(
    latencies: pd.DataFrame,
    out_path: str | Path,
    *,
    order: Sequence[str] | None = None,
    title: str = "HP request latency over time",
) -> Path:
    """HP latency against arrival time, one panel per run (each on its own run clock).

    Requests inside the measurement window are coloured; warm-up and drain requests are grey.
    """
    labels = _order(latencies, order)
    colours = run_colours(labels)
    panels = max(1, len(labels))
    fig = _new_figure((9, 1.2 + 2.2 * panels))
    axes = fig.subplots(panels, 1, sharey=True, squeeze=False)
    values = latencies["latency_ms"].to_numpy(dtype=float) if len(latencies) else np.array([])
    values = values[np.isfinite(values)]
    log_y = values.size > 0 and values.min() > 0 and values.max() / values.min() > 20
    for ax, label in zip(axes[:, 0], labels, strict=False):
        rows = latencies[latencies["run"] == label]
        inside = rows["in_window"].astype(bool)
        for subset, colour, name in (
            (rows[~inside], "lightgrey", "outside window"),
            (rows[inside], colours[label], "in window"),
        ):
            subset = _thin(subset)
            if len(subset):
                ax.scatter(
                    subset["arrival_s"],
                    subset["latency_ms"],
                    s=3,
                    color=colour,
                    label=name,
                    rasterized=True,
                )
        if len(rows[inside]):
            ax.axvspan(
                rows.loc[inside, "arrival_s"].min(),
                rows.loc[inside, "arrival_s"].max(),
                color=colours[label],
                alpha=0.06,
            )
        if log_y:
            ax.set_yscale("log")
        ax.set_title(label, fontsize=10, loc="left")
        ax.set_ylabel("latency (ms)")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper right", fontsize=7, markerscale=3)
    if not labels:
        _no_data(axes[0, 0], "no completed HP requests")
        axes[0, 0].set_ylabel("latency (ms)")
    axes[-1, 0].set_xlabel("request arrival time (s on the run clock)")
    fig.suptitle(title)
    return _save(fig, out_path)


def plot_gpu_utilisation(
    gpu: pd.DataFrame,
    out_path: str | Path,
    *,
    order: Sequence[str] | None = None,
    title: str = "GPU utilisation over time (NVML samples)",
) -> Path:
    """SM and memory utilisation (%) and memory used (GiB, right axis), one panel per run, and
    the SM clock (MHz, a second right axis) where ``gpu`` has it (gpu.csv files from before
    clocks were sampled do not).

    The shaded span is the run's measurement window. The clock is drawn because a GPU that
    throttles or boosts differently in one run explains latency differences no policy made.
    """
    labels = _order(gpu, order)
    panels = max(1, len(labels))
    fig = _new_figure((9, 1.2 + 2.2 * panels))
    axes = fig.subplots(panels, 1, squeeze=False)
    for ax, label in zip(axes[:, 0], labels, strict=False):
        rows = gpu[gpu["run"] == label].sort_values("time_s")
        ax.plot(rows["time_s"], rows["sm_util_pct"], color="tab:blue", label="SM util (%)")
        ax.plot(rows["time_s"], rows["mem_util_pct"], color="tab:orange", label="memory util (%)")
        inside = rows[rows["in_window"].astype(bool)]
        if len(inside):
            ax.axvspan(
                inside["time_s"].min(),
                inside["time_s"].max(),
                color="tab:green",
                alpha=0.08,
                label="measurement window",
            )
        ax.set_ylim(0, 105)
        ax.set_ylabel("utilisation (%)")
        twin = ax.twinx()
        twin.plot(
            rows["time_s"],
            rows["mem_used_mib"] / 1024.0,
            color="tab:purple",
            linestyle="--",
            linewidth=1,
            label="memory used (GiB)",
        )
        twin.set_ylabel("memory used (GiB)")
        twin.set_ylim(bottom=0)
        handles, names = ax.get_legend_handles_labels()
        twin_handles, twin_names = twin.get_legend_handles_labels()
        handles, names = handles + twin_handles, names + twin_names
        clock = rows["sm_clock_mhz"] if "sm_clock_mhz" in rows.columns else None
        if clock is not None and clock.notna().any():
            clock_axis = ax.twinx()
            clock_axis.spines["right"].set_position(("axes", 1.1))
            clock_axis.plot(
                rows["time_s"],
                clock,
                color="tab:red",
                linestyle=":",
                linewidth=1.2,
                label="SM clock (MHz)",
            )
            clock_axis.set_ylabel("SM clock (MHz)")
            clock_axis.set_ylim(0, float(clock.max()) * 1.1)
            clock_handles, clock_names = clock_axis.get_legend_handles_labels()
            handles, names = handles + clock_handles, names + clock_names
        ax.legend(handles, names, loc="lower right", fontsize=7)
        ax.set_title(label, fontsize=10, loc="left")
        ax.grid(True, alpha=0.3)
    if not labels:
        _no_data(axes[0, 0], "no GPU samples (gpu.csv) in any run")
        axes[0, 0].set_ylabel("utilisation (%)")
    axes[-1, 0].set_xlabel("time (s on the run clock)")
    fig.suptitle(title)
    return _save(fig, out_path)


PanelLines = Callable[[Axes, pd.DataFrame, str, str], None]
"""Draws one client's rows (time order) of a per-client series into a panel, in its colour."""


def plot_memory_over_time(
    series: pd.DataFrame,
    out_path: str | Path,
    *,
    order: Sequence[str] | None = None,
    title: str = "GPU memory per client (orion's count) and its limit",
) -> Path:
    """GPU memory in use (GiB) per client against run time, one panel per run, each client's
    limit in force as a dashed step line in its colour, and a marker where the limit was
    changed while the run was live (at the new limit; at the old one, as ``x``, where the limit
    was removed).

    ``series`` is ``memory.memory_series(...)``: samples and limit changes in time order.
    """
    return _client_panels(
        series,
        out_path,
        order=order,
        title=title,
        ylabel="memory (GiB)",
        empty="no memory samples (memory.csv) in any run",
        lines=_memory_lines,
    )


def plot_gpu_shares_over_time(
    series: pd.DataFrame,
    out_path: str | Path,
    *,
    order: Sequence[str] | None = None,
    title: str = "GPU time share per client (gate keeper) and its min/max",
) -> Path:
    """Each client's share of GPU time over the quota window against run time, one panel per
    run, with its ``max_util`` (dashed) and ``min_util`` (dotted) in force as step lines in its
    colour where they are not the defaults (1 and 0: no cap, no promise), and a marker where one
    was changed while the run was live (``v`` a new cap, ``^`` a new promise, at the new value).

    ``series`` is ``shares.shares_series(...)``: samples and share changes in time order.
    """
    return _client_panels(
        series,
        out_path,
        order=order,
        title=title,
        ylabel="share of GPU time",
        empty="no share samples (shares.csv) in any run",
        lines=_share_lines,
        top=1.05,
    )


def _client_panels(
    series: pd.DataFrame,
    out_path: str | Path,
    *,
    order: Sequence[str] | None,
    title: str,
    ylabel: str,
    empty: str,
    lines: PanelLines,
    top: float | None = None,
) -> Path:
    """A per-client series (``run``, ``client``, ``time_s`` columns) as one panel per run, each
    client's ``lines`` in its own colour. A client keeps its colour in every panel, so one
    client is easy to follow across runs."""
    labels = _order(series, order)
    clients = list(dict.fromkeys(series["client"].astype(str))) if len(series) else []
    colours = run_colours(clients)
    panels = max(1, len(labels))
    fig = _new_figure((9, 1.2 + 2.4 * panels))
    axes = fig.subplots(panels, 1, squeeze=False)
    for ax, label in zip(axes[:, 0], labels, strict=False):
        mine = series[series["run"] == label]
        for client in dict.fromkeys(mine["client"].astype(str)):
            lines(ax, mine[mine["client"].astype(str) == client], client, colours[client])
        ax.set_ylim(0, top)
        ax.set_title(label, fontsize=10, loc="left")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    if not labels:
        _no_data(axes[0, 0], empty)
        axes[0, 0].set_ylabel(ylabel)
    axes[-1, 0].set_xlabel("time (s on the run clock)")
    fig.suptitle(title)
    return _save(fig, out_path)


def _memory_lines(ax: Axes, rows: pd.DataFrame, client: str, colour: str) -> None:
    """One client's lines of :func:`plot_memory_over_time`: in use, limit, limit changes."""
    used = rows[rows["used_gib"].notna()]
    ax.plot(used["time_s"], used["used_gib"], color=colour, linewidth=1.2, label=f"{client} in use")
    _step_line(ax, rows["time_s"], rows["limit_gib"], colour, "--", f"{client} limit")
    changes = rows[rows["limit_change"].astype(bool)]
    removed = changes["limit_gib"].isna()
    kept = changes[~removed]
    _markers(ax, kept["time_s"], kept["limit_gib"], colour, "D", f"{client} limit changed")
    gone = changes[removed]
    _markers(ax, gone["time_s"], gone["old_limit_gib"], colour, "x", f"{client} limit removed")


def _share_lines(ax: Axes, rows: pd.DataFrame, client: str, colour: str) -> None:
    """One client's lines of :func:`plot_gpu_shares_over_time`: its share, its cap and promise
    where they are not the defaults, and their changes."""
    measured = rows[rows["gpu_share"].notna()]
    label = f"{client} share"
    ax.plot(measured["time_s"], measured["gpu_share"], color=colour, linewidth=1.2, label=label)
    for name, default, style, marker in (
        ("max_util", 1.0, "--", "v"),
        ("min_util", 0.0, ":", "^"),
    ):
        values = rows[name].where(rows[name] != default)
        _step_line(ax, rows["time_s"], values, colour, style, f"{client} {name}")
        changes = rows[rows["changed_field"] == name]
        _markers(ax, changes["time_s"], changes[name], colour, marker, f"{client} {name} changed")


def _step_line(
    ax: Axes, times: pd.Series, values: pd.Series, colour: str, style: str, label: str
) -> None:
    """A value in force from each time on (a limit, a share), as a step line; NaN values (none
    in force, or the default) leave a gap. Nothing is drawn when no value is known."""
    if not values.notna().any():
        return
    ax.step(times, values, where="post", color=colour, linestyle=style, linewidth=1, label=label)


def _markers(
    ax: Axes, times: pd.Series, values: pd.Series, colour: str, marker: str, label: str
) -> None:
    """A marker per change (at its time and value); nothing when there was none."""
    if not len(times):
        return
    size = 7 if marker == "x" else 5
    ax.plot(times, values, marker, color=colour, markersize=size, label=label)


def plot_kernel_timeline(
    kernels: pd.DataFrame,
    out_path: str | Path,
    *,
    title: str | None = None,
) -> Path:
    """Kernel launches of a trace slice: one row per client (HP on top), a bar per kernel from
    its launch for its profiled duration, coloured by kernel class.

    ``kernels`` is ``series.kernel_slice(...)``. Bars shorter than 0.05 % of the shown span are
    widened to that so single kernels stay visible.
    """
    fig_height = 1.6 + 0.6 * max(1, kernels["client"].nunique() if len(kernels) else 1)
    fig, ax = _figure((10, fig_height))
    if len(kernels):
        origin = float(kernels["launch_s"].min())
        start_ms = (kernels["launch_s"].to_numpy(dtype=float) - origin) * 1000.0
        duration = np.nan_to_num(kernels["duration_ms"].to_numpy(dtype=float), nan=0.0)
        span = float(np.max(start_ms + duration)) if len(start_ms) else 1.0
        min_width = max(span, 1e-6) * 0.0005
        frame = kernels.assign(start_ms=start_ms, width_ms=np.maximum(duration, min_width))
        clients = _client_rows(frame)
        for row, client in enumerate(clients):
            mine = frame[frame["client"] == client]
            for kernel_class, group in mine.groupby("kernel_class", sort=True):
                colour = CLASS_COLOURS.get(str(kernel_class), "tab:red")
                ax.broken_barh(
                    list(zip(group["start_ms"], group["width_ms"], strict=True)),
                    (row - 0.4, 0.8),
                    facecolors=colour,
                    linewidth=0,
                )
        ax.set_yticks(range(len(clients)))
        ax.set_yticklabels(clients)
        ax.set_ylim(len(clients) - 0.5, -0.5)
        ax.set_xlim(0, span * 1.01)
        present = sorted(frame["kernel_class"].astype(str).unique())
        ax.legend(
            [Patch(color=CLASS_COLOURS.get(c, "tab:red")) for c in present],
            [f"{c} kernels" for c in present],
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            fontsize=8,
        )
        ax.set_xlabel(f"time since first launch shown (ms; slice starts at {origin:.3f} s)")
    else:
        _no_data(ax, "no kernel trace")
        ax.set_xlabel("time (ms)")
    ax.set_ylabel("client")
    ax.set_title(title or f"Kernel timeline ({len(kernels)} launches)")
    ax.grid(True, axis="x", alpha=0.3)
    return _save(fig, out_path)


def plot_tail_attribution(
    summary: pd.DataFrame,
    out_path: str | Path,
    *,
    order: Sequence[str] | None = None,
    title: str = "Where the HP tail comes from (requests above p95)",
) -> Path:
    """One stacked bar per traced run (and HP client): the mean latency of its slow requests
    split into BE work outstanding at arrival, BE kernels admitted beside, HP queueing and the
    rest, so the cause to fix is the tallest block.

    ``summary`` is ``tail.tail_summary(...)``; rows without slow requests are left out. The
    parts add up to the bar's height by construction (``tail.split_latency``)."""
    data = summary
    if len(data):
        data = data[data["traced"].astype(bool) & data["mean_latency_ms"].notna()]
    labels = _order(data, order)
    clients_per_run = data.groupby("run")["client"].nunique() if len(data) else pd.Series(dtype=int)
    bars: list[tuple[str, pd.Series]] = []
    for label in labels:
        for _, row in data[data["run"] == label].iterrows():
            several = int(clients_per_run.get(label, 1)) > 1
            bars.append((f"{label}\n{row['client']}" if several else label, row))
    fig, ax = _figure((max(8.0, 1.2 * len(bars) + 4.5), 5))
    if not bars:
        _no_data(ax, "no traced run has requests above p95")
        return _save(fig, out_path)
    colours = {
        "be_outstanding_ms": "tab:red",
        "context_switch_ms": "tab:purple",
        "be_admitted_ms": "tab:orange",
        "queue_ms": "tab:blue",
        "rest_ms": "tab:gray",
    }
    x = np.arange(len(bars))
    bottom = np.zeros(len(bars))
    for column, legend in PARTS:
        heights = np.array([float(row[column]) for _, row in bars])
        heights = np.nan_to_num(heights)
        ax.bar(x, heights, bottom=bottom, color=colours[column], label=legend, width=0.6)
        bottom += heights
    for i, (_, row) in enumerate(bars):
        ax.annotate(
            f"{float(row['mean_latency_ms']):.1f} ms, n={int(row['slow_requests'])}",
            (x[i], bottom[i]),
            textcoords="offset points",
            xytext=(0, 3),
            ha="center",
            fontsize=8,
        )
    ax.set_xticks(x, [name for name, _ in bars])
    ax.set_xlim(-0.75, len(bars) - 0.25)
    ax.set_ylabel("mean latency of the slow requests (ms)")
    ax.set_ylim(0, float(bottom.max()) * 1.15 if bottom.max() > 0 else 1.0)
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, out_path)


def _client_rows(kernels: pd.DataFrame) -> list[str]:
    """HP clients first, then the rest, each group by name."""
    pairs = kernels[["client", "role"]].drop_duplicates().astype(str)
    ordered = sorted(
        zip(pairs["role"], pairs["client"], strict=True), key=lambda p: (p[0] != "hp", p[1])
    )
    return list(dict.fromkeys(client for _, client in ordered))


def _order(frame: pd.DataFrame, order: Sequence[str] | None) -> list[str]:
    present = list(dict.fromkeys(frame["run"].astype(str))) if len(frame) else []
    if order is None:
        return present
    return [label for label in order if label in present]


def _thin(rows: pd.DataFrame) -> pd.DataFrame:
    if len(rows) <= MAX_POINTS_PER_RUN:
        return rows
    stride = int(np.ceil(len(rows) / MAX_POINTS_PER_RUN))
    return rows.iloc[::stride]


def _no_data(ax: Axes, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="grey")


def _save(fig: Figure, out_path: str | Path) -> Path:
    path = Path(out_path)
    make_folder(path.parent)
    fig.tight_layout()
    return write_with(path, lambda target: fig.savefig(target, dpi=DPI))


def _new_figure(size: tuple[float, float]) -> Figure:
    fig = Figure(figsize=size)
    FigureCanvasAgg(fig)
    return fig


def _figure(size: tuple[float, float]) -> tuple[Figure, Axes]:
    fig = _new_figure(size)
    return fig, fig.subplots()
