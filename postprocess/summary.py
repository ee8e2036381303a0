"""Numbers for the short summary shown after profiling; the CLI formats them, nothing prints here.

The summary answers what a user needs before co-locating a job: how much GPU time it takes,
whether it is mostly compute- or memory-bound, which kernels dominate, and how many SMs its
kernels want (a job whose kernels all need every SM leaves nothing to share).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from postprocess.build import identity_groups, kernel_identity_table
from postprocess.classify import KERNEL_CLASSES
from postprocess.profile_format import SHAPE_COLUMNS, Profile

SM_BIN_FRACTIONS: tuple[float, ...] = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 3 / 4)
"""Upper edges of the ``sm_needed`` bins as fractions of the SM count; then "up to all but one"
and "all SMs". On 132 SMs: 1-8, 9-16, 17-33, 34-66, 67-99, 100-131, all (132)."""


@dataclass(frozen=True)
class ProfileSummary:
    """What the summary shows. Durations are totals over launches, in ns."""

    kernel_count: int
    identity_count: int
    total_duration_ns: float
    by_class: pd.DataFrame
    """kernel_class, kernels, duration_ns, share_pct (one row per class, all classes listed)."""
    top_kernels: pd.DataFrame
    """demangled_name, grid/block, launches, kernel_class, sm_needed, duration_ns, share_pct."""
    sm_needed_histogram: pd.DataFrame
    """bin, sm_low, sm_high, kernels, duration_ns."""


def sm_needed_bins(sm_count: int) -> list[tuple[int, int]]:
    """Inclusive (low, high) ``sm_needed`` ranges covering 1..sm_count, the last being all SMs."""
    uppers = sorted({max(1, int(sm_count * fraction)) for fraction in SM_BIN_FRACTIONS})
    uppers = [upper for upper in uppers if upper < sm_count - 1] + [sm_count - 1]
    bins: list[tuple[int, int]] = []
    low = 1
    for upper in uppers:
        if upper >= low:
            bins.append((low, upper))
            low = upper + 1
    bins.append((sm_count, sm_count))
    return bins


def _share(part: pd.Series, total: float) -> pd.Series:
    return (part / total * 100.0) if total > 0 else part * 0.0


def summarize_profile(
    profile: Profile, top_n: int = 10, duration_column: str = "duration_ns"
) -> ProfileSummary:
    """Summary numbers; ``duration_column`` may be ``measured_duration_ns`` after matching."""
    kernels = profile.kernels.reset_index(drop=True)
    durations = kernels[duration_column].astype("float64").fillna(0.0)
    total = float(durations.sum())

    classes = kernels["kernel_class"].astype("string").fillna("unknown")
    by_class = pd.DataFrame(
        {
            "kernel_class": list(KERNEL_CLASSES),
            "kernels": [int((classes == name).sum()) for name in KERNEL_CLASSES],
            "duration_ns": [float(durations[classes == name].sum()) for name in KERNEL_CLASSES],
        }
    )
    by_class["share_pct"] = _share(by_class["duration_ns"], total)

    identities = kernel_identity_table(profile)
    identities["duration_ns"] = durations.groupby(identity_groups(kernels)).sum().to_numpy()
    identities["share_pct"] = _share(identities["duration_ns"], total)
    top = identities.sort_values("duration_ns", ascending=False, kind="stable").head(top_n)
    top = top[
        [
            "demangled_name",
            *SHAPE_COLUMNS,
            "launches",
            "kernel_class",
            "sm_needed",
            "duration_ns",
            "share_pct",
        ]
    ].reset_index(drop=True)

    sm_count = int(profile.metadata.get("sm_count") or kernels["sm_needed"].max())
    needed = kernels["sm_needed"].astype("float64")
    rows = []
    for low, high in sm_needed_bins(sm_count):
        inside = needed.between(low, high)
        label = f"all ({sm_count})" if low == high == sm_count else f"{low}-{high}"
        rows.append(
            {
                "bin": label,
                "sm_low": low,
                "sm_high": high,
                "kernels": int(inside.sum()),
                "duration_ns": float(durations[inside].sum()),
            }
        )
    return ProfileSummary(
        kernel_count=len(kernels),
        identity_count=len(identities),
        total_duration_ns=total,
        by_class=by_class,
        top_kernels=top,
        sm_needed_histogram=pd.DataFrame(rows),
    )
