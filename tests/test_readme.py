"""The README's and the docs' example outputs are the tool's real outputs, and the README's
two commands stay true.

A block in README.md or docs/*.md written as

    <!-- output: python -m accounting ARGS -->
    ```text
    ...
    ```

must equal what `main(ARGS)` prints now; with `| sections: A; B` after ARGS, only the
text tables whose titles start with A or B (in output order). A block written as

    <!-- generated: NAME -->
    ...
    <!-- end generated: NAME -->

must equal accounting/cli/generated.py's BLOCKS[NAME]() (a table generated from the
one record that states its facts: the GPU cards, ...). Regenerate both kinds with
`python tests/test_readme.py --update` after a change that moves a number.
"""
from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every README command runs (tests/conftest.py)

README = Path(__file__).resolve().parents[1] / "README.md"


def documents() -> list[Path]:
    """Every page that may hold generated blocks: the README and the manual under docs/."""
    return [README, *sorted((README.parent / "docs").glob("*.md"))]


BLOCK = re.compile(r"<!-- output: python -m accounting (?P<args>[^>|]*?)"
                   r"(?: \| sections: (?P<sections>[^>]*?))? -->\n```text\n(?P<body>.*?)```", re.S)


GENERATED = re.compile(r"<!-- generated: (?P<name>[\w-]+) -->\n(?P<body>.*?)"
                       r"<!-- end generated: (?P=name) -->", re.S)


@functools.lru_cache(maxsize=None)
def _run(args: str) -> str:
    """What `python -m accounting ARGS` prints to a pipe (once per ARGS: several blocks show
    sections of the same run, and a run with the cross-check takes seconds)."""
    from accounting.cli.main import main
    buf = io.StringIO()
    columns = os.environ.pop("COLUMNS", None)  # full lines, as in a file or a pipe
    try:
        with contextlib.redirect_stdout(buf):
            code = main(shlex.split(args))
    finally:
        if columns is not None:
            os.environ["COLUMNS"] = columns
    assert code == 0, f"README command failed: {args}"
    return buf.getvalue()


def tool_output(args: str, sections: str | None = None) -> str:
    text = _run(args)
    if sections is None:
        return text
    prefixes = [p.strip() for p in sections.split(";")]
    chosen = [s for s in split_sections(text) if any(s.startswith(p) for p in prefixes)]
    assert chosen, f"no section of '{args}' starts with {prefixes}"
    return "\n".join(chosen)


def split_sections(text: str) -> list[str]:
    """Text output -> tables, each starting at its title (a line underlined with '=')."""
    lines = text.splitlines(keepends=True)
    starts = [i for i in range(len(lines) - 1)
              if lines[i + 1].strip() and set(lines[i + 1].strip()) == {"="}
              and len(lines[i + 1].rstrip("\n")) == len(lines[i].rstrip("\n"))]
    bounds = starts + [len(lines)]
    return ["".join(lines[a:b]).rstrip("\n") + "\n" for a, b in zip(bounds, bounds[1:])]


@pytest.mark.parametrize("path", documents(), ids=lambda p: p.relative_to(README.parent).as_posix())
def test_readme_outputs_are_current(path):
    blocks = list(BLOCK.finditer(path.read_text(encoding="utf-8")))
    if path == README:
        assert blocks, "README has no generated output blocks"
    from importlib.util import find_spec
    for m in blocks:
        if "Cross-check: transformers'" in m["body"] and find_spec("transformers") is None:
            continue  # needs the [hf] extra (CI installs it); the other blocks still run
        assert m["body"] == tool_output(m["args"], m["sections"]), \
            (f"{path.name} block for '{m['args']}' is stale: "
             "run python tests/test_readme.py --update")


@pytest.mark.parametrize("path", documents(), ids=lambda p: p.relative_to(README.parent).as_posix())
def test_generated_tables_are_current(path):
    from accounting.cli.generated import BLOCKS
    for m in GENERATED.finditer(path.read_text(encoding="utf-8")):
        assert m["name"] in BLOCKS, f"{path.name}: no generator named {m['name']!r}"
        assert m["body"] == BLOCKS[m["name"]](), \
            f"{path.name} generated table {m['name']!r} is stale: run python tests/test_readme.py --update"


