"""The engines' start-up as data (issue 43): the registered engine records and their versions,
SGLang's 2026 reserve rule, vLLM's CUDA-graph capture sizes and estimate, the communicators'
buffers, weights as the MXFP4 kernels hold them, the GPU's memory as torch sees it, the
hybrid models' block size and the verdict over ranges; and (issue 45) the activation peak's
attention term, the sampler's stage and logits, SGLang's single-GPU reserve and the prefill's
LM-head FLOPs. Every expected value is hand algebra from the engine's source (cited in the
modules) or a published / measured figure named beside it."""
from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from accounting.formats.hf_quant import scheme_from_config
from accounting.formats.loaded import loaded
from accounting.formats.schemes import get_scheme
from accounting.planning.gpus import get_gpu
from accounting.runtime.errors import UsageError
from accounting.serving import engines, kv, startup
from accounting.serving.activation import activation_peak, forward_peak, sampler_peak
from accounting.serving.plan import serve
from accounting.serving.shards import stages
from accounting.architecture.loaders import read_config
from accounting.architecture.own_format import read_json
from accounting.architecture.presets import get_preset
from tests.cli_run import run

GiB, MiB = 2**30, 2**20
DATA = Path(__file__).parent / "data" / "serving"
OSS = DATA / "gpt-oss-120b.json"
NCCL_CONNECTION = 4 * MiB + 120 * 640 * 8 * 8 + 8 * 512 * 8 * 16  # NCCL init.cc's three


def gpt_oss():
    data, _ = read_json(OSS)
    c, _ = read_config(OSS, drop=("quantization_config",))
    return c, scheme_from_config(data["quantization_config"])


def test_engine_records_registered_once_and_selected_by_version():
    with pytest.raises(ValueError, match="registered twice"):
        engines.register(engines.REGISTRY["vllm-0.21"])
    assert engines.get_engine("vllm").version == "0.21"
    assert engines.get_engine("sglang").version == "0.5"
    # a release inside a record's range takes the latest rule at or before it
    assert engines.get_engine("vllm", "0.13.0").name == "vllm-0.10"
    assert engines.get_engine("vllm", "v0.27.1").name == "vllm-0.21"
    for bad in ("0.9", "nightly", "", "1" * 5000, "0.21.x"):
        with pytest.raises(UsageError, match="--engine-version"):
            engines.get_engine("vllm", bad)
    assert not engines.REGISTRY["vllm-0.10"].graphs_in_pool
    assert engines.REGISTRY["vllm-0.21"].graphs_in_pool
    # SGLang (python/sglang/srt/model_executor/model_runner.py): no profile run (the pool is
    # (free after the weights) − total·(1 − mem_fraction_static), profile_max_num_token);
    # the total is read in init_torch_distributed after the NCCL groups are set up; the CUDA
    # graphs are captured after the pool is allocated (init_memory_pool, then the graphs)
    for name in ("sglang-0.4", "sglang-0.5"):
        e = engines.REGISTRY[name]
        assert (e.profiled, e.graphs_in_pool, e.start_after_comms) == (False, False, True)


@pytest.mark.parametrize("mib,tp,want", [
    # reserved = 512 + 1.5·max(chunk, 2048) + 2·cuda_graph_max_bs + tp/8·1024, at least 10,240
    # above 60 GiB (server_args.py _handle_gpu_memory_settings):
    (81_559, 1, Fraction(round(Fraction(81_559 - 13_440, 81_559), 3))),  # 512+12288+512+128
    (81_559, 4, Fraction(round(Fraction(81_559 - 14_336, 81_559), 3))),  # 512+12288+1024+512
    (23_034, 4, Fraction(round(Fraction(23_034 - 4_256, 23_034), 3))),  # L4: 512+3072+160+512
    # 35 to 60 GiB ("A100 (40GB), L40"): chunked_prefill_size 4096, cuda_graph_max_bs 32 at
    # tp < 4, no 10,240 floor: an L40S's 46,068 MiB, 512 + 1.5·4096 + 2·32 + 128 = 6,848
    (46_068, 1, Fraction(round(Fraction(46_068 - 6_848, 46_068), 3))),
    # 160 GiB is not `gpu_mem < 160 * 1024`: the top tier, chunk 16384, max_bs 512:
    # 512 + 1.5·16384 + 2·512 + 128 = 26,240
    (163_840, 1, Fraction(round(Fraction(163_840 - 26_240, 163_840), 3))),
])
def test_sglang_2026_reserve_rule(mib, tp, want):
    d = engines.defaults("sglang", None, mib * MiB, tp, 1, False, version="0.5")
    assert d.utilization == want.limit_denominator(1000)
    # chunked_prefill_size by the same tiers; SGLang's page_size default 1 (a token a page)
    chunk = 2048 if mib < 35 * 1024 else 4096 if mib < 60 * 1024 else \
        8192 if mib < 160 * 1024 else 16384
    assert (d.max_num_batched_tokens, d.block_size) == (chunk, 1)


