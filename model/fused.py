"""The fused attention path: the one module of model/ that calls torch's own attention
kernel (tests/test_model.py exempts it from the from-scratch rule).

F.scaled_dot_product_attention(q, k, v, is_causal=True) picks a fused kernel: on the CPU,
PyTorch's flash attention for CPU (aten._scaled_dot_product_flash_attention_for_cpu),
which handles grouped K/V heads natively. On the meta device the dispatcher has no fused
choice and falls back to the math path (separate bmm and softmax ops, and for grouped
heads a copy of K and V), so there this module calls the CPU kernel directly: the meta
run then records what a CPU run executes.
"""

import torch
import torch.nn.functional as F


def fused_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    # q: (batch heads seq d_k); k, v: (batch kv_heads seq d_k), heads a multiple of kv_heads
    if q.device.type == "meta":
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True)[0]
    return F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                          enable_gqa=k.shape[-3] != q.shape[-3])
