"""docs/timing.md's generated tables are what benchmarks/published_runs.py prints now (the
H200 checks and the published training runs beside the planner's predictions); they need
aiconfigurator-core's tables (the `time` extra), and skip without them."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from accounting.timing import tables

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not tables.available(), reason="aiconfigurator-core is not installed (pip install -e '.[time]')")]

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("published_runs",
                                                  ROOT / "benchmarks" / "published_runs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _block(text: str, start: str, end: str) -> str:
    m = re.search(re.escape(start) + r"(.*?)" + re.escape(end), text, re.S)
    assert m, f"docs/timing.md has no {start.strip()} block"
    return m.group(1)


def test_the_timing_page_tables_are_current():
    mod = _script()
    text = (ROOT / "docs" / "timing.md").read_text()
    assert _block(text, mod.H200_START, mod.H200_END) == mod.h200_table(), \
        "stale: run python benchmarks/published_runs.py --update"
    assert _block(text, mod.START, mod.END) == mod.table(), \
        "stale: run python benchmarks/published_runs.py --update"
    assert _block(text, mod.DONE_START, mod.DONE_END) == mod.done_when_table(), \
        "stale: run python benchmarks/published_runs.py --update"


def test_at_least_fifteen_published_training_runs_of_two_stacks():
    from accounting.published import RUNS
    assert len(RUNS) >= 15 and len({r.stack for r in RUNS}) >= 2
