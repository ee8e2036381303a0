"""The client's measurement loop, in-process with a stand-in workload (a step is a sleep):
latency counts from arrival, overload shows up as queueing and unfinished requests, and the
protocol messages say what happened."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from colocation.client import Client, Commands, Events
from colocation.protocol import ClientSpec, LineReader, Message, send
from orion_common.runclock import RunClock, monotonic_ns
from reporting.rundata import INFERENCE_COLUMNS, TRAINING_COLUMNS, read_table


class SleepWorkload:
    """Steps take ``step_s``; what the client sees of a real workload, minus the framework."""

    def __init__(self, step_s: float, batch_size: int = 1) -> None:
        self.device = SimpleNamespace(type="cpu")
        self.samples_per_step = batch_size
        self.step_s = step_s
        self.steps = 0

    def warmup(self, steps: int) -> None:
        for _ in range(steps):
            self.step()

    def step(self) -> None:
        self.steps += 1
        time.sleep(self.step_s)

    def synchronize(self) -> None:
        pass


def run_client(
    tmp_path: Path,
    workload: SleepWorkload,
    *,
    window_s: float | None,
    **spec_fields: Any,
) -> tuple[list[Message], Path]:
    """Drive one client through ready, start, finished (or a stop after the window), stop."""
    fields: dict[str, Any] = {
        "name": "c",
        "role": "hp",
        "workload": "bert",
        "mode": "infer",
        "batch_size": 1,
        "dtype": "fp32",
        "device": "cpu",
        "table": "clients/c.csv",
        "clock_origin_ns": monotonic_ns(),
        "seed": 7,
        "warmup_steps": 1,
    }
    fields.update(spec_fields)
    spec = ClientSpec(**fields)
    command_read, command_write = os.pipe()
    event_read, event_write = os.pipe()
    commands = Commands(command_read)
    client = Client(spec, tmp_path, commands, Events(event_write, commands))
    client._build = lambda: workload  # type: ignore[method-assign]
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(client.run()))
    thread.start()
    reader = LineReader(event_read)
    messages: list[Message] = []
    clock = RunClock(spec.clock_origin_ns)
    deadline = time.monotonic() + 30
    while not any(m["type"] == "ready" for m in messages):
        messages += reader.wait(0.1)
        assert time.monotonic() < deadline
    start = clock.now() + 0.05
    end = start + window_s if window_s is not None else None
    send(
        command_write,
        {"type": "start", "window_start_s": start, "window_end_s": end, "window_s": window_s},
    )
    stop_at = time.monotonic() + (window_s or 0) + 0.5 if spec.mode == "train" else None
    while not any(m["type"] == "finished" for m in messages):
        messages += reader.wait(0.05)
        if stop_at is not None and time.monotonic() >= stop_at:
            send(command_write, {"type": "stop"})
            stop_at = None
        assert time.monotonic() < deadline
    send(command_write, {"type": "stop"})
    thread.join(10)
    assert result == [0]
    os.close(command_write)
    os.close(event_write)
    os.close(event_read)
    messages[-1]["window"] = (start, end)
    return messages, tmp_path / "clients" / "c.csv"


def test_open_loop_requests_are_served_on_schedule(tmp_path: Path) -> None:
    messages, table = run_client(
        tmp_path,
        SleepWorkload(0.005),
        window_s=0.3,
        arrivals={"kind": "uniform", "rate_per_s": 50.0},
    )
    start, _ = messages[-1]["window"]
    rows = read_table(table, INFERENCE_COLUMNS, notes=[])
    assert rows["request"].tolist() == list(range(16))  # arrivals k / 50 s for k = 0..15
    assert rows["arrival_s"].tolist() == pytest.approx([start + k / 50 for k in range(16)])
    assert (rows["start_s"] >= rows["arrival_s"]).all()
    assert rows["latency_ms"].tolist() == pytest.approx(
        ((rows["end_s"] - rows["arrival_s"]) * 1000).tolist()
    )
    # Each request is served whole (at least the 5 ms its step sleeps) by one server in arrival
    # order, and a request that had to wait for earlier ones counts its wait: whatever the
    # machine's load, no bound on how long the wait was (a busy CI machine stalls the thread).
    assert (rows["end_s"] - rows["start_s"] >= 0.005 - 1e-6).all()
    assert (rows["start_s"].iloc[1:].to_numpy() >= rows["end_s"].iloc[:-1].to_numpy()).all()
    finished = messages[-1]
    assert finished["type"] == "finished" and finished["done"] == 16
    assert finished["unfinished"] == 0
    latencies = [x for m in messages if m["type"] == "progress" for x in m["latencies_ms"]]
    assert len(latencies) == 16
    # step() sleeps 5 ms: 5 ms of wall time to enqueue, almost none of the thread's CPU time
    assert (rows["enqueue_ms"] >= 4.5).all()
    assert (rows["enqueue_cpu_ms"] < rows["enqueue_ms"] / 2).all()


def test_overload_queues_and_leaves_unfinished_requests(tmp_path: Path) -> None:
    messages, table = run_client(
        tmp_path,
        SleepWorkload(0.03),
        window_s=0.3,
        drain_s=0.1,
        arrivals={"kind": "uniform", "rate_per_s": 100.0},
    )
    rows = read_table(table, INFERENCE_COLUMNS, notes=[])
    assert len(rows) == 31  # every arrival inside the window has a row
    served = rows.dropna(subset=["end_s"])
    unfinished = rows[rows["end_s"].isna()]
    assert len(unfinished) == messages[-1]["unfinished"] > 0
    assert unfinished["latency_ms"].isna().all()
    # queueing counts: each request waits for the ones before it
    assert served["latency_ms"].is_monotonic_increasing
    assert served["latency_ms"].iloc[-1] > 100


def test_closed_loop_serves_a_count_of_requests(tmp_path: Path) -> None:
    messages, table = run_client(
        tmp_path,
        SleepWorkload(0.005),
        window_s=None,
        requests=5,
        arrivals={"kind": "closed", "think_ms": 10.0},
    )
    rows = read_table(table, INFERENCE_COLUMNS, notes=[])
    assert rows["request"].tolist() == [0, 1, 2, 3, 4]
    gaps = rows["arrival_s"].iloc[1:].to_numpy() - rows["end_s"].iloc[:-1].to_numpy()
    assert gaps == pytest.approx([0.01] * 4)
    assert messages[-1]["last_end_s"] == pytest.approx(rows["end_s"].iloc[-1])


def test_training_runs_back_to_back_until_stopped(tmp_path: Path) -> None:
    messages, table = run_client(
        tmp_path, SleepWorkload(0.01, batch_size=8), window_s=0.2, mode="train", role="be"
    )
    start, _ = messages[-1]["window"]
    rows = read_table(table, TRAINING_COLUMNS, notes=[])
    assert len(rows) > 10
    assert rows["start_s"].iloc[0] >= start
    assert (rows["samples"] == 8).all()
    assert rows["duration_ms"].tolist() == pytest.approx(
        ((rows["end_s"] - rows["start_s"]) * 1000).tolist()
    )
    assert messages[-1]["done"] == len(rows)
