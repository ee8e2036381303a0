"""The daemon is spoken to in one way (CPU only, no daemon process).

Every request goes through :func:`orion_daemon.client.call`: what it sends for each named
request, what it returns, how a refusal and a silent daemon read; a daemon process is handed
its settings as one serialized model that comes back equal; and no other module opens the
daemon's socket itself.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orion_common.errors import OrionError
from orion_daemon import client as daemon_client
from orion_daemon.__main__ import parse
from orion_daemon.admission import JoinRequest
from orion_daemon.client import SETTINGS_FLAG
from orion_daemon.protocol import answer, read_request
from orion_daemon.server import DaemonSettings

REPO = Path(__file__).resolve().parents[1]
CLIENT_MODULE = REPO / "orion_daemon" / "client.py"
SPEAKERS = ("orion_cli", "orion", "colocation", "orion_daemon", "placement", "benchmarks")


class FakeDaemon:
    """A socket that answers each request with what the test says and keeps what it was sent."""

    def __init__(self, path: Path, reply: dict[str, Any] | None) -> None:
        self.path = path
        self.reply = reply  # None: read the request, never answer (a stalled daemon)
        self.received: list[dict[str, Any]] = []
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return  # closed
            with connection:
                self.received.append(read_request(connection))
                if self.reply is None:
                    connection.recv(1)  # until the client gives up and hangs up
                else:
                    answer(connection, self.reply)

    def close(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.thread.join()


@contextlib.contextmanager
def fake_daemon(tmp_path: Path, reply: dict[str, Any] | None) -> Iterator[FakeDaemon]:
    daemon = FakeDaemon(tmp_path / "daemon.sock", reply)
    try:
        yield daemon
    finally:
        daemon.close()


def test_call_sends_one_request_and_returns_the_answer(tmp_path):
    with fake_daemon(tmp_path, {"ok": True, "status": {"pid": 7}}) as daemon:
        record = {"socket": str(daemon.path)}
        assert daemon_client.call(record, "status") == {"ok": True, "status": {"pid": 7}}
        assert daemon_client.status(daemon.path) == {"pid": 7}  # a socket path names it too
    assert daemon.received == [{"op": "status"}, {"op": "status"}]


def test_a_refusal_is_the_daemons_own_line_and_hint(tmp_path):
    refusal = {"ok": False, "error": "no slot free", "hint": "wait"}
    with fake_daemon(tmp_path, refusal) as daemon, pytest.raises(OrionError) as raised:
        daemon_client.call(daemon.path, "join", role="be")
    assert (raised.value.message, raised.value.hint) == ("no slot free", "wait")


def test_no_daemon_and_a_silent_one_read_as_not_answering(tmp_path):
    with pytest.raises(OrionError, match="did not answer"):
        daemon_client.call(tmp_path / "nobody.sock", "status")
    assert not daemon_client.answers(tmp_path / "nobody.sock")
    with fake_daemon(tmp_path, None) as daemon, pytest.raises(OrionError, match="did not answer"):
        daemon_client.call(daemon.path, "status", timeout_s=0.2)  # the client's own deadline


def test_each_named_request_sends_its_op_and_fields(tmp_path):
    join_request = JoinRequest(role="hp", name="server")
    with fake_daemon(tmp_path, {"ok": True, "environment": {"ORION_RUN": "r"}}) as daemon:
        path = daemon.path
        daemon_client.check_join(path, join_request)
        assert daemon_client.join(path, join_request) == ({"ORION_RUN": "r"}, None)
        daemon_client.change_limits(path, "trainer", memory_limit=None, max_util=0.5)
        daemon_client.start_records(path, tmp_path / "run", ["a", "b"], 42, True)
        daemon_client.end_records(path, tmp_path / "run")
        daemon_client.down(path)
    ops = [message["op"] for message in daemon.received]
    assert ops == ["check", "join", "quota", "record", "record_end", "down"]
    fields = dataclasses.asdict(join_request)
    assert daemon.received[0] == {"op": "check", **fields}
    assert daemon.received[1] == {"op": "join", **fields}
    assert daemon.received[2] == {"op": "quota", "client": "trainer", "memory_limit": None,
                                  "max_util": 0.5}  # fmt: skip
    assert daemon.received[3] == {"op": "record", "folder": str(tmp_path / "run"),
                                  "clients": ["a", "b"], "clock_origin_ns": 42,
                                  "trace": True}  # fmt: skip


def test_a_daemon_process_gets_its_settings_as_one_model_that_comes_back_equal(tmp_path):
    settings = DaemonSettings(
        gpu=3, sm_count=132, folder=tmp_path, policy="reef", gpu_uuid="GPU-1",
        memory_bytes=80 << 30, queue_limit_ns=250_000, shares=True, hp_completion="gpu-write",
        mps_folder=tmp_path / "mps", stop_with_pid=99, attach_timeout_s=2.5,
        be_when_daemon_gone="hold", daemon_gone_hold_s=7.5,
    )  # fmt: skip
    command = daemon_client.daemon_command(settings)
    assert command[1:4] == ["-m", "orion_daemon", SETTINGS_FLAG]
    assert len(command) == 5  # one argument: no setting travels as a flag of its own
    assert parse(command[3:]) == settings


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ("not json", "is not JSON"),
        ("[1]", "a JSON object"),
        ('{"gpu": 0}', "sm_count"),
        ('{"gpu": 0, "sm_count": 1, "folder": ".", "policy": "fifo"}', "policy must be one of"),
    ],
)
def test_settings_a_daemon_cannot_run_with_are_refused_in_one_line(document, problem):
    with pytest.raises(OrionError, match=problem):
        parse([SETTINGS_FLAG, document])


def _opens_a_unix_socket(path: Path) -> bool:
    """Whether the module at ``path`` connects a socket of its own (``.connect(...)`` in a
    module that names ``AF_UNIX``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names_unix = any(isinstance(n, ast.Attribute) and n.attr == "AF_UNIX" for n in ast.walk(tree))
    connects = any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "connect"
        for n in ast.walk(tree)
    )
    return names_unix and connects


