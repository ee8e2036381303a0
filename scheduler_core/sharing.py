"""How the clients of one GPU share it: as clients of one MPS daemon, or in contexts of their own.

- ``"mps"``: every client process is a client of one (private) MPS daemon, so kernels of
  different processes run on the GPU at the same time. MPS itself costs a lone client time on
  the GPU: a ResNet-50 bs4 CUDA graph took 1.30 ms without MPS and 1.39-1.43 ms as the only
  client of an MPS daemon (H100, ``docs/scheduler.md``, "Sharing without MPS").
- ``"timeslice"``: every client has its own CUDA context and the driver switches the GPU between
  contexts, so kernels of different processes never run at the same time. orion's GPU-side gates
  still hold BE work while HP has work; what an HP arrival can find is the BE context holding the
  GPU until the driver switches (``docs/scheduler.md``).

The rule of which native policy runs in which mode is here, once: the daemon
(:mod:`orion_daemon.server`) and the jobs file's policy table (:mod:`colocation.policies`) both
read it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Sharing = Literal["mps", "timeslice"]
SHARINGS: tuple[Sharing, ...] = ("mps", "timeslice")

NATIVE_SHARINGS: dict[str, tuple[Sharing, ...]] = {
    "passthrough": ("mps", "timeslice"),
    "priority": ("mps",),
    "reef": ("mps", "timeslice"),
    "orion": ("mps", "timeslice"),
    "quota": ("mps", "timeslice"),
}
"""The modes each native policy runs in, its default first.

The gating policies (reef, orion, quota) hold BE work with gates on the GPU, which work across
contexts as across MPS clients. orion runs under MPS with its HP in a context of its own
(:data:`POLICY_DEFAULTS`): for the HP that is time slicing, which beat orion with the HP in the
MPS server on an H100 (60-s runs, three interleaved rounds, ``docs/scheduler.md``, "Sharing
without MPS": HP p99 1.12x [1.05, 1.18] of dedicated with BE 0.81, against 1.21x [1.10, 1.39]
with BE 0.78), while the BE clients share one MPS server and run beside each other rather than
in turns. For reef the two modes traded places from round to round (1.09x [1.01, 1.18]
time-sliced, 1.10x [1.03, 1.18] under MPS, BE 0.87 and 0.86), so reef keeps MPS with its HP in
the server; quota is not measured yet and keeps MPS.
``priority`` orders work by stream priority alone, which holds between streams of one context or
of MPS's clients, never between contexts the driver time-slices."""


@dataclass(frozen=True)
class PolicyDefaults:
    """How a native policy arranges its clients where its daemon is not told otherwise (`orion
    up`'s and a jobs file's unset options): one declaration, read by the daemon's settings and
    by the help and docs that say what unset means."""

    hp_context: str = "mps"
    """Under MPS, where the HP runs (:data:`HP_CONTEXTS`)."""
    be_sm_percent: float | None = None
    """Under MPS, the SM share of a BE client beside an HP in the server (None: every SM)."""
    hp_quiet_us: float = 0.0
    """The HP's quiet spell BE work waits out (0: off)."""


POLICY_DEFAULTS: dict[str, PolicyDefaults] = {
    "orion": PolicyDefaults(hp_context="own", hp_quiet_us=300.0),
}
"""Each native policy's arrangement where it differs from :class:`PolicyDefaults`'s.

orion's is the arrangement its suite of program pairs did best in, under ``orion up`` without
profiles (one H200, ``benchmarks/results/nvidia-h200/suite-hp-chooses/``, ``be-sm-share/``,
``suite-mps-variants/``): the BE clients in one MPS server on every SM, the HP in a context of its
own time-sliced against it, and no BE work let onto the GPU until the HP has launched nothing for
300 us (time-sliced, each gap of an HP request BE gets into costs the HP two context switches).
Time-sliced with no quiet spell (orion's arrangement before), the same twelve pairs had a worst
pair of 1.40x and 2.52x of alone in two rounds (geometric means 1.17x and 1.48x); arranged so, 10
of 11 pairs that ran were within 1.25x (geometric mean 1.13x), the worst at 1.53x in a 20-s round
(the LLM decoder beside a BE graph server) and at 1.05-1.16x in four later rounds of that pair.
An HP that joins the server (``orion run --hp --hp-context mps``: a graph encoder of short
requests did best there, 1.08x against 1.10-3.00x in a context of its own) has BE beside it on
every SM, held by orion's gates alone. BE was on half the SMs there until the HP's arrivals were
paired across cells (one H200, 25-s rounds, ``benchmarks/results/nvidia-h200/be-every-sm/``):
the graph encoder beside the JAX trainer went from 1.11x [1.08, 1.15] with BE at 0.56 on half the
SMs to 1.14x [1.10, 1.20] with BE at 0.78 on all of them, and the ResNet-50 graph service in the
server beside its trainer from 1.13x [1.07, 1.19] with BE at 0.60 to 1.08x [1.06, 1.13] with BE at
0.79."""


def policy_defaults(native_policy: str) -> PolicyDefaults:
    """The arrangement ``native_policy`` runs with where nothing is asked for."""
    return POLICY_DEFAULTS.get(native_policy, PolicyDefaults())


def default_hp_context(native_policy: str, sharing: str | None) -> str | None:
    """Where the HP of ``native_policy`` runs under ``sharing`` when nothing says: the policy's
    context under MPS, None time-sliced (every client has a context of its own)."""
    return policy_defaults(native_policy).hp_context if sharing == "mps" else None


SHARING_REASONS: dict[str, str] = {
    "priority": "stream priorities order work inside one context or between MPS clients, not "
    "between contexts the driver switches",
}
"""Why a native policy runs in one mode only."""