def test_vllm_block_size_left_alone_without_a_recurrent_state():
    """vLLM raises the attention block size only for hybrid attention + Mamba models
    (vllm/model_executor/models/config.py, HybridAttentionMambaModelConfig): Llama 3.1 8B
    keeps block_size 16 (the CUDA default), and its defaults name no hybrid rule."""
    p = serve(get_preset("meta-llama/Llama-3.1-8B"), get_scheme("bf16"), gpu="H100", ctx=8192)
    assert p.defaults.block_size == 16
    assert "hybrid" not in p.defaults.why


def test_vllm_batch_defaults_below_70_gib_and_frozen():
    """vllm/engine/arg_utils.py EngineArgs.get_batch_defaults, OPENAI_API_SERVER: under
    70 GiB (or an A100) max_num_batched_tokens 2048 and max_num_seqs 256; else 8192, 1024.
    The records are frozen (DEVELOPERS.md: frozen records)."""
    import dataclasses
    small = engines.defaults("vllm", "NVIDIA L40S", 46_068 * MiB, 1, 1, False)
    assert (small.max_num_batched_tokens, small.max_num_seqs, small.block_size) == (2048, 256, 16)
    a100 = engines.defaults("vllm", "NVIDIA A100-SXM4-80GB", 81_154 * MiB, 1, 1, False)
    assert (a100.max_num_batched_tokens, a100.max_num_seqs) == (2048, 256)
    with pytest.raises(dataclasses.FrozenInstanceError):
        small.max_num_seqs = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        engines.get_engine("vllm").profiled = False


def test_vllm_capture_sizes_and_graph_estimate():
    # [1, 2, 4] + range(8, 256, 8) + range(256, M + 1, 16), M = min(2·max_num_seqs, 512, N)
    sizes = startup.capture_sizes(1024, 8192)
    assert len(sizes) == 3 + 31 + 17 and sizes[-1] == 512
    assert startup.capture_sizes(8, 8192) == [1, 2, 4, 8, 16]
    assert startup.capture_sizes(256, 100) == [1, 2, 4] + list(range(8, 97, 8))
    g = startup.cuda_graphs(10 * MiB, sizes)
    # first capture shared, then 2 modes · 50 other sizes at 1 MiB (vLLM's floor) to 24 MiB
    assert (g.low, g.high) == (10 * MiB + 100 * MiB, 10 * MiB + 2400 * MiB)


def test_communicators_by_tp_and_link():
    assert startup.communicators(1, 1, True) == startup.ZERO
    ar = 256 + 8192 * 1024 * 2 + 8 * MiB  # meta + IPC buffer, rank_data
    c = startup.communicators(2, 1, True)
    assert (c.low, c.high) == (16 * NCCL_CONNECTION + ar, 32 * 4 * NCCL_CONNECTION + ar)
    c = startup.communicators(4, 1, False)  # PCIe, TP > 2: no custom all-reduce
    assert (c.low, c.high) == (2 * NCCL_CONNECTION, 8 * 4 * NCCL_CONNECTION)
    c = startup.communicators(3, 2, True)  # TP 3: custom all-reduce unsupported; a PP pair
    assert c.low == 2 * 16 * NCCL_CONNECTION
    c = startup.communicators(1, 2, True)  # PP alone: one communicator (the stage pair), no TP
    assert (c.low, c.high) == (16 * NCCL_CONNECTION, 32 * 4 * NCCL_CONNECTION)


