"""The suite: real HP x BE program pairs on one GPU each, under orion and what users pick instead.

Each pair of the suite file (``benchmarks/suite.json``: programs of ``examples/programs/``,
written as users write them, and the pairs to run) is run, in every round, as:

- each of its programs **alone** on the GPU (the reference, same round, same GPU);
- the pair under **orion** as users run it: ``orion up`` with its defaults, and nothing but
  ``orion run --hp|--be`` in front of each command (no profiles);
- the pair as **plain processes** (the driver time-slices their contexts), under **MPS**, and
  under MPS with the BE clients at the lower MPS client priority (``CUDA_MPS_CLIENT_PRIORITY=1``;
  unmodified programs cannot raise their own stream priorities).

Programs join in the pair's order (``be-first``: the trainers are running when the service
starts; ``hp-first``: the service runs, alone under orion for ``--learn-s`` seconds, before the
trainers join). The measured window opens once every program of the cell has written its ready
mark (its warm-up is over) and lasts ``--window`` seconds; then every program is stopped with
SIGINT and writes its record. The HP's Poisson arrivals start over from their seed where the
window opens (the suite names that time in ``hp.csv.window``), so its alone run and every mode
serve the same arrivals in their windows and a p99 ratio compares like with like.
``reporting/suite.py`` turns the records into ratios with intervals; ``orion report OUT`` prints
them.

Several GPUs run pairs at once, a worker process per GPU: the pairs are spread over the GPUs
(pairs with the same HP program together, so its alone run serves them all), and every GPU runs
its own alone runs in each round. Rounds run one after another, all GPUs in step.

Rounds can be added to a run later (another session, another host of the same GPU kind) with
``--first-round``: each round records the digest of the code it ran (``roundN/round.json``; the
packages a round runs, not those for reports, plans and Ray), and the summary refuses to pool
rounds of different code or GPU kinds. Each round runs its own copy of the program scripts
(``roundN/programs/``), kept with its results.

    python benchmarks/suite.py --out results/suite --rounds 3 --window 30 --gpus 0,1,2,3
    python benchmarks/suite.py --out results/suite --rounds 1 --first-round 3 ...  # one more
    python benchmarks/suite.py --out results/suite --summarise-only
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

ROOT = Path(__file__).resolve().parent.parent
# The driver reads records with this checkout's code; the orion commands it runs start in the
# cells' folders, outside the checkout, so they are the installed orion's, with its library.
sys.path.insert(0, str(ROOT))

from orion_common.errors import OrionError  # noqa: E402
from reporting.suite import (  # noqa: E402
    HP_ALONE_PAIR,
    HP_CHOOSES_MODES,
    MODES,
    NEIGHBOURS_IDLE,
    ORION_MODE,
    ORION_VARIANTS,
    ROUND_RECORD,
    SUITE_FORMAT,
    summarise,
    summary_table,
)
from scheduler_core.settings import HP_CONTEXT  # noqa: E402

LONG_RUN_S = 3600.0
"""The ``--duration`` every program gets: far past any window, since the suite stops them."""
READY_TIMEOUT_S = 420.0
"""How long a program may take to warm up (XLA and Inductor compile on their first run)."""
STOP_TIMEOUT_S = 60.0
POLL_S = 0.5
"""How often a cell's window checks that its programs still run."""
WINDOW_LEAD_S = 0.5
"""The least time between naming a window's opening to the HP (``hp.csv.window``) and the
opening: the service restarts its arrivals there only if it reads the name first. The ready marks
are found by polling, so on a busy machine ``--settle-s`` after the last one can already be past
when the runner gets to it, and the HP would have served old arrivals inside the window."""


class Program(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["hp", "be"]
    argv: list[str] = Field(min_length=1, description="the script in examples/programs, its args")
    about: str = ""
    hp_context: str | None = Field(
        default=None,
        description="HP only: the `orion run --hp --hp-context` its owner starts it with, in "
        "the modes that let each HP choose (reporting.suite.HP_CHOOSES_MODES)",
    )

    @field_validator("hp_context")
    @classmethod
    def _a_declared_context(cls, value: str | None) -> str | None:
        return HP_CONTEXT.parse(value)  # its ValueError is pydantic's validation error

    @property
    def requests_per_s(self) -> float | None:
        """The arrival rate a service is started with (its ``--rate``); None for a program
        without one (a trainer)."""
        if "--rate" not in self.argv[:-1]:
            return None
        return float(self.argv[self.argv.index("--rate") + 1])

    @model_validator(mode="after")
    def _a_rate_is_a_rate(self) -> Program:
        try:
            rate = self.requests_per_s
        except ValueError:
            rate = float("nan")
        if rate is not None and not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"--rate in {self.argv} is not a positive number of requests/s")
        return self


