"""The pieces every ``jobs.json`` model and message is made of: problems, values, paths.

The lowest layer of the jobs-file modules (:mod:`colocation.arrivals` models,
:mod:`colocation.jobs_schema`, :mod:`colocation.jobs_errors`, :mod:`colocation.profiles`);
it imports nothing of orion's but the error type.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, NamedTuple

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationInfo
from pydantic_core import PydanticCustomError

from orion_common.errors import OrionError

EXAMPLE_HINT = "`orion colocate --example` prints a valid jobs.json to start from"


class Problem(NamedTuple):
    """One thing wrong with a jobs config: where (``clients[1].batch_size``) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class JobsConfigError(OrionError):
    """Every problem found in a jobs config, so the user fixes them in one go.

    The message is a header line followed by one ``field.path: message`` line per problem;
    ``problems`` holds the same as data.
    """

    def __init__(self, header: str, problems: list[Problem], hint: str | None = None) -> None:
        self.problems = tuple(problems)
        lines = [header, *(f"  {problem}" for problem in self.problems)]
        super().__init__("\n".join(lines), hint=hint)


def problem(message: str) -> PydanticCustomError:
    """A validation error whose text reaches the user as is (:mod:`colocation.jobs_errors`)."""
    # the message goes through the context, so braces in user values are never format fields
    return PydanticCustomError("orion", "{message}", {"message": message})


def show(value: Any) -> str:
    """A value the way the user wrote it in JSON (strings quoted), kept short."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        text = repr(value)
    elif isinstance(value, (int, float)):
        text = number(value)
    else:
        try:
            text = json.dumps(value, default=str, separators=(", ", ": "))
        except (TypeError, ValueError):
            text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def number(value: float) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value)


# --------------------------------------------------------------------------------------------
# paths


def _path_input(value: Any) -> Any:
    """Accept a non-empty string as a path (strict mode would otherwise want a Path object)."""
    if isinstance(value, Path):
        return value
    if isinstance(value, str):
        if not value.strip():
            raise problem("must be a non-empty path")
        return Path(value)
    raise problem(f"must be a path string (got {show(value)})")


def _base_dir(info: ValidationInfo) -> Path:
    context = info.context if isinstance(info.context, Mapping) else {}
    return Path(context.get("base_dir") or Path.cwd()).absolute()


def resolve_path(path: Path, info: ValidationInfo) -> Path:
    """``path`` made absolute against the jobs file's folder (the validation context)."""
    return Path(os.path.normpath(_base_dir(info) / path.expanduser()))


def existing_file(path: Path, info: ValidationInfo) -> Path:
    """:func:`resolve_path`, refusing anything but an existing file."""
    resolved = resolve_path(path, info)
    where = (
        "" if path.is_absolute() else f" (relative paths are resolved against {_base_dir(info)})"
    )
    if not resolved.exists():
        raise problem(f"file not found: {resolved}{where}")
    if not resolved.is_file():
        raise problem(f"not a file: {resolved}{where}")
    return resolved


PathField = Annotated[Path, BeforeValidator(_path_input)]


class StrictModel(BaseModel):
    """Base of every jobs model: strict types, unknown keys refused, immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
