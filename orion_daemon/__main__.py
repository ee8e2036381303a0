"""``python -m orion_daemon``: the daemon process `orion up` starts (not a user command).

Takes the GPU's facts as arguments (`orion up` reads them, so the daemon itself never creates a
CUDA context) and runs until SIGTERM, Ctrl-C or `orion down`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from orion_common.errors import OrionError
from orion_common.process_log import error_lines, log_to
from orion_daemon.server import (
    ATTACH_TIMEOUT_S,
    BE_WHEN_DAEMON_GONE,
    DAEMON_GONE_HOLD_S,
    POLICIES,
    Daemon,
    DaemonSettings,
)
from scheduler_core.run_state import BE_GRAPH_GATES
from scheduler_core.sharing import SHARINGS

_LOG = logging.getLogger("orion_daemon.main")
"""What stops the daemon before it serves: on stderr, apart from the log of a daemon that ran."""


def parse(argv: list[str]) -> DaemonSettings:
    parser = argparse.ArgumentParser(prog="python -m orion_daemon", description=__doc__)
    parser.add_argument("--gpu", type=int, required=True)
    parser.add_argument("--sm-count", type=int, required=True)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--policy", choices=POLICIES, default="orion")
    parser.add_argument("--sharing", choices=SHARINGS, default="")
    parser.add_argument("--gpu-uuid")
    parser.add_argument("--gpu-name")
    parser.add_argument("--memory-bytes", type=int)
    parser.add_argument("--queue-limit-us", type=float)
    parser.add_argument("--shares", action="store_true")
    parser.add_argument("--be-gate", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--be-graph-gate", choices=BE_GRAPH_GATES, default="")
    parser.add_argument("--hp-completion", choices=("estimate", "gpu-write"), default="estimate")
    parser.add_argument("--stop-with", type=int, metavar="PID")
    parser.add_argument("--attach-timeout-s", type=float, default=ATTACH_TIMEOUT_S)
    parser.add_argument("--metrics-listen", metavar="ADDR:PORT")
    parser.add_argument("--metrics-allow-remote", action="store_true")
    parser.add_argument("--be-when-daemon-gone", choices=BE_WHEN_DAEMON_GONE, default="open")
    parser.add_argument("--daemon-gone-hold-s", type=float, default=DAEMON_GONE_HOLD_S)
    args = parser.parse_args(argv)
    return DaemonSettings(
        gpu=args.gpu,
        sm_count=args.sm_count,
        folder=args.state_dir,
        policy=args.policy,
        sharing=args.sharing,
        gpu_uuid=args.gpu_uuid,
        gpu_name=args.gpu_name,
        memory_bytes=args.memory_bytes,
        queue_limit_ns=None if args.queue_limit_us is None else round(args.queue_limit_us * 1e3),
        shares=args.shares,
        be_gate=args.be_gate,
        be_graph_gate=args.be_graph_gate,
        hp_completion=args.hp_completion,
        stop_with_pid=args.stop_with,
        attach_timeout_s=args.attach_timeout_s,
        metrics_listen=args.metrics_listen,
        metrics_allow_remote=args.metrics_allow_remote,
        be_when_daemon_gone=args.be_when_daemon_gone,
        daemon_gone_hold_s=args.daemon_gone_hold_s,
    )


def main(argv: list[str] | None = None) -> int:
    """The daemon's lines go to stdout (its log file); a problem that stops it, to stderr."""
    log_to(sys.stdout, "orion_daemon")
    log_to(sys.stderr, _LOG.name)
    try:
        return Daemon(parse(sys.argv[1:] if argv is None else argv)).serve()
    except OrionError as error:
        for line in error_lines(error):
            _LOG.error(line)
        return 1


if __name__ == "__main__":
    sys.exit(main())
