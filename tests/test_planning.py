"""Capacity planning (accounting.planning): memory, fit, FLOPs, time, inference, the CLI.

Expected values are derived by hand in the tests (the algebra is in the comments), or by
brute force, or by a different path through the library (the analysis' 'useful' causal
count for decode FLOPs). No torch here: tests/test_planning_reality.py checks the model.
"""
import csv
import io
import json
import subprocess
import sys
from fractions import Fraction

import pytest

from accounting import analyze, get_preset
import cli_run
from accounting.architecture.config import ModelConfig
from accounting.ledger.ledger import ledger
from accounting.planning import (
    GPUS,
    PRECISIONS,
    Budget,
    MemoryModel,
    adamw_flops,
    inference,
    largest_batch,
    longest_context,
    plan,
    step_flops,
)

XL = get_preset("gpt2-xl")
# GPT-2 XL as the course shapes it: V = 50,257, T = 1,024, L = 48, d = 1,600, h = 25,
# d_ff = 4·d = 6,400.
V, T, L, D, H, DFF = 50_257, 1_024, 48, 1_600, 25, 6_400

# N = 2·V·d (embedding + untied LM head) + L·(4d² + 3·d·d_ff + 2d) + d (final gain)
#   = 160,822,400 + 48·(10,240,000 + 30,720,000 + 3,200) + 1,600 = 2,127,057,600
N_XL = 2 * V * D + L * (4 * D * D + 3 * D * DFF + 2 * D) + D
assert N_XL == 2_127_057_600

# The course's activation list, per sequence, in elements:
#   per block: RMSNorm inputs 2·T·d, Q/K/V 3·T·d, QKᵀ h·T², softmax h·T², weighted values
#   T·d, output projection T·d, W1 T·d_ff, SiLU T·d_ff, W2 T·d, W3 T·d_ff
#   = 8·T·d + 3·T·d_ff + 2·h·T²
#   outside: final RMSNorm T·d, output embedding (logits) T·V, cross-entropy T·V
COURSE_ACT_XL = L * (8 * T * D + 3 * T * DFF + 2 * H * T * T) + T * D + 2 * T * V
# = 48·(13,107,200 + 19,660,800 + 52,428,800) + 1,638,400 + 102,926,336 = 4,194,011,136
assert COURSE_ACT_XL == 4_194_011_136
A_XL = 4 * COURSE_ACT_XL  # 16,776,044,544 bytes per sequence (fp32)
B_XL = 16 * N_XL  # parameters, gradients, m, v: 4 × 4 bytes × N = 34,032,921,600
GIB80 = 80 * 2**30  # A100 80GB: 81,920 MiB = 85,899,345,920 bytes


def run(capsys, *argv):
    return cli_run.run(capsys, "plan", *argv)


# ---- the course's answers (CS336 a1, adamwAccounting) -----------------------------------

def test_course_memory_expression_gpt2_xl():
    p = plan(XL, scope="course")
    assert (p.memory.per_sequence, p.memory.fixed) == (A_XL, B_XL)
    assert (A_XL, B_XL) == (16_776_044_544, 34_032_921_600)
    names = [i.name for i in p.memory.items]
    assert names == ["parameters (fp32)", "gradients (fp32)", "AdamW first moment m (fp32)",
                     "AdamW second moment v (fp32)", "activations: all L blocks",
                     "activations: outside the blocks"]
    assert [i.bytes for i in p.memory.items[:4]] == [4 * N_XL] * 4


def test_course_largest_batch_in_80_gb_both_readings():
    # 80 GiB: (85,899,345,920 − 34,032,921,600) / 16,776,044,544 = 3.09 → 3
    # 80·10⁹:  (80,000,000,000 − 34,032,921,600) / 16,776,044,544 = 2.74 → 2
    assert (GIB80 - B_XL) // A_XL == 3 and (80 * 10**9 - B_XL) // A_XL == 2
    assert plan(XL, scope="course", gpu="A100-80GB").batch_fit.largest == 3
    assert plan(XL, scope="course", memory_bytes=GIB80).batch_fit.largest == 3
    assert plan(XL, scope="course", memory_bytes=80 * 10**9).batch_fit.largest == 2


def test_course_adamw_flops():
    # 14 FLOPs per parameter + 1 per parameter tensor (step += 1); tensors: embedding, LM head,
    # final gain, and 9 per block (ln1, q, k, v, o, ln2, w1, w2, w3): 3 + 9·48 = 435.
    assert adamw_flops(XL) == 14 * N_XL + 435 == 29_778_806_835


