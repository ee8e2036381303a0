"""`orion workloads`: the named jobs orion can profile and co-locate."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from orion_cli._common import console, handle_errors
from orion_cli.console import JsonOpt, print_json, print_table
from workloads import list_workloads


def workloads_json() -> list[dict[str, Any]]:
    return [
        {
            "name": info.name,
            "kind": info.kind,
            "description": info.description,
            "requires": ["torch", *info.requires],
            "devices": list(info.devices),
            "options": {option.name: option.default for option in info.options},
            "cuda_graph": info.graph_capturable,
            "cuda_graph_refusal": info.graph_capture,
        }
        for info in list_workloads()
    ]


@handle_errors
def workloads_command(as_json: JsonOpt = False) -> None:
    """List the workloads, what each needs and the options it takes."""
    if as_json:
        print_json(workloads_json())
        return
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
