"""The daemon's Prometheus metrics, on the stand-in driver (CPU only).

What an operator relies on: `/metrics` parses as Prometheus's text format and says what
`orion status --json` says at the same moment (one source of truth); a client that leaves takes
its series with it; a bad address or a port in use is one line before anything starts; and a
scraper that hangs holds up nothing (clients go on being gated, `orion status` answers).
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import GIB, RunningDaemon, daemon_command
from native_harness import wait_for
from prometheus_client.parser import text_string_to_metric_families
from test_daemon_stalls import be_launching, still_gating
from typer.testing import CliRunner

from orion_cli.app import app
from orion_daemon import metrics, state
from orion_daemon.status import HELD_REASONS

GENEROUS_S = 30.0  # a bound for a busy CI machine, not a measure of speed
MIB = 1 << 20
# Five launches and an allocation, then nothing for minutes: counters that hold still.
IDLE_AFTER = "func k 1000 repeat 5 launch k 4 128 0 end sync 0 alloc mem {bytes} hold"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@contextlib.contextmanager
def listening() -> Iterator[int]:
    """A port of this machine that something listens on for the block (a port in use)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind((metrics.LOOPBACK, 0))
        taken.listen(1)
        yield taken.getsockname()[1]


def free_port() -> int:
    with listening() as port:
        return port


def scrape(port: int) -> str:
    url = f"http://{metrics.LOOPBACK}:{port}/metrics"
    with urllib.request.urlopen(url, timeout=GENEROUS_S) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return response.read().decode()


