"""The scheduling rule itself (``decide`` in policy.cpp), case by case through ``_native.decide``.

The preload library calls this one function for every BE launch it gates; here it is fed
hand-made snapshots, so each rule of REEF and Orion is pinned down without processes or timing.
"""

from __future__ import annotations

import pytest

from scheduler_core import native_module

SMS = 132
LIMIT = 1_000_000  # ns of BE work allowed queued


def kernel(sm: int = 10, kernel_class: str = "memory", ns: int = 100_000, known: bool = True):
    return {"sm_needed": sm, "kernel_class": kernel_class, "duration_ns": ns, "known": known}


HP_COMPUTE_100 = kernel(100, "compute")  # leaves 32 SMs free
CASES = [
    # (id, policy, role, BE kernel, BE outstanding ns, HP kernels in flight, launch?, reason)
    ("hp never waits", "orion", "hp", kernel(), LIMIT * 5, [HP_COMPUTE_100], True, "high_priority"),
    ("passthrough", "passthrough", "be", kernel(), LIMIT * 5, [HP_COMPUTE_100], True, "not_gated"),
    ("priority", "priority", "be", kernel(), 0, [HP_COMPUTE_100], True, "not_gated"),
    ("reef idle", "reef", "be", kernel(), 0, [], True, "hp_idle"),
    ("reef busy", "reef", "be", kernel(), 0, [kernel(1, "memory")], False, "hp_busy"),
    ("reef queue full", "reef", "be", kernel(ns=400_000), 700_000, [], False, "queue_full"),
    ("reef queue at the limit", "reef", "be", kernel(ns=300_000), 700_000, [], True, "hp_idle"),
    ("empty queue admits a long one", "reef", "be", kernel(ns=LIMIT * 9), 0, [], True, "hp_idle"),
    ("orion idle", "orion", "be", kernel(), 0, [], True, "hp_idle"),
    ("orion fits beside", "orion", "be", kernel(32, "memory"), 0, [HP_COMPUTE_100], True,
     "fits_beside"),
    ("orion one SM too many", "orion", "be", kernel(33, "memory"), 0, [HP_COMPUTE_100], False,
     "not_enough_sms"),
    ("orion same class", "orion", "be", kernel(10, "compute"), 0, [HP_COMPUTE_100], False,
     "class_clash"),
    ("orion unknown class", "orion", "be", kernel(10, "unknown"), 0, [HP_COMPUTE_100], False,
     "class_clash"),
    ("orion unknown BE kernel", "orion", "be", kernel(known=False), 0, [HP_COMPUTE_100], False,
     "unknown_beside_hp"),
    ("orion unknown HP kernel", "orion", "be", kernel(), 0, [kernel(known=False)], False,
     "hp_kernel_unknown"),
    ("orion every HP kernel must allow it", "orion", "be", kernel(20, "memory"), 0,
     [kernel(10, "compute"), kernel(120, "compute")], False, "not_enough_sms"),
    ("orion queue first", "orion", "be", kernel(ns=600_000), 500_000, [], False, "queue_full"),
    ("orion HP wider than the GPU", "orion", "be", kernel(1, "memory"), 0,
     [kernel(500, "compute")], False, "not_enough_sms"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("policy", "role", "be", "outstanding", "hp", "launch", "reason"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_decide(policy, role, be, outstanding, hp, launch, reason) -> None:
    assert native_module().decide(policy, role, be, SMS, LIMIT, outstanding, hp) == (
        launch,
        reason,
    )


def test_more_hp_kernels_than_inspected_means_wait() -> None:
    native = native_module()
    many = [kernel(1, "compute")] * (native.MAX_HP_INSPECTED + 1)
    assert native.decide("orion", "be", kernel(1, "memory"), SMS, LIMIT, 0, many) == (
        False,
        "hp_backlog",
    )
