"""`python -m accounting report`: regenerate reports/gpt2_sizes.md and reports/figures/.

Everything is written into a temporary folder next to the destination first and swapped
in with renames at the end, so a run that fails (or is interrupted) leaves the previous
report untouched. Progress goes to stderr, one line per step.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from accounting.args import Parser
from accounting.errors import UsageError
from accounting.reporting import data
from accounting.reporting.figures_index import FIGURES, FIGURES_DIR, FORMULA_CSV, SWEEP_CSV

REPORT = "gpt2_sizes.md"
DEFAULT_OUT = "reports"


def parser() -> Parser:
    p = Parser(prog="python -m accounting report",
               description="Regenerate the GPT-2 size comparison report (Markdown) and its "
                           "figures (PNG, SVG) from the library, cross-checked on the real model.")
    p.add_argument("--out", metavar="DIR", default=DEFAULT_OUT,
                   help=f"folder for {REPORT} and {FIGURES_DIR}/ (default: {DEFAULT_OUT}, "
                        "relative to the current directory)")
    p.add_argument("--no-verify", dest="verify", action="store_false",
                   help="skip the cross-check against the real model (a quick draft, marked "
                        "as such in the report)")
    return p


class Progress:
    """Runs steps, printing '[i/N] label ... outcome (seconds)' to stderr."""

    def __init__(self, total: int, stream=None):
        self.total, self.done, self.stream = total, 0, stream or sys.stderr

    def __call__(self, label, work, outcome=lambda value: "done", seconds=None):
        """seconds: the step's own time when its work ran elsewhere (a worker process)."""
        self.done += 1
        print(f"[{self.done}/{self.total}] {label} ...", end=" ", file=self.stream, flush=True)
        start = time.perf_counter()
        try:
            value = work()
        except BaseException:
            print("failed", file=self.stream, flush=True)
            raise
        took = time.perf_counter() - start if seconds is None else seconds
        print(f"{outcome(value)} ({took:.1f} s)", file=self.stream, flush=True)
        return value


def _destination(out: str) -> Path:
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {out!r} is a file; give a folder")
    if not path.exists():
        if not path.parent.is_dir():
            raise UsageError(f"--out {out!r}: folder {str(path.parent)!r} does not exist; "
                             "create it first")
        path.mkdir()
    return path


def _check_dependencies(verify: bool) -> None:
    from accounting.optional import missing
    try:
        import matplotlib  # noqa: F401  (the figures need it, draft or not)
    except ImportError:
        raise UsageError("the report's figures need matplotlib; install it (pip install -e .)") from None
    absent = missing() if verify else None
    if absent:
        raise UsageError(f"the cross-check needs {absent}, which is not importable; install it "
                         "(pip install -e .) or pass --no-verify for a draft")


def build(stage: Path, verify: bool, step) -> data.ReportData:
    """Compute everything and write the report's files into stage (nothing else). The
    cross-checks start first, in worker processes where they can (reporting/checks.py),
    and are collected after the figures, which do not depend on them."""
    from accounting.reporting import figures, markdown
    from accounting.reporting.checks import PendingChecks
    with PendingChecks(data.check_workloads() if verify else []) as pending:
        d = data.assemble(verify, step, checks=False)
        folder = stage / FIGURES_DIR
        folder.mkdir()
        for name in FIGURES:
            step(f"figure {name}", lambda name=name: figures.save(name, d, folder),
                 lambda files: ", ".join(files))
        if verify:
            d = data.add_checks(d, pending, step)
    (folder / SWEEP_CSV).write_text(data.sweep_csv(d), encoding="utf-8", newline="")
    (folder / FORMULA_CSV).write_text(data.formula_csv(d), encoding="utf-8", newline="")
    step(f"write {REPORT}", lambda: (stage / REPORT).write_text(markdown.render(d), encoding="utf-8",
                                                                newline=""),
         lambda n: f"{n:,} characters")
    return d


def publish(stage: Path, out: Path) -> None:
    """Swap the staged figures/ and report in for the old ones, rolling back on failure."""
    figures_dir, old = out / FIGURES_DIR, None
    if figures_dir.exists():
        old = stage.with_name(stage.name + ".old")
        os.rename(figures_dir, old)
    try:
        os.rename(stage / FIGURES_DIR, figures_dir)
        try:
            os.replace(stage / REPORT, out / REPORT)
        except BaseException:
            os.rename(figures_dir, stage / FIGURES_DIR)
            raise
    except BaseException:
        if old is not None:
            os.rename(old, figures_dir)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def main(argv: list[str]) -> int:
    ns = parser().parse_args(argv)
    _check_dependencies(ns.verify)
    out = _destination(ns.out)
    step = Progress(data.step_count(ns.verify) + len(FIGURES) + 1)
    start = time.perf_counter()
    stage = Path(tempfile.mkdtemp(prefix=f".{REPORT}.", suffix=".tmp", dir=out))
    try:
        d = build(stage, ns.verify, step)
        publish(stage, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    files = sum(len(FIGURES[n].files()) for n in FIGURES) + 1
    print(f"report: wrote {out / REPORT} and {files} files in {out / FIGURES_DIR}/ "
          f"in {time.perf_counter() - start:.1f} s"
          + ("" if ns.verify else " (draft: cross-check skipped)"), file=sys.stderr)
    if ns.verify and not d.agrees:
        bad = [f"{c.config.name} T={c.seq}" for c in d.checks if not c.result.agrees]
        print(f"accounting: cross-check DISAGREES for {', '.join(bad)}; see the report",
              file=sys.stderr)
        return 1
    return 0
