"""The run directory (format ``orion-run`` version 1, docs/architecture.md) as it is written.

Runs take minutes and end in many ways (finished, Ctrl-C, a client killed, the runner killed), and
``orion report`` must read whatever is left. So ``run.json`` is only ever replaced atomically
(a reader sees the old or the new record, never half of one) and says ``running`` until the end
is known; tables are appended a row at a time and flushed at least every half second, so a crash
loses at most the last few rows, and a row cut mid-write has no newline, which the reader drops.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import Any

from orion_common import run_format
from orion_common.atomic_io import write_json_atomic
from orion_common.errors import OrionError
from orion_common.runclock import utc_now

# The format itself (name, version, statuses, table schemas) is declared in orion_common.run_format;
# these names are what the writers use: a table's header is every declared column.
RUN_FORMAT = run_format.FORMAT
RUN_VERSION = run_format.VERSION
DISTRIBUTION = "orion-gpu-share"

STATUS_RUNNING = run_format.STATUS_RUNNING
STATUS_COMPLETE = run_format.STATUS_COMPLETE
STATUS_INCOMPLETE = run_format.STATUS_INCOMPLETE
STATUS_FAILED = run_format.STATUS_FAILED

INFERENCE_COLUMNS = run_format.column_names(run_format.INFERENCE_COLUMNS)
TRAINING_COLUMNS = run_format.column_names(run_format.TRAINING_COLUMNS)
GPU_COLUMNS = run_format.column_names(run_format.GPU_COLUMNS)
TRACE_COLUMNS = run_format.column_names(run_format.TRACE_COLUMNS)


def client_entry(
    client: Any, *, seed: int, profile: Path | None, table: str, log: str | None
) -> dict[str, Any]:
    """A client's first entry in run.json (a :class:`colocation.config.ClientConfig`, its seed,
    profile, table and log paths); the fields that change as it runs start empty. One writer
    for `orion colocate` and runs on Ray alike."""
    return {
        "name": client.name,
        "role": client.role,
        "workload": client.workload,
        "mode": client.mode,
        "batch_size": client.batch_size,
        "dtype": client.dtype,
        "options": dict(client.options),
        "arrivals": client.arrivals.model_dump(mode="json") if client.arrivals else None,
        "profile": str(profile) if profile is not None else None,
        "seed": seed,
        "table": table,
        "log": log,
        "spec": f"clients/{client.name}.spec.json",
        "pid": None,
        "exit_code": None,
        "error": None,
        "log_tail": [],
        "window_start_s": None,
        "window_end_s": None,
    }


def create_run_dir(output_dir: Path, policy: str, now: datetime | None = None) -> Path:
    """A new, empty ``<output_dir>/<policy>-<UTC yyyymmdd-HHMMSS>[-n]`` folder.

    Named by policy and start time so a folder of runs sorts and reads naturally; ``-n`` keeps
    two runs started within one second apart. ``mkdir`` without ``exist_ok`` is the claim, so
    two runners can never share a folder.
    """
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%d-%H%M%S")
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OrionError(
            f"cannot create output folder {output_dir}: {exc.strerror or exc}"
        ) from None
    for attempt in range(1000):
        name = f"{policy}-{stamp}" if attempt == 0 else f"{policy}-{stamp}-{attempt}"
        path = output_dir / name
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise OrionError(f"cannot create run folder {path}: {exc.strerror or exc}") from None
        (path / "clients").mkdir()
        (path / "logs").mkdir()
        return path
    raise OrionError(f"too many runs named {policy}-{stamp} in {output_dir}")


def orion_version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def git_revision(source_root: Path | None = None) -> str | None:
    """The commit of the orion source tree, when it is a git checkout (else ``None``).

    Only a ``.git`` right at the source root counts: an installed orion inside some other
    repository (a venv in a project folder) must not report that project's commit.
    """
    root = source_root or Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        result = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    revision = result.stdout.strip()
    return revision if result.returncode == 0 and revision else None


class RunRecord:
    """``run.json`` in memory. Every :meth:`save` replaces the file atomically.

    As a context manager it guarantees an end state: leaving the block by an exception (Ctrl-C
    included) or without :meth:`finish` marks the run ``incomplete``, so a directory is never
    left saying ``running`` by a runner that is still alive to say otherwise.
    """

    def __init__(self, run_dir: Path, data: dict[str, Any]) -> None:
        self.run_dir = run_dir
        self.path = run_dir / "run.json"
        self.data = data

    @classmethod
    def begin(
        cls,
        run_dir: Path,
        *,
        policy: str,
        config: dict[str, Any],
        environment: dict[str, Any],
        clients: Iterable[dict[str, Any]],
        warnings: Sequence[str] = (),
    ) -> RunRecord:
        """Write the first ``run.json`` (status ``running``) before any client starts."""
        record = cls(
            run_dir,
            {
                "format": RUN_FORMAT,
                "version": RUN_VERSION,
                "status": STATUS_RUNNING,
                "orion_version": orion_version(),
                "git_revision": git_revision(),
                "policy": policy,
                "config": config,
                "environment": environment,
                "started_utc": utc_now(),
                "ended_utc": None,
                "measure_start_s": None,
                "measure_end_s": None,
                "warnings": list(warnings),
                "notes": [],
                "clients": [dict(entry) for entry in clients],
            },
        )
        record.save()
        return record

    @property
    def status(self) -> str:
        return str(self.data["status"])

    def client(self, name: str) -> dict[str, Any]:
        for entry in self.data["clients"]:
            if entry["name"] == name:
                return entry
        raise KeyError(name)

    def note(self, text: str) -> None:
        """Something a reader of the results should know (kept in ``notes``)."""
        if text not in self.data["notes"]:
            self.data["notes"].append(text)

    def save(self) -> None:
        write_json_atomic(self.path, self.data)

    def record_table_rows(self, rows: dict[str, int]) -> None:
        """Keep, per table (path relative to the run directory), the data rows its writer wrote,
        so a reader can tell a table cut after the run from one that was short all along."""
        self.data[run_format.TABLE_ROWS_KEY] = {str(k): int(v) for k, v in sorted(rows.items())}

    def finish(self, status: str) -> None:
        """Record the end state and time; the run's record is final after this."""
        self.data["status"] = status
        self.data["ended_utc"] = utc_now()
        self.save()

    def __enter__(self) -> RunRecord:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.status != STATUS_RUNNING:
            return
        if exc_type is None:
            self.note("the runner ended without recording an end state")
        elif issubclass(exc_type, KeyboardInterrupt):
            self.note("interrupted (Ctrl-C, SIGTERM or a stop request) before the end")
        else:
            self.note(f"the runner stopped on an error: {exc_type.__name__}: {exc}")
        self.finish(STATUS_INCOMPLETE)
