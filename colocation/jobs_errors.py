"""pydantic's validation errors -> :class:`~colocation.jobs_fields.Problem` lines a user can act on.

``clients[1].arrivals.rate_per_s: must be > 0 (got 0)`` instead of pydantic's wording and
locations (its discriminated-union tags are not keys the user wrote); unknown keys get the
closest allowed name.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import ConfigDict, TypeAdapter, ValidationError

from colocation.arrivals import ARRIVAL_KINDS, ARRIVAL_MODELS
from colocation.jobs_fields import Problem, StrictModel, number, show
from colocation.jobs_schema import ClientConfig, JobsConfig, RunConfig, Thresholds


def _location(loc: tuple[Any, ...]) -> str:
    """``("clients", 1, "arrivals", "poisson", "rate_per_s")`` -> ``clients[1].arrivals.rate_per_s``

    (the discriminated union's tag is pydantic's, not a key the user wrote).
    """
    parts: list[Any] = []
    for i, part in enumerate(loc):
        if i > 0 and loc[i - 1] == "arrivals" and part in ARRIVAL_KINDS and i < len(loc) - 1:
            continue
        parts.append(part)
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _model_for(parent_loc: tuple[Any, ...]) -> type[StrictModel] | None:
    """The model describing the object at ``parent_loc`` (raw pydantic location, tags kept)."""
    if parent_loc == ():
        return JobsConfig
    if parent_loc == ("run",):
        return RunConfig
    if parent_loc == ("run", "thresholds"):
        return Thresholds
    if len(parent_loc) == 2 and parent_loc[0] == "clients" and isinstance(parent_loc[1], int):
        return ClientConfig
    if len(parent_loc) == 4 and parent_loc[0] == "clients" and parent_loc[2] == "arrivals":
        return ARRIVAL_MODELS.get(parent_loc[3])
    return None


def _unknown_field_message(loc: tuple[Any, ...]) -> str:
    model = _model_for(loc[:-1])
    if model is None:
        return "unknown field"
    allowed = list(model.model_fields)
    what = "unknown field"
    if model in ARRIVAL_MODELS.values():
        what = f"unknown field for {loc[-2]} arrivals"
    close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
    if close:
        return f"{what}; did you mean {close[0]!r}?"
    return f"{what}; allowed: {', '.join(allowed)}"


def _choices(expected: str) -> str:
    return ", ".join(re.findall(r"'([^']*)'", expected)) or expected


def _message(error: Mapping[str, Any]) -> tuple[str, str]:
    """A human path and message for one pydantic error dict."""
    kind = error["type"]
    loc = tuple(error["loc"])
    ctx = error.get("ctx") or {}
    value = error.get("input")
    path = _location(loc)
    got = f" (got {show(value)})"

    if kind == "orion":
        return path, str(ctx.get("message", error["msg"]))
    if kind == "missing":
        return path, "required field is missing"
    if kind == "extra_forbidden":
        return path, _unknown_field_message(loc)
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        kinds = ", ".join(ARRIVAL_KINDS)
        if kind == "union_tag_not_found":
            return f"{path}.kind", f"required field is missing (one of {kinds})"
        return f"{path}.kind", f"must be one of {kinds} (got {show(ctx.get('tag'))})"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return path, f"must be a JSON object{got}"
    simple = {
        "int_type": "must be an integer",
        "int_from_float": "must be a whole number",
        "int_parsing": "must be an integer",
        "float_type": "must be a number",
        "float_parsing": "must be a number",
        "finite_number": "must be a finite number",
        "bool_type": "must be true or false",
        "bool_parsing": "must be true or false",
        "string_type": "must be a string",
        "list_type": "must be a JSON list",
    }
    if kind in simple:
        return path, simple[kind] + got
    bounds = {
        "greater_than": (">", "gt"),
        "greater_than_equal": (">=", "ge"),
        "less_than": ("<", "lt"),
        "less_than_equal": ("<=", "le"),
    }
    if kind in bounds:
        op, key = bounds[kind]
        return path, f"must be {op} {number(ctx[key])}{got}"
    if kind == "literal_error":
        return path, f"must be one of {_choices(str(ctx.get('expected', '')))}{got}"
    if kind == "too_short" and path == "clients":
        return path, "must list at least one client"
    if kind == "too_short":
        return path, f"must have at least {ctx.get('min_length')} item(s)"
    text = str(error["msg"])
    return path, (text[:1].lower() + text[1:]) + got


def problems_from(exc: ValidationError) -> list[Problem]:
    problems: list[Problem] = []
    for error in exc.errors():
        if error["type"] == "orion_cross":
            problems.extend((error.get("ctx") or {}).get("problems", []))
            continue
        problems.append(Problem(*_message(error)))
    return problems


def problem_order(problem: Problem) -> tuple[int, int]:
    """Run settings first, then clients in file order; otherwise keep discovery order."""
    match = re.match(r"clients(?:\[(\d+)\])?", problem.path)
    if problem.path == "run" or problem.path.startswith("run."):
        return (0, 0)
    if match:
        return (1, int(match.group(1)) if match.group(1) is not None else -1)
    return (2, 0)


def value_problem(model: type[StrictModel], field: str, value: Any) -> str | None:
    """Why ``value`` cannot be ``model``'s ``field``, in the words a jobs file gets (None: it
    can), by the field's declared type and bounds (not its validator functions).

    For an option or argument that is a jobs-file field by another name (`orion run-plan -d` is
    ``run.duration_s``, `orion quota --max-util` a client's ``max_util``): its bounds are stated
    once, in the model, and say the same on the command line as in a file."""
    info = model.model_fields[field]
    annotation: Any = info.annotation
    if info.metadata:
        annotation = Annotated[(annotation, *info.metadata)]  # type: ignore[valid-type]
    adapter: TypeAdapter[Any] = TypeAdapter(
        annotation, config=ConfigDict(strict=True, allow_inf_nan=False)
    )
    try:
        adapter.validate_python(value)
    except ValidationError as error:
        return _message(error.errors()[0])[1]
    return None
