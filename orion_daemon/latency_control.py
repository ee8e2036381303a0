"""The daemon's loop closed on the HP client's own slowdown: tighten BE admission when the HP
runs slower than it may, loosen it again when there is room.

Why a loop: a latency target cannot be turned into a BE queue bound in advance. The bound used
to be half of the target's slack over the HP step's GPU time, but a p99 target is far above the
step's GPU time for reasons BE has nothing to do with (requests queue behind one another, the
host launches them), so the bound came out loose: on an H100 a 2.6-ms target for an HP with a
1.2-ms step and a 2.39-ms p99 alone made it about 790 us instead of 25 us, and the HP's p99 went
to 1.83x of alone. So the target now sets only how much slower than alone the HP may run
(:func:`allowed_slowdown`), and the daemon moves the bound by what it measures.

The rule (:func:`next_control`, a pure function of the state and one reading):

- **Tighten at once** when a reading is above the allowed slowdown: the queue bound halves, down
  to ``floor_ns``; a reading above it at the floor sets ``hold_long_be`` (the gate keeper then
  holds BE work longer than the bound, a whole graph or a long kernel, while the HP is active).
- **Loosen by small steps, once the room is confirmed**: only after ``LOOSEN_AFTER`` readings in
  a row with room (the slowdown under half of what is allowed), then one step per reading for as
  long as the room lasts: first ``hold_long_be`` off, then the bound up by a quarter at a time,
  up to ``ceiling_ns``. A step more than the HP tolerates costs one reading (the next one
  tightens); a step every ``LOOSEN_AFTER`` readings instead kept BE at the floor for the whole
  of a 30-s suite window once a spike had tightened it (from a 1-us floor to a 75-us ceiling is
  19 steps: 2 minutes that way, 44 s this way).
- Between the two (the hysteresis band) nothing changes; no reading (no HP samples in the
  period) changes nothing.
- **Against what orion can reach**: the mean readings taken at the tightest setting are
  averaged as the HP's floor slowdown (``floor_reading``), what holding BE as far as orion can
  still leaves (time-sliced, one context switch per request that finds BE resident: 10-16% of a
  ResNet-50 graph request's service, on every pair of the suite). Where it is above the allowed
  slowdown, the target is out of reach and holding BE there buys the HP nothing more, so the
  loop then keeps the HP's mean within the allowed share of that floor (over: above ``floor x
  allowed``; room: under ``floor x (1 + ROOM_SHARE x (allowed - 1))``) and gives BE what is left.
  Any mean below the floor pulls it down (a floor read in a bad moment never stays), and `orion
  status` says the target is out of reach and why. A tail (more than 1% of the felt launches at
  2x or more, :class:`Reading`) is harm whatever the floor: it tightens, and never has room.
  Before this, a loop asking a mean of 1.05 of an HP whose every request pays 10% sat at its
  floor on 10 of 12 suite pairs (BE 0.2-0.7 of alone), pairs whose p99 had room included.

Both ends are bounded: the floor is the smallest bound that still admits a BE kernel at a time
(:data:`scheduler_core.thresholds.MIN_QUEUE_LIMIT_NS`), the ceiling the bound the HP's step
gives with no loop at all, so a loop fed a reading that misses the harm (a slowdown signal blind
to the time an HP launch waits for the GPU) can never leave BE freer than orion without it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from scheduler_core.thresholds import DEFAULT_SLOWDOWN

TIGHTEN_FACTOR = 0.5
LOOSEN_FACTOR = 1.25
LOOSEN_AFTER = 3
"""Readings in a row with room before the first step looser (then a step per reading while the
room lasts): one good reading after a spike is not yet room."""
ROOM_SHARE = 0.5
"""A reading has room when the HP's slowdown uses less than this share of what is allowed."""
FLOOR_WEIGHT = 0.25
"""How far one reading moves the floor slowdown (an average over about four readings)."""
CONTROL_PERIOD_S = 2.0
"""How often the daemon reads the HP's slowdown and steps the loop: long enough for an HP
serving tens of requests a second to give a few dozen timed launches per reading."""


@dataclass(frozen=True)
class Reading:
    """One period's reading of the HP: ``mean``, its launches' slowdown on average (as felt where
    the library times them so, else as GPU time), and ``tail``, a ratio of 2x or more that more
    than 1% of its felt launches exceeded (None when none did). Kept apart because they call for
    different answers: the mean carries what every request pays however tightly BE is held (the
    floor slowdown is a mean), a tail that large is the harm holding BE is for."""

    mean: float
    tail: float | None = None

    @property
    def value(self) -> float:
        """The reading as one figure (what `orion status` shows): the larger of the two."""
        return max(self.mean, self.tail or 0.0)


