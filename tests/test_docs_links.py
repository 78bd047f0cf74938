"""Every relative link in README.md and docs/*.md resolves: its file exists and its #anchor
is a heading of the page it points to, by GitHub's anchor rules.

GitHub's rules (docs.github.com, "Basic writing and formatting syntax", section links; the
implementation is github-slugger): take the heading's text as rendered (inline code keeps
its content, emphasis and link markup go), lower-case it, drop every character that is not
a letter, a digit, a space, a hyphen or an underscore, turn each space into a hyphen; a
second heading with the same anchor gets "-1", a third "-2". Links inside code (fenced
blocks, inline code spans) are not links, and headings inside fenced blocks are not
headings. Web addresses are not checked here (no network in the tests).
"""
from __future__ import annotations

import re
import sys
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
LINK = re.compile(r"!?\[(?P<text>(?:[^\[\]]|\[[^\]]*\])*)\]\((?P<target>[^)\s]*)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    out, fenced = [], None
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line.lstrip(" "))
        if m and (fenced is None or m.group(1) == fenced):
            fenced = None if fenced else m.group(1)
            continue
        if fenced is None:
            out.append((n, line))
    return out


def rendered(heading: str) -> str:
    """A heading's text as GitHub renders it: code spans keep their content, links their
    text, images their alt text; emphasis markers go."""
    text = CODE_SPAN.sub(lambda m: m.group(2).strip(), heading)
    text = LINK.sub(lambda m: m["text"], text)
    return re.sub(r"(\*\*|__|\*|(?<!\w)_|_(?!\w))", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (before duplicates are numbered)."""
    kept = []
    for c in rendered(heading).lower():
        if c in " -_" or unicodedata.category(c)[0] in "LM" or unicodedata.category(c) in ("Nd", "Nl"):
            kept.append(c)
    return "".join(kept).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every link and image outside code."""
    out = []
    for n, line in prose_lines(path.read_text(encoding="utf-8")):
        line = CODE_SPAN.sub("", line)
        out += [(n, m["target"]) for m in LINK.finditer(line)]
    return out


def broken(path: Path) -> list[str]:
    """What is wrong with the relative links of one page: one line each."""
    problems = []
    for n, target in links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:
            continue
        where = f"{path.relative_to(ROOT)}:{n}: ({target})"
        file_part, _, fragment = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not file_part and not fragment:
            problems.append(f"{where} an empty link")
            continue
        if ROOT not in dest.parents and dest != ROOT:
            problems.append(f"{where} points outside the repository")
            continue
        if not dest.exists():
            problems.append(f"{where} no such file or folder")
            continue
        if fragment:
            if dest.suffix != ".md":
                problems.append(f"{where} an #anchor on a file that is not Markdown")
            elif fragment not in anchors(dest):
                problems.append(f"{where} no heading with this anchor in {dest.relative_to(ROOT)}")
    return problems


def test_there_are_docs_to_check():
    names = {p.name for p in documents()[1:]}
    assert {"README.md", "cli.md", "architectures.md", "counting.md", "crosscheck.md",
            "report.md", "literature.md", "planning.md", "parallel.md",
            "benchmarks.md"} <= names
    assert all(links(p) for p in documents()), "every page links somewhere (the index, the README)"


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(path):
    assert broken(path) == []


def test_every_docs_page_is_in_the_index():
    index = {target.partition("#")[0] for _, target in links(ROOT / "docs" / "README.md")}
    assert {p.name for p in documents()[1:] if p.name != "README.md"} <= index


def test_the_slug_rules_give_githubs_anchors():
    # Anchors as GitHub renders them (docs.github.com section links; github-slugger's tests):
    # punctuation dropped, each space a hyphen (two spaces around a dropped character stay
    # two hyphens), code spans keep their text, non-ASCII letters kept.
    assert slug("The `python -m accounting` command") == "the-python--m-accounting-command"
    assert slug("GPT-2 XL at T = 16,384") == "gpt-2-xl-at-t--16384"
    assert slug("The literature's FLOP formulas") == "the-literatures-flop-formulas"
    assert slug("Mixtures of experts, sliding windows, latent attention") == \
        "mixtures-of-experts-sliding-windows-latent-attention"
    assert slug("snake_case and **bold**") == "snake_case-and-bold"
    assert slug("Grüße × 2") == "grüße--2"


def test_a_broken_link_or_anchor_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "a.md").write_text("# Title\n\n## Twice\n\n## Twice\n\n```\n# not a heading\n"
                                   "[in code](missing.md)\n```\n", encoding="utf-8")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#title) [dup](a.md#twice-1) [ok](#here) `[code](nope.md)`\n"
                    "# Here\n[no file](missing.md) [no anchor](a.md#nope) [third](a.md#twice-2)\n"
                    "[code heading](a.md#not-a-heading) [web](https://example.com/x#y)\n",
                    encoding="utf-8")
    found = broken(page)
    assert [p.split(": ", 1)[1].split(")")[0] for p in found] == \
        ["(missing.md", "(a.md#nope", "(a.md#twice-2", "(a.md#not-a-heading"]
