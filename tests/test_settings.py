"""Settings declared once (scheduler_core/settings.py) and derived everywhere they appear.

For ``memory_limit`` and ``sharing``: the CLI options' flags and help, the jobs file's fields,
``orion.ray``'s keywords, the join message and variable, the daemon's settings and the docs'
table all come from the one declaration, parse a value alike, and spell "unset" one way.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from colocation.jobs_schema import ClientConfig, RunConfig
from orion.ray.env import runtime_env
from orion_cli.app import app
from orion_common.errors import OrionError, UsageError
from orion_daemon.admission import JoinRequest, check_request
from orion_daemon.joining import JOIN_VARIABLES
from orion_daemon.server import DaemonSettings
from scheduler_core.settings import (
    BE_GATE_SPACING_US,
    HP_CONTEXT,
    HP_QUIET_US,
    LOOP_READS,
    MAX_UTIL,
    MEMORY_LIMIT,
    MIN_UTIL,
    SETTINGS,
    SHARING,
    UNSET_WORD,
    markdown_table,
)
from scheduler_core.shares import sets_a_share, shares_problem

REPO = Path(__file__).resolve().parents[1]
COMMANDS_DOC = REPO / "docs" / "commands.md"
GIB = 1 << 30


def jobs_client(**fields) -> ClientConfig:
    """A client of a jobs file with ``fields``."""
    client = {"name": "c", "workload": "bert", "mode": "train", "batch_size": 1, **fields}
    return ClientConfig.model_validate(client)


def option_help(command: str, flag: str) -> str:
    group = typer.main.get_command(app)
    (param,) = [p for p in group.commands[command].params if flag in getattr(p, "opts", ())]
    return param.help


@pytest.mark.parametrize(
    ("command", "setting"),
    [
        ("run", MEMORY_LIMIT),
        ("quota", MEMORY_LIMIT),
        ("up", SHARING),
        ("up", HP_QUIET_US),
        ("up", BE_GATE_SPACING_US),
        ("up", HP_CONTEXT),
        ("up", LOOP_READS),
        ("run", HP_CONTEXT),
        ("run", MIN_UTIL),
        ("run", MAX_UTIL),
        ("quota", MIN_UTIL),
        ("quota", MAX_UTIL),
    ],
)
def test_each_cli_option_takes_its_flag_and_help_from_the_declaration(command, setting):
    help_text = option_help(command, setting.flag)
    assert setting.help in help_text
    assert setting.accepted in help_text
    assert setting.unset in help_text


@pytest.mark.parametrize(
    ("text", "size"), [("8GiB", 8 * GIB), ("1.5 GiB", 3 * GIB // 2), ("4096", 4096), (4096, 4096)]
)
def test_a_memory_limit_means_the_same_bytes_at_every_entry_point(text, size):
    assert MEMORY_LIMIT.parse(text) == size
    assert jobs_client(memory_limit=text).memory_limit == size  # the jobs file's field
    variables = runtime_env("be", memory_limit=text)["env_vars"]  # orion.ray
    assert variables[MEMORY_LIMIT.variable] == str(size)
    as_typed = JoinRequest.from_message({"role": "be", "name": "c", "memory_limit": str(text)})
    assert as_typed.memory_limit == size  # the join message, as ORION_MEMORY_LIMIT is read


@pytest.mark.parametrize("text", ["4gib", "0", "-1", "2XB"])
def test_a_bad_memory_limit_is_refused_with_the_same_reason_everywhere(text):
    reason = MEMORY_LIMIT.problem(text)
    assert reason is not None and "is not a size" in reason
    with pytest.raises(ValueError, match="is not a size"):
        jobs_client(memory_limit=text)
    with pytest.raises(UsageError) as ray:
        runtime_env("be", memory_limit=text)
    assert ray.value.message == f"memory_limit: {reason}"
    with pytest.raises(OrionError) as joined:
        JoinRequest.from_message({"role": "be", "name": "c", "memory_limit": text})
    assert reason in joined.value.message
    ran = CliRunner().invoke(app, ["run", "--be", "--memory-limit", text, "--", "true"])
    assert ran.exit_code == 2
    assert f"{MEMORY_LIMIT.flag}: {reason}" in " ".join(ran.output.split())


def test_unset_is_none_wherever_a_value_travels_and_none_where_a_person_types_it():
    for setting in SETTINGS:
        assert setting.parse(None) is None
        assert setting.parse(UNSET_WORD) is None
        assert setting.parse(UNSET_WORD.upper()) is None
    assert jobs_client().memory_limit is None
    assert RunConfig.model_fields["sharing"].default is None
    assert DaemonSettings.__dataclass_fields__["sharing"].default is None
    assert DaemonSettings(gpu=0, sm_count=1, folder=Path("."), policy="reef").sharing == "mps"
    check_request(JoinRequest(role="be", name="c", memory_limit=None))


def test_the_join_variable_and_the_schema_fields_are_the_declarations():
    assert JOIN_VARIABLES[MEMORY_LIMIT.name] == MEMORY_LIMIT.variable
    assert JOIN_VARIABLES[HP_CONTEXT.name] == HP_CONTEXT.variable
    as_joined = JoinRequest.from_message({"role": "hp", "name": "c", "hp_context": "own"})
    assert as_joined.hp_context == "own"  # read as ORION_HP_CONTEXT is, by its declaration
    with pytest.raises(OrionError, match="join: hp_context must be one of mps, own"):
        JoinRequest.from_message({"role": "hp", "name": "c", "hp_context": "apart"})
    assert ClientConfig.model_fields[MEMORY_LIMIT.name].description == MEMORY_LIMIT.help
    assert RunConfig.model_fields[SHARING.name].description == SHARING.help


@pytest.mark.parametrize(
    ("shares", "reason"),
    [
        ({"min_util": 0.6, "max_util": 0.4}, "min_util 0.6 is above max_util 0.4"),
        ({"max_util": 1.5}, "max_util must be between 0 and 1 (got 1.5)"),
        ({"min_util": -0.2}, "min_util must be between 0 and 1 (got -0.2)"),
    ],
)
def test_shares_that_cannot_hold_are_refused_with_one_reason_at_every_entry_point(shares, reason):
    assert shares_problem(shares.get("min_util", 0.0), shares.get("max_util", 1.0)) == reason
    with pytest.raises(ValueError, match=re.escape(reason)):
        _jobs_with(shares)
    with pytest.raises(UsageError, match=re.escape(reason)):
        runtime_env("be", **shares)  # orion.ray
    with pytest.raises(OrionError, match=re.escape(reason)):  # the join message, as the
        # library's join sends ORION_MIN_UTIL / ORION_MAX_UTIL
        check_request(JoinRequest.from_message({"role": "be", "name": "c", **shares}))
    flags = [
        word for key, value in shares.items() for word in (f"--{key.replace('_', '-')}", str(value))
    ]
    ran = CliRunner().invoke(app, ["run", "--be", *flags, "--", "true"])
    assert ran.exit_code == 2
    assert reason in " ".join(ran.output.split())


def _jobs_with(shares: dict) -> None:
    """Validates a jobs file whose one client has ``shares`` (a promise above its cap is a rule
    across fields: said by the whole file's validation)."""
    from colocation.jobs_schema import JobsConfig

    client = jobs_client().model_dump() | shares | {"role": "be"}
    JobsConfig.model_validate({"run": {"policy": "quota"}, "clients": [client]})


def test_an_unset_share_is_its_declared_default_on_every_path():
    assert (MIN_UTIL.or_default(None), MAX_UTIL.or_default(UNSET_WORD)) == (0.0, 1.0)
    assert (jobs_client().min_util, jobs_client().max_util) == (0.0, 1.0)
    joined = JoinRequest.from_message({"role": "be", "name": "c"})
    assert (joined.min_util, joined.max_util) == (MIN_UTIL.default, MAX_UTIL.default)
    assert not sets_a_share(joined.min_util, joined.max_util)
    variables = runtime_env("be")["env_vars"]  # nothing to say: no variable for a default
    assert MIN_UTIL.variable not in variables and MAX_UTIL.variable not in variables


@pytest.mark.parametrize("mode", ["mig", "MPS"])
def test_a_sharing_mode_not_declared_is_refused_at_each_entry_point(mode):
    reason = SHARING.problem(mode)
    assert reason == f"sharing must be one of mps, timeslice (got {mode!r})"
    up = CliRunner().invoke(app, ["up", "--sharing", mode])
    assert up.exit_code == 2
    assert reason in " ".join(up.output.split())
    with pytest.raises(OrionError, match="sharing must be one of"):
        DaemonSettings(gpu=0, sm_count=1, folder=Path("."), sharing=mode)


@pytest.mark.parametrize(("text", "value"), [("300", 300.0), (0, 0.0), ("1e6", 1e6), ("2.5", 2.5)])
def test_a_number_setting_parses_within_its_bounds(text, value):
    assert HP_QUIET_US.parse(text) == value


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("-1", "hp_quiet_us must be 0 to 1,000,000 us (got -1)"),
        ("1000001", "hp_quiet_us must be 0 to 1,000,000 us (got 1000001)"),
        ("nan", "hp_quiet_us must be 0 to 1,000,000 us (got nan)"),
        ("soon", "hp_quiet_us is not a number (got 'soon')"),
    ],
)
def test_a_number_setting_out_of_bounds_is_refused_with_one_reason(text, reason):
    assert HP_QUIET_US.problem(text) == reason
    with pytest.raises(OrionError, match="hp_quiet_us"):
        DaemonSettings(gpu=0, sm_count=1, folder=Path("."), hp_quiet_us=text)


