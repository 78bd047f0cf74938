"""torch.autocast's cast policies, for the ops the model runs, per device.

Autocast (torch.autocast(device, dtype=torch.bfloat16)) wraps some aten ops: a
"lower precision" op casts its floating-point inputs to bf16 and computes in bf16; an
"fp32" op casts them to float32. Every other op runs in the dtype its inputs promote to
(bf16 with fp32 gives fp32; a Python scalar does not promote). A cast is a new tensor
(a copy), and whatever an op saves for backward is its casted input.

Sources: PyTorch's aten/src/ATen/autocast_mode.cpp (the AutocastCPU registrations:
lower precision bmm, mm, matmul, linear, scaled_dot_product_attention, ...; fp32 nll_loss,
cross_entropy_loss, mse_loss, ...) and the AMP documentation's "CUDA Ops that can autocast
to float32" (exp, pow, sum, softmax, log_softmax, layer_norm, nll_loss, cross_entropy,
log, rsqrt, ...; lower precision bmm, mm, matmul, linear, baddbmm, ...,
scaled_dot_product_attention). The CPU table is measured by
tests/test_memory_reality.py (torch.autocast("cpu") on a real training step); the CUDA
table is not measured here (no GPU), it is the documented policy.
"""
from __future__ import annotations

from accounting.units import BF16, FP8_E4M3, FP32

LOWER = "lower precision"  # the other policy, FP32, casts to float32

# op (the trace's name for it) -> policy, for each device
POLICIES: dict[str, dict[str, str]] = {
    "cpu": {"bmm": LOWER, "sdpa": LOWER, "conv1d": LOWER, "cross_entropy": FP32},
    "cuda": {"bmm": LOWER, "sdpa": LOWER, "conv1d": LOWER, "cross_entropy": FP32,
             "aten.exp": FP32, "aten.pow": FP32, "aten.sum": FP32, "aten.rsqrt": FP32},
}
LOW_DTYPE = BF16  # torch.autocast(..., dtype=torch.bfloat16)
# (On CUDA, F.cross_entropy itself is on no list: it calls log_softmax with the logits' own
# dtype, which autocast leaves alone, and nll_loss casts the bf16 result to a float32 copy.
# The ledger keeps the CPU's form here; the step's peak on CUDA corrects the loss region:
# accounting/planning/cuda_peak.py, rule LOSS.)


def policy(device: str | None, op: str) -> str | None:
    """The cast policy of `op` under autocast on `device` (None: no autocast, or none)."""
    if device is None:
        return None
    return POLICIES[device].get(op)


# ---- fp8 training of the linear layers (trace.Trace._fp8_linear applies these) -----------
# The float8 training libraries a precision names (accounting/planning/precisions.py):
# torchao.float8 (Float8Linear) and NVIDIA Transformer Engine (te.Linear).
TORCHAO, TE = "torchao", "te"
FP8_LIBRARIES = (TORCHAO, TE)
# the dtype of Transformer Engine's saved fp8 input (HYBRID: e4m3 in the forward pass, e5m2
# for the gradients; both one byte, units.STORAGE_BYTES)
FP8_SAVED_DTYPE = FP8_E4M3
