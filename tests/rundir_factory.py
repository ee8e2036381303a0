"""Build small, deterministic ``orion-run`` directories for the reporting tests.

The numbers are chosen so the expected figures can be worked out by hand in the tests:
HP latencies are ``scale × (1, 2, ..., 100)`` ms, 100 requests 0.1 s apart inside a 10 s window,
plus requests outside the window and one that never completed, which must all be ignored.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orion_common import run_format

# Headers from the one declaration of the format. Client tables and gpu.csv are written as
# before their optional columns were added (the reader must keep reading such files);
# ``write_run(gpu_clocks=True)`` adds gpu.csv's clock columns.
INFERENCE_HEADER = list(run_format.required_names(run_format.INFERENCE_COLUMNS))
TRAINING_HEADER = list(run_format.required_names(run_format.TRAINING_COLUMNS))
GPU_HEADER = list(run_format.required_names(run_format.GPU_COLUMNS))
GPU_CLOCK_HEADER = [c.name for c in run_format.GPU_COLUMNS if c.optional]
"""Added to gpu.csv later; ``write_run(gpu_clocks=False)`` writes a file from before."""
TRACE_HEADER = list(run_format.required_names(run_format.TRACE_COLUMNS))
TRACE_REASON_HEADER = list(run_format.column_names(run_format.TRACE_COLUMNS))
"""trace.csv as new runs write it, with ``reason``; used when a trace row has a ``reason``."""
MEMORY_HEADER = list(run_format.column_names(run_format.MEMORY_COLUMNS))
LIMITS_HEADER = list(run_format.column_names(run_format.LIMIT_COLUMNS))
SHARES_HEADER = list(run_format.column_names(run_format.SHARE_COLUMNS))
GIB = 2**30

ENVIRONMENT = {
    "gpu_name": "NVIDIA H200",
    "sm_count": 132,
    "driver_version": "580.159.04",
    "cuda_version": "13.0",
    "torch_version": "2.11.0+cu130",
    "cudnn_version": "9.19.0",
    "hostname": "testhost",
}


@dataclass
class ClientSpec:
    name: str
    role: str
    mode: str
    rows: list[dict[str, Any]]
    window: tuple[float, float] = (10.0, 20.0)
    workload: str = "resnet50"
    batch_size: int = 4
    dtype: str = "fp32"
    exit_code: int | None = 0
    error: str | None = None
    arrivals: dict[str, Any] | None = field(default=None)


def inference_rows(
    latencies_ms: Sequence[float],
    *,
    first_arrival_s: float = 10.05,
    spacing_s: float = 0.1,
    first_request: int = 0,
) -> list[dict[str, Any]]:
    """Requests arriving every ``spacing_s`` from ``first_arrival_s``; NaN latency = unfinished."""
    rows = []
    for i, latency in enumerate(latencies_ms):
        arrival = first_arrival_s + i * spacing_s
        done = not math.isnan(latency)
        rows.append(
            {
                "request": first_request + i,
                "arrival_s": arrival,
                "start_s": arrival,
                "end_s": arrival + latency / 1000.0 if done else math.nan,
                "latency_ms": latency,
            }
        )
    return rows


def training_rows(
    count: int,
    *,
    first_end_s: float,
    spacing_s: float = 0.5,
    duration_ms: float = 500.0,
    samples: int = 32,
    first_iteration: int = 0,
) -> list[dict[str, Any]]:
    """``count`` iterations ending every ``spacing_s`` from ``first_end_s``."""
    rows = []
    for i in range(count):
        end = first_end_s + i * spacing_s
        rows.append(
            {
                "iteration": first_iteration + i,
                "start_s": end - duration_ms / 1000.0,
                "end_s": end,
                "duration_ms": duration_ms,
                "samples": samples,
            }
        )
    return rows


def hp_rows(scale: float = 1.0, window: tuple[float, float] = (10.0, 20.0)) -> list[dict]:
    """100 in-window requests with latencies scale × 1..100 ms, plus three that must not count:
    one before the window, one after it (both slow, 500 and 700 ms), one never completed."""
    start, end = window
    rows = inference_rows([500.0], first_arrival_s=start - 1.0, first_request=0)
    rows += inference_rows(
        [scale * k for k in range(1, 101)], first_arrival_s=start + 0.05, first_request=1
    )
    rows += inference_rows([math.nan], first_arrival_s=end - 0.01, first_request=101)
    rows += inference_rows([700.0], first_arrival_s=end + 0.5, first_request=102)
    return rows


def be_train_rows(in_window: int, window: tuple[float, float]) -> list[dict]:
    """``in_window`` iterations ending inside the window, plus one just before and one after."""
    start, end = window
    rows = training_rows(1, first_end_s=start - 0.25)
    rows += training_rows(in_window, first_end_s=start + 0.25, first_iteration=1)
    rows += training_rows(1, first_end_s=end + 0.25, first_iteration=in_window + 1)
    return rows


def write_csv(path: Path, header: Sequence[str], rows: Sequence[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [",".join(header)]
    for row in rows:
        lines.append(",".join(_field(row.get(column)) for column in header))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_run(
    root: Path,
    name: str,
    *,
    policy: str,
    clients: Sequence[ClientSpec],
    status: str = "complete",
    measure: tuple[float, float] = (10.0, 20.0),
    gpu: bool = True,
    gpu_clocks: bool = True,
    scheduler: dict[str, Any] | None = None,
    trace: Sequence[dict[str, Any]] | None = None,
    config: dict[str, Any] | None = None,
    table_rows: bool = True,
    memory: Sequence[dict[str, Any]] | None = None,
    limits: Sequence[dict[str, Any]] | None = None,
    shares: Sequence[dict[str, Any]] | None = None,
) -> Path:
    """One run directory; ``config`` adds to (``run``: merges into) the recorded jobs config,
    e.g. ``{"run": {"thresholds": {"queue_limit_us": 200}}, "clients": [...]}``.

    ``table_rows`` records each table's rows in run.json as the runner does at close;
    ``False`` writes a run from before row counts were recorded. ``memory`` / ``limits`` /
    ``shares`` write memory.csv / limits.csv / shares.csv (``[]``: the header alone); ``None``
    leaves the file out, as in runs from before them (and, for shares.csv, runs without
    GPU-time shares). Like the runner, run.json records no row count for any of them."""
    run_dir = root / name
    run_dir.mkdir(parents=True)
    entries = []
    rows: dict[str, int] = {}
    for spec in clients:
        header = INFERENCE_HEADER if spec.mode == "infer" else TRAINING_HEADER
        table = run_format.client_table(spec.name)
        write_csv(run_dir / table, header, spec.rows)
        rows[table] = len(spec.rows)
        (run_dir / "logs").mkdir(exist_ok=True)
        (run_dir / "logs" / f"{spec.name}.log").write_text("ok\n", encoding="utf-8")
        entries.append(
            {
                "name": spec.name,
                "role": spec.role,
                "workload": spec.workload,
                "mode": spec.mode,
                "batch_size": spec.batch_size,
                "dtype": spec.dtype,
                "arrivals": spec.arrivals,
                "exit_code": spec.exit_code,
                "error": spec.error,
                "table": table,
                "log": f"logs/{spec.name}.log",
                "window_start_s": spec.window[0],
                "window_end_s": spec.window[1],
            }
        )
    if gpu:
        samples = []
        for i in range(int(measure[1] * 2) + 20):
            t = i * 0.5
            samples.append(
                {
                    "time_s": t,
                    "sm_util_pct": 50 + 40 * math.sin(t / 3.0),
                    "mem_util_pct": 30 + 20 * math.cos(t / 5.0),
                    "mem_used_mib": 20000 + 100 * i,
                    # Boost clock 1980 MHz, dipping to 1755 MHz for t in [12, 14) s.
                    "sm_clock_mhz": 1755 if 12.0 <= t < 14.0 else 1980,
                    "mem_clock_mhz": 2619,
                }
            )
        header = GPU_HEADER + GPU_CLOCK_HEADER if gpu_clocks else GPU_HEADER
        write_csv(run_dir / run_format.GPU_TABLE, header, samples)
        rows[run_format.GPU_TABLE] = len(samples)
    if scheduler is not None:
        (run_dir / "scheduler.json").write_text(json.dumps(scheduler), encoding="utf-8")
    if trace is not None:
        reasons = any("reason" in row for row in trace)
        header = TRACE_REASON_HEADER if reasons else TRACE_HEADER
        write_csv(run_dir / run_format.TRACE_TABLE, header, trace)
        rows[run_format.TRACE_TABLE] = len(trace)
    if memory is not None:
        write_csv(run_dir / run_format.MEMORY_TABLE, MEMORY_HEADER, memory)
    if limits is not None:
        write_csv(run_dir / run_format.LIMITS_TABLE, LIMITS_HEADER, limits)
    if shares is not None:
        write_csv(run_dir / run_format.SHARES_TABLE, SHARES_HEADER, shares)
    recorded: dict[str, Any] = {
        "run": {"policy": policy, "duration_s": 30, "seed": 1, "trace": bool(trace)}
    }
    for key, value in (config or {}).items():
        recorded[key] = {**recorded[key], **value} if key == "run" else value
    meta = {
        "format": run_format.FORMAT,
        "version": run_format.VERSION,
        "status": status,
        "policy": policy,
        "orion_version": "0.1.0",
        "git_revision": "abc123",
        "config": recorded,
        "environment": ENVIRONMENT,
        "started_utc": "2026-11-21T12:00:00+00:00",
        "ended_utc": "2026-11-21T12:01:00+00:00",
        "measure_start_s": measure[0],
        "measure_end_s": measure[1],
        "clients": entries,
    }
    if table_rows:
        meta[run_format.TABLE_ROWS_KEY] = rows
    (run_dir / run_format.RUN_JSON).write_text(json.dumps(meta, indent=2), encoding="utf-8")
    return run_dir


def memory_rows(
    client: str,
    times_s: Sequence[float],
    used_gib: Sequence[float],
    limit_gib: float | Sequence[float | None] | None = None,
    refused: int | Sequence[int] = 0,
) -> list[dict[str, Any]]:
    """memory.csv rows of one client, sizes given in GiB and written in bytes as the runner
    does; a limit of ``None`` is an empty cell (no limit). A single limit or refused count holds
    for every sample."""
    count = len(times_s)
    limits = list(limit_gib) if isinstance(limit_gib, Sequence) else [limit_gib] * count
    refusals = list(refused) if isinstance(refused, Sequence) else [refused] * count
    return [
        {
            "time_s": time_s,
            "client": client,
            "used_bytes": int(used * GIB),
            "limit_bytes": None if limit is None else int(limit * GIB),
            "refused": count_refused,
        }
        for time_s, used, limit, count_refused in zip(
            times_s, used_gib, limits, refusals, strict=True
        )
    ]


def limit_change(
    client: str, time_s: float, old_gib: float | None, new_gib: float | None, in_use_gib: float
) -> dict[str, Any]:
    """A limits.csv row as ``orion quota`` appends it (sizes in GiB, written in bytes)."""
    return {
        "time_s": time_s,
        "utc": "2026-11-21T12:00:30+00:00",
        "client": client,
        "field": "memory_limit",
        "old": None if old_gib is None else int(old_gib * GIB),
        "new": None if new_gib is None else int(new_gib * GIB),
        "in_use": int(in_use_gib * GIB),
    }


def share_rows(
    client: str,
    times_s: Sequence[float],
    gpu_share: Sequence[float],
    min_util: float | Sequence[float] = 0.0,
    max_util: float | Sequence[float] = 1.0,
) -> list[dict[str, Any]]:
    """shares.csv rows of one client; a single min_util or max_util holds for every sample."""
    count = len(times_s)
    lows = list(min_util) if isinstance(min_util, Sequence) else [min_util] * count
    highs = list(max_util) if isinstance(max_util, Sequence) else [max_util] * count
    return [
        {"time_s": t, "client": client, "gpu_share": share, "min_util": low, "max_util": high}
        for t, share, low, high in zip(times_s, gpu_share, lows, highs, strict=True)
    ]


def share_change(client: str, time_s: float, field: str, old: float, new: float) -> dict:
    """A limits.csv row as ``orion quota --min-util/--max-util`` appends it (in_use 0)."""
    return {
        "time_s": time_s,
        "utc": "2026-11-21T12:00:30+00:00",
        "client": client,
        "field": field,
        "old": old,
        "new": new,
        "in_use": 0,
    }


def kernel_trace(clients: Sequence[str], *, per_client: int, start_s: float) -> list[dict]:
    """Interleaved launches, 50 µs apart per client, alternating compute and memory kernels."""
    rows = []
    for c, client in enumerate(clients):
        for seq in range(per_client):
            launch = start_s + seq * 50e-6 + c * 20e-6
            rows.append(
                {
                    "client": client,
                    "seq": seq,
                    "kernel_name": f"kernel_{seq % 7}",
                    "kernel_class": "compute" if seq % 2 == 0 else "memory",
                    "sm_needed": 132 if seq % 3 == 0 else 40,
                    "duration_ns": 20_000 + 1000 * (seq % 5),
                    "enqueue_s": launch - (5e-6 if client == "be" else 0.0),
                    "launch_s": launch,
                }
            )
    return rows


def standard_runs(root: Path) -> dict[str, Path]:
    """Three runs of the same HP (resnet50 infer bs4) + BE (resnet50 train bs32) pair:

    - ``dedicated``: HP alone in [10, 20] s, then BE alone in [30, 40] s;
      HP latencies 1..100 ms, BE 20 iterations in its window (2.0 it/s, 64 samples/s).
    - ``orion``: both in [10, 20]; HP latencies 1.02 × 1..100, BE 19 iterations -> target met.
    - ``timeslice``: HP latencies 2 × 1..100, BE 10 iterations -> target missed.
    """
    arrivals = {"kind": "poisson", "rate_per_s": 10}

    def pair(scale: float, be_iterations: int, be_window: tuple[float, float]) -> list:
        return [
            ClientSpec("hp", "hp", "infer", hp_rows(scale), arrivals=arrivals),
            ClientSpec(
                "be",
                "be",
                "train",
                be_train_rows(be_iterations, be_window),
                window=be_window,
                batch_size=32,
            ),
        ]

    scheduler = {
        "clients": {
            "hp": {
                "launches": 22900,
                "unknown_launches": 0,
                "blocked_launches": 0,
                "blocked_ms": 0,
            },
            "be": {
                "launches": 13820,
                "unknown_launches": 3,
                "blocked_launches": 5000,
                "blocked_ms": 812.5,
            },
        }
    }
    return {
        "dedicated": write_run(
            root,
            "run-dedicated",
            policy="dedicated",
            clients=pair(1.0, 20, (30.0, 40.0)),
            measure=(10.0, 40.0),
        ),
        "orion": write_run(
            root,
            "run-orion",
            policy="orion",
            clients=pair(1.02, 19, (10.0, 20.0)),
            scheduler=scheduler,
            trace=kernel_trace(["hp", "be"], per_client=3000, start_s=10.0),
        ),
        "timeslice": write_run(
            root, "run-timeslice", policy="timeslice", clients=pair(2.0, 10, (10.0, 20.0))
        ),
    }


def write_cell(
    root: Path,
    name: str,
    policy: str,
    *,
    hp_scale: float = 1.0,
    be_iteration_ms: float = 500.0,
    config: dict | None = None,
    hp: list | None = None,
    with_be: bool = True,
) -> Path:
    """One run: HP latencies hp_scale x 1..100 ms (p99 = 99.01 x hp_scale), BE iterations of
    ``be_iteration_ms`` back to back, 32 samples each (throughput 32 / iteration seconds); no
    BE client without ``with_be``."""
    dedicated = policy == "dedicated"
    be_window = (30.0, 40.0) if dedicated else (10.0, 20.0)
    count = int(10_000 / be_iteration_ms) - 1
    be = training_rows(
        count,
        first_end_s=be_window[0] + be_iteration_ms / 1000.0,
        spacing_s=be_iteration_ms / 1000.0,
        duration_ms=be_iteration_ms,
    )
    clients = [
        ClientSpec(
            "hp",
            "hp",
            "infer",
            hp if hp is not None else hp_rows(hp_scale),
            arrivals={"kind": "poisson", "rate_per_s": 10},
        ),
        ClientSpec("be", "be", "train", be, window=be_window, batch_size=32),
    ]
    if not with_be:
        clients = clients[:1]
    measure = (10.0, 40.0) if dedicated else (10.0, 20.0)
    return write_run(root, name, policy=policy, clients=clients, measure=measure, config=config)


SHARE_50 = {"clients": [{"name": "hp"}, {"name": "be", "sm_percent": 50}]}
QUEUE_200 = {"run": {"thresholds": {"queue_limit_us": 200}}}
"""Knob settings as a run records them: the BE client at half the SMs (mps-share), and a
200 us BE queue bound."""


def _field(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return str(value)
