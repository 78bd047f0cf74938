"""The Benchmarks page (docs/benchmarks.md) shows the benchmarks' own output.

A block in README.md or docs/*.md written as

    <!-- benchmark: python benchmarks/bench_verify.py --runs 5 -->
    ```text
    ...
    ```

holds what that command printed when it was last run. Timings change from run to run,
so no test re-runs them; tests/test_benchmark_blocks.py checks that every block is a
benchmark's table and that its ratios are its own medians divided. Regenerate with

    python benchmarks/readme.py --update          # every block (minutes)
    python benchmarks/readme.py --update bench_sweep   # the blocks of one script
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BLOCK = re.compile(r"<!-- benchmark: python (?P<args>benchmarks/[^>]*?) -->\n```text\n"
                   r"(?P<body>.*?)```", re.S)


def documents() -> list[Path]:
    """Every page that may hold benchmark blocks: the README and the manual under docs/."""
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


def blocks(text: str) -> list[re.Match]:
    return list(BLOCK.finditer(text))


def all_blocks() -> list[re.Match]:
    """The benchmark blocks of every page, in page order."""
    return [m for path in documents() for m in blocks(path.read_text(encoding="utf-8"))]


def update(only: str | None = None) -> None:
    def fresh(m: re.Match) -> str:
        if only and only not in m["args"]:
            return m.group(0)
        print(f"running python {m['args']} ...", file=sys.stderr, flush=True)
        out = subprocess.run([sys.executable, *m["args"].split()], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout
        start, end = m.span("body")
        return m.group(0)[:start - m.start()] + out + m.group(0)[end - m.start():]

    for path in documents():
        text = path.read_text(encoding="utf-8")
        new = BLOCK.sub(fresh, text)
        if new != text:
            path.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:2] != ["--update"]:
        sys.exit("usage: python benchmarks/readme.py --update [SCRIPT]")
    update(sys.argv[2] if len(sys.argv) > 2 else None)