def allowed_slowdown(target_ms: float | None, alone_ms: float | None) -> float:
    """How much slower than alone the HP may run: its latency target over its latency alone, but
    never more than orion's own goal (1 + DEFAULT_SLOWDOWN): a target asks for more protection,
    never for less. Without a target or without an alone latency, orion's goal."""
    default = 1.0 + DEFAULT_SLOWDOWN
    if target_ms is None or alone_ms is None or alone_ms <= 0:
        return default
    return min(default, target_ms / alone_ms)


@dataclass(frozen=True)
class ControlState:
    """Where the loop stands: the BE queue bound it set, whether long BE work is held, and how
    many readings in a row had room."""

    queue_limit_ns: int
    floor_ns: int
    ceiling_ns: int
    hold_long_be: bool = False
    room_readings: int = 0
    last_slowdown: float | None = None
    floor_reading: float | None = None
    """The HP's mean slowdown with BE held as far as orion can (None until the loop got there)."""
    last_over: bool = False
    """Whether the last reading was over what is allowed (the loop tightened for it)."""

    @property
    def tightest(self) -> bool:
        """At the floor with long BE work held: nothing left to tighten."""
        return self.hold_long_be and self.queue_limit_ns <= self.floor_ns

    def reachable(self, allowed: float) -> bool:
        """Whether the allowed slowdown is within what holding BE can give the HP."""
        return self.floor_reading is None or self.floor_reading <= allowed

    def base(self) -> float:
        """What the allowed slowdown is a share over: alone (1.0), or the floor slowdown where
        even that is above alone."""
        return max(1.0, self.floor_reading or 1.0)


def _floor_after(state: ControlState, reading: Reading) -> float | None:
    """The floor slowdown after one reading: the means read at the tightest setting averaged,
    pulled down by any mean below it; a reading with a tail leaves it alone."""
    known, mean = state.floor_reading, reading.mean
    if reading.tail is not None:
        return known
    if state.tightest:
        return mean if known is None else known + FLOOR_WEIGHT * (mean - known)
    if known is not None and mean < known:
        return known + FLOOR_WEIGHT * (mean - known)
    return known


def next_control(state: ControlState, reading: Reading | None, allowed: float) -> ControlState:
    """One step of the loop for one reading of the HP (None: no reading)."""
    if reading is None:
        return state
    state = replace(state, last_slowdown=reading.value, floor_reading=_floor_after(state, reading))
    base = state.base()
    over = reading.tail is not None or reading.mean > base * allowed
    state = replace(state, last_over=over)
    if over:
        if state.queue_limit_ns > state.floor_ns:
            tighter = max(state.floor_ns, int(state.queue_limit_ns * TIGHTEN_FACTOR))
            return replace(state, queue_limit_ns=tighter, room_readings=0)
        return replace(state, hold_long_be=True, room_readings=0)
    if reading.mean < base * (1.0 + ROOM_SHARE * (allowed - 1.0)):
        room = state.room_readings + 1
        if room < LOOSEN_AFTER:
            return replace(state, room_readings=room)
        if state.hold_long_be:
            return replace(state, hold_long_be=False, room_readings=room)
        looser = min(
            state.ceiling_ns,
            max(state.queue_limit_ns + 1, int(state.queue_limit_ns * LOOSEN_FACTOR)),
        )
        return replace(state, queue_limit_ns=looser, room_readings=room)
    return replace(state, room_readings=0)


def rebound(state: ControlState, ceiling_ns: int, floor_ns: int) -> ControlState:
    """The same loop under new bounds (the HP's step was learned, or it changed): the bound
    starts again from the new ceiling when the loop had not tightened, else stays where it is,
    within the new bounds."""
    tightened = state.queue_limit_ns < state.ceiling_ns or state.hold_long_be
    limit = min(state.queue_limit_ns, ceiling_ns) if tightened else ceiling_ns
    return replace(
        state, queue_limit_ns=max(floor_ns, limit), floor_ns=floor_ns, ceiling_ns=ceiling_ns
    )


def status(state: ControlState | None, allowed: float) -> dict[str, object]:
    """What `orion status` shows of the loop: the slowdown allowed and last measured, the bound
    and hold it chose, and whether the target is out of reach (tightest, still too slow)."""
    if state is None:
        return {"allowed_slowdown": round(allowed, 4), "state": "waiting for the HP"}
    measured = state.last_slowdown
    floor = state.floor_reading
    if not state.reachable(allowed) and floor is not None:
        verdict = (
            f"out of reach: with BE held as far as orion can, the HP is still {floor:.3f}x of "
            f"alone (allowed {allowed:.3f}x); BE gets what keeps it within "
            f"{allowed - 1.0:.1%} of that"
        )
    elif state.last_over:
        verdict = "tightening"
    elif measured is None:
        verdict = "no reading yet"
    else:
        verdict = "within the target"
    return {
        "allowed_slowdown": round(allowed, 4),
        "measured_slowdown": None if measured is None else round(measured, 4),
        "floor_slowdown": None if floor is None else round(floor, 4),
        "queue_limit_us": state.queue_limit_ns / 1e3,
        "hold_long_be": state.hold_long_be,
        "state": verdict,
    }
