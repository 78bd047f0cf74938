"""The papers' own figures beside the planner's numbers.

Every expected value here is a figure or formula printed in the paper cited: the ZeRO paper's
Figure 1, Korthikanti et al.'s per-layer activation formulas (their Table 2), and
Megatron-LM's end-to-end training-time estimate. Where this model differs from the one the
paper describes, the difference is itemized term by term (hand algebra below), so that our
ledger-derived number equals theirs plus the listed differences exactly.
"""
from fractions import Fraction

from accounting import get_preset
from accounting.planning.memory import get_precision
from accounting.planning.parallel import activations as A
from accounting.planning.parallel.layout import Layout
from accounting.planning.parallel.shards import BLOCK, split
from accounting.planning.parallel.states import zero_paper_bytes
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
    """Bytes one block saves on TP rank 0, from the ledger (bf16-mixed: 2-byte activations,
    1-byte mask), as the planner counts them."""
    lo = Layout(t, tp=t, sp=sp, recompute="selective" if selective else "none")
    rows = A.rows(split(config), lo, get_precision("bf16-mixed"), s, megatron_sp=megatron_sp)
    return sum(r.bytes.at(1) for r in rows
               if r.place == BLOCK and r.record.saved and not (selective and r.core))


def test_korthikanti_per_layer_activations_gpt2_xl():
    """GPT-2 XL (openai-community/gpt2-xl: h = 1,600, a = 25 heads, GELU MLP of 4h, LayerNorm)
    at s = 1,000 (divisible by t = 5, which divides the 25 heads), b = 1.

    Korthikanti's 34·sbh + 5·as²b per layer counts, in bytes: attention: the QKV input 2sbh,
    Q and K 4sbh, the softmax output 2as²b, its dropout mask as²b and output 2as²b, V 2sbh,
    the output projection's input 2sbh and its dropout mask sbh; MLP: the first linear's
    input 2sbh, the GeLU input 8sbh, the second linear's input 8sbh, a dropout mask sbh;
    two LayerNorm inputs 4sbh.

    This model (model/, the CS336 course's code at GPT-2's shape) differs:
      − no dropout: no masks (as²b + 2sbh) and no dropout output (2as²b);
      − LayerNorm op by op: it keeps x − mean and the normalized x (2sbh each) and the
        std (2sb), not its input, in each of the two norms: −4sbh + 8sbh + 4sb;
      − softmax op by op: besides its output it keeps the masked scores and exp (2as²b each)
        and the row max and sum (2asb each): +4as²b + 4asb;
      − GELU-tanh op by op: besides its input it keeps 0.5·x, tanh(…) and 1 + tanh(…)
        (8sbh each): +24sbh;
      − the boolean causal mask, s² bytes, replicated on every TP rank.
    And our default precision is fp32 (4-byte activations): compared here at bf16 mixed
    precision, the paper's 2 bytes.
    """
    c = get_preset("openai-community/gpt2-xl")
    s, b, h, a, t = 1000, 1, 1600, 25, 5
    sbh, sb, asb, as2b = s * b * h, s * b, a * s * b, a * s * s * b
    # t = 1: theirs − dropout + our extras
    theirs = korthikanti(s, b, h, a, 1)
    assert theirs == 34 * sbh + 5 * as2b == 179_400_000
    assert ours(c, s, 1) == theirs - (as2b + 2 * sbh) - 2 * as2b - 4 * sbh + 8 * sbh + 4 * sb \
        + 4 * as2b + 4 * asb + 24 * sbh + s * s == 247_104_000
    # tensor parallelism, t = 5: theirs sbh(10 + 24/t + 5as/(ht)); their replicated 10sbh is the
    # LayerNorm inputs, the QKV and MLP inputs and two dropout masks. Ours keeps replicated the
    # LayerNorm internals (8sbh + 4sb), the QKV and MLP inputs (4sbh) and the mask (s²); every
    # per-head and d_ff tensor is split: (48sbh + 6as²b + 4asb)/t
    assert korthikanti(s, b, h, a, t) == sbh * 10 + Fraction(24 * sbh + 5 * as2b, t) == 48_680_000
    assert ours(c, s, t) == 12 * sbh + 4 * sb + s * s + Fraction(48 * sbh + 6 * as2b + 4 * asb, t) \
        == 65_584_000
    # sequence parallelism: theirs sbh/t·(34 + 5as/h) — everything split. torch's
    # SequenceParallel saves the all-gathered inputs of the column-parallel matmuls (the two
    # norm outputs, 4sbh) whole; Megatron-LM saves their shards and gathers them again in the
    # backward pass (megatron_sp=True counts that)
    assert korthikanti(s, b, h, a, t, sp=True) == Fraction(34 * sbh + 5 * as2b, t) == 35_880_000
    shared = Fraction(8 * sbh + 4 * sb + 48 * sbh + 6 * as2b + 4 * asb, t) + s * s
    assert ours(c, s, t, sp=True) == shared + 4 * sbh == 55_340_800
    assert ours(c, s, t, sp=True, megatron_sp=True) == shared + Fraction(4 * sbh, t) == 50_220_800
    # selective recomputation with TP and SP: theirs sbh/t·34 (the attention core's 5as²b is
    # recomputed). Ours drops the same tensors (scores, softmax, their row statistics)
    assert korthikanti(s, b, h, a, t, sp=True, selective=True) == Fraction(34 * sbh, t) == 10_880_000
    assert ours(c, s, t, sp=True, selective=True, megatron_sp=True) \
        == Fraction(8 * sbh + 4 * sb + 48 * sbh + 4 * sbh, t) + s * s == 20_200_800


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