def hp_context_options(program: Program, mode: str) -> list[str]:
    """``--hp-context`` as ``program``'s owner starts it, in a mode that lets each HP choose."""
    choice = program.hp_context
    return ["--hp-context", choice] if choice and mode in HP_CHOOSES_MODES else []


def daemon_options(mode: str, hp_program: Program | None) -> list[str]:
    """``orion up``'s options for ``mode``; in a mode that lets each HP choose, the daemon is
    started for the pair's HP as its owner would start it, with the HP's ``--hp-context``: the
    daemon's context decides whether a BE client that joins before the HP gets its SM share
    (scheduler_core.sharing.be_sm_share_applies)."""
    options = list(ORION_VARIANTS.get(mode, ()))
    chosen = hp_context_options(hp_program, mode) if hp_program is not None else []
    if chosen and "--hp-context" in options:
        at = options.index("--hp-context")
        options[at : at + 2] = chosen
    return options


class Pair(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hp: str | None = None
    be: list[str] = Field(
        default_factory=list,
        description="its BE programs; none: the HP alone under each mode, which measures what "
        "the mode itself costs the HP (reporting.suite.HP_ALONE_PAIR, never scored)",
    )
    order: Literal["be-first", "hp-first"] = "hp-first"

    @property
    def name(self) -> str:
        return "+".join([self.hp or "?", *(self.be or [HP_ALONE_PAIR])])


def with_hp_alone(pairs: list[Pair]) -> list[Pair]:
    """``pairs`` and, for each HP among them without one yet, a pair of that HP and no BE."""
    alone = [Pair(hp=hp) for hp in dict.fromkeys(p.hp for p in pairs if p.hp is not None)]
    return [*pairs, *(p for p in alone if p.name not in {q.name for q in pairs})]


class Suite(BaseModel):
    """A suite file: its programs and the pairs to run."""

    model_config = ConfigDict(extra="forbid")
    format: Literal[SUITE_FORMAT]  # type: ignore[valid-type]
    name: str = "suite"
    programs_dir: str = Field(
        default="../examples/programs", description="where the scripts are, from the suite file"
    )
    programs: dict[str, Program]
    pairs: list[Pair] = Field(min_length=1)

    @property
    def scripts(self) -> Path:
        return Path(self.programs_dir)

    @model_validator(mode="after")
    def _pairs_name_programs(self, info: ValidationInfo) -> Suite:
        base = (info.context or {}).get("base", ROOT / "benchmarks")
        self.programs_dir = str((base / self.programs_dir).resolve())
        problems = []
        first_of: dict[str, int] = {}
        for name, program in self.programs.items():
            script = self.scripts / program.argv[0]
            if not script.is_file():
                problems.append(f"program {name}: no such script: {script}")
            if program.hp_context is not None and program.role != "hp":
                problems.append(f"program {name}: hp_context is an HP program's choice")
        for index, pair in enumerate(self.pairs):
            where = f"pair {index + 1} ({pair.name})"
            if pair.hp is None:
                problems.append(f"{where}: no HP program")
            for name, role in [(pair.hp, "hp"), *((b, "be") for b in pair.be)]:
                if name is None:
                    continue
                if name not in self.programs:
                    problems.append(f"{where}: no program named {name!r}")
                elif self.programs[name].role != role:
                    problems.append(f"{where}: {name} is a {self.programs[name].role} program")
            if len(set(pair.be)) != len(pair.be):
                problems.append(f"{where}: a BE program twice")
            if pair.name in first_of:
                problems.append(
                    f"{where}: the same programs as pair {first_of[pair.name]}, whatever the "
                    "order: a run names its cells after their programs (make a second suite file)"
                )
            first_of.setdefault(pair.name, index + 1)
        if problems:
            raise ValueError("; ".join(problems))
        return self


PROGRAMS_COPY = "programs"
"""A round's folder's copy of the suite's program scripts, which its cells run."""


def snapshot_programs(suite: Suite, round_folder: Path) -> Path:
    """Copy the suite's program scripts into the round's folder for its cells to run: the round
    keeps what it ran beside its results, and a checkout changed under a round of many minutes
    (a script edited, the tree copied again) cannot fail or alter its later cells."""
    copy = round_folder / PROGRAMS_COPY
    shutil.copytree(
        suite.scripts, copy, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True
    )
    return copy


def load_suite(path: Path) -> Suite:
    """The suite file, or SystemExit with one line per problem, before any GPU work."""
    try:
        return Suite.model_validate_json(path.read_text(), context={"base": path.parent})
    except OSError as error:
        raise SystemExit(f"suite: {path}: {error.strerror}") from None
    except ValidationError as error:
        lines = []
        for problem in error.errors():
            where = ".".join(str(part) for part in problem["loc"])
            message = problem["msg"].removeprefix("Value error, ")
            lines += [
                f"suite: {path}: {where + ': ' if where else ''}{item}"
                for item in message.split("; ")
            ]
        raise SystemExit("\n".join(lines)) from None


# ---- planning -----------------------------------------------------------------------------


def assign(pairs: list[Pair], gpus: list[int], modes: list[str]) -> dict[int, list[Pair]]:
    """Pairs per GPU: pairs of one HP program together (their alone runs are shared), groups
    placed largest first on the GPU with the least work so far."""
    groups: dict[str, list[Pair]] = {}
    for pair in pairs:
        groups.setdefault(pair.hp or "", []).append(pair)
    load = {gpu: 0.0 for gpu in gpus}
    placed: dict[int, list[Pair]] = {gpu: [] for gpu in gpus}
    chunks = []
    share = math.ceil(len(pairs) / len(gpus))
    for group in groups.values():  # a group larger than a GPU's share is split
        chunks += [group[i : i + share] for i in range(0, len(group), share)]
    for chunk in sorted(chunks, key=len, reverse=True):
        gpu = min(load, key=lambda g: (load[g], g))
        placed[gpu] += chunk
        programs = {p.hp for p in placed[gpu]} | {b for p in placed[gpu] for b in p.be}
        load[gpu] = len(placed[gpu]) * len(modes) + len(programs)
    return placed


def cell_window(suite: Suite, cell: dict, window_s: float, hp_requests: int) -> float:
    """The measured seconds of ``cell``: ``window_s``, or longer where its HP needs longer for
    ``hp_requests`` arrivals at its rate (a judging run's 5,000 requests take an LLM decoder at 20
    requests/s 250 s, a service at 80/s 62.5 s); a trainer alone keeps ``window_s``."""
    name = cell["program"] if cell["kind"] == "alone" else cell["hp"]
    rate = suite.programs[name].requests_per_s if suite.programs[name].role == "hp" else None
    return max(window_s, hp_requests / rate) if rate else window_s


def cells_of(round_: int, pairs: list[Pair], modes: list[str]) -> list[dict]:
    """One GPU's runs in one round: its programs alone, then each pair under each mode, the
    modes' order rotated from round to round (A B C, B C A, ...)."""
    programs: list[str] = []
    for pair in pairs:
        for name in [pair.hp, *pair.be]:
            if name not in programs:
                programs.append(name)
    cells = [{"kind": "alone", "program": name, "id": f"alone-{name}"} for name in programs]
    rotated = modes[round_ % len(modes) :] + modes[: round_ % len(modes)]
    for mode in rotated:
        for pair in pairs:
            cells.append(
                {
                    "kind": "shared",
                    "pair": pair.name,
                    "hp": pair.hp,
                    "be": pair.be,
                    "order": pair.order,
                    "mode": mode,
                    "id": f"{mode}-{pair.name}",
                }
            )
    return cells


# ---- running one GPU's cells (the worker) -------------------------------------------------


def orion_cli(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "orion_cli.app", *arguments]


def program_command(suite: Suite, name: str, out: Path) -> list[str]:
    program = suite.programs[name]
    script, *arguments = program.argv
    return [
        sys.executable,
        str(suite.scripts / script),
        *arguments,
        "--duration",
        str(LONG_RUN_S),
        "--out",
        str(out),
    ]


class CellFailed(Exception):
    pass


def left_estimate(spent_s: float, done: int, total: int) -> str:
    """What a GPU's round has left, at the pace of its cells so far: on a machine lent for a
    fixed time, whether the round will end inside it."""
    if done >= total:
        return "round done"
    left_s = spent_s / done * (total - done)
    return f"about {left_s / 60:.0f} min left" if left_s >= 90 else f"about {left_s:.0f} s left"


class Worker:
    """Runs one GPU's cells one after another, each recorded in its own folder."""

    def __init__(self, suite: Suite, gpu: int, args: argparse.Namespace) -> None:
        self.suite = suite
        self.gpu = gpu
        self.args = args
        self.environment = {
            k: v for k, v in os.environ.items() if not k.startswith(("CUDA_MPS_", "ORION_"))
        }
        self.environment["CUDA_VISIBLE_DEVICES"] = str(gpu)
        self.environment["PYTHONUNBUFFERED"] = "1"
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)  # what a private MPS daemon serves

    def run(self, round_: int, cells: list[dict]) -> None:
        failed_alone: set[str] = set()
        spent_s = 0.0
        for done, cell in enumerate(cells, start=1):
            folder = self.args.out / f"round{round_}" / f"gpu{self.gpu}" / cell["id"]
            folder.mkdir(parents=True, exist_ok=True)
            window_s = cell_window(self.suite, cell, self.args.window, self.args.hp_requests)
            cell = {**cell, "window_s": window_s}
            record = {**cell, "round": round_, "gpu": self.gpu}
            needed = [cell["program"]] if cell["kind"] == "alone" else [cell["hp"], *cell["be"]]
            skipped = [name for name in needed if name in failed_alone]
            started = time.time()
            try:
                if cell["kind"] == "shared" and skipped:
                    raise CellFailed(f"not run: the alone run of {', '.join(skipped)} failed")
                record.update(self.run_cell(cell, folder))
                record["status"] = "ok"
            except CellFailed as error:
                record.update(status="failed", error=str(error))
                if cell["kind"] == "alone":
                    failed_alone.add(cell["program"])
            record["wall_s"] = round(time.time() - started, 1)
            (folder / "cell.json").write_text(json.dumps(record, indent=1))
            status = record["status"] + (f": {record['error']}" if "error" in record else "")
            spent_s += record["wall_s"]
            print(
                f"round {round_} gpu {self.gpu} [{done}/{len(cells)}] {cell['id']}: {status} "
                f"({record['wall_s']} s; {left_estimate(spent_s, done, len(cells))})",
                flush=True,
            )

    def groups_of(self, cell: dict) -> list[list[tuple[str, str]]]:
        """(client key, program) in groups that join together, in joining order; the HP's key is
        always ``hp``. A group starts at once and the next waits for all its ready marks."""
        if cell["kind"] == "alone":
            program = cell["program"]
            return [[("hp" if self.suite.programs[program].role == "hp" else program, program)]]
        bes = [(name, name) for name in cell["be"]]
        hp = [("hp", cell["hp"])]
        groups = [bes, hp] if cell["order"] == "be-first" else [hp, bes]
        return [group for group in groups if group]  # an HP alone under a mode: one group

    def run_cell(self, cell: dict, folder: Path) -> dict:
        mode = cell.get("mode", "alone")
        environment = dict(self.environment)
        if mode in ("mps", "mps-priority"):
            from orion_daemon.mps import private_mps_daemon

            notes: list[str] = []
            with private_mps_daemon(folder, notes=notes) as daemon:
                environment.update(daemon.environment)
                # An MPS client's CUDA numbers the GPUs of its MPS server (this one) from 0, so
                # CUDA_VISIBLE_DEVICES=<index> names a GPU that is not there ("no CUDA GPUs").
                # Unset, torch counts devices through NVML, which MPS does not narrow (4 on a
                # 4-GPU host), and fails at device 1. 0 is right for both.
                environment["CUDA_VISIBLE_DEVICES"] = "0"
                result = self.run_clients(cell, folder, environment, mode)
            result["notes"] = notes
            return result
        if mode == ORION_MODE or mode in ORION_VARIANTS:
            state = folder / "state"
            environment.pop("CUDA_VISIBLE_DEVICES")  # orion run sets it to the daemon's GPU
            hp = self.suite.programs[cell["hp"]] if cell.get("hp") else None
            up = self.daemon_command("up", state, environment, folder, *daemon_options(mode, hp))
            if up != 0:
                raise CellFailed(f"orion up failed ({up}): see orion-up.log")
            try:
                return self.run_clients(cell, folder, environment, mode, state)
            finally:
                self.daemon_command("down", state, environment, folder)
        return self.run_clients(cell, folder, environment, mode)

    def daemon_command(
        self, verb: str, state: Path, environment: dict[str, str], folder: Path, *options: str
    ) -> int:
        """``orion up`` or ``orion down`` for this GPU and the cell's state folder (with
        ``options``), its output in ``orion-<verb>.log``; returns its exit status."""
        done = subprocess.run(
            orion_cli(verb, "--gpu", str(self.gpu), "--state-dir", str(state), *options),
            env=environment, capture_output=True, text=True, timeout=180, cwd=folder, check=False,
        )  # fmt: skip
        (folder / f"orion-{verb}.log").write_text(done.stdout + done.stderr)
        return done.returncode

    def run_clients(
        self,
        cell: dict,
        folder: Path,
        environment: dict[str, str],
        mode: str,
        state: Path | None = None,
    ) -> dict:
        processes: dict[str, subprocess.Popen] = {}
        clients = {}
        ready: dict[str, float] = {}
        samples: list[dict] = []
        try:
            groups = self.groups_of(cell)
            for index, group in enumerate(groups):
                for key, program in group:
                    processes[key] = self.start(key, program, folder, environment, mode, state)
                    clients[key] = {
                        "program": program,
                        "out": f"{key}.csv",
                        "log": f"{key}.log",
                        "command": processes[key].args,
                    }
                for key, _ in group:
                    ready[key] = self.wait_ready(key, folder / f"{key}.csv", processes[key])
                if state is not None and group[0][0] == "hp" and index + 1 < len(groups):
                    time.sleep(self.args.learn_s)  # the daemon sees the HP alone first
            start = max(max(ready.values()) + self.args.settle_s, time.time() + WINDOW_LEAD_S)
            end = start + cell["window_s"]
            for client in clients.values():
                if self.suite.programs[client["program"]].role == "hp":
                    # Its arrivals start over from their seed here (program_io.Schedule), so
                    # that alone and every mode serve the same arrivals in the window. Renamed
                    # into place: the service never reads half of the time.
                    written = folder / f"{client['out']}.window.part"
                    written.write_text(f"{start:.6f}\n")
                    written.replace(folder / f"{client['out']}.window")
            next_sample = time.time() + self.args.status_every_s / 2
            while time.time() < end:
                for key, process in processes.items():
                    if process.poll() is not None:
                        raise CellFailed(
                            f"{key} exited with {process.returncode} inside the "
                            f"window: see {key}.log"
                        )
                if (
                    state is not None
                    and self.args.status_every_s > 0
                    and time.time() >= next_sample
                ):
                    samples.append(self.status_sample(state))
                    next_sample += self.args.status_every_s
                time.sleep(min(POLL_S, max(0.0, end - time.time())))
        finally:
            self.stop(processes)
            if samples:
                (folder / "status_samples.json").write_text(json.dumps(samples, indent=1))
        for key, process in processes.items():
            if process.returncode not in (0, -signal.SIGINT):
                raise CellFailed(f"{key} exited with {process.returncode}: see {key}.log")
        return {"clients": clients, "ready": ready, "window": [start, end]}

    def start(
        self,
        key: str,
        program: str,
        folder: Path,
        environment: dict[str, str],
        mode: str,
        state: Path | None,
    ) -> subprocess.Popen:
        """One program of a cell, as its mode runs it, its output in ``folder``."""
        command = program_command(self.suite, program, folder / f"{key}.csv")
        client_env = dict(environment)
        if state is not None:  # under an orion daemon
            role = self.suite.programs[program].role
            command = orion_cli(
                "run",
                f"--{role}",
                "--gpu",
                str(self.gpu),
                "--state-dir",
                str(state),
                "--name",
                key,
                *hp_context_options(self.suite.programs[program], mode),
                "--",
                *command,
            )
        if mode == "mps-priority" and key != "hp":
            client_env["CUDA_MPS_CLIENT_PRIORITY"] = "1"
        with (folder / f"{key}.log").open("w") as log:
            return subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=client_env,
                cwd=folder,
                start_new_session=True,
            )

    def wait_ready(self, key: str, out: Path, process: subprocess.Popen) -> float:
        mark = Path(f"{out}.ready")
        deadline = time.time() + READY_TIMEOUT_S
        while time.time() < deadline:
            if mark.is_file():
                text = mark.read_text().strip()
                if text:
                    return float(text)
            if process.poll() is not None:
                raise CellFailed(
                    f"{key} exited with {process.returncode} before it was ready: see {key}.log"
                )
            time.sleep(0.2)
        raise CellFailed(f"{key} was not ready within {READY_TIMEOUT_S:.0f} s: see {key}.log")

    def status_sample(self, state: Path) -> dict:
        """What `orion status --json` shows, asked of the daemon from this process. Not through
        `orion status`: starting a Python process with the CLI's imports every few seconds
        slowed an eager HP beside it by 3-5x for about 100 ms each time (measured on an H200,
        `benchmarks/results/nvidia-h200/suite-variants/`), which the orion rows alone paid."""
        from orion_daemon import client as daemon_client
        from orion_daemon import state as daemon_state

        try:
            record = daemon_state.require_daemon(self.gpu, daemon_state.state_dir(self.gpu, state))
            return {"time": time.time(), **daemon_client.status(record, timeout_s=30)}
        except OrionError as error:
            return {"time": time.time(), "error": str(error)[-300:]}

    @staticmethod
    def stop(processes: dict[str, subprocess.Popen]) -> None:
        """SIGINT to every program (HP first), then SIGKILL to what outlives the bound."""
        for key in sorted(processes, key=lambda k: k != "hp"):
            if processes[key].poll() is None:
                os.killpg(processes[key].pid, signal.SIGINT)
        deadline = time.time() + STOP_TIMEOUT_S
        for process in processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


