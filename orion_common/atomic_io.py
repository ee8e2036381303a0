"""Writes that never leave a half-written file behind, even on a crash or Ctrl-C.

Run directories and profiles are read by later commands; a torn ``run.json`` would turn an
interrupted run into an unreadable one. Everything is written to a temporary file in the same
folder, flushed to disk and renamed over the target, which POSIX makes atomic.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from orion_common.output_paths import write_error


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Replace ``path`` with ``text`` in one atomic step; a failed write is one OrionError."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as error:
        raise write_error(target, error) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except OSError as error:
        Path(tmp_name).unlink(missing_ok=True)
        raise write_error(target, error) from None
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    """Replace ``path`` with ``data`` as indented JSON in one atomic step."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
