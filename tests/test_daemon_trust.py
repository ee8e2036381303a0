"""Who a daemon trusts and who trusts it (docs/architecture.md, "Trust model"), on the stand-in
driver with real processes (CPU only).

What users rely on: no other local user can make their programs load a library or join a daemon
of someone else's. A state folder that is not the user's own (another owner, writable by others,
a symlink) is refused by the daemon, by `orion status` and by a program joining from its
variables, in one line naming the path, its owner and mode, with nothing started; a daemon of
another uid is refused by the client; an answer that sets LD_PRELOAD (or anything but orion's
variables) is refused; the daemon answers only its own user (and root). The tests that need a
second uid run as root only (they are skipped elsewhere).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from daemon_harness import Impostor, RunningDaemon, daemon_command
from native_harness import Harness, build_harness, read_log
from typer.testing import CliRunner

from orion_cli.app import app
from orion_common.errors import OrionError
from orion_daemon import state
from orion_daemon.admission import JoinRequest
from orion_daemon.control import start_detached, stop
from orion_daemon.joining import JOIN_REFUSED_EXIT, join, join_environment
from orion_daemon.server import DaemonSettings

SHORT = "func k 100 repeat 3 launch k 4 128 0 end sync 0"
NOBODY = 65534
as_root = pytest.mark.skipif(os.getuid() != 0, reason="needs root to act as a second user")


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    try:
        return build_harness(tmp_path_factory.mktemp("fake_cuda_trust"))
    except RuntimeError as error:
        pytest.skip(str(error))


def env_for(base: Path, role: str = "be") -> dict[str, str]:
    request = JoinRequest(role=role, name="job")
    return join_environment(os.environ, request, device="0", state_base=base)


def start_daemon(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        daemon_command(folder),
        capture_output=True, text=True, timeout=60, check=False, cwd=folder.parent.parent,
    )  # fmt: skip


def world_writable(tmp_path: Path) -> Path:
    folder = tmp_path / "gpu0"
    folder.mkdir()
    folder.chmod(0o777)
    return folder


def foreign(tmp_path: Path) -> Path:
    folder = tmp_path / "gpu0"
    folder.mkdir(mode=0o700)
    os.chown(folder, NOBODY, NOBODY)
    return folder


def symlinked(tmp_path: Path) -> Path:
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    folder = tmp_path / "gpu0"
    folder.symlink_to(tmp_path / "elsewhere")
    return folder


BAD_FOLDERS = [
    pytest.param(world_writable, "mode 0777): others may write to it", id="mode-0777"),
    pytest.param(foreign, f"owner uid {NOBODY}, mode 0700): it belongs to another user",
                 id="another-uid", marks=as_root),
    pytest.param(symlinked, "it is a symlink", id="symlink"),
]  # fmt: skip


@pytest.mark.parametrize(("make", "why"), BAD_FOLDERS)
def test_a_state_folder_not_the_users_own_is_refused_by_the_daemon(tmp_path, make, why):
    folder = make(tmp_path)
    result = start_daemon(folder)
    assert result.returncode == 1
    line = result.stderr.splitlines()[0]
    assert line.startswith(f"error: refusing the state folder {folder} (owner uid ") and why in line
    # Nothing half-started: no lock, socket or record was made in it.
    assert not {state.LOCK, state.SOCKET, state.RECORD} & {p.name for p in folder.iterdir()}


@pytest.mark.parametrize(("make", "why"), BAD_FOLDERS)
def test_a_state_folder_not_the_users_own_is_refused_by_its_clients(harness, tmp_path, make, why):
    folder = make(tmp_path)
    result = CliRunner().invoke(app, ["status", "--state-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert (
        f"refusing the state folder {folder} (owner uid " in result.output and why in result.output
    )
    joined = harness.run(SHORT, env=env_for(tmp_path), log=tmp_path / "be.log")
    assert joined.returncode == JOIN_REFUSED_EXIT
    (line,) = joined.stderr.strip().splitlines()
    assert f"refusing the state folder {folder} (owner uid " in line and why in line
    assert not [e for e in read_log(tmp_path / "be.log") if e.kind == "launch"]


def test_a_state_folder_above_that_others_may_write_is_refused(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    base.chmod(0o757)
    result = start_daemon(base / "gpu0")
    assert result.returncode == 1
    assert f"refusing the state folder {base} (owner uid {os.getuid()}, mode 0757)" in result.stderr
    assert not (base / "gpu0").exists()


def test_a_missing_state_folder_is_created_private(tmp_path):
    folder = tmp_path / "new" / "base" / "gpu0"
    settings = DaemonSettings(gpu=0, sm_count=132, folder=folder, sharing="timeslice")
    start_detached(settings)  # as `orion up` starts it
    try:
        for path in (folder.parent, folder):
            assert stat.S_IMODE(path.stat().st_mode) == 0o700
            assert path.stat().st_uid == os.getuid()
        assert stat.S_IMODE((folder / state.SOCKET).stat().st_mode) == 0o600
    finally:
        stop(0, folder)


JOINED = {"ok": True, "run": "/orion-impostor", "slot": 0,
          "environment": {"ORION_RUN": "/orion-impostor", "ORION_CLIENT": "0"}}  # fmt: skip


@as_root
def test_a_daemon_of_another_uid_is_refused_by_its_clients(harness, tmp_path):
    # The folder is this user's; whoever listens on its socket is not.
    impostor = Impostor(tmp_path / "gpu0", JOINED, uid=NOBODY)
    try:
        why = f"it runs as uid {NOBODY}, not as this user (uid 0)"
        with pytest.raises(OrionError, match=f"refusing the orion daemon at .*: {re.escape(why)}"):
            join(0, JoinRequest(role="be", name="job"), tmp_path / "gpu0")
        result = harness.run(SHORT, env=env_for(tmp_path), log=tmp_path / "be.log")
        assert result.returncode == JOIN_REFUSED_EXIT
        (line,) = result.stderr.strip().splitlines()
        assert "refusing the orion daemon at" in line and why in line
        assert not [e for e in read_log(tmp_path / "be.log") if e.kind == "launch"]
    finally:
        impostor.close()


@pytest.mark.parametrize("variable", ["LD_PRELOAD", "PATH", "PYTHONPATH", "ORION_ROLE"])
def test_an_answer_that_sets_more_than_orions_variables_is_refused(harness, tmp_path, variable):
    evil = tmp_path / "evil.so"
    reply = {**JOINED, "environment": {**JOINED["environment"], variable: str(evil)}}
    impostor = Impostor(tmp_path / "gpu0", reply)  # this user's own, so only the answer is wrong
    try:
        with pytest.raises(OrionError, match=f"refusing the daemon's answer: it sets '{variable}'"):
            join(0, JoinRequest(role="be", name="job"), tmp_path / "gpu0")
        result = harness.run(SHORT, env=env_for(tmp_path), log=tmp_path / "be.log")
        assert result.returncode == JOIN_REFUSED_EXIT
        (line,) = result.stderr.strip().splitlines()
        assert f"refusing the daemon's answer: it sets '{variable}'" in line
        assert not [e for e in read_log(tmp_path / "be.log") if e.kind == "launch"]
    finally:
        impostor.close()


def test_the_library_a_client_loads_is_its_own_whatever_the_daemon_names(tmp_path):
    from orion_daemon.joining import program_environment
    from scheduler_core import preload_library_path

    joined = {**JOINED["environment"], "ORION_PRELOAD": str(tmp_path / "evil.so")}
    environment = program_environment({"LD_PRELOAD": "/usr/lib/mine.so"}, joined)
    assert environment["LD_PRELOAD"].split(":") == [str(preload_library_path()), "/usr/lib/mine.so"]
    assert "ORION_PRELOAD" not in environment


REACH = """
import socket, sys
connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
connection.settimeout(30)
connection.connect(sys.argv[1])
try:
    connection.sendall(b'{"op":"status"}\\n')
