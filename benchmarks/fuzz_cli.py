"""A long adversarial run of the CLI: every example a fresh `python -m accounting` process
in a scratch folder of hostile targets, under hostile environments (output encodings that
cannot hold × or ·, a closed or full stdout, a reader that goes away, a terminal width, a
locale, warnings made errors by PYTHONWARNINGS, a bogus MPLBACKEND, an address-space limit),
and signals (Ctrl-C's SIGINT, SIGTERM, SIGHUP) at random moments of the slow commands, the
report's and distcheck's included, to the process or its whole group. Then the Python API:
public calls with arguments drawn from accepted values and junk (tests/api_fuzz.py), in a
subprocess per batch. Prints counts by outcome and every breach of the contract
(tests/cli_fuzz.py and tests/api_fuzz.py judge; tests/test_fuzz_cli.py and
tests/test_fuzz_api.py are the short in-process runs CI does).

    python benchmarks/fuzz_cli.py [--examples 2000] [--interrupts 32] [--api 600]
                                  [--seed 11] [--code DIR] [--jobs 2]

--code DIR judges another checkout (put first on PYTHONPATH), e.g. the code before a fix.
Exit status 1 when any example breached the contract.
"""
from __future__ import annotations

import argparse
import collections
import json
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

import api_fuzz as A  # noqa: E402
import cli_fuzz as F  # noqa: E402
from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

RLIMIT = "__RLIMIT_AS"  # an environment entry that sets the run's address-space limit instead
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
    # issue 23: the environments a user may bring along
    ("COLUMNS=1", {"COLUMNS": "1"}),
    ("COLUMNS=0", {"COLUMNS": "0"}),
    ("LANG=C.UTF-8", {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}),
    ("LANG=tr_TR.UTF-8", {"LANG": "tr_TR.UTF-8"}),
    ("LANG=xx_XX.bogus", {"LANG": "xx_XX.bogus", "LC_ALL": "xx_XX.bogus"}),
    ("PYTHONWARNINGS=error", {"PYTHONWARNINGS": "error"}),
    ("PYTHONWARNINGS=error::DeprecationWarning", {"PYTHONWARNINGS": "error::DeprecationWarning"}),
    ("MPLBACKEND=bogus", {"MPLBACKEND": "bogus"}),
    ("ulimit -v 1 GiB", {RLIMIT: str(2**30)}),
)
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STDOUTS = ("pipe",) * 12 + ("closed", "full", "reader-goes-away", "stderr-closed")

# Slow commands a signal can land in: the cross-check (seconds), the report and distcheck.
# (argv, when): a number of seconds after the start, drawn at random up to it; "workers":
# once the run has forked a worker (fvcore's trace in accounting/runtime/fork.py,
# transformers' model, the report's pool of cross-checks in accounting/reporting/checks.py,
# distcheck's ranks), a random moment of up to 3 s later. Odd runs signal only the main
# process, even ones the whole process group, as a terminal's Ctrl-C does (the workers get
# the signal too); the signal cycles through SIGINT, SIGTERM and SIGHUP. An argv that starts
# with @distcheck runs python -m accounting.distcheck.
INTERRUPTED = (
    (["gpt2-small", "--verify", "-o", F.EXISTING], 6.0),
    (["gpt2-small", "--verify", "--format", "json", "-o", "link"], 6.0),
    (["openai-community/gpt2", "--compare-formulas", "--verify", "-o", F.EXISTING], 6.0),
    (["report", "--no-verify", "--out", "report_old"], 30.0),
    (["gpt2-small", "--verify", "-o", F.EXISTING], "workers"),
    (["meta-llama/Llama-3.2-1B", "--verify", "-o", F.EXISTING], "workers"),
    (["Qwen/Qwen3-30B-A3B", "--verify", "--format", "json", "-o", F.EXISTING], "workers"),
    (["report", "--out", "report_old"], "workers"),
    (["@distcheck", "--only", "gloo", "--json", "m.json"], "workers"),
    (["@distcheck", "--only", "fake", "--json", F.EXISTING], "workers"),
)


# issue 32: runs that were endless (the many-GPU plan was quadratic in the layer count) and
# the new attack classes as fixed command lines (each once, beside the drawn ones): a huge
# integer, deep nesting, training switches, MoE keys without experts, the --config file
# as -o, a hard-linked -o, a report folder holding the user's own figure
_LAYERS = ["--vocab-size", "50257", "--context-length", "1024", "--d-model", "1024",
           "--num-heads", "16", "--gpu", "H100"]