def test_course_days_for_400k_steps():
    # Forward matmuls per sequence: 2·T·[L·(4d² + 3·d·d_ff) + d·V] (projections, FFN, LM
    # head) + L·2·(2·T²·d) (QKᵀ and scores·V, h·T·T·d_k = T²·d multiply-adds each).
    fwd_seq = 2 * T * (L * (4 * D * D + 3 * D * DFF) + D * V) + L * 4 * T * T * D
    assert fwd_seq == 4_513_336_524_800
    step = 3 * 1024 * fwd_seq + 14 * N_XL + 435  # backward = 2 × forward, plus AdamW
    seconds = Fraction(400_000 * step) / (Fraction(1, 2) * Fraction(195, 10) * 10**12)
    p = plan(XL, 1024, 1024, scope="course", gpu="A100", steps=400_000, mfu="0.5")
    assert p.flops.total == step and p.flops.backward == 2 * p.flops.forward
    assert p.time.seconds == seconds
    assert round(float(seconds / 86400), 2) == 6583.57


def test_course_command_prints_each_answer(capsys):
    code, out, err = run(capsys, "gpt2-xl", "--scope", "course", "--gpu", "A100-80GB",
                         "--batch", "1024", "--steps", "400000", "--mfu", "0.5")
    assert code == 0 and err == ""
    assert "16,776,044,544·batch_size + 34,032,921,600 bytes" in out
    assert "= 3." in out and "largest batch at T = 1,024" in out
    assert "29,778,806,835" in out
    assert "6,583.57 days" in out
    assert "Backward = 2 × forward, exactly" in out


def test_course_list_is_the_problems_list():
    course = {a.course for a in ledger(XL).activations if a.course}
    assert course == {"RMSNorm inputs", "Q/K/V projections", "QKᵀ", "softmax",
                      "attention-weighted values", "output projection", "W1", "SiLU", "W2",
                      "W3 (SwiGLU)", "final RMSNorm", "output embedding", "cross-entropy"}


# ---- the model scope by hand --------------------------------------------------------------

SMALL = ModelConfig(vocab_size=37, context_length=8, num_layers=2, d_model=24, num_heads=2, d_ff=40)


