"""docs/serving_search.md's generated tables are what benchmarks/serve_search_docs.py prints
now (the issue's cases and AIConfigurator's published ones); they need aiconfigurator-core's
measured tables (the `time` extra), and skip without them."""
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
    spec = importlib.util.spec_from_file_location("serve_search_docs",
                                                  ROOT / "benchmarks" / "serve_search_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _block(text: str, start: str, end: str) -> str:
    m = re.search(re.escape(start) + r"(.*?)" + re.escape(end), text, re.S)
    assert m, f"docs/serving_search.md has no {start.strip()} block"
    return m.group(1)


def test_the_search_page_tables_are_current():
    mod = _script()
    text = (ROOT / "docs" / "serving_search.md").read_text()
    stale = "stale: run python benchmarks/serve_search_docs.py --update"
    assert _block(text, mod.START, mod.END) == mod.cases(), stale
    assert _block(text, mod.AIC_START, mod.AIC_END) == mod.aiconfigurator(), stale
    assert _block(text, mod.WL_START, mod.WL_END) == mod.workloads(), stale


def test_three_published_aiconfigurator_cases():
    assert len(_script().AIC) >= 3
