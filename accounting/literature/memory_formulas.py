"""The literature's training-memory formulas, each written once, as its source writes it.

Every function takes the source's own symbols (no ModelConfig: mapping a plan onto them,
and reconciling them with a stack's exact count, is memory_compare.py's job). Exact:
ints where integral, Fractions where the source divides.

Sources:
* Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
  arXiv:2205.05198, §4.1-4.2 and Table 2: activation bytes per transformer layer (s sequence,
  b micro-batch, h hidden, a heads, t tensor-parallel size; 16-bit activations, 1-byte
  dropout masks).
* Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
  Models", SC20, §5.1 and Figure 1: model-state bytes per GPU, (2 + 2 + K)·Ψ and its three
  partitioned stages (K = 12 for mixed-precision Adam).
* NVIDIA/Megatron-LM, megatron/training/theoretical_memory_usage.py:
  compute_weight_and_optimizer_memory (18 bytes per parameter, 6 + 12/d with the
  distributed optimizer: bf16 parameter 2, fp32 gradient 4, fp32 master, m and v 12 — the
  distributed optimizer documentation's table, "bf16 param, fp32 grads: 18 | 6 + 12/d")
  and compute_activation_memory (per layer s·b·h·(18 + 4·ffn/h) with SP and selective
  recomputation; sbh·(10 + 24/t) without SP).
* Anthony, Biderman, Schoelkopf 2023, "Transformer Math 101", EleutherAI blog
  (https://blog.eleuther.ai/transformer-math/): mixed-precision training holds 2 bytes per
  parameter of model weights, 2 of gradients (fp16/bf16) and 12 of AdamW state (fp32
  copy, momentum, variance), each sharded by its ZeRO stage and divided by TP·PP;
  activations sbhL(10 + 24/t + 5as/(ht)) without recomputation, 2sbhL with full.
"""
from __future__ import annotations

from fractions import Fraction

from accounting.literature.formulas import Number, exact

# ---- Korthikanti et al. 2022 --------------------------------------------------------------
NO_PARALLELISM, TENSOR, TENSOR_SEQUENCE, TENSOR_SELECTIVE, TENSOR_SEQUENCE_SELECTIVE, FULL = (
    "no parallelism", "tensor parallel", "tensor + sequence parallel",
    "tensor parallel + selective recomputation",
    "tensor + sequence parallel + selective recomputation", "full recomputation")


def korthikanti_row(sp: bool, selective: bool, full: bool, t: int) -> str:
    if full:
        return FULL
    if t == 1 and not selective:
        return NO_PARALLELISM
    return {(False, False): TENSOR, (True, False): TENSOR_SEQUENCE,
            (False, True): TENSOR_SELECTIVE, (True, True): TENSOR_SEQUENCE_SELECTIVE}[(sp, selective)]


def korthikanti_layer(row: str, s: int, b: int, h: int, a: int, t: int = 1) -> Number:
    """Table 2: activation bytes of one transformer layer."""
    sbh = s * b * h
    return exact({NO_PARALLELISM: sbh * (34 + Fraction(5 * a * s, h)),
                  TENSOR: sbh * (10 + Fraction(24, t) + Fraction(5 * a * s, h * t)),
                  TENSOR_SEQUENCE: Fraction(sbh, t) * (34 + Fraction(5 * a * s, h)),
                  TENSOR_SELECTIVE: sbh * (10 + Fraction(24, t)),
                  TENSOR_SEQUENCE_SELECTIVE: Fraction(34 * sbh, t),
                  FULL: 2 * sbh}[row])


# the paper's terms (§4.1), in bytes, for the reconciliation: (term, bytes); the names are
# those of accounting/planning/parallel/megatron.py's `paper` tags
def korthikanti_terms(s: int, b: int, h: int, a: int, t: int, sp: bool, selective: bool,
                      ffn: int | None = None) -> list[tuple[str, Number]]:
    """§4.1's attention (11sbh + 5as²b), MLP (19sbh) and LayerNorm (4sbh) terms with §4.2's
    splits (TP divides the attention and MLP cores, SP the rest). `ffn`: the MLP width
    (Megatron's theoretical_memory_usage.py generalizes 4h to ffn_hidden_size)."""
    sbh, f = s * b * h, 4 * h if ffn is None else ffn
    r = t if sp else 1  # the sequence-parallel region
    core = 0 if selective else 1
    return [("LayerNorm inputs", Fraction(4 * sbh, r)), ("QKV input", Fraction(2 * sbh, r)),
            ("Q and K", Fraction(4 * sbh, t)), ("V", Fraction(2 * sbh, t)),
            ("softmax output", core * Fraction(2 * a * s * s * b, t)),
            ("attention dropout mask", core * Fraction(a * s * s * b, t)),
            ("attention dropout output", core * Fraction(2 * a * s * s * b, t)),
            ("output projection input", Fraction(2 * sbh, t)),
            ("hidden dropout masks", Fraction(2 * sbh, r)), ("MLP input", Fraction(2 * sbh, r)),
            ("GELU input", Fraction(2 * s * b * f, t)),
            ("second linear input", Fraction(2 * s * b * f, t))]


