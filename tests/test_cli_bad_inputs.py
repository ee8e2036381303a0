"""Bad inputs a new user types, across commands: each is one `error:` line (no traceback),
said before any work starts and before any "no GPU" (input errors first, machine problems
after). One row per case; ``{tmp}`` is a fresh folder, ``{file}`` an existing file in it,
``{proc}`` a path no one can create, ``{data}`` the placement fixtures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from rundir_factory import standard_runs
from typer.testing import CliRunner

from orion_cli.app import app

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data" / "placement"
runner = CliRunner(env={"COLUMNS": "200"})

PLAN = ["plan", "{data}/fleet.json", "--matrix-dir", "{data}/pairs"]
SIMULATE = ["simulate", "{data}/simulate/fleet.json", "--matrix-dir", "{data}/pairs"]
REPORT = ["report", "{run}"]


def _pairs_jobs(tmp: Path, file_name: str, **changes: dict) -> str:
    """examples/pairs.json with some jobs' fields changed."""
    document = json.loads((ROOT / "examples" / "pairs.json").read_text())
    for name, fields in changes.items():
        document["jobs"][name.replace("_", "-")].update(fields)
    path = tmp / file_name
    path.write_text(json.dumps(document))
    return str(path)


def _fill(args: list[str], tmp: Path) -> list[str]:
    values = {
        "tmp": str(tmp),
        "file": str(tmp / "existing.txt"),
        "proc": "/proc/orion-cannot-create",
        "data": str(DATA),
        "run": str(tmp / "runs" / "run-dedicated"),
    }
    return [arg.format(**values) for arg in args]


# (id, arguments, a piece of the one error line)
OUTPUT_PATHS = [
    ("report --json -o /proc", [*REPORT, "--json", "-o", "{proc}"], "cannot write report folder"),
    ("report --json -o file", [*REPORT, "--json", "-o", "{file}"], "it is a file, not a folder"),
    ("report -o /proc", [*REPORT, "-o", "{proc}"], "cannot write report folder"),
    ("report -o file", [*REPORT, "-o", "{file}"], "it is a file, not a folder"),
    ("plan -o /proc", [*PLAN, "-o", "{proc}"], "cannot write plan file"),
    ("plan -o a folder", [*PLAN, "-o", "{tmp}"], "it is a folder"),
    ("plan -o under a file", [*PLAN, "-o", "{file}/plan.json"], "is a file, not a folder"),
    ("simulate -o /proc", [*SIMULATE, "-o", "{proc}"], "cannot write simulation folder"),
    ("simulate -o file", [*SIMULATE, "-o", "{file}"], "it is a file, not a folder"),
    ("pairs --out /proc", ["pairs", "examples/pairs.json", "--out", "{proc}"], "cannot write"),
    ("colocate -o /proc", ["colocate", "examples/headline.json", "-o", "{proc}"], "cannot write"),
]
BEFORE_THE_GPU = [
    (
        "pairs: unknown workload",
        ["pairs", "{pairs_unknown}", "--out", "{tmp}/m"],
        "unknown workload 'nosuch'",
    ),
    (
        "pairs: cuda_graph on a synthetic workload",
        ["pairs", "{pairs_synthetic}", "--out", "{tmp}/m"],
        "cannot be captured",
    ),
    (
        "up: --be-sm-percent out of range",
        ["up", "--be-sm-percent", "0", "--state-dir", "{tmp}/state"],
        "--be-sm-percent: be_sm_percent must be 1 to 100 % (got 0)",
    ),
    (
        "up: unknown --be-gate",
        ["up", "--be-gate", "host", "--state-dir", "{tmp}/state"],
        "--be-gate: be_gate must be one of cpu, gpu (got 'host')",
    ),
    (
        "up: unknown --be-graph-gate",
        ["up", "--be-graph-gate", "outside", "--state-dir", "{tmp}/state"],
        "--be-graph-gate: be_graph_gate must be one of inside, whole, segments (got 'outside')",
    ),
    (
        "up: negative --hp-quiet-us",
        ["up", "--hp-quiet-us", "-1", "--state-dir", "{tmp}/state"],
        "--hp-quiet-us: hp_quiet_us must be 0 to 1,000,000 us (got -1)",
    ),
    (
        "up: --be-gate-spacing-us past its bound",
        ["up", "--be-gate-spacing-us", "20000", "--state-dir", "{tmp}/state"],
        "--be-gate-spacing-us: be_gate_spacing_us must be 1 to 10,000 us (got 20000)",
    ),
    (
        "up: --be-gate-spacing-us with BE held on the CPU",
        ["up", "--be-gate", "cpu", "--be-gate-spacing-us", "100", "--state-dir", "{tmp}/state"],
        "be_gate_spacing_us applies to the GPU-side BE gate of policies orion and reef "
        "(this daemon: policy 'orion', be_gate 'cpu')",
    ),
    (
        "up: --hp-context time-sliced",
        ["up", "--sharing", "timeslice", "--hp-context", "own", "--state-dir", "{tmp}/state"],
        "hp_context applies under sharing 'mps' only (this daemon shares by 'timeslice')",
    ),
    (
        "up: an --hp-context not declared",
        ["up", "--sharing", "mps", "--hp-context", "apart", "--state-dir", "{tmp}/state"],
        "--hp-context: hp_context must be one of mps, own (got 'apart')",
    ),
    (
        "pairs: negative --time-budget",
        ["pairs", "examples/pairs.json", "--time-budget", "-5", "--out", "{tmp}/m"],
        "--time-budget",
    ),
]
CASES = OUTPUT_PATHS + BEFORE_THE_GPU


