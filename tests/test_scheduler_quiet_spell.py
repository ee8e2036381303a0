"""The HP's quiet spell (``hp_quiet_ns``), on CPU with the stand-in driver.

Time-sliced, every gap of the HP's work that BE work gets into costs the HP two context
switches; with a quiet spell set, BE work waits (under reef and orion) until the HP has launched
nothing for that long. What users rely on: with the spell set, a BE kernel starts no earlier than
the spell after the HP's last launch, held on the GPU or in its thread alike; with 0 (the
default) BE runs beside the HP as before; the header says the setting; a bad value is refused.

Times are only ever bounded from below (a delay only lengthens a wait); "beside" is shown by the
order of events.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from daemon_harness import RunningDaemon
from native_harness import MS, Harness, HeldKernel, kernel_table, read_log, wait_for
from typer.testing import CliRunner

from orion_cli.app import app
from orion_common.errors import OrionError
from orion_daemon import state
from scheduler_core import SchedulerRun, SchedulerSettings, native_module
from scheduler_core.run_state import MAX_HP_QUIET_NS

QUIET_NS = 300 * MS
BE_SCRIPT = "func bek 1000 launch bek 8 128 0 sync 0"  # one 1 ms kernel


def settings(be_gate: str, hp_quiet_ns: int, policy: str = "orion") -> SchedulerSettings:
    # GPU-written HP completions: HP's kernel counts as running exactly while it runs.
    return SchedulerSettings(
        policy=policy,
        sm_count=132,
        queue_limit_ns=int(2.5 * MS),
        unknown_duration_ns=int(2.5 * MS),
        hp_completion="gpu-write",
        be_gate=be_gate,
        hp_quiet_ns=hp_quiet_ns,
    )


def add_clients(run: SchedulerRun, hp_ms: int = 1) -> tuple[int, int]:
    """An HP client (one compute kernel on 1 SM) and a BE client (a memory kernel on 8 SMs): the
    BE kernel fits beside the HP's under orion."""
    hp = run.add_client("hp", "hp", kernel_table(("hk", 1, 32, 1, "compute", hp_ms)))
    be = run.add_client("be", "be", kernel_table(("bek", 8, 128, 8, "memory", 1)))
    run.publish()
    return hp, be


def events(log: Path, kind: str) -> list:
    return [e for e in read_log(log) if e.kind == kind]


def stop(*processes) -> None:
    for process in processes:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=10)


@pytest.mark.parametrize("policy", ["orion", "reef"])
def test_decide_holds_be_in_the_quiet_spell_under_the_policies_that_hold_be_for_hp(policy):
    native = native_module()
    be = {"sm_needed": 8, "kernel_class": "memory", "duration_ns": MS, "known": True}
    decide = native.decide
    assert decide(policy, "be", be, 132, 2 * MS, 0, [], hp_quiet_until_ns=5) == (
        False,
        "hp_not_quiet",
    )
    assert decide(policy, "be", be, 132, 2 * MS, 0, [], hp_quiet_until_ns=0) == (True, "hp_idle")
    assert decide(policy, "hp", be, 132, 2 * MS, 0, [], hp_quiet_until_ns=5) == (
        True,
        "high_priority",
    )
    # A sampling hold is the stricter reason and says so.
    assert decide(policy, "be", be, 132, 2 * MS, 0, [], True, 5) == (False, "sampling_hold")


@pytest.mark.parametrize("policy", ["priority", "passthrough"])
def test_policies_that_do_not_hold_be_for_hp_ignore_the_quiet_spell(policy):
    be = {"sm_needed": 8, "kernel_class": "memory", "duration_ns": MS, "known": True}
    decision = native_module().decide(policy, "be", be, 132, 2 * MS, 0, [], hp_quiet_until_ns=5)
    assert decision == (True, "not_gated")


def hp_then_be(
    harness: Harness,
    tmp_path: Path,
    run_settings: SchedulerSettings,
    hp_script: str,
    *,
    hp_ms: int = 1,
    hp_env: dict[str, str] | None = None,
    begin: Callable[[], int] = lambda: 0,
    hp_event: str = "exec_end",
    finish: Callable[[], object] = lambda: None,
) -> tuple[int, dict, dict]:
    """Starts the HP's script (logging to hp.log), calls ``begin``, waits for ``hp_event`` in the
    HP's log, runs BE's one kernel to its end (be.log), then lets the HP end with ``finish``.
    Returns what ``begin`` returned, BE's statistics and the gate keeper's."""
    hp_process = be_process = None
    with SchedulerRun(run_settings) as run:
        hp, be = add_clients(run, hp_ms)
        try:
            hp_process = harness.start(
                hp_script, env={**run.client_environment(hp), **(hp_env or {})},
                log=tmp_path / "hp.log",
            )  # fmt: skip
            begun = begin()
            wait_for(lambda: events(tmp_path / "hp.log", hp_event), what=f"the HP's {hp_event}")
            be_process = harness.start(
                BE_SCRIPT, env=run.client_environment(be), log=tmp_path / "be.log"
            )
            assert be_process.wait(timeout=30) == 0, be_process.stderr.read()
            finish()
            assert hp_process.wait(timeout=30) == 0, hp_process.stderr.read()
        finally:
            stop(hp_process, be_process)
        return begun, run.stats()["be"], run.gate_stats()


