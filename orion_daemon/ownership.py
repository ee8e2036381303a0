"""Who a daemon trusts, and who trusts a daemon (docs/architecture.md, "Trust model").

A daemon serves the user who started it. Its state folder is that user's alone (created 0700,
refused when another uid owns it, when anyone else may write to it, or when it is a symlink),
because whoever can write there can put a socket of their own where clients look for the
daemon. Clients do not rely on the folder alone: they ask the kernel who listens on the socket
(``SO_PEERCRED``) and talk only to a daemon of their own uid, and they take from its answer only
the variables orion defines, so even a daemon that is not orion's cannot choose a library for
them to load. The daemon in turn answers only its own uid and root (which can read any process's
memory anyway, and may stop a user's daemon as any other process).
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from collections.abc import Mapping
from pathlib import Path

from orion_common.errors import OrionError

FOREIGN_WRITE_BITS = stat.S_IWGRP | stat.S_IWOTH
ANSWER_VARIABLES = frozenset(
    {
        "ORION_RUN",
        "ORION_CLIENT",
        "ORION_STRICT",
        "ORION_BE_WHEN_DAEMON_GONE",  # what a BE client does when the daemon falls silent
        "ORION_DAEMON_GONE_HOLD_S",
        "ORION_PRELOAD",  # sent by daemons of earlier versions; ignored (a client loads its own)
        "CUDA_VISIBLE_DEVICES",  # the GPU's UUID: the driver must number the GPU as the daemon
        # the daemon's private MPS daemon (sharing "mps"); time-sliced, a folder where none runs
        "CUDA_MPS_PIPE_DIRECTORY",
        "CUDA_MPS_LOG_DIRECTORY",
        "CUDA_MPS_CLIENT_PRIORITY",  # BE clients under MPS run at its lower priority
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",  # BE clients' SM share (`orion up --be-sm-percent`)
    }
)
"""The only variables a daemon's answer to ``join`` may set (the native library keeps the same
list, daemon_join.cpp): never ``LD_PRELOAD``, ``PATH`` or anything that would run code."""


def _describe(path: Path, info: os.stat_result) -> str:
    return f"{path} (owner uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):04o})"


def folder_problem(path: Path) -> str | None:
    """Why ``path`` may not hold a daemon's state; None when it is this user's private folder
    (or does not exist yet)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"cannot read the state folder {path}: {error.strerror}"
    me = os.getuid()
    if stat.S_ISLNK(info.st_mode):
        return f"refusing the state folder {_describe(path, info)}: it is a symlink"
    if not stat.S_ISDIR(info.st_mode):
        return f"refusing the state folder {_describe(path, info)}: it is not a folder"
    if info.st_uid != me:
        return (
            f"refusing the state folder {_describe(path, info)}: it belongs to another user "
            f"(this is uid {me})"
        )
    if info.st_mode & FOREIGN_WRITE_BITS:
        return (
            f"refusing the state folder {_describe(path, info)}: others may write to it "
            "(it must be 0700)"
        )
    return None


def check_folder(folder: Path) -> None:
    """Refuses (one line, naming the path, its owner and mode) a state folder, or the folder of
    every GPU's state folders above it, that is not this user's private folder."""
    for path in (folder.parent, folder):
        problem = folder_problem(path)
        if problem is not None:
            raise OrionError(
                problem,
                hint="remove it, or point ORION_STATE_DIR at a folder of your own",
            )


def private_folder(folder: Path) -> Path:
    """``folder`` (a GPU's state folder) and the folder above it, created 0700 where missing
    and checked either way (:func:`check_folder`)."""
    check_folder(folder)
    try:
        folder.parent.parent.mkdir(parents=True, exist_ok=True)
        for path in (folder.parent, folder):
            path.mkdir(mode=0o700, exist_ok=True)
    except OSError as error:
        raise OrionError(f"cannot create the state folder {folder}: {error.strerror}") from None
    check_folder(folder)  # what was there already, or what a racing process put there
    return folder


def peer_credentials(connection: socket.socket) -> tuple[int, int, int]:
    """``(pid, uid, gid)`` of the process at the other end of a Unix socket, as the kernel
    recorded it at connect time (Linux ``SO_PEERCRED``): a message cannot lie about them."""
    raw = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


def peer_may_use_daemon(uid: int) -> bool:
    """Whether the daemon answers a process of ``uid``: its own user's, and root's."""
    return uid in (os.getuid(), 0)


def check_daemon_peer(connection: socket.socket, socket_path: Path) -> None:
    """Refuses a daemon socket whose listener runs as another uid than this process's."""
    _pid, uid, _gid = peer_credentials(connection)
    me = os.getuid()
    if uid != me:
        raise OrionError(
            f"refusing the orion daemon at {socket_path}: it runs as uid {uid}, not as this "
            f"user (uid {me})",
            hint="a daemon serves its own user only; start your own with `orion up`",
        )


def checked_environment(environment: object) -> dict[str, str]:
    """The variables of a daemon's answer to ``join``, refused whole (one line) when it sets
    anything outside :data:`ANSWER_VARIABLES` or a value that is not one line of text."""
    if not isinstance(environment, Mapping):
        raise OrionError("the daemon's answer to join has no environment")
    checked = {}
    for name, value in environment.items():
        if name not in ANSWER_VARIABLES:
            raise OrionError(
                f"refusing the daemon's answer: it sets {str(name)[:64]!r}, which is not one of "
                f"the variables a daemon may set ({', '.join(sorted(ANSWER_VARIABLES))})"
            )
        if not isinstance(value, str) or "\n" in value or "\0" in value:
            raise OrionError(f"refusing the daemon's answer: {name} is not one line of text")
        checked[str(name)] = value
    return checked
