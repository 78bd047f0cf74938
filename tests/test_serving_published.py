"""Weights as stored against the sizes of published checkpoints and the weight memory engines
printed for them (issue 29, Must 2). Each figure is the source's, cited; the tool's bytes come
from the config.json and the format's layout (accounting/formats/layouts.py)."""
from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

from accounting.formats.schemes import get_scheme
from accounting.serving.shards import stages
from accounting.architecture.loaders import read_config
from accounting.architecture.presets import get_preset

GB, GiB = 10**9, 2**30
L70 = Path(__file__).parent / "data" / "serving" / "Llama-3.1-70B.json"


def within(got, want, share) -> bool:
    return abs(Fraction(got) - Fraction(want)) <= Fraction(share) * Fraction(want)


def test_llama_3_2_1b_w4a16_and_awq_files():
    # https://github.com/vllm-project/llm-compressor/issues/1969: Llama-3.2-1B quantized W4A16
    # (group 128, ignore lm_head) by llm-compressor: model.safetensors "~1.44 GB"; by AutoAWQ
    # "about 1 000 MB (~1 GB)". The model ties its LM head; the compressed-tensors file holds
    # the head as its own bf16 tensor (128,256 × 2,048), AutoAWQ's only the embedding. The
    # 1.44 is GiB (a file manager's "GB"): 1,552,553,728 bytes.
    c = get_preset("meta-llama/Llama-3.2-1B")
    (ct,) = stages(c, get_scheme("w4a16"), 2, 1, 1)
    head = 128256 * 2048 * 2
    assert within(ct.bytes + head, Fraction("1.44") * GiB, "0.01")
    (awq,) = stages(c, get_scheme("awq"), 2, 1, 1)
    assert within(awq.bytes, 1000 * 10**6, "0.05")


def test_llama_2_70b_awq_checkpoint(tmp_path):
    # https://github.com/Cornell-RelaxML/quip-sharp/issues/46: TheBloke/Llama-2-70B-Chat-AWQ
    # (AWQ 4-bit, group 128, GEMM) is "~36.5GB" on the Hub (decimal GB). Llama-2-70B is
    # Llama-3.1-70B's shape with a 32,000-token vocabulary.
    data = json.loads(L70.read_text())
    data.update(vocab_size=32000, max_position_embeddings=4096, rope_scaling=None,
                rope_theta=10000.0)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    c, _ = read_config(path)
    (st,) = stages(c, get_scheme("awq"), 2, 1, 1)
    assert within(st.bytes, Fraction("36.5") * GB, "0.01")


def test_deepseek_fp8_blocks_per_gpu_at_tp8():
    # https://github.com/HabanaAI/vllm-fork/issues/809: DeepSeek-R1 (DeepSeek-V3's
    # architecture and fp8 128×128-block checkpoint), vLLM at TP 8: "Pre-loading model
    # weights on hpu:0 took 79.41 GiB of device memory". MTP layer not loaded.
    c = get_preset("deepseek-ai/DeepSeek-V3")
    (st,) = stages(c, get_scheme("fp8-block"), 2, 8, 1)
    assert within(st.bytes, Fraction("79.41") * GiB, "0.005")


def test_llama_3_8b_bf16_weights_as_vllm_prints():
    # https://github.com/vllm-project/vllm/pull/10511: "model weights take 14.96GiB" at TP 1,
    # "7.48GiB" at TP 2 (Meta-Llama-3-8B, bf16)
    c = get_preset("meta-llama/Llama-3.1-8B")
    for tp, printed in ((1, "14.96"), (2, "7.48")):
        (st,) = stages(c, get_scheme("bf16"), 2, tp, 1)
        assert within(st.bytes, Fraction(printed) * GiB, "0.001")


def test_gpt_oss_120b_mxfp4_checkpoint():
    # OpenAI's gpt-oss model card (arXiv 2508.10925, table 1) lists a 60.8 GiB checkpoint for
    # gpt-oss-120b: the experts in MXFP4 (blocks and e8m0 scales), attention, router,
    # embedding and head bf16 (its quantization_config's modules_to_not_convert)
    from accounting.formats.hf_quant import scheme_from_config
    from accounting.architecture.own_format import read_json
    path = Path(__file__).parent / "data" / "serving" / "gpt-oss-120b.json"
    data, _ = read_json(path)
    c, _ = read_config(path, drop=("quantization_config",))
    (st,) = stages(c, scheme_from_config(data["quantization_config"]), 2, 1, 1)
    assert within(st.bytes, Fraction("60.8") * GiB, "0.005")
    # the experts by hand: 36 layers · 128 experts · (gate_up 5,760 × 2,880 and down
    # 2,880 × 2,880) at half a byte per value plus a byte per 32
    experts = 36 * 128 * (5760 * 2880 + 2880 * 2880) * (Fraction(1, 2) + Fraction(1, 32))
    assert dict(st.by_part)["quantized blocks"] + dict(st.by_part)["quantized scales"] == experts
