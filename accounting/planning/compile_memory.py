"""--compile (issue 44): what torch.compile's partitioner keeps of a transformer block, as a
change to the ledger's saved records. Inductor splits each compiled block's joint graph with
AOTAutograd's min-cut partitioner (torch/_functorch/partitioners.py,
min_cut_rematerialization_partition, torch 2.13): it never recomputes a matmul or the
attention kernel, and saves the cheapest set of tensors from which the backward pass can
recompute the pointwise ops in between. Measured on the CPU (tests/test_compile_memory.py:
aot_module with that partitioner over one block of model/'s TransformerLM and of
transformers' LlamaDecoderLayer, fp32 and torch.autocast bf16, at several d_ff/d_model
ratios), against eager the block saves:

  * no normalised input ("x / rms") of either RMSNorm: recomputed from the norm's input
    and its rms, both still saved;
  * no SiLU output: recomputed from the W1 output (model/'s sigmoid, when saved, stays);
  * no RoPE cos/sin gathered at the positions (model/: four bf16 or fp32 copies saved by
    its muls, recomputed from its buffers); under autocast the partitioner keeps a float32
    gather of one table (T·d_k/2·4 bytes) instead;
  * one copy of a tensor cast to bf16 once per consuming matmul (autocast casts the norm's
    output for Q, K and V, and for W1 and W3, separately; the traced graph casts it once);
  * under autocast, the second norm's float32 input (the residual after attention) is not
    saved: it is recomputed as x + the output projection's bf16 result, which is saved
    instead (half the bytes).

The plan compiles each block on its own, as torchtitan (apply_compile: torch.compile per
TransformerBlock) and torchtune (training.compile_model: each layer) do; outside the blocks
the ops run eagerly, but for torchtune's chunked loss, whose cross-entropy its recipes
compile too (--loss chunked: planning/loss_memory.py). With LoRA, --compile is planned under
full checkpointing only (planning/plan.py), where each block keeps its input alone.

--stack torchtitan (its own Llama in bf16, no autocast: the stack's ledger): torchtitan
wraps each block for activation checkpointing first and compiles the wrapped block
(pytorch/torchtitan@018740b torchtitan/models/llama3/infra/parallelize.py parallelize_llama:
apply_ac, then apply_compile: torch.compile(transformer_block, fullgraph=...)). Dynamo
traces the checkpoint as one region whose ops carry the policy's tags, and the min-cut
partitioner recomputes every op tagged PREFER_RECOMPUTE and saves a MUST_SAVE output only
where the backward graph reads it. Measured on the CPU (tests/test_compile_memory.py: the
torchtitan block of tests/test_stack_implementations.py wrapped in torch.utils.checkpoint,
torch.compile with AOTAutograd and this partitioner, fullgraph), against the eager block:

  * no checkpointing: the SiLU output is recomputed from the W1 output (nothing else: the
    norms' bf16 outputs, their fp32 1/σ, Q, K, V and the W3 output stay);
  * per-op selective checkpointing (every odd mm and the attention kernel saved): the W2
    output, the block's last mm (mm #7, odd: MUST_SAVE), is not saved: no backward op reads
    it (the residual add's backward does not). Under TP + SP neither is the
    reduce-scattered feed-forward output (reduce_scatter_tensor: MUST_SAVE in its save
    list, read by no backward op; the attention's, which the second norm's input is
    recomputed from, stays): measured on one TP rank of torch's fake process group
    (tests/titan_compile_measure.py, the block on its local tensors with torch's
    functional collectives, as DTensor's plan runs them; tests/test_titan_tp.py);
  * full checkpointing: the block's input only, as eager (and the RNG state where
    preserve_rng_state is set); under TP too, its collectives inside the checkpoint region
    being recomputed (partitioners.py force_save_collectives forces only those outside
    one to be saved; measured as above, the backward graph gathering the inputs again). The one block recomputed in the backward pass is then a
    compiled block too (its SiLU output recomputed): not counted, an upper bound by 2·b·T·d_ff
    per block at the block-backward moment. Only the layouts measured are planned: pre-norm RMSNorm, SwiGLU, RoPE,
SDPA attention, no MoE, no QK-norm, no biases; another is refused in one line.
"""
from __future__ import annotations

