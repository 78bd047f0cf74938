"""A long adversarial run of `serve` on quantization blocks and serving flags (issue 45):
cases drawn by hypothesis from tests/serve_fuzz.py's strategies (seeded), judged there, each
batch in a fresh interpreter on the checkout given, so that the code before a fix can be
judged with the same cases. Prints the cases, the defects by class and a few examples.

    python benchmarks/fuzz_serve.py [--examples 600] [--seed 45] [--code DIR]

Exit status 1 when any case breached the contract.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import serve_fuzz as S  # noqa: E402
from hypothesis import HealthCheck, given, seed, settings  # noqa: E402


def drawn(n: int, seed_: int) -> list[dict]:
    out: list[dict] = []

    @seed(seed_)
    @settings(max_examples=n, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(S.cases())
    def collect(case):
        out.append(case)

    collect()
    return out[:n]


def judged(code: Path, cases: list[dict], batch: int = 200) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(code), str(ROOT / "tests")))}
    verdicts = []
    for start in range(0, len(cases), batch):
        part = cases[start:start + batch]
        r = subprocess.run([sys.executable, str(ROOT / "tests" / "serve_fuzz.py")],
                           input=json.dumps(part).encode(), capture_output=True, env=env,
                           timeout=30 * len(part) + 60)
        got = [json.loads(x) for x in r.stdout.decode().splitlines() if x.startswith("{")]
        why = (r.stderr.decode("utf-8", "replace").strip().splitlines() or [f"exit {r.returncode}"])[-1]
        verdicts += got + [{"class": S.classify(c), "rc": None,
                            "defects": [f"the interpreter ended: {why[:160]}"]}
                           for c in part[len(got):]]
    return verdicts


def _kind(defect: str) -> str:
    """A defect's class, its numbers left out."""
    import re
    return re.sub(r"-?\d[\d,]*", "N", defect.split(":")[0])[:80]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", type=int, default=600)
    p.add_argument("--seed", type=int, default=45)
    p.add_argument("--code", type=Path, default=ROOT)
    ns = p.parse_args()
    cases = drawn(ns.examples, ns.seed)
    verdicts = judged(ns.code.resolve(), cases)
    bad = [(c, v) for c, v in zip(cases, verdicts) if v["defects"]]
    by_class = collections.Counter(v["class"] for v in verdicts)
    failed = collections.Counter(v["class"] for _, v in bad)
    outcomes = collections.Counter(v["rc"] for v in verdicts)
    print(f"serve fuzz on {ns.code.resolve()}: {len(cases)} cases (seed {ns.seed}), "
          f"{len(bad)} breaching the contract; exits {dict(sorted(outcomes.items(), key=str))}")
    for k in sorted(by_class):
        print(f"  {k:28s} {by_class[k]:5d} cases  {failed[k]:5d} failures")
    kinds = collections.Counter(_kind(d) for _, v in bad for d in v["defects"])
    for k, n in kinds.most_common():
        print(f"  {n:5d} × {k}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