FIXED = (
    (["plan", "--num-layers", "1000", *_LAYERS, "--gpus", "64", "--search"], None),
    (["plan", "--num-layers", "10000", *_LAYERS, "--gpus", "2"], None),
    (["plan", "--num-layers", "10000", *_LAYERS, "--gpus", "64", "--search"], None),
    (["--config", "config.json", "--no-verify", "--strict"],
     b'{"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 96, '
     b'"num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 64, '
     b'"rope_theta": 1' + b"0" * 400 + b"}"),
    (["--config", "config.json", "--no-verify", "--strict"],
     b'{"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 96, '
     b'"num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 64, '
     b'"task_specific_params": ' + b'{"x": ' * 900 + b"1" + b"}" * 900 + b"}"),
    (["--config", "config.json", "--no-verify", "--pass", "train"],
     b'{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100, '
     b'"n_positions": 64, "n_ctx": 64, "gradient_checkpointing": true}'),
    (["--config", "config.json", "--no-verify"],
     b'{"vocab_size": 100, "context_length": 64, "num_layers": 2, "d_model": 64, '
     b'"num_heads": 4, "num_shared_experts": 1, "moe_d_ff": 32}'),
    (["--config", "config.json", "--no-verify", "-o", "config.json"],
     b'{"vocab_size": 100, "context_length": 64, "num_layers": 2, "d_model": 64, '
     b'"num_heads": 4}'),
    (["gpt2-small", "--no-verify", "-o", "hardlink"], None),
    (["report", "--no-verify", "--out", "report"], None),
)


def _limits(address_space: int = 8 * 2**30) -> None:
    # A run that reads a device forever must not take the machine with it.
    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))


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
        rng: random.Random | None = None, signum: int = signal.SIGINT) -> F.Result:
    env = {k: v for k, v in os.environ.items()
           if k not in ("COLUMNS", "PYTHONIOENCODING", "LC_ALL", "LANG", "PYTHONUTF8",
                        "PYTHONWARNINGS", "MPLBACKEND")}
    env_extra = dict(env_extra)
    address_space = int(env_extra.pop(RLIMIT, 8 * 2**30))
    env.update({"PYTHONPATH": str(code), **env_extra})
    module, args = ("accounting.distcheck", argv[1:]) if argv[:1] == ["@distcheck"] else \
        ("accounting", argv)
    cmd = [sys.executable, "-m", module, *args]
    out_target = {"pipe": subprocess.PIPE, "reader-goes-away": subprocess.PIPE,
                  "stderr-closed": subprocess.PIPE, "closed": subprocess.DEVNULL}.get(stdout)
    full = open("/dev/full", "wb") if stdout == "full" else None

    def pre():
        _limits(address_space)
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
                        os.killpg(p.pid, signum)
                    else:
                        p.send_signal(signum)
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
        group=False, seed_=0, signum=signal.SIGINT):
    name, env = ENVIRONMENTS[env_i]
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp, \
            tempfile.TemporaryDirectory(prefix="fuzz-tmpdir-") as tmpdir:
        root = Path(tmp)
        F.make_scratch(root, config)
        before = F.snapshot(root)
        # TMPDIR of its own: whatever the run (or a library it loads) leaves there is seen
        result = run(argv, root, code, {**env, "TMPDIR": tmpdir}, stdout, interrupt_after,
                     timeout, group, random.Random(seed_), signum)
        after = F.snapshot(root)
        # torch's own per-user cache folder (torchinductor_<user>) is made there by every
        # run that imports its counters, finished or not, and kept by design: not ours
        left_in_tmp = sorted(n for n in os.listdir(tmpdir) if not n.startswith("torchinductor_"))
        # a reader that leaves after one byte: exit 0 is right when the whole output fit in
        # the pipe's buffer before it left, exit 2 (broken pipe) otherwise
        verdict = F.judge(argv, result, before, after,
                          stdout_ok=stdout in ("pipe", "stderr-closed", "reader-goes-away"),
                          signum=signum if interrupt_after is not None else None,
                          config=(root / "config.json").read_bytes()
                          if (root / "config.json").is_file() else None)
        if stdout == "stderr-closed":  # nothing to count lines of
            verdict.defects = [d for d in verdict.defects if "stderr lines" not in d]
        if interrupt_after is not None and result.rc not in (0, 128 + signum, None):
            verdict.defects.append(f"exit {result.rc} after {signal.Signals(signum).name}")
        if result.strays:
            verdict.defects.append("stray processes after exit: " + ", ".join(result.strays)[:200])
        if left_in_tmp:
            verdict.defects.append("entries left in TMPDIR: " + ", ".join(left_in_tmp)[:200])
        return verdict, result, name, stdout


def show(argv: list[str]) -> str:
    text = " ".join(a if len(a) < 40 else a[:37] + "..." for a in argv)
    return text.encode("unicode_escape").decode()[:300]


