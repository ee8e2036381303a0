"""orion's one console policy: how every command prints tables, notes, warnings and JSON.

- In a pipe, a file or a CI log (stdout not a terminal) the output is as wide as its content:
  no table cell is ever shortened or wrapped, so names and numbers can be copied and grepped.
- On a terminal too narrow for a table, the table is split into several tables of fewer
  columns (its key columns repeated in each) rather than having cells cut with "…"; a single
  column that still does not fit is folded over lines, never cut.
- Warnings and errors go to stderr, so ``orion CMD | tool`` gets only the results.
- ``--json`` prints one JSON document on stdout and nothing else.

A new command prints a table with :func:`print_table` (any ``rich.table.Table``), a note with
``console.print(...)``, a warning with :func:`warn`, and its ``--json`` document (option
:data:`JsonOpt`) with :func:`print_json`.

- What a user wrote (a client's name, a command line, a path, a GPU's name) is shown as written:
  rich reads ``[...]`` in a printed string as console markup and drops it (``svc[ray]`` became
  ``svc``), so such a string goes through :func:`shown` before it is printed among markup.
  :func:`warn` and the CLI's error line do it for their whole message.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from rich.console import Console, ConsoleDimensions
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

PLAIN_WIDTH = 10_000
"""Width of the output when stdout is not a terminal: wide enough that no table is squeezed;
lines are only as long as their content."""


class _PolicyConsole(Console):
    """A console as wide as its content when it does not write to a terminal.

    Decided at each print, not when created: the same console object serves a terminal, a
    pipe and a test runner's captured stdout."""

    @property
    def size(self) -> ConsoleDimensions:
        if not self.is_terminal:
            return ConsoleDimensions(PLAIN_WIDTH, 25)
        return super().size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        width, height = new_size
        self._width = width
        self._height = height


console: Console = _PolicyConsole(highlight=False)
"""stdout: results (tables, notes, paths written)."""
error_console: Console = _PolicyConsole(stderr=True, highlight=False)
"""stderr: errors, warnings, progress that is not a result."""

JsonOpt = Annotated[
    bool,
    typer.Option("--json", help="Print the results as one JSON document, and nothing else."),
]


def shown(text: object) -> str:
    """``text`` as it will be shown, never read as console markup (``svc[ray]`` stays whole)."""
    return escape(str(text))


def warn(message: str) -> None:
    """A warning, on stderr, one line however narrow the terminal; its text shown as written."""
    error_console.print(f"[yellow]warning:[/] {shown(message)}", highlight=False, soft_wrap=True)


def note(message: str) -> None:
    """A note that belongs with the results (stdout), never wrapped mid-word into a table."""
    console.print(message, highlight=False, soft_wrap=True, markup=False)


def print_json(data: Any) -> None:
    """One JSON document on stdout; NaN and infinity are refused rather than written as
    JavaScript literals that strict JSON readers reject."""
    typer.echo(json.dumps(data, indent=2, allow_nan=False))


def _natural_width(out: Console, table: Table) -> int:
    return Measurement.get(out, out.options.update_width(PLAIN_WIDTH), table).maximum


def _sub_table(table: Table, indices: Sequence[int], title: str | None) -> Table:
    """A table of some of ``table``'s columns, with its title, styles and rows."""
    part = Table(
        title=title,
        title_justify=table.title_justify,
        show_header=table.show_header,
        box=table.box,
        show_lines=table.show_lines,
        padding=table.padding,
        pad_edge=table.pad_edge,
        header_style=table.header_style,
    )
    cells = [list(table.columns[index].cells) for index in indices]
    for index in indices:
        part.columns.append(table.columns[index].copy())
    for number, row in enumerate(table.rows):
        part.add_row(*(column[number] for column in cells), style=row.style)
    return part


def print_table(table: Table, *, keys: int = 1, out: Console | None = None) -> None:
    """``table`` whole where it fits (always in a pipe or log); on a narrower terminal as several
    tables of fewer columns, the first ``keys`` columns (what names a row) repeated in each, so
    no cell is cut. A column that alone is too wide folds its cells over lines."""
    out = out or console
    for column in table.columns:
        # fold, never "…": a cell that cannot fit is broken over lines, nothing is dropped
        column.overflow = "fold"
        column.no_wrap = False
        column.max_width = None
    if _natural_width(out, table) <= out.width or len(table.columns) <= keys + 1:
        out.print(table)
        return
    key_indices = list(range(keys))
    parts: list[list[int]] = []
    title = str(table.title) if table.title is not None else None
    for index in range(keys, len(table.columns)):
        trial = [*parts[-1], index] if parts else [index]
        if parts and _natural_width(out, _sub_table(table, key_indices + trial, title)) <= (
            out.width
        ):
            parts[-1] = trial
        else:
            parts.append([index])
    for number, part in enumerate(parts, start=1):
        part_title = f"{title} ({number}/{len(parts)})" if title else f"({number}/{len(parts)})"
        out.print(_sub_table(table, key_indices + part, part_title))
