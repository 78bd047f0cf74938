"""Generated blocks of the manual: the text between a start and an end marker line of a page
in docs/, written by one of the benchmarks/ scripts (published_runs.py, published_serving.py,
fp8_tables.py, serve_search_docs.py). Each script names its page and its blocks, as
(start, end, the function that prints the block); this module reads, checks and rewrites them
for all of them, and gives each script its command line:

    python benchmarks/SCRIPT.py --update     # rewrite the page's blocks
    python benchmarks/SCRIPT.py              # print them

Their tests hold each page to what its script prints now (`stale`)."""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Callable, Sequence

Block = tuple[str, str, Callable[[], str]]  # start marker, end marker, the block's text


def _pattern(start: str, end: str) -> re.Pattern:
    return re.compile(re.escape(start) + r"(.*?)" + re.escape(end), re.S)


def read(text: str, start: str, end: str, page: str) -> str:
    """The block between `start` and `end` in `text` (a page's); AssertionError if absent."""
    m = _pattern(start, end).search(text)
    assert m, f"{page} has no {start.strip()} block"
    return m.group(1)


def stale(doc: Path, blocks: Sequence[Block]) -> list[str]:
    """The start markers of `doc`'s blocks whose text is not what their function prints now."""
    text = doc.read_text(encoding="utf-8")
    return [start.strip() for start, end, body in blocks
            if read(text, start, end, doc.name) != body()]


def update(doc: Path, blocks: Sequence[Block]) -> None:
    text = doc.read_text(encoding="utf-8")
    for start, end, body in blocks:
        read(text, start, end, doc.name)  # every block must be on the page already
        new = body()
        text = _pattern(start, end).sub(lambda m: start + new + end, text)
    doc.write_text(text, encoding="utf-8")


def main(script: str, doc: Path, blocks: Sequence[Block]) -> None:
    """The script's command line: --update rewrites `doc`'s blocks, no argument prints them."""
    if sys.argv[1:] == ["--update"]:
        update(doc, blocks)
    elif not sys.argv[1:]:
        print("\n".join(body() for _, _, body in blocks), end="")
    else:
        sys.exit(f"usage: python benchmarks/{Path(script).name} [--update]")
