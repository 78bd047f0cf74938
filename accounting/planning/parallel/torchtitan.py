"""What torchtitan's per-op selective activation checkpointing keeps of one transformer block
(`--stack torchtitan --recompute selective`), tensor by tensor: torchtitan's own model
(torchtitan/models/llama3/model/model.py: nn.Linear projections, SDPA, SwiGLU
FeedForward w2(silu(w1 x) · w3 x)) computing in bf16 under FSDP2's MixedPrecisionPolicy.

The policy (torchtitan/models/llama3/infra/parallelize.py, `_op_sac_save_list` and
`_get_custom_policy`, applied per block by torchtitan/distributed/activation_checkpoint.py's
`_apply_ac_to_transformer_block` with `selective_ac_option = "op"`): inside each block's
checkpoint the outputs of aten.mm, the scaled-dot-product-attention kernels,
_c10d_functional.reduce_scatter_tensor and aten.max are saved (MUST_SAVE), except every
second mm (the policy counts the block's mms in the forward pass: the 2nd, 4th, … are
recomputed); everything else is recomputed in the backward pass. So a block keeps its input
(the checkpoint's), the outputs of its 1st, 3rd, 5th, … projection (in the order the block
runs them: wq, wk, wv, wo, then w1, w3, w2 — w1, w2 without a gate), the attention output
and its fp32 log-sum-exp (flash attention), and under sequence parallelism the two
reduce-scattered sublayer outputs. Under tensor parallelism each mm output is this rank's
local one (heads, d_ff split; wo's and w2's are partial sums over the whole sequence).

Checked on the CPU (tests/test_stacks.py): torch.utils.checkpoint's selective checkpointing
with this policy on a block written as torchtitan's, measuring the outputs the policy saves;
the CPU's flash kernel (`_scaled_dot_product_flash_attention_for_cpu`) stands in for CUDA's.
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.spec.config import ModelConfig
from accounting.units import BF16, DTYPE_BYTES, FP32

SOURCE = "torchtitan/models/llama3/infra/parallelize.py (_op_sac_save_list, _get_custom_policy)"
ACT, STAT = DTYPE_BYTES[BF16], DTYPE_BYTES[FP32]


@dataclass(frozen=True)
class Saved:
    name: str
    saved_by: str  # the op (and source) whose output the policy keeps
    bytes: int  # per micro-batch of b = 1, on this GPU
    formula: str


@dataclass(frozen=True)
class Setting:
    seq: int
    tp: int = 1
    sp: bool = False


def projections(c: ModelConfig) -> list[tuple[str, str]]:
    """(name, output width symbol) of the block's mms, in the order torchtitan runs them."""
    mlp = [("w1", "f"), ("w3", "f"), ("w2", "h")] if c.mlp_kind.gated else [("w1", "f"), ("w2", "h")]
    return [("wq", "q"), ("wk", "kv"), ("wv", "kv"), ("wo", "h")] + mlp


def sac_layer(c: ModelConfig, s: Setting) -> list[Saved]:
    """One block under per-op SAC, b = 1, on TP rank 0 (s.tp, s.sp)."""
    t, T = s.tp, s.seq
    shard = t if s.sp else 1
    width = {"q": c.num_heads // t * c.d_k, "kv": c.kv_heads // t * c.d_k, "f": c.d_ff // t,
             "h": c.d_model}
    out = [Saved("the block's input (the checkpoint's)", "checkpoint_wrapper",
                 ACT * T * c.d_model // shard, "2·s·b·h" + ("/t" if s.sp else ""))]
    for i, (name, w) in enumerate(projections(c), 1):
        if name == "wo":
            out.append(Saved("attention output (flash SDPA)", SOURCE + ": SDPA in the save list",
                             ACT * T * width["q"], "2·s·b·a·d_k/t"))
            out.append(Saved("attention log-sum-exp (fp32, flash SDPA)", SOURCE,
                             STAT * T * c.num_heads // t, "4·a·s·b/t"))
        if i % 2:
            partial = " (a partial sum over the whole sequence)" if w == "h" and t > 1 else ""
            out.append(Saved(f"{name} output, mm #{i}{partial}", SOURCE + ": odd mm saved",
                             ACT * T * width[w], f"2·s·b·{w}"))
    if t > 1 and s.sp:
        for where in ("attention", "feed-forward"):
            out.append(Saved(f"{where} output reduce-scattered (sequence shard)",
                             SOURCE + ": reduce_scatter_tensor in the save list",
                             ACT * T * c.d_model // t, "2·s·b·h/t"))
    return out
