"""The private MPS daemon is started with the run's folders and always stopped, on CPU with a
stand-in for nvidia-cuda-mps-control that behaves like it at the process boundary (daemonises,
writes its pid file, quits on `quit`)."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest
from native_harness import wait_for

from orion_common import sysinfo
from orion_common.errors import OrionError
from orion_common.processes import process_alive
from orion_daemon import mps
from orion_daemon.admission import JoinRequest
from orion_daemon.mps import PID_FILE, private_mps_daemon, require_mps_control

FAKE_CONTROL = """#!/bin/sh
# Stand-in for nvidia-cuda-mps-control: `-d` daemonises, stdin commands control the daemon.
dir="$CUDA_MPS_PIPE_DIRECTORY"
if [ "$1" = "-d" ]; then
  (
    if [ -n "$FAKE_MPS_STUCK" ]; then trap '' TERM; fi
    while [ -z "$FAKE_MPS_STUCK" ] && [ ! -e "$dir/quit" ]; do sleep 0.02; done
    while [ -n "$FAKE_MPS_STUCK" ]; do sleep 0.02; done
    rm -f "$dir/nvidia-cuda-mps-control.pid"
  ) </dev/null >/dev/null 2>&1 &
  echo $! > "$dir/nvidia-cuda-mps-control.pid"
  echo "started in $dir" > "$CUDA_MPS_LOG_DIRECTORY/control.log"
  exit 0
fi
while read -r command; do
  case "$command" in
    quit) touch "$dir/quit" ;;
    get_server_list) ;;
  esac
