"""Megatron-Core with Transformer Engine (implementation MEGATRON, the `--stack megatron`
plans): where its fused modules run one kernel for several of model/'s ops, the ops run
(their FLOPs recorded) and the kernel saves what its backward pass takes. Everything else
(the linears, the flash kernel, the residual adds) is the builder's own op. The model is
Megatron's Float16Module: bf16 parameters, no autocast (walk's param_dtype bf16).

Sources (NVIDIA/Megatron-LM and NVIDIA/TransformerEngine, read from source: they need a GPU):
  * TE `LayerNormLinear` (transformer_engine/pytorch/module/layernorm_linear.py, backward:
    `tex.layernorm_bwd(dgrad, inputmat, mu, rsigma, ...)` / `rmsnorm_bwd(dgrad, inputmat,
    rsigma, ...)`; the weight gradient from `ln_out`, which under sequence parallelism is
    the saved sequence shard, all-gathered again in the backward pass): the fused norm +
    QKV (and norm + fc1) saves the norm's input, its output and fp32 statistics (mean and
    1/σ for LayerNorm, 1/σ for RMSNorm), one per token. TE `LayerNorm`/`RMSNorm` (the final
    norm) the same. TE `Linear` (linear_proj, linear_fc2) saves its input.
  * Under fp8 (`--precision fp8-te`, Trace._fp8_linear with Trace.megatron): LayerNormLinear
    saves `ln_out` quantized to fp8 instead (layernorm_linear.py, the forward's "Prepare
    backward state": ln_out_to_save, under SP the local shard gathered again in backward),
    once per fused module (linear_qkv reads it for Q, K and V; linear_fc1 for gate and up);
    TE `Linear` its input in fp8. Attention and the fused activations stay bf16.
  * TE `DotProductAttention`: flash/fused attention saves Q, K, V, the output O and the fp32
    log-sum-exp (the builder's fused kernel); its dropout mask is regenerated from the
    Philox state. The unfused path (`UnfusedDotProductAttention`, Megatron's
    `DotProductAttention`): baddbmm(Q, Kᵀ) on views (no copies), `FusedScaleMaskSoftmax`
    (scale, causal mask, softmax: one kernel that saves its output), attention dropout
    (its 1-byte mask and its output), bmm with V.
  * megatron/core/fusions/fused_bias_gelu.py, fused_bias_swiglu.py: the fused activation
    saves its input (fc1's output: both halves for SwiGLU); fc2 saves its output.
  * megatron/core/fusions/fused_bias_dropout.py: with dropout, the 1-byte mask of each hidden
    dropout (after attention and after the MLP); LanguageModelEmbedding.embedding_dropout.
  * TE's fused RoPE (`FusedRoPEFunc`, apply_rope_fusion): saves the fp32 frequencies, which
    GPTModel computes once per forward pass (s × d_k, shared by every layer).
  * megatron/core/tensor_parallel/cross_entropy.py (vocab_parallel_cross_entropy): saves the
    fp32 softmax of this rank's logits, the target mask and the masked targets.
The TORCHTITAN implementation (torchtitan's Llama) uses two of these: fused_norm, as torch's
nn.RMSNorm runs on CUDA (aten::_fused_rms_norm saves its input and the fp32 rstd:
tools/autograd/derivatives.yaml), and fused_rope without frequencies (its apply_rotary_emb
multiplies by a slice of the freqs_cis buffer: nothing new saved).
Korthikanti et al. 2022 (arXiv:2205.05198) §4.1-4.2 count the same tensors in 16 bits
(34·sbh + 5·as²b per layer); the norms' statistics are the "small buffers" they leave out.
Each tensor is its own storage: where Megatron keeps a view of a larger buffer (V is a
split of linear_qkv's fused output), the whole buffer may stay alive — not modelled.
"""
from __future__ import annotations

from accounting.ledger import records as R
from accounting.ledger.builder.common import DROPOUT_MASK
from accounting.ledger.trace import Sym, Trace
from accounting.units import BF16, BOOL, FP32


def fused_norm(t: Trace, norm, x: Sym, out_label: str, course: str) -> Sym:
    """TE's fused norm (LayerNormLinear's, or LayerNorm/RMSNorm): one kernel; keeps its input
    and the fp32 statistics, one per token (its output is saved by the linear reading it)."""
    with t.no_grad():  # the norm's ops, for their FLOPs; the kernel saves what follows
        y = norm.ops(x, out_label, course)
    m = f"{t.module}.{norm.name}" if t.module else norm.name
    desc = (f"torch's _fused_rms_norm ({m})" if t.titan else
            f"F.layer_norm in bf16, llm-foundry's LPLayerNorm ({m})" if t.foundry else
            f"F.layer_norm, transformers' nn.LayerNorm ({m})" if t.hf else
            f"TE {'LayerNorm' if norm.kind != 'rmsnorm' else 'RMSNorm'} ({m})")
    rows = x.shape[:-len(norm.width)]
    with t.scope(norm.name):
        t._saves(x, desc)
        for stat in (("mean", "1/σ") if norm.kind != "rmsnorm" else ("1/σ",)):
            t._saves(t.name(t.fresh(rows, FP32), f"{m}: {stat} (fp32, one per token)"), desc,
                     after=True)
    return y