def test_gpt_oss_mxfp4_as_loaded_on_hopper():
    # vLLM's Marlin path pads I 2,880 -> 2,944 (128) and H 2,880 -> 3,072 (256); per layer
    # 128 experts of w13 (2·I × H) and w2 (H × I) at 17/32 byte a value, and bf16 biases
    # (2·I + H); Triton keeps the checkpoint's shapes (I is a multiple of 64)
    c, scheme = gpt_oss()
    (st,) = stages(c, scheme, 2, 1, 1)
    def experts(i, h):
        return 128 * (3 * i * h * Fraction(17, 32) + (2 * i + h) * 2)
    extra = 36 * (experts(2944, 3072) - experts(2880, 2880))
    w = loaded(c, "mxfp4", st.bytes, 36, 1, "sm90")
    assert w.low == st.bytes and w.high - st.bytes == extra
    assert w.paths == ("Triton (triton_kernels)", "Marlin")
    # the published range as loaded on Hopper: 64.4–66.0 GiB against 60.8 on disk
    assert Fraction("64.4") * GiB <= w.high <= Fraction("66.0") * GiB
    ampere = loaded(c, "mxfp4", st.bytes, 36, 1, "sm80")  # Marlin only below sm90
    assert ampere.low == ampere.high == w.high
    bf16 = loaded(c, "bf16", st.bytes, 36, 1, "sm90")
    assert bf16.low == bf16.high == st.bytes


def test_usable_memory_as_torch_sees_it():
    # measured on this project's H200 (torch 2.11, driver 580.159.04): mem_get_info total
    # 150,109,880,320 bytes = 143,155.94 MiB; nvidia-smi: total 143,771 MiB, reserved 616
    h200 = get_gpu("H200")
    assert abs(Fraction(h200.usable_bytes, MiB) - (143_771 - 616)) < 1
    # vLLM on an H100 80GB HBM3: "total_gpu_memory 79.22GiB" (vllm PR #10511)
    assert abs(Fraction(get_gpu("H100").usable_bytes, GiB) - Fraction("79.22")) <= \
        Fraction(1, 200)
    assert get_gpu("H100").usable_bytes < get_gpu("H100").memory_bytes


def test_hybrid_block_aligned_to_the_state_page():
    # one attention layer of 4,096 bytes a token, a recurrent state of 3,227,648 bytes:
    # 16 · ceil(3,227,648 / (16 · 4,096)) = 16 · 50 = 800 tokens; the state padded to
    # 800 · 4,096 = 3,276,800 bytes
    caches = [kv.LayerKV(0, 0, None, 3_227_648), kv.LayerKV(1, 4096, None, 0)]
    assert kv.hybrid_block(caches, 16) == 800
    padded = kv.pad_states(caches, 800, 4096)
    assert padded[0].state_bytes == 3_276_800 and padded[1] == caches[1]
    assert kv.hybrid_block([kv.LayerKV(0, 4096, None, 0)], 16) == 16


def test_gpt_oss_120b_on_one_h100_at_128k_does_not_fit(capsys):
    # vLLM printed a negative KV budget, −2.1 GiB, for gpt-oss-120b on one H100 (issue 43):
    # the verdict must not be "fits"
    code, out, _ = run(capsys, "serve", "--config", str(OSS), "--gpu", "H100", "--ctx",
                       "131072", "--format", "json")
    d = json.loads(out)
    assert code == 0 and d["fits"] is False and d["max_concurrency"] == 0
    assert d["engine_version"] == "0.21"
    assert d["weights_stored_bytes_per_gpu"] < d["weights_bytes_per_gpu"]
    lo, hi = d["kv_pool_bytes_per_gpu_range"]
    assert lo == d["kv_pool_bytes_per_gpu"] <= hi
    for key in ("fits", "weights_bytes_per_gpu", "kv_pool_bytes_per_gpu", "kv_pool_tokens",
                "max_concurrency", "cuda_graph_bytes_per_gpu", "engine_version"):
        assert key in d
    assert "non_torch_bytes" in d["assumptions"]
    assert "activation_peak_bytes" in d["stages"][0]


def test_default_engine_named_on_the_first_screen(capsys):
    code, out, _ = run(capsys, "serve", "--config", str(DATA / "Llama-3.1-70B.json"),
                       "--gpu", "A100", "--tp", "4")
    first = out.splitlines()[:16]
    assert code == 0 and any("vllm 0.21" in line and "the default" in line for line in first)


def test_fits_only_at_the_pessimistic_end():
    # Llama-3.1-8B on an H100 at 8k: the optimistic end holds more sequences than the
    # pessimistic one; asking for one more than the pessimistic end is "does not fit"
    c = get_preset("meta-llama/Llama-3.1-8B")
    p = serve(c, get_scheme("bf16"), gpu="H100", ctx=8192)
    assert p.max_concurrency < p.max_concurrency_high
    q = serve(c, get_scheme("bf16"), gpu="H100", ctx=8192, concurrency=p.max_concurrency + 1)
    assert not q.fits and q.may_fit


