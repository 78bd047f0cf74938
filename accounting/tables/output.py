"""One output path for every subcommand: the --format switch, the terminal width, JSON
without NaN, and the -o target (written whole or not at all, through runtime/safe_io).

A command hands over what it has in each form, lazily (a callable, run only for the format
asked for): the tables (text and Markdown), the JSON-able dict, the CSV text. A format the
command has no data for (csv or json of a table-only view, e.g. --list) prints the text.
"""
from __future__ import annotations

import json
from typing import Callable

from accounting.tables import render
from accounting.tables.table import Table
from accounting.runtime import safe_io

TEXT, MARKDOWN, CSV, JSON = "text", "markdown", "csv", "json"
FORMATS = (TEXT, MARKDOWN, CSV, JSON)


def width(target: str | None) -> int | None:
    """The width to fit text tables to: the terminal's when stdout is one (or COLUMNS is
    set), for output to stdout; None (no wrapping: the full lines, byte-stable) otherwise."""
    return safe_io.terminal_width() if target in (None, "-") else None


def tables_text(tables: list[Table], fmt: str, target: str | None) -> str:
    """Markdown for markdown; text, fitted to the terminal when it goes there, otherwise."""
    return render.markdown(tables) if fmt == MARKDOWN else render.text(tables, width(target))


def json_text(data) -> str:
    # allow_nan=False: NaN and Infinity are not JSON; the data are finite by construction,
    # so one that is not is a bug (exit 3), never a file other tools cannot read
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def text(fmt: str, target: str | None, tables: Callable[[], list[Table]] | None = None,
         data: Callable[[], object] | None = None, csv: Callable[[], str] | None = None) -> str:
    """The command's output in format `fmt`, for `target` (-o FILE, '-' or None: stdout)."""
    if fmt == JSON and data is not None:
        return json_text(data())
    if fmt == CSV and csv is not None:
        return csv()
    return tables_text(tables() if tables is not None else [], fmt, target)


def write(text: str, target: str | None, flag: str = "-o") -> None:
    """Standard output (in its encoding) for None or '-', else the file `target` atomically
    (whole or not at all; `flag` names the option in an error)."""
    if target is None:
        safe_io.write_stdout(text)
    else:
        safe_io.write_atomic(target, text, flag)


def emit(fmt: str, target: str | None, tables: Callable[[], list[Table]] | None = None,
         data: Callable[[], object] | None = None, csv: Callable[[], str] | None = None) -> None:
    """text(...) written to the target: what every subcommand's last step is."""
    write(text(fmt, target, tables, data, csv), target)