# ---- the driver ---------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the suite run's folder")
    parser.add_argument("--suite", type=Path, default=ROOT / "benchmarks" / "suite.json")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds to run")
    parser.add_argument(
        "--first-round",
        type=int,
        default=0,
        help="the first round's number (to add rounds to a run)",
    )
    parser.add_argument("--window", type=float, default=30.0, help="measured seconds per run")
    parser.add_argument(
        "--hp-requests",
        type=int,
        default=0,
        help="each cell's window long enough for this many arrivals of its HP at the HP's "
        "--rate (a judging run: 5000); 0: --window for every cell",
    )
    parser.add_argument(
        "--settle-s",
        type=float,
        default=2.0,
        help="seconds after the last ready mark before the window opens",
    )
    parser.add_argument(
        "--learn-s",
        type=float,
        default=10.0,
        help="hp-first under orion: seconds the HP runs alone before BE joins",
    )
    parser.add_argument("--gpus", default="0", help="GPU indices, comma-separated")
    parser.add_argument(
        "--status-every-s",
        type=float,
        default=5.0,
        help="seconds between the daemon's status samples in orion cells (0: none)",
    )
    parser.add_argument("--modes", default=",".join(MODES), help="sharing modes to run")
    parser.add_argument("--pairs", help="only these pairs (names as in the summary)")
    parser.add_argument(
        "--summarise-only", action="store_true", help="summary.json from the cells already in --out"
    )
    parser.add_argument(
        "--neighbour-check",
        action="store_true",
        help="first run the first GPU's HP alone with the other GPUs idle, to "
        "compare with its alone run in round 0 beside busy GPUs",
    )
    parser.add_argument(
        "--hp-alone",
        action="store_true",
        help="also run each HP of the pairs alone under every mode (pair <hp>+no-be, shown and "
        "never scored): what the mode itself costs it, against the same program without orion",
    )
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    problems = []
    if args.rounds < 1:
        problems.append("--rounds: at least 1")
    if not (math.isfinite(args.window) and args.window >= 1):
        problems.append("--window: at least 1 second")
    if args.hp_requests < 0:
        problems.append("--hp-requests: 0 or more")
    if not (math.isfinite(args.status_every_s) and args.status_every_s >= 0):
        problems.append("--status-every-s: 0 or more seconds")
    if not (math.isfinite(args.learn_s) and args.learn_s >= 0):
        problems.append("--learn-s: 0 or more seconds")
    try:
        args.gpu_list = [int(g) for g in args.gpus.split(",")]
        if min(args.gpu_list) < 0 or len(set(args.gpu_list)) != len(args.gpu_list):
            raise ValueError
    except ValueError:
        problems.append(f"--gpus: distinct GPU indices such as 0,1, not {args.gpus!r}")
    args.mode_list = [m for m in args.modes.split(",") if m]
    unknown = [m for m in args.mode_list if m not in MODES]
    if unknown or not args.mode_list:
        problems.append(f"--modes: {', '.join(unknown) or 'none'}; choose from {', '.join(MODES)}")
    if problems:
        raise SystemExit("\n".join(f"suite: {p}" for p in problems))
    return args


