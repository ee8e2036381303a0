"""What `orion status` told about the HP beside what its own records measured, pooled over suite
runs: the table the suite issue asks for (the HP's felt slowdown within 20% of its p99 ratio).

    python benchmarks/status_vs_p99.py RUN_DIR [RUN_DIR ...] [--modes PREFIX] [--out FILE.md]

Reads each suite run's ``summary.json`` (``benchmarks/suite.py``, ``orion report``) and, for every
pair cell with BE beside the HP where the daemon sampled the HP's felt slowdown or timed its
requests whole, sets them beside the HP's p99 ratio over alone and its mean service time ratio
(the program's own records: what the daemon's figures estimate from its launches). The
requests' figures are their mean slowdown and their p99 over the p99 of the HP's requests
alone. Prints a Markdown table and how many cells agree within the bar; ``--out`` writes the
same to a file.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

AGREEMENT = 0.20
"""How far a figure `orion status` shows may be from the measured p99 ratio and still agree."""


@dataclass(frozen=True)
class Cell:
    run: str
    pair: str
    mode: str
    p99_ratio: float
    felt_shown: float | None
    service_ratio: float | None
    request_shown: float | None = None
    request_p99_shown: float | None = None


def agrees(shown: float | None, measured: float) -> bool:
    """Whether ``shown`` is within :data:`AGREEMENT` of ``measured`` (relative)."""
    return shown is not None and abs(shown / measured - 1.0) <= AGREEMENT


def cells_of(run: Path, mode_prefix: str = "") -> list[Cell]:
    """The cells of the suite run at ``run`` that can be compared (see the module's docstring)."""
    summary = json.loads((run / "summary.json").read_text())
    cells = []
    for pair in summary.get("pairs", []):
        ratio, felt = pair.get("hp_p99_ratio"), pair.get("hp_felt_slowdown_shown")
        requests = pair.get("hp_request_slowdown_shown")
        if not pair.get("be") or not isinstance(ratio, dict) or ratio.get("ratio") is None:
            continue  # an HP alone or a failed cell
        if felt is None and requests is None:
            continue  # a mode without a daemon
        if not pair["mode"].startswith(mode_prefix):
            continue
        service = pair.get("hp_service_mean_ratio") or {}
        cells.append(
            Cell(
                run.name,
                pair["pair"],
                pair["mode"],
                ratio["ratio"],
                felt,
                service.get("ratio"),
                requests,
                pair.get("hp_request_p99_over_alone_shown"),
            )
        )
    return cells


def markdown(cells: list[Cell]) -> str:
    """The table and the agreement counts."""
    columns = (
        ("felt slowdown shown", lambda c: c.felt_shown),
        ("service mean / alone", lambda c: c.service_ratio),
        ("requests shown", lambda c: c.request_shown),
        ("requests p99 over alone shown", lambda c: c.request_p99_shown),
    )
    header = "".join(f" {name} | within 20% |" for name, _ in columns)
    lines = [
        f"| run | pair | mode | HP p99 / alone |{header}",
        "|---|---|---|---|" + "---|---|" * len(columns),
    ]
    for c in cells:
        figures = ""
        for _, value in columns:
            shown = value(c)
            figures += (
                " - | - |"
                if shown is None
                else (f" {shown:.2f} | {'yes' if agrees(shown, c.p99_ratio) else 'no'} |")
            )
        lines.append(f"| {c.run} | {c.pair} | {c.mode} | {c.p99_ratio:.2f} |{figures}")
    counts = "; ".join(
        f"{name}: {sum(agrees(value(c), c.p99_ratio) for c in cells)} of "
        f"{sum(value(c) is not None for c in cells)}"
        for name, value in columns
    )
    lines += ["", f"within 20% of the p99 ratio ({len(cells)} cells): {counts}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="suite run folders (with summary.json)")
    parser.add_argument("--modes", default="", help="only modes whose name starts with this")
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    missing = [str(run) for run in args.runs if not (run / "summary.json").is_file()]
    if missing:
        raise SystemExit(f"status_vs_p99: no summary.json in {', '.join(missing)}")
    cells = [cell for run in args.runs for cell in cells_of(run, args.modes)]
    if not cells:
        raise SystemExit(
            "status_vs_p99: no cell with a felt slowdown or timed requests shown in these runs"
        )
    text = markdown(cells)
    sys.stdout.write(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
