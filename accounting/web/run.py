"""Run the CLI in-process and capture what it prints: (exit status, stdout, stderr).

accounting.cli.main.main(argv) writes through sys.stdout/sys.stderr (runtime/safe_io.py),
so a run swaps them for buffers; the swap is process-wide, hence one run at a time (a
lock): the page is a local tool, and a run takes well under a second without --verify.
COLUMNS is hidden during a run so the text is the full-width, byte-stable text the CLI
writes to a file or a pipe (output.width).
"""
from __future__ import annotations

import contextlib
import io
import os
import threading
from dataclasses import dataclass

_LOCK = threading.Lock()


@dataclass(frozen=True)
class Run:
    status: int  # the CLI's exit status (accounting/cli/main.py)
    stdout: str
    stderr: str

    @property
    def error_line(self) -> str:
        """The CLI's one-line message of a failed run (its last stderr line)."""
        lines = [x for x in self.stderr.splitlines() if x.strip()]
        return lines[-1] if lines else f"exit status {self.status}"

    @property
    def notes(self) -> list[str]:
        """stderr lines of a run that answered (notes: a skipped check, an accepted key)."""
        return [x for x in self.stderr.splitlines() if x.strip()]


def run_cli(argv: list[str]) -> Run:
    """accounting.cli.main.main(argv), its output captured; never raises for bad input."""
    from accounting.cli.main import main
    out, err = io.StringIO(), io.StringIO()
    with _LOCK:
        columns = os.environ.pop("COLUMNS", None)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                status = main(list(argv))
        finally:
            if columns is not None:
                os.environ["COLUMNS"] = columns
    return Run(status, out.getvalue(), err.getvalue())
