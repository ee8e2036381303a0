"""Jobs files that break Python's JSON reader itself: a clean one-line error, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from colocation.config import load_jobs
from orion_cli.app import app
from orion_common.errors import OrionError

DEPTH = 200_000


def _deep_jobs(tmp_path: Path, opening: str = "[", closing: str = "]") -> Path:
    path = tmp_path / "jobs.json"
    path.write_text(opening * DEPTH + closing * DEPTH)
    return path


@pytest.mark.parametrize(("opening", "closing"), [("[", "]"), ('{"a":', "}")])
def test_deeply_nested_jobs_file_is_a_json_error(
    tmp_path: Path, opening: str, closing: str
) -> None:
    path = _deep_jobs(tmp_path, opening, closing)
    with pytest.raises(OrionError) as info:
        load_jobs(path)
    assert (
        info.value.message
        == f"jobs file {path}: nested too deeply (arrays or objects inside each other)"
    )
    assert info.value.hint


def test_colocate_on_a_deeply_nested_jobs_file_prints_one_line(tmp_path: Path) -> None:
    path = _deep_jobs(tmp_path)
    result = CliRunner().invoke(app, ["colocate", str(path)])
    assert result.exit_code == 1, result.output
    assert not isinstance(result.exception, RecursionError)
    assert "Traceback" not in result.output
    text = " ".join(result.output.split())
    assert f"error: jobs file {path}: nested too deeply" in text


def test_moderately_nested_json_still_reaches_validation(tmp_path: Path) -> None:
    """Nesting Python can read is the validator's business, with its usual message."""
    path = tmp_path / "jobs.json"
    path.write_text("[" * 50 + "]" * 50)
    with pytest.raises(OrionError) as info:
        load_jobs(path)
    assert "nested too deeply" not in info.value.message