except OSError:  # the daemon may have answered and closed before reading anything
    pass
print(connection.makefile().readline(), end="")
"""


@as_root
def test_the_daemon_answers_no_other_user_even_when_its_folder_lets_them_in():
    # Under /tmp (not pytest's 0700 folders): the other user must be able to reach the socket.
    base = Path(tempfile.mkdtemp(prefix="orion-trust-", dir="/tmp"))
    try:
        daemon = RunningDaemon(base / "gpu0")
        try:
            # A user who opened the folders up: the daemon still refuses everyone else.
            for path, mode in ((base, 0o711), (daemon.folder, 0o711),
                               (daemon.folder / state.SOCKET, 0o666)):  # fmt: skip
                path.chmod(mode)
            python = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3")
                           if os.access(p, os.X_OK)), None)  # fmt: skip
            if python is None:
                pytest.skip("no Python that another user may run")
            other = subprocess.run(
                [python, "-I", "-c", REACH, str(daemon.folder / state.SOCKET)],
                capture_output=True, text=True, timeout=60, check=False, user=NOBODY,
                group=NOBODY, cwd="/",
            )  # fmt: skip
            assert f"serves uid 0 (and root) only, not uid {NOBODY}" in other.stdout, other.stderr
            assert daemon.status()["gpu"] == 0  # its own user is served as before
        finally:
            daemon.close()
        assert f"refused a connection from uid {NOBODY}" in daemon.output()
    finally:
        shutil.rmtree(base, ignore_errors=True)