SAME_IN_EVERY_ROUND = ("programs", "pairs", "window_s", "hp_requests", "modes", "learn_s")
"""What rounds added to a run later must share with the run's suite.json to be pooled."""


def cannot_add_rounds(out: Path, record: dict, rounds: list[int | str]) -> str:
    """Why these rounds cannot go into ``out`` ('' when they can): ``out`` holds a run of another
    suite, window, modes or learning time, or one of the rounds already."""
    path = out / "suite.json"
    if path.is_file():
        existing = json.loads(path.read_text())
        unasked = {"hp_requests": 0}  # a run from before --hp-requests asked for none
        existing, record = {**unasked, **existing}, {**unasked, **record}
        differ = [k for k in SAME_IN_EVERY_ROUND if existing.get(k) != record.get(k)]
        if differ:
            return (
                f"{out} holds a run whose {', '.join(differ)} differ from these options; "
                "add rounds only with the same suite, --window, --hp-requests, --modes and "
                "--learn-s"
            )
    taken = [r for r in rounds if any((out / f"round{r}").glob("gpu*/*/cell.json"))]
    if taken:
        return (
            f"{out} already holds round {', '.join(map(str, taken))}; "
            "add rounds with --first-round past the last one"
        )
    return ""


def write_summary(out: Path) -> dict:
    try:
        summary = summarise(out)
    except OrionError as error:
        raise SystemExit(f"suite: {error.message}") from None
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(summary_table(summary).to_string(index=False))
    worst = summary["worst_pair"]
    if worst is not None:
        print(
            f"worst pair under orion: {worst['pair']} at {worst['hp_p99_ratio']['ratio']}x; "
            f"geometric mean {summary['geomean_hp_p99_ratio']}x"
        )
    return summary


