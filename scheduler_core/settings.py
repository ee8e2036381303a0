"""Settings a user gives in more than one place, each declared once: its name, kind of value,
unit, what "unset" means, its bounds, its help and the variable a joining program reads it from.

A setting reaches orion from `orion run`/`orion quota`/`orion up` options, from ``jobs.json``,
from ``orion.ray``'s keywords and from the join variables (``ORION_MEMORY_LIMIT=8GiB``). Each
of those is derived from the :class:`Setting` here rather than written again: the CLI options
take their flag and help from it (``orion_cli/_settings.py``), the jobs schema its field
description and parser, ``orion.ray`` and the daemon's join message its parser and bounds, and
docs/commands.md's settings table is :func:`markdown_table` (``tests/test_settings.py`` checks
every one of them). "Unset" is spelled ``None`` everywhere a value travels in Python and JSON,
and ``none`` where a person types one.

"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orion_common.errors import UsageError
from orion_common.sizes import ACCEPTED as SIZE_FORMAT
from orion_common.sizes import MAX_SIZE, parse_size
from scheduler_core.run_state import BE_GATES, BE_GRAPH_GATES
from scheduler_core.shares import NO_CAP, NO_PROMISE, share_problem
from scheduler_core.sharing import HP_CONTEXTS, SHARINGS, policy_defaults

_ORION = policy_defaults("orion")  # what orion runs with unless told (the help says it)

UNSET_WORD = "none"
"""What a person types for "unset" (a CLI option, an environment variable); ``None`` in code."""


@dataclass(frozen=True)
class Setting:
    """One setting, declared once; everything that takes it is derived from this."""

    name: str
    """Its name wherever it is a field or keyword: jobs.json, ``JoinRequest``, orion.ray."""
    kind: str
    """What kind of value it is, which decides its one parser: ``size``, ``choice``, ``number``
    (a real number within :attr:`bounds`, in :attr:`unit`) or ``fraction`` (a share of GPU time,
    0 to 1: :mod:`scheduler_core.shares`)."""
    help: str
    """What it does, for people: the CLI's help and the docs' table, in one sentence or two."""
    unset: str
    """What leaving it unset (``None``) means."""
    unit: str = ""
    choices: tuple[str, ...] = ()
    bounds: tuple[int, int] | None = None
    """Inclusive bounds of a size or a number."""
    variable: str | None = None
    """The environment variable a joining program reads it from (``daemon_join.h``), if any."""
    default: Any = None
    """The value that unset stands for, where one value does (a promise of 0, a cap of 1); None
    where unset is worked out from elsewhere (:attr:`unset` says from what)."""

    @property
    def flag(self) -> str:
        """Its command-line option."""
        return "--" + self.name.replace("_", "-")

    @property
    def accepted(self) -> str:
        """What values it takes, in words (for help texts and errors)."""
        if self.kind == "size":
            return SIZE_FORMAT.removeprefix("use ")
        if self.kind == "number":
            low, high = self.bounds or (0, 0)
            return f"a number of {self.unit} from {low:,} to {high:,}"
        if self.kind == "fraction":
            return "a fraction from 0 to 1"
        return "one of " + ", ".join(self.choices)

    def parse(self, value: Any) -> Any:
        """The value ``value`` (as typed, as a file or a keyword wrote it) means: ``None`` for
        unset (``None`` or ``"none"``), else the setting's own kind, checked against its bounds
        and choices; :class:`ValueError` with a one-line reason otherwise."""
        if value is None or (isinstance(value, str) and value.strip().lower() == UNSET_WORD):
            return None
        return _PARSERS[self.kind](self, value)

    def or_default(self, value: Any) -> Any:
        """``value``, parsed, else the value unset stands for (:attr:`default`)."""
        parsed = self.parse(value)
        return self.default if parsed is None else parsed

    def checked(self, value: Any, label: str | None = None) -> Any:
        """:meth:`parse`, its reason a :class:`UsageError` (prefixed ``label:`` when given: the
        option or keyword the value came in)."""
        try:
            return self.parse(value)
        except ValueError as error:
            raise UsageError(f"{label}: {error}" if label else str(error)) from None

    def problem(self, value: Any) -> str | None:
        """Why ``value`` cannot be this setting (None: it can): :meth:`parse`'s reason."""
        try:
            self.parse(value)
        except ValueError as error:
            return str(error)
        return None

    def help_text(self, lead: str = "") -> str:
        """The option's help: ``lead`` (what the command does with it), the setting's help, the
        values it takes and what unset means."""
        unset = f"Unset ({UNSET_WORD}): {self.unset}."
        parts = [lead, self.help, f"Values: {self.accepted}.", unset]
        return " ".join(part for part in parts if part)