def test_the_docs_table_is_made_from_the_declarations():
    text = COMMANDS_DOC.read_text(encoding="utf-8")
    start = text.index("<!-- settings: made by scheduler_core.settings.markdown_table -->\n")
    table = text[text.index("\n", start) + 1 : text.index("<!-- /settings -->")]
    assert table == markdown_table(), "regenerate the table with markdown_table()"


def test_no_module_parses_a_size_but_the_declaration():
    """``parse_size`` is the size kind's parser; entry points go through MEMORY_LIMIT."""
    users = []
    for package in ("orion_cli", "orion", "colocation", "orion_daemon", "placement", "reporting"):
        for path in sorted((REPO / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
            if "parse_size" in names:
                users.append(path.relative_to(REPO).as_posix())
    assert users == []


def test_the_native_join_reads_every_declared_join_variable_by_its_declared_name():
    # The library's join (daemon_join.cpp) spells each variable by hand: a setting renamed in
    # its declaration but not there would be dropped by every program that joins on its own.
    source = (REPO / "scheduler_core" / "native" / "daemon_join.cpp").read_text()
    declared = [setting.variable for setting in SETTINGS if setting.variable is not None]
    assert declared  # memory_limit and hp_context at least
    for variable in declared:  # read as text (environment) or as a number (number_field)
        assert re.search(rf'\b(environment|number_field)\("{variable}"', source), variable
