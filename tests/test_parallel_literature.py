"""The papers' own figures beside the planner's numbers.

Every expected value here is a figure or formula printed in the paper cited: the ZeRO paper's
Figure 1, Korthikanti et al.'s per-layer activation formulas (their Table 2), and
Megatron-LM's end-to-end training-time estimate. Where this model differs from the one the
paper describes, the difference is itemized term by term (hand algebra below), so that our
ledger-derived number equals theirs plus the listed differences exactly.
"""
from fractions import Fraction

from accounting import get_preset
from accounting.planning.parallel import activations as A
from accounting.planning.parallel.layout import Layout
from accounting.planning.parallel.shards import BLOCK, split
from accounting.literature.memory_formulas import zero_paper_bytes
from accounting.planning.parallel.step import megatron_seconds


# ---- ZeRO (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
# Parameter Models", SC20), Figure 1: Ψ = 7.5B, N_d = 64, K = 12 ----------------------------
def test_zero_paper_figure_1():
    psi, n_d = 7_500_000_000, 64
    gb = [zero_paper_bytes(psi, n_d, stage) / 10**9 for stage in range(4)]
    # Figure 1 prints 120 GB, 31.4 GB, 16.6 GB and 1.9 GB
    assert [round(float(x), 1) for x in gb] == [120.0, 31.4, 16.6, 1.9]
    # the exact values behind the rounding: (2 + 2 + 12/64)·7.5, (2 + 14/64)·7.5, 16·7.5/64
    assert gb[1] == Fraction(2 + 2, 1) * Fraction(15, 2) + Fraction(12, 64) * Fraction(15, 2)
    assert gb[3] == Fraction(15, 8)


# ---- Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
# Models", §4 and Table 2: activation bytes per layer, s = sequence, b = micro-batch,
# h = hidden size, a = heads, t = tensor-parallel degree, 2-byte activations, 1-byte masks ----
def korthikanti(s, b, h, a, t, sp=False, selective=False):
    if selective:  # with TP and SP: sbh/t·34
        return Fraction(s * b * h * 34, t)
    if sp:  # sbh/t·(34 + 5as/h)
        return Fraction(s * b * h, t) * (34 + Fraction(5 * a * s, h))
    if t > 1:  # sbh·(10 + 24/t + 5as/(ht))
        return s * b * h * (10 + Fraction(24, t) + Fraction(5 * a * s, h * t))
    return s * b * h * (34 + Fraction(5 * a * s, h))  # sbh·(34 + 5as/h)


def ours(config, s, t, sp=False, selective=False, megatron_sp=False):
    """Bytes one block saves on TP rank 0, from the ledger, as the planner counts them: fp32
    (this model's default precision; 4-byte activations, a 1-byte boolean mask)."""
    lo = Layout(t, tp=t, sp=sp)
    sp_ = split(config, None, "selective" if selective else "none")
    return sum(r.bytes.at(1) for r in A.rows(sp_, lo, s, megatron_sp=megatron_sp)
               if r.place == BLOCK)