def test_every_generated_table_stands_in_the_docs():
    # a generator that no page uses would be a table nobody sees, and a name checked nowhere
    from accounting.cli.generated import BLOCKS
    used = {m["name"] for p in documents() for m in GENERATED.finditer(p.read_text(encoding="utf-8"))}
    assert used == set(BLOCKS)


def test_the_docs_hold_generated_output_blocks():
    # the manual's examples moved from the README to docs/ (issue 22): they stay checked
    found = {p.name: len(BLOCK.findall(p.read_text(encoding="utf-8"))) for p in documents()[1:]}
    assert sum(found.values()) > 0, "docs/ has no generated output blocks"
    for page in ("cli.md", "architectures.md", "crosscheck.md", "literature.md",
                 "planning.md", "parallel.md"):
        assert found.get(page), f"docs/{page} has no generated output blocks"


def test_readme_starts_with_the_two_fresh_machine_commands():
    text = README.read_text(encoding="utf-8")
    first_blocks = re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.S)[:2]
    assert "python -m accounting gpt2-xl --ctx 16384" in first_blocks[0]
    assert "pip install torch==2.13.0" in first_blocks[0] and "pip install torch==2.13.0" in first_blocks[1]
    assert "pytest" in first_blocks[1]
    ci = (README.parent / ".ci" / "run").read_text()
    assert "python -m pytest -q" in first_blocks[1] and "python -m pytest -q" in ci


def test_the_model_type_lists_are_the_hf_tables_own():
    # issue 24: the supported model_types are stated once (accounting/architecture/hf_config.py
    # TYPES): docs/architectures.md's table and docs/cli.md's list are generated blocks
    # (test_generated_tables_are_current checks their text), --help and the error for an
    # unknown model_type name every type, in the table's order
    from accounting.cli.main import parser
    from accounting.runtime.errors import UsageError
    from accounting.architecture.hf_config import TYPES, WRAPPERS, translate
    docs = README.parent / "docs"
    for page, name in (("architectures.md", "model-types"), ("cli.md", "model-type-names")):
        assert f"<!-- generated: {name} -->" in (docs / page).read_text(encoding="utf-8"), page
    table = generated_body(docs / "architectures.md", "model-types")
    rows = [line.strip("| ").split(" | ") for line in table.splitlines()[2:] if line.startswith("|")]
    assert [(r[0].strip("`"), r[1].strip("`"), r[2]) for r in rows] == \
        [(t.model_type, t.transformers_class, t.rules) for t in TYPES.values()]
    # the types, then the multimodal files read for their language model (gemma3)
    names = ", ".join([*TYPES, *WRAPPERS])
    assert TYPES and WRAPPERS and set(TYPES).isdisjoint(WRAPPERS)
    listed = "(model_type: " + names + ")"
    assert listed in " ".join(parser().format_help().split())
    with pytest.raises(UsageError) as e:
        translate({"model_type": "no_such_type"}, "f.json", "f")
    assert "supported: " + names + " (or" in str(e.value)


def generated_body(path: Path, name: str) -> str:
    return next(m["body"] for m in GENERATED.finditer(path.read_text(encoding="utf-8"))
                if m["name"] == name)


def update() -> None:
    def fresh(m: re.Match) -> str:
        start, end = m.span("body")
        whole = m.group(0)
        offset = m.start()
        return whole[:start - offset] + tool_output(m["args"], m["sections"]) + whole[end - offset:]
    from accounting.cli.generated import BLOCKS

    def table(m: re.Match) -> str:
        return (f"<!-- generated: {m['name']} -->\n{BLOCKS[m['name']]()}"
                f"<!-- end generated: {m['name']} -->")
    for path in documents():
        text = path.read_text(encoding="utf-8")
        new = GENERATED.sub(table, BLOCK.sub(fresh, text))
        if new != text:
            path.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] == ["--update"]:
        sys.path.insert(0, str(README.parent))
        update()
    else:
        sys.exit("usage: python tests/test_readme.py --update")
