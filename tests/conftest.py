"""Skip GPU tests cleanly on machines without CUDA, and torchvision tests where it cannot import;
keep every test's daemons (a colocate run's own included) out of the user's state folder, and
their stand-in GPUs' claims out of other sessions'; build
the stand-in driver every native test drives, compiled once; fail a test that leaves the signal
state of pytest's main thread changed."""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from native_harness import Harness

# Stand-in GPUs carry the same UUIDs in every test session: scope their machine-wide claims to
# this session, so that two sessions on one machine (a developer's beside CI's) leave each
# other's daemons alone. Inherited by every process the tests start.
os.environ.setdefault("ORION_STAND_IN_CLAIM_SCOPE", f"pytest-{os.getpid()}")


@functools.cache
def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@functools.cache
def torchvision_works() -> bool:
    try:
        import torchvision  # noqa: F401
    except Exception:  # a CPU torch with a mismatched torchvision fails at import
        return False
    return True


@pytest.fixture(scope="session")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    """The stand-in driver and its launcher (tests/native_harness.py), built once per session;
    the tests that need them skip where no C++ compiler is."""
    from native_harness import build_harness  # only for the sessions that run native tests

    try:
        return build_harness(tmp_path_factory.mktemp("fake_cuda"))
    except RuntimeError as error:
        pytest.skip(str(error))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_gpu = pytest.mark.skip(reason="needs an NVIDIA GPU with CUDA")
    skip_tv = pytest.mark.skip(reason="needs a working torchvision")
    for item in items:
        # The marker itself, not the keyword: a parameter named "gpu" must not skip a CPU test.
        if item.get_closest_marker("gpu") is not None and not cuda_available():
            item.add_marker(skip_gpu)
        if item.get_closest_marker("torchvision") is not None and not torchvision_works():
            item.add_marker(skip_tv)


@pytest.fixture(autouse=True)
def _private_state_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A state folder per test (short: daemon sockets have 107 bytes for their path), so a
    daemon running on this machine is never joined and nothing is left in its folder."""
    monkeypatch.setenv("ORION_STATE_DIR", str(tmp_path_factory.mktemp("state")))


GUARDED_SIGNALS = (signal.SIGINT,)
"""The handlers tests rely on finding as a terminal leaves them: Ctrl-C's. Not SIGTERM's: Ray
installs a SIGTERM handler of its own in the driver each time a test starts a local cluster,
which is Ray's business, and no test relies on pytest's SIGTERM handling."""


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:  # a real-time signal the enum does not name
        return f"signal {signum}"


def _signal_state() -> tuple[frozenset[int], dict[int, Any]]:
    """The main thread's blocked signals and its handlers of GUARDED_SIGNALS."""
    blocked = frozenset(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))
    return blocked, {int(s): signal.getsignal(s) for s in GUARDED_SIGNALS}


@pytest.fixture(autouse=True)
def _signals_left_as_found() -> Iterator[None]:
    """Fails the test that leaves a signal blocked or SIGINT handled otherwise (the
    code under test, its fixtures or a native library it loads), and puts them back, so the
    failure is that test's and not a later one's that relies on Ctrl-C (a process started by
    pytest inherits its signal mask, too). Autouse, so torn down after the test's own fixtures."""
    blocked, handlers = _signal_state()
    yield
    now_blocked, now_handlers = _signal_state()
    if (now_blocked, now_handlers) == (blocked, handlers):
        return
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    for signum, handler in handlers.items():
        if handler is not None:  # None: set outside Python, cannot be put back from here
            signal.signal(signum, handler)
    changes = []
    if now_blocked != blocked:
        names = sorted(_signal_name(s) for s in now_blocked ^ blocked)
        changes.append(f"signal mask changed for {', '.join(names)}")
    changes += [
        f"{_signal_name(signum)} handler {handlers[signum]!r} -> {now_handlers[signum]!r}"
        for signum in handlers
        if now_handlers[signum] != handlers[signum]
    ]
    pytest.fail(f"the test left pytest's signal state changed: {'; '.join(changes)}")