from fractions import Fraction

from accounting.ledger.symbols import Expr
from accounting.runtime.errors import UsageError
from accounting.units import BF16, DTYPE_BYTES, FP32

RECOMPUTED = ("x / rms", "SiLU output")
ROPE = "RoPE cos and sin at the positions"  # model/'s gather from its buffers
RESIDUAL = "ln2 input"  # the second norm's input: x + the attention's projection
# torchtitan's per-op SAC compiled: its last mm's output, saved by the policy, read by no
# backward op (the torchtitan ledger's name for the W2 matmul's output)
SAC_UNREAD = "W2 output"
# and under TP + SP the feed-forward's reduce-scattered output, the block's last MUST_SAVE
# (the name stack_memory.reduce_scattered gives it)
SAC_UNREAD_SCATTER = "feed-forward output reduce-scattered"
RULE = ("--compile: inductor's min-cut partitioner recomputes each block's RMSNorm "
        "x / rms and the SiLU output, saves one bf16 copy per "
        "cast tensor, and under autocast the attention projection's bf16 output instead of "
        "the fp32 residual")
RULE_NONE = ("--compile: no change to what the blocks keep (under full checkpointing each "
             "compiled block keeps its input alone, as eager)")


def check(config) -> None:
    c = config
    other = [what for what, bad in (
        ("a norm other than pre-norm RMSNorm", c.norm != "rmsnorm" or c.norm_placement != "pre"),
        ("an MLP other than SwiGLU", c.mlp != "swiglu"),
        ("positions other than RoPE", c.positions != "rope"),
        ("attention other than SDPA", c.attention != "sdpa"),
        ("experts", c.num_experts is not None),
        ("QK-norm", c.qk_norm != "none"),
        ("biases", c.qkv_bias or c.out_bias or c.mlp_bias),
        ("a block other than sequential", c.block != "sequential"),
        ("layer types", c.layer_types is not None or c.sliding_window is not None),
    ) if bad]
    if other:
        raise UsageError(f"--compile is measured for Llama-layout blocks (RMSNorm, SwiGLU, "
                         f"RoPE, SDPA); {c.name} has {other[0]}: leave --compile out")


def _bytes(r) -> Expr:
    return r.elements.scale(r.bytes_per_element).times(*((r.repeat,) if r.repeat else ()))


def removed_shares(records, autocast: str | None, sac: bool = False) -> list[Fraction]:
    """For each record, in the ledger's order, the share of its bytes a compiled block does
    not save (0 outside the blocks and for what it keeps); `sac`: the block runs under
    torchtitan's per-op selective checkpointing (its saved mm outputs are the records)."""
    out, seen = [], set()
    f32, b16 = DTYPE_BYTES[FP32], DTYPE_BYTES[BF16]
    for r in records:
        share = Fraction(0)
        key = (r.repeat, r.name)
        if r.saved and r.repeat:
            if r.name.endswith(RECOMPUTED) or (sac and r.name == SAC_UNREAD):
                share = Fraction(1)
            elif r.name == ROPE:  # under autocast a float32 gather of one table stays
                share = 1 - (Fraction(f32, r.copies * r.bytes_per_element) if autocast else 0)
            elif "(bf16 copy)" in r.name and not r.weight_copy and key in seen:
                share = Fraction(1)  # the same cast made again for another matmul
            elif autocast and r.name == RESIDUAL and r.dtype == FP32:
                share = Fraction(f32 - b16, f32)  # the projection's bf16 output instead
            seen.add(key)
        out.append(share)
    return out


def saved_change(activations, autocast: str | None) -> Expr:
    """The change to the kept activations (bytes, ≤ 0) when each block is compiled."""
    acts = list(activations)
    return sum((-_bytes(r).scale(k) for r, k in zip(acts, removed_shares(acts, autocast)) if k),
               Expr())


__all__ = ["RECOMPUTED", "RULE", "RULE_NONE", "SAC_UNREAD", "SAC_UNREAD_SCATTER", "check",
           "removed_shares", "saved_change"]