def _size(setting: Setting, value: Any) -> int:
    size = parse_size(value)
    low, high = setting.bounds or (1, MAX_SIZE)
    if not low <= size <= high:
        raise ValueError(f"{setting.name} must be {low} to {high} {setting.unit} (got {size})")
    return size


def _choice(setting: Setting, value: Any) -> str:
    if value not in setting.choices:
        raise ValueError(
            f"{setting.name} must be one of {', '.join(setting.choices)} (got {value!r})"
        )
    return str(value)


def _as_float(setting: Setting, value: Any) -> float:
    if isinstance(value, bool):  # float(True) is 1.0: a file's true is no number
        raise ValueError(f"{setting.name} is not a number (got {value!r})")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{setting.name} is not a number (got {value!r})") from None


def _number(setting: Setting, value: Any) -> float:
    number = _as_float(setting, value)
    low, high = setting.bounds or (0, 0)
    if not (math.isfinite(number) and low <= number <= high):
        raise ValueError(f"{setting.name} must be {low:,} to {high:,} {setting.unit} (got {value})")
    return number


def _fraction(setting: Setting, value: Any) -> float:
    number = _as_float(setting, value)
    problem = share_problem(setting.name, number)
    if problem is not None:
        raise ValueError(problem)
    return number


_PARSERS: dict[str, Callable[[Setting, Any], Any]] = {
    "size": _size,
    "choice": _choice,
    "number": _number,
    "fraction": _fraction,
}