def parse(text: str) -> Samples:
    """Every sample of the exposition, by name and labels (the parser refuses bad text)."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset({"gpu": "0", **labels}.items())))


def client_names(samples: Samples) -> set[str]:
    return {dict(labels)["client"] for _name, labels in samples if "client" in dict(labels)}


@pytest.fixture
def metrics_daemon(tmp_path) -> Iterator[tuple[RunningDaemon, int]]:
    port = free_port()
    daemon = RunningDaemon(tmp_path / "gpu0", policy="reef",
                           metrics_listen=f"{metrics.LOOPBACK}:{port}")  # fmt: skip
    yield daemon, port
    daemon.close()


@pytest.fixture
def two_clients(harness, metrics_daemon, tmp_path) -> Iterator[RunningDaemon]:
    """An HP and a BE client (a memory limit each) that launched and allocated, then idle."""
    daemon, _port = metrics_daemon
    programs = [
        harness.start(IDLE_AFTER.format(bytes=3 * MIB),
                      env=daemon.join("hp", "inference", memory_limit=GIB)),
        harness.start(IDLE_AFTER.format(bytes=5 * MIB),
                      env=daemon.join("be", "trainer", memory_limit=2 * GIB)),
    ]  # fmt: skip

    def settled() -> bool:
        clients = daemon.status()["clients"]
        return len(clients) == 2 and all(
            c["state"] == "attached" and c["launches"] == 5 and c["memory_used_bytes"] > 0
            for c in clients
        )

    try:
        wait_for(settled, timeout_s=GENEROUS_S, what="both clients' launches and allocations")
        yield daemon
    finally:
        for program in programs:
            if program.poll() is None:
                program.kill()
            program.wait(timeout=GENEROUS_S)


def held_still(status: dict[str, Any]) -> dict[str, Any]:
    """A status without what moves by itself (time, and the requests that read it)."""
    return {k: v for k, v in status.items()
            if k not in ("uptime_s", "heartbeat_age_s", "requests", "record_writes",
                         "records_pending")}  # fmt: skip


def status_and_scrape(daemon: RunningDaemon, port: int) -> tuple[dict[str, Any], Samples]:
    """`orion status --json` and a scrape at the same moment: a scrape between two statuses
    that agree (everything that does not move by itself)."""
    caught: list[tuple[dict[str, Any], Samples]] = []

    def agreed() -> bool:
        before = daemon.status()
        samples = parse(scrape(port))
        after = daemon.status()
        caught[:] = [(after, samples)]
        return held_still(before) == held_still(after)

    wait_for(agreed, timeout_s=GENEROUS_S, what="two statuses around a scrape to agree")
    return caught[0]


def test_two_clients_metrics_parse_and_say_what_status_says(two_clients, metrics_daemon):
    daemon, port = metrics_daemon
    shown = CliRunner().invoke(app, ["status", "--json", "--state-dir", str(daemon.folder.parent)])
    assert shown.exit_code == 0, shown.output
    status, samples = status_and_scrape(daemon, port)
    assert client_names(samples) == {"inference", "trainer"}

    info = value(samples, "orion_daemon_info", gpu_name="", policy="reef", sharing="timeslice",
                 pid=str(daemon.process.pid))  # fmt: skip
    assert info == 1
    assert value(samples, "orion_daemon_free_slots") == status["free_slots"]
    assert value(samples, "orion_daemon_context_bytes") == status["context_bytes"]
    assert value(samples, "orion_client_events_total", event="join") == 2
    assert value(samples, "orion_daemon_record_write_failures_total") == 0
    assert value(samples, "orion_daemon_records_degraded") == 0
    assert value(samples, "orion_daemon_uptime_seconds") > 0
    assert value(samples, "orion_daemon_heartbeat_age_seconds") is not None
    assert value(samples, "orion_daemon_request_duration_seconds_count", op="status") >= 1
    for client in status["clients"]:
        who = {"client": client["name"], "role": client["role"]}
        pid_slot = {"pid": str(client["pid"]), "slot": str(client["slot"]), "state": "attached"}
        assert value(samples, "orion_client_info", **who, **pid_slot) == 1
        for name, key in (
            ("orion_client_launches_total", "launches"),
            ("orion_client_unknown_launches_total", "unknown_launches"),
            ("orion_client_held_launches_total", "held_launches"),
            ("orion_client_gate_waits_total", "gate_waits"),
            ("orion_client_gpu_share_ratio", "gpu_share"),
            ("orion_client_memory_used_bytes", "memory_used_bytes"),
            ("orion_client_memory_peak_bytes", "memory_peak_bytes"),
            ("orion_client_memory_limit_bytes", "memory_limit_bytes"),
            ("orion_client_allocations_refused_total", "allocations_refused"),
            ("orion_client_slowdown_ratio", "interference"),
            ("orion_client_felt_slowdown_ratio", "felt_slowdown"),
            ("orion_client_felt_p99_ratio", "felt_p99"),
            ("orion_client_felt_p99_over_alone_ratio", "felt_p99_over_alone"),
        ):
            assert value(samples, name, **who) == client[key], (name, client)
        assert value(samples, "orion_client_held_seconds_total", **who) == client["held_ms"] / 1e3
        assert value(samples, "orion_client_unknown_kernels", **who) == len(
            client["unknown_kernels"]
        )
        for reason in HELD_REASONS:
            held = value(samples, "orion_client_held_launches_by_reason_total", **who,
                         reason=reason)  # fmt: skip
            assert held == client["held_by"].get(reason, 0)
    by_name = {c["name"]: c for c in status["clients"]}
    assert by_name["inference"]["memory_used_bytes"] == 3 * MIB  # what the programs allocated
    assert by_name["trainer"]["memory_limit_bytes"] == 2 * GIB


def test_a_client_that_leaves_takes_its_series_with_it(two_clients, metrics_daemon):
    daemon, port = metrics_daemon
    trainer = next(c for c in daemon.status()["clients"] if c["name"] == "trainer")
    subprocess.run(["kill", "-KILL", str(trainer["pid"])], check=True)
    wait_for(lambda: daemon.names() == ["inference"], timeout_s=GENEROUS_S,
             what="the daemon to find the trainer gone")  # fmt: skip
    samples = parse(scrape(port))
    assert client_names(samples) == {"inference"}
    assert value(samples, "orion_client_events_total", event="dead") == 1
    assert value(samples, "orion_daemon_free_slots") == daemon.status()["free_slots"]


class SilentScraper:
    """A connection to the metrics port that sends nothing, or a whole request, and never reads
    an answer; it learns when the server hangs up on it."""

    def __init__(self, port: int, request: bytes) -> None:
        self.connection = socket.create_connection((metrics.LOOPBACK, port), timeout=GENEROUS_S)
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        if request:
            self.connection.sendall(request)

    def hung_up(self) -> bool:
        """Whether the server closed it (reads what was sent first: only to see the end)."""
        try:
            while chunk := self.connection.recv(65536, socket.MSG_DONTWAIT):
                del chunk
        except BlockingIOError:
            return False
        except OSError:
            return True
        return True


def test_scrapers_that_hang_hold_up_no_heartbeat_and_no_request(harness, metrics_daemon,
                                                                tmp_path):  # fmt: skip
    daemon, port = metrics_daemon
    with be_launching(harness, daemon, tmp_path) as be:
        # More hanging scrapers than the server serves at once: one that asks and never reads,
        # silent ones that hold their threads until the deadline, and refused ones, hung up on.
        scrapers = [SilentScraper(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")]
        scrapers += [SilentScraper(port, b"") for _ in range(metrics.MAX_SCRAPES + 2)]
        try:
            # While they hang: BE goes on waiting at its gates (it never saw the heartbeat stop)
            # and every status request is answered.
            still_gating(daemon, be)
            for _ in range(3):
                assert daemon.status()["heartbeat_age_s"] is not None
            wait_for(lambda: all(s.hung_up() for s in scrapers), timeout_s=GENEROUS_S * 2,
                     what="the metrics server to hang up on every hanging scraper")  # fmt: skip
        finally:
            for scraper in scrapers:
                scraper.connection.close()
    # And the next scrape is served.
    assert client_names(parse(scrape(port))) <= {"trainer"}


def test_orion_up_passes_its_metrics_address_to_the_daemon(tmp_path, monkeypatch):
    """`orion up --metrics-port` as a user types it (a stand-in GPU): the detached daemon serves
    there and says where; `orion down` stops serving."""
    monkeypatch.setenv("ORION_STAND_IN_GPUS", json.dumps([{"uuid": "GPU-0", "name": "stand-in"}]))
    port = free_port()
    runner = CliRunner()
    started = runner.invoke(app, ["up", "--metrics-port", str(port), "--state-dir", str(tmp_path)])
    try:
        assert started.exit_code == 0, started.output
        assert f"metrics at http://127.0.0.1:{port}/metrics" in started.output
        samples = parse(scrape(port))
        assert value(samples, "orion_daemon_free_slots") == 16
        record = json.loads((tmp_path / "gpu0" / state.RECORD).read_text())
        assert record["settings"]["metrics_listen"] == f"127.0.0.1:{port}"
    finally:
        stopped = runner.invoke(app, ["down", "--state-dir", str(tmp_path)])
    assert stopped.exit_code == 0, stopped.output
    with pytest.raises(OSError):
        scrape(port)


# -- bad input: one line, nothing started --------------------------------------------------


def _refused(arguments: list[str], tmp_path: Path, status: int = 2) -> str:
    """The one line `orion up` refuses ``arguments`` with: status 2 for a value typed wrongly,
    1 for an address this host cannot serve on."""
    result = CliRunner().invoke(app, ["up", "--state-dir", str(tmp_path), *arguments])
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), result.output
    assert result.exit_code == status, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert list(tmp_path.iterdir()) == []  # no state folder: nothing started
    return lines[0]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--metrics-port", "0"], "metrics port must be 1-65535 (got 0)"),
        (["--metrics-port", "65536"], "metrics port must be 1-65535 (got 65536)"),
        (["--metrics-listen", "0.0.0.0:9400"], "0.0.0.0:9400 is not a loopback address"),
        (["--metrics-listen", "[::]:9400"], "[::]:9400 is not a loopback address"),
        (["--metrics-listen", "metrics.example:9400"], "is not a loopback address"),
        (["--metrics-listen", "127.0.0.1:web"], "metrics port must be a number"),
        (["--metrics-listen", ":9400"], "has no host"),
        (["--metrics-port", "9400", "--metrics-listen", "127.0.0.1:9400"], "not both"),
        (["--metrics-allow-remote"], "needs --metrics-listen"),
    ],
)  # fmt: skip
def test_a_bad_metrics_address_is_one_line_before_anything_starts(arguments, message, tmp_path):
    # a value typed wrongly: a usage error, status 2 as every command's (issue 38)
    assert message in _refused(arguments, tmp_path)


def test_an_address_this_host_cannot_serve_is_one_line_before_anything_starts(tmp_path):
    arguments = ["--metrics-listen", "192.0.2.7:9400", "--metrics-allow-remote"]
    line = _refused(arguments, tmp_path, status=1)
    assert "cannot serve metrics on 192.0.2.7:9400: Cannot assign requested address" in line


def test_a_metrics_port_in_use_is_one_line_before_anything_starts(tmp_path):
    with listening() as port:
        line = _refused(["--metrics-port", str(port)], tmp_path, status=1)
    assert f"cannot serve metrics on 127.0.0.1:{port}: Address already in use" in line


def test_the_daemon_itself_refuses_a_port_in_use_before_it_starts(tmp_path):
    """`orion up --foreground` checks first, but the port may be taken between the check and the
    daemon's start: the daemon then stops at once, having made nothing."""
    folder = tmp_path / "gpu0"
    with listening() as port:
        ended = subprocess.run(
            daemon_command(folder, memory_bytes=GIB,
                           metrics_listen=f"{metrics.LOOPBACK}:{port}"),
            capture_output=True, text=True, timeout=GENEROUS_S, cwd=tmp_path, check=False,
        )  # fmt: skip
    assert ended.returncode == 1, ended.stdout + ended.stderr
    assert ended.stderr.strip().splitlines() == [
        f"error: cannot serve metrics on 127.0.0.1:{port}: Address already in use"
    ]
    assert "running" not in ended.stdout
    assert not (folder / state.RECORD).exists() and not (folder / state.SOCKET).exists()


@pytest.mark.parametrize(
    ("text", "allow_remote", "spelled"),
    [
        ("9400", False, "127.0.0.1:9400"),
        ("localhost:9400", False, "localhost:9400"),
        ("[::1]:9400", False, "[::1]:9400"),
        ("127.0.0.2:1", False, "127.0.0.2:1"),
        ("0.0.0.0:65535", True, "0.0.0.0:65535"),
        ("[::]:9400", True, "[::]:9400"),
    ],
)
def test_good_metrics_addresses_are_kept_in_one_spelling(text, allow_remote, spelled):
    address = metrics.parse_address(text, allow_remote=allow_remote)
    assert str(address) == spelled
    assert metrics.parse_address(str(address), allow_remote=allow_remote) == address
    assert address.url == f"http://{spelled}/metrics"