SOURCE_SUFFIXES = (".py", ".cpp", ".h", ".json")


NOT_RUN_BY_A_ROUND = ("reporting", "placement", "orion")
"""orion's packages that a round's processes do not run: the layers above ``colocation``, for
``orion report``, ``orion plan`` and ``orion.ray`` (docs/architecture.md's layers). The daemon
and the library sit below them and never import them; ``orion up``/``run``/``status``/``down``
load a few of their modules as the CLI registers its commands, and call nothing in them
(tests/test_benchmark_suite.py checks the layers). A change to them leaves a series of rounds
one measurement of one scheduler."""


def source_digest(root: Path = ROOT) -> str:
    """What code a round ran, where no git history travels with it: SHA-256 of orion's packages
    that a round runs (the checkout's top-level folders with an ``__init__.py``, the native
    library's sources included, less :data:`NOT_RUN_BY_A_ROUND`) and the suite's own programs and
    runner, file by file in path order. Rounds added to a run later must show the same digest
    for the run to be summarised as one (reporting.suite.mixed_rounds)."""
    folders = [
        path.parent
        for path in root.glob("*/__init__.py")
        if path.parent.name not in NOT_RUN_BY_A_ROUND
    ]
    folders += [root / "examples" / "programs"]
    files = [root / "benchmarks" / "suite.py"]
    for folder in folders:
        files += [
            path
            for path in folder.rglob("*")
            if path.suffix in SOURCE_SUFFIXES and "__pycache__" not in path.parts
        ]
    digest = hashlib.sha256()
    for path in sorted(set(files)):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def device_record(gpus: list[int]) -> dict:
    """The GPUs, driver and software versions, for the results' README."""
    import platform

    record: dict = {"python": platform.python_version()}
    try:
        import pynvml

        pynvml.nvmlInit()
        record["driver"] = pynvml.nvmlSystemGetDriverVersion()
        record["gpus"] = {
            g: pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(g)) for g in gpus
        }
    except Exception as error:  # recorded, not fatal
        record["nvml_error"] = str(error)
    for module in ("torch", "jax", "cupy", "transformers"):
        try:
            record[module] = __import__(module).__version__
        except Exception:  # its cells fail with their logs
            record[module] = None
    return record


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    suite = load_suite(args.suite)
    if args.worker is not None:
        plan = json.loads(args.worker.read_text())
        suite.programs_dir = plan["programs_dir"]
        Worker(suite, plan["gpu"], args).run(plan["round"], plan["cells"])
        return
    if args.summarise_only:
        write_summary(args.out)
        return
    pairs = suite.pairs
    if args.pairs:
        wanted = args.pairs.split(",")
        unknown = [name for name in wanted if name not in {p.name for p in pairs}]
        if unknown:
            raise SystemExit(f"suite: --pairs: no pair {', '.join(unknown)} in {args.suite}")
        pairs = [p for p in pairs if p.name in wanted]
    if args.hp_alone:
        pairs = with_hp_alone(pairs)
        suite.pairs = [*suite.pairs, *(p for p in pairs if p not in suite.pairs)]
    args.out.mkdir(parents=True, exist_ok=True)
    placed = assign(pairs, args.gpu_list, args.mode_list)
    record = suite.model_dump()
    record.update(
        window_s=args.window,
        hp_requests=args.hp_requests,
        modes=args.mode_list,
        learn_s=args.learn_s,
        status_every_s=args.status_every_s,
        device=device_record(args.gpu_list),
        placement={g: [p.name for p in ps] for g, ps in placed.items()},
    )
    rounds: list[int | str] = list(range(args.first_round, args.first_round + args.rounds))
    if args.neighbour_check:
        rounds.insert(0, NEIGHBOURS_IDLE)
    problem = cannot_add_rounds(args.out, record, rounds)
    if problem:
        raise SystemExit(f"suite: {problem}")
    if not (args.out / "suite.json").is_file():
        (args.out / "suite.json").write_text(json.dumps(record, indent=1))
    digest = source_digest()
    for round_ in rounds:
        (args.out / f"round{round_}").mkdir(parents=True, exist_ok=True)
        round_record = {
            "round": round_,
            "orion_source": digest,
            "device": record["device"],
            "started_unix_s": time.time(),
            "argv": sys.argv[1:] if argv is None else argv,
        }
        (args.out / f"round{round_}" / ROUND_RECORD).write_text(json.dumps(round_record, indent=1))
        programs = snapshot_programs(suite, args.out / f"round{round_}")
        workers = []
        for gpu, gpu_pairs in placed.items():
            if not gpu_pairs or (round_ == NEIGHBOURS_IDLE and gpu != args.gpu_list[0]):
                continue
            plan_path = args.out / f"round{round_}" / f"gpu{gpu}.plan.json"
            plan_path.parent.mkdir(parents=True, exist_ok=True)
            cells = (
                [{"kind": "alone", "program": gpu_pairs[0].hp, "id": f"alone-{gpu_pairs[0].hp}"}]
                if round_ == NEIGHBOURS_IDLE
                else cells_of(round_, gpu_pairs, args.mode_list)
            )
            plan = {"gpu": gpu, "round": round_, "cells": cells, "programs_dir": str(programs)}
            plan_path.write_text(json.dumps(plan))
            command = [
                sys.executable,
                __file__,
                *(argv or sys.argv[1:]),
                "--worker",
                str(plan_path),
            ]
            workers.append(subprocess.Popen(command))
        try:
            for worker in workers:
                worker.wait()
        except KeyboardInterrupt:
            for worker in workers:
                worker.send_signal(signal.SIGINT)
            for worker in workers:
                worker.wait()
            raise
    write_summary(args.out)


if __name__ == "__main__":
    main()
