"""MFU and HFU under a named convention (accounting/planning/mfu.py), and the many-GPU time
at an end-to-end figure (--mfu-scope end-to-end): no bubble or communication added twice.

Expected values: hand algebra of the matmul FLOPs written here (Narayanan et al. 2021's
appendix count for a GPT with a 4h GELU MLP), the papers' own figures (GPT-3 175B on
1,024 A100s: "about 34 days"), and Kaplan et al.'s 6N, never the module's output.
"""
import json
from fractions import Fraction

import pytest

import cli_run
from accounting import get_preset
from accounting.planning.mfu import CAUSAL, SIX_N, sequence_flops, utilizations
from accounting.architecture.config import ModelConfig

DAY = 86400
# GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers, d 12,288, 96 heads, T 2,048, GPT-2's
# tokenizer padded to 51,200 as Megatron-LM does; GELU MLP of 4h, LayerNorm, biases, tied
# embeddings, learned positions.
GPT3 = ("--vocab-size", "51200", "--context-length", "2048", "--num-layers", "96",
        "--d-model", "12288", "--num-heads", "96", "--mlp", "gelu", "--positions", "learned",
        "--norm", "layernorm", "--qkv-bias", "--out-bias", "--mlp-bias", "--tie-embeddings")


def gpt(l=4, h=256, a=4, s=128, V=1000) -> ModelConfig:
    return ModelConfig(vocab_size=V, context_length=s, num_layers=l, d_model=h, num_heads=a,
                       d_ff=4 * h, mlp="gelu", positions="learned", norm="layernorm", qkv_bias=True,
                       out_bias=True, mlp_bias=True, tie_embeddings=True, name="gpt")


