"""`orion status`, `orion run`, `orion up`, `orion down` and `orion quota` start light.

They are run beside a latency-critical inference service: on an H100 each start of `orion
status` slowed that service's requests 3-5x for about 100 ms while it loaded pandas and
matplotlib it never used (issue 40). Each check runs in a fresh interpreter, so what an
earlier test imported does not hide an import.
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orion_common import sysinfo

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("pandas", "matplotlib", "scipy", "torch", "cupy")


def heavy_modules_after(code: str) -> list[str]:
    """The heavy packages in ``sys.modules`` after ``code`` ran in a fresh interpreter."""
    script = (
        "import json, sys\n"
        f"{code}\n"
        f"print(json.dumps(sorted(name for name in {HEAVY!r} if name in sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.parametrize(
    "module",
    ["orion_cli.app", "orion_daemon.client", "orion_daemon.server", "orion.ray", "reporting"],
)
def test_importing_loads_no_heavy_package(module: str) -> None:
    assert heavy_modules_after(f"import {module}") == []


COMMANDS = [
    ["--help"],
    *([name, "--help"] for name in ("status", "run", "up", "down", "quota")),
    # with no daemon: each gets as far as looking for one (quota: checks its values first)
    ["status", "--state-dir", "{state}"],
    ["status", "--state-dir", "{state}", "--json"],
    ["down", "--state-dir", "{state}"],
    ["run", "--hp", "--state-dir", "{state}", "--", "true"],
    ["quota", "{state}", "hp", "--memory-limit", "1GiB", "--max-util", "0.5", "--min-util", "0.1"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_running_a_light_command_loads_no_heavy_package(argv: list[str], tmp_path: Path) -> None:
    argv = [part.format(state=tmp_path / "state") for part in argv]
    code = (
        "from orion_cli.app import app\n"
        "try:\n"
        f"    app({argv!r}, prog_name='orion')\n"
        "except SystemExit:\n"
        "    pass\n"
    )
    assert heavy_modules_after(code) == []


class FakeDriver:
    """The CUDA driver API functions :func:`sysinfo._driver_device_properties` calls, answering
    for one H100; ``failing`` names a function that returns an error instead."""

    def __init__(self, failing: str = "") -> None:
        self.failing = failing

    def _result(self, name: str) -> int:
        return 100 if name == self.failing else 0  # CUDA_ERROR_NO_DEVICE

    def cuInit(self, flags: int) -> int:
        return self._result("cuInit")

    def cuDeviceGetCount(self, count: Any) -> int:
        count._obj.value = 1
        return self._result("cuDeviceGetCount")

    def cuDeviceGet(self, device: Any, index: int) -> int:
        device._obj.value = index
        return self._result("cuDeviceGet")

    def cuDeviceGetAttribute(self, value: Any, attribute: int, device: ctypes.c_int) -> int:
        value._obj.value = {16: 132, 75: 9, 76: 0}[attribute]
        return self._result("cuDeviceGetAttribute")

    def cuDeviceGetName(self, name: Any, length: int, device: ctypes.c_int) -> int:
        name.value = b"NVIDIA H100 80GB HBM3"
        return self._result("cuDeviceGetName")

    def cuDeviceTotalMem_v2(self, memory: Any, device: ctypes.c_int) -> int:
        memory._obj.value = 80 << 30
        return self._result("cuDeviceTotalMem_v2")


def test_gpu_facts_come_from_the_driver_api_not_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """`orion up` reads the GPU's SM count; asking torch for it imported torch (seconds of CPU)
    beside the service the daemon is started to protect."""
    monkeypatch.setattr(sysinfo.ctypes, "CDLL", lambda name: FakeDriver())
    props = sysinfo._driver_device_properties(0)
    assert props is not None
    assert (props.name, props.total_memory, props.multi_processor_count) == (
        "NVIDIA H100 80GB HBM3",
        80 << 30,
        132,
    )
    assert (props.major, props.minor) == (9, 0)
    assert sysinfo._driver_device_properties(1) is None  # no such GPU


@pytest.mark.parametrize(
    "failing", ["cuInit", "cuDeviceGetCount", "cuDeviceGetAttribute", "cuDeviceTotalMem_v2"]
)
def test_a_driver_that_cannot_answer_gives_none(
    failing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sysinfo.ctypes, "CDLL", lambda name: FakeDriver(failing))
    assert sysinfo._driver_device_properties(0) is None


def test_no_driver_library_gives_none() -> None:
    assert sysinfo._driver_device_properties(0, library="libno-such-cuda.so.1") is None
