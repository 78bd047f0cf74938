"""The engines' KV pools against pool sizes the engines printed in public logs (issue 29,
Must 4: within 10%). Each case names its log; the inputs are the log's own settings (GPU
memory, utilization, model, the profile run's token count); the pool is predicted from the
weights, the activation estimate and the non-torch assumption, not read from the log."""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from accounting.formats.hf_quant import scheme_from_config
from accounting.formats.schemes import get_scheme
from accounting.serving.activation import activation_peak
from accounting.serving.plan import serve
from accounting.architecture.loaders import read_config
from accounting.architecture.own_format import read_json
from accounting.architecture.presets import get_preset

GiB = 2**30
QWEN = Path(__file__).parent / "data" / "serving" / "Qwen3-235B-A22B-FP8.json"


def close(got, want, within=Fraction(1, 10)) -> bool:
    return abs(Fraction(got) - Fraction(want)) <= within * Fraction(want)


@pytest.mark.parametrize("tokens,printed_pool_gib,printed_blocks,printed_activation_gib", [
    # https://github.com/vllm-project/vllm/issues/10517 (comment of 2024-12-02): RTX 3090,
    # meta-llama/Llama-3.1-8B-Instruct, "total_gpu_memory=23.58GiB ...
    # gpu_memory_utilization=0.90", --max-model-len 20k and 29k (v0: the profile run is
    # max_model_len tokens, max_num_seqs 256); "kv_cache_size=3.81GiB", "GPU blocks: 1952";
    # "kv_cache_size=2.89GiB", "# GPU blocks: 1478"; activation = peak_torch_memory − weights
    # (17.06 − 14.99 and 17.98 − 14.99 GiB)
    (20000, "3.81", 1952, "2.07"),
    (29000, "2.89", 1478, "2.99"),
])
def test_vllm_rtx3090_llama_8b(tokens, printed_pool_gib, printed_blocks, printed_activation_gib):
    c = get_preset("meta-llama/Llama-3.1-8B")
    p = serve(c, get_scheme("bf16"), memory_bytes=int(Fraction("23.58") * GiB), ctx=tokens,
              max_num_batched_tokens=tokens, max_num_seqs=256, utilization=Fraction(9, 10),
              engine_version="0.10")  # vLLM 0.6's pool rule: the graphs outside the pool
    assert close(p.kv_pool_bytes_per_gpu, Fraction(printed_pool_gib) * GiB)
    assert close(p.binding.blocks, printed_blocks)
    assert close(activation_peak(c, tokens, 256, 1), Fraction(printed_activation_gib) * GiB,
                 Fraction(5, 100))
    # the log's tokens are its blocks of 16: 31,232 = 1,952 · 16 (vLLM's block_size)
    assert p.binding.tokens == 16 * p.binding.blocks


@pytest.mark.parametrize("tp,printed_pool_gib", [
    # https://github.com/vllm-project/vllm/pull/10511 (comment of 2024-12-14): `vllm serve
    # meta-llama/Meta-Llama-3-8B` on H100: "total_gpu_memory 79.22GiB", utilization 0.90,
    # TP 1 "available_kv_cache_memory 53.29GiB"; TP 2 prints weights 7.48, non_torch 3.58,
    # activation 1.26 GiB, so 71.29 − 7.48 − 3.58 − 1.26 = 58.97 GiB. Llama-3-8B has
    # Llama-3.1-8B's shapes; max_model_len 8192 is the profile run's length (v0).
    (1, "53.29"),
    (2, "58.97"),
])
def test_vllm_h100_llama_3_8b(tp, printed_pool_gib):
    c = get_preset("meta-llama/Llama-3.1-8B")
    p = serve(c, get_scheme("bf16"), memory_bytes=int(Fraction("79.22") * GiB), tp=tp,
              ctx=8192, max_num_batched_tokens=8192, max_num_seqs=256, engine_version="0.10")
    assert close(p.kv_pool_bytes_per_gpu, Fraction(printed_pool_gib) * GiB)


def test_sglang_qwen3_235b_fp8_tp4():
    # https://github.com/vllm-project/vllm/issues/21348: Qwen3-235B-A22B-FP8 on 4×H100 with
    # SGLang, --tp 4 --mem-fraction-static 0.93: "KV Cache is allocated. #tokens: 367404,
    # K size: 8.23 GB, V size: 8.23 GB". Cell: 1 KV head per rank · 128 · 94 layers · 2 · 2 B.
    data, _ = read_json(QWEN)
    c, _ = read_config(QWEN, drop=("quantization_config",))
    scheme = scheme_from_config(data["quantization_config"])
    p = serve(c, scheme, gpu="H100", tp=4, engine="sglang", utilization=Fraction(93, 100))
    assert p.kv_bytes_per_token_per_gpu == 1 * 128 * 94 * 2 * 2 == 48_128
    assert close(p.binding.tokens, 367_404)
    # SGLang's "GB" are GiB: 367,404 · 48,128 bytes = 2 · 8.23 GiB
    assert close(367_404 * 48_128, 2 * Fraction("8.23") * GiB, Fraction(1, 1000))


def test_sglang_default_fraction_from_its_reserve_rule():
    # server_args.py: H100 (81,559 MiB): reserved (9.5 + tp·pp/2) GiB = 11,776 MiB at TP 4;
    # (81559 − 11776) / 81559 = 0.8556 -> 0.856; H200 (143,771 MiB), TP 8: (12 + 4)·1024
    from accounting.serving.engines import defaults
    d = defaults("sglang", "H100-SXM", 81_559 * 2**20, 4, 1, False, version="0.4")
    assert d.utilization == Fraction(856, 1000)
    d = defaults("sglang", "H200", 143_771 * 2**20, 8, 1, True, version="0.4")
    assert d.utilization == Fraction(round(Fraction(143_771 - 16 * 1024, 143_771), 3))
    # under 35 GiB (2.8 + tp·pp/10) GiB: an L4's 23,034 MiB at TP 1 keeps 2,969.6 MiB,
    # (23034 − 2969.6) / 23034 = 0.8711 -> 0.871; from 160 GiB on, 32 GiB: 0.8 at 163,840 MiB
    d = defaults("sglang", "L4", 23_034 * 2**20, 1, 1, False, version="0.4")
    assert (d.utilization, d.max_num_batched_tokens) == (Fraction(871, 1000), 2048)
    d = defaults("sglang", None, 163_840 * 2**20, 1, 1, False, version="0.4")
    assert (d.utilization, d.max_num_batched_tokens) == (Fraction(4, 5), 16384)
