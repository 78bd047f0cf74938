"""A long adversarial run of the CLI: every example a fresh `python -m accounting` process
in a scratch folder of hostile targets, under hostile environments (output encodings that
cannot hold × or ·, a closed or full stdout, a reader that goes away, a terminal width),
and Ctrl-C at random moments of the slow commands. Prints counts by outcome and every
breach of the exit-status contract (tests/cli_fuzz.py judges; tests/test_fuzz_cli.py is
the short in-process run CI does).

    python benchmarks/fuzz_cli.py [--examples 2000] [--interrupts 24] [--seed 11]
                                  [--code DIR] [--jobs 2]

--code DIR judges another checkout (put first on PYTHONPATH), e.g. the code before a fix.
Exit status 1 when any example breached the contract.
"""
from __future__ import annotations

import argparse
import collections
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import cli_fuzz as F  # noqa: E402
from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

ENVIRONMENTS = (
    ("utf-8", {}),
    ("utf-8", {}),
    ("utf-8", {}),
    ("PYTHONIOENCODING=ascii", {"PYTHONIOENCODING": "ascii"}),
    ("PYTHONIOENCODING=latin-1", {"PYTHONIOENCODING": "latin-1"}),
    ("PYTHONIOENCODING=ascii:strict", {"PYTHONIOENCODING": "ascii:strict"}),
    ("POSIX locale, no UTF-8 mode", {"LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0",
                                     "PYTHONUTF8": "0"}),
    ("COLUMNS=40", {"COLUMNS": "40"}),
    ("COLUMNS=100", {"COLUMNS": "100"}),
    ("COLUMNS=junk", {"COLUMNS": "junk"}),
)
STDOUTS = ("pipe",) * 12 + ("closed", "full", "reader-goes-away", "stderr-closed")

# Slow commands a Ctrl-C can land in: the cross-check (seconds) and the report.
INTERRUPTED = (
    ["gpt2-small", "--verify", "-o", F.EXISTING],
    ["gpt2-small", "--verify", "--format", "json", "-o", "link"],
    ["openai-community/gpt2", "--compare-formulas", "--verify", "-o", F.EXISTING],
    ["report", "--no-verify", "--out", "report"],
)


def _limits() -> None:
    # A run that reads a device forever must not take the machine with it.
    resource.setrlimit(resource.RLIMIT_AS, (8 * 2**30, 8 * 2**30))


def run(argv: list[str], cwd: Path, code: Path, env_extra: dict, stdout: str,
        interrupt_after: float | None = None, timeout: float = F.HANG_SECONDS) -> F.Result:
    env = {k: v for k, v in os.environ.items()
           if k not in ("COLUMNS", "PYTHONIOENCODING", "LC_ALL", "LANG", "PYTHONUTF8")}
    env.update({"PYTHONPATH": str(code), **env_extra})
    cmd = [sys.executable, "-m", "accounting", *argv]
    out_target = {"pipe": subprocess.PIPE, "reader-goes-away": subprocess.PIPE,
                  "stderr-closed": subprocess.PIPE, "closed": subprocess.DEVNULL}.get(stdout)
    full = open("/dev/full", "wb") if stdout == "full" else None

    def pre():
        _limits()
        # Ctrl-C as a terminal delivers it: a job started in the background by a shell
        # inherits SIGINT ignored, and a well-behaved program keeps it ignored
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if stdout == "closed":
            os.close(1)
        if stdout == "stderr-closed":
            os.close(2)
    start = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                         stdout=full or out_target,
                         stderr=subprocess.DEVNULL if stdout == "stderr-closed" else subprocess.PIPE,
                         preexec_fn=pre)
    try:
        if stdout == "reader-goes-away":
            p.stdout.read(1)
            p.stdout.close()
            p.stdout = None
        if interrupt_after is not None:
            try:
                p.wait(interrupt_after)
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGINT)
        try:
            o, e = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            o, e = p.communicate()
            return F.Result(None, o or b"", e or b"", time.perf_counter() - start)
    finally:
        if full:
            full.close()
    return F.Result(p.returncode, o or b"", e or b"", time.perf_counter() - start)


