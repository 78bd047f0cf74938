"""Progress on stderr for work that may run long: silent for the first seconds (a quick
run prints nothing), then one line every few seconds, '[what] i/N unit, s s', so that a
long run is never silent (issue 32). Lines start with '[' as the report's '[i/N] ...'
progress does: tests/fuzz_judge.py and the exit contract's one-line rule count neither.
Pure Python (accounting.runtime.safe_io writes the lines, best effort)."""
from __future__ import annotations

import time

from accounting.runtime.safe_io import say

QUIET_S = 5.0  # nothing before this many seconds
EVERY_S = 5.0  # then at most one line per this many seconds


class Ticker:
    """Ticker("plan --search", total, "(tp, pp) pairs")(done): a line when it is time."""

    def __init__(self, what: str, total: int, unit: str, quiet_s: float = QUIET_S,
                 every_s: float = EVERY_S, clock=time.monotonic, write=say):
        self.what, self.total, self.unit = what, total, unit
        self.quiet_s, self.every_s, self.clock, self.write = quiet_s, every_s, clock, write
        self.start = clock()
        self.last = self.start + quiet_s - every_s  # the first line at quiet_s

    def __call__(self, done: int) -> None:
        now = self.clock()
        if now - self.start < self.quiet_s or now - self.last < self.every_s:
            return
        self.last = now
        self.write(f"[{self.what}] {done:,}/{self.total:,} {self.unit}, "
                   f"{now - self.start:.0f} s")
