"""``jobs.json``: what ``orion colocate`` runs, validated completely before the GPU is touched.

A colocation run takes minutes and holds the GPU (and an MPS daemon), so every mistake a user can
make in ``jobs.json`` is found here, all at once: :func:`load_jobs` raises one
:class:`JobsConfigError` listing each problem on its own line as ``field.path: message``, e.g.
``clients[1].batch_size: must be >= 1 (got 0)``.

Conventions the runner can rely on after validation:

- every path (``run.output_dir``, ``clients[].profile``, ``clients[].arrivals.path``) is absolute;
  relative paths in the file are resolved against the folder holding ``jobs.json``;
- inference clients always have ``arrivals`` (default ``{"kind": "closed"}``), training clients
  never do;
- exactly one of ``run.duration_s`` / ``run.requests`` is set, and ``requests`` only with an
  inference HP client;
- the number of ``hp`` clients fits the policy (see :mod:`colocation.policies`).

The models are strict (``"4"`` is not a batch size, ``1`` is not ``true``) and forbid unknown
keys, so a typo is an error instead of a silently ignored setting.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from colocation.policies import POLICIES, POLICY_NAMES, Policy
from orion_common.errors import OrionError

CLIENT_NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,32}")
ARRIVAL_KINDS = ("closed", "poisson", "uniform", "trace")
_EXAMPLE_HINT = "`orion colocate --example` prints a valid jobs.json to start from"


# --------------------------------------------------------------------------------------------
# errors


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


def _problem(message: str) -> PydanticCustomError:
    # the message goes through the context, so braces in user values are never format fields
    return PydanticCustomError("orion", "{message}", {"message": message})


def _show(value: Any) -> str:
    """A value the way the user wrote it in JSON (strings quoted), kept short."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        text = repr(value)
    elif isinstance(value, (int, float)):
        text = _number(value)
    else:
        try:
            text = json.dumps(value, default=str, separators=(", ", ": "))
        except (TypeError, ValueError):
            text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _number(value: float) -> str:
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
            raise _problem("must be a non-empty path")
        return Path(value)
    raise _problem(f"must be a path string (got {_show(value)})")


def _base_dir(info: ValidationInfo) -> Path:
    context = info.context if isinstance(info.context, Mapping) else {}
    return Path(context.get("base_dir") or Path.cwd()).absolute()


def _resolve(path: Path, info: ValidationInfo) -> Path:
    return Path(os.path.normpath(_base_dir(info) / path.expanduser()))


def _existing_file(path: Path, info: ValidationInfo) -> Path:
    resolved = _resolve(path, info)
    where = (
        "" if path.is_absolute() else f" (relative paths are resolved against {_base_dir(info)})"
    )
    if not resolved.exists():
        raise _problem(f"file not found: {resolved}{where}")
    if not resolved.is_file():
        raise _problem(f"not a file: {resolved}{where}")
    return resolved


PathField = Annotated[Path, BeforeValidator(_path_input)]


# --------------------------------------------------------------------------------------------
# models


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class ClosedArrivals(_Model):
    """The next request is issued when the previous one finished, after ``think_ms``."""

    kind: Literal["closed"]
    think_ms: Annotated[float, Field(ge=0)] = 0.0


class PoissonArrivals(_Model):
    """Open loop: exponential inter-arrival times with mean ``1 / rate_per_s``."""

    kind: Literal["poisson"]
    rate_per_s: Annotated[float, Field(gt=0)]


class UniformArrivals(_Model):
    """Open loop: one request every ``1 / rate_per_s`` seconds, the first at the start."""

    kind: Literal["uniform"]
    rate_per_s: Annotated[float, Field(gt=0)]


class TraceArrivals(_Model):
    """Open loop: inter-arrival times (ms) read from a text file, one per line."""

    kind: Literal["trace"]
    path: PathField
    repeat: bool = Field(default=True, validate_default=True)

    @field_validator("path")
    @classmethod
    def _trace_file_is_usable(cls, value: Path, info: ValidationInfo) -> Path:
        from colocation.arrivals import read_trace_ms

        resolved = _existing_file(value, info)
        try:
            read_trace_ms(resolved)
        except OrionError as exc:
            raise _problem(exc.message) from None
        return resolved

    @field_validator("repeat")
    @classmethod
    def _repeat_needs_time_to_pass(cls, value: bool, info: ValidationInfo) -> bool:
        from colocation.arrivals import read_trace_ms

        path = info.data.get("path")
        if value and path is not None and float(read_trace_ms(path).sum()) <= 0:
            raise _problem(
                "every inter-arrival time in the trace is 0, so repeating it would issue endless "
                "requests at one instant; set repeat to false or add a non-zero gap"
            )
        return value


