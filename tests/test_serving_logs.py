"""docs/serving_logs.md is what benchmarks/serve_logs.py generates now (issue 43, Must 5): the
published start-up logs beside the tool's figures stay current. One `serve` run per log (main()
in this process)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("serve_logs", ROOT / "benchmarks" /
                                                  "serve_logs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["serve_logs"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _serve_in_process(cmd, cwd=None, env=None, **kwargs):
    """subprocess.run of `python -m accounting serve ...` as the script starts it, run by
    main() in this process (the same arguments, the same JSON on stdout): a fresh
    interpreter per log cost 0.6 s of CPU each, 23 logs. The exit status and the lone
    stderr line of `serve` in a real process are tests/test_serving.py's and the hostile
    tests'; this test is about the page's figures."""
    import contextlib
    import io
    import subprocess

    from accounting.cli.main import main
    assert list(cmd[1:4]) == ["-m", "accounting", "serve"], cmd  # what the script runs
    assert Path(cwd) == ROOT and env["PYTHONPATH"] == str(ROOT)  # this checkout's tool
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(cmd[3:]))
    return subprocess.CompletedProcess(cmd, code, out.getvalue(), err.getvalue())


def test_logs_page_is_current(monkeypatch):
    m = _script()
    monkeypatch.setattr(m.subprocess, "run", _serve_in_process)
    assert m.DOC.read_text(encoding="utf-8") == m.markdown(m.rows(m.ROOT, with_version=True)), \
        "docs/serving_logs.md is stale: run python benchmarks/serve_logs.py --write"


def test_the_logs_cover_what_the_issue_asks():
    # issue 43: at least 15 logs, two engines (several logs of each), TP 1 to 8, three
    # weight formats
    m = _script()
    sglang = [log for log in m.LOGS if "sglang" in log.argv]
    assert len(m.LOGS) >= 15 and len(sglang) >= 4 and len(m.LOGS) - len(sglang) >= 4
    engines = {"sglang" if "sglang" in log.argv else "vllm" for log in m.LOGS}
    tps = {int(log.argv[log.argv.index("--tp") + 1]) if "--tp" in log.argv else 1
           for log in m.LOGS}
    formats = {f for log in m.LOGS for f in log.formats} | {"bf16"}
    assert engines == {"vllm", "sglang"} and {1, 2, 4, 8} <= tps and len(formats) >= 3
