"""A quantization_config is checked against its method's schema (accounting/formats/
quant_schema.py) before any layout sees it (issue 45): each block below is one the library
that reads it refuses (transformers' GPTQConfig, BitsAndBytesConfig, FineGrainedFP8Config;
compressed-tensors' QuantizationArgs and QuantizationScheme: asserted here on the library's
own objects) or one whose value is not a size at all (a group of -2 or 0 columns, a block of
`true` × `true`). Each must be refused in one line (exit 2): before the fix they gave
negative weight bytes with "fits: yes" (exit 0) or a ZeroDivisionError, AttributeError,
TypeError, KeyError or IndexError (exit 3)."""
from __future__ import annotations

import json

import pytest

from accounting.cli.main import main
from accounting.formats.hf_quant import scheme_from_config
from accounting.runtime.errors import UsageError

LLAMA = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096,
         "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
         "num_key_value_heads": 8, "max_position_embeddings": 8192}


def _ct(weights=None, fmt="pack-quantized", groups=None, **group):
    w = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
         "group_size": 128} if weights is None else weights
    return {"quant_method": "compressed-tensors", "format": fmt,
            "config_groups": groups if groups is not None else
            {"group_0": {"targets": ["Linear"], "weights": w, **group}}}


def _fp8(**kw):
    return {"quant_method": "fp8", "activation_scheme": "dynamic", **kw}


def _serve(capsys, tmp_path, quant):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, "quantization_config": quant}))
    capsys.readouterr()  # what importing a library for the test's oracle logged
    code = main(["serve", "--config", str(path), "--gpu", "H100", "--ctx", "4096",
                 "--format", "json"])
    out, err = capsys.readouterr()
    return code, out, err


# (block, why it is bad: the library that refuses it, or the reason it is not a size)
GROUPS = [-128, -64, -2, 0]
CT_WEIGHTS = [  # each refused by compressed-tensors' QuantizationArgs (asserted below)
    {"num_bits": 4, "type": "int", "strategy": "group", "group_size": -128},
    {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 0},
    {"num_bits": 4, "type": "int", "strategy": "group", "group_size": "128"},
    {"num_bits": 4, "type": "int", "strategy": "group"},
    {"num_bits": 8, "type": "float", "strategy": "block"},
    {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": 128},
    {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": "abc"},
    {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128]},
    {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [0, 128]},
    {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [-128, -128]},
    {"num_bits": 8, "type": "bogus", "strategy": "tensor"},
]


@pytest.mark.parametrize("method", ["awq", "gptq"])
@pytest.mark.parametrize("group", GROUPS)
def test_a_group_size_below_one_is_refused(capsys, tmp_path, method, group):
    q = {"quant_method": method, "bits": 4, "group_size": group, "version": "gemm",
         "zero_point": True}
    if method == "gptq":  # transformers refuses it (GPTQConfig.post_init) ...
        transformers = pytest.importorskip("transformers")
        with pytest.raises(ValueError, match="group_size must be greater than 0"):
            transformers.GPTQConfig(bits=4, group_size=group)
    # ... and AWQ's GEMM layout cannot hold it: in_features // group_size rows of qzeros and
    # scales (AutoAWQ WQLinear_GEMM.__init__) is a division by 0 or a negative shape
    with pytest.raises(UsageError, match="group_size must be a positive integer or -1"):
        scheme_from_config(q)
    code, out, err = _serve(capsys, tmp_path, q)
    assert (code, out) == (2, "") and err.count("\n") == 1 and "group_size" in err


@pytest.mark.parametrize("weights", CT_WEIGHTS, ids=lambda w: json.dumps(w)[:60])
def test_compressed_tensors_arguments_its_library_refuses(capsys, tmp_path, weights):
    qa = pytest.importorskip("compressed_tensors.quantization")
    with pytest.raises((ValueError, TypeError)):
        qa.QuantizationArgs(**weights)
    fmt = "float-quantized" if weights["num_bits"] == 8 else "pack-quantized"
    with pytest.raises(UsageError):
        scheme_from_config(_ct(weights, fmt))
    code, out, err = _serve(capsys, tmp_path, _ct(weights, fmt))
    assert (code, out) == (2, "") and err.count("\n") == 1, err


@pytest.mark.parametrize("q,said", [
    (_ct(groups={"group_0": ["Linear"]}), "one group, an object"),
    (_ct(groups={"group_0": "Linear"}), "one group, an object"),
    (_ct(groups=["group_0"]), "one group, an object"),
    (_ct(weights=[4]), "weights must be an object"),
    (_ct(input_activations=[1]), "input_activations must be an object"),
    ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {}}}},
     "needs format"),
])
def test_malformed_compressed_tensors_blocks(capsys, tmp_path, q, said):
    qs = pytest.importorskip("compressed_tensors.quantization")
    group = q["config_groups"]
    entry = next(iter(group.values())) if isinstance(group, dict) else group
    if isinstance(entry, dict) and "format" in q:  # the scheme object refuses it too
        with pytest.raises((ValueError, TypeError)):
            qs.QuantizationScheme(targets=["Linear"], **{k: v for k, v in entry.items()
                                                         if k != "targets"})
    with pytest.raises(UsageError, match=said):
        scheme_from_config(q)
    code, out, err = _serve(capsys, tmp_path, q)
    assert (code, out) == (2, "") and err.count("\n") == 1, err


