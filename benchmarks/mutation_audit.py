"""A mutation audit: one-line bugs of the kinds a developer makes (a wrong constant, a
dropped factor or term, a flipped comparison or condition, and/or swapped, a boolean
default flipped), applied one at a time to a copy of the package, each judged by running
the tests that cover the file: killed when they fail, survived when they pass. Reports the
kill rate per file and every survivor's changed line. Not part of the suite (minutes).

    python benchmarks/mutation_audit.py formats [--mutants 40] [--seed 45] [--timeout 300]
    python benchmarks/mutation_audit.py hybrid  [--mutants 24]
    python benchmarks/mutation_audit.py serving [--mutants 60]
    python benchmarks/mutation_audit.py formats --only 5,12,13  (a previous run's survivors)

The mutants are drawn (seeded) from every candidate node of the group's files (ast: the
module is rewritten by ast.unparse, so a mutant differs from the original's unparse in
exactly one node); docstrings and other string constants are left alone. The copy lives in
a temporary folder: the working tree is never touched.
"""
from __future__ import annotations

import argparse
import ast
import copy
import os
import difflib
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

GROUPS = {
    "formats": {
        "files": ["accounting/formats/hf_quant.py", "accounting/formats/quant_schema.py",
                  "accounting/formats/layouts.py", "accounting/formats/schemes.py",
                  "accounting/formats/bnb.py", "accounting/formats/torchao_nf4.py"],
        "tests": ["tests/test_quant_schema.py", "tests/test_formats.py",
                  "tests/test_formats_bnb.py", "tests/test_serving_published.py",
                  "tests/test_fuzz_serve.py"],
    },
    "hybrid": {
        "files": ["accounting/ledger/builder/mamba.py", "accounting/ledger/builder/mamba1.py",
                  "accounting/ledger/builder/delta.py", "accounting/ledger/builder/kda.py",
                  "accounting/ledger/builder/recurrent.py"],
        "tests": ["tests/test_recurrent_state_dtypes.py", "tests/test_hf_nemotron_h.py",
                  "tests/test_hf_qwen3_next.py", "tests/test_hf_jamba.py",
                  "tests/test_hf_kimi_linear.py", "tests/test_hf_lfm2.py"],
        "select": "not verify",  # the cross-checks' transformers builds: minutes a mutant
    },
    "serving": {
        "files": ["accounting/serving/kv.py", "accounting/serving/activation.py",
                  "accounting/serving/startup.py", "accounting/serving/engines.py",
                  "accounting/serving/shards.py", "accounting/serving/plan.py",
                  "accounting/serving/max_len.py"],
        "tests": ["tests/test_serving.py", "tests/test_serving_startup.py",
                  "tests/test_serving_pool.py", "tests/test_serve_bounds.py",
                  "tests/test_serving_published.py"],
        "mark": "not slow",  # tests/conftest.py's marker: the long end-to-end builds left out
    },
}

_FLIP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
         ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
         ast.Is: ast.IsNot, ast.IsNot: ast.Is}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def candidates(tree: ast.AST) -> list[tuple[int, str]]:
    """(index of the node in ast.walk order, the mutation) for every mutable node."""
    docs = _docstrings(tree)
    out = []
    for i, node in enumerate(ast.walk(tree)):
        if isinstance(node, ast.Constant) and id(node) not in docs:
            if isinstance(node.value, bool):
                out.append((i, "flip boolean"))
            elif isinstance(node.value, int):
                out.append((i, "constant + 1"))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add, ast.Sub,
                                                                   ast.FloorDiv)):
            out.append((i, "drop right operand"))
        elif isinstance(node, ast.Compare) and type(node.ops[0]) in _FLIP:
            out.append((i, "flip comparison"))
        elif isinstance(node, ast.BoolOp):
            out.append((i, "swap and/or"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            out.append((i, "drop not"))
        elif isinstance(node, ast.If):
            out.append((i, "negate condition"))
    return out


def mutate(tree: ast.AST, index: int, kind: str) -> ast.AST:
    tree = copy.deepcopy(tree)
    nodes = list(ast.walk(tree))
    node = nodes[index]
    parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}

    def replace(old, new):
        parent = parents[id(old)]
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, new)
                return
            if isinstance(value, list):
                for j, v in enumerate(value):
                    if v is old:
                        value[j] = new
                        return
    if kind == "flip boolean":
        node.value = not node.value
    elif kind == "constant + 1":
        node.value = node.value + 1
    elif kind == "drop right operand":
        replace(node, node.left)
    elif kind == "flip comparison":
        node.ops[0] = _FLIP[type(node.ops[0])]()
    elif kind == "swap and/or":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif kind == "drop not":
        replace(node, node.operand)
    elif kind == "negate condition":
        node.test = ast.UnaryOp(ast.Not(), node.test)
    return ast.fix_missing_locations(tree)


