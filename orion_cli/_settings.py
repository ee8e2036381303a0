"""CLI options derived from the settings declared once (:mod:`scheduler_core.settings`): the
flag and help come from the declaration, and a value typed is parsed by the declaration's own
parser, so `orion run`, `orion quota` and `orion up` say a setting alike."""

from __future__ import annotations

from typing import Any

import typer

from scheduler_core.settings import Setting


def setting_option(setting: Setting, lead: str = "") -> Any:
    """The typer option of ``setting`` (a string, parsed with :func:`parsed`); ``lead`` says
    what the command does with it."""
    return typer.Option(setting.flag, help=setting.help_text(lead), show_default=False)


def parsed(setting: Setting, text: str | None) -> Any:
    """``text`` as typed for ``setting``'s option: its value (None when unset), or a usage
    error naming the option."""
    return setting.checked(text, setting.flag)
