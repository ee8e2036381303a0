"""Small strict readers for orion's own JSON files (fleet, pair matrix, plan, plan-run record):
each problem is one `field.path: message`, which the one loader (:func:`load_checked`,
:func:`checked`) turns into a one-line OrionError naming the file."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from orion_common.errors import OrionError


class FieldError(Exception):
    """One problem at one place in a document; the loaders turn it into an OrionError."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


T = TypeVar("T")


def checked(parse: Callable[[Any], T], data: Any, source: str, hint: str | None = None) -> T:
    """``parse(data)``, its :class:`FieldError` turned into the one-line OrionError
    ``SOURCE: field.path: message`` with ``hint`` (what to read to write the file right)."""
    try:
        return parse(data)
    except FieldError as error:
        raise OrionError(f"{source}: {error}", hint=hint) from None


def load_checked(
    path: str | Path, what: str, parse: Callable[[Any], T], hint: str | None = None
) -> T:
    """The JSON file at ``path`` (``what`` names it in errors), parsed as :func:`checked` does."""
    return checked(parse, read_json(Path(path), what), str(path), hint)


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def read_json(path: Path, what: str) -> Any:
    """The parsed JSON of ``path``, or an OrionError naming the file and what it should be."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise OrionError(f"{what} {path} does not exist") from None
    except OSError as error:
        raise OrionError(f"cannot read {what} {path}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise OrionError(f"cannot read {what} {path}: not UTF-8 text ({error.reason})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise OrionError(
            f"{what} {path} is not valid JSON: "
            f"line {error.lineno} column {error.colno}: {error.msg}"
        ) from None
    except RecursionError:
        raise OrionError(f"{what} {path} is nested too deeply to be one") from None
    except ValueError:  # an integer too long for Python to convert
        raise OrionError(
            f"{what} {path} holds a number too long to read "
            f"(over {sys.get_int_max_str_digits():,} digits)"
        ) from None


def obj(
    data: Any,
    path: str,
    required: tuple[str, ...],
    optional: tuple[str, ...] = (),
    *,
    unknown_ok: bool = False,
) -> dict[str, Any]:
    """``data`` as an object with every required key and, unless ``unknown_ok`` (a record a later
    writer may add fields to), no unknown one."""
    if not isinstance(data, dict):
        raise FieldError(path or "(top level)", "must be an object")
    for key in required:
        if key not in data:
            raise FieldError(join(path, key), "is required")
    if not unknown_ok:
        for key in data:
            if key not in required and key not in optional:
                raise FieldError(join(path, str(key)), "unknown field")
    return data


def string(data: Any, path: str, choices: tuple[str, ...] | None = None) -> str:
    if not isinstance(data, str) or not data.strip():
        raise FieldError(path, "must be a non-empty string")
    if choices is not None and data not in choices:
        raise FieldError(path, f"must be one of {', '.join(choices)}, not {data!r}")
    return data


def number(data: Any, path: str, positive: bool = True, maximum: float | None = None) -> float:
    """A finite number (positive, or at least not negative), at most ``maximum`` when given: a
    size or duration without a bound lets a typo run for hours."""
    if isinstance(data, bool) or not isinstance(data, (int, float)) or not math.isfinite(data):
        raise FieldError(path, "must be a number")
    if positive and data <= 0:
        raise FieldError(path, f"must be positive, not {data}")
    if data < 0:
        raise FieldError(path, f"must not be negative, not {data}")
    if maximum is not None and data > maximum:
        raise FieldError(path, f"must be at most {maximum:,g}, not {data:g}")
    return float(data)


def integer(data: Any, path: str, minimum: int = 0, maximum: int | None = None) -> int:
    if isinstance(data, bool) or not isinstance(data, int):
        raise FieldError(path, "must be an integer")
    if data < minimum:
        raise FieldError(path, f"must be at least {minimum}, not {data}")
    if maximum is not None and data > maximum:
        raise FieldError(path, f"must be at most {maximum:,}, not {data:,}")
    return data


def interval(data: Any, path: str) -> tuple[float, float] | None:
    """``[lo, hi]`` of positive numbers with lo <= hi, or None."""
    if data is None:
        return None
    if not isinstance(data, list) or len(data) != 2:
        raise FieldError(path, "must be [lo, hi] or null")
    lo = number(data[0], join(path, 0))
    hi = number(data[1], join(path, 1))
    if lo > hi:
        raise FieldError(path, f"lo {lo} is above hi {hi}")
    return (lo, hi)


def array(data: Any, path: str, nonempty: bool = False) -> list[Any]:
    if not isinstance(data, list):
        raise FieldError(path, "must be a list")
    if nonempty and not data:
        raise FieldError(path, "must not be empty")
    return data
