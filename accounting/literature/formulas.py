"""The literature's FLOP formulas, each written once, as its paper writes it.

Every function takes the paper's own symbols (no ModelConfig here: mapping a config onto a
paper's symbols, and saying where its assumptions do not fit, is accounting/literature/compare.py's
job). Results are exact: Python ints where the formula is integral, Fractions where the
paper divides; nothing is rounded here.

Sources (the equation or table each function follows is cited on it):

* Kaplan et al. 2020, "Scaling Laws for Neural Language Models", arXiv:2001.08361, §2.1
  and Table 1.
* Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models" (Chinchilla),
  arXiv:2203.15556, Appendix F and Table A4.
* Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
  Using Megatron-LM", arXiv:2104.04473, §5.1 eqs. (2)-(4).
* Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
  Models", arXiv:2205.05198, Appendix A (model and hardware FLOPs).
* Chowdhery et al. 2022, "PaLM: Scaling Language Modeling with Pathways",
  arXiv:2204.02311, Appendix B (model FLOPs utilization).
* Karpathy, nanoGPT, model.py: GPT.estimate_mfu and GPT.get_num_params.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

Number = int | Fraction


def exact(x: Number) -> Number:
    """An int where the value is integral, else the Fraction."""
    x = Fraction(x)
    return x.numerator if x.denominator == 1 else x


# ---- Kaplan et al. 2020, Table 1 ----------------------------------------------------------

def kaplan_params(n_layer: int, d_model: int, d_attn: int, d_ff: int) -> int:
    """Table 1, "Total (Non-Embedding)": N = 2·d_model·n_layer·(2·d_attn + d_ff).
    (QKV 3·d_model·d_attn, project d_attn·d_model and feedforward 2·d_model·d_ff per layer;
    with d_attn = d_ff/4 = d_model it is the paper's N ≈ 12·n_layer·d_model², eq. 2.1.)"""
    return 2 * d_model * n_layer * (2 * d_attn + d_ff)


def kaplan_forward_per_token(n_layer: int, d_model: int, d_attn: int, d_ff: int,
                             n_ctx: int) -> int:
    """Table 1: C_forward = 2N + 2·n_layer·n_ctx·d_attn FLOPs per token (add-multiplies
    counted as 2). The second term is Table 1's "Attention: Mask" row."""
    return 2 * kaplan_params(n_layer, d_model, d_attn, d_ff) + 2 * n_layer * n_ctx * d_attn


def kaplan_training_per_token(n_layer: int, d_model: int, d_attn: int, d_ff: int,
                              n_ctx: int) -> int:
    """§2.1: the backward pass is "approximately twice the compute as the forwards pass",
    so training ≈ 3·C_forward (the paper then drops the context term: C ≈ 6N)."""
    return 3 * kaplan_forward_per_token(n_layer, d_model, d_attn, d_ff, n_ctx)


# ---- Hoffmann et al. 2022 (Chinchilla), Appendix F ----------------------------------------

@dataclass(frozen=True)
class ChinchillaTerms:
    """Appendix F's forward FLOPs of one sequence, term by term, as the paper lists them."""
    embeddings: int  # 2 × seq_len × vocab_size × d_model
    kqv: int  # 2 × 3 × seq_len × d_model × (key_size × num_heads)
    logits: int  # K @ Q: 2 × seq_len × seq_len × (key_size × num_heads)
    softmax: int  # 3 × num_heads × seq_len × seq_len
    reduction: int  # softmax @ query: 2 × seq_len × seq_len × (key_size × num_heads)
    final_linear: int  # 2 × seq_len × (key_size × num_heads) × d_model
    dense: int  # 2 × seq_len × (d_model × ffw_size + d_model × ffw_size)
    final_logits: int  # 2 × seq_len × d_model × vocab_size
    num_layers: int

    @property
    def attention(self) -> int:
        return self.kqv + self.logits + self.softmax + self.reduction + self.final_linear

    def forward(self, embeddings_and_logits: bool = True) -> int:
        """"Total forward pass FLOPs: embeddings + num_layers × (total_attention +
        dense_block) + logits". Without the embedding and final-logit terms is the count
        that reproduces Table A4 (see tests/test_formulas.py)."""
        body = self.num_layers * (self.attention + self.dense)
        return body + (self.embeddings + self.final_logits if embeddings_and_logits else 0)


def chinchilla_terms(seq_len: int, vocab_size: int, d_model: int, num_heads: int,
                     key_size: int, ffw_size: int, num_layers: int) -> ChinchillaTerms:
    """Appendix F: "embeddings as a one-hot matmul", attention not causal (full
    seq_len × seq_len), softmax as 3 FLOPs per score."""
    kh = key_size * num_heads
    return ChinchillaTerms(
        embeddings=2 * seq_len * vocab_size * d_model,
        kqv=2 * 3 * seq_len * d_model * kh,
        logits=2 * seq_len * seq_len * kh,
        softmax=3 * num_heads * seq_len * seq_len,
        reduction=2 * seq_len * seq_len * kh,
        final_linear=2 * seq_len * kh * d_model,
        dense=2 * seq_len * (d_model * ffw_size + d_model * ffw_size),
        final_logits=2 * seq_len * d_model * vocab_size,
        num_layers=num_layers,
    )


def chinchilla_training(forward: int) -> int:
    """Appendix F: "As in Kaplan et al. (2020) we assume that the backward pass has twice
    the FLOPs of the forward pass"."""
    return 3 * forward


# ---- Narayanan et al. 2021 (Megatron-LM), §5.1 --------------------------------------------
# B batch (sequences), s sequence length, l layers, h hidden size, V vocabulary. The paper
# assumes multi-head attention of width h and an h → 4h → h MLP.

def megatron_forward(B: int, s: int, l: int, h: int, V: int) -> int:
    """§5.1's derivation: each layer's forward is 24·B·s·h² + 4·B·s²·h (QKV 6Bsh², QKᵀ and
    attention over values 2Bs²h each, post-attention linear 2Bsh², MLP 16Bsh²) and the
    logit layer's is 2·B·s·h·V."""
    return 24 * B * s * l * h**2 + 4 * B * s**2 * l * h + 2 * B * s * h * V


def megatron_training(B: int, s: int, l: int, h: int, V: int, recompute: bool = True) -> Number:
    """Eq. (3), with activation recomputation (one extra forward of every layer; the
    logit layer is not recomputed): F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)).
    Without recomputation (§5.1's 3× forward): 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h))."""
    if recompute:
        return exact(96 * B * s * l * h**2 * (1 + Fraction(s, 6 * h) + Fraction(V, 16 * l * h)))
    return exact(72 * B * s * l * h**2 * (1 + Fraction(s, 6 * h) + Fraction(V, 12 * l * h)))


def megatron_params(l: int, h: int, V: int, s: int) -> Number:
    """Eq. (2): P = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)) (learned positions, biases)."""
    return exact(12 * l * h**2 * (1 + Fraction(13, 12 * h) + Fraction(V + s, 12 * l * h)))


def megatron_training_seconds(tokens: Number, params: Number, gpus: int,
                              flops_per_gpu: Number) -> Fraction:
    """Eq. (4): end-to-end training time ≈ 8·T·P/(n·X) (eq. 3 with s ≪ 6h and V ≪ 16·l·h,
    P ≈ 12·l·h², T tokens, n GPUs at X FLOP/s each)."""
    return Fraction(8 * Fraction(tokens) * Fraction(params)) / (gpus * Fraction(flops_per_gpu))


# ---- Korthikanti et al. 2022, Appendix A --------------------------------------------------

def korthikanti_model_flops(B: int, s: int, l: int, h: int, V: int) -> Number:
    """Model FLOPs per iteration: 72·B·s·l·h²·(1 + s/(6h) + V/(12·h·l)) (forward +
    backward, no recomputation: the numerator of MFU)."""
    return exact(72 * B * s * l * h**2 * (1 + Fraction(s, 6 * h) + Fraction(V, 12 * h * l)))


def korthikanti_hardware_flops_selective(B: int, s: int, l: int, h: int, V: int) -> Number:
    """Hardware FLOPs with selective activation recomputation, as the paper writes it:
    72·B·s·l·h²·(1 + s/(3h) + V/(12·h·l)). (The recomputed forward of QKᵀ and attention
    over values is 4·B·s²·l·h; s/(3h) instead of s/(6h) adds 12·B·s²·l·h — see
    literature.py.)"""
    return exact(72 * B * s * l * h**2 * (1 + Fraction(s, 3 * h) + Fraction(V, 12 * h * l)))


# ---- Chowdhery et al. 2022 (PaLM), Appendix B ---------------------------------------------

def palm_training_per_token(N: int, L: int, H: int, Q: int, T: int) -> int:
    """Appendix B: an N-parameter decoder-only model needs 6N matmul FLOPs per token
    (2N forward, 4N backward); dense self-attention adds 6·L·H·(2·Q·T): 6N + 12·L·H·Q·T
    (L layers, H heads, Q head dimension, T sequence length)."""
    return 6 * N + 12 * L * H * Q * T


def palm_forward_per_token(N: int, L: int, H: int, Q: int, T: int) -> int:
    """The forward third of Appendix B's count: 2N + 2·L·H·(2·Q·T)."""
    return 2 * N + 4 * L * H * Q * T


def mfu(tokens_per_second: Number, flops_per_token: Number, peak_flops: Number) -> Fraction:
    """Appendix B: MFU = achieved tokens/s over the peak throughput R = P/(FLOPs per token)."""
    return Fraction(tokens_per_second) * Fraction(flops_per_token) / Fraction(peak_flops)


# ---- nanoGPT (Karpathy), model.py ---------------------------------------------------------

def nanogpt_flops_per_token(N: int, n_layer: int, n_head: int, n_embd: int,
                            block_size: int) -> int:
    """GPT.estimate_mfu: L, H, Q, T = n_layer, n_head, n_embd//n_head, block_size;
    flops_per_token = 6*N + 12*L*H*Q*T, with N = get_num_params() — every parameter but the
    position embedding table (the tied token table is kept: it is the LM head's weight).
    T is block_size, the configured context, not the length of the batch."""
    Q = n_embd // n_head
    return 6 * N + 12 * n_layer * n_head * Q * block_size


# ---- 6N -------------------------------------------------------------------------------

def six_n(N: int) -> int:
    """Training FLOPs per token ≈ 6N (Kaplan et al. 2020 §2.1 with N non-embedding;
    Hoffmann et al. 2022's C = 6·D·N with N all parameters): 2N forward, 4N backward."""
    return 6 * N


def two_n(N: int) -> int:
    """Forward FLOPs per token ≈ 2N: one multiply-add per parameter."""
    return 2 * N
