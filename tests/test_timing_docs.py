"""docs/timing.md's generated tables are what benchmarks/published_runs.py prints now (the
H200 checks and the published training runs beside the planner's predictions); they need
aiconfigurator-core's tables (the `time` extra), and skip without them."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from accounting.timing import tables

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not tables.available(), reason="aiconfigurator-core is not installed (pip install -e '.[time]')")]

ROOT = Path(__file__).resolve().parents[1]


def _script():
    """benchmarks/published_runs.py (the repository root on the path: its benchmarks/ imports)."""
    sys.path.insert(0, str(ROOT))
    import benchmarks.published_runs as mod
    return mod


def test_the_timing_page_tables_are_current():
    """Every generated block: the H200 checks, the kernels', the published runs, done-when."""
    mod = _script()
    from benchmarks.doc_blocks import stale
    assert [b[0].strip() for b in mod.BLOCKS] == ["<!-- h200-checks -->", "<!-- h200-kernels -->",
                                                  "<!-- published-runs -->", "<!-- done-when -->"]
    assert stale(mod.DOC, mod.BLOCKS) == [], "stale: run python benchmarks/published_runs.py --update"


def test_at_least_fifteen_published_training_runs_of_two_stacks():
    from accounting.published import RUNS
    assert len(RUNS) >= 15 and len({r.stack for r in RUNS}) >= 2