def test_fp8_blocks_and_activation_schemes():
    transformers = pytest.importorskip("transformers")
    # transformers refuses a list activation_scheme (post_init lowers it: AttributeError)
    with pytest.raises(AttributeError):
        transformers.FineGrainedFP8Config(activation_scheme=["dynamic"])
    with pytest.raises(UsageError, match="activation_scheme must be"):
        scheme_from_config(_fp8(activation_scheme=["dynamic"]))
    # json's true is 1 to Python: FineGrainedFP8Config takes [true, true] as 1 × 1 blocks;
    # a block size is a count of elements, not a switch, so it is refused here
    for block in ([True, True], [128, 0], [128], [128, "128"], "128x128"):
        with pytest.raises(UsageError, match="weight_block_size must be"):
            scheme_from_config(_fp8(weight_block_size=block))
    # scale_fmt ue8m0 (transformers' 1-byte float8_e8m0fnu scales): by hand, a 4096 × 4096
    # weight has 32 × 32 blocks of 128, one byte each instead of fp32's four
    s = scheme_from_config(_fp8(weight_block_size=[128, 128], scale_fmt="ue8m0"))
    assert s.tensors(4096, 4096) == {"weight": 4096 * 4096, "weight_scale_inv": 32 * 32}
    assert scheme_from_config(_fp8(weight_block_size=[128, 128])).tensors(4096, 4096) == {
        "weight": 4096 * 4096, "weight_scale_inv": 32 * 32 * 4}
    # MiniMax's ignored_layers, FineGrainedFP8Config's alias of modules_to_not_convert
    assert transformers.FineGrainedFP8Config(ignored_layers=["gate"]).modules_to_not_convert \
        == ["gate"]
    assert scheme_from_config(_fp8(weight_block_size=[128, 128],
                                   ignored_layers=["gate"])).ignore == ("gate",)
    with pytest.raises(UsageError, match="expert_dtype"):
        scheme_from_config(_fp8(weight_block_size=[128, 128], expert_dtype="fp4"))


def test_bitsandbytes_both_bit_widths_are_refused_as_transformers_does(capsys, tmp_path):
    transformers = pytest.importorskip("transformers")
    q = {"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": True}
    with pytest.raises(ValueError, match="both True"):
        transformers.BitsAndBytesConfig(load_in_4bit=True, load_in_8bit=True)
    with pytest.raises(UsageError, match="both true"):
        scheme_from_config(q)
    code, out, err = _serve(capsys, tmp_path, q)
    assert (code, out) == (2, "") and err.count("\n") == 1
    with pytest.raises(UsageError, match="load_in_4bit must be true or false"):
        scheme_from_config({"quant_method": "bitsandbytes", "load_in_4bit": "yes"})


