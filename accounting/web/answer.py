"""One page's answer: the CLI run on the query's argv, as text (the answer block and the
tables) and as JSON (the data, the plots, the downloads). Nothing is computed here."""
from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from typing import Mapping

from accounting.web import form
from accounting.web.run import run_cli

# The FLOPs question's plot: the shares at these contexts (the 1k to 16k)
SWEEP_CTX = (1024, 2048, 4096, 8192, 16384)
# The page passes at most this many characters of a pasted config; the CLI then bounds
# the file as it bounds every config file (architecture/choices.py MAX_CONFIG_BYTES, safe_io)
MAX_CONFIG_CHARS = 2**20 + 1
PASTED_NAME = "pasted-config"  # the model's name for a pasted config.json


@dataclass
class Answer:
    query: dict[str, str]
    question: form.Question
    command: str = ""
    status: int = 0
    text: str = ""  # the CLI's text output
    data: dict | None = None  # the CLI's JSON output
    error: str = ""  # the CLI's one-line message
    error_field: str | None = None
    notes: list[str] = field(default_factory=list)
    sweep: dict[int, dict] = field(default_factory=dict)  # ctx -> the CLI's JSON

    @property
    def ok(self) -> bool:
        return self.status == 0 and not self.error


class _Config:
    """The pasted config.json as a file the CLI reads (--config), in a private folder."""

    def __init__(self, text: str):
        self.text, self.folder, self.path = text, None, None

    def __enter__(self) -> str | None:
        if not self.text.strip():
            return None
        self.folder = tempfile.TemporaryDirectory(prefix="accounting-web-")
        # the CLI names a config.json after its folder (architecture/loaders.py): a fixed name,
        # not the temporary folder's random one
        folder = os.path.join(self.folder.name, PASTED_NAME)
        os.mkdir(folder)
        self.path = os.path.join(folder, form.CONFIG_NAME)
        with open(self.path, "w", encoding="utf-8") as f:
            f.write(self.text[:MAX_CONFIG_CHARS])
        return self.path

    def __exit__(self, *exc) -> None:
        if self.folder is not None:
            self.folder.cleanup()


def _clean(line: str, path: str | None) -> str:
    """The message as the person sees the file: 'config.json', not the temporary path."""
    if path:
        line = line.replace(path, form.CONFIG_NAME)
    return re.sub(r"^accounting: (error: )?", "", line)


def run(query: Mapping[str, str], sweep: bool = True) -> Answer:
    """The CLI's answer to the query (the query already has its defaults)."""
    a = Answer(dict(query), form.question_of(query))
    with _Config(query.get("config", "")) as path:
        args = form.argv(query, path)
        a.command = form.command(args, path)
        refused = form.page_refusal(query)
        if refused:
            a.status, (a.error_field, a.error) = 2, refused
            return a
        text = run_cli(args)
        if text.status != 0:
            a.status, a.error = text.status, _clean(text.error_line, path)
            names = {f.name for f in form.fields(a.question)} | {"model", "config"}
            a.error_field = form.field_of(a.error, names)
            return a
        a.text, a.notes = text.stdout, [_clean(x, path) for x in text.notes]
        data = run_cli(form.argv(query, path, json=True))
        if data.status == 0:
            a.data = json.loads(data.stdout)
        if sweep and a.question.key == "flops":
            for ctx in SWEEP_CTX:
                r = run_cli(form.argv(query, path, json=True, overrides={"ctx": str(ctx)}))
                if r.status == 0:
                    a.sweep[ctx] = json.loads(r.stdout)
    return a


def download(query: Mapping[str, str], fmt: str) -> tuple[int, str, str]:
    """(exit status, the CLI's output in `fmt` (json or csv), its one-line message)."""
    refused = form.page_refusal(query)
    if refused:
        return 2, "", refused[1]
    with _Config(query.get("config", "")) as path:
        # the format before the model (was: appended after it, so a dash-led model's '--'
        # made it a positional: "unrecognized arguments: --format=json")
        args = form.argv(query, path, fmt=fmt)
        r = run_cli(args)
        return r.status, r.stdout, _clean(r.error_line, path) if r.status else ""


_RULE = re.compile(r"^=+$")


def split_tables(text: str) -> list[tuple[str, str]]:
    """The CLI's text output as (title, block) pairs, each block the CLI's own lines (its
    title and the '=' rule under it included): a title is a line underlined by '='."""
    lines = text.splitlines()
    starts = [i - 1 for i in range(1, len(lines)) if _RULE.match(lines[i]) and lines[i - 1].strip()
              and len(lines[i]) >= len(lines[i - 1].rstrip()) - 1]
    if not starts:
        return [("", text.strip("\n"))] if text.strip() else []
    blocks = []
    if "".join(lines[:starts[0]]).strip():
        blocks.append(("", "\n".join(lines[:starts[0]]).strip("\n")))
    for k, s in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        blocks.append((lines[s], "\n".join(lines[s:end]).strip("\n")))
    return blocks