done
"""


def fake_control(folder: Path) -> Path:
    path = folder / "nvidia-cuda-mps-control"
    path.write_text(FAKE_CONTROL)
    path.chmod(0o755)
    return path


def alive(pid: int) -> bool:
    return process_alive(pid)


def test_daemon_runs_in_the_run_folder_and_is_stopped(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with private_mps_daemon(run_dir, control=fake_control(tmp_path)) as daemon:
        assert alive(daemon.pid)
        assert daemon.environment == {
            "CUDA_MPS_PIPE_DIRECTORY": str(run_dir / "mps" / "pipe"),
            "CUDA_MPS_LOG_DIRECTORY": str(run_dir / "mps" / "log"),
        }
        assert (run_dir / "mps" / "pipe" / PID_FILE).is_file()
        assert "started" in (run_dir / "mps" / "log" / "control.log").read_text()
    assert not alive(daemon.pid)


def test_an_mps_daemon_left_without_a_hand_over_says_how_to_quit_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Clients still run and no process can be started to stop MPS after them (out of pids):
    # the MPS daemon is left to them as before, and the note says how to quit it by hand.
    def cannot_start(*args: object) -> int:
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(mps, "hand_over", cannot_start)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    notes: list[str] = []
    with private_mps_daemon(
        run_dir, control=fake_control(tmp_path), notes=notes, keep_running=lambda: [os.getpid()]
    ) as daemon:
        pass
    try:
        assert alive(daemon.pid)
        (note,) = notes
        assert f"left running for its clients (pids {os.getpid()})" in note
        assert "nothing will stop it (the hand-over did not start: Resource temporarily" in note
        assert f"CUDA_MPS_PIPE_DIRECTORY={daemon.pipe_dir} nvidia-cuda-mps-control" in note
    finally:
        (daemon.pipe_dir / "quit").touch()  # the stand-in's quit
        wait_for(lambda: not alive(daemon.pid), what="the MPS control daemon to quit")


def test_daemon_is_stopped_on_ctrl_c(tmp_path: Path) -> None:
    pids = []
    with (
        pytest.raises(KeyboardInterrupt),
        private_mps_daemon(tmp_path, control=fake_control(tmp_path)) as daemon,
    ):
        pids.append(daemon.pid)
        raise KeyboardInterrupt
    assert not alive(pids[0])


def test_daemon_is_stopped_on_sigterm(tmp_path: Path) -> None:
    pids = []
    with (
        pytest.raises(KeyboardInterrupt),
        private_mps_daemon(tmp_path, control=fake_control(tmp_path)) as daemon,
    ):
        pids.append(daemon.pid)
        os.kill(os.getpid(), signal.SIGTERM)
        # The handler raises KeyboardInterrupt out of this wait; only a lost signal ends it.
        wait_for(lambda: False, timeout_s=30, what="SIGTERM to interrupt the block")
    assert not alive(pids[0])


def test_a_daemon_that_does_not_quit_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MPS_STUCK", "1")
    notes: list[str] = []
    with private_mps_daemon(
        tmp_path, control=fake_control(tmp_path), stop_timeout_s=0.5, notes=notes
    ) as daemon:
        pass
    assert not alive(daemon.pid)
    assert notes == [
        f"the MPS control daemon (pid {daemon.pid}) did not quit within 0.5 s; killed it"
    ]


@pytest.mark.parametrize("length", [90, 88])  # 88: what failed to start on an H100
def test_a_long_run_folder_gets_a_short_pipe_folder(tmp_path: Path, length: int) -> None:
    run_dir = tmp_path / ("x" * (length - len(str(tmp_path)) - len("/mps/pipe") - 1))
    run_dir.mkdir()
    assert len(str(run_dir / "mps" / "pipe")) == length
    with private_mps_daemon(run_dir, control=fake_control(tmp_path)) as daemon:
        assert len(str(daemon.pipe_dir)) < 80
        assert (run_dir / "mps" / "pipe").resolve() == daemon.pipe_dir.resolve()
    assert not daemon.pipe_dir.exists()


def test_a_daemon_that_fails_to_start_is_a_clear_error(tmp_path: Path) -> None:
    control = tmp_path / "nvidia-cuda-mps-control"
    control.write_text("#!/bin/sh\necho 'An instance of this daemon is already running'\nexit 1\n")
    control.chmod(0o755)
    with (
        pytest.raises(OrionError, match=r"did not start.*already running"),
        private_mps_daemon(tmp_path, control=control),
    ):
        pass


def test_missing_mps_control_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sysinfo, "find_mps_control", lambda: None)
    with pytest.raises(OrionError, match="nvidia-cuda-mps-control was not found") as info:
        require_mps_control()
    assert "dedicated or timeslice" in (info.value.hint or "")


def test_sm_share_sets_the_mps_thread_percentage_and_drops_an_inherited_one() -> None:
    inherited = {"PATH": "/bin", mps.MPS_THREAD_PERCENTAGE: "10"}
    assert mps.with_sm_share(inherited, 30) == {"PATH": "/bin", mps.MPS_THREAD_PERCENTAGE: "30"}
    assert mps.with_sm_share(inherited, None) == {"PATH": "/bin"}
    assert inherited[mps.MPS_THREAD_PERCENTAGE] == "10"  # the caller's dict is left alone


@pytest.mark.parametrize(("role", "priority"), [("be", "1"), ("hp", None)])
def test_under_mps_be_clients_join_at_the_lower_client_priority(
    tmp_path: Path, role: str, priority: str | None
) -> None:
    # What a daemon sharing through MPS tells a joining client: its MPS daemon's folders, and for
    # a BE client the lower MPS client priority, which the library is allowed to take.
    from types import SimpleNamespace

    from orion_daemon.ownership import ANSWER_VARIABLES
    from orion_daemon.server import Daemon, DaemonSettings

    settings = DaemonSettings(gpu=0, sm_count=132, folder=tmp_path, sharing="mps")
    mps = SimpleNamespace(
        environment={"CUDA_MPS_PIPE_DIRECTORY": "/p", "CUDA_MPS_LOG_DIRECTORY": "/l"}
    )
    daemon = SimpleNamespace(settings=settings, _scheduler=SimpleNamespace(name="r"), _mps=mps)
    environment = Daemon._env(daemon, 3, False, role)
    assert environment.get("CUDA_MPS_CLIENT_PRIORITY") == priority
    assert environment["CUDA_MPS_PIPE_DIRECTORY"] == "/p"
    assert set(environment) <= ANSWER_VARIABLES
    time_sliced = SimpleNamespace(
        settings=settings, _scheduler=SimpleNamespace(name="r"), _mps=None, _outside_mps={}
    )
    assert "CUDA_MPS_CLIENT_PRIORITY" not in Daemon._env(time_sliced, 3, False, role)


def test_a_be_sm_share_is_given_to_be_clients_under_mps_and_refused_time_sliced(
    tmp_path: Path,
) -> None:
    # `orion up --sharing mps --be-sm-percent 70`: each BE client joins with MPS's thread
    # percentage, the HP with every SM; time-sliced there is nothing to partition: refused.
    from types import SimpleNamespace

    from orion_common.errors import OrionError
    from orion_daemon.ownership import ANSWER_VARIABLES
    from orion_daemon.server import Daemon, DaemonSettings

    settings = DaemonSettings(
        gpu=0, sm_count=132, folder=tmp_path, sharing="mps", be_sm_percent="70", hp_context="mps"
    )
    assert settings.be_sm_percent == 70.0  # as typed, parsed once by its declaration
    mps = SimpleNamespace(environment={})
    daemon = SimpleNamespace(
        settings=settings, _scheduler=SimpleNamespace(name="r"), _mps=mps, clients={}
    )
    share = Daemon._be_sm_percent(daemon, "be")  # every client in the server: an HP may be too
    assert share == 70.0
    assert Daemon._be_sm_percent(daemon, "hp") is None
    be = Daemon._env(daemon, 1, False, "be", None, share)
    assert be["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "70"
    assert set(be) <= ANSWER_VARIABLES
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in Daemon._env(daemon, 2, False, "hp")
    with pytest.raises(OrionError, match="be_sm_percent applies under sharing 'mps' only"):
        DaemonSettings(gpu=0, sm_count=132, folder=tmp_path, sharing="timeslice", be_sm_percent=70)
    with pytest.raises(OrionError, match="be_sm_percent must be 1 to 100"):
        DaemonSettings(gpu=0, sm_count=132, folder=tmp_path, sharing="mps", be_sm_percent=0)


@pytest.mark.parametrize("role", ["hp", "be"])
def test_a_time_sliced_daemons_clients_stay_out_of_a_machine_wide_mps_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, role: str
) -> None:
    # An MPS daemon the user's shell points at (or root's at /tmp/nvidia-mps) would make the
    # clients of a time-sliced daemon its MPS clients without a word. Each joins with a pipe
    # folder of the orion daemon's own instead, where no MPS daemon answers: CUDA runs it alone.
    from daemon_harness import RunningDaemon

    machine_wide = tmp_path / "machine-mps"
    machine_wide.mkdir()
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(machine_wide))
    monkeypatch.setenv("ORION_STATE_DIR", str(tmp_path))
    daemon = RunningDaemon(tmp_path / "gpu0", policy="orion")
    try:
        assert daemon.status()["sharing"] == "timeslice"
        pipe_dir = Path(daemon.join(role, "client")["CUDA_MPS_PIPE_DIRECTORY"])
        assert pipe_dir != machine_wide
        assert pipe_dir.parent == daemon.folder and pipe_dir.is_dir()
        assert not list(pipe_dir.iterdir())  # nobody answers there
    finally:
        daemon.close()


def test_an_hp_in_a_context_of_its_own_stays_out_of_the_mps_server_its_be_clients_share(
    tmp_path: Path,
) -> None:
    # `orion up --sharing mps --hp-context own`: every BE client joins the daemon's MPS server
    # (at its SM share and the lower client priority); the HP joins with the daemon's empty pipe
    # folder, so CUDA gives it a context of its own, time-sliced against the server.
    from types import SimpleNamespace

    from orion_daemon.ownership import ANSWER_VARIABLES
    from orion_daemon.server import Daemon, DaemonSettings

    settings = DaemonSettings(
        gpu=0, sm_count=132, folder=tmp_path, sharing="mps", be_sm_percent=50, hp_context="own"
    )
    server = SimpleNamespace(environment={"CUDA_MPS_PIPE_DIRECTORY": "/server"})
    outside = mps.outside_any_mps(tmp_path)
    daemon = SimpleNamespace(
        settings=settings,
        _scheduler=SimpleNamespace(name="r"),
        _mps=server,
        _outside_mps=outside,
        clients={},
    )
    # An HP that does not choose takes the daemon's context.
    context = Daemon._hp_context(daemon, JoinRequest(role="hp", name="svc"))
    assert context == "own"
    hp = Daemon._env(daemon, 1, False, "hp", context)
    be = Daemon._env(daemon, 2, False, "be", None, Daemon._be_sm_percent(daemon, "be"))
    assert hp["CUDA_MPS_PIPE_DIRECTORY"] == str(tmp_path / mps.NO_MPS_FOLDER)
    assert not (set(hp) & {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_CLIENT_PRIORITY"})
    assert be["CUDA_MPS_PIPE_DIRECTORY"] == "/server"
    assert be["CUDA_MPS_CLIENT_PRIORITY"] == "1"
    # No HP can run beside it in the server: every SM (its share would only slow it).
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in be
    assert set(hp) | set(be) <= ANSWER_VARIABLES
    # The HP meets BE work time-sliced: BE graphs split into segments, not stopped at wait
    # nodes inside (which would keep the server's context on the GPU). Beside an HP in the
    # server too: a graph stopped inside reads as running to the HP's sampling holds.
    assert settings.be_graph_gate == "segments"
    every_client_in_mps = DaemonSettings(
        gpu=0, sm_count=132, folder=tmp_path, sharing="mps", hp_context="mps"
    )
    assert every_client_in_mps.be_graph_gate == "segments"


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        (
            {"sharing": "timeslice", "hp_context": "own"},
            "hp_context applies under sharing 'mps' only",
        ),
        ({"sharing": "mps", "hp_context": "apart"}, "hp_context must be one of mps, own"),
    ],
)
def test_an_hp_context_that_cannot_apply_is_refused(tmp_path: Path, settings, said) -> None:
    from orion_daemon.server import DaemonSettings

    with pytest.raises(OrionError, match=said):
        DaemonSettings(gpu=0, sm_count=132, folder=tmp_path, **settings)


def mps_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **settings):
    """A daemon process of ``--sharing mps`` for GPU 0, its MPS control the stand-in above."""
    from daemon_harness import RunningDaemon

    class MpsDaemonProcess(RunningDaemon):
        def stop_daemon(self) -> None:
            """SIGTERM to the daemon alone (what a service manager sends), waited for as long
            as a busy machine takes (never killed: how it ends is what the tests look at)."""
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                self.process.wait(timeout=300)

        def close(self) -> None:
            """Stops the daemon, then the MPS control daemon it left running: the clients the
            test joined are still registered (the test process joined them and lives on), and
            a daemon stopped beside live clients leaves MPS to them (orion_daemon.mps)."""
            self.stop_daemon()
            for pid_file in self.folder.glob(f"mps-*/mps/pipe/{PID_FILE}"):
                with contextlib.suppress(OSError, ValueError):
                    pid = int(pid_file.read_text().strip())
                    (pid_file.parent / "quit").touch()  # the stand-in's `quit`
                    wait_for(lambda pid=pid: not alive(pid), what="the MPS control daemon to quit")

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_control(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ORION_STATE_DIR", str(tmp_path))
    return MpsDaemonProcess(tmp_path / "gpu0", policy="orion", sharing="mps", **settings)


def test_each_hp_chooses_its_context_as_it_joins_and_status_says_which(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `orion up --sharing mps --hp-context own` then `orion run --hp --hp-context mps`: the
    # context is the HP program's (a decoder did best in its own, a graph encoder in the server).
    # The joining HP's choice wins over the daemon's default; BE clients join the server whatever.
    daemon = mps_daemon(tmp_path, monkeypatch, hp_context="own")
    try:
        server_pipe = daemon.join("be", "trainer")["CUDA_MPS_PIPE_DIRECTORY"]
        assert Path(server_pipe) != daemon.folder / mps.NO_MPS_FOLDER
        hp = daemon.join("hp", "encoder", hp_context="mps")
        assert hp["CUDA_MPS_PIPE_DIRECTORY"] == server_pipe
        clients = {c["name"]: c for c in daemon.status()["clients"]}
        assert clients["encoder"]["hp_context"] == "mps"
        assert clients["trainer"]["hp_context"] is None
    finally:
        daemon.close()


def test_a_be_client_gets_its_sm_share_only_where_an_hp_may_run_beside_it_in_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `orion up --sharing mps --hp-context own --be-sm-percent 50`: a trainer joining while no HP
    # can share the server keeps every SM; once an HP joins the server (`--hp-context mps`) the
    # daemon names the trainer that cannot be narrowed any more, and the next BE client gets 50%.
    daemon = mps_daemon(tmp_path, monkeypatch, hp_context="own", be_sm_percent=50)
    try:
        first = daemon.join("be", "trainer")
        assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in first
        daemon.join("hp", "encoder", hp_context="mps")
        second = daemon.join("be", "batch")
        assert second["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
        shares = {c["name"]: c["sm_percent"] for c in daemon.status()["clients"]}
        assert shares == {"trainer": None, "encoder": None, "batch": 50.0}
        wait_for(lambda: "beside BE clients on every SM (trainer" in daemon.output(), what="note")
    finally:
        daemon.close()


def test_a_be_client_beside_an_hp_in_a_context_of_its_own_keeps_every_sm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = tmp_path / "own"
    own.mkdir()
    daemon = mps_daemon(own, monkeypatch, hp_context="own", be_sm_percent=50)
    try:
        daemon.join("hp", "decoder")  # the daemon's context: its own
        assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in daemon.join("be", "trainer")
    finally:
        daemon.close()
    in_server = tmp_path / "in-server"
    in_server.mkdir()
    daemon = mps_daemon(in_server, monkeypatch, be_sm_percent=50, hp_context="mps")
    try:  # every client in the server: each BE client at its share
        assert daemon.join("be", "trainer")["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    finally:
        daemon.close()


def test_an_hp_without_a_choice_takes_the_daemons_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = mps_daemon(tmp_path, monkeypatch, hp_context="own")
    try:
        hp = daemon.join("hp", "decoder")
        assert Path(hp["CUDA_MPS_PIPE_DIRECTORY"]) == daemon.folder / mps.NO_MPS_FOLDER
        assert daemon.status()["clients"][0]["hp_context"] == "own"
    finally:
        daemon.close()


def test_an_hp_asking_for_the_context_its_daemon_gives_anyway_is_never_refused(
    tmp_path: Path,
) -> None:
    # `orion up --sharing mps --hp-context own --be-graph-gate inside`: both asked for by its user,
    # so an HP that says own, as the daemon would give it, joins.
    from types import SimpleNamespace

    from orion_daemon.server import Daemon, DaemonSettings

    settings = DaemonSettings(
        gpu=0, sm_count=132, folder=tmp_path, sharing="mps", hp_context="own",
        be_graph_gate="inside",
    )  # fmt: skip
    daemon = SimpleNamespace(settings=settings)
    Daemon._check_hp_context(daemon, JoinRequest(role="hp", name="svc", hp_context="own"))
    Daemon._check_hp_context(daemon, JoinRequest(role="hp", name="svc", hp_context="mps"))


def test_an_hp_context_the_daemon_cannot_give_is_refused_with_what_to_start_instead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from daemon_harness import RunningDaemon

    # Every client under MPS, BE graphs gated inside (asked for): a BE graph stopped at a wait
    # keeps the server on the GPU, which an HP in its own context would wait a timeslice for.
    daemon = mps_daemon(tmp_path, monkeypatch, hp_context="mps", be_graph_gate="inside")
    try:
        with pytest.raises(OrionError, match="gates BE graphs inside") as inside:
            daemon.join("hp", "decoder", hp_context="own")
        assert "--hp-context own" in (inside.value.hint or "")
        assert daemon.join("hp", "encoder", hp_context="mps")  # what it has anyway
    finally:
        daemon.close()
    (tmp_path / "ts").mkdir()
    time_sliced = RunningDaemon(tmp_path / "ts" / "gpu0", policy="orion")
    try:
        with pytest.raises(OrionError, match="no MPS server for the HP to run in"):
            time_sliced.join("hp", "encoder", hp_context="mps")
        assert time_sliced.join("hp", "decoder", hp_context="own")  # its context is its own
    finally:
        time_sliced.close()


@pytest.mark.parametrize(
    ("daemon_context", "joined", "applies"),
    [
        (None, [], True),  # every client in the server: the HP may join there
        ("mps", [], True),
        ("own", [], False),  # the HP comes in a context of its own
        ("own", ["own"], False),
        ("own", ["mps"], True),  # an HP chose the server
    ],
)
def test_the_sm_share_rule_follows_where_an_hp_may_run(daemon_context, joined, applies) -> None:
    from scheduler_core.sharing import be_sm_share_applies

    assert be_sm_share_applies(daemon_context, joined) is applies


@pytest.mark.parametrize(("field", "value"), [("be_graph_gate", "bogus"), ("be_gate", "queue")])
def test_a_daemon_setting_out_of_its_choices_is_refused_by_its_declaration(
    tmp_path: Path, field: str, value: str
) -> None:
    # The daemon's process rebuilds its settings from JSON: a value no `orion up` could give
    # is refused there too, in the declaration's words.
    from orion_daemon.server import DaemonSettings

    with pytest.raises(OrionError, match=f"{field} must be one of"):
        DaemonSettings(gpu=0, sm_count=132, folder=tmp_path, **{field: value})
    unset = DaemonSettings(gpu=0, sm_count=132, folder=tmp_path, be_gate=None, be_graph_gate=None)
    assert (unset.be_gate, unset.be_graph_gate) == ("gpu", "segments")  # time-sliced defaults


JOIN_AND_HOLD = """
import sys
from pathlib import Path
from orion_daemon.admission import JoinRequest
from orion_daemon.joining import join
join(0, JoinRequest(role="be", name="trainer"), Path(sys.argv[1]))
print("joined", flush=True)
sys.stdin.read()  # runs on until the test closes its stdin
"""


def test_an_mps_daemon_left_to_running_clients_is_stopped_once_they_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `orion down` beside a trainer: the trainer keeps its MPS server, and once it has exited
    # the MPS daemon goes too (left alone it would serve that pipe folder for good).
    import subprocess
    import sys

    daemon = mps_daemon(tmp_path, monkeypatch)
    trainer = subprocess.Popen(
        [sys.executable, "-c", JOIN_AND_HOLD, str(daemon.folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert trainer.stdout.readline().strip() == "joined"
        (pid_file,) = daemon.folder.glob(f"mps-*/mps/pipe/{PID_FILE}")
        control = int(pid_file.read_text())
        daemon.stop_daemon()
        assert daemon.process.returncode == 0, daemon.output()  # a clean stop under MPS too
        assert "orion daemon stopped" in daemon.output()
        assert "left running for its clients" in daemon.output()
        assert f"(pids {trainer.pid})" in daemon.output()
        assert alive(control)  # the trainer still has its MPS daemon
        trainer.stdin.close()
        trainer.wait(timeout=30)
        wait_for(lambda: not alive(control), timeout_s=60, what="the MPS daemon to be stopped")
        log = pid_file.parent.parent / "log" / "handover.log"
        said = lambda: log.read_text() if log.exists() else ""  # noqa: E731
        # written once the MPS daemon is gone (opened, then written: wait for the words)
        wait_for(lambda: "clients gone: MPS daemon stopped" in said(), timeout_s=60,
                 what="the hand-over's log")  # fmt: skip
    finally:
        trainer.kill()
        trainer.wait(timeout=10)
        daemon.close()
