"""The rules of GPU-time shares (``min_util``, ``max_util``), written once.

A share is a fraction of the quota window; a client's promise (``min_util``) is at most its cap
(``max_util``); and the promises of one GPU's clients add up to at most all of it, or some
promise could not be kept. Every path that sets a share asks these rules: a join (admission), a
jobs file (its schema), ``orion quota`` (its options and the daemon's ``quota`` request) and the
run region itself (``SchedulerRun.set_quota``); the settings' declarations
(:mod:`scheduler_core.settings`) parse a typed share with :func:`share_problem`. Below the run
region on purpose: it imports nothing of orion's.
"""

from __future__ import annotations

NO_PROMISE = 0.0
"""``min_util`` unset: nothing promised."""
NO_CAP = 1.0
"""``max_util`` unset: no cap."""
PROMISE_SLACK = 1e-9
"""How far over 1 a sum of promises may come by float rounding alone (0.1 + 0.2 + 0.7)."""


def share_problem(name: str, value: float) -> str | None:
    """Why ``value`` cannot be the share ``name`` (None: it can): a fraction from 0 to 1."""
    if not 0.0 <= value <= 1.0:  # false for nan too
        return f"{name} must be between 0 and 1 (got {value:g})"
    return None


def shares_problem(min_util: float, max_util: float) -> str | None:
    """Why one client cannot have the promise ``min_util`` and the cap ``max_util`` together
    (None: it can)."""
    for name, value in (("min_util", min_util), ("max_util", max_util)):
        problem = share_problem(name, value)
        if problem is not None:
            return problem
    if min_util > max_util:
        return f"min_util {min_util:g} is above max_util {max_util:g}"
    return None


def promises_problem(promised: float) -> str | None:
    """Why the promises of one GPU's clients, ``promised`` in all, cannot all be kept (None:
    they can)."""
    if promised > 1.0 + PROMISE_SLACK:
        return f"min_util adds up to {promised:g} over the clients; at most 1"
    return None


def sets_a_share(min_util: float, max_util: float) -> bool:
    """Whether a client with these shares asks for any (a promise or a cap): only then must its
    daemon enforce GPU-time shares."""
    return (min_util, max_util) != (NO_PROMISE, NO_CAP)
