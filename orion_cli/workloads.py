"""`orion workloads`: the named jobs orion can profile and co-locate."""

from __future__ import annotations

from rich.table import Table

from orion_cli._common import console, handle_errors
from orion_cli.console import print_table
from workloads import list_workloads


@handle_errors
def workloads_command() -> None:
    """List the workloads, what each needs and the options it takes."""
    table = Table(title="orion workloads", title_justify="left")
    table.add_column("name", style="bold")
    table.add_column("kind")
    table.add_column("description")
    table.add_column("needs")
    table.add_column("options (default)")
    table.add_column("CUDA graph")
    for info in list_workloads():
        options = ", ".join(f"{option.name} ({option.default})" for option in info.options)
        needs = ", ".join(("torch", *info.requires))
        if info.devices == ("cuda",):
            needs += ", a CUDA GPU"
        graph = "inference" if info.graph_capturable else "no"
        table.add_row(info.name, info.kind, info.description, needs, options or "-", graph)
    print_table(table)
    console.print(
        "CUDA graph: inference steps that `orion profile --cuda-graph` and a client's "
        '"cuda_graph": true capture once and replay per request.'
    )