ArrivalsModel = Annotated[
    ClosedArrivals | PoissonArrivals | UniformArrivals | TraceArrivals,
    Field(discriminator="kind"),
]
_ARRIVAL_MODELS: dict[str, type[_Model]] = {
    "closed": ClosedArrivals,
    "poisson": PoissonArrivals,
    "uniform": UniformArrivals,
    "trace": TraceArrivals,
}


class Thresholds(_Model):
    """Scheduler thresholds; ``None`` lets the runner derive them from the profiles."""

    queue_limit_us: Annotated[float, Field(gt=0)] | None = None
    unknown_kernel_us: Annotated[float, Field(gt=0)] | None = None


class RunConfig(_Model):
    """How the run is carried out and measured."""

    policy: str
    duration_s: Annotated[float, Field(gt=0)] | None = None
    requests: Annotated[int, Field(ge=1)] | None = None
    warmup_steps: Annotated[int, Field(ge=0)] = 20
    seed: Annotated[int, Field(ge=0)] = 1
    output_dir: PathField = Field(default=Path("runs"), validate_default=True)
    trace: bool = False
    thresholds: Thresholds = Field(default_factory=Thresholds)
    # How the HP client's kernel completions are tracked under reef/orion: "estimate" (at the
    # profiled expected end; no driver call on HP's critical path) or "gpu-write" (written by the
    # GPU after each HP launch: exact, one more driver call per launch). BE always uses gpu-write.
    hp_completion: Literal["estimate", "gpu-write"] = "estimate"
    gpu: Annotated[int, Field(ge=0)] = 0

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        if value not in POLICIES:
            raise _problem(f"must be one of {', '.join(POLICY_NAMES)} (got {_show(value)})")
        return value

    @field_validator("output_dir")
    @classmethod
    def _output_dir_is_a_folder(cls, value: Path, info: ValidationInfo) -> Path:
        resolved = _resolve(value, info)
        if resolved.exists() and not resolved.is_dir():
            raise _problem(f"exists and is not a folder: {resolved}")
        return resolved


