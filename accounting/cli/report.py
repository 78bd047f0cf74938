"""`python -m accounting report`: regenerate reports/gpt2_sizes.md and reports/figures/.

Everything is written into a temporary folder next to the destination first and swapped
in with renames at the end, so a run that fails (or is interrupted) leaves the previous
report untouched. Progress goes to stderr, one line per step.

Ctrl-C: the staging folder is made and removed with SIGINT held (accounting.runtime.safe_io.critical),
so no temporary entry survives an interrupt; the swap is one critical section that first
checks whether an interrupt arrived at any time during the run (also one a library caught
and dropped, as matplotlib's cleanup can): after an interrupt the report is never published.
The destination is checked before any work: its figures/ must be a folder (or absent) and
its gpt2_sizes.md a regular file (or absent).
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from accounting.cli.args import EXIT_STATUS, Parser
from accounting.runtime.errors import Interrupted, UsageError, os_problem, shorten
from accounting.runtime.safe_io import critical, encodable, interrupted, say
from accounting.reporting import data
from accounting.reporting.figures_index import FIGURES, FIGURES_DIR, FORMULA_CSV, SWEEP_CSV

REPORT = "gpt2_sizes.md"
DEFAULT_OUT = "reports"


def parser() -> Parser:
    p = Parser(prog="python -m accounting report", epilog=EXIT_STATUS,
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

    def _say(self, text: str, end: str = "\n") -> None:
        if self.stream is not None:  # a closed stderr: no progress (print would use stdout)
            print(encodable(text, self.stream), end=end, file=self.stream, flush=True)

    def __call__(self, label, work, outcome=lambda value: "done", seconds=None):
        """seconds: the step's own time when its work ran elsewhere (a worker process)."""
        self.done += 1
        self._say(f"[{self.done}/{self.total}] {label} ...", end=" ")
        start = time.perf_counter()
        try:
            value = work()
        except BaseException:
            self._say("failed")
            raise
        took = time.perf_counter() - start if seconds is None else seconds
        self._say(f"{outcome(value)} ({took:.1f} s)")
        return value


def _destination(out: str) -> Path:
    """The --out folder, checked (and made, when its parent exists) before any work."""
    shown = shorten(out, 80)
    if out == "":
        raise UsageError("--out '' names no folder; give a folder (default: reports)")
    path = Path(out)
    try:
        if path.exists() and not path.is_dir():
            raise UsageError(f"--out {shown} is not a folder; give a folder")
        for name, want_dir in ((FIGURES_DIR, True), (REPORT, False)):
            p = path / name
            if p.is_symlink() or (p.exists() and p.is_dir() != want_dir) \
                    or (p.exists() and not want_dir and not p.is_file()):
                kind = "a folder" if want_dir else "a regular file"
                raise UsageError(f"--out {shown}: {name} there is not {kind}; the report "
                                 f"would replace it. Move it away or choose another --out")
        _no_foreign_figures(path, shown)
        if not path.exists():
            if not path.parent.is_dir():
                raise UsageError(f"--out {shown}: folder {shorten(str(path.parent), 80)} does "
                                 "not exist; create it first")
            path.mkdir()
    except OSError as e:
        raise UsageError(os_problem(e, f"cannot use --out {shown}")) from None
    return path


def _own_figures() -> set[str]:
    """The names the report writes into figures/ (every figure's files and the two CSVs)."""
    return {f for name in FIGURES for f in FIGURES[name].files()} | {SWEEP_CSV, FORMULA_CSV}


def _no_foreign_figures(path: Path, shown: str) -> None:
    """The report replaces figures/ as a whole (publish): a file in it the report does not
    write would be deleted with it (issue 32: DIR/figures/my_plot.png was), so such a
    folder is refused before any work."""
    folder = path / FIGURES_DIR
    if not folder.is_dir():
        return
    foreign = sorted(set(os.listdir(folder)) - _own_figures())
    if foreign:
        raise UsageError(f"--out {shown}: {FIGURES_DIR}/ holds {shorten(foreign[0], 40)}"
                         f"{f' and {len(foreign) - 1} more' if len(foreign) > 1 else ''}, "
                         f"which the report does not write and would delete (it replaces "
                         f"{FIGURES_DIR}/ as a whole); move it away or choose another --out")


def _check_dependencies(verify: bool) -> None:
    from accounting.runtime.optional import import_matplotlib, missing
    try:
        import_matplotlib()  # the figures need it, draft or not (a bogus MPLBACKEND: exit 2)
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
    """Swap the staged figures/ and report in for the old ones, rolling back on failure.
    Called with SIGINT held (safe_io.critical): the renames run to their end or roll back."""
    figures_dir, old = out / FIGURES_DIR, None
    if figures_dir.exists():
        old = stage / ".old-figures"  # inside the stage: removed with it, whatever happens
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


def main(argv: list[str]) -> int:
    ns = parser().parse_args(argv)
    _check_dependencies(ns.verify)
    out = _destination(ns.out)
    step = Progress(data.step_count(ns.verify) + len(FIGURES) + 1)
    start = time.perf_counter()
    stage = None
    try:
        with critical():
            stage = Path(tempfile.mkdtemp(prefix=f".{REPORT}.", suffix=".tmp", dir=out))
        d = build(stage, ns.verify, step)
        with critical() as held:
            signum = interrupted()
            if signum:  # also one some library swallowed: never publish after an interrupt
                raise Interrupted(signum)
            publish(stage, out)
            held.committed()
    except OSError as e:
        raise UsageError(os_problem(e, f"cannot write the report into {shorten(str(out), 80)}")) from None
    finally:
        if stage is not None:
            with critical():
                shutil.rmtree(stage, ignore_errors=True)
    files = sum(len(FIGURES[n].files()) for n in FIGURES) + 1
    say(f"report: wrote {out / REPORT} and {files} files in {out / FIGURES_DIR}/ "
        f"in {time.perf_counter() - start:.1f} s"
        + ("" if ns.verify else " (draft: cross-check skipped)"))
    if ns.verify and not d.agrees:
        bad = [f"{c.config.name} T={c.seq}" for c in d.checks if not c.result.agrees]
        say(f"accounting: cross-check DISAGREES for {', '.join(bad)}; see the report")
        return 1
    return 0
