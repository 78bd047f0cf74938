"""The benchmark blocks (docs/benchmarks.md) are what the benchmarks print (benchmarks/readme.py).

Timings are not re-run here (they vary; the benchmarks are the check). What is checked:
every block names a script that exists and holds its tables, each a median of at least 5
runs; every ratio printed beside a figure is that figure's median over its floor's (or
peer's) median from the same table, recomputed from the printed medians; goals are judged
as the printed figures say.
"""
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.readme import all_blocks  # noqa: E402

SCRIPTS = {"benchmarks/bench_verify.py", "benchmarks/bench_report.py", "benchmarks/bench_sweep.py",
           "benchmarks/bench_timing.py"}


def parse_tables(text: str) -> list[tuple[str, list[dict[str, str]]]]:
    """(title, rows keyed by column) for every text table (accounting/tables/render.py's layout:
    title, '=' rule, header, '-' rule whose dash runs give the columns, rows)."""
    lines = text.splitlines()
    out = []
    for i in range(len(lines) - 3):
        if lines[i + 1] and set(lines[i + 1]) == {"="} and set(lines[i + 3]) <= {"-", " "}:
            spans = [m.span() for m in re.finditer(r"-+", lines[i + 3])]
            def cells(line):
                return [line[a:b if k < len(spans) - 1 else None].strip()
                        for k, (a, b) in enumerate(spans)]
            header = cells(lines[i + 2])
            rows = []
            for line in lines[i + 4:]:
                # a row has the two-space gap before every column it reaches; a note does not
                gaps = [a for a, _ in spans[1:] if a < len(line)]
                if not line.strip() or len(gaps) < 2 or any(line[a - 2:a] != "  " for a in gaps):
                    break
                rows.append(dict(zip(header, cells(line))))
            out.append((lines[i], rows))
    return out


def number(cell: str) -> float:
    return float(cell.rstrip("×").replace(",", ""))


def readme_blocks():
    return all_blocks()  # README.md and every docs/*.md


def test_every_benchmark_has_a_block():
    found = {m["args"].split()[0] for m in readme_blocks()}
    assert found == SCRIPTS
    for m in readme_blocks():
        assert (ROOT / m["args"].split()[0]).exists()
        assert m["body"].strip(), f"empty block: run python benchmarks/readme.py --update"


@pytest.mark.parametrize("m", readme_blocks(), ids=lambda m: m["args"])
def test_ratios_are_the_printed_medians_divided(m):
    tables = parse_tables(m["body"])
    assert tables
    for title, rows in tables:
        runs = re.search(r"median of (\d+) runs", title)
        assert runs and int(runs[1]) >= 5, title
        ratio_col = next((c for c in rows[0] if c.startswith("÷") or c == "× peer"), None)
        assert ratio_col, title
        goal_col = next((c for c in rows[0] if c.startswith("goal")), None)
        floor = None
        for row in rows:
            if ratio_col == "× peer":  # points per second over the peer's
                value = number(row["points/s"])
                if row[ratio_col] == "1.0×":
                    floor = value
                else:
                    assert abs(number(row[ratio_col]) - value / floor) <= 0.01 * value / floor + 0.5
            else:
                median = number(row["median s"])
                if floor is None:
                    floor = median  # the first row of a group is its floor (or peer): 1.00×
                if row[ratio_col] == "1.00×":
                    floor = median
                shown = number(row[ratio_col])
                # both medians printed to 2-3 decimals: allow their rounding
                assert abs(shown - median / floor) <= 0.011 + 0.006 * shown / floor, (title, row)
            if goal_col and row[goal_col] in ("met", "MISSED"):
                assert row[goal_col] == ("met" if _meets(goal_col, row) else "MISSED"), (title, row)
        strict = "÷ no-teardown floor"  # bench_verify: the floor ending as the CLI ends
        if strict in rows[0]:
            for row in rows:
                peer = next(r for r in rows if r["pass"] == row["pass"]
                            and r["run"] == "floor, no teardown")
                ratio = number(row["median s"]) / number(peer["median s"])
                assert abs(number(row[strict]) - ratio) <= 0.011 + 0.006 * ratio, (title, row)


def _meets(goal: str, row: dict) -> bool:
    """'goal ≤ 1.25×' (the ratio), 'goal ≤ 12 s' (the median), 'goal ≥ 1,000,000/s'."""
    limit = number(re.search(r"[\d.,]+", goal.split(" ", 2)[2]).group(0))
    if goal.endswith("×"):
        value = number(next(row[c] for c in row if c.startswith("÷")))
    elif goal.endswith("/s"):
        value = number(row["points/s"])
    else:
        value = number(row["median s"])
    return value >= limit if "≥" in goal else value <= limit