def test_korthikanti_per_layer_activations_gpt2_xl():
    """GPT-2 XL (openai-community/gpt2-xl: h = 1,600, a = 25 heads, GELU MLP of 4h, LayerNorm)
    at s = 1,000 (divisible by t = 5, which divides the 25 heads), b = 1.

    Korthikanti's 34·sbh + 5·as²b bytes per layer are, in 2-byte activations: attention —
    the QKV input 2sbh, Q and K 4sbh, the softmax output 2as²b, its dropout output 2as²b, V
    2sbh, the output projection's input 2sbh; MLP — the first linear's input 2sbh, the GeLU
    input 8sbh, the second linear's input 8sbh; the two LayerNorm inputs 4sbh — that is
    32sbh + 4as²b, or 16sbh + 2as²b elements; and 1-byte dropout masks: as²b (attention) +
    2sbh (after the attention and the MLP).

    This model (model/, the CS336 course's code at GPT-2's shape) differs, in elements:
      − no dropout: no masks, and no dropout output (−as²b);
      − LayerNorm op by op: it keeps x − mean and the normalized x (sbh each) and the std
        (sb), not its input, in each of the two norms: −2sbh + 4sbh + 2sb;
      − softmax op by op: besides its output it keeps the masked scores and exp (as²b each)
        and the row max and sum (asb each): +2as²b + 2asb;
      − GELU-tanh op by op: besides its input it keeps 0.5·x, tanh(…) and 1 + tanh(…)
        (4sbh each): +12sbh;
      − the boolean causal mask, s² bytes, on every TP rank;
      − fp32 (4 bytes per element) where the paper counts 2.
    So ours = 4·(16sbh + 2as²b − as²b − 2sbh + 4sbh + 2sb + 2as²b + 2asb + 12sbh) + s²
            = 4·(30sbh + 3as²b + 2sb + 2asb) + s².
    """
    c = get_preset("openai-community/gpt2-xl")
    s, b, h, a, t = 1000, 1, 1600, 25, 5
    sbh, sb, asb, as2b = s * b * h, s * b, a * s * b, a * s * s * b
    masks = as2b + 2 * sbh
    theirs = korthikanti(s, b, h, a, 1)
    assert theirs == 34 * sbh + 5 * as2b == 179_400_000
    elements = (theirs - masks) / 2
    assert elements == 16 * sbh + 2 * as2b
    assert ours(c, s, 1) == 4 * (elements - as2b - 2 * sbh + 4 * sbh + 2 * sb + 2 * as2b
                                 + 2 * asb + 12 * sbh) + s * s == 493_208_000
    # tensor parallelism, t = 5: theirs sbh(10 + 24/t + 5as/(ht)) — replicated the LayerNorm
    # inputs, the QKV and MLP inputs (8sbh) and two masks (2sbh); split 24sbh and the core's
    # 5as²b. Ours keeps replicated the LayerNorm internals (4sbh + 2sb elements), the QKV and
    # MLP inputs (2sbh) and the mask (s²); splits Q, K, V, the output projection's input and
    # the MLP's five d_ff-wide tensors (24sbh) and the core (3as²b + 2asb)
    assert korthikanti(s, b, h, a, t) == sbh * 10 + Fraction(24 * sbh + 5 * as2b, t) == 48_680_000
    assert ours(c, s, t) == 4 * (6 * sbh + 2 * sb) + s * s \
        + Fraction(4 * (24 * sbh + 3 * as2b + 2 * asb), t) == 130_168_000
    # sequence parallelism: theirs sbh/t·(34 + 5as/h) — everything split. torch's
    # SequenceParallel saves the all-gathered inputs of the column-parallel matmuls (the two
    # norm outputs) whole; Megatron-LM saves their shards and gathers them again in the
    # backward pass (megatron_sp=True counts that)
    assert korthikanti(s, b, h, a, t, sp=True) == Fraction(34 * sbh + 5 * as2b, t) == 35_880_000
    split_part = Fraction(4 * (4 * sbh + 2 * sb) + 4 * (24 * sbh + 3 * as2b + 2 * asb), t)
    assert ours(c, s, t, sp=True) == 4 * 2 * sbh + s * s + split_part == 109_681_600
    assert ours(c, s, t, sp=True, megatron_sp=True) \
        == Fraction(4 * 2 * sbh, t) + s * s + split_part == 99_441_600
    # selective recomputation with TP and SP: theirs sbh/t·34 (the core's 5as²b recomputed).
    # Ours (torch.utils.checkpoint on the attention core) keeps the core's inputs — Q, K and V
    # as the projections made them (3sbh, as before) and the mask — and none of the core's
    # tensors: (3as²b + 2asb)/t fewer elements
    assert korthikanti(s, b, h, a, t, sp=True, selective=True) == Fraction(34 * sbh, t) == 10_880_000
    assert ours(c, s, t, sp=True, selective=True, megatron_sp=True) \
        == Fraction(4 * (30 * sbh + 2 * sb), t) + s * s == 39_401_600


# ---- Megatron-LM (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on
# GPU Clusters Using Megatron-LM", SC21), §5.1: end-to-end time ≈ 8TP/(nX); GPT-3 175B on
# 1,024 A100s at X = 140 TFLOP/s per GPU, T = 300B tokens: "approximately 34 days" -------------
def test_megatron_end_to_end_estimate_gpt3():
    seconds = megatron_seconds(300 * 10**9, 175 * 10**9, 1024, 140 * 10**12)
    assert round(seconds / 86400) == 34
    assert seconds == Fraction(8 * 300 * 175 * 10**18, 1024 * 140 * 10**12)
    # without recomputation the same count gives 6TP/(nX)
    assert megatron_seconds(300 * 10**9, 175 * 10**9, 1024, 140 * 10**12, recompute=False) \
        == seconds * Fraction(6, 8)