@pytest.mark.parametrize("be_gate", ["gpu", "cpu"])
def test_be_work_waits_out_the_hp_quiet_spell(harness: Harness, tmp_path: Path, be_gate: str):
    go, done = tmp_path / "go", tmp_path / "done"

    def let_hp_launch() -> int:
        before_ns = time.monotonic_ns()
        go.touch()
        return before_ns

    # The HP launches once (after `go`), then stays attached, launching nothing more; BE comes
    # once the HP's kernel has ended, when without the spell it would run at once.
    before_hp_launch_ns, stats, gates = hp_then_be(
        harness,
        tmp_path,
        settings(be_gate, QUIET_NS),
        f"func hk 1000 await {go} launch hk 1 32 0 sync 0 await {done}",
        begin=let_hp_launch,
        finish=done.touch,
    )
    hp_log, be_log = tmp_path / "hp.log", tmp_path / "be.log"
    (hp_launch,) = events(hp_log, "launch")
    assert hp_launch.time_ns >= before_hp_launch_ns
    (be_start,) = events(be_log, "exec_start")
    # The HP's launch was recorded no earlier than `before_hp_launch_ns`.
    assert be_start.time_ns >= before_hp_launch_ns + QUIET_NS
    assert be_start.time_ns > events(hp_log, "exec_end")[0].time_ns
    if be_gate == "cpu":
        # Held in its thread, for the spell: the reason is counted.
        assert stats["blocked_launches"] == 1
        assert stats["reasons"]["hp_not_quiet"] >= 1
    else:
        # The launch returned at once; the keeper kept its gate shut for the spell.
        assert stats["reasons"]["gpu_gate"] == 1
        assert gates["quiet_holds"] >= 1


@pytest.mark.parametrize("be_gate", ["gpu", "cpu"])
def test_without_a_quiet_spell_be_runs_beside_the_hp_as_before(
    harness: Harness, tmp_path: Path, be_gate: str
):
    hold = HeldKernel("hk", tmp_path / "release-hp")
    run_settings = settings(be_gate, 0)
    assert SchedulerSettings(policy="orion", sm_count=1, queue_limit_ns=0,
                             unknown_duration_ns=0).hp_quiet_ns == 0  # fmt: skip
    # HP's kernel runs until released: BE finishes beside it, whatever the time.
    _, stats, gates = hp_then_be(
        harness,
        tmp_path,
        run_settings,
        "func hk 300000 launch hk 1 32 0 sync 0",
        hp_ms=300,
        hp_env=hold.env(),
        hp_event="exec_start",
        finish=hold.release,
    )
    (be_end,) = events(tmp_path / "be.log", "exec_end")
    (hp_end,) = events(tmp_path / "hp.log", "exec_end")
    assert be_end.time_ns < hp_end.time_ns  # beside the HP's kernel, not after it
    assert stats["reasons"]["hp_not_quiet"] == 0
    assert gates["quiet_holds"] == 0


def test_the_run_header_says_the_quiet_spell():
    native = native_module()
    with SchedulerRun(settings("gpu", 250_000)) as run:
        assert native.Run.attach(run.name, run.decisions_path).hp_quiet_ns == 250_000
    with SchedulerRun(settings("gpu", 0)) as run:
        assert native.Run.attach(run.name, run.decisions_path).hp_quiet_ns == 0


@pytest.mark.parametrize("value", [-1, MAX_HP_QUIET_NS + 1])
def test_a_quiet_spell_out_of_bounds_is_refused_in_one_message(value: int):
    with pytest.raises(OrionError) as refused:
        settings("gpu", value)
    assert refused.value.message == (
        f"hp_quiet_ns must be 0 (off) to 1000000000 (1 s) (got {value})"
    )
    # The library keeps its own bound too.
    if value > 0:
        with pytest.raises(ValueError, match="hp_quiet_ns must be at most"):
            native_module().Run.create(
                "/orion-test-quiet-too-long", "orion", 132, 1, 1, 1, hp_quiet_ns=value
            )


def test_the_daemon_runs_with_the_quiet_spell_it_was_given(tmp_path: Path):
    running = RunningDaemon(tmp_path / "gpu0", policy="orion", hp_quiet_us=300)
    try:
        assert running.status()["hp_quiet_us"] == 300
        shown = CliRunner().invoke(app, ["status", "--json", "--state-dir", str(tmp_path)])
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.output)["hp_quiet_us"] == 300
        table = CliRunner().invoke(
            app, ["status", "--state-dir", str(tmp_path)], env={"COLUMNS": "250"}
        )
        assert "BE waits out a 300-us quiet spell of the HP" in table.output
        record = state.live_record(running.folder)
        scheduler = record["scheduler"]
        attached = native_module().Run.attach(scheduler["shm"], scheduler["decisions"])
        assert attached.hp_quiet_ns == 300_000
    finally:
        running.close()
