"""The README's example outputs are the tool's real outputs, and its two commands stay true.

A block in README.md written as

    <!-- output: python -m accounting ARGS -->
    ```text
    ...
    ```

must equal what `main(ARGS)` prints now. Regenerate them with
`python tests/test_readme.py --update` after a change that moves a number.
"""
from __future__ import annotations

import contextlib
import io
import re
import shlex
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"<!-- output: python -m accounting (?P<args>[^>]*?) -->\n```text\n(?P<body>.*?)```",
                   re.S)


def tool_output(args: str) -> str:
    from accounting.cli import main
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(shlex.split(args))
    assert code == 0, f"README command failed: {args}"
    return buf.getvalue()


def test_readme_outputs_are_current():
    blocks = list(BLOCK.finditer(README.read_text(encoding="utf-8")))
    assert blocks, "README has no generated output blocks"
    for m in blocks:
        assert m["body"] == tool_output(m["args"]), \
            f"README block for '{m['args']}' is stale: run python tests/test_readme.py --update"


def test_readme_starts_with_the_two_fresh_machine_commands():
    text = README.read_text(encoding="utf-8")
    first_blocks = re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.S)[:2]
    assert "python -m accounting gpt2-xl --ctx 16384" in first_blocks[0]
    assert "pip install torch==2.13.0" in first_blocks[0] and "pip install torch==2.13.0" in first_blocks[1]
    assert "pytest" in first_blocks[1]
    ci = (README.parent / ".ci" / "run").read_text()
    assert "python -m pytest -q" in first_blocks[1] and "python -m pytest -q" in ci


def update() -> None:
    text = README.read_text(encoding="utf-8")
    def fresh(m: re.Match) -> str:
        start, end = m.span("body")
        whole = m.group(0)
        offset = m.start()
        return whole[:start - offset] + tool_output(m["args"]) + whole[end - offset:]
    text = BLOCK.sub(fresh, text)
    README.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] == ["--update"]:
        sys.path.insert(0, str(README.parent))
        update()
    else:
        sys.exit("usage: python tests/test_readme.py --update")