def layer_bytes(c: ModelConfig, B: int, T: int) -> int:
    """One block's saved activations in fp32, by hand (the model scope of memory.py)."""
    d, h, f, dk = c.d_model, c.num_heads, c.d_ff, c.d_k
    return 4 * (
        2 * (B * T * d + B * T + B * T * d + B * T * d)  # ln1, ln2: input, rms, x/rms, output
        + B * T * d  # V
        + 4 * T * (dk // 2)  # cos, sin for Q and for K
        + 2 * B * T * d  # Q, K after RoPE
        + 3 * B * h * T * T + 2 * B * h * T  # masked scores, exp, softmax; max, sum
        + B * T * d  # attention-weighted values
        + 5 * B * T * f  # W1, sigmoid, SiLU, W3, gated product
    ) + T * T  # bool mask


def model_scope_bytes(c: ModelConfig, B: int, T: int, recompute: bool = False) -> int:
    """fp32 training memory of the model scope, written out by hand."""
    Vv, Ll, d, f, dk = c.vocab_size, c.num_layers, c.d_model, c.d_ff, c.d_k
    n = 2 * Vv * d + Ll * (4 * d * d + 3 * d * f + 2 * d) + d
    rope = Ll * 2 * max(T, c.context_length) * (dk // 2) * 4
    # token ids, ln_final (input, x/rms, output; rms), log-softmax, targets, total weight
    outside = 8 * B * T + 4 * (3 * B * T * d + B * T) + 4 * B * T * Vv + 8 * B * T + 4
    block_input = 4 * B * T * d
    blocks = (Ll * block_input + layer_bytes(c, B, T) - block_input if recompute
              else Ll * layer_bytes(c, B, T))
    return 16 * n + rope + blocks + outside


@pytest.mark.parametrize("B,T", [(1, 1), (2, 5), (3, 8), (4, 20)])
def test_model_scope_total_by_hand(B, T):
    m = MemoryModel(SMALL, PRECISIONS["fp32"], "model")
    assert m.total(B, T) == model_scope_bytes(SMALL, B, T)


def test_recompute_memory_and_flops_by_hand():
    c, B, Tt = SMALL, 3, 6
    # full recomputation: L kept block inputs + one block's activations besides its input
    assert MemoryModel(c, PRECISIONS["fp32"], "model", "full").total(B, Tt) == \
        model_scope_bytes(c, B, Tt, recompute=True)
    d, f = c.d_model, c.d_ff
    s = step_flops(c, Tt, B, "full")
    # recomputation = the blocks' forward but W2 (non-reentrant checkpoint stops once the
    # last saved tensor, W2's input, is recomputed; W2 saves its inputs before it runs):
    # 2·B·T·L·(4d² + 2·d·d_ff) + L·4·B·T²·d. Measured: tests/test_memory_reality.py.
    assert s.recompute == 2 * B * Tt * 2 * (4 * d * d + 2 * d * f) + 2 * 4 * B * Tt * Tt * d
    # selective: the attention cores' QKᵀ only (scores·V saves its inputs, then stops)
    assert step_flops(c, Tt, B, "selective").recompute == 2 * 2 * B * Tt * Tt * d
    assert s.total == s.forward + s.backward + s.recompute + s.adamw
    assert step_flops(c, Tt, B).recompute == 0


def test_bf16_mixed_by_hand():
    p = plan(XL, precision="bf16-mixed", scope="course")
    # N_matmul = L·(4d² + 3·d·d_ff) + d·V (LM head) = 2,046,491,200
    n_mm = L * (4 * D * D + 3 * D * DFF) + D * V
    assert n_mm == 2_046_491_200
    assert p.memory.fixed == 16 * N_XL + 2 * n_mm
    # The course's list in the dtypes torch.autocast('cuda', bfloat16) gives this model
    # (PyTorch's AMP op lists: matmul outputs bf16; exp and sum run in fp32, so the softmax
    # output is fp32; the residual stream stays fp32; the loss's log-softmax is fp32):
    #   per block: norm inputs 4·2·T·d, Q/K/V 2·3·T·d, QKᵀ 2·h·T², softmax 4·h·T², weighted
    #   values, output projection and W2 2·3·T·d, W1, SiLU and W3 2·3·T·d_ff
    #   outside: final norm input 4·T·d, logits 2·T·V, log-softmax 4·T·V
    block = 8 * T * D + 6 * T * D + 2 * H * T * T + 4 * H * T * T + 6 * T * D + 6 * T * DFF
    assert block == 229_376_000
    assert p.memory.per_sequence == L * block + 4 * T * D + 6 * T * V == 11_325_380_608


def test_margin_and_shortfall():
    b = Budget(1000, Fraction(1, 20))
    assert (b.reserved, b.usable) == (50, 950)
    assert Budget(1001, Fraction(1, 20)).reserved == 51  # ceil(50.05)
    # GPT-2 XL course scope in 16 GiB: b alone (34.0 GB) does not fit; batch 1 needs a + b.
    p = plan(XL, scope="course", memory_bytes=16 * 2**30)
    assert not p.batch_fit.fits and p.batch_fit.shortfall == A_XL + B_XL - 16 * 2**30


def test_does_not_fit_exits_zero(capsys):
    code, out, err = run(capsys, "gpt2-xl", "--gpu-mem", "16GiB", "--scope", "course")
    assert code == 0 and err == ""
    assert "does not fit" in out and f"{A_XL + B_XL - 16 * 2**30:,}" in out


@pytest.mark.parametrize("scope,precision,recompute", [
    ("course", "fp32", "none"), ("model", "fp32", "none"), ("model", "bf16-mixed", "full")])
def test_fit_solvers_match_brute_force(scope, precision, recompute):
    # what must fit: the step's peak (model scope) or the course's sum (course scope)
    m = MemoryModel(SMALL, PRECISIONS[precision], scope, recompute)
    need = m.peak if scope == "model" else m.total
    for capacity in (need(1, 1) - 1, need(1, 1), need(7, 5) + 3, need(2, 60)):
        budget = Budget(capacity, Fraction(0))
        best = 0
        while need(best + 1, 5) <= capacity:
            best += 1
        assert largest_batch(m, 5, budget).largest == best
        longest = 0
        while need(2, longest + 1) <= capacity:
            longest += 1
        assert longest_context(m, 2, budget).longest == longest


# ---- inference ------------------------------------------------------------------------------

def test_kv_cache_by_hand():
    # K and V: d_model each per layer per token: 2·L·d·bytes = 2·48·1,600·4 = 614,400 (fp32)
    assert plan(XL).inference.kv_bytes_per_token == 614_400
    p = plan(XL, 2048, 8, precision="bf16-mixed")
    assert p.inference.kv_bytes_per_token == 307_200
    assert p.inference.kv_bytes == 8 * 2048 * 307_200


@pytest.mark.parametrize("t", [1, 2, 100, 1024, 5000])
def test_decode_flops_by_hand(t):
    B = 3
    got = inference(XL, B, 1024, PRECISIONS["fp32"], position=t).decode_flops
    # one token through every matmul: 2·(4d² + 3·d·d_ff) per layer + 2·d·V; attention
    # core: QKᵀ and scores·V each h·t·d_k = t·d multiply-adds per layer.
    assert got == 2 * B * (L * (4 * D * D + 3 * D * DFF) + D * V) + 4 * B * L * D * t


def test_decode_sums_to_the_causal_forward():
    # Decoding positions 1..T one at a time does exactly the causal ("useful") work of one
    # forward pass over T tokens: Σ t = T(T+1)/2 query-key pairs. A different code path:
    # the analysis' useful_factors (P = T(T+1)/2).
    c, B, Tt = SMALL, 2, 7
    total = sum(inference(c, B, Tt, PRECISIONS["fp32"], position=t).decode_flops
                for t in range(1, Tt + 1))
    assert total == analyze(c, Tt, B, "forward", "useful").matmul_flops()


def test_roofline_bound():
    # B = 1, t = 1024, bf16 on an H100: FLOPs ≈ 2·N ≈ 4.5 GFLOP (4.6 µs at 989 TFLOP/s);
    # bytes ≈ 2·(N − V·d) + KV 1,024·307,200 ≈ 4.4 GB (1.3 ms at 3.35 TB/s): memory-bound.
    r = plan(XL, precision="bf16-mixed", gpu="H100").inference.roofline
    assert r.bound == "memory-bandwidth"
    weights = 2 * (N_XL - V * D + D)  # all but the table, plus one embedding row
    assert r.bytes == weights + 1024 * 307_200
    # B = 4,096 sequences at t = 1 (almost no cache): intensity ~B/1: compute-bound in fp32 A100
    r2 = plan(XL, 1, 4096, gpu="A100").inference.roofline
    assert r2.bound == "compute"


def test_gpu_table_datasheet_values():
    a100, h100, h200 = GPUS["A100-80GB"], GPUS["H100-SXM"], GPUS["H200"]
    assert a100.memory_bytes == 81_920 * 2**20 == 85_899_345_920
    assert GPUS["A100-40GB"].memory_bytes == 40 * 2**30
    assert h100.memory_bytes == 81_559 * 2**20 and h200.memory_bytes == 143_771 * 2**20
    assert a100.peak_tflops == {"fp32": Fraction(39, 2), "bf16": 312}
    assert h100.peak_tflops["bf16"] == h200.peak_tflops["bf16"] == 989
    assert (a100.bandwidth_tbs, h100.bandwidth_tbs, h200.bandwidth_tbs) == (
        Fraction("2.039"), Fraction("3.35"), Fraction("4.8"))


# ---- time -----------------------------------------------------------------------------------

def test_tokens_round_up_to_whole_steps():
    p = plan(SMALL, 5, 3, gpu="A100", tokens=16, mfu="0.5")  # 15 tokens per step → 2 steps
    assert (p.time.steps, p.time.tokens) == (2, 30)
    assert p.time.total_flops == 2 * p.flops.total
    assert p.time.seconds == Fraction(2 * p.flops.total) / (Fraction("19.5e12") / 2)


def test_peaks_are_exact_decimals():
    p = plan(SMALL, steps=10, peak_tflops="0.1", mfu="0.3")  # 0.1 TFLOP/s = 10¹¹ FLOP/s
    assert p.time.peak_flops == 10**11 and p.time.mfu == Fraction(3, 10)
    assert p.time.seconds == Fraction(10 * p.flops.total, 3 * 10**10)


# ---- the CLI --------------------------------------------------------------------------------

@pytest.mark.parametrize("argv,needle", [
    (["gpt2-xl", "--ctx", "0"], "--ctx"),
    (["gpt2-xl", "--batch", "-3"], "--batch"),
    (["--num-layers", "0", "--d-model", "8", "--num-heads", "2", "--vocab-size", "9",
      "--context-length", "4"], "--num-layers"),
    (["gpt2-xl", "--mfu", "0"], "--mfu must be in (0, 1]"),
    (["gpt2-xl", "--mfu", "1.2"], "--mfu must be in (0, 1]"),
    (["gpt2-xl", "--mfu", "fast"], "--mfu must be a number"),
    (["gpt2-xl", "--gpu", "V100"], "known: A100-40GB, A100-80GB, H100-SXM, H200"),
    (["gpt2-xl", "--steps", "3", "--tokens", "9"], "not allowed with"),
    (["gpt2-xl", "--margin", "1"], "--margin must be in [0, 1)"),
    (["gpt2-xl", "--gpu-mem", "lots"], "--gpu-mem"),
    (["gpt2-xl", "--gpu-mem", "0"], "--gpu-mem"),
    (["gpt2-xl", "--gpu-flops", "0"], "--gpu-flops must be positive"),
    (["gpt2-xl", "--gpu", "A100", "--gpu-bw", "2"], "not both"),
    (["gpt2-xl", "--precision", "fp8"], "--precision"),
    (["gpt2-xl", "--position", "0"], "--position"),
    (["gpt2-xxl"], "unknown model"),
])
def test_bad_input_one_line_exit_2(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("accounting: error: ") and err.count("\n") == 1 and needle in err


def test_json_exact_and_output_file(capsys, tmp_path):
    target = tmp_path / "plan.json"
    code, out, _ = run(capsys, "gpt2-xl", "--scope", "course", "--gpu", "A100", "--batch", "1024",
                       "--steps", "400000", "--mfu", "0.5", "--format", "json", "-o", str(target))
    assert code == 0 and out == ""
    data = json.loads(target.read_text())
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]  # no temp file left
    assert data["training_memory"]["per_sequence_a"] == A_XL
    assert data["training_memory"]["fixed_b"] == B_XL
    assert data["fit"]["largest_batch"] == 3
    assert data["flops_per_step"]["adamw"] == 14 * N_XL + 435
    days = data["time_to_train"]["days"]
    assert isinstance(days["numerator"], int) and round(days["approx"], 2) == 6583.57


def test_csv_and_markdown(capsys):
    code, out, _ = run(capsys, "gpt2-small", "--format", "csv", "--gpu", "H200")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and {r["section"] for r in rows} >= {"training memory", "fit", "inference"}
    code, out, _ = run(capsys, "gpt2-small", "--format", "markdown")
    assert code == 0 and out.startswith("## Answer: plan for gpt2-small")
    assert "\n## Plan: model, workload and assumptions" in out
    assert "| ln1 rms |" in out


def test_custom_config_and_config_file(capsys, tmp_path):
    f = tmp_path / "tiny.json"
    f.write_text(json.dumps({"vocab_size": 37, "context_length": 8, "num_layers": 2,
                             "d_model": 24, "num_heads": 2, "d_ff": 40}))
    code, out, _ = run(capsys, "--config", str(f), "--ctx", "5", "--batch", "2", "--format", "json")
    assert code == 0
    assert json.loads(out)["training_memory"]["total_bytes"] == model_scope_bytes(SMALL, 2, 5)


def test_planning_does_not_import_torch():
    code = ("import sys, accounting.planning, accounting.cli.plan, accounting.planning.views, "
            "accounting.planning.export; "
            "assert not {'torch', 'pandas', 'matplotlib'} & set(sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_selective_recompute_under_autocast_with_biased_qkv(capsys):
    # Under autocast a biased Q/K/V is float32 (the fp32 bias promotes the bf16 matmul
    # output): without recomputation the core saves its bf16 copies, with it the checkpoint
    # keeps the float32 Q, K, V. By hand, per block (GPT-2: h 12, d 768; B 1, T 1,024;
    # torch.autocast("cuda") policies, accounting/ledger/autocast.py, checked against
    # PyTorch's in tests/test_autocast_cuda_bytes.py): the core saves bf16 casts of Q and K
    # (QKᵀ's bmm) and of V (scores·V's), 3·2·B·T·d; the mask T²; the masked scores (amax's
    # input, bf16) 2·B·h·T²; the row max 2·B·h·T; exp's fp32 result 4·B·h·T² and the fp32
    # row sum 4·B·h·T (the div saves both); the bf16 cast of the weights 2·B·h·T². The
    # checkpoint keeps instead the fp32 Q, K, V (4·B·T·d each) and the mask. Recomputed:
    # 8·B·h·T² + 6·B·h·T − 6·B·T·d bytes.
    c = get_preset("openai-community/gpt2")
    m = MemoryModel(c, PRECISIONS["bf16-mixed"], "model", "selective")
    B, T, h, d = 1, 1024, 12, 768
    term = next(t for t in m.terms if "recomputed" in t.name)
    assert term.bytes.evaluate(ledger(c).values(T, B)) == \
        8 * B * h * T * T + 6 * B * h * T - 6 * B * T * d == 96_018_432
    code, out, err = run(capsys, "openai-community/gpt2", "--precision", "bf16-mixed",
                         "--recompute", "selective")
    assert code == 0 and err == ""
