"""A daemon whose state folder is deeper than a Unix socket's address holds (107 bytes of path),
against the stand-in driver (CPU only).

What users rely on: `orion up --state-dir` anywhere (a benchmark's cell folder, a CI workspace)
starts a daemon, and everything that speaks to it reaches it: the Python client (`orion status`,
`orion run`, `orion.ray`) and the preload library's own join. Before, binding its socket failed
with "AF_UNIX path too long" and the daemon did not start.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from daemon_harness import RunningDaemon, joining_environment
from native_harness import Harness, build_harness, wait_for

from orion_common.unix_sockets import MAX_PATH_BYTES, reachable
from orion_daemon import state


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    try:
        return build_harness(tmp_path_factory.mktemp("fake_cuda_socket_path"))
    except RuntimeError as error:
        pytest.skip(str(error))


def deep_folder(tmp_path: Path) -> Path:
    base = tmp_path / ("cell-" + "d" * 60) / ("state-" + "e" * 60)
    base.mkdir(parents=True)
    assert len(str(base / "gpu0" / state.SOCKET)) > MAX_PATH_BYTES
    return base


def test_a_daemon_in_a_deep_state_folder_is_reached_by_every_client(harness, tmp_path):
    base = deep_folder(tmp_path)
    daemon = RunningDaemon(base / "gpu0", policy="orion")
    try:
        assert daemon.status()["clients"] == []  # the Python client
        joined = daemon.join("be", "loader")  # a join request on the socket, as `orion run`'s
        assert joined
        env = joining_environment(base, "be", "trainer", strict=True)  # the library's own join
        result = harness.run("func k 100 launch k 4 128 0 sync 0", env=env)
        assert result.returncode == 0, result.stderr
        wait_for(
            lambda: any(e["client"] == "trainer" for e in daemon.events()),
            what="the library's join",
        )
    finally:
        daemon.close()


def test_a_short_socket_path_is_used_as_it_is(tmp_path):
    path = tmp_path / state.SOCKET
    with reachable(path) as address:
        assert address == str(path)
