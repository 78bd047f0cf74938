"""What Megatron-Core with Transformer Engine saves for the backward pass: the activations of
one transformer layer (and of the embedding and the loss) on one GPU of a layout, tensor by
tensor, each with the module that saves it. This is Megatron's own implementation of the
model (the `--stack megatron` plan), so its saved tensors are listed here, as Megatron's
rules, not derived from the course model's ledger.

Sources (NVIDIA/Megatron-LM and NVIDIA/TransformerEngine, read from source: they need a GPU):
  * TE `LayerNormLinear` (transformer_engine/pytorch/module/layernorm_linear.py, backward:
    `tex.layernorm_bwd(dgrad, inputmat, mu, rsigma, ...)` / `rmsnorm_bwd(dgrad, inputmat,
    rsigma, ...)`, and the weight gradient from `ln_out_total`, which under sequence
    parallelism is all-gathered again from the saved shard `ln_out`): the fused norm + QKV
    (and norm + fc1) saves the norm's input, its output (the local sequence shard under SP)
    and the fp32 statistics (mean and 1/σ for LayerNorm, 1/σ for RMSNorm), one per token.
  * TE `Linear` (linear_proj, linear_fc2): saves its input.
  * TE `DotProductAttention`: flash/fused attention saves Q, K, V, the output O (the same
    storage linear_proj saves) and the fp32 log-sum-exp of each row's softmax, a·s per
    sequence; its dropout mask is regenerated from the Philox RNG state, not stored. The
    unfused path (`UnfusedDotProductAttention`, Megatron's `DotProductAttention`) keeps the
    softmax output (a·s² 16-bit), and with dropout its 1-byte mask and the dropout output.
  * megatron/core/fusions/fused_bias_gelu.py, fused_bias_swiglu.py: the fused activation
    saves its input (fc1's output); fc2 saves the activation's output.
  * megatron/core/fusions/fused_bias_dropout.py: with dropout, the 1-byte mask of each
    hidden dropout (after attention and after the MLP); none when dropout is off.
  * Korthikanti et al. 2022 (arXiv:2205.05198) §4.1-4.2 count the same tensors in 16 bits
    (34·sbh + 5·as²b per layer); the norm statistics are the "small buffers" they leave out.

Everything is per micro-batch of b sequences (the count is b times that of b = 1). Each
tensor is counted as its own storage: where Megatron keeps a view of a larger buffer (V is a
split of linear_qkv's fused output; with RoPE, Q and K are new tensors), the whole buffer
may stay alive — not modelled (it needs a GPU to measure).
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.spec.config import ModelConfig
from accounting.units import BF16, BOOL, DTYPE_BYTES, FP32, INT64

ACT, MASK, STAT, IDS = DTYPE_BYTES[BF16], DTYPE_BYTES[BOOL], DTYPE_BYTES[FP32], DTYPE_BYTES[INT64]
FLASH, UNFUSED = "flash", "unfused"
KERNELS = {FLASH: "Transformer Engine's flash/fused attention (Q, K, V, O and the softmax "
                  "statistics saved; Megatron-Core's default)",
           UNFUSED: "unfused attention (the softmax output saved, as²b; Korthikanti et al.'s "
                    "accounting)"}
# Korthikanti et al. 2022's terms (their §4.1), named once for the reconciliation
K_NORM_IN, K_QKV_IN, K_QK, K_V, K_SOFTMAX, K_ATT_MASK, K_ATT_DROP = (
    "LayerNorm inputs", "QKV input", "Q and K", "V", "softmax output", "attention dropout mask",
    "attention dropout output")
K_PROJ_IN, K_HID_MASK, K_FC1_IN, K_ACT_IN, K_FC2_IN = (
    "output projection input", "hidden dropout masks", "MLP input", "GELU input",
    "second linear input")


@dataclass(frozen=True)
class Saved:
    name: str
    saved_by: str  # the module (and source) that keeps it
    bytes: int  # per micro-batch of b = 1, on this GPU
    formula: str
    paper: str | None = None  # Korthikanti et al.'s term it is (None: not in their count)


@dataclass(frozen=True)
class Setting:
    """What decides the saved tensors besides the model's shape."""
    seq: int
    tp: int = 1
    sp: bool = False
    dropout: bool = False
    kernel: str = FLASH
    recompute: str = "none"  # none, selective (the attention core) or full (every layer)


