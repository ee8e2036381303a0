"""The `orion` command line: one thin module per command, registered here."""

from __future__ import annotations

import typer

from orion_cli.colocate import colocate_command
from orion_cli.doctor import doctor_command
from orion_cli.pairs import pairs_command
from orion_cli.plan import plan_command
from orion_cli.profile import profile_command
from orion_cli.quota import quota_command
from orion_cli.report import report_command
from orion_cli.run import run_command
from orion_cli.run_plan import run_plan_command
from orion_cli.simulate import simulate_command
from orion_cli.status import status_command
from orion_cli.up import down_command, up_command
from orion_cli.workloads import workloads_command

app = typer.Typer(
    name="orion",
    help=(
        "Share one NVIDIA GPU between a latency-critical inference job and best-effort jobs.\n\n"
        "Typical flow: `orion profile` each workload once (Nsight Compute), `orion colocate` "
        "the jobs under a policy, `orion report` the run directories."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

app.command("profile")(profile_command)
app.command("colocate")(colocate_command)
app.command("report")(report_command)
app.command("doctor")(doctor_command)
app.command("workloads")(workloads_command)
app.command("plan")(plan_command)
app.command("run-plan")(run_plan_command)
app.command("pairs")(pairs_command)
app.command("simulate")(simulate_command)
app.command("quota")(quota_command)
app.command("up")(up_command)
app.command("down")(down_command)
app.command(
    "run", context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True}
)(run_command)
app.command("status")(status_command)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