def low_precision_norm(t: Trace, norm, x: Sym, out_label: str, course: str) -> Sym:
    """llm-foundry's LPLayerNorm (llmfoundry/models/layers/norm.py): under autocast it casts
    its input (and weight) to the autocast dtype and runs F.layer_norm with autocast off, so
    aten.native_layer_norm saves the bf16 copy of its input and its fp32 mean and 1/σ, one
    per token (tools/autograd/derivatives.yaml, native_layer_norm_backward)."""
    if t.autocast is not None and x.dtype != BF16:
        x = t.cast(x, BF16, f"{t.module}.{norm.name} input (bf16 copy, LPLayerNorm)"
                   if t.module else f"{norm.name} input (bf16 copy, LPLayerNorm)")
    return fused_norm(t, norm, x, out_label, course)


FLASH_CE_LSE = "flash-attn cross-entropy: log-sum-exp (fp32, one per token)"


def flash_cross_entropy(t: Trace, logits: Sym, targets: Sym) -> None:
    """flash-attn's CrossEntropyLoss (flash_attn/losses/cross_entropy.py over
    flash_attn/ops/triton/cross_entropy.py CrossEntropyLossFunction), llm-foundry's default
    loss (llmfoundry/models/mpt/modeling_mpt.py ComposerMPTCausalLM: loss_fn
    'fused_crossentropy'): one Triton kernel over the logits in their own dtype, no float32
    log-softmax; ctx.save_for_backward(logits, lse, labels), lse float32, one per row. Its
    backward writes softmax − one-hot into one new tensor of the logits' dtype
    (inplace_backward False): the planners' loss gradient (parallel/peak.py)."""
    desc = "flash-attn cross_entropy (Triton)"
    t._reads(desc, logits)
    t._saves(logits, desc)
    t._saves(targets, desc)
    t._saves(t.name(t.fresh(("B", "T"), FP32), FLASH_CE_LSE), desc, after=True)


def fused_activation(t: Trace, run, a: Sym, b: Sym | None, out: str) -> Sym:
    """Megatron's fused bias-GeLU or bias-SwiGLU: saves its input (fc1's output, both halves
    when gated); `run` computes the activation's ops (for their FLOPs)."""
    with t.no_grad():
        h = run()
    desc = "fused bias-" + ("SwiGLU" if b is not None else "GeLU") + " (megatron/core/fusions)"
    for x in (a,) + ((b,) if b is not None else ()):
        t._saves(x, desc)
    return t.name(Sym(h.shape, h.dtype, a.grad), out)


def dropout(t: Trace, x: Sym, where: str) -> Sym:
    """Dropout with p > 0 (Megatron's fused bias-dropout-add, or torch's): saves its 1-byte
    mask; with dropout off, nothing (x itself)."""
    if not getattr(t, "dropout", False):
        return x
    t._tick += 1
    y = t.name(Sym(x.shape, x.dtype, x.grad), f"{where} dropout output")
    if x.grad:
        t._saves(t.name(Sym(x.shape, BOOL, grad=False), f"{where} {DROPOUT_MASK} (1 byte)"),
                 f"dropout ({where})", after=True)
    return y


def fused_rope(t: Trace, x: Sym, freqs: Sym | None, out_label: str) -> Sym:
    """TE's fused RoPE: a new tensor; saves the frequencies (shared by every layer).
    torchtitan's apply_rotary_emb (freqs None): x.float() viewed as complex times a slice of
    the freqs_cis buffer (complex mul saves the other operand: the buffer's view, no new
    memory), back to x's dtype: a new tensor, nothing else saved."""
    t._tick += 1
    t._reads("fused RoPE" if freqs is not None else "apply_rotary_emb", x)
    if x.grad and freqs is not None:
        t._saves(freqs, "TE fused RoPE (FusedRoPEFunc)")
    return t.name(Sym(x.shape, x.dtype, x.grad, x.contiguous), out_label)


def unfused_core(att, q: Sym, k: Sym, v: Sym) -> Sym:
    """Megatron's unfused core: baddbmm(Q, Kᵀ) on views, FusedScaleMaskSoftmax (saves its
    output), attention dropout, bmm with V (saves the dropout's output and V)."""
    t = att.t
    qk, pv = att.records()
    view = lambda x: t.view(x, contiguous=True)  # noqa: E731 (strided views: no copies)
    dtype = t.matmul(view(q), view(k), qk)
    t._tick += 1  # scale, causal mask and softmax: one kernel
    probs = t.name(Sym(("B", "h", "T", "T"), dtype, q.grad or k.grad), "softmax output",
                   "softmax")
    t._saves(probs, "FusedScaleMaskSoftmax", after=True)
    probs = dropout(t, probs, "attention")
    t.matmul(probs, view(v), pv)
    return t.name(Sym(att.out_heads(), dtype), "attention-weighted values",
                  "attention-weighted values")


def vocab_parallel_cross_entropy(t: Trace, logits: Sym) -> None:
    """vocab_parallel_cross_entropy: the fp32 softmax of the logits (exp in place, divided
    by the all-reduced sum), the target mask and the masked targets."""
    t._reads("vocab_parallel_cross_entropy", logits)
    desc = "vocab_parallel_cross_entropy (megatron/core/tensor_parallel/cross_entropy.py)"
    t._saves(t.name(Sym(logits.shape, FP32, grad=True), "cross-entropy: softmax of the logits "
                    "(fp32)", "cross-entropy"), desc, after=True)
    rows = logits.shape[:-1]
    t._saves(t.name(t.fresh(rows, BOOL), "cross-entropy: target mask"), desc)
    t._saves(t.name(t.fresh(rows, R.INT64), "cross-entropy: masked targets"), desc)
