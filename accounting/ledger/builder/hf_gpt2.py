"""GPT-2 as transformers runs it (GPT2LMHeadModel, transformers 5.23 modeling_gpt2.py), where
its ops differ from the ledger's generic ones (builder/layers.py, attention.py):

- nn.LayerNorm (ln_1, ln_2, ln_f) is F.layer_norm, one aten.native_layer_norm: it saves its
  input and the mean and 1/σ, one per token (tools/autograd/derivatives.yaml,
  native_layer_norm_backward); the normalized output is a new tensor the next op saves.
  The statistics are float32 on CUDA (aten/src/ATen/native/cuda/layer_norm_kernel.cu
  layer_norm_cuda: at::toAccumulateType(input, /*is_cuda=*/true)), the ledger's rule; on the
  CPU they take the input's dtype (aten/src/ATen/native/layer_norm.cpp layer_norm_cpu:
  param_scalar_type), bf16 under bf16 parameters (tests/test_transformers_gpt2.py says so).
  Under autocast layer_norm runs in float32 (autocast's fp32 list).
- c_attn is one Conv1D: torch.addmm(bias, x, W) with W stored (d_model, 3·d_model), whose
  output split(d_model, dim=2) gives Q, K and V as views of one (B, T, 3·d_model) tensor.
  The ledger keeps three projections (the parameter count and FLOPs are the same: GPT2_NAMES
  maps q/k/v_proj onto attn.c_attn) and fuse() makes their storages one: one saved input
  (under autocast one bf16 copy of it and of W, not three), one output that SDPA saves.
"""
from __future__ import annotations

from accounting.ledger.builder import megatron
from accounting.ledger.trace import Sym, Trace
from accounting.units import FP32


def layer_norm(t: Trace, norm, x: Sym, out_label: str, course: str) -> Sym:
    """nn.LayerNorm as F.layer_norm: autocast runs it in float32 (a copy of a lower-precision
    input), then builder/megatron.py's fused-norm rule (its input, fp32 mean and 1/σ)."""
    if t.autocast is not None and x.dtype != FP32:
        x = t.cast(x, FP32)
    return megatron.fused_norm(t, norm, x, out_label, course)


def fuse(t: Trace, before: set, outs: tuple[Sym, ...]) -> tuple[Sym, ...]:
    """GPT-2's c_attn: the storages the three projections made since `before` become one
    each: their output (B, T, 3, d_model), and each kind of copy of their input or weight
    (autocast's bf16 copy; an fp8 run's fp8 copy of the input), which one addmm makes once,
    not three times. Returns Q, K and V as views of the one output."""
    new = [s for s in t.named if s not in before]
    out_storages = [o.storage for o in outs]
    kinds: dict[tuple, list] = {}  # the copies, by (weight copy?, dtype): one per projection
    for s in new:
        if s not in out_storages:
            kinds.setdefault((t.named[s].weight_copy, t.named[s].dtype), []).append(s)
    for group in (out_storages, *kinds.values()):
        if len(group) != len(outs):  # not one per projection: left as built
            continue
        keep = t.named[group[0]]
        for s in group[1:]:
            keep.savers.extend(b for b in t.named.pop(s).savers if b not in keep.savers)
        if group is out_storages:  # Q's, K's and V's elements side by side
            keep.label, keep.shape = ("c_attn output (Q, K, V)",
                                      keep.shape[:-1] + ("3",) + keep.shape[-1:])
        elif keep.weight_copy:
            keep.label = f"{keep.dtype} copy of the c_attn weight (Q, K, V)"
            keep.shape = ("3",) + keep.shape
    first = outs[0].storage
    return tuple(Sym(o.shape, o.dtype, o.grad, o.contiguous, first) for o in outs)



def fuse_gate(t: Trace, before_q: set, q: Sym, before_gate: set, gate: Sym) -> None:
    """Qwen3-Next's gated attention (Qwen3NextAttention.forward, transformers 5.23): one
    q_proj of 2·h·d_k gives the query and the gate side by side per head (torch.chunk: views
    of one output), where the ledger keeps two projections (the parameters and FLOPs are the
    same). The query's output storage becomes that one output, (B, T, h, 2, d_k); the gate
    projection's copies (autocast's bf16 copy of the input, of the weight) are q_proj's one
    addmm's: the input's is dropped, the weight's joins q_proj's. The gate itself is
    gate.reshape(B, T, h·d_k), a copy of the strided chunk: the gate projection's output."""
    weights = [s for s in t.named if s not in before_q and s in before_gate
               and t.named[s].weight_copy]
    out = t.named[q.storage]
    out.label = "q_proj output (query and gate)"
    out.shape = out.shape[:-1] + ("2",) + out.shape[-1:]
    for s in [s for s in t.named if s not in before_gate and s != gate.storage]:
        n = t.named.pop(s)
        if n.weight_copy and weights:  # one bf16 copy of the 2·h·d_k × d_model weight
            keep = t.named[weights[0]]
            keep.shape = ("2",) + keep.shape
            keep.savers.extend(b for b in n.savers if b not in keep.savers)