@pytest.mark.parametrize(("case", "args", "message"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_input_is_one_error_line_before_any_work(
    case: str, args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    (tmp_path / "existing.txt").write_text("keep me\n")
    standard_runs(tmp_path / "runs")
    extra = {
        "pairs_unknown": _pairs_jobs(
            tmp_path, "unknown.json", resnet50_serve={"workload": "nosuch"}
        ),
        "pairs_synthetic": _pairs_jobs(
            tmp_path, "synthetic.json", resnet50_serve={"workload": "synthetic-compute"}
        ),
    }
    filled = [arg.format(**extra) if arg.strip("{}") in extra else arg for arg in args]
    result = runner.invoke(app, _fill(filled, tmp_path))
    assert not isinstance(result.exception, Exception), result.output  # no traceback
    assert result.exit_code in (1, 2), result.output
    assert message in result.output, result.output
    assert "no NVIDIA GPU" not in result.output
    assert (tmp_path / "existing.txt").read_text() == "keep me\n"
    shutil.rmtree(tmp_path / "runs")


# --- bad files: each row writes one file (a fixture with one field changed) ---------------------


def _json_with(source: Path, change, tmp: Path, name: str = "input.json") -> Path:
    document = json.loads(source.read_text())
    change(document)
    path = tmp / name
    path.write_text(json.dumps(document))
    return path


def _text(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _set(*keys_and_value):
    *keys, value = keys_and_value

    def change(document: dict) -> None:
        target = document
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value

    return change


HEADLINE = ROOT / "examples" / "headline.json"
FLEET = DATA / "fleet.json"
SIM = DATA / "simulate" / "fleet.json"
MATRIX = ["--matrix-dir", str(DATA / "pairs")]


def _colocate(change):
    return lambda tmp: ["colocate", str(_json_with(HEADLINE, change, tmp))]


def _plan(change):
    return lambda tmp: ["plan", str(_json_with(FLEET, change, tmp)), *MATRIX]


def _simulate(change):
    return lambda tmp: ["simulate", str(_json_with(SIM, change, tmp)), *MATRIX]


def _empty_trace(tmp: Path) -> list[str]:
    _text(tmp, "trace.csv", "arrival_s,job\n")
    arrivals = {"kind": "trace", "path": "trace.csv"}
    return [
        "simulate",
        str(_json_with(SIM, _set("simulation", "arrivals", arrivals), tmp)),
        *MATRIX,
    ]


def _plan_rate(tmp: Path) -> list[str]:
    fleet = ROOT / "examples" / "fleet-h100x4.json"
    return ["plan", str(_json_with(fleet, lambda d: d["hp"][0].update(rate_per_s=800), tmp))]


def _plan_of_another_format(tmp: Path) -> list[str]:
    path = _text(tmp, "plan.json", json.dumps({"format": "orion-plan-2", "version": 2}))
    return ["colocate", str(path)]


def _huge_number(tmp: Path) -> list[str]:
    text = HEADLINE.read_text().replace('"duration_s": 30', '"duration_s": ' + "9" * 5000)
    return ["colocate", str(_text(tmp, "jobs.json", text))]


def _nested_run_json(tmp: Path) -> list[str]:
    _text(tmp, "run/run.json", "[" * 100_000 + "]" * 100_000)
    return ["report", str(tmp / "run")]


BAD_FILES = [
    ("jobs: a 5000-digit duration_s", _huge_number, "a number is too long to read"),
    (
        "jobs: batch_size 10^30",
        _colocate(lambda d: d["clients"][0].update(batch_size=10**30)),
        "batch_size",
    ),
    ("jobs: warmup_steps 10^30", _colocate(_set("run", "warmup_steps", 10**30)), "warmup_steps"),
    ("jobs: duration_s 1e15", _colocate(_set("run", "duration_s", 1e15)), "duration_s"),
    (
        "jobs: HP rate 1e308 per s",
        _colocate(lambda d: d["clients"][0]["arrivals"].update(rate_per_s=1e308)),
        "clients[0].arrivals.rate_per_s: must be <= 1000000",
    ),
    ("report: deeply nested run.json", _nested_run_json, "nested too deeply"),
    ("plan: count 1e9 GPUs", _plan(lambda d: d["gpus"][0].update(count=10**9)), "at most 4,096"),
    ("plan: HP rate 800/s, measured at 80/s", _plan_rate, "was measured at 80/s"),
    ("simulate: duration_s 1e15", _simulate(_set("simulation", "duration_s", 1e15)), "at most"),
    (
        "simulate: jobs_per_hour 1e9",
        _simulate(_set("simulation", "arrivals", {"kind": "poisson", "jobs_per_hour": 1e9})),
        "jobs_per_hour: must be at most",
    ),
    ("simulate: round_s 1e-3", _simulate(_set("simulation", "round_s", 1e-3)), "rounds over"),
    ("simulate: an empty arrivals trace", _empty_trace, "holds no arrivals"),
    (
        "colocate: a plan of another format",
        _plan_of_another_format,
        "is a plan (format 'orion-plan-2'), not a jobs file",
    ),
    ("plan: BE weight 1e308", _plan(lambda d: d["be"][0].update(weight=1e308)), "weight"),
    (
        "plan: a GPU kind of 5000 characters",
        _plan(lambda d: d["gpus"][0].update(kind="k" * 5000)),
        "no pair matrix for GPU kind",
    ),
    (
        "plan: 1000 GPUs beside 2000 BE jobs",
        _plan(
            lambda d: d.update(
                gpus=[{"kind": d["gpus"][0]["kind"], "count": 1000}],
                be=[{"name": f"b{i}", "job": d["be"][i % 3]["job"]} for i in range(2000)],
            )
        ),
        "more than 200,000 placement options",
    ),
    (
        "simulate: jobs_per_hour 1e-300",
        _simulate(_set("simulation", "arrivals", {"kind": "poisson", "jobs_per_hour": 1e-300})),
        "brought no job",
    ),
    (
        "simulate: iterations 1e30",
        _simulate(lambda d: d["simulation"]["job_mix"][0].update(iterations=1e30)),
        "iterations: must be at most",
    ),
]


@pytest.mark.parametrize(("case", "make", "message"), BAD_FILES, ids=[c[0] for c in BAD_FILES])
def test_a_bad_file_is_one_error_line_naming_the_bound(
    case: str, make, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    result = runner.invoke(app, make(tmp_path))
    assert not isinstance(result.exception, Exception), result.output  # no traceback
    assert result.exit_code == 1, result.output
    assert message in result.output, result.output
    assert "no NVIDIA GPU" not in result.output


# --- options checked before the machine (issue 38): one row each, with its exit status --------
# 2: the command was called wrongly (an option out of its range, options that contradict each
# other), as typer exits for usage; 1: anything else (a folder that cannot be written, a file's
# content); 126: the shell's status for a command found but not executable.

UP = ["up", "--state-dir", "{tmp}/state"]
RUN_BE = ["run", "--be", "--state-dir", "{tmp}/state"]
RUN_HP = ["run", "--hp", "--state-dir", "{tmp}/state"]
RUN_PLAN = ["run-plan", "{plan}", "-o", "{tmp}/plan-runs"]
BEFORE_THE_MACHINE = [
    ("up --policy nosuch", [*UP, "--policy", "nosuch"], "policy must be one of orion", 2),
    ("up --sharing mig", [*UP, "--sharing", "mig"], "sharing must be one of mps, timeslice", 2),
    (
        "up priority time-sliced",
        [*UP, "--policy", "priority", "--sharing", "timeslice"],
        "policy 'priority' runs under 'mps' only",
        2,
    ),
    ("up --queue-limit-us inf", [*UP, "--queue-limit-us", "inf"], "--queue-limit-us must be", 2),
    ("up --queue-limit-us nan", [*UP, "--queue-limit-us", "nan"], "'--queue-limit-us'", 2),
    (
        "up --be-when-daemon-gone shut",
        [*UP, "--be-when-daemon-gone", "shut"],
        "be_when_daemon_gone must be one of open, hold (got 'shut')",
        2,
    ),
    (
        "up --daemon-gone-hold-s 0",
        [*UP, "--be-when-daemon-gone", "hold", "--daemon-gone-hold-s", "0"],
        "daemon_gone_hold_s must be over 0 and at most 3600 s (got 0)",
        2,
    ),
    ("up --state-dir /proc", ["up", "--state-dir", "{proc}"], "cannot write state folder", 1),
    ("up --state-dir a file", ["up", "--state-dir", "{file}"], "is a file, not a folder", 1),
    ("run --min-util 1.5", [*RUN_BE, "--min-util", "1.5", "--", "true"], "(got 1.5)", 2),
    ("run --min-util -0.1", [*RUN_BE, "--min-util", "-0.1", "--", "true"], "(got -0.1)", 2),
    ("run --min-util nan", [*RUN_BE, "--min-util", "nan", "--", "true"], "(got nan)", 2),
    ("run --max-util 2", [*RUN_BE, "--max-util", "2", "--", "true"], "max_util must be", 2),
    (
        "run min above max",
        [*RUN_BE, "--min-util", "0.6", "--max-util", "0.4", "--", "true"],
        "min_util 0.6 is above max_util 0.4",
        2,
    ),
    (
        "run --latency-target-ms -5",
        [*RUN_HP, "--latency-target-ms", "-5", "--", "true"],
        "--latency-target-ms must be a positive number (got -5)",
        2,
    ),
    (
        "run --latency-target-ms nan",
        [*RUN_HP, "--latency-target-ms", "nan", "--", "true"],
        "(got nan)",
        2,
    ),
    (
        "run --latency-target-ms inf",
        [*RUN_HP, "--latency-target-ms", "inf", "--", "true"],
        "(got inf)",
        2,
    ),
    (
        "run --latency-target-ms on BE",
        [*RUN_BE, "--latency-target-ms", "5", "--", "true"],
        "a BE client has none",
        2,
    ),
    (
        "run --hp-context on BE",
        [*RUN_BE, "--hp-context", "own", "--", "true"],
        "--hp-context is where the HP client runs",
        2,
    ),
    (
        "run an --hp-context not declared",
        [*RUN_HP, "--hp-context", "apart", "--", "true"],
        "--hp-context: hp_context must be one of mps, own (got 'apart')",
        2,
    ),
    (
        "run --no-daemon --hp-context own",
        ["run", "--no-daemon", "--hp-context", "own", "--", "true"],
        "--hp-context cannot apply with --no-daemon",
        2,
    ),
    (
        "run --no-daemon --memory-limit 4GiB",
        ["run", "--no-daemon", "--memory-limit", "4GiB", "--", "true"],
        "--memory-limit cannot apply with --no-daemon",
        2,
    ),
    (
        "run --no-daemon --memory-limit 4gib",
        ["run", "--no-daemon", "--memory-limit", "4gib", "--", "true"],
        '"4gib" is not a size',
        2,
    ),
    ("run --memory-limit 4gib", [*RUN_BE, "--memory-limit", "4gib", "--", "true"], "4gib", 2),
    ("run --name of 40", [*RUN_BE, "--name", "n" * 40, "--", "true"], "1 to 31 bytes", 2),
    ("run --name ''", [*RUN_BE, "--name", "", "--", "true"], "1 to 31 bytes (got '')", 2),
    ("run a file, not a program", [*RUN_BE, "--", "{file}"], "Permission denied", 126),
    (
        "colocate --policy nope",
        ["colocate", "examples/headline.json", "--policy", "nope"],
        "--policy: unknown policy 'nope'",
        2,
    ),
    (
        "colocate --duration -1",
        ["colocate", "examples/headline.json", "--duration", "-1"],
        "--duration: must be > 0 (got -1)",
        2,
    ),
    (
        "colocate --duration nan",
        ["colocate", "examples/headline.json", "--duration", "nan"],
        "--duration: must be a finite number",
        2,
    ),
    ("run-plan a bogus policy", ["run-plan", "{bogus_plan}"], "gpus[0].policy: must be one", 1),
    ("run-plan -d nan", [*RUN_PLAN, "-d", "nan"], "--duration: must be a finite number", 2),
    ("run-plan -d -1", [*RUN_PLAN, "-d", "-1"], "--duration: must be > 0 (got -1)", 2),
    ("run-plan -o /proc", ["run-plan", "{plan}", "-o", "{proc}"], "cannot write plan-run", 1),
    # issue 38's cases that were not listed: each was taken and then said only the machine's
    # problem (or, for a contradiction, the run directory's)
    (
        "up --daemon-gone-hold-s without hold",
        [*UP, "--daemon-gone-hold-s", "5"],
        "daemon_gone_hold_s applies only when be_when_daemon_gone is 'hold' (got 'open')",
        2,
    ),
    (
        "up passthrough --shares",
        [*UP, "--policy", "passthrough", "--shares"],
        "GPU-time shares need a policy that holds work back",
        2,
    ),
    (
        "run --profile not a profile",
        [*RUN_BE, "--profile", "{file}", "--", "true"],
        "is not an orion profile",
        1,
    ),
    (
        "status --save-profile to /proc",
        ["status", "--state-dir", "{tmp}/state", "--save-profile", "web", "{proc}/p.csv"],
        "cannot write profile file",
        1,
    ),
    (
        "status --save-profile --json",
        ["status", "--state-dir", "{tmp}/state", "--json", "--save-profile", "web", "{tmp}/p"],
        "--save-profile writes a file and shows nothing: not with --json",
        2,
    ),
    (
        "status --json --watch",
        ["status", "--state-dir", "{tmp}/state", "--json", "--watch"],
        "--json prints one object, --watch refreshes a table: give one",
        2,
    ),
    (
        "quota min above max",
        ["quota", "{tmp}/no-run", "be", "--min-util", "0.6", "--max-util", "0.4"],
        "min_util 0.6 is above max_util 0.4",
        2,
    ),
]


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A plan of the placement fixtures, and the same with a policy no jobs file knows."""
    folder = tmp_path_factory.mktemp("plans")
    plan = folder / "plan.json"
    result = runner.invoke(
        app,
        ["plan", str(DATA / "fleet.json"), "--matrix-dir", str(DATA / "pairs"), "-o", str(plan)],
    )
    assert result.exit_code == 0, result.output
    bogus = _json_with(plan, lambda d: d["gpus"][0].update(policy="bogus"), folder, "bogus.json")
    return {"plan": str(plan), "bogus_plan": str(bogus)}


@pytest.mark.parametrize(
    ("case", "args", "message", "status"),
    BEFORE_THE_MACHINE,
    ids=[c[0] for c in BEFORE_THE_MACHINE],
)
def test_an_option_is_checked_before_the_machine(
    case: str,
    args: list[str],
    message: str,
    status: int,
    plans: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os

    def no_exec(*arguments: object) -> None:
        raise AssertionError(f"orion run started the program: {arguments}")

    monkeypatch.setattr(os, "execve", no_exec)  # a row that is not refused must not exec
    monkeypatch.chdir(ROOT)
    (tmp_path / "existing.txt").write_text("keep me\n")
    filled = [arg.format(**plans) if arg.strip("{}") in plans else arg for arg in args]
    result = runner.invoke(app, _fill(filled, tmp_path))
    assert not isinstance(result.exception, Exception), result.output  # no traceback
    output = " ".join(result.output.split())
    assert message in output, result.output
    assert result.exit_code == status, result.output
    machines = ("no NVIDIA GPU", "no orion daemon", "this host has", "preload library", "no run")
    for machine in machines:
        assert machine not in output, result.output
    errors = [
        line for line in result.output.splitlines() if "rror:" in line or "orion run:" in line
    ]
    assert len(errors) == 1, result.output  # one line says it (a hint may follow)
    assert not (tmp_path / "plan-runs").exists()  # nothing started, nothing written