def _dims(c: ModelConfig, t: int) -> dict[str, int]:
    return {"h": c.d_model, "a": c.num_heads // t, "g": c.kv_heads // t, "d": c.d_k,
            "f": c.d_ff // t}


def layer(c: ModelConfig, s: Setting) -> list[Saved]:
    """The tensors one transformer layer keeps from its forward to its backward pass, for one
    sequence (b = 1), on one tensor-parallel rank. With full recomputation: the layer's input
    only (Megatron's `--recompute-granularity full`, uniform, one layer per checkpoint)."""
    t, T = s.tp, s.seq
    x = _dims(c, t)
    h, a, g, d, f = x["h"], x["a"], x["g"], x["d"], x["f"]
    shard = t if s.sp else 1  # the sequence-parallel region: split along T with SP
    res = f"s·b·h{'/t' if s.sp else ''}"
    if s.recompute == "full":
        return [Saved("the layer's input (checkpoint)", "tensor_parallel.checkpoint "
                      "(megatron/core/tensor_parallel/random.py, CheckpointFunction)",
                      ACT * T * h // shard, f"2·{res}", None)]
    stats = STAT * (2 if c.norm != "rmsnorm" else 1)
    stat_name = "mean and 1/σ" if c.norm != "rmsnorm" else "1/σ"
    out: list[Saved] = []
    gated = c.mlp_kind.gated
    for where, proj in (("input_layernorm", "linear_qkv"), ("pre_mlp_layernorm", "linear_fc1")):
        out.append(Saved(f"{where}: its input (the residual stream)",
                         f"TE LayerNormLinear ({proj}): inputmat", ACT * T * h // shard,
                         f"2·{res}", K_NORM_IN))
        out.append(Saved(f"{where}: {stat_name} (fp32, one per token)",
                         f"TE LayerNormLinear ({proj}): mu, rsigma", stats * T // shard,
                         f"{stats}·s·b{'/t' if s.sp else ''}", None))
        out.append(Saved(f"{proj}: its input, the norm's output"
                         + (" (the sequence shard; all-gathered again in backward)" if s.sp
                            else ""), f"TE LayerNormLinear ({proj}): ln_out",
                         ACT * T * h // shard, f"2·{res}",
                         K_QKV_IN if proj == "linear_qkv" else K_FC1_IN))
        if proj == "linear_qkv":
            out += _attention(T, a, g, d, s)
            out.append(Saved("linear_proj: its input, the attention output O",
                             "TE Linear (linear_proj): inputmat (flash: the same storage as "
                             "its saved O)", ACT * T * a * d, "2·s·b·a·d_k/t", K_PROJ_IN))
            if s.dropout:
                out.append(Saved("attention's hidden dropout mask (1 byte)",
                                 "fused bias_dropout_add (megatron/core/fusions/"
                                 "fused_bias_dropout.py)", MASK * T * h // shard, f"1·{res}",
                                 K_HID_MASK))
    width = 2 * f if gated else f
    act = "SwiGLU" if c.mlp_kind.activation.startswith("silu") else "GELU"
    out.append(Saved(f"linear_fc1's output, the fused bias-{act}'s input",
                     f"megatron/core/fusions/fused_bias_{'swiglu' if gated else 'gelu'}.py",
                     ACT * T * width, f"2·s·b·{'2·' if gated else ''}d_ff/t", K_ACT_IN))
    out.append(Saved(f"linear_fc2: its input, the {act} output", "TE Linear (linear_fc2): inputmat",
                     ACT * T * f, "2·s·b·d_ff/t", K_FC2_IN))
    if s.dropout:
        out.append(Saved("MLP's hidden dropout mask (1 byte)", "fused bias_dropout_add",
                         MASK * T * h // shard, f"1·{res}", K_HID_MASK))
    return out


def _attention(T: int, a: int, g: int, d: int, s: Setting) -> list[Saved]:
    out = [Saved("Q and K (for QKᵀ)" if s.kernel == UNFUSED else "Q and K (flash attention)",
                 "core attention", ACT * T * (a + g) * d, "2·s·b·(a + a_kv)·d_k/t", K_QK),
           Saved("V", "core attention", ACT * T * g * d, "2·s·b·a_kv·d_k/t", K_V)]
    if s.recompute == "selective":  # the core is checkpointed: only its inputs stay
        return out
    if s.kernel == FLASH:
        out.append(Saved("softmax log-sum-exp (fp32, one per row)",
                         "TE flash/fused attention: softmax_lse", STAT * a * T, "4·a·s·b/t", None))
        return out
    out.append(Saved("softmax output", "FusedScaleMaskSoftmax", ACT * a * T * T, "2·a·s²·b/t",
                     K_SOFTMAX))
    if s.dropout:
        out.append(Saved("attention dropout mask (1 byte)", "attention_dropout",
                         MASK * a * T * T, "a·s²·b/t", K_ATT_MASK))
        out.append(Saved("attention dropout output (the values' matmul input)", "core attention "
                         "(bmm with V)", ACT * a * T * T, "2·a·s²·b/t", K_ATT_DROP))
    return out


def recomputed(c: ModelConfig, s: Setting) -> int:
    """Bytes one layer holds beyond what it keeps while its recomputation runs (the largest
    moment of the backward pass): full — the whole layer's set; selective — the attention
    core's (softmax, masks, or flash's statistics)."""
    if s.recompute == "none":
        return 0
    kept = sum(x.bytes for x in layer(c, s))
    whole = sum(x.bytes for x in layer(c, Setting(s.seq, s.tp, s.sp, s.dropout, s.kernel)))
    return whole - kept


def first_stage(c: ModelConfig, s: Setting) -> list[Saved]:
    """The embedding's saved tensors (b = 1): the token ids (int64) its backward pass needs,
    and with dropout the embedding dropout's mask (Megatron's theoretical_memory_usage.py
    counts both: 8·s·b and s·b·h)."""
    out = [Saved("token ids (int64) for the embedding's backward", "VocabParallelEmbedding",
                 IDS * s.seq, "8·s·b")]
    if s.dropout:
        shard = s.tp if s.sp else 1
        out.append(Saved("embedding dropout mask (1 byte)", "LanguageModelEmbedding.embedding_dropout",
                         MASK * s.seq * c.d_model // shard, f"1·s·b·h{'/t' if s.sp else ''}"))
    return out


def rope_bytes(c: ModelConfig, s: Setting) -> int:
    """The fp32 RoPE frequencies every stage's GPTModel computes once per micro-batch (s × d_k,
    not × b) and its layers' apply_rotary_pos_emb save (one storage they share)
    (megatron/core/models/common/embeddings/rotary_pos_embedding.py)."""
    return STAT * s.seq * c.d_k if c.positions == "rope" else 0


def padded_vocab(c: ModelConfig, tp: int, divisible_by: int = 128) -> int:
    """Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by · tp
    (megatron/training/tokenizer/tokenizer.py, _vocab_size_with_padding; default 128)."""
    m = divisible_by * tp
    return -(-c.vocab_size // m) * m


def last_stage(c: ModelConfig, s: Setting) -> list[Saved]:
    """The final norm, the output layer and the vocab-parallel cross-entropy (b = 1):
    Megatron's theoretical_memory_usage.py counts 4·s·b·h·(1 + V/h) for them (with SP)."""
    shard = s.tp if s.sp else 1
    res = f"s·b·h{'/t' if s.sp else ''}"
    stats = STAT * (2 if c.norm != "rmsnorm" else 1)
    v = padded_vocab(c, s.tp) // s.tp
    return [Saved("final_layernorm: its input", "TE LayerNorm/RMSNorm (final_layernorm)",
                  ACT * s.seq * c.d_model // shard, f"2·{res}"),
            Saved("final_layernorm: its statistics (fp32)", "TE LayerNorm/RMSNorm",
                  stats * s.seq // shard, f"{stats}·s·b{'/t' if s.sp else ''}"),
            Saved("output_layer: its input, the final norm's output", "ColumnParallelLinear "
                  "(output_layer)", ACT * s.seq * c.d_model // shard, f"2·{res}"),
            Saved("cross-entropy: the softmax of this rank's logits (fp32)",
                  "vocab_parallel_cross_entropy (megatron/core/tensor_parallel/cross_entropy.py)",
                  STAT * s.seq * v, "4·s·b·V_pad/t"),
            Saved("cross-entropy: target mask and masked targets", "vocab_parallel_cross_entropy",
                  (MASK + IDS) * s.seq, "(1 + 8)·s·b")]
