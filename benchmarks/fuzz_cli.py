"""A long adversarial run of the CLI: every example a fresh `python -m accounting` process
in a scratch folder of hostile targets, under hostile environments (output encodings that
cannot hold × or ·, a closed or full stdout, a reader that goes away, a terminal width),
and Ctrl-C at random moments of the slow commands. Prints counts by outcome and every
breach of the exit-status contract (tests/cli_fuzz.py judges; tests/test_fuzz_cli.py is
the short in-process run CI does).

    python benchmarks/fuzz_cli.py [--examples 2000] [--interrupts 32] [--seed 11]
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

# Slow commands a Ctrl-C can land in: the cross-check (seconds) and the report. (argv,
# when): a number of seconds after the start, drawn at random up to it; "workers": once the
# run has forked a worker (fvcore's trace in accounting/runtime/fork.py, transformers' model, the
# report's pool of cross-checks in accounting/reporting/checks.py), a random moment of up
# to 3 s later. Odd runs signal only the main process, even ones the whole process group,
# as a terminal's Ctrl-C does (the workers get SIGINT too).
INTERRUPTED = (
    (["gpt2-small", "--verify", "-o", F.EXISTING], 6.0),
    (["gpt2-small", "--verify", "--format", "json", "-o", "link"], 6.0),
    (["openai-community/gpt2", "--compare-formulas", "--verify", "-o", F.EXISTING], 6.0),
    (["report", "--no-verify", "--out", "report"], 30.0),
    (["gpt2-small", "--verify", "-o", F.EXISTING], "workers"),
    (["meta-llama/Llama-3.2-1B", "--verify", "-o", F.EXISTING], "workers"),
    (["Qwen/Qwen3-30B-A3B", "--verify", "--format", "json", "-o", F.EXISTING], "workers"),
    (["report", "--out", "report"], "workers"),
)


def _limits() -> None:
    # A run that reads a device forever must not take the machine with it.
    resource.setrlimit(resource.RLIMIT_AS, (8 * 2**30, 8 * 2**30))


def session_processes(sid: int) -> list[str]:
    """The processes of session `sid` still alive (each run is its own session, so that
    a worker left behind by a run is found however it was re-parented): 'pid name'."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:
            continue
        name, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
        # rest: state ppid pgrp session ...; a zombie has exited (its parent reaps it)
        if int(rest[3]) == sid and rest[0] != "Z":
            found.append(f"{entry} {name}")
    return found


def _wait_for_workers(p: subprocess.Popen, limit: float) -> bool:
    """Until the run has a process beside itself in its session (a forked worker)."""
    end = time.monotonic() + limit
    while time.monotonic() < end and p.poll() is None:
        if any(int(x.split()[0]) != p.pid for x in session_processes(p.pid)):
            return True
        time.sleep(0.02)
    return False


def run(argv: list[str], cwd: Path, code: Path, env_extra: dict, stdout: str,
        interrupt_after=None, timeout: float = F.HANG_SECONDS, group: bool = False,
        rng: random.Random | None = None) -> F.Result:
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
                         preexec_fn=pre, start_new_session=True)
    strays: list[str] = []
    try:
        if stdout == "reader-goes-away":
            p.stdout.read(1)
            p.stdout.close()
            p.stdout = None
        if interrupt_after is not None:
            if interrupt_after == "workers":
                _wait_for_workers(p, 60.0)
                delay = (rng or random).uniform(0.0, 3.0)
            else:
                delay = interrupt_after
            try:
                p.wait(delay)
            except subprocess.TimeoutExpired:
                try:
                    if group:  # a terminal's Ctrl-C: the whole foreground process group
                        os.killpg(p.pid, signal.SIGINT)
                    else:
                        p.send_signal(signal.SIGINT)
                except ProcessLookupError:
                    pass
        try:
            o, e = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            o, e = p.communicate()
            _reap(p.pid)
            return F.Result(None, o or b"", e or b"", time.perf_counter() - start)
        # a worker still alive once the run has exited is a stray (a moment's grace: the
        # kernel delivers the parent's SIGKILL to a child asynchronously)
        for _ in range(50):
            strays = session_processes(p.pid)
            if not strays:
                break
            time.sleep(0.02)
        _reap(p.pid)
    finally:
        if full:
            full.close()
    return F.Result(p.returncode, o or b"", e or b"", time.perf_counter() - start, strays=strays)


