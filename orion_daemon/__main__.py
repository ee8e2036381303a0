"""``python -m orion_daemon --settings JSON``: the daemon process `orion up` starts (not a user
command).

Its one argument is the whole of its :class:`~orion_daemon.server.DaemonSettings` as one JSON
object (:func:`orion_daemon.client.daemon_command` writes it), the GPU's facts included: `orion
up` reads them, so the daemon itself never creates a CUDA context. The settings are checked
where they are declared (``DaemonSettings``), not by a second parser here. It runs until
SIGTERM, Ctrl-C or `orion down`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from orion_common.errors import OrionError
from orion_common.process_log import error_lines, log_to
from orion_daemon.client import SETTINGS_FLAG
from orion_daemon.server import Daemon, DaemonSettings

_LOG = logging.getLogger("orion_daemon.main")
"""What stops the daemon before it serves: on stderr, apart from the log of a daemon that ran."""


def parse(argv: list[str]) -> DaemonSettings:
    """The settings ``argv`` carries; :class:`OrionError` when they are not a daemon's."""
    parser = argparse.ArgumentParser(prog="python -m orion_daemon", description=__doc__)
    parser.add_argument(SETTINGS_FLAG, required=True, metavar="JSON")
    args = parser.parse_args(argv)
    try:
        document = json.loads(args.settings)
    except ValueError as error:
        raise OrionError(f"{SETTINGS_FLAG} is not JSON ({error})") from None
    return DaemonSettings.parse_json(document)


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
