"""The fused attention kernel's FLOPs for the two counters that do not know it.

FlopCounterMode (torch 2.13) has formulas for the CUDA fused kernels but none for the CPU
one, aten._scaled_dot_product_flash_attention_for_cpu, which it counts as 0 FLOPs
(pytorch #195460). We register torch's own formulas, torch.utils.flop_counter.sdpa_flop and
sdpa_backward_flop (the ones it uses for the CUDA kernels: 2 matmuls forward, 5 backward,
the full T×T whatever the causal mask), for the CPU kernel and its backward, so the count
stays torch's, not ours. fvcore's jit trace has no handle for the kernel either: we give it
one that counts the same two matmuls (in multiply-adds, fvcore's unit).
"""
from __future__ import annotations

import math

import torch
from torch.utils import flop_counter

aten = torch.ops.aten
CPU_KERNEL = aten._scaled_dot_product_flash_attention_for_cpu
CPU_KERNEL_BACKWARD = aten._scaled_dot_product_flash_attention_for_cpu_backward
JIT_NAME = "aten::_scaled_dot_product_flash_attention_for_cpu"


def register_flop_formulas() -> None:
    """Teach FlopCounterMode the CPU kernel (once; the registry refuses duplicates), and
    the triangular solve of the recurrent layers (triangular.py)."""
    from accounting.crosscheck.triangular import register_solve_formula
    register_solve_formula()
    if CPU_KERNEL not in flop_counter.flop_registry:
        flop_counter.register_flop_formula(CPU_KERNEL, get_raw=True)(flop_counter.sdpa_flop)
    if CPU_KERNEL_BACKWARD not in flop_counter.flop_registry:
        flop_counter.register_flop_formula(CPU_KERNEL_BACKWARD, get_raw=True)(
            flop_counter.sdpa_backward_flop)


def _shape(value) -> list[int]:
    if not value.isCompleteTensor():
        raise ValueError("fused attention: an operand's shape is unknown in the trace")
    return list(value.type().sizes())


def fvcore_sdpa_handle(inputs, outputs) -> int:
    """Multiply-adds of QKᵀ and scores·V for q (B, h, T, d), k (B, h_kv, S, d), v (B, h_kv,
    S, d_v): B·h·T·S·(d + d_v), grouped K/V heads read by every query head of their group."""
    q, k, v = (_shape(x) for x in inputs[:3])
    *lead, h, t, d = q
    s, d_v = k[-2], v[-1]
    return math.prod(lead) * h * t * s * (d + d_v)
