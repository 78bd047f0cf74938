"""The distributed check compares its FLOPs for the attention it runs (no torch.distributed:
the plans only, fast). torchtitan's stack plans its Llama's SDPA (StackRun.as_run), whose
flash backward recomputes the scores; the suite runs model/'s naive attention on the CPU,
and FlopCounterMode counts no CPU flash kernel, so the check plans the naive attention.

Expected values by hand: the flash backward's extra matmul is S = Q·K^T again, 2·B·h·T²·d_k
per layer (Dao 2023, FlashAttention-2, Algorithm 2 line 11: S recomputed from Q and K).
"""
from __future__ import annotations

from dataclasses import asdict

from accounting.distcheck import suite
from accounting.distcheck.compare import plan_for


def _titan():
    (case,) = [c for c in suite.FAKE if c.stack == suite.TORCHTITAN]
    return asdict(case)


def test_torchtitan_case_plans_the_attention_the_suite_runs():
    # regression: the plan counted SDPA's recomputed scores (+16,777,216 backward FLOPs)
    # that the CPU run does not execute, so the check disagreed with torch on rank 63
    case = _titan()
    plain = {**case, "stack": "torch"}  # the same model, layout and naive attention
    assert plan_for(case).flops.backward == plan_for(plain).flops.backward
    assert plan_for(case).flops.forward == plan_for(plain).flops.forward


def test_the_fused_kernel_is_still_what_torchtitan_plans():
    case = _titan()
    # Llama 3.1 8B: 32 query heads of d_k 128; the case: 2 layers, B = 1, T = 32
    layers, b, h, t, d_k = 2, 1, 32, 32, 128
    extra = layers * 2 * b * h * t * t * d_k  # = 16,777,216
    gap = plan_for(case, attention_as_run=True).flops.backward - plan_for(case).flops.backward
    assert gap == extra
