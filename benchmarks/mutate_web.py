"""A mutation audit of accounting/web/ (issue 45): one-line bugs of the kinds a developer
makes (a flipped comparison or condition, a constant off by one, a dropped escape() or
replace(), a boolean turned over), each applied alone to a copy of the checkout, then the
web tests run on it; a mutant the tests fail on is killed, one they pass survives.
Not part of the suite (minutes).

    python benchmarks/mutate_web.py [--sample 40] [--seed 45] [--tests tests/test_web.py ...]

Prints each mutant (file:line, before -> after) with killed/survived and the kill rate.
"""
from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
TESTS = ("tests/test_web_hardening.py", "tests/test_web.py", "tests/test_web_browser.py")

# (pattern, replacement): each match on a line is one mutant
OPERATORS = (
    (r" == ", " != "), (r" != ", " == "), (r" < ", " <= "), (r" <= ", " < "),
    (r" > ", " >= "), (r" >= ", " > "), (r" and ", " or "), (r" or ", " and "),
    (r"\bif not ", "if "), (r"\bTrue\b", "False"), (r"\bFalse\b", "True"),
    (r"\bescape\(([^()]*)\)", r"(\1)"), (r"\.replace\([^()]*\)", ""),
    (r"(?<![\w.])(\d{2,})(?![\w.])", lambda m: str(int(m.group(1)) + 1)),
    (r'\["--", ', "["), (r"\bnot in\b", "in"), (r"\breturn None\b", "return ''"),
)


def mutants(files: list[Path]) -> list[tuple[Path, int, str, str]]:
    out = []
    for f in files:
        lines = f.read_text().splitlines()
        in_doc = False
        for i, line in enumerate(lines):
            s = line.strip()
            if s.count('"""') % 2:  # a docstring opens or closes here: prose, not code
                in_doc = not in_doc
                continue
            if in_doc or not s or s.startswith(("#", "import ", "from ")) or '"""' in s:
                continue
            comment = line.find("  # ")  # the code's own comments are prose too
            for pat, rep in OPERATORS:
                for m in re.finditer(pat, line):
                    if 0 <= comment < m.start():
                        continue
                    new = (line[:m.start()] + (m.expand(rep) if isinstance(rep, str) else rep(m))
                           + line[m.end():])
                    if new != line:
                        out.append((f, i, line, new))
    return out


def _line(m) -> str:
    f, i, before, after = m
    return f"{f.relative_to(ROOT)}:{i + 1}: {before.strip()[:70]!r} -> {after.strip()[:70]!r}"


def compiles(text: str) -> bool:
    try:
        compile(text, "<mutant>", "exec")
        return True
    except SyntaxError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=40)
    ap.add_argument("--seed", type=int, default=45)
    ap.add_argument("--tests", nargs="*", default=list(TESTS))
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--replay", type=Path, help="an earlier run's output: run only the "
                    "mutants it printed as SURVIVED (after new assertions)")
    ns = ap.parse_args()
    files = sorted((ROOT / "accounting" / "web").glob("*.py"))
    every = mutants(files)
    random.Random(ns.seed).shuffle(every)
    if ns.replay:
        wanted = {line.split(" ", 1)[1].strip() for line in ns.replay.read_text().splitlines()
                  if line.startswith("SURVIVED ")}
        every = [m for m in every if _line(m) in wanted]
    work = Path(tempfile.mkdtemp(prefix="mutate-web-"))
    shutil.copytree(ROOT, work / "repo", ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__",
                                                                        "*.pyc", ".hypothesis"))
    repo = work / "repo"
    results = []
    t0 = time.time()
    for f, i, before, after in every:
        if len(results) >= ns.sample:
            break
        target = repo / f.relative_to(ROOT)
        original = target.read_text()
        lines = original.splitlines()
        lines[i] = after
        text = "\n".join(lines) + "\n"
        if not compiles(text):
            continue
        target.write_text(text)
        try:
            r = subprocess.run([PYTHON, "-m", "pytest", "-q", "-x", "-o", "addopts=", "-p",
                                "no:cacheprovider", *ns.tests], cwd=repo, capture_output=True,
                               text=True, timeout=ns.timeout,
                               env={**os.environ, "PYTHONPATH": str(repo)})
            killed = r.returncode != 0
        except subprocess.TimeoutExpired:
            killed = True  # a hang the tests would report as a failure in CI
        finally:
            target.write_text(original)
        results.append((f, i, before, after, killed))
        print(f"{'killed  ' if killed else 'SURVIVED'} {_line((f, i, before, after))}", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    k = sum(r[-1] for r in results)
    print(f"{k} of {len(results)} mutants killed ({100 * k / max(len(results), 1):.0f}%), "
          f"{len(every)} candidates, {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
