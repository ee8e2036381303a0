"""The sharing policies ``orion colocate`` can run, and what each one means for the runner.

This table is the single place that says how a policy is carried out (MPS or not, which policy
the preload library runs, whether profiles and an HP client are needed). The config validator,
the runner and the report all read it, so adding a policy means adding one row here. The gating
policies run under MPS or time-sliced (``run.sharing``); which modes each native policy allows,
and its default, come from :mod:`scheduler_core.sharing`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from orion_common.errors import OrionError
from scheduler_core.sharing import (
    NATIVE_SHARINGS,
    SHARING_REASONS,
    Sharing,
    default_hp_context,
    hp_sharing,
    sharing_problem,
)

NativePolicy = Literal["passthrough", "priority", "reef", "orion", "quota"]


@dataclass(frozen=True)
class Policy:
    """One sharing policy. A row names what sets it apart; the defaults are the common case: MPS
    only, every client a peer, no profiles, no stream priorities chosen by the client, clients at
    once.

    ``native_policy`` is the name the preload library knows; ``passthrough`` means the library
    forwards every call untouched (the sharing then comes from the driver or MPS alone).
    """

    name: str
    description: str
    native_policy: NativePolicy
    sharings: tuple[Sharing, ...] = ("mps",)
    """How its clients may share the GPU (``run.sharing``), the default first: ``"mps"`` (one MPS
    daemon) or ``"timeslice"`` (contexts the driver switches between); empty when clients run
    alone and nothing is shared."""
    needs_hp: bool = False
    """The policy treats one client differently, so exactly one client must have role ``hp``."""
    needs_profiles: bool = False
    """The library gates kernels by profiled durations and SM needs, so every client needs a
    kernel profile."""
    hp_stream_priority_by_client: bool = False
    """The HP client itself submits its work on a high-priority CUDA stream."""
    sequential: bool = False
    """Clients run alone, one after another (the no-interference reference)."""
    sm_partitions: bool = False
    """Clients may carry ``sm_percent``: a static share of the SMs through MPS's
    ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` (a spatial partition, as GLET uses)."""
    sharing_reason: str = ""
    """Why the policy shares the GPU in one way only (said when another is asked for)."""
    sharing: Sharing | None = None
    """The mode this run uses (:meth:`with_sharing`); the table's rows hold their default."""

    def __post_init__(self) -> None:
        if self.sharing is None and self.sharings:
            object.__setattr__(self, "sharing", self.sharings[0])

    @property
    def uses_mps(self) -> bool:
        """Clients run under a private MPS daemon the runner starts."""
        return self.sharing == "mps"

    @property
    def hp_sharing(self) -> str | None:
        """How its HP meets BE work (:func:`scheduler_core.sharing.hp_sharing`): time-sliced
        where its HP runs in a context of its own beside the MPS server, as orion's does."""
        return hp_sharing(self.sharing, default_hp_context(self.native_policy, self.sharing))

    def sharing_problem(self, sharing: str | None) -> str | None:
        """Why this policy cannot share the GPU as ``sharing`` says (None: it can, or unset)."""
        if sharing is None:
            return None
        return sharing_problem(self.name, self.sharings, sharing, self.sharing_reason)

    def with_sharing(self, sharing: str | None) -> Policy:
        """This policy carried out with ``sharing`` (None: its default)."""
        problem = self.sharing_problem(sharing)
        if problem is not None:
            raise OrionError(problem, hint="set run.sharing to a mode the policy runs in")
        if sharing is None or sharing == self.sharing:
            return self
        return replace(self, sharing=sharing)


_POLICY_LIST: tuple[Policy, ...] = (
    Policy(
        name="dedicated",
        description="each client alone on the GPU, one after another (the reference)",
        sharings=(),
        native_policy="passthrough",
        sequential=True,
    ),
    Policy(
        name="timeslice",
        description="separate processes without MPS: the driver time-slices the GPU",
        sharings=("timeslice",),
        native_policy="passthrough",
        sharing_reason="it is the driver's time-slicing of separate contexts, without MPS",
    ),
    Policy(
        name="mps",
        description="separate processes under a private MPS daemon, no scheduling",
        native_policy="passthrough",
        sharing_reason="it is MPS sharing by definition",
    ),
    Policy(
        name="mps-priority",
        description="MPS; the HP client puts its work on a high-priority CUDA stream itself",
        native_policy="passthrough",
        needs_hp=True,
        hp_stream_priority_by_client=True,
        sharing_reason="it is MPS sharing by definition (priorities order MPS clients' work)",
    ),
    Policy(
        name="mps-share",
        description=(
            "MPS with static SM shares: each client's sm_percent caps the SMs it may use; "
            "the HP client uses a high-priority stream as in mps-priority"
        ),
        native_policy="passthrough",
        needs_hp=True,
        hp_stream_priority_by_client=True,
        sm_partitions=True,
        sharing_reason="its SM shares are MPS's (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE)",
    ),
    Policy(
        name="priority",
        description="MPS; orion's preload library sets stream priorities (HP highest, BE lowest)",
        sharings=NATIVE_SHARINGS["priority"],
        native_policy="priority",
        needs_hp=True,
        sharing_reason=SHARING_REASONS["priority"],
    ),
    Policy(
        name="reef",
        description=(
            "BE kernels run only while no HP kernel is in flight, with a bounded BE queue "
            "(under MPS, or time-sliced with run.sharing 'timeslice')"
        ),
        sharings=NATIVE_SHARINGS["reef"],
        native_policy="reef",
        needs_hp=True,
        needs_profiles=True,
    ),
    Policy(
        name="orion",
        description=(
            "the full Orion interference-aware policy (time-sliced, or under MPS with "
            "run.sharing 'mps')"
        ),
        sharings=NATIVE_SHARINGS["orion"],
        native_policy="orion",
        needs_hp=True,
        needs_profiles=True,
    ),
    Policy(
        name="quota",
        description=(
            "every client a peer, GPU time granted one client at a time by min_util "
            "(promised) and max_util (cap) shares, the rest to whoever has work (under MPS, "
            "or time-sliced with run.sharing 'timeslice')"
        ),
        sharings=NATIVE_SHARINGS["quota"],
        native_policy="quota",
    ),
)

SHARE_POLICIES = ("quota", "priority", "reef", "orion")
"""Native policies under which a client's GPU-time shares (min_util, max_util) are enforced:
the preload library can hold work back there (under quota every client's, otherwise BE's)."""

POLICIES: dict[str, Policy] = {policy.name: policy for policy in _POLICY_LIST}
"""Every policy by name, in the order they are documented (reference first)."""

POLICY_NAMES: tuple[str, ...] = tuple(POLICIES)


def get_policy(name: str) -> Policy:
    """The policy called ``name``; an unknown name is a user error listing the known ones."""
    try:
        return POLICIES[name]
    except KeyError:
        raise OrionError(
            f"unknown policy {name!r}; known policies: {', '.join(POLICY_NAMES)}",
            hint="set run.policy in jobs.json to one of the known policies",
        ) from None
