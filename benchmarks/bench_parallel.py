"""Speed of the multi-GPU planner: one plan, and the layout search over every layout of N
GPUs (the goals: issue 16, a 64-GPU search in at most 0.5 s; issue 30, a 4,096-GPU search,
context parallelism, virtual and uneven stages among the candidates, under 2 s), median of
N runs, in-process (the CLI's interpreter start-up is what bench_cli.py measures).

    python benchmarks/bench_parallel.py [--runs 9]
    python benchmarks/bench_parallel.py --layers 1000,10000 [--code DIR]
    python benchmarks/bench_parallel.py --cli [--runs 5]

--cli: one many-GPU plan through the CLI in a fresh process each (wall time, the
interpreter's start-up included), the step's peak and the allocator's reserve with it
(issue 44: under 1 s): Llama-3.1-8B at 32k on 8 H100s (FSDP, full recomputation), and
torchtitan's Llama 3.1 405B on 512 GPUs (TP 8 × PP 8 × FSDP 8).

--layers: the CLI (a fresh process each, wall time) for a 1,024-wide model of that many
layers, `plan ... --gpus 64 --search --gpu H100` (issue 32: the plan was quadratic in the
layer count); --code DIR times another checkout (e.g. the code before a fix).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from accounting import get_preset
from accounting.planning.gpus import interconnect
from accounting.planning.memory import get_precision
from accounting.planning.parallel.layout import Layout
from accounting.planning.parallel.plan import parallel_plan
from accounting.planning.parallel.search import search
from accounting.planning.plan import hardware

CASES = (
    # (model, gpus, global batch, seq, recompute, attention, stack)
    ("openai-community/gpt2-xl", 8, 512, 1024, "none", None, "torch"),
    ("openai-community/gpt2-xl", 64, 1024, 1024, "none", None, "torch"),
    ("meta-llama/Llama-3.1-8B", 64, 512, 8192, "selective", None, "torch"),
    ("meta-llama/Llama-3.1-8B", 512, 4096, 8192, "selective", None, "torch"),
    ("meta-llama/Llama-3.1-8B", 4096, 4096, 8192, "selective", None, "torch"),
    # the fused kernel: context parallelism is tried too (128k tokens)
    ("meta-llama/Llama-3.1-8B", 4096, 512, 131072, "selective", "sdpa", "torch"),
    # the named stacks' searches (issue 30: their ledgers, their sharding stages)
    ("meta-llama/Llama-3.1-8B", 4096, 4096, 8192, "selective", None, "megatron"),
    ("meta-llama/Llama-3.1-8B", 4096, 4096, 8192, "full", None, "torchtitan"),
    ("meta-llama/Llama-3.1-8B", 4096, 4096, 8192, "selective", None, "deepspeed"),
)


def _cold() -> None:
    """Forget every cached ledger, split and partial result (a fresh process's state)."""
    from accounting.ledger import ledger
    from accounting.planning import mfu
    from accounting.planning.parallel import activations, plan, shards, stack_memory, states, step
    for f in (ledger.ledger, ledger.unfolded_ledger, shards.split, activations._rows,
              step._matmuls, plan._units, plan._states, plan._activations,
              states._partition, mfu.sequence_flops):
        f.cache_clear()
    stack_memory._REMEMBERED.clear()  # (per config object: the preset's outlives a run)


def _median(fn, runs: int, cold: bool) -> tuple[float, object]:
    times, out = [], None
    for _ in range(runs):
        if cold:
            _cold()
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def deep(layers: list[int], code: Path) -> None:
    """The CLI's --search on 64 GPUs for a model of each layer count, wall time."""
    print(f"plan --gpus 64 --search --gpu H100, 1,024-wide, 16 heads, T = 1,024 ({code})")
    for L in layers:
        argv = [sys.executable, "-m", "accounting", "plan", "--vocab-size", "50257",
                "--context-length", "1024", "--num-layers", str(L), "--d-model", "1024",
                "--num-heads", "16", "--gpus", "64", "--search", "--gpu", "H100"]
        t0 = time.perf_counter()
        r = subprocess.run(argv, capture_output=True, env={**os.environ, "PYTHONPATH": str(code)})
        took = time.perf_counter() - t0
        ticks = sum(line.startswith("[plan --search]") for line in r.stderr.decode().splitlines())
        print(f"  {L:>6,} layers: {took:7.1f} s wall, exit {r.returncode}, "
              f"{ticks} progress lines on stderr")


CLI_PLANS = (
    ("Llama-3.1-8B, T 32,768, 8 H100, FSDP, full recomputation",
     ("meta-llama/Llama-3.1-8B", "--gpus", "8", "--fsdp", "--batch", "8", "--ctx", "32768",
      "--recompute", "full", "--gpu", "H100")),
    ("Llama 3.1 405B, T 8,192, 512 GPUs, TP 8 × PP 8 × FSDP 8, --stack torchtitan",
     ("meta-llama/Llama-3.1-8B", "--num-layers", "126", "--d-model", "16384", "--num-heads",
      "128", "--num-kv-heads", "8", "--d-ff", "53248", "--gpus", "512", "--tp", "8", "--sp",
      "--pp", "8", "--fsdp", "--batch", "256", "--ctx", "8192", "--recompute", "full",
      "--stack", "torchtitan", "--gpu", "H100")),
)


def cli_plans(runs: int, code: Path) -> None:
    """A many-GPU plan through the CLI, a fresh process each run (goal: under 1 s)."""
    print(f"plan --gpus N through the CLI, a fresh process each, median of {runs} "
          f"({os.cpu_count()} CPUs; goal: under 1 s)")
    for label, args in CLI_PLANS:
        times = []
        for fmt in ("text", "json") * runs:
            argv = [sys.executable, "-m", "accounting", "plan", *args, "--format", fmt]
            t0 = time.perf_counter()
            r = subprocess.run(argv, capture_output=True,
                               env={**os.environ, "PYTHONPATH": str(code)})
            times.append(time.perf_counter() - t0)
            assert r.returncode == 0, r.stderr.decode()[-300:]
        print(f"  {label:<76} {statistics.median(times):6.3f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=9)
    p.add_argument("--cli", action="store_true", help="time many-GPU plans through the CLI")
    p.add_argument("--layers", help="comma-separated layer counts: time the CLI's --search")
    p.add_argument("--code", type=Path, default=Path(__file__).resolve().parents[1])
    ns = p.parse_args()
    if ns.layers:
        return deep([int(x) for x in ns.layers.split(",")], ns.code.resolve())
    if ns.cli:
        return cli_plans(ns.runs, ns.code.resolve())
    n = ns.runs
    bf16 = get_precision("bf16-mixed")
    hw, net = hardware("H100", compute="bf16"), interconnect("H100")
    print(f"multi-GPU planner, median of {n} runs, {os.cpu_count()} CPUs (goals: 64-GPU search ≤ 0.5 s, 4,096 ≤ 2 s)")
    print("cold: every cache cleared before each run (a fresh process); warm: caches kept")
    print(f"{'case':<80} {'one plan':>9} {'search cold':>12} {'warm':>8} {'layouts':>8}")
    from accounting.planning.parallel.stack_memory import StackRun
    from accounting.planning.parallel.stacks import get_stack
    for name, gpus, batch, seq, rc, attention, stack_name in CASES:
        stack = StackRun(get_stack(stack_name))
        zero = stack.stack.default_zero if stack_name != "torch" else 3
        config = get_preset(name)
        if attention:
            config = replace(config, attention=attention)
        base = Layout(gpus, global_batch=batch, recompute=rc, zero=stack.stack.default_zero)
        one = Layout(gpus, tp=1, pp=1, dp=gpus, zero=zero if zero in stack.stack.engines else 3,
                     global_batch=batch, recompute=rc)
        t_plan = None
        if batch % gpus == 0:  # one plan: every GPU data parallel (ZeRO-3)
            t_plan, _ = _median(lambda: parallel_plan(config, one, seq, precision=bf16,
                                                      hardware=hw, net=net, stack=stack),
                                n, cold=True)
        run = lambda: search(config, base, seq, precision=bf16, hardware=hw, net=net,  # noqa: E731
                             stack=stack)
        t_cold, s = _median(run, n, cold=True)
        t_warm, _ = _median(run, n, cold=False)
        tried = len(s.ranked) + len(s.rejected)
        label = f"{name} on {gpus} GPUs, B={batch}, T={seq}, {rc}" + (f", {attention}" if attention else "") \
            + (f", --stack {stack_name}" if stack_name != "torch" else "")
        plan_s = f"{t_plan:>8.4f}s" if t_plan is not None else f"{'-':>9}"
        print(f"{label:<80} {plan_s} "
              f"{t_cold:>11.3f}s {t_warm:>7.3f}s {tried:>8}")


if __name__ == "__main__":
    main()