# ---- the ZeRO paper -----------------------------------------------------------------------
ZERO_PAPER_STAGES = ("baseline", "P_os", "P_os+g", "P_os+g+p")


def zero_parts(psi: Number, n_d: int, stage: int, k: int = 12) -> dict[str, Fraction]:
    """§5.1 / Figure 1: fp16 parameters (2Ψ), gradients (2Ψ) and K·Ψ of optimizer state;
    each stage divides one more of them by the data-parallel degree N_d."""
    p, g, o = Fraction(2 * psi), Fraction(2 * psi), Fraction(k * psi)
    return {"parameters": p / n_d if stage >= 3 else p,
            "gradients": g / n_d if stage >= 2 else g,
            "optimizer state": o / n_d if stage >= 1 else o}


def zero_paper_bytes(psi: int, n_d: int, stage: int, k: int = 12) -> Fraction:
    """Model-state bytes per GPU (Figure 1)."""
    return sum(zero_parts(psi, n_d, stage, k).values(), Fraction(0))


# ---- Megatron-LM's theoretical_memory_usage.py --------------------------------------------
def megatron_layer_params(h: int, ffn: int, a: int, groups: int, kv_channels: int,
                          swiglu: bool, rmsnorm: bool) -> Fraction:
    """num_parameters_in_transformer_layer_dense: 2·h·(ffn·(3/2 if swiglu) + norm_size) +
    2·h·h·(1 + groups/a)·(kv_channels·a/h) (norm_size 1 for RMSNorm, 2 for LayerNorm)."""
    norm = 1 if rmsnorm else 2
    return (2 * h * (ffn * (Fraction(3, 2) if swiglu else 1) + norm)
            + 2 * h * h * (1 + Fraction(groups, a)) * Fraction(kv_channels * a, h))


def megatron_most_loaded_shard(layers: int, layer_params: Number, h: int, vocab_padded: int,
                               rmsnorm: bool, untied: bool, tp: int, pp: int) -> Fraction:
    """num_parameters_on_most_loaded_model_shard: (block/pp + embedding)/tp, plus the output
    layer when untied and pp = 1 (the block includes the final norm)."""
    block = layers * layer_params + (1 if rmsnorm else 2) * h
    emb = h * vocab_padded
    shard = (Fraction(block, pp) + emb) / tp
    return shard + (Fraction(emb, tp) if untied and pp == 1 else 0)


def megatron_bytes_per_parameter(distributed_optimizer: bool, d: int) -> dict[str, Fraction]:
    """18, or 6 + 12/d: bf16 parameter 2, fp32 gradient 4, fp32 master + Adam m, v 12."""
    return {"parameters": Fraction(2), "gradients": Fraction(4),
            "optimizer state": Fraction(12, d) if distributed_optimizer else Fraction(12)}


def megatron_layer_activations(s: int, b: int, h: int, ffn: int, t: int, sp_selective: bool
                               ) -> Fraction:
    """Per layer: s·b·h·(18 + 4·ffn/h)/t (compute_activation_memory, SP and selective) or
    s·b·h·(10 + 24/t) (compute_activation_memory_without_sp)."""
    if sp_selective:
        return Fraction(s * b * h, t) * (18 + Fraction(4 * ffn, h))
    return s * b * h * (10 + Fraction(24, t))


# ---- EleutherAI's Transformer Math 101 ----------------------------------------------------
def transformer_math_parts(n: Number, tp: int, pp: int, dp: int, zero: int) -> dict[str, Fraction]:
    """Mixed-precision AdamW per GPU: 2 bytes of weights, 2 of gradients, 12 of optimizer
    state per parameter, over TP·PP; ZeRO-1/2/3 divide the optimizer, + gradients, +
    weights by the data-parallel degree."""
    return zero_parts(Fraction(n, tp * pp), dp, zero)


def transformer_math_layer(s: int, b: int, h: int, a: int, t: int, recompute: str) -> Fraction:
    """Activations per layer: sbh(10 + 24/t + 5as/(ht)); 2sbh with full recomputation;
    sbh(10 + 24/t) with selective (the attention scores recomputed)."""
    sbh = s * b * h
    if recompute == "full":
        return Fraction(2 * sbh)
    tail = 0 if recompute == "selective" else Fraction(5 * a * s, h * t)
    return sbh * (10 + Fraction(24, t) + tail)
