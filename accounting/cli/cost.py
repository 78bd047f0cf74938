"""--price-per-gpu-hour P|table (issue 42) for `plan` and `serve`: the cost line in the answer
and `cost` in the JSON (accounting/planning/cost.py computes it)."""
from __future__ import annotations

import argparse
from dataclasses import replace

from accounting.runtime.errors import UsageError, shorten

HELP = ("dollars per GPU-hour (e.g. 2.50), or 'table' for the dated, cited on-demand price of "
        "the --gpu (accounting/planning/cost.py): the cost of the training run (plan, with "
        "--tokens or --steps) or of serving per million output tokens (serve), GPU time only")


def _parse(text: str):
    if text.strip().lower() == "table":
        return "table"
    from accounting.planning.compute import exact
    try:
        x = exact(text, "--price-per-gpu-hour")
    except UsageError:
        raise argparse.ArgumentTypeError(f"must be a price in dollars (e.g. 2.50) or 'table', "
                                         f"got {shorten(text)}") from None
    if not 0 < x <= 10**9:
        raise argparse.ArgumentTypeError(f"must be a positive price up to 10^9 dollars, got "
                                         f"{shorten(text)}")
    return x


_parse.__name__ = "price"


def add_arg(group) -> None:
    group.add_argument("--price-per-gpu-hour", type=_parse, metavar="P", help=HELP)


def answer(table, c, width: int = 14):
    if c is None:
        return table
    from accounting.planning.cost import line
    return replace(table, notes=table.notes + (line(c, width),))


def add_json(d: dict, c) -> dict:
    if c is not None:
        d["cost"] = c.to_dict()
    return d