# Modules that connect a Unix socket that is no daemon's: the GPU claim (lock.py) connects to the
# abstract socket holding a GPU only to ask the kernel who holds it (SO_PEERCRED); it sends nothing.
NOT_TO_A_DAEMON = {"orion_daemon/lock.py"}


def test_no_module_but_the_client_connects_to_a_daemon():
    speakers = [
        path.relative_to(REPO).as_posix()
        for package in SPEAKERS
        for path in sorted((REPO / package).rglob("*.py"))
        if _opens_a_unix_socket(path)
    ]
    assert sorted(set(speakers) - NOT_TO_A_DAEMON) == [CLIENT_MODULE.relative_to(REPO).as_posix()]


def _changes_live_limits(path: Path) -> bool:
    """Whether the module at ``path`` attaches to a run's shared state by its name
    (``Run.attach``) or sets a client's limits in it (``set_memory_limit``, ``set_quota``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr in ("attach", "set_memory_limit", "set_quota")
        for n in ast.walk(tree)
    )


def test_no_module_but_the_daemon_changes_a_live_clients_limits():
    """`orion quota`, on a run directory as on a state folder, asks the daemon (its admission
    then counts the change); nothing else writes a live client's limits into shared memory."""
    writers = [
        path.relative_to(REPO).as_posix()
        for package in SPEAKERS
        for path in sorted((REPO / package).rglob("*.py"))
        if _changes_live_limits(path)
    ]
    assert writers == ["orion_daemon/limits.py"]


def test_no_module_flattens_daemon_settings_into_flags():
    """``python -m orion_daemon`` takes one argument; nothing builds its command but the client."""
    builders = []
    for package in SPEAKERS:
        for path in sorted((REPO / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if path != CLIENT_MODULE and '"orion_daemon"' in text and '"-m"' in text:
                builders.append(path.relative_to(REPO).as_posix())
    assert builders == []
    assert json.loads(daemon_client.daemon_command(DaemonSettings(0, 1, Path(".")))[4])["gpu"] == 0
