"""Weight formats (accounting/formats/): each layout against the library that writes it where it
runs on the CPU (compressed-tensors 0.20 packs a layer here), else against the shapes its
writer allocates, written out by hand from the cited source; quantization_config reading;
bad input in one line."""
from __future__ import annotations

import pytest

from accounting.formats import layouts
from accounting.formats.hf_quant import scheme_from_config
from accounting.formats.schemes import SCHEMES, get_scheme
from accounting.runtime.errors import UsageError


def _compressed(fmt: str, weights: dict, out=64, inp=256, static_input=False) -> dict:
    """compressed-tensors' own state dict of one bf16 Linear(inp, out), tensor -> bytes."""
    torch = pytest.importorskip("torch")
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (QuantizationArgs, QuantizationConfig,
                                                 QuantizationScheme, QuantizationStatus,
                                                 apply_quantization_config)
    m = torch.nn.Sequential(torch.nn.Linear(inp, out, bias=False)).to(torch.bfloat16)
    act = (QuantizationArgs(num_bits=8, type="float", symmetric=True, strategy="tensor",
                            dynamic=False) if static_input else None)
    scheme = QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(**weights),
                                input_activations=act)
    apply_quantization_config(m, QuantizationConfig(config_groups={"g": scheme}, format=fmt,
                                                    quantization_status=QuantizationStatus.FROZEN))
    ModelCompressor.from_pretrained_model(m, quantization_format=fmt).compress_model(m)
    return {k.split(".", 1)[1]: v.numel() * v.element_size() for k, v in m.state_dict().items()}


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("group", [128, 64, None])
def test_pack_quantized_int4_matches_compressed_tensors(symmetric, group):
    weights = dict(num_bits=4, type="int", symmetric=symmetric,
                   strategy="group" if group else "channel", group_size=group)
    expected = _compressed("pack-quantized", weights)
    assert layouts.ct_packed(64, 256, 4, group, symmetric) == expected


@pytest.mark.parametrize("typ,fmt,strategy", [
    ("int", "int-quantized", "tensor"), ("int", "int-quantized", "channel"),
    ("float", "float-quantized", "tensor"), ("float", "float-quantized", "channel"),
    ("float", "float-quantized", "block")])  # int8 has no block strategy
def test_8bit_matches_compressed_tensors(typ, fmt, strategy):
    w = dict(num_bits=8, type=typ, symmetric=True, strategy=strategy)
    if strategy == "block":
        w["block_structure"] = [128, 128]
    expected = _compressed(fmt, w)
    got = layouts.ct_8bit(64, 256, strategy, block=(128, 128) if strategy == "block" else None)
    assert got == expected


def test_static_input_scale_matches_compressed_tensors():
    expected = _compressed("float-quantized", dict(num_bits=8, type="float", symmetric=True,
                                                   strategy="tensor"), static_input=True)
    assert layouts.ct_8bit(64, 256, "tensor", static_input=True) == expected


def test_awq_gemm_shapes_by_hand():
    # AutoAWQ WQLinear_GEMM.__init__ (awq/modules/linear/gemm.py): qweight (in, out/8) int32,
    # qzeros (in/g, out/8) int32, scales (in/g, out) fp16; Llama-3.1-8B's gate_proj 14336×4096
    out, inp = 14336, 4096
    assert layouts.awq(out, inp) == {"qweight": 4096 * 1792 * 4, "qzeros": 32 * 1792 * 4,
                                     "scales": 32 * 14336 * 2}


