"""One daemon per state folder, and one per GPU on the machine: claims taken before anything is
bound, held for the daemon's life.

Looking for a live ``daemon.json`` and then binding the socket leaves a window in which two
`orion up` both find none and both start. ``flock`` on ``daemon.lock`` closes it: the kernel
gives the lock to one process, and takes it back when that process ends however it ends
(SIGKILL too), so a lock is never stale and nothing has to clean it up.

A state folder is one user's (docs/architecture.md, "Trust model"), so that lock cannot stop a
second user's daemon, or the same user's daemon of another state folder, from scheduling the same
GPU: each would admit an HP client of its own and gate only its own BE clients. The GPU's claim
is machine-wide instead: a Unix socket bound in Linux's abstract namespace under the GPU's UUID
(``@orion-gpu-<uuid>``). The kernel gives the name to one socket at a time, frees it when that
process ends however it ends, and says who holds it (``SO_PEERCRED`` of a connection to it), so a
second daemon is refused in one line naming the holder's uid and pid. No file is made, so no
other user's folder or mode is trusted. The namespace is the network namespace's: daemons in
containers with networks of their own do not see each other's claims.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from orion_common.errors import OrionError
from orion_common.stand_in_gpus import stand_in_claim_scope
from orion_daemon import state


def already_running(gpu: int, record: dict[str, Any] | None) -> OrionError:
    """The one-line refusal of a second daemon for ``gpu`` (``record``: the running one's)."""
    who = ""
    if record is not None:
        who = f" (pid {record.get('pid')}, since {record.get('started_utc')})"
    return OrionError(
        f"an orion daemon already runs for GPU {gpu}{who}",
        hint=f"`orion status --gpu {gpu}` shows it; `orion down --gpu {gpu}` stops it",
    )


@contextlib.contextmanager
def folder_lock(folder: Path, gpu: int) -> Iterator[None]:
    """Holds ``folder``'s ``daemon.lock`` for the block; refuses at once while another process
    holds it (a daemon running or starting). The descriptor is not inherited by children (an
    MPS daemon must not keep the lock after this daemon has gone)."""
    path = folder / state.LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as error:
        raise OrionError(f"cannot open the daemon lock {path}: {error.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # The holder may not have written its record yet (it is starting): say what is known.
            raise already_running(gpu, state.live_record(folder)) from None
        yield
    finally:
        os.close(fd)  # releases the lock


GPU_CLAIM_PREFIX = "orion-gpu-"
_ABSTRACT_NAME_BYTES = 107  # sun_path holds 108 bytes; the leading NUL is the first


def gpu_claim_name(uuid: str) -> str:
    """The abstract socket name that claims the GPU ``uuid`` (a leading NUL: no file). A
    stand-in GPU's claim is scoped by :data:`~orion_common.stand_in_gpus.CLAIM_SCOPE_VARIABLE`
    where it is set: stand-ins are no machine's hardware, and two test sessions on one machine
    give theirs the same UUIDs."""
    name = GPU_CLAIM_PREFIX + uuid
    scope = stand_in_claim_scope()
    if scope:
        name += "@" + scope
    return "\0" + name.encode()[:_ABSTRACT_NAME_BYTES].decode(errors="ignore")


def claim_holder(name: str) -> tuple[int, int] | None:
    """(pid, uid) of the process listening on the abstract socket ``name``; None if none does
    (it has just gone) or the kernel will not say."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        probe.settimeout(2.0)
        probe.connect(name)
        credentials = probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _gid = struct.unpack("3i", credentials)
        return pid, uid
    except OSError:
        return None
    finally:
        probe.close()


def gpu_claimed(gpu: int, uuid: str, holder: tuple[int, int] | None) -> OrionError:
    """The one-line refusal of a daemon for a GPU that another daemon already schedules."""
    which = f"GPU {gpu} ({uuid})"
    if holder is None:
        return OrionError(
            f"{which} is already claimed by another orion daemon, which is going away",
            hint="start this one again in a moment",
        )
    pid, uid = holder
    if uid == os.getuid():
        return OrionError(
            f"{which} is already scheduled by another orion daemon of yours (pid {pid}), with "
            "another state folder: two daemons on one GPU would each admit a high-priority "
            "client and gate only their own clients",
            hint="stop that one first (`orion down` with its --state-dir or ORION_STATE_DIR), "
            "or use it",
        )
    return OrionError(
        f"{which} is already scheduled by the orion daemon of another user (uid {uid}, "
        f"pid {pid}): a daemon serves one user, and two on one GPU would each admit a "
        "high-priority client and gate only their own clients",
        hint=f"ask uid {uid} to stop it (`orion down`), or run this work as that user's clients",
    )


@contextlib.contextmanager
def gpu_claim(gpu: int, uuid: str | None) -> Iterator[None]:
    """Holds the machine-wide claim on the GPU ``uuid`` for the block; refuses at once while
    another process (any user's daemon) holds it. A GPU whose UUID is not known (a daemon started
    without ``--gpu-uuid``: tests, the stand-in GPU) is claimed by its state folder's lock alone.
    The socket is not inherited by children (an MPS daemon must not keep the claim)."""
    if not uuid:
        yield
        return
    name = gpu_claim_name(uuid)
    claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        try:
            claim.bind(name)
        except OSError as error:
            if error.errno != errno.EADDRINUSE:
                raise OrionError(f"cannot claim GPU {gpu} ({uuid}): {error.strerror}") from None
            raise gpu_claimed(gpu, uuid, claim_holder(name)) from None
        claim.listen(1)  # the kernel records who listens: what a refused daemon is told
        yield
    finally:
        claim.close()  # frees the name