class ClientConfig(_Model):
    """One client process: a workload, how it runs, and (for inference) when requests arrive."""

    name: str
    workload: str
    mode: Literal["infer", "train"]
    batch_size: Annotated[int, Field(ge=1)]
    dtype: Literal["fp32", "bf16"] = "fp32"
    role: Literal["hp", "be"] = "be"
    arrivals: ArrivalsModel | None = Field(default=None, validate_default=True)
    profile: PathField | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    cuda_graph: bool = False
    """Serve inference by replaying the step captured once as a CUDA graph."""
    sm_percent: Annotated[int, Field(ge=1, le=100)] | None = None
    """Percent of the SMs this client may use (policy ``mps-share``; default all)."""

    @field_validator("name")
    @classmethod
    def _name_is_simple(cls, value: str) -> str:
        # the name becomes file names (clients/<name>.csv, logs/<name>.log)
        if not CLIENT_NAME_PATTERN.fullmatch(value):
            raise _problem(
                f"must be 1-32 characters of letters, digits, '_' or '-' (got {_show(value)})"
            )
        return value

    @field_validator("workload")
    @classmethod
    def _workload_is_known(cls, value: str) -> str:
        _workload_info(value)
        return value

    @field_validator("arrivals")
    @classmethod
    def _arrivals_fit_mode(
        cls,
        value: ClosedArrivals | PoissonArrivals | UniformArrivals | TraceArrivals | None,
        info: ValidationInfo,
    ) -> ClosedArrivals | PoissonArrivals | UniformArrivals | TraceArrivals | None:
        mode = info.data.get("mode")
        if mode == "train" and value is not None:
            raise _problem(
                "only inference clients take arrivals; a training client runs back-to-back "
                'iterations (remove "arrivals" or set mode to "infer")'
            )
        if mode == "infer" and value is None:
            return ClosedArrivals(kind="closed")
        return value

    @field_validator("profile")
    @classmethod
    def _profile_exists(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return None if value is None else _existing_file(value, info)

    @field_validator("cuda_graph")
    @classmethod
    def _graph_fits_workload(cls, value: bool, info: ValidationInfo) -> bool:
        if value:
            problem = _cuda_graph_problem(info.data.get("workload"), info.data.get("mode"))
            if problem:
                raise _problem(problem)
        return value

    @field_validator("options")
    @classmethod
    def _options_fit_workload(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        workload = info.data.get("workload")
        if workload is not None:
            _check_options(_workload_info(workload), value)
        return value

    @property
    def is_hp(self) -> bool:
        return self.role == "hp"


class JobsConfig(_Model):
    """A whole validated ``jobs.json``."""

    run: RunConfig
    clients: Annotated[list[ClientConfig], Field(min_length=1)]

    @model_validator(mode="after")
    def _clients_fit_together(self) -> JobsConfig:
        problems = _cross_field_problems(self.model_dump())
        if problems:
            raise PydanticCustomError(
                "orion_cross",
                "{summary}",
                {"summary": "; ".join(map(str, problems)), "problems": problems},
            )
        return self

    @property
    def policy(self) -> Policy:
        return POLICIES[self.run.policy]

    @property
    def hp_client(self) -> ClientConfig | None:
        return next((client for client in self.clients if client.is_hp), None)

    def client(self, name: str) -> ClientConfig:
        for client in self.clients:
            if client.name == name:
                return client
        raise KeyError(name)

    def to_json_dict(self) -> dict[str, Any]:
        """Plain JSON data (paths as absolute strings) for ``run.json``; validates again as is."""
        return self.model_dump(mode="json")


# --------------------------------------------------------------------------------------------
# workload registry (written separately; imported lazily so this module stays light)


def _workload_info(name: str) -> Any:
    """The registry's entry for ``name``; its error (listing the known names) as a problem."""
    from workloads import get_workload_info

    try:
        return get_workload_info(name)
    except OrionError as exc:
        hint = f" ({exc.hint})" if exc.hint else ""
        raise _problem(exc.message + hint) from None


def _cuda_graph_problem(workload: Any, mode: Any) -> str | None:
    """Why a client of ``workload`` in ``mode`` cannot be served as a CUDA graph (None: it can)."""
    if mode == "train":
        return (
            "applies to inference clients only; training runs eagerly "
            '(remove "cuda_graph" or set mode to "infer")'
        )
    if not isinstance(workload, str):
        return None
    from workloads import get_workload_info

    try:
        reason = get_workload_info(workload).graph_capture
    except OrionError:
        return None  # the workload field reports it
    return None if reason is None else f"workload {workload!r} cannot be captured: {reason}"


def _check_options(info: Any, options: dict[str, Any]) -> None:
    """Option names and values, as the registry checks them when it builds the workload."""
    try:
        info.check_options(options)
    except OrionError as exc:
        raise _problem(exc.message) from None


# --------------------------------------------------------------------------------------------
# checks that span several fields


def _cross_field_problems(data: Any) -> list[Problem]:
    """Rules relating fields to each other, checked on raw or validated data alike.

    Field-level errors stop pydantic before model validators run; checking the raw data as well
    lets one pass report a duplicate name next to a bad batch size. Values of the wrong type are
    skipped here (the field checks report them).
    """
    if not isinstance(data, Mapping):
        return []
    problems: list[Problem] = []
    run = data.get("run") if isinstance(data.get("run"), Mapping) else {}
    raw_clients = data.get("clients") if isinstance(data.get("clients"), list) else []
    clients = [(i, c) for i, c in enumerate(raw_clients) if isinstance(c, Mapping)]

    duration, requests = run.get("duration_s"), run.get("requests")
    if isinstance(data.get("run"), Mapping):
        if duration is None and requests is None:
            problems.append(
                Problem(
                    "run",
                    "set exactly one of duration_s (seconds to measure) or requests "
                    "(HP requests to serve)",
                )
            )
        elif duration is not None and requests is not None:
            problems.append(
                Problem(
                    "run",
                    "set only one of duration_s and requests "
                    f"(got duration_s={_show(duration)}, requests={_show(requests)})",
                )
            )

    first_with_name: dict[str, int] = {}
    for i, client in clients:
        name = client.get("name")
        if not isinstance(name, str):
            continue
        if name in first_with_name:
            problems.append(
                Problem(
                    f"clients[{i}].name",
                    f"duplicate client name {_show(name)} (clients[{first_with_name[name]}] "
                    "has it too)",
                )
            )
        else:
            first_with_name[name] = i

    hp = [(i, c) for i, c in clients if c.get("role") == "hp"]
    for i, _client in hp[1:]:
        problems.append(
            Problem(
                f"clients[{i}].role",
                f"at most one client may have role 'hp' (clients[{hp[0][0]}] already has it)",
            )
        )
    policy = POLICIES.get(run.get("policy")) if isinstance(run.get("policy"), str) else None
    if policy is not None and policy.needs_hp and not hp and raw_clients:
        problems.append(
            Problem(
                "clients",
                f"policy {policy.name!r} needs exactly one client with role 'hp' (got none)",
            )
        )

    if policy is not None and not policy.sm_partitions:
        for i, client in clients:
            if client.get("sm_percent") is not None:
                partitioned = ", ".join(p.name for p in POLICIES.values() if p.sm_partitions)
                problems.append(
                    Problem(
                        f"clients[{i}].sm_percent",
                        f"policy {policy.name!r} has no SM partitions; sm_percent applies "
                        f"under {partitioned} only",
                    )
                )

    if requests is not None and len(hp) <= 1:
        hp_mode = hp[0][1].get("mode") if hp else None
        if hp_mode != "infer":
            why = (
                "there is no client with role 'hp'"
                if not hp
                else f"the hp client clients[{hp[0][0]}] has mode {_show(hp_mode)}"
            )
            problems.append(
                Problem(
                    "run.requests",
                    f"counts requests served by an inference client with role 'hp', but {why}; "
                    "use duration_s instead",
                )
            )
    return problems


# --------------------------------------------------------------------------------------------
# pydantic errors -> problems


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


def _model_for(parent_loc: tuple[Any, ...]) -> type[_Model] | None:
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
        return _ARRIVAL_MODELS.get(parent_loc[3])
    return None


def _unknown_field_message(loc: tuple[Any, ...]) -> str:
    model = _model_for(loc[:-1])
    if model is None:
        return "unknown field"
    allowed = list(model.model_fields)
    what = "unknown field"
    if model in _ARRIVAL_MODELS.values():
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
    got = f" (got {_show(value)})"

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
        return f"{path}.kind", f"must be one of {kinds} (got {_show(ctx.get('tag'))})"
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
        return path, f"must be {op} {_number(ctx[key])}{got}"
    if kind == "literal_error":
        return path, f"must be one of {_choices(str(ctx.get('expected', '')))}{got}"
    if kind == "too_short" and path == "clients":
        return path, "must list at least one client"
    if kind == "too_short":
        return path, f"must have at least {ctx.get('min_length')} item(s)"
    text = str(error["msg"])
    return path, (text[:1].lower() + text[1:]) + got


def _problems_from(exc: ValidationError) -> list[Problem]:
    problems: list[Problem] = []
    for error in exc.errors():
        if error["type"] == "orion_cross":
            problems.extend((error.get("ctx") or {}).get("problems", []))
            continue
        problems.append(Problem(*_message(error)))
    return problems


def _order(problem: Problem) -> tuple[int, int]:
    """Run settings first, then clients in file order; otherwise keep discovery order."""
    match = re.match(r"clients(?:\[(\d+)\])?", problem.path)
    if problem.path == "run" or problem.path.startswith("run."):
        return (0, 0)
    if match:
        return (1, int(match.group(1)) if match.group(1) is not None else -1)
    return (2, 0)


# --------------------------------------------------------------------------------------------
# public API


def parse_jobs(
    data: Any, base_dir: str | os.PathLike[str], *, source: str = "jobs config"
) -> JobsConfig:
    """Validate jobs data already parsed from JSON; relative paths start at ``base_dir``.

    Raises :class:`JobsConfigError` listing every problem (``source`` names the input in its
    first line).
    """
    if not isinstance(data, Mapping):
        got = "a list" if isinstance(data, list) else _show(data)
        raise JobsConfigError(
            f"invalid {source} (1 problem):",
            [Problem("", f'must be a JSON object with "run" and "clients" (got {got})')],
            hint=_EXAMPLE_HINT,
        )
    context = {"base_dir": Path(base_dir).absolute()}
    try:
        return JobsConfig.model_validate(data, context=context)
    except ValidationError as exc:
        problems = _problems_from(exc)
    for problem in _cross_field_problems(data):
        if problem not in problems:
            problems.append(problem)
    problems.sort(key=_order)
    count = f"{len(problems)} problem" + ("" if len(problems) == 1 else "s")
    raise JobsConfigError(f"invalid {source} ({count}):", problems, hint=_EXAMPLE_HINT)


class _DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKeyError(key)
        result[key] = value
    return result


def load_jobs(path: str | os.PathLike[str]) -> JobsConfig:
    """Read and validate a ``jobs.json`` file; relative paths in it start at its folder.

    Unreadable files and JSON syntax errors (``jobs.json:12:5: Expecting ',' delimiter``) raise
    :class:`OrionError`; invalid content raises :class:`JobsConfigError` with every problem.
    """
    file = Path(path)
    if not file.exists():
        raise OrionError(f"jobs file not found: {file}", hint=_EXAMPLE_HINT)
    if not file.is_file():
        raise OrionError(f"jobs file is not a file: {file}", hint="give the path of a jobs.json")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise OrionError(f"{file}: not UTF-8 text; a jobs file is JSON") from None
    except OSError as exc:
        raise OrionError(f"cannot read jobs file {file}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise OrionError(
            f"{file}:{exc.lineno}:{exc.colno}: {exc.msg}",
            hint="jobs files are plain JSON: strings in double quotes, no comments, "
            "no trailing commas",
        ) from None
    except _DuplicateKeyError as exc:
        raise OrionError(
            f"{file}: key {exc.key!r} appears twice in one object (JSON would keep only the last)",
            hint="remove one of them",
        ) from None
    except RecursionError:
        raise _nested_too_deeply(file) from None
    try:
        return parse_jobs(data, file.parent, source=f"jobs file {file}")
    except RecursionError:
        raise _nested_too_deeply(file) from None


def _nested_too_deeply(file: Path) -> OrionError:
    """Python's JSON reader gives up on deep nesting; a jobs file needs a few levels."""
    return OrionError(
        f"jobs file {file}: nested too deeply (arrays or objects inside each other)",
        hint="a jobs file needs only a few levels: an object with a list of client objects",
    )


def profile_command(client: ClientConfig) -> str:
    """The command that writes the profile ``client`` needs at its default location."""
    return (
        f"orion profile {client.workload} --mode {client.mode} "
        f"--batch-size {client.batch_size} --dtype {client.dtype}"
        + (" --cuda-graph" if client.cuda_graph else "")
    )


class ResolvedProfiles(NamedTuple):
    """Where each client's kernel profile is, and what makes a usable profile less trustworthy.

    ``paths`` maps client name to profile path (``None``: no profile). ``warnings`` are one
    sentence each, naming the client: a profile made on another GPU or with other software
    versions still gates kernels, only less accurately, so the run goes on and records them.
    """

    paths: dict[str, Path | None]
    warnings: list[str]


def resolve_profiles(
    config: JobsConfig,
    gpu_name: str | None,
    default_path: Callable[[ClientConfig], Path],
    *,
    environment: Mapping[str, Any] | None = None,
) -> ResolvedProfiles:
    """The kernel profile of each client, by name: its ``profile``, else ``default_path(client)``.

    A client without either gets ``None``, which is only allowed when the policy does not gate
    kernels by profile. When it does (``needs_profiles``), each profile's header must match the
    client (workload, mode, batch size, dtype); every missing or mismatched profile is reported in
    one :class:`JobsConfigError` whose hint gives the ``orion profile`` commands to run.

    A profile made on another GPU (``gpu_name``) or with other software (``environment``, shaped
    like :func:`orion_common.sysinfo.software_summary`) is not an error but a warning: the
    scheduler can still use it, and refusing would force a re-profile (minutes of ncu) before
    every experiment on a slightly different machine.
    """
    policy = config.policy
    current: dict[str, Any] = dict(environment or {})
    if gpu_name:
        current["gpu_name"] = gpu_name
    paths: dict[str, Path | None] = {}
    warnings: list[str] = []
    problems: list[Problem] = []
    commands: list[str] = []
    for i, client in enumerate(config.clients):
        where = f"clients[{i}].profile"
        candidate = client.profile or Path(default_path(client))
        path = candidate if candidate.is_file() else None
        paths[client.name] = path
        if not policy.needs_profiles:
            continue
        if path is None:
            problems.append(
                Problem(
                    where,
                    f"policy {policy.name!r} needs a kernel profile for client "
                    f"{client.name!r}, and {candidate} does not exist",
                )
            )
            commands.append(profile_command(client))
            continue
        meta, mismatch = _profile_header(path, client)
        if mismatch:
            problems.append(Problem(where, f"{path} {mismatch}"))
            commands.append(profile_command(client))
            continue
        warnings.extend(
            f"client {client.name!r} ({path}): {text}"
            for text in _compatibility_warnings(meta, current)
        )
        graph_warning = _graph_mismatch(meta, client)
        if graph_warning:
            warnings.append(f"client {client.name!r} ({path}): {graph_warning}")
    if problems:
        unique = list(dict.fromkeys(commands))
        count = f"{len(problems)} problem" + ("" if len(problems) == 1 else "s")
        raise JobsConfigError(
            f"kernel profiles for policy {policy.name!r} ({count}):",
            problems,
            hint="run: " + "\nrun: ".join(unique),
        )
    return ResolvedProfiles(paths, warnings)


def _graph_mismatch(meta: Mapping[str, Any], client: ClientConfig) -> str | None:
    """A profile of the eager step used for a CUDA-graph client, or the reverse.

    Not an error: the kernels are the same, so the profile still describes the GPU work; but the
    library then sees launches the profile does not list (one graph launch instead of the
    kernels, or the reverse) and gates them as unknown work, conservatively.
    """
    profiled_graph = bool(meta.get("cuda_graph", False))
    if profiled_graph == client.cuda_graph:
        return None
    graph, eager = "as a CUDA graph", "eagerly"
    made, runs = (graph, eager) if profiled_graph else (eager, graph)
    command = profile_command(client)
    return (
        f"the profile was made {made} but the client runs {runs}; launches it does not list are "
        f"gated as unknown work (profile it with: {command})"
    )


def _compatibility_warnings(meta: dict[str, Any], current: Mapping[str, Any]) -> list[str]:
    """The profile reader's own comparison, on the header alone (the table is not needed)."""
    import pandas as pd

    from postprocess.profile_format import Profile, profile_compatibility_warnings

    return profile_compatibility_warnings(Profile(meta, pd.DataFrame()), dict(current))


def _profile_header(path: Path, client: ClientConfig) -> tuple[dict[str, Any], str | None]:
    """The profile's metadata, and why it cannot serve ``client`` (``None`` when it can).

    Only the two header lines are read (format in docs/architecture.md), so this stays cheap.
    """
    try:
        with path.open(encoding="utf-8") as handle:
            first, second = handle.readline().strip(), handle.readline().strip()
    except (OSError, UnicodeDecodeError) as exc:
        return {}, f"cannot be read ({exc})"
    if not first.startswith("# orion-profile:"):
        return {}, "is not an orion profile (its first line must be '# orion-profile: 1')"
    version = first.split(":", 1)[1].strip()
    if version != "1":
        return {}, f"has profile format version {version}; this orion reads version 1"
    try:
        if not second.startswith("# metadata:"):
            raise ValueError
        meta = json.loads(second.split(":", 1)[1])
        if not isinstance(meta, dict):
            raise ValueError
    except ValueError:
        return {}, "has no readable '# metadata: {...}' second line"
    wanted = {
        "workload": client.workload,
        "mode": client.mode,
        "batch_size": client.batch_size,
        "dtype": client.dtype,
    }
    wrong = [
        f"{key} {_show(meta[key])}"
        for key, value in wanted.items()
        if key in meta and meta[key] != value
    ]
    if wrong:
        return meta, (
            f"was made for {', '.join(wrong)}, but client {client.name!r} runs "
            f"{client.workload} {client.mode} batch size {client.batch_size} {client.dtype}"
        )
    return meta, None


EXAMPLE_JOBS = """\
{
  "run": {
    "policy": "orion",
    "duration_s": 30,
    "requests": null,
    "warmup_steps": 20,
    "seed": 1,
    "output_dir": "runs",
    "trace": false,
    "thresholds": {"queue_limit_us": null, "unknown_kernel_us": null},
    "hp_completion": "estimate",
    "gpu": 0
  },
  "clients": [
    {
      "name": "hp",
      "workload": "resnet50",
      "mode": "infer",
      "batch_size": 4,
      "dtype": "fp32",
      "role": "hp",
      "arrivals": {"kind": "poisson", "rate_per_s": 80},
      "profile": null,
      "options": {}
    },
    {
      "name": "be",
      "workload": "resnet50",
      "mode": "train",
      "batch_size": 32,
      "dtype": "fp32",
      "role": "be",
      "profile": null,
      "options": {}
    }
  ]
}
"""
"""A complete, valid jobs.json (HP ResNet-50 inference at 80 req/s, BE ResNet-50 training),
printed by ``orion colocate --example`` and kept in ``colocation/examples/resnet50_pair.json``."""