def cases(n: int, seed_: int) -> list[tuple]:
    """n examples drawn by hypothesis from the shared strategies (seeded)."""
    drawn: list[tuple] = []

    @seed(seed_)
    @settings(max_examples=n, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(F.argvs(), F.config_texts(), st.sampled_from(range(len(ENVIRONMENTS))),
           st.sampled_from(STDOUTS))
    def collect(argv, config, env, stdout):
        drawn.append((argv, config, env, stdout))

    collect()
    return drawn[:n]


def one(code: Path, argv, config, env_i, stdout, interrupt_after=None, timeout=F.HANG_SECONDS):
    name, env = ENVIRONMENTS[env_i]
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        root = Path(tmp)
        F.make_scratch(root, config)
        before = F.snapshot(root)
        result = run(argv, root, code, env, stdout, interrupt_after, timeout)
        after = F.snapshot(root)
        # a reader that leaves after one byte: exit 0 is right when the whole output fit in
        # the pipe's buffer before it left, exit 2 (broken pipe) otherwise
        verdict = F.judge(argv, result, before, after,
                          stdout_ok=stdout in ("pipe", "stderr-closed", "reader-goes-away"))
        if stdout == "stderr-closed":  # nothing to count lines of
            verdict.defects = [d for d in verdict.defects if "stderr lines" not in d]
        if interrupt_after is not None and result.rc not in (0, 130, None):
            verdict.defects.append(f"exit {result.rc} after Ctrl-C")
        return verdict, result, name, stdout


def show(argv: list[str]) -> str:
    text = " ".join(a if len(a) < 40 else a[:37] + "..." for a in argv)
    return text.encode("unicode_escape").decode()[:300]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", type=int, default=2000)
    p.add_argument("--interrupts", type=int, default=24)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--code", type=Path, default=ROOT)
    p.add_argument("--jobs", type=int, default=2)
    ns = p.parse_args()
    code = ns.code.resolve()
    print(f"fuzzing python -m accounting from {code}: {ns.examples} examples (seed {ns.seed}), "
          f"{ns.interrupts} Ctrl-C runs, {ns.jobs} at a time, hang bound {F.HANG_SECONDS:g} s")
    start = time.perf_counter()
    todo = [(a, c, e, s, None, F.HANG_SECONDS) for a, c, e, s in cases(ns.examples, ns.seed)]
    rng = random.Random(ns.seed)
    for i in range(ns.interrupts):
        argv = INTERRUPTED[i % len(INTERRUPTED)]
        slow = argv[0] == "report"
        todo.append((argv, None, 0, "pipe", rng.uniform(0.1, 30.0 if slow else 6.0), 120.0))
    outcomes: collections.Counter = collections.Counter()
    ctrl_c: collections.Counter = collections.Counter()
    defects: collections.Counter = collections.Counter()
    defective = 0
    examples: dict[str, str] = {}
    slowest = (0.0, "")
    with ThreadPoolExecutor(ns.jobs) as pool:
        for (argv, *_rest), (verdict, result, env, stdout) in zip(
                todo, pool.map(lambda t: one(code, *t), todo)):
            (ctrl_c if _rest[3] is not None else outcomes)[verdict.outcome] += 1
            if result.seconds > slowest[0] and result.rc is not None:
                slowest = (result.seconds, show(argv))
            defective += bool(verdict.defects)
            for d in verdict.defects:
                kind = d.split(":")[0]
                defects[kind] += 1
                if kind not in examples:
                    err = result.stderr.decode("utf-8", "replace").strip().splitlines()
                    examples[kind] = (f"{show(argv)}  [{env}; stdout {stdout}] -> rc {result.rc}: "
                                      f"{(err[-1] if err else '')[:200]}")
    print(f"\noutcomes ({sum(outcomes.values())} generated runs, {time.perf_counter() - start:.0f} s):")
    for k, v in sorted(outcomes.items()):
        print(f"  {k:<22} {v:>6}")
    if ctrl_c:
        print(f"Ctrl-C runs ({sum(ctrl_c.values())}): "
              + ", ".join(f"{k} {v}" for k, v in sorted(ctrl_c.items())))
    print(f"slowest finished run: {slowest[0]:.2f} s ({slowest[1]})")
    print(f"runs with a defect: {defective}")
    print(f"defects by kind ({sum(defects.values())}):" if defects else "defects: none")
    for k, v in defects.most_common():
        print(f"  {v:>6}  {k}\n          e.g. {examples[k]}")
    return 1 if defects else 0


if __name__ == "__main__":
    sys.exit(main())