@pytest.mark.parametrize("q", [
    {"quant_method": "bitsandbytes", "load_in_4bit": True},
    {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
    {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_use_double_quant": True},
    {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
     "bnb_4bit_use_double_quant": True},
])
def test_bitsandbytes_defaults_are_transformers_own(q):
    # the keys a quantization_config leaves out take BitsAndBytesConfig's defaults
    # (bnb_4bit_quant_type "fp4", no double quantization), read from its own object
    transformers = pytest.importorskip("transformers")
    ref = transformers.BitsAndBytesConfig.from_dict(dict(q))
    params = dict(scheme_from_config(q).params)
    assert params["quant_type"] == ref.bnb_4bit_quant_type
    assert params["double_quant"] == ref.bnb_4bit_use_double_quant
    assert params["blocksize"] == 64  # Params4bit's default blocksize (bitsandbytes 0.50.2)


def test_the_layouts_refuse_a_size_below_one_from_any_caller():
    from accounting.formats import layouts
    for group in (0, -2, -128):
        with pytest.raises(UsageError, match="positive integer"):
            layouts.awq(4096, 4096, group=group)
        with pytest.raises(UsageError, match="positive integer"):
            layouts.ct_packed(4096, 4096, group=group)
    with pytest.raises(UsageError, match="positive integer"):
        layouts.fp8_block(4096, 4096, block=(True, 128))
    with pytest.raises(UsageError, match="positive integer"):
        layouts.ct_8bit(4096, 4096, "block", block=(-128, -128))


def test_well_formed_blocks_still_read():
    # compressed-tensors' own spellings: strategy inferred from group_size, "RxC" blocks
    s = scheme_from_config(_ct({"num_bits": 4, "type": "int", "group_size": 128}))
    assert s.kind == "ct_packed" and s.group == 128
    b = scheme_from_config(_ct({"num_bits": 8, "type": "FLOAT", "strategy": "block",
                                "block_structure": "128x128"}, "float-quantized"))
    assert dict(b.params)["block"] == (128, 128)
    g = scheme_from_config({"quant_method": "gptq", "bits": 4, "group_size": -1})
    assert g.group == -1 and "one group per row" in g.label


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_static_input_scheme_stores_its_input_scale(dynamic):
    # compressed-tensors' own compressed state dict of one layer (tests/test_formats.py's
    # helper): a static input scheme (input_activations dynamic false) adds input_scale, a
    # dynamic one does not (found by benchmarks/mutation_audit.py: reading `dynamic` the
    # wrong way round survived the suite)
    from test_formats import _compressed
    w = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "tensor"}
    act = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "tensor",
           "dynamic": dynamic}
    s = scheme_from_config(_ct(w, "float-quantized", input_activations=act))
    expected = _compressed("float-quantized", w, static_input=not dynamic)
    assert s.tensors(64, 256) == expected
    assert ("input_scale" in expected) is (not dynamic)


def test_gptq_bit_widths_laid_out_and_refused():
    # AutoGPTQ's QuantLinear at bits 8, by hand (4096 × 4096, group 128): qweight int32
    # (in·8/32, out), qzeros int32 (in/g, out·8/32), scales fp16 (in/g, out), g_idx (in)
    s = scheme_from_config({"quant_method": "gptq", "bits": 8, "group_size": 128})
    assert s.tensors(4096, 4096) == {"qweight": 1024 * 4096 * 4, "qzeros": 32 * 1024 * 4,
                                     "scales": 32 * 4096 * 2, "g_idx": 4096 * 4}
    transformers = pytest.importorskip("transformers")
    transformers.GPTQConfig(bits=3)  # transformers takes 3 bits; no layout here: refused
    with pytest.raises(UsageError, match="gptq bits 3"):
        scheme_from_config({"quant_method": "gptq", "bits": 3})


def test_non_square_blocks_against_compressed_tensors():
    # rows by block_structure[0], columns by [1] (a mutation-audit survivor: square blocks
    # could not tell them apart)
    from test_formats import _compressed
    w = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "block",
         "block_structure": [32, 128]}
    assert scheme_from_config(_ct(w, "float-quantized")).tensors(64, 256) == \
        _compressed("float-quantized", w)
    fp8 = scheme_from_config(_fp8(weight_block_size=[32, 128]))
    assert fp8.tensors(64, 256)["weight_scale_inv"] == 2 * 2 * 4  # ⌈64/32⌉·⌈256/128⌉ fp32


@pytest.mark.parametrize("weights,words", [
    ({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 64},
     "int4 packed in int32, bf16 scale per group 64, symmetric (compressed-tensors)"),
    ({"num_bits": 4, "type": "int", "strategy": "channel", "symmetric": False},
     "int4 packed in int32, bf16 scale per output channel, with zero points "
     "(compressed-tensors)"),
])
def test_packed_labels_say_what_is_stored(weights, words):
    assert scheme_from_config(_ct(weights)).label == words


def test_8bit_group_strategy_against_compressed_tensors():
    # a per-group int8 block read from config.json (a mutation-audit survivor: the group
    # size was never read for the 8-bit formats)
    from test_formats import _compressed
    w = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "group",
         "group_size": 128}
    assert scheme_from_config(_ct(w, "int-quantized")).tensors(64, 256) == \
        _compressed("int-quantized", w)


def test_defaults_of_an_absent_key_are_the_readers():
    # a key left out takes its reader's default (a mutation-audit survivor: AWQ's group
    # default was unguarded): transformers' AwqConfig and GPTQConfig, group_size 128
    transformers = pytest.importorskip("transformers")
    awq = scheme_from_config({"quant_method": "awq", "bits": 4})
    gptq = scheme_from_config({"quant_method": "gptq", "bits": 4})
    assert awq.group == transformers.AwqConfig(bits=4).group_size == 128
    assert gptq.group == transformers.GPTQConfig(bits=4).group_size == 128
    assert not gptq.desc_act and transformers.GPTQConfig(bits=4).desc_act is False