def test_executed_and_causal_counts_against_hand_algebra():
    # Per sequence (B = 1), Narayanan et al. 2021 appendix: forward 24·s·l·h² (QKV 6sh²,
    # out 2sh², MLP 16sh²) + 4·s²·l·h (QKᵀ and scores·V) + 2·s·h·V (LM head); backward twice.
    l, h, s, V = 4, 256, 128, 1000
    executed, causal, six = sequence_flops(gpt(l, h, 4, s, V), s)
    assert executed.model == 3 * (24 * s * l * h * h + 4 * s * s * l * h + 2 * s * h * V)
    # causal: the attention core over s(s+1)/2 (query, key) pairs instead of s²
    assert causal.model == executed.model - 3 * 4 * l * h * (s * s - s * (s + 1) // 2)
    # MaxText and NeMo halve the s² term: ours is the exact half plus the diagonal
    assert causal.model - (executed.model - 3 * 2 * s * s * l * h) == 3 * 2 * s * l * h
    assert executed.recomputed == causal.recomputed == six.recomputed == 0


def test_recomputation_is_in_hfu_only():
    l, h, s, V = 4, 256, 128, 1000
    c = gpt(l, h, 4, s, V)
    full = {x.convention: x for x in sequence_flops(c, s, "full")}
    # full recomputation runs every block's forward again, 24·s·l·h² + 4·s²·l·h (no head),
    # less the MLP's last matmul (2·s·4h·h = 8·s·h² per block): torch.utils.checkpoint
    # (non-reentrant, early stop on by default) stops recomputing once the last tensor the
    # backward needs is made, and no saved tensor of the block comes after W2. Narayanan et
    # al.'s count (and Megatron-LM's) runs the whole forward again.
    assert full["executed"].recomputed == 16 * s * l * h * h + 4 * s * s * l * h
    assert full[CAUSAL].recomputed == 16 * s * l * h * h + 4 * l * h * s * (s + 1) // 2
    sel = {x.convention: x for x in sequence_flops(c, s, "selective")}
    # the attention cores only, and of each only QKᵀ (2·s²·h): scores·V is the region's last
    # matmul, which early stop leaves out as above
    assert sel["executed"].recomputed == 2 * s * s * l * h
    assert sel[SIX_N].recomputed == 0  # 6N has no attention term to recompute


def test_six_n_counts_active_parameters():
    # Kaplan et al.: C = 6·N per token, N the parameters a token passes through. Mixtral
    # 8x7B runs 2 of its 8 experts: its 12.9B active (Mistral AI's figure: "12.9B active
    # parameters"), not its 46.7B.
    c = get_preset("mistralai/Mixtral-8x7B-v0.1")
    six = next(x for x in sequence_flops(c, 4096) if x.convention == SIX_N)
    n_active = Fraction(six.model, 6 * 4096)
    assert round(n_active / 10**8) == 129


def test_a_throughput_as_mfu_under_each_convention():
    # u = FLOPs per token · tokens/s / (n · peak), by hand for the executed count
    l, h, s, V = 4, 256, 128, 1000
    c = gpt(l, h, 4, s, V)
    per_token = Fraction(3 * (24 * s * l * h * h + 4 * s * s * l * h + 2 * s * h * V), s)
    u = utilizations(c, s, "none", Fraction(10**6), 8, Fraction(10**12))
    assert u[0].convention == "executed" and u[0].mfu == per_token * 10**6 / (8 * 10**12)
    assert u[0].hfu == u[0].mfu  # no recomputation
    assert u[1].mfu < u[0].mfu  # causal counts fewer FLOPs for the same throughput


def _json(capsys, *argv):
    code, out, err = cli_run.run(capsys, *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def test_gpt3_on_1024_a100s_end_to_end_is_the_papers_34_days(capsys):
    # Narayanan et al. 2021, §5.1: T = 300B tokens, n = 1,024 A100s at X = 140 TFLOP/s per
    # GPU (a hardware rate, recomputation counted), 8·T·P/(n·X), P = 175B: "about 34 days".
    paper = Fraction(8 * 300 * 10**9 * 175 * 10**9, 1024 * 140 * 10**12) / DAY
    assert round(paper) == 34
    base = ("plan", *GPT3, "--gpus", "1024", "--tp", "8", "--pp", "16", "--batch", "1536",
            "--gpu", "A100", "--precision", "bf16-mixed", "--recompute", "full",
            "--mfu", "140/312", "--tokens", str(300 * 10**9))
    e2e = _json(capsys, *base, "--mfu-scope", "end-to-end", "--hfu", "--mfu-convention", "6N")
    t = e2e["time_to_train"]["seconds"]
    days = Fraction(t["numerator"], t["denominator"]) / DAY
    assert round(days) == 34 and abs(days / paper - 1) < Fraction(1, 100)  # P = 174.6B here
    # the same figure read as the compute rate adds the bubble and the communication again
    # (issue 39: --mfu alone now means end to end; the compute reading is asked by name)
    comp = _json(capsys, *base, "--mfu-scope", "compute")
    assert _json(capsys, *base, "--mfu-convention", "6N", "--hfu")["time_to_train"] == \
        e2e["time_to_train"]
    t2 = comp["time_to_train"]["seconds"]
    assert Fraction(t2["numerator"], t2["denominator"]) / DAY > days + 2
    # the executed count at the same HFU: 1,318 GFLOP per token against 8N's 1,397 (N holds
    # the 629M-entry embedding table, a lookup, not a matmul), so less time
    ex = _json(capsys, *base, "--mfu-scope", "end-to-end", "--hfu")
    t3 = ex["time_to_train"]["seconds"]
    assert Fraction(t3["numerator"], t3["denominator"]) / DAY < days


def test_utilization_reaches_json_with_a_measured_throughput(capsys):
    d = _json(capsys, "plan", "gpt2-small", "--gpus", "8", "--gpu", "H100", "--batch", "8",
              "--precision", "bf16-mixed", "--measured-tokens-per-s", "100000")
    rows = {r["convention"]: r for r in d["utilization"]}
    assert set(rows) == {"executed", "causal", "6N"}
    m = rows["executed"]["measured_mfu"]
    per_token = rows["executed"]["model_flops_per_token"]
    assert Fraction(m["numerator"], m["denominator"]) == Fraction(
        per_token["numerator"], per_token["denominator"]) * 100000 / (8 * 989 * 10**12)
    assert d["step_time"]["mfu_convention"] == "executed" and d["step_time"]["mfu_scope"] == "compute"


@pytest.mark.parametrize("argv,expected", [
    (("--mfu-convention", "6N"), "6N has no per-stage count"),
    (("--hfu",), "--hfu reads an end-to-end figure"),
    (("--measured-tokens-per-s", "-5"), "--measured-tokens-per-s must be positive"),
])
def test_refusals(capsys, argv, expected):
    cli_run.refused_in_one_line(capsys, "plan", "gpt2-small", "--gpus", "8", "--gpu", "H100",
                                *argv, expected=expected)


def test_single_gpu_flags_need_gpus(capsys):
    cli_run.refused_in_one_line(capsys, "plan", "gpt2-small", "--mfu-scope", "end-to-end",
                                expected="give --gpus N")
