"""`orion up`'s Prometheus options (:mod:`orion_daemon.metrics` checks and serves them)."""

from __future__ import annotations

from typing import Annotated

import typer

MetricsPortOpt = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        metavar="PORT",
        help="Serve Prometheus metrics at http://127.0.0.1:PORT/metrics (PORT 1-65535).",
        show_default=False,
    ),
]
MetricsListenOpt = Annotated[
    str | None,
    typer.Option(
        "--metrics-listen",
        metavar="ADDR:PORT",
        help="Serve Prometheus metrics on this address ([ADDR]:PORT for IPv6); a loopback "
        "address unless --metrics-allow-remote.",
        show_default=False,
    ),
]
MetricsAllowRemoteOpt = Annotated[
    bool,
    typer.Option(
        "--metrics-allow-remote",
        help="Let --metrics-listen take an address other hosts reach (the metrics name every "
        "client's program and memory).",
    ),
]
