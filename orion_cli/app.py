"""The `orion` command line: one thin module per command, registered here."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from orion_cli.colocate import colocate_command
from orion_cli.doctor import doctor_command
from orion_cli.pairs import pairs_command
from orion_cli.plan import plan_command
from orion_cli.profile import ProfileCommand, profile_command
from orion_cli.quota import quota_command
from orion_cli.report import report_command
from orion_cli.run import run_command
from orion_cli.run_plan import run_plan_command
from orion_cli.simulate import simulate_command
from orion_cli.status import status_command
from orion_cli.up import down_command, up_command
from orion_cli.workloads import workloads_command
from orion_common.process_log import log_to

app = typer.Typer(
    name="orion",
    no_args_is_help=True,
    # --install-completion / --show-completion for bash, zsh, fish and PowerShell
    add_completion=True,
    pretty_exceptions_enable=False,
    # Plain help, as git's and nvidia-smi's: paragraphs re-wrapped to the terminal, no type
    # column (no "<bool>" beside every flag), and nothing in boxes a log would mangle.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _short_help(command: Callable[..., Any]) -> str:
    """The docstring's first paragraph, whole: the command list shows it instead of cutting it
    at 45 characters with "..."."""
    return " ".join(inspect.cleandoc(command.__doc__ or "").split("\n\n")[0].split())


def _version(value: bool) -> None:
    if not value:
        return
    from colocation.rundir import git_revision, orion_version

    revision = git_revision()
    typer.echo(f"orion {orion_version()}" + (f" (git {revision[:12]})" if revision else ""))
    raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            callback=_version,
            is_eager=True,
            help="Print orion's version and exit.",
        ),
    ] = False,
) -> None:
    """Share one NVIDIA GPU between a latency-critical inference job and best-effort jobs.

    Typical flow: `orion profile` each workload once (Nsight Compute), `orion colocate` the jobs
    under a policy, `orion report` the run directories. `orion report`, `orion plan` and
    `orion simulate` need no GPU: they read committed results (see the README).
    """


# `orion profile [WORKLOAD] [-- CMD ARGS]`: what follows `--` is a program's, unparsed.
app.command("profile", short_help=_short_help(profile_command), cls=ProfileCommand)(profile_command)
for _name, _command in (
    ("colocate", colocate_command),
    ("report", report_command),
    ("doctor", doctor_command),
    ("workloads", workloads_command),
    ("plan", plan_command),
    ("pairs", pairs_command),
    ("simulate", simulate_command),
    ("run-plan", run_plan_command),
    ("quota", quota_command),
    ("up", up_command),
    ("down", down_command),
    ("status", status_command),
):
    app.command(_name, short_help=_short_help(_command))(_command)
# `orion run -- CMD ARGS`: everything after the options is the program's, unparsed.
app.command(
    "run",
    short_help=_short_help(run_command),
    context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
)(run_command)


def main() -> None:
    # A daemon on a thread of this process (`orion colocate`'s own) logs its lines here, on
    # stdout, as it did when it printed them.
    log_to(sys.stdout, "orion_daemon")
    app()


if __name__ == "__main__":
    main()