def _reap(sid: int) -> None:
    """Kill what a run left in its own session (by pid, after the judge has seen it)."""
    for entry in session_processes(sid):
        try:
            os.kill(int(entry.split()[0]), signal.SIGKILL)
        except ProcessLookupError:
            pass


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


def one(code: Path, argv, config, env_i, stdout, interrupt_after=None, timeout=F.HANG_SECONDS,
        group=False, seed_=0):
    name, env = ENVIRONMENTS[env_i]
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp, \
            tempfile.TemporaryDirectory(prefix="fuzz-tmpdir-") as tmpdir:
        root = Path(tmp)
        F.make_scratch(root, config)
        before = F.snapshot(root)
        # TMPDIR of its own: whatever the run (or a library it loads) leaves there is seen
        result = run(argv, root, code, {**env, "TMPDIR": tmpdir}, stdout, interrupt_after,
                     timeout, group, random.Random(seed_))
        after = F.snapshot(root)
        # torch's own per-user cache folder (torchinductor_<user>) is made there by every
        # run that imports its counters, finished or not, and kept by design: not ours
        left_in_tmp = sorted(n for n in os.listdir(tmpdir) if not n.startswith("torchinductor_"))
        # a reader that leaves after one byte: exit 0 is right when the whole output fit in
        # the pipe's buffer before it left, exit 2 (broken pipe) otherwise
        verdict = F.judge(argv, result, before, after,
                          stdout_ok=stdout in ("pipe", "stderr-closed", "reader-goes-away"))
        if stdout == "stderr-closed":  # nothing to count lines of
            verdict.defects = [d for d in verdict.defects if "stderr lines" not in d]
        if interrupt_after is not None and result.rc not in (0, 130, None):
            verdict.defects.append(f"exit {result.rc} after Ctrl-C")
        if result.strays:
            verdict.defects.append("stray processes after exit: " + ", ".join(result.strays)[:200])
        if left_in_tmp:
            verdict.defects.append("entries left in TMPDIR: " + ", ".join(left_in_tmp)[:200])
        return verdict, result, name, stdout


def show(argv: list[str]) -> str:
    text = " ".join(a if len(a) < 40 else a[:37] + "..." for a in argv)
    return text.encode("unicode_escape").decode()[:300]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", type=int, default=2000)
    p.add_argument("--interrupts", type=int, default=32)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--code", type=Path, default=ROOT)
    p.add_argument("--jobs", type=int, default=2)
    ns = p.parse_args()
    code = ns.code.resolve()
    print(f"fuzzing python -m accounting from {code}: {ns.examples} examples (seed {ns.seed}), "
          f"{ns.interrupts} Ctrl-C runs, {ns.jobs} at a time, hang bound {F.HANG_SECONDS:g} s")
    start = time.perf_counter()
    todo = [(a, c, e, s, None, F.HANG_SECONDS)
            for a, c, e, s in (cases(ns.examples, ns.seed) if ns.examples else [])]
    rng = random.Random(ns.seed)
    for i in range(ns.interrupts):
        argv, when = INTERRUPTED[i % len(INTERRUPTED)]
        moment = when if when == "workers" else rng.uniform(0.1, when)
        todo.append((argv, None, 0, "pipe", moment, 120.0, i % 2 == 0, ns.seed + i))
    outcomes: collections.Counter = collections.Counter()
    ctrl_c: collections.Counter = collections.Counter()
    defects: collections.Counter = collections.Counter()
    defective = 0
    examples: dict[str, str] = {}
    slowest = (0.0, "")
    with ThreadPoolExecutor(ns.jobs) as pool:
        for (argv, *_rest), (verdict, result, env, stdout) in zip(
                todo, pool.map(lambda t: one(code, *t), todo)):
            if _rest[3] is not None:
                how = "group" if _rest[5] else "main"
                ctrl_c[f"{verdict.outcome} ({'workers' if _rest[3] == 'workers' else 'any time'}, {how})"] += 1
            else:
                outcomes[verdict.outcome] += 1
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
        print(f"Ctrl-C runs ({sum(ctrl_c.values())}; the moment, and who got SIGINT):")
        for k, v in sorted(ctrl_c.items()):
            print(f"  {k:<44} {v:>6}")
    print(f"slowest finished run: {slowest[0]:.2f} s ({slowest[1]})")
    print(f"runs with a defect: {defective}")
    print(f"defects by kind ({sum(defects.values())}):" if defects else "defects: none")
    for k, v in defects.most_common():
        print(f"  {v:>6}  {k}\n          e.g. {examples[k]}")
    return 1 if defects else 0


if __name__ == "__main__":
    sys.exit(main())
