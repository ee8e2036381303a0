"""The MPS daemon of a stopped orion daemon, quit once the clients it was left to have exited.

An orion daemon that stops while clients still run leaves its private MPS daemon to them:
quitting it would take the GPU from programs that outlive orion's daemon (``orion down`` beside a
trainer mid-epoch). Left alone it would run on after them, for good: a process, its servers and
their GPU contexts, and a pipe folder every later program started with that folder would join.
So the daemon hands it over, as it stops, to a small detached process of this module
(:func:`orion_daemon.mps.hand_over` starts it) that waits for those clients to exit (on their
pidfds: no polling where the kernel has them) and then stops the MPS daemon as the daemon itself
would have (:func:`orion_daemon.mps.stop`), removing its short pipe folder if it had one. It
needs no GPU and imports nothing that would reach the driver.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import shutil
import time
from pathlib import Path

from orion_common.processes import process_alive
from orion_daemon.mps import MpsDaemon, stop

STOP_TIMEOUT_S = 15.0
"""How long the MPS daemon and each of its servers get to quit before they are killed."""
FALLBACK_LOOK_S = 1.0
"""How often a client is looked for where the kernel gives no pidfd (Linux before 5.3)."""


def wait_all_gone(pids: list[int]) -> None:
    """Returns once every process in ``pids`` has exited."""
    descriptors: list[int] = []
    unwatched: list[int] = []
    for pid in pids:
        try:
            descriptors.append(os.pidfd_open(pid))
        except ProcessLookupError:
            continue  # gone already
        except (AttributeError, OSError):
            unwatched.append(pid)
    try:
        poller = select.poll()
        for descriptor in descriptors:
            poller.register(descriptor, select.POLLIN)
        left = len(descriptors)
        while left:
            for descriptor, _ in poller.poll():  # readable once its process has exited
                poller.unregister(descriptor)
                left -= 1
    finally:
        for descriptor in descriptors:
            os.close(descriptor)
    while any(process_alive(pid) for pid in unwatched):
        time.sleep(FALLBACK_LOOK_S)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m orion_daemon.mps_handover",
                                     description=__doc__.splitlines()[0])  # fmt: skip
    parser.add_argument("--control", type=Path, required=True)
    parser.add_argument("--pipe-dir", type=Path, required=True)
    parser.add_argument("--log-dir", type=Path, required=True)
    parser.add_argument("--mps-pid", type=int, required=True)
    parser.add_argument("--remove", type=Path, default=None)
    parser.add_argument("clients", type=int, nargs="+")
    args = parser.parse_args(argv)
    wait_all_gone(args.clients)
    daemon = MpsDaemon(args.control, args.pipe_dir, args.log_dir, args.mps_pid)
    notes = stop(daemon, {**os.environ, **daemon.environment}, STOP_TIMEOUT_S)
    with contextlib.suppress(OSError), (args.log_dir / "handover.log").open("a") as log:
        log.writelines(f"{note}\n" for note in ["clients gone: MPS daemon stopped", *notes])
    if args.remove is not None:
        shutil.rmtree(args.remove, ignore_errors=True)


if __name__ == "__main__":
    main()