MEMORY_LIMIT = Setting(
    name="memory_limit",
    kind="size",
    unit="bytes",
    bounds=(1, MAX_SIZE),
    help="GPU memory the client may hold; allocations past it fail as out of memory.",
    unset="no limit",
    variable="ORION_MEMORY_LIMIT",
)
SHARING = Setting(
    name="sharing",
    kind="choice",
    choices=SHARINGS,
    help="How the clients share the GPU: mps (clients of one private MPS daemon, whose kernels "
    "run at once) or timeslice (contexts of their own that the driver switches between; "
    "orion's GPU gates still hold BE work while HP has work).",
    unset="the policy's default (mps; orion's HP in a context of its own beside the MPS server, "
    "see --hp-context; priority runs under mps only)",
)
BE_GATE = Setting(
    name="be_gate",
    kind="choice",
    choices=BE_GATES,
    help="Where a held BE launch waits: gpu (the launch returns at once and the BE stream waits "
    "on the GPU for a gate the daemon opens) or cpu (in the program's launching thread, so "
    "nothing of BE's is left queued on the GPU while it is held, at a cost to BE).",
    unset="gpu",
)
BE_GRAPH_GATE = Setting(
    name="be_graph_gate",
    kind="choice",
    choices=BE_GRAPH_GATES,
    help="How the CUDA graphs of gated (BE) clients are held: segments (each graph split into "
    "pieces of at most one gate spacing of work, launched one after another through the gate "
    "like eager work), inside (wait nodes inside each graph, one per gate spacing of its work) "
    "or whole (graphs run as the program made them, admitted whole behind their launch's "
    "gate). Except whole, an arriving HP request finds at most one gate spacing (the larger of "
    "the queue limit and --be-gate-spacing-us) of a BE graph let through.",
    unset="segments, under every sharing mode (time-sliced, a graph stopped at a wait node "
    "inside it keeps its context on the GPU; under MPS, an HP joining beside BE graphs that "
    "never stop could not be learned while they were gated inside)",
)
HP_QUIET_US = Setting(
    name="hp_quiet_us",
    kind="number",
    unit="us",
    bounds=(0, 1_000_000),
    help="The HP's quiet spell: under orion and reef no BE work is let onto the GPU until the HP "
    "client has launched nothing for this long, so BE stays out of the short gaps between the "
    "kernels of one HP request (time-sliced, each gap BE gets into costs the HP two context "
    "switches). 0: off.",
    unset=f"{_ORION.hp_quiet_us:g} us under orion, 0 (off: BE work may run in any gap of the HP's "
    "work) under the other policies",
)
DEFAULT_BE_GATE_SPACING_US = 100.0
"""The spacing a daemon uses where its GPU gate spaces waits and none is asked for. A wait before
every BE kernel (the spacing the latency loop's 1-us queue bound gave) cost lone trainers 18-34%
of their throughput, 100 us between waits gave back more than half of it, and beside the suite's
services BE kept more in all eight pairs measured with the HP's p99 lower or level in seven
(one H200 round: ``benchmarks/results/nvidia-h200/suite-be-cost/``)."""
BE_GATE_SPACING_US = Setting(
    name="be_gate_spacing_us",
    kind="number",
    unit="us",
    bounds=(1, 10_000),
    help="The least BE work a BE stream lets onto the GPU between two waits on its GPU-side gate "
    "(and a BE graph's segments hold as much): each wait, and the write marking the launch "
    "started, is a stream operation between two BE kernels, so with the queue limit at a few "
    "microseconds every BE kernel pays for one. Larger: fewer waits, so BE runs faster; an "
    "arriving HP request may find up to this much BE work let through, to drain first.",
    unset=f"{DEFAULT_BE_GATE_SPACING_US:g} us where a GPU gate spaces waits (policies orion and "
    "reef, --be-gate gpu); 1 gives a wait per queue limit of BE work, as before the default",
)
BE_SM_PERCENT = Setting(
    name="be_sm_percent",
    kind="number",
    unit="%",
    bounds=(1, 100),
    help="Under --sharing mps, the share of the GPU's SMs each BE client's kernels may use (MPS's "
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, set when it joins), so a long BE kernel leaves the rest "
    "to an HP in the MPS server. Measured on an H100 without orion's gates: BE at 70% took the "
    "HP's p99 from 2.9x to 2.1x of alone, at 0.87 of BE's throughput. A BE client joining while "
    "no HP can run beside it (the daemon's --hp-context own and no HP joined in mps) keeps every "
    "SM: time-sliced against such an HP, a share would only slow it.",
    unset="every SM (100), under every policy",
)
HP_CONTEXT = Setting(
    name="hp_context",
    kind="choice",
    choices=HP_CONTEXTS,
    help="Under --sharing mps, where the HP client runs: mps (a client of the daemon's MPS "
    "server: a request starts at once beside BE's kernels, each HP kernel pays MPS's own cost, "
    "about 7.5-10%) or own (a CUDA context of its own, time-sliced against the MPS server that "
    "holds every BE client: nothing of MPS's cost, a context switch per request that finds BE "
    "work resident). Measured: an LLM decoder (long requests of many steps) did best in own, a "
    "graph encoder (short requests) in mps. `orion up` sets the daemon's default, `orion run "
    "--hp` the joining HP's own.",
    unset=f"for `orion up`, {_ORION.hp_context} under orion, mps under the other policies (or "
    "mps where --be-graph-gate inside is asked for); for `orion run --hp`, the daemon's",
    variable="ORION_HP_CONTEXT",
)
LOOP_READINGS = ("launches", "requests")
"""What the daemon's latency loop may read as the HP's slowdown (:data:`LOOP_READS`)."""
LOOP_READS = Setting(
    name="loop_reads",
    kind="choice",
    choices=LOOP_READINGS,
    help="What the daemon's latency loop reads as the HP's slowdown: launches (its launches "
    "timed one at a time from their call to the end of their work, against alone) or requests "
    "(its requests timed whole, the first launch call to the end of the last kernel, against "
    "its requests alone; launches where none of its requests was timed against one). A "
    "request is what the HP launches between two pauses of 1 ms after its work ended: an HP "
    "that never pauses that long has no requests to read.",
    unset="launches",
    default="launches",
)
MIN_UTIL = Setting(
    name="min_util",
    kind="fraction",
    help="The share of GPU time promised to the client whenever it has work, over the quota "
    "window (the daemon must enforce shares: `orion up --shares`, or policy quota); the "
    "promises of one GPU's clients add up to at most 1.",
    unset="0 (nothing promised)",
    variable="ORION_MIN_UTIL",
    default=NO_PROMISE,
)
MAX_UTIL = Setting(
    name="max_util",
    kind="fraction",
    help="The share of GPU time the client never exceeds over the quota window (where the "
    "daemon enforces shares); at least its min_util.",
    unset="1 (no cap)",
    variable="ORION_MAX_UTIL",
    default=NO_CAP,
)
SETTINGS = (
    MEMORY_LIMIT,
    SHARING,
    BE_GATE,
    BE_GRAPH_GATE,
    HP_QUIET_US,
    BE_GATE_SPACING_US,
    BE_SM_PERCENT,
    HP_CONTEXT,
    LOOP_READS,
    MIN_UTIL,
    MAX_UTIL,
)


def markdown_table() -> str:
    """docs/commands.md's table of the settings declared here (checked against it by a test)."""
    rows = ["| setting | option | values | unset | variable | what it does |", "|---" * 6 + "|"]
    for setting in SETTINGS:
        variable = f"`{setting.variable}`" if setting.variable else ""
        rows.append(
            f"| `{setting.name}` | `{setting.flag}` | {setting.accepted} | {setting.unset} | "
            f"{variable} | {setting.help} |"
        )
    return "\n".join(rows) + "\n"