def sharing_problem(
    policy: str, allowed: tuple[str, ...], sharing: str, reason: str = ""
) -> str | None:
    """Why ``policy``, which runs in the ``allowed`` modes, cannot run with ``sharing`` (None: it
    can). ``reason`` says why the modes are restricted."""
    if sharing not in SHARINGS:
        return f"sharing must be one of {', '.join(SHARINGS)} (got {sharing!r})"
    if sharing in allowed:
        return None
    if not allowed:
        return f"policy {policy!r} runs each client alone: nothing is shared"
    only = " or ".join(repr(mode) for mode in allowed)
    return f"policy {policy!r} runs under {only} only" + (f": {reason}" if reason else "")


def native_sharing_problem(native_policy: str, sharing: str) -> str | None:
    """Why the library's ``native_policy`` cannot run with ``sharing`` (None: it can)."""
    return sharing_problem(
        native_policy,
        NATIVE_SHARINGS[native_policy],
        sharing,
        SHARING_REASONS.get(native_policy, ""),
    )


def default_sharing(native_policy: str) -> Sharing:
    """The mode ``native_policy`` runs in when none is asked for."""
    return NATIVE_SHARINGS[native_policy][0]


DEFAULT_RUN_BE_GRAPH_GATE = "segments"
"""How the CUDA graphs of gated clients are held when nothing says (``run.be_graph_gate``,
``orion up --be-graph-gate``), under every policy and sharing mode: split into ``segments``
launched one after another through the gate, as eager BE work is, with nothing of the graph on the
GPU between two of them.

Time-sliced, graphs gated ``inside`` lost on both figures: a BE client replaying a ResNet-50 bs4
graph beside the graph headline under orion (H100, two interleaved rounds of 60-s runs,
``docs/scheduler.md``, "Best-effort graphs, gated inside") gave HP p99 2.99x [2.69, 3.30] of
dedicated with BE 0.61 gated inside, 1.82x [1.66, 1.97] with BE 0.93 admitted whole: a graph
stopped at a wait node inside it keeps its context on the GPU until the driver's timeslice ends.
Admitted ``whole``, an HP request waits for a whole BE graph (the suite's worst pair, an LLM
decoder beside a BE graph server, went to 45.7x).

Under MPS graphs were gated inside until an HP in the server was seen never to learn beside a JAX
trainer (one H200, ``benchmarks/results/nvidia-h200/be-every-sm/``): a graph gated inside that
has passed its launch's wait reads as running to the HP's sampling holds (tracking.h,
``be_may_run``) even while it stands at a wait inside, and XLA keeps one in flight at all times,
so 4,150 holds took no clean sample and the HP's kernels stayed unknown for the whole run (the
latency loop waiting for the HP throughout). Split into segments, each held segment waits at its
own launch's wait, and the same service beside the same trainer in its own context was learned
from 988 held samples; the graph encoder in the server beside it, its JAX graphs split, was
learned too and kept 1.11-1.14x of alone."""


HP_CONTEXTS = ("mps", "own")
"""Where the HP client runs when the clients share through MPS (``--hp-context``): ``mps``, a client
of the daemon's MPS server like every BE client, or ``own``, a CUDA context of its own that the
driver time-slices against the MPS server holding every BE client. Under MPS an HP request starts
at once beside BE's kernels, but every HP kernel pays MPS's own cost; in its own context the HP
pays nothing of MPS's and a context switch per request that finds BE work resident. On one H200
(``benchmarks/results/nvidia-h200/suite-be-cost/``): a graph encoder service with ~1.2-ms
requests at 12% load went from 1.36-2.64x of alone time-sliced to 1.08x under MPS; an LLM decoder
with ~22-ms requests at 45% load went the other way, its every step ~10% slower under MPS
(1.20-1.54x against 0.99-1.26x). One HP per GPU, so a daemon's setting is its HP's choice."""


def hp_sharing(sharing: str | None, hp_context: str | None) -> str | None:
    """How the HP meets BE work: ``"timeslice"`` where the driver switches its context against
    BE's (time-sliced, or its own context beside the MPS server holding BE), else ``sharing``.
    What rules that follow the HP's side of the sharing (its stream priority, how BE graphs are
    held) read."""
    return "timeslice" if hp_context == "own" else sharing


def be_sm_share_applies(daemon_hp_context: str | None, joined_hp_contexts: Iterable[str]) -> bool:
    """Whether a BE client joining an MPS daemon now runs on its SM share (``--be-sm-percent``):
    only where an HP may run kernels beside BE's, in the MPS server, so where the daemon's HP
    context is ``mps`` (its default) or an HP joined there. An HP in a context of its own is
    time-sliced against the whole server and never runs beside a BE kernel: a share there only
    slows BE and lengthens each BE kernel an HP request waits to drain. Measured on one H200 (the
    LLM decoder in its own context, 30-s windows, ``benchmarks/results/nvidia-h200/
    be-sm-share/``): its trainers went from 0.33 and 0.41 of alone on half the SMs to 0.50 and
    0.53 on all of them, the decoder's p99 from 1.21x and 0.96x to 1.16x and 0.89x. A share is
    fixed as a client starts, so a BE client that joined on every SM keeps them when an HP joins
    the server later (the daemon says so at that HP's join)."""
    return (daemon_hp_context or "mps") == "mps" or "mps" in joined_hp_contexts


def hp_priority_stream(sharing: str | None) -> bool:
    """Whether an HP client's legacy-stream launches move to a private highest-priority stream
    (``SchedulerSettings.hp_priority_stream``). Stream priority orders blocks of different
    clients only where their kernels run at once: under MPS. Time-sliced, the driver never runs
    two clients' kernels together, so the move would order nothing and cost an eager HP four
    driver calls per launch (``docs/scheduler.md``, "Priorities")."""
    return sharing != "timeslice"