def test_attention_term_of_the_forward_peak():
    # issue 45: a model whose attention outweighs its MLP (d_ff 64): live at the peak are
    # 3·N·d (residual, input, norm) and N·(q + o + k + v) = N·(h·d_k·2 + 2·h_kv·d_k), bf16
    from dataclasses import replace
    c = replace(get_preset("meta-llama/Llama-3.1-8B"), d_ff=64)
    n = 1000
    for tp in (1, 2):
        attn = n * (32 // tp * 128 * 2 + 2 * (8 // tp) * 128)
        assert forward_peak(c, n, tp) == (3 * n * 4096 + attn) * 2


def test_sampler_logits_and_the_stage_that_runs_it():
    # issue 45: the dummy sampler (top_p 0.9, top_k V − 1) sorts min(max_num_seqs, N) rows of
    # V: bf16 logits 2 + fp32 copy 4 + sorted values 4 + int64 indices 8 + the radix sort's
    # second buffer 12 = 30 bytes an entry at the high end; FlashInfer's path 2 + 4 + 4 + 4 =
    # 14; and the model's N·d output; only the last PP stage samples
    c = get_preset("meta-llama/Llama-3.1-8B")
    assert sampler_peak(c, 8192, 1024) == 1024 * 128_256 * 30 + 8192 * 4096 * 2
    assert sampler_peak(c, 8192, 1024, high=False) == 1024 * 128_256 * 14 + 8192 * 4096 * 2
    assert sampler_peak(c, 100, 1024) == 100 * 128_256 * 30 + 100 * 4096 * 2
    p = serve(c, get_scheme("bf16"), gpu="H100", pp=2, ctx=4096)
    first, last = p.stages
    assert first.activation_bytes == forward_peak(c, 8192, 1)
    assert last.activation_bytes == max(forward_peak(c, 8192, 1),
                                        1024 * 128_256 * 30 + 8192 * 4096 * 2)
    assert activation_peak(c, 8192, 1024, 1) == last.activation_bytes


def test_sglang_single_gpu_reserve_is_the_context_alone():
    # issue 45: one GPU, no communicators: pool = (start − weights) − start·(1 − f), start =
    # torch's total − the 0.51 GiB context measured on the H200 (552,402,944 bytes)
    c = get_preset("meta-llama/Llama-3.1-8B")
    f = Fraction(8, 10)
    p = serve(c, get_scheme("bf16"), gpu="H100", engine="sglang", utilization=f, ctx=4096)
    start = round(Fraction("79.22") * GiB) - 552_402_944
    assert p.kv_pool_bytes_per_gpu == int((start - 16_060_522_496) - start * (1 - f))
    assert p.non_torch.low == p.non_torch.high == 552_402_944


def test_prefill_lm_head_on_the_last_position_only():
    # issue 45: the prefill computes logits for the last position only: two models that
    # differ only in V differ by 2·d·ΔV FLOPs whatever the prompt length
    from dataclasses import replace
    from accounting.serving.timing import prefill_flops
    c = get_preset("meta-llama/Llama-3.1-8B")
    small = replace(c, vocab_size=c.vocab_size - 1024)
    for prompt in (16, 512):
        assert prefill_flops(c, prompt) - prefill_flops(small, prompt) == 2 * 4096 * 1024


@pytest.mark.parametrize("tp", [1, 2])
def test_conv_window_is_kernel_minus_one_columns(tp):
    # vLLM's pool keeps K − 1 columns of a recurrent layer's conv input, not transformers' K
    # (vllm/model_executor/layers/mamba/mamba_utils.py at 02d7108, MambaStateShapeCalculator:
    # short_conv_state_shape (d/tp, conv_kernel − 1), also mamba1/mamba2/gated_delta_net/kda
    # with conv_kernel − 1); transformers' cache keeps K (tests/test_hf_lfm2.py, its
    # DynamicCache after a CPU forward). LFM2 by hand: a conv layer holds (K − 1)·d/tp
    # elements of the cache dtype (bf16, 2 bytes) per sequence, an attention layer none.
    from accounting.architecture.hf_config import translate
    from tests.test_hf_lfm2 import D, DATA, K
    c = translate(DATA, "config.json", "lfm2-small").config
    caches = kv.layer_caches(c, 2, tp, (0, 1, 2, 3))
    assert [x.state_bytes for x in caches] == [(K - 1) * D // tp * 2] * 2 + [0] + \
        [(K - 1) * D // tp * 2]