def changed_line(before: str, after: str) -> str:
    """The changed line, around its first difference (a long line shown in part)."""
    for a, b in zip(before.splitlines(), after.splitlines()):
        if a != b:
            i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            lo = max(0, i - 60)
            return f"...{a[lo:i + 50].strip()}  ->  ...{b[lo:i + 50].strip()}"
    return "(no line changed)"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("group", choices=sorted(GROUPS))
    p.add_argument("--mutants", type=int, default=40)
    p.add_argument("--seed", type=int, default=45)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--only", default="", help="comma-separated mutant numbers to judge "
                   "(as numbered in a run of the same seed), e.g. a previous run's survivors")
    ns = p.parse_args()
    group = GROUPS[ns.group]
    work = Path(tempfile.mkdtemp(prefix="mutation-"))
    try:
        for part in ("accounting", "model", "tests", "pyproject.toml"):
            src = ROOT / part
            (shutil.copytree if src.is_dir() else shutil.copy)(src, work / part)
        pool = []
        for f in group["files"]:
            tree = ast.parse((ROOT / f).read_text())
            pool += [(f, i, k) for i, k in candidates(tree)]
        rng = random.Random(ns.seed)
        drawn = rng.sample(pool, min(ns.mutants, len(pool)))
        print(f"{ns.group}: {len(pool)} candidate mutations in {len(group['files'])} files; "
              f"{len(drawn)} drawn (seed {ns.seed}); tests: {' '.join(group['tests'])}",
              flush=True)
        results = []
        only = {int(x) for x in ns.only.split(",") if x.strip()}
        for n, (f, i, kind) in enumerate(drawn, 1):
            if only and n not in only:
                continue
            original = (ROOT / f).read_text()
            tree = ast.parse(original)
            base = ast.unparse(tree)
            mutant = ast.unparse(mutate(tree, i, kind))
            if mutant == base:
                continue
            (work / f).write_text(mutant)
            start = time.monotonic()
            try:
                select = ["-k", group["select"]] if "select" in group else []
                select += ["-m", group["mark"]] if "mark" in group else []
                r = subprocess.run([ns.python, "-m", "pytest", "-q", "-x", "-n0", "-p",
                                    "no:cacheprovider", *select, *group["tests"]], cwd=work,
                                   env={**os.environ, "PYTHONPATH": str(work)},
                                   capture_output=True,
                                   timeout=ns.timeout)
                verdict = "killed" if r.returncode != 0 else "SURVIVED"
            except subprocess.TimeoutExpired:
                verdict = "killed (timeout)"
            finally:
                (work / f).write_text(original)
            line = changed_line(base, mutant)
            results.append((f, kind, verdict, line))
            print(f"[{n}/{len(drawn)}] {verdict:16s} {Path(f).name}: {kind}: {line} "
                  f"({time.monotonic() - start:.0f} s)", flush=True)
        killed = sum(v.startswith("killed") for _, _, v, _ in results)
        print(f"\n{ns.group}: {killed} of {len(results)} mutants killed "
              f"({100 * killed / max(len(results), 1):.0f}%)")
        per_file = Counter(f for f, *_ in results)
        per_kill = Counter(f for f, _, v, _ in results if v.startswith("killed"))
        for f in sorted(per_file):
            print(f"  {f}: {per_kill[f]} of {per_file[f]} killed")
        for f, kind, v, line in results:
            if v == "SURVIVED":
                print(f"  survived: {f}: {kind}: {line}")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
