"""Timing fresh processes for the benchmarks: wall time, peak RSS, exit status.

Each command runs as a fresh subprocess (interpreter start-up included). Peak RSS is
reported two ways, both in MB = 10^6 bytes:
  * largest process: ru_maxrss from os.wait4 (Linux reports the largest of the process
    and the descendants it waited for, e.g. a forked cross-check worker);
  * process tree: the largest sum of VmRSS over the process and its descendants, sampled
    every 10 ms from /proc. Pages a forked child shares with its parent are counted in
    both, so this is an upper bound of what the tree holds.
Cases are interleaved run by run (a, b, a, b, ...), so a floor and what is compared with
it see the same machine load. CPU seconds (user + system, workers included) say how much
work a run was, whatever else the machine was doing; wall time is the goal.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Runs:
    """Every run of one case."""

    label: str
    walls: list = field(default_factory=list)
    rss: list = field(default_factory=list)  # largest process, bytes
    tree_rss: list = field(default_factory=list)  # process tree, bytes
    cpu: list = field(default_factory=list)  # user + system seconds, workers included
    codes: set = field(default_factory=set)

    @property
    def median(self) -> float:
        return statistics.median(self.walls)

    @property
    def cpu_median(self) -> str:
        return f"{statistics.median(self.cpu):.2f}"

    @property
    def peak_mb(self) -> str:
        return f"{max(self.rss) / 1e6:.0f}"

    @property
    def tree_mb(self) -> str:
        return f"{max(self.tree_rss) / 1e6:.0f}" if any(self.tree_rss) else "n/a"

    @property
    def exits(self) -> str:
        return ",".join(map(str, sorted(self.codes)))


def _vm_rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def _tree_rss(pid: int) -> int:
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += _vm_rss(p)
        todo += _children(p)
    return total


def run(argv: list[str], env: dict | None = None,
        cwd: Path = ROOT) -> tuple[float, int, int, int, float]:
    """(wall seconds, peak RSS of the largest process, peak RSS of the tree, exit status,
    CPU seconds: user + system of the process and the descendants it waited for)."""
    peak = [0]
    done = threading.Event()
    t = time.perf_counter()
    p = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env={**os.environ, **(env or {})})

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss(p.pid))
            done.wait(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    done.set()
    sampler.join()
    p.returncode = os.waitstatus_to_exitcode(status)
    return (wall, usage.ru_maxrss * 1024, peak[0], p.returncode,
            usage.ru_utime + usage.ru_stime)


def byte_compile() -> None:
    """Write the project's .pyc files, as pip does when it installs a package. This sandbox
    sets PYTHONDONTWRITEBYTECODE=1, so without this every fresh process would recompile
    each module edited since its .pyc was last written (a few ms per module), a cost no
    installed copy pays. Idempotent: fresh .pyc files are left as they are."""
    import compileall
    for package in ("accounting", "model"):
        compileall.compile_dir(ROOT / package, quiet=1)


def interleaved(cases: list[tuple[str, list[str], dict]], runs: int) -> list[Runs]:
    """Run every case `runs` times, case after case within each round (the project's
    modules byte-compiled first: byte_compile)."""
    byte_compile()
    out = [Runs(label) for label, _, _ in cases]
    for _ in range(runs):
        for r, (_, argv, env) in zip(out, cases):
            wall, rss, tree, code, cpu = run(argv, env)
            r.cpu.append(cpu)
            r.walls.append(wall)
            r.rss.append(rss)
            r.tree_rss.append(tree)
            r.codes.add(code)
    return out


def python(*args: str) -> list[str]:
    return [sys.executable, *args]


def machine() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{os.cpu_count()} CPUs, load average {load:.2f} at the end"


def goals(title: str, cases, runs: int, width: int | None = None) -> int:
    """Each case (CLI arguments, goal in seconds) run `runs` times in a fresh interpreter,
    interleaved with the floor every such run pays (`python -c 'import accounting'`: the
    interpreter's start-up and the package's import); prints one table per goal (the
    median, min and max, the median over the floor's, CPU seconds, peak RSS, the exit
    status, the goal judged on the median: docs/benchmarks.md's layout, checked by
    tests/test_benchmark_blocks.py); returns how many goals were missed. `width`: the
    rendered tables' width (None: unwrapped)."""
    from accounting.tables import render
    from accounting.tables.table import Table
    floor = ("python -c 'import accounting' (floor)", python("-c", "import accounting"), {})
    found = interleaved([floor] + [("python -m accounting " + " ".join(case),
                                    python("-m", "accounting", *case), {})
                                   for case, _ in cases], runs)
    base, missed, tables = found[0], 0, []
    for goal in sorted({g for _, g in cases}):
        rows = [(base.label, f"{base.median:.3f}", f"{min(base.walls):.3f}",
                 f"{max(base.walls):.3f}", "1.00×", base.cpu_median, base.peak_mb, base.exits,
                 "")]
        for (case, g), r in zip(cases, found[1:]):
            if g != goal:
                continue
            met = r.median <= goal
            missed += not met
            rows.append((r.label, f"{r.median:.3f}", f"{min(r.walls):.3f}", f"{max(r.walls):.3f}",
                         f"{r.median / base.median:.2f}×", r.cpu_median, r.peak_mb, r.exits,
                         "met" if met else "MISSED"))
        tables.append(Table(f"{title} (median of {runs} runs, {machine()})",
                            ("command", "median s", "min s", "max s", "÷ floor", "CPU s",
                             "peak RSS MB", "exit", f"goal ≤ {goal:g} s"), tuple(rows),
                            align="lrrrrrrll",
                            notes=("Each run a fresh interpreter; the floor is the start-up "
                                   "and import every run pays, interleaved run by run with "
                                   "the cases (the same machine load).",)))
    sys.stdout.write(render.text(tables, width))
    print("every goal met" if not missed else f"{missed} goal(s) missed")
    return missed