def test_gptq_shapes_by_hand_and_act_order_row_parallel():
    # auto_gptq QuantLinear: qweight (in/8, out) int32, qzeros (ceil(in/g), out/8) int32,
    # scales (ceil(in/g), out) fp16, g_idx (in,) int32
    out, inp = 4096, 14336
    assert layouts.gptq(out, inp) == {"qweight": 1792 * 4096 * 4, "qzeros": 112 * 512 * 4,
                                      "scales": 112 * 4096 * 2, "g_idx": 14336 * 4}
    # a row-parallel shard (TP 2) of an act-order model keeps the whole input's scales
    # and zeros (vLLM gptq.py: scale_and_zero_input_dim None), its own half of the rest
    half = layouts.gptq(out, inp // 2, scale_in=inp)
    assert half == {"qweight": 896 * 4096 * 4, "qzeros": 112 * 512 * 4,
                    "scales": 112 * 4096 * 2, "g_idx": 7168 * 4}
    scheme = get_scheme("gptq-act-order")
    assert scheme.tensors(out, inp // 2, scale_in=inp) == half
    assert get_scheme("gptq").tensors(out, inp // 2, scale_in=inp)["scales"] == 56 * 4096 * 2


def test_fp8_block_and_mxfp4_by_hand():
    # DeepSeek-V3's q_b_proj, 24576×1536: fp8 weight, fp32 weight_scale_inv (192, 12)
    assert layouts.fp8_block(24576, 1536) == {"weight": 24576 * 1536,
                                              "weight_scale_inv": 192 * 12 * 4}
    # a ragged edge rounds up: 100×300 -> (1, 3) blocks
    assert layouts.fp8_block(100, 300)["weight_scale_inv"] == 3 * 4
    # gpt-oss: gate_up_proj_blocks (E, 2·2880, 2880/32, 16) uint8, scales (E, 5760, 90)
    assert layouts.mxfp4(5760, 2880) == {"blocks": 5760 * 90 * 16, "scales": 5760 * 90}


def test_fbgemm_fp8_by_hand():
    # FbgemmFp8Linear: weight fp8 (out, in), weight_scale fp32 (out, 1), input_scale_ub (1)
    assert layouts.fbgemm_fp8(53248, 16384) == {"weight": 53248 * 16384,
                                                "weight_scale": 53248 * 4, "input_scale_ub": 4}
    s = scheme_from_config({"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
                            "modules_to_not_convert": ["lm_head", "self_attn"]})
    assert s.kind == "fbgemm_fp8" and s.ignore == ("lm_head", "self_attn")


def test_quantization_configs_read():
    awq = scheme_from_config({"bits": 4, "group_size": 128, "modules_to_not_convert": None,
                              "quant_method": "awq", "version": "gemm", "zero_point": True})
    assert awq.kind == "awq" and awq.group == 128
    g = scheme_from_config({"quant_method": "gptq", "bits": 4, "group_size": 32,
                            "desc_act": True, "sym": True})
    assert g.desc_act and g.group == 32 and "desc_act" in g.label
    fp8 = scheme_from_config({"quant_method": "fp8", "activation_scheme": "dynamic",
                              "fmt": "e4m3", "weight_block_size": [128, 128]})
    assert fp8.kind == "fp8_block"
    tensor = scheme_from_config({"quant_method": "fp8", "activation_scheme": "static"})
    assert tensor.tensors(8, 8) == {"weight": 64, "weight_scale": 4, "input_scale": 4}
    ct = scheme_from_config({"quant_method": "compressed-tensors", "format": "pack-quantized",
                             "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                                 "num_bits": 4, "type": "int", "symmetric": True,
                                 "strategy": "group", "group_size": 128}}},
                             "ignore": ["lm_head"]})
    assert ct.kind == "ct_packed" and ct.ignore == ("lm_head",)
    mx = scheme_from_config({"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]})
    assert mx.name == "mxfp4" and len(mx.ignore) == 4


@pytest.mark.parametrize("q,words", [
    ({"quant_method": "hqq"}, "quant_method 'hqq' is not known"),
    ({"quant_method": "awq", "bits": 3}, "only 4-bit"),
    ({"quant_method": "fp8", "weight_block_size": [128]}, "two positive integers"),
    ({"quant_method": "bitsandbytes"}, "neither load_in_4bit"),
    ({"quant_method": "compressed-tensors", "format": "marlin-24", "config_groups": {
        "g": {"weights": {"num_bits": 4}}}}, "marlin-24"),
])
def test_unknown_or_bad_configs_are_one_line(q, words):
    with pytest.raises(UsageError) as e:
        scheme_from_config(q)
    assert words in str(e.value) and "\n" not in str(e.value)
    assert "supported quant_method" in str(e.value)


def test_group_that_does_not_divide_is_refused():
    with pytest.raises(UsageError, match="100 does not divide the input width 4,096"):
        get_scheme("awq").with_group(100).tensors(4096, 4096)
    with pytest.raises(UsageError, match="unknown weight scheme 'int3'"):
        get_scheme("int3")
    with pytest.raises(UsageError, match="has no groups"):
        get_scheme("fp8").with_group(64)


def test_registry_refuses_duplicates():
    from accounting.formats.schemes import register
    with pytest.raises(ValueError, match="registered twice"):
        register(SCHEMES["awq"])


def test_storage_dtype_sizes_are_torch_s():
    torch = pytest.importorskip("torch")
    from accounting import units
    # int32 and uint8 are DTYPE_BYTES' (tests/test_units_config.py checks them)
    sizes = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
    assert units.STORAGE_BYTES == {k: torch.empty(0, dtype=d).element_size()
                                   for k, d in sizes.items()}


def test_bitsandbytes_schemes_call_the_sibling_layouts(monkeypatch):
    # accounting/formats/bnb.py (the fine-tuning branch's) owns the layouts; the schemes call
    # bnb_4bit_bytes(out, in, *, quant_type, blocksize, double_quant) and bnb_8bit_bytes(out,
    # in), imported when used. A stub stands in for the module: the wiring, not the bytes.
    import sys
    import types
    calls = []
    stub = types.ModuleType("accounting.formats.bnb")
    stub.bnb_4bit_bytes = lambda o, i, **kw: calls.append((o, i, kw)) or {"weight": 1}
    stub.bnb_8bit_bytes = lambda o, i: calls.append((o, i)) or {"CB": 2}
    monkeypatch.setitem(sys.modules, "accounting.formats.bnb", stub)
    import accounting.formats as pkg
    monkeypatch.setattr(pkg, "bnb", stub, raising=False)
    assert get_scheme("nf4").tensors(64, 128) == {"weight": 1}
    assert get_scheme("bnb-int8").tensors(64, 128) == {"CB": 2}
    fp4 = scheme_from_config({"quant_method": "bitsandbytes", "load_in_4bit": True,
                              "bnb_4bit_quant_type": "fp4", "bnb_4bit_use_double_quant": False})
    fp4.tensors(64, 128)
    assert calls == [(64, 128, {"quant_type": "nf4", "blocksize": 64, "double_quant": True}),
                     (64, 128), (64, 128, {"quant_type": "fp4", "blocksize": 64,
                                           "double_quant": False})]
