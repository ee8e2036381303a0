"""The shared-memory protocols of the native library, exercised under contention (CPU only).

The in-flight ring is rewritten by its owner while other processes read it; once it wraps, a
reader can meet a slot mid-rewrite. `tests/native/seqlock_stress.cpp` laps a tiny ring tens of
millions of times under two readers and counts reads that claimed to be consistent but mixed two
launches. A reader without the protocol's second check accepts tens of thousands of torn reads
in the same run; with it, none may pass.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def build(tmp_path: Path, name: str) -> Path:
    """Compiles ``tests/native/<name>.cpp`` against the library's headers."""
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    program = tmp_path / name
    subprocess.run(
        [compiler, "-std=c++17", "-O2", "-pthread", f"-I{ROOT / 'scheduler_core' / 'native'}",
         "-o", str(program), str(ROOT / "tests" / "native" / f"{name}.cpp")],
        check=True,
    )  # fmt: skip
    return program


def test_the_in_flight_ring_never_returns_a_torn_launch(tmp_path: Path) -> None:
    program = build(tmp_path, "seqlock_stress")
    result = subprocess.run([str(program), "30000000"], capture_output=True, text=True, timeout=120)
    torn, checked = (int(word) for word in result.stdout.split()[1::2])
    assert checked > 0, result.stdout
    assert torn == 0, result.stdout
    assert result.returncode == 0


def test_the_probe_table_finds_claims_and_shares_slots_as_documented(tmp_path: Path) -> None:
    # One probe loop serves the shared kernel and graph tables and the client's caches.
    program = build(tmp_path, "probe_table_test")
    result = subprocess.run([str(program)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout
    assert result.stdout.strip() == "ok"
