"""docs/serving_search.md's generated tables are what benchmarks/serve_search_docs.py prints
now (the issue's cases and AIConfigurator's published ones); they need aiconfigurator-core's
measured tables (the `time` extra), and skip without them."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from accounting.timing import tables

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not tables.available(), reason="aiconfigurator-core is not installed (pip install -e '.[time]')")]

ROOT = Path(__file__).resolve().parents[1]


def _script():
    """benchmarks/serve_search_docs.py (the repository root on the path: its benchmarks/ imports)."""
    sys.path.insert(0, str(ROOT))
    import benchmarks.serve_search_docs as mod
    return mod


def test_the_search_page_tables_are_current():
    """Every generated block: the issue's cases, the workload cases, AIConfigurator's."""
    mod = _script()
    from benchmarks.doc_blocks import stale
    assert [b[0].strip() for b in mod.BLOCKS] == ["<!-- search-cases -->", "<!-- workload-cases -->",
                                                  "<!-- aiconfigurator-cases -->"]
    assert stale(mod.DOC, mod.BLOCKS) == [], "stale: run python benchmarks/serve_search_docs.py --update"


def test_three_published_aiconfigurator_cases():
    assert len(_script().AIC) >= 3