def api_calls(n: int, seed_: int) -> list[dict]:
    """n public calls drawn by hypothesis from tests/api_fuzz.py's strategies (seeded)."""
    drawn: list[dict] = []

    @seed(seed_)
    @settings(max_examples=n, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(A.calls())
    def collect(call):
        drawn.append(call)

    collect()
    return drawn[:n]


def run_api(code: Path, calls: list[dict], batch: int = 100) -> list[dict]:
    """Each batch of calls in a fresh interpreter on `code` (tests/api_fuzz.py's main); a
    batch that dies or hangs counts as a defect for each of its calls not judged."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(code), str(ROOT / "tests")))}
    out = []
    for start in range(0, len(calls), batch):
        part = calls[start:start + batch]
        try:
            r = subprocess.run([sys.executable, str(ROOT / "tests" / "api_fuzz.py")],
                               input=json.dumps(part).encode(), capture_output=True, env=env,
                               timeout=A.HANG_SECONDS * len(part) + 60, preexec_fn=_limits)
            verdicts = [json.loads(line) for line in r.stdout.decode().splitlines() if line]
            why = r.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit {r.returncode}"]
        except subprocess.TimeoutExpired:
            verdicts, why = [], ["the batch did not finish"]
        out += verdicts
        out += [{"outcome": "crash", "defects": [f"the interpreter ended: {why[0][:160]}"],
                 "call": A.describe(c)} for c in part[len(verdicts):]]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", type=int, default=2000)
    p.add_argument("--interrupts", type=int, default=32)
    p.add_argument("--api", type=int, default=600, help="Python API calls")
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--code", type=Path, default=ROOT)
    p.add_argument("--jobs", type=int, default=2)
    ns = p.parse_args()
    code = ns.code.resolve()
    print(f"fuzzing python -m accounting from {code}: {ns.examples} examples (seed {ns.seed}), "
          f"{ns.interrupts} runs signalled, {ns.api} API calls, {ns.jobs} at a time, hang "
          f"bound {F.HANG_SECONDS:g} s")
    start = time.perf_counter()
    todo = [(a, c, e, s, None, F.HANG_SECONDS)
            for a, c, e, s in (cases(ns.examples, ns.seed) if ns.examples else [])]
    todo += [(a, c, 0, "pipe", None, F.HANG_SECONDS) for a, c in FIXED]  # issue 32's classes
    rng = random.Random(ns.seed)
    for i in range(ns.interrupts):
        argv, when = INTERRUPTED[i % len(INTERRUPTED)]
        moment = when if when == "workers" else rng.uniform(0.1, when)
        group = (i + i // len(INTERRUPTED)) % 2 == 0  # each command both ways, in turn
        todo.append((argv, None, 0, "pipe", moment, 120.0, group, ns.seed + i,
                     SIGNALS[i % len(SIGNALS)]))
    outcomes: collections.Counter = collections.Counter()
    ctrl_c: collections.Counter = collections.Counter()
    by_env: collections.Counter = collections.Counter()
    defects: collections.Counter = collections.Counter()
    defective = 0
    examples: dict[str, str] = {}
    slowest = (0.0, "")
    with ThreadPoolExecutor(ns.jobs) as pool:
        for (argv, *_rest), (verdict, result, env, stdout) in zip(
                todo, pool.map(lambda t: one(code, *t), todo)):
            if _rest[3] is not None:
                how = "group" if _rest[5] else "main"
                name = signal.Signals(_rest[7]).name
                what = "distcheck" if argv[0] == "@distcheck" else "report" if argv[0] == "report" \
                    else "check"
                ctrl_c[f"{verdict.outcome} ({what}, {name}, "
                       f"{'workers' if _rest[3] == 'workers' else 'any time'}, {how})"] += 1
            else:
                outcomes[verdict.outcome] += 1
                if env not in ("utf-8",):
                    by_env[f"{env}: {verdict.outcome}"] += 1
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
    cli_seconds = time.perf_counter() - start
    api: collections.Counter = collections.Counter()
    if ns.api:
        for v in run_api(code, api_calls(ns.api, ns.seed)):
            api[f"{v['call'].split('(')[0]}: {v['outcome']}"] += 1
            defective += bool(v["defects"])
            for d in v["defects"]:
                kind = "API " + d.split(":")[0]
                defects[kind] += 1
                examples.setdefault(kind, f"{v['call'][:200]} -> {d[:200]}")
    print(f"\noutcomes ({sum(outcomes.values())} generated runs, {cli_seconds:.0f} s):")
    for k, v in sorted(outcomes.items()):
        print(f"  {k:<22} {v:>6}")
    if by_env:
        print("  of which, by environment:")
        for k, v in sorted(by_env.items()):
            print(f"    {k:<58} {v:>6}")
    if ctrl_c:
        print(f"signalled runs ({sum(ctrl_c.values())}; the command, the signal, the moment, "
              f"who got it):")
        for k, v in sorted(ctrl_c.items()):
            print(f"  {k:<64} {v:>6}")
    if api:
        print(f"Python API calls ({sum(api.values())}, {time.perf_counter() - start - cli_seconds:.0f} s):")
        for k, v in sorted(api.items()):
            print(f"  {k:<64} {v:>6}")
    print(f"slowest finished run: {slowest[0]:.2f} s ({slowest[1]})")
    print(f"runs and calls with a defect: {defective}")
    print(f"defects by kind ({sum(defects.values())}):" if defects else "defects: none")
    for k, v in defects.most_common():
        print(f"  {v:>6}  {k}\n          e.g. {examples[k]}")
    return 1 if defects else 0


if __name__ == "__main__":
    sys.exit(main())
