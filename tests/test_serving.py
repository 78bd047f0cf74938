"""`serve` (issue 29): weights per GPU under TP and PP, KV bytes per token per GPU, paged
blocks, concurrency, the longest context, the CLI's JSON contract and its one-line refusals.
Expected values are hand algebra written out here, from the model's published config.json
and vLLM's layout rules (cited in accounting/serving/shards.py), never read back from the
code under test."""
from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from accounting.formats.schemes import get_scheme
from accounting.runtime.errors import UsageError
from accounting.serving import kv
from accounting.serving.plan import serve
from accounting.serving.shards import pp_layers, stages
from accounting.architecture.loaders import read_config
from accounting.architecture.presets import get_preset
from tests.cli_run import refused_in_one_line, run

DATA = Path(__file__).parent / "data" / "serving"
L70 = str(DATA / "Llama-3.1-70B.json")
AWQ70 = str(DATA / "Llama-3.1-70B-Instruct-AWQ-INT4.json")


def llama_bf16_per_gpu(d, f, L, h, hkv, dk, V, tp):
    """Llama's bf16 bytes on one TP rank: vocab-parallel embedding and head (V padded to 64,
    split), q and o split by heads, k and v by KV heads (one replicated head past h_kv),
    gate/up/down split by d_ff, norms replicated."""
    vp = -(-V // 64) * 64 // tp
    kv_heads = hkv // tp if tp <= hkv else 1
    layer = d * (h // tp) * dk * 2 + 2 * kv_heads * dk * d + 3 * d * f // tp + 2 * d
    return 2 * (2 * vp * d + L * layer + d)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_llama_8b_weights_per_gpu_by_hand(tp):
    c = get_preset("meta-llama/Llama-3.1-8B")
    (st,) = stages(c, get_scheme("bf16"), 2, tp, 1)
    assert st.bytes == llama_bf16_per_gpu(4096, 14336, 32, 32, 8, 128, 128256, tp)
    if tp == 1:  # the whole model: 8,030,261,248 parameters (Meta's model card, 8.03B) in bf16
        assert st.bytes == 2 * 8_030_261_248


def test_kv_heads_split_then_replicated():
    c, _ = read_config(L70)
    # 80 layers · 2 (K, V) · heads on the rank · 128 · 2 bytes
    for tp, heads in ((1, 8), (2, 4), (4, 2), (8, 1), (16, 1)):
        caches = kv.layer_caches(c, 2, tp, tuple(range(80)))
        assert sum(x.bytes_per_token for x in caches) == 80 * 2 * heads * 128 * 2
    caches = kv.layer_caches(c, 1, 4, tuple(range(80)))  # fp8: one byte an element
    assert sum(x.bytes_per_token for x in caches) == 80 * 2 * 2 * 128


def test_mla_cache_is_whole_on_every_rank():
    c = get_preset("deepseek-ai/DeepSeek-V3")
    # (kv_lora_rank 512 + qk_rope_head_dim 64) · 61 layers · 2 bytes, at any TP (vLLM's
    # MLAAttentionSpec and SGLang's cell_size do not divide it)
    for tp in (1, 8):
        caches = kv.layer_caches(c, 2, tp, tuple(range(61)))
        assert sum(x.bytes_per_token for x in caches) == (512 + 64) * 61 * 2 == 70_272


def test_sliding_window_blocks():
    # Mistral-7B-v0.1: every layer a 4,096 window; at 32,768 tokens a layer holds
    # ceil(4096/16) + 1 = 257 blocks, not 2,048 (vLLM's SlidingWindowManager)
    c = get_preset("mistralai/Mistral-7B-v0.1")
    caches = kv.layer_caches(c, 2, 1, tuple(range(32)))
    per_token = 32 * 2 * 8 * 128 * 2
    assert kv.bytes_per_sequence(caches, 32768, 16) == 257 * 16 * per_token
    assert kv.bytes_per_sequence(caches, 100, 16) == 7 * 16 * per_token


def test_pipeline_stages_as_vllm_splits():
    # get_pp_indices: 80 // 3 = 26 each, the remainder 2 to the stages before the last
    assert [len(s) for s in pp_layers(80, 3)] == [27, 27, 26]
    assert [len(s) for s in pp_layers(32, 4)] == [8, 8, 8, 8]
    c, _ = read_config(L70)
    s0, s1 = stages(c, get_scheme("bf16"), 2, 1, 2)
    layer = 8192 * 8192 * 2 + 2 * 8 * 128 * 8192 + 3 * 8192 * 28672 + 2 * 8192
    assert s0.bytes == 2 * (128256 * 8192 + 40 * layer)
    assert s1.bytes == 2 * (128256 * 8192 + 40 * layer + 8192)


def test_awq_llama_70b_by_hand():
    # 4-bit weights, per group of 128 inputs one fp16 scale and one 4-bit zero per output;
    # embedding, LM head and norms fp16
    c, _ = read_config(AWQ70, drop=("quantization_config",))
    d, f, L, V = 8192, 28672, 80, 128256

    def awq(out, inp):
        return inp * out // 2 + (inp // 128) * out // 2 + (inp // 128) * out * 2
    layer = awq(d, d) + 2 * awq(1024, d) + awq(d, d) + 2 * awq(f, d) + awq(d, f) + 2 * d * 2
    total = 2 * V * d * 2 + L * layer + d * 2
    (st,) = stages(c, get_scheme("awq"), 2, 1, 1)
    assert st.bytes == total
    # TP 2: each matrix halves, the norms stay whole
    (st2,) = stages(c, get_scheme("awq"), 2, 2, 1)
    assert st2.bytes == (total - L * 2 * d * 2 - d * 2) // 2 + L * 2 * d * 2 + d * 2


def test_llama_8b_on_one_h100_at_128_by_8k_does_not_fit():
    # vLLM 0.21 (the default): pool = 0.9 · 79.22 GiB (torch's total on an H100, vllm PR
    # #10511) − 16,060,522,496 weights − activation − 0.5 GiB outside torch (the high end) −
    # the CUDA-graph estimate's high end: the largest graph (512 tokens: 3·512·4,096 residual
    # and norm + 512·3·14,336 gate-up and product, bf16) + 2 modes · 50 other sizes · 24 MiB;
    # 128 sequences of 8,192 tokens need 128 · 512 blocks · 16 · 131,072 bytes
    c = get_preset("meta-llama/Llama-3.1-8B")
    p = serve(c, get_scheme("bf16"), gpu="H100", ctx=8192, concurrency=128)
    need = 128 * 8192 * 131_072
    assert need == 137_438_953_472
    act = p.binding.activation_bytes
    graphs = (3 * 512 * 4096 + 512 * 3 * 14336) * 2 + 2 * 50 * 24 * 2**20
    assert graphs == 2_573_205_504 == p.cuda_graph_bytes
    total = round(Fraction("79.22") * 2**30)
    pool = int(total * Fraction(9, 10)) - 16_060_522_496 - act - 2**29 - graphs
    assert p.kv_pool_bytes_per_gpu == pool
    assert not p.fits and p.shortfall_bytes == need - pool
    assert p.max_concurrency == pool // (512 * 16 * 131_072)


def test_contract_json_and_refusals(capsys):
    code, out, err = run(capsys, "serve", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--ctx",
                         "8192", "--concurrency", "128", "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    for key in ("fits", "weights_bytes_per_gpu", "kv_bytes_per_token_per_gpu",
                "kv_pool_bytes_per_gpu", "max_concurrency", "ttft_seconds", "tpot_seconds"):
        assert key in d
    assert d["fits"] is False and d["kv_bytes_per_token_per_gpu"] == 131_072
    assert d["ttft_seconds"]["denominator"] > 0


@pytest.mark.parametrize("argv,words", [
    (["--tp", "3"], "--tp 3 does not divide the 32 query heads"),
    (["--weights", "int3"], "unknown weight scheme 'int3'"),
    (["--weights", "awq", "--group-size", "100"], "100 does not divide"),
    (["--gpus", "4", "--tp", "2"], "--gpus 4 is not --tp 2 × --pp 1"),
    (["--kv-dtype", "int4"], "invalid choice"),
    (["--pp", "33"], "--pp 33 is more than the 32 layers"),
    (["--gpu-memory-utilization", "1.5"], "must be a number in (0, 1]"),
    (["--mfu", "1e999999999"], "the exponent must be within ±100"),
    (["--gpu-bw", "1" * 5000], "at most 100 characters"),
    (["--block-size", "0"], "must be a positive integer"),
    (["--engine", "sglang", "--gpu-mem", "1B"], "default mem_fraction_static is not positive"),
])
def test_bad_input_is_one_line(capsys, argv, words):
    refused_in_one_line(capsys, "serve", "meta-llama/Llama-3.1-8B", "--gpu", "H100", *argv,
                        expected=words)


def test_quantized_config_read_or_replaced_by_weights_flag(capsys, tmp_path):
    code, out, err = run(capsys, "serve", "--config", AWQ70, "--gpu", "H100", "--gpus", "4",
                         "--weights", "bf16", "--format", "json")
    d = json.loads(out)
    assert d["assumptions"]["weights"] == "bf16" and "replaces" in d["notes"][0]
    assert d["weights_bytes_per_gpu"] == llama_bf16_per_gpu(8192, 28672, 80, 64, 8, 128,
                                                            128256, 4)
    code, out, err = run(capsys, "serve", "--config", AWQ70, "--gpu", "H100", "--gpus", "2",
                         "--format", "json")
    d = json.loads(out)
    assert d["assumptions"]["weights"] == "awq" and d["fits"] is True
    bad = json.loads(Path(AWQ70).read_text())
    bad["quantization_config"] = {"quant_method": "eetq"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(bad))
    refused_in_one_line(capsys, "serve", "--config", str(path), "--gpu", "H100",
                        expected="quant_method 'eetq' is not known")


def test_longest_context_and_text_answer(capsys):
    c = get_preset("meta-llama/Llama-3.1-8B")
    p = serve(c, get_scheme("bf16"), gpu="H100", ctx=8192, concurrency=16)
    t = p.longest_context
    # 16 sequences of t tokens fit, of t + 16 (one more block each) do not
    per_block = 16 * 131_072
    assert 16 * -(-t // 16) * per_block <= p.kv_pool_bytes_per_gpu
    assert 16 * (-(-t // 16) + 1) * per_block > p.kv_pool_bytes_per_gpu
    code, out, err = run(capsys, "serve", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--ctx",
                         "8192", "--mfu", "0.5")  # the roofline's terms (issue 39: an override)
    assert code == 0 and out.startswith("Answer: serve meta-llama/Llama-3.1-8B")
    assert "MFU 0.5" in out and "bandwidth efficiency 0.8" in out


def test_a_second_serving_plan_reuses_the_symbolic_ledger():
    """Issue 29's speed goal (a serving plan under 0.5 s) is a benchmark's median
    (benchmarks/bench_serve.py), not a timed test (a loaded machine fails any wall-clock
    bound). What makes a plan quick is checked here, deterministically: the ledger is
    symbolic in T, so serving DeepSeek-V3 (61 layers, 256 experts) at another context
    builds nothing again (the caches' misses stay where the first plan left them)."""
    from accounting.ledger import ledger
    c = get_preset("deepseek-ai/DeepSeek-V3")
    ledger.ledger.cache_clear()
    ledger.unfolded_ledger.cache_clear()
    serve(c, get_scheme("fp8-block"), gpu="H200", tp=8, ctx=4096)
    first = (ledger.ledger.cache_info().misses, ledger.unfolded_ledger.cache_info().misses)
    assert first[0] >= 1  # the first plan built it
    serve(c, get_scheme("fp8-block"), gpu="H200", tp=8, ctx=8192)
    assert (ledger.ledger.cache_info().misses,
            ledger.unfolded_ledger.cache_info().misses) == first


def test_weights_alone_too_big_says_by_how_much():
    # Llama-3.1-70B bf16 on one H100: 141,107,675,136 bytes of weights (70,553,706,496
    # parameters, Meta's 70.6B, × 2) against 0.9 · 79.22 GiB (torch's total on an H100)
    c, _ = read_config(L70)
    p = serve(c, get_scheme("bf16"), gpu="H100", ctx=8192)
    assert p.weights_bytes_per_gpu == llama_bf16_per_gpu(8192, 28672, 80, 64, 8, 128, 128256, 1)
    assert p.weights_bytes_per_gpu == 2 * 70_553_706_496
    act = p.binding.activation_bytes
    # vLLM 0.21's terms at their high ends: 0.5 GiB outside torch and the CUDA-graph estimate
    # (the 512-token graph's residual, norm, gate-up and product in bf16 + 100 · 24 MiB)
    graphs = (3 * 512 * 8192 + 512 * 3 * 28672) * 2 + 2 * 50 * 24 * 2**20
    total = round(Fraction("79.22") * 2**30)
    short = p.weights_bytes_per_gpu + act + 2**29 + graphs - int(total * Fraction(9, 10))
    assert not p.fits and p.max_concurrency == 0 and p.shortfall_bytes == short


def test_decode_terms_and_a_huge_concurrency_stay_quick():
    # the step's FLOPs are planning/inference.py's (the same ledger expressions); the expert
    # share is 1 − (1 − k/E)^B by hand for Mixtral (E 8, k 2) at B 3: 1 − (3/4)^3 = 37/64
    from accounting.planning.inference import inference
    from accounting.planning.memory import BF16_MIXED, PRECISIONS
    from accounting.serving.timing import decode_flops, expert_share
    c = get_preset("mistralai/Mixtral-8x7B-v0.1")
    assert decode_flops(c, 3, 100) == inference(c, 3, 100, PRECISIONS[BF16_MIXED]).decode_flops
    assert expert_share(c, 3) == Fraction(37, 64)
    assert expert_share(c, 10**15) == 1  # every expert; no 10^15-th power of a Fraction
    from accounting.planning.inference import experts_read
    assert experts_read(c, 10**15) == (8, 8)  # plan's decode terms too (it hung before)
    # at B·k = 64·E - 2 the exact expectation still: 8·(1 − (3/4)^255)
    assert experts_read(c, 255)[1] == 8 * (1 - Fraction(3, 4) ** 255)
    ds = get_preset("deepseek-ai/DeepSeek-V3")
    absorbed = inference(ds, 2, 64, PRECISIONS[BF16_MIXED]).decode_flops_absorbed
    assert decode_flops(ds, 2, 64) == absorbed
    p = serve(c, get_scheme("bf16"), gpu="H100", tp=8, ctx=10**15, concurrency=10**15,
              allow_long_context=True)  # past the context: VLLM_ALLOW_LONG_MAX_MODEL_LEN=1
    assert not p.fits and p.time is not None


def test_one_sequence_too_long_without_a_concurrency(capsys, monkeypatch):
    # a pool that holds blocks but not one sequence of --ctx tokens (found by a fuzz run:
    # the answer line had no concurrency to print); past the model's 131,072-token context
    # only as vLLM starts it, with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (issue 45)
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    code, out, err = run(capsys, "serve", "meta-llama/Llama-3.1-8B", "--gpu-mem", "24GiB",
                         "--ctx", "10000000")
    assert code == 0 and "NO: 1 × 10,000,000 tokens need" in out
