"""docs/serving_logs.md is what benchmarks/serve_logs.py generates now (issue 43, Must 5): the
published start-up logs beside the tool's figures stay current. Slow: 14 `serve` runs in
subprocesses."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("serve_logs", ROOT / "benchmarks" /
                                                  "serve_logs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["serve_logs"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_logs_page_is_current():
    m = _script()
    assert m.DOC.read_text(encoding="utf-8") == m.markdown(m.rows(m.ROOT, with_version=True)), \
        "docs/serving_logs.md is stale: run python benchmarks/serve_logs.py --write"


def test_the_logs_cover_what_the_issue_asks():
    # issue 43: two engines, TP 1 to 8, three weight formats
    m = _script()
    engines = {"sglang" if "sglang" in log.argv else "vllm" for log in m.LOGS}
    tps = {int(log.argv[log.argv.index("--tp") + 1]) if "--tp" in log.argv else 1
           for log in m.LOGS}
    formats = {f for log in m.LOGS for f in log.formats} | {"bf16"}
    assert engines == {"vllm", "sglang"} and {1, 2, 4, 8} <= tps and len(formats) >= 3
