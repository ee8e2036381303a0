"""Output paths checked before any work starts, and one error for a write that fails.

A command that works for minutes (a plan, a simulation, a report over many runs) and only then
finds it cannot write its ``-o`` is the worst way to learn about a typo. Commands call
:func:`check_output_file` / :func:`check_output_folder` first; a write that fails anyway (a
full disk) is turned into the same one-line :class:`OrionError` by :func:`write_error`.

A path is checked by what would be done to it: its nearest existing folder must be a folder in
which a file can be created (tried for real with a temporary file, since permission bits do not
tell a read-only or virtual file system such as ``/proc`` apart).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from orion_common.errors import OrionError


def write_error(path: str | os.PathLike[str], error: OSError, what: str = "file") -> OrionError:
    """The one error for a write that failed: which path, and the system's reason."""
    return OrionError(
        f"cannot write {what} {os.fspath(path)}: {error.strerror or error}",
        hint="pick another output path, or fix the folder's permissions",
    )


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path.cwd()


def _probe(folder: Path, target: Path, what: str) -> None:
    """Create and remove a temporary file in ``folder``: the only reliable "can I write here"."""
    if not folder.is_dir():
        raise OrionError(
            f"cannot write {what} {target}: {folder} is a file, not a folder",
            hint="pick another output path",
        )
    try:
        fd, name = tempfile.mkstemp(prefix=".orion-write-check.", dir=folder)
    except OSError as error:
        raise write_error(target, error, what) from None
    os.close(fd)
    Path(name).unlink(missing_ok=True)


def check_output_file(path: str | os.PathLike[str], what: str = "file") -> Path:
    """``path`` can be written as a file (created, or replaced when it is a file already)."""
    target = Path(path)
    if target.is_dir():
        raise OrionError(
            f"cannot write {what} {target}: it is a folder",
            hint="this output is a file: give a file name",
        )
    _probe(_nearest_existing(target.parent), target, what)
    return target


def check_output_folder(path: str | os.PathLike[str], what: str = "folder") -> Path:
    """Files can be written into ``path`` (an existing folder, or one that can be created)."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise OrionError(
            f"cannot write {what} {target}: it is a file, not a folder",
            hint="this output is a folder; pick another path",
        )
    _probe(_nearest_existing(target), target, what)
    return target


def write_with(path: str | os.PathLike[str], writer: Callable[[Path], object]) -> Path:
    """``writer(path)`` (a figure's ``savefig``, a table's ``to_csv``) with the one write
    error."""
    target = Path(path)
    try:
        writer(target)
    except OSError as error:
        raise write_error(target, error) from None
    return target


def make_folder(path: str | os.PathLike[str], what: str = "folder") -> Path:
    """``mkdir -p`` with the one write error."""
    target = Path(path)
    check_output_folder(target, what)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise write_error(target, error, what) from None
    return target
