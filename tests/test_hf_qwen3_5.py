"""Hugging Face config.json in, for Qwen3.5 (model_types qwen3_5, qwen3_5_moe and their text
configs qwen3_5_text, qwen3_5_moe_text; issue 31): Qwen3-Next's gated DeltaNet 3:1 with gated
attention, its DeltaNet's input projections split in four, interleaved M-RoPE, MTP layers
transformers does not build, the vision tower not counted. Counted against hand algebra
written here from transformers 5.23.0's modular_qwen3_5.py and modular_qwen3_5_moe.py,
transformers' own model (AutoModelForCausalLM: Qwen3_5ForCausalLM of text_config; meta device
for parameters, CPU for the cache it builds), PEFT on it (LoRA on the split projections), and
the published config.json files (../shared/frontier/, when present).

What modular_qwen3_5.py builds (read there): Qwen3_5GatedDeltaNet: conv1d (2·h_k·d_k + h_v·d_v
channels, width K, no bias), in_proj_qkv (d → 2·h_k·d_k + h_v·d_v), in_proj_z (d → h_v·d_v),
in_proj_b and in_proj_a (d → h_v each), dt_bias and A_log (h_v), norm (d_v), out_proj
(h_v·d_v → d); torch_chunk_gated_delta_rule, chunk 64. Qwen3_5Attention (Qwen3NextAttention):
q_proj d → 2·h·d_h (query and gate), k/v_proj d → h_kv·d_h, o_proj, q_norm/k_norm (d_h).
Qwen3_5MLP: SwiGLU, intermediate_size, in every layer (qwen3_5_text); Qwen3_5MoeSparseMoeBlock
in every layer (qwen3_5_moe_text): gate (E×d), experts (3·E·d_e·d), shared_expert (3·d·d_s),
shared_expert_gate (d → 1). (1 + w) RMSNorm before each sublayer and at the end.
"""
import functools
import json
import math
from pathlib import Path

import pytest

from accounting import analyze
from accounting.analysis.mtp import mtp
from accounting.architecture.hf_config import translate
from cli_run import agreeing_check, refused_in_one_line, run
from hf_examples import write_config

V, D, L, H, KV, HD, FF = 96, 32, 4, 4, 2, 16, 48
HK, HV, DK, DV, K, C = 2, 4, 4, 4, 4, 64
E, TOPK, DE, DS = 4, 2, 8, 8
ROPE = {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
        "mrope_section": [1, 1, 0], "mrope_interleaved": True}  # 16 · 0.25 = 4 dims: 2 pairs
TEXT = {"model_type": "qwen3_5_text", "vocab_size": V, "hidden_size": D,
        "intermediate_size": FF, "num_hidden_layers": L, "num_attention_heads": H,
        "num_key_value_heads": KV, "head_dim": HD, "linear_num_key_heads": HK,
        "linear_num_value_heads": HV, "linear_key_head_dim": DK, "linear_value_head_dim": DV,
        "linear_conv_kernel_dim": K, "full_attention_interval": 4,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "attn_output_gate": True,
        "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": False,
        "mlp_only_layers": [], "mamba_ssm_dtype": "float32", "dtype": "float32",
        "rope_parameters": ROPE}
MOE_TEXT = {**{k: v for k, v in TEXT.items() if k != "intermediate_size"},
            "model_type": "qwen3_5_moe_text", "num_experts": E, "num_experts_per_tok": TOPK,
            "moe_intermediate_size": DE, "shared_expert_intermediate_size": DS,
            "router_aux_loss_coef": 0.001}
# the vision-language file as published (a small vision tower: not counted)
VISION = {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2,
          "out_hidden_size": D, "model_type": "qwen3_5"}
DENSE = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
         "text_config": TEXT, "vision_config": VISION, "tie_word_embeddings": False,
         "image_token_id": 90, "video_token_id": 91, "vision_start_token_id": 92,
         "vision_end_token_id": 93}
MOE = {**DENSE, "architectures": ["Qwen3_5MoeForConditionalGeneration"],
       "model_type": "qwen3_5_moe", "text_config": MOE_TEXT,
       "vision_config": {**VISION, "model_type": "qwen3_5_moe"}}
# one example of each model_type, for the default sweep (tests/test_hf_default_sweep.py)
CONFIGS = {"qwen3_5_text": TEXT, "qwen3_5_moe_text": MOE_TEXT, "qwen3_5": DENSE,
           "qwen3_5_moe": MOE}
FRONTIER = Path(__file__).resolve().parents[2] / "shared" / "frontier"
D_CONV = 2 * HK * DK + HV * DV  # the conv's channels: Q, K, V


def spec(data=DENSE):
    return translate(data, "config.json", "qwen3.5-tiny").config


def hf_model(data, device="meta"):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(
        data["model_type"], **{k: v for k, v in data.items() if k != "model_type"})
    with torch.device(device):
        return transformers.AutoModelForCausalLM.from_config(cfg)


def test_read_as_written():
    for data in (DENSE, MOE, TEXT, MOE_TEXT):
        c = spec(data)
        assert c.layer_types == ("linear_attention",) * 3 + ("global",)
        assert c.linear_split_proj and c.rotary_dim == 4 and c.norm_offset and c.attn_output_gate
        assert c.mtp_layers == 1 and c.linear_chunk == 64
    assert spec(DENSE).num_experts is None and spec(DENSE).d_ff == FF
    m = spec(MOE)
    assert (m.num_experts, m.experts_per_token, m.num_shared_experts, m.dense_layers) == (E, TOPK, 1, ())
    assert m.shared_expert_gate and m.norm_topk_prob


def hand_params(moe: bool = False, active: bool = False) -> int:
    # per DeltaNet layer: conv, in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, dt_bias, A_log,
    # the gated norm, out_proj
    linear = D_CONV * K + D * D_CONV + D * HV * DV + D * HV + D * HV + 2 * HV + DV + HV * DV * D
    attn = D * 2 * H * HD + 2 * D * KV * HD + H * HD * D + 2 * HD
    ffn = (E * D + 3 * (TOPK if active else E) * DE * D + 3 * D * DS + D) if moe else 3 * D * FF
    return 2 * V * D + D + 3 * linear + attn + L * (2 * D + ffn)


@pytest.mark.parametrize("moe", [False, True])
def test_parameters_equal_hand_algebra_and_transformers(moe):
    data = MOE if moe else DENSE
    model = hf_model(data)
    assert type(model).__name__ == ("Qwen3_5MoeForCausalLM" if moe else "Qwen3_5ForCausalLM")
    a = analyze(spec(data), 8, 1)
    assert a.param_count == hand_params(moe) == sum(p.numel() for p in model.parameters())
    assert a.active_param_count == hand_params(moe, active=True)
    names = {n for n, _ in model.named_parameters()}
    assert "model.layers.0.linear_attn.in_proj_z.weight" in names  # the split layout


def hand_forward_flops(T: int, moe: bool = False) -> int:
    n = math.ceil(T / C)
    linear = (2 * T * D * D_CONV + 2 * T * D * HV * DV + 2 * 2 * T * D * HV  # qkv, z, b and a
              + 2 * T * D_CONV * K  # the depthwise conv, T outputs per channel
              + 2 * 2 * HV * n * C * C * DK + 2 * HV * n * (C * (C - 1) // 2) * (DV + DK)
              + 2 * 2 * HV * n * C * DK * DV + 2 * HV * n * C * C * DV
              + 2 * HV * (n - 1) * C * DK * DV + 2 * T * HV * DV * D)
    attn = 2 * T * D * 2 * H * HD + 2 * 2 * T * D * KV * HD + 2 * 2 * H * T * T * HD \
        + 2 * T * H * HD * D
    ffn = (2 * T * D * E + 3 * 2 * T * TOPK * D * DE + 3 * 2 * T * D * DS + 2 * T * D) if moe \
        else 3 * 2 * T * D * FF
    return 3 * linear + attn + L * ffn + 2 * T * D * V


@pytest.mark.parametrize("moe", [False, True])
@pytest.mark.parametrize("T", [100, 300])  # 2 and 5 chunks of 64, padded
def test_forward_flops_equal_hand_algebra(T, moe):
    assert analyze(spec(MOE if moe else DENSE), T, 1, "forward").matmul_flops() == \
        hand_forward_flops(T, moe)


def test_mtp_module_by_hand():
    """One MTP module (vLLM's Qwen3_5MultiTokenPredictor): a full-attention decoder layer
    (Qwen3_5DecoderLayer, layer_type full_attention: attention, MLP, two norms), fc (2d → d,
    no bias) and three norms (pre_fc_norm_hidden, pre_fc_norm_embedding, norm)."""
    m = mtp(spec())
    attn = D * 2 * H * HD + 2 * D * KV * HD + H * HD * D + 2 * HD
    assert (m.modules, m.block_params, m.glue_params) == (1, attn + 3 * D * FF + 2 * D,
                                                          2 * D * D + 3 * D)


@pytest.mark.parametrize("T,B", [(70, 2), (5, 1)])
def test_cache_bytes_equal_transformers_cache(tmp_path, capsys, T, B):
    """plan's .inference.kv_cache_bytes against the bytes of the tensors in transformers'
    cache after a CPU forward of T tokens (fp32 model): K and V of the attention layer, the
    conv window and the (float32) recurrent state of each gated DeltaNet layer."""
    torch = pytest.importorskip("torch")
    model = hf_model(DENSE, "cpu").eval()
    with torch.no_grad():
        cache = model(torch.zeros(B, T, dtype=torch.long), use_cache=True).past_key_values
    held = 0
    for layer in cache.layers:
        for attr in ("keys", "values", "conv_states", "recurrent_states"):
            x = getattr(layer, attr, None)
            items = x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else [x]
            held += sum(t.numel() * t.element_size() for t in items if isinstance(t, torch.Tensor))
    # by hand: K and V (T tokens, h_kv·d_h each) of one layer; per DeltaNet layer a
    # d_conv × K window and an h_v × d_k × d_v state, 4 bytes each
    assert held == B * (2 * KV * HD * T + 3 * (D_CONV * K + HV * DK * DV)) * 4
    code, out, err = run(capsys, "plan", "--config", str(write_config(tmp_path, DENSE)),
                         "--ctx", str(T), "--batch", str(B), "--precision", "fp32",
                         "--format", "json")
    assert code == 0, err
    assert json.loads(out)["inference"]["kv_cache_bytes"] == held


@pytest.mark.parametrize("data", [DENSE, MOE], ids=["qwen3_5", "qwen3_5_moe"])
def test_verify_agrees_with_transformers(tmp_path, capsys, data):
    """--verify at T = 70 (two chunks): every counter and transformers' own model (its conv
    less the K − 1 dropped outputs, its final state update subtracted, each a stated row);
    the MoE's expert implementations run shrunk on the CPU (hf_experts.py)."""
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, data)), "--ctx", "70")
    hf = x["transformers"]
    assert hf["agrees"] and hf["model_type"] == data["model_type"]
    claims = " ".join(c["claim"] for c in hf["checks"])
    assert "after the last chunk" in claims and "depthwise conv1d" in claims


def _hybrids():
    import test_hf_lfm2
    import test_hf_nemotron_h
    import test_hf_qwen3_next
    return {"qwen3_5": DENSE, "qwen3_5_moe": MOE, "qwen3_next": test_hf_qwen3_next.DATA,
            "lfm2": test_hf_lfm2.DATA, "nemotron_h": test_hf_nemotron_h.DATA}


@pytest.mark.parametrize("name", ["qwen3_5"] + [pytest.param(n, marks=pytest.mark.slow) for n in (
    "qwen3_5_moe", "qwen3_next", "lfm2", "nemotron_h")])
def test_verify_train_agrees_with_transformers(tmp_path, capsys, name):
    """Training (forward and backward) at T = 70: every counter and transformers' model,
    the split projections' gradients included. transformers' depthwise conv backward is
    counted by FlopCounterMode's conv_backward_flop, which ignores groups for the weight
    gradient (torch/utils/flop_counter.py): a stated surplus, as the forward's K − 1 dropped
    outputs. Before it was subtracted every hybrid family disagreed here (Qwen3-Next's tiny
    config: backward recurrent mixing analytic 7,369,728, transformers 9,112,320, the
    580,864 per layer = (1 + 32)·2·32·73·4 − 2·2·32·70·4 of its 32-channel conv)."""
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, _hybrids()[name])),
                       "--ctx", "70", "--pass", "train", "--attention", "naive")
    hf = x["transformers"]
    assert hf["agrees"]
    claims = " ".join(c["claim"] for c in hf["checks"])
    assert "conv_backward_flop ignores groups" in claims


@pytest.mark.parametrize("targets", ["in_proj_qkv,in_proj_z,in_proj_b,in_proj_a", "all-linear"])
def test_lora_on_split_projections_equals_peft(tmp_path, capsys, targets):
    """LoRA adapters (rank 4) on transformers' model by PEFT: its trainable count is the
    plan's. By hand for the four split projections: 3 layers × r × Σ (d_in + d_out) =
    3·4·((32 + 32) + (32 + 16) + (32 + 4) + (32 + 4)) = 2,208."""
    peft = pytest.importorskip("peft")
    model = hf_model(DENSE, "cpu")
    wanted = "all-linear" if targets == "all-linear" else targets.split(",")
    pm = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=wanted))
    trained = sum(p.numel() for p in pm.parameters() if p.requires_grad)
    if targets != "all-linear":
        assert trained == 3 * 4 * ((D + D_CONV) + (D + HV * DV) + 2 * (D + HV)) == 2208
    code, out, err = run(capsys, "plan", "--config", str(write_config(tmp_path, DENSE)),
                         "--ctx", "64", "--lora-rank", "4", "--lora-targets", targets,
                         "--format", "json")
    assert code == 0, err
    assert json.loads(out)["finetune"]["trainable_parameters"] == trained


@pytest.mark.parametrize("change,expected", [
    ({"mtp_use_dedicated_embeddings": True}, "mtp_use_dedicated_embeddings"),
    ({"attn_output_gate": False}, "attn_output_gate"),
    ({"rope_parameters": {**ROPE, "mrope_section": [11, 11, 10]}}, "mrope_section"),
    ({"layer_types": ["full_attention"] * 3 + ["linear_attention"]}, "MTP"),
    ({"mtp_num_hidden_layers": 2}, "share one fc"),
])
def test_refusals_in_one_line(tmp_path, capsys, change, expected):
    data = {**DENSE, "text_config": {**TEXT, **change}}
    refused_in_one_line(capsys, "--config", str(write_config(tmp_path, data)), "--no-verify",
                        expected=expected)


def test_moe_dense_layers_refused(tmp_path, capsys):
    """Qwen3_5MoeDecoderLayer puts the experts in every layer: mlp_only_layers would mean
    dense layers transformers does not build."""
    data = {**MOE, "text_config": {**MOE_TEXT, "mlp_only_layers": [0]}}
    refused_in_one_line(capsys, "--config", str(write_config(tmp_path, data)), "--no-verify",
                        expected="mlp_only_layers")


def test_output_names_the_counted_tower_and_mrope(tmp_path, capsys):
    # the tower is read and counted now (issue 41; tests/test_vision.py checks its count)
    code, out, err = run(capsys, "--config", str(write_config(tmp_path, DENSE)), "--no-verify")
    assert code == 0, err
    text = " ".join(out.split())
    assert "vision tower: counted" in text and "not counted" not in text
    assert "M-RoPE" in text and "mtp_num_hidden_layers" in text


PUBLISHED = {"Qwen3.5-27B.json": (26_895_998_464, None),
             # active by hand: the total less the E − k = 248 unchosen experts' 3·512·2048
             # weights in each of 40 layers
             "Qwen3.5-35B-A3B.json": (34_660_610_688, 34_660_610_688 - 248 * 3 * 512 * 2048 * 40)}
# the vision tower (Qwen3_5VisionModel, model.visual): transformers 5.23's
# AutoModelForImageTextToText of the same files on the meta device, less the language model
TOWERS = {"Qwen3.5-27B.json": 460_730_096, "Qwen3.5-35B-A3B.json": 446_571_248}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_config_counts(capsys, name):
    """The config.json files as published: transformers 5.23's count of the language model
    on the meta device (../shared/frontier/README.md)."""
    path = FRONTIER / name
    if not path.exists():
        pytest.skip("the published config.json is not here")
    code, out, err = run(capsys, "--config", str(path), "--no-verify", "--format", "json")
    assert code == 0, err
    p = json.loads(out)["parameters"]
    total, active = PUBLISHED[name]
    assert p["language"] == total and p["total"] == total + TOWERS[name] == \
        p["language"] + p["vision"]
    if active is not None:
        assert p["active_per_token"] == active


def test_published_27b_mtp_by_hand():
    """Qwen3.5-27B's one MTP layer: a full-attention layer (q_proj 5120 → 2·24·256, k/v_proj
    5120 → 4·256, o_proj 6144 → 5120, q/k_norm 256, the 17,408-wide MLP, two norms), fc
    (10240 → 5120) and three norms: 424,699,392 parameters beside the 26.9B."""
    path = FRONTIER / "Qwen3.5-27B.json"
    if not path.exists():
        pytest.skip("the published config.json is not here")
    m = mtp(translate(json.loads(path.read_text()), "27B", "27B").config)
    attn = 5120 * 2 * 24 * 256 + 2 * 5120 * 4 * 256 + 24 * 256 * 5120 + 2 * 256
    assert m.params == attn + 3 * 5120 * 17408 + 2 * 5120 + 2 * 5120 * 5120 + 3 * 5120 \
        == 424_699_392


def _cache_by_layer_kind(T: int, name: str = "Qwen3.5-27B.json") -> tuple[int, int]:
    """(bytes of one gated DeltaNet layer's cache, of one full-attention layer's) for one
    sequence of T tokens: transformers' model of the file's text_config cut to its first 4
    layers (3 DeltaNet, 1 attention), bf16, run on the meta device -- in a forked child on
    torch's C++ meta kernels (crosscheck/metakernels.py, as the CLI's own process and the
    report's workers run; the same shapes and dtypes by construction, compared op by op in
    tests/test_crosscheck_workers.py), which cannot be switched on in this process. The
    Python meta kernels ran transformers' reference DeltaNet recurrence (one loop turn per
    64-token chunk, 2,048 at T = 131,072) at about 14 times the CPU: 5.1 s against 0.36 s
    at 131,072, 1.25 s against 0.11 s at 32,768 (measured on the 2-core machine). In this
    process where no child can be forked (accounting.runtime.fork.available). The lazy
    imports and first-call set-up of transformers' model are paid once here before the
    forks (_warm_up, as tests/test_architectures.py's prepared checks do: 2.7 s), not once
    in each child."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from accounting.runtime import fork
    if not fork.available():
        return _cache_held(T, name)
    _warm_up(name)
    with fork.Streamed(_cache_in_child, T, name) as child:
        results = list(child)
    assert len(results) == 1, "the child process ended without a result"
    return results[0]


@functools.cache
def _warm_up(name: str) -> None:
    _cache_held(64, name)


def _cache_in_child(T: int, name: str):
    from accounting.crosscheck.metakernels import use_cpp_meta_kernels
    use_cpp_meta_kernels()
    yield _cache_held(T, name)


def _cache_held(T: int, name: str) -> tuple[int, int]:
    import torch
    data = json.loads((FRONTIER / name).read_text())
    text = {**data["text_config"], "num_hidden_layers": 4,
            "layer_types": data["text_config"]["layer_types"][:4]}
    model = hf_model({**data, "text_config": text}).to(torch.bfloat16)
    if "num_experts" in text:  # an implementation the meta device runs (hf_counter.build)
        model.set_experts_implementation("batched_mm")
    with torch.no_grad():
        cache = model(torch.zeros(1, T, dtype=torch.long, device="meta"), use_cache=True,
                      logits_to_keep=1).past_key_values
    per = []
    for layer in cache.layers:
        held = 0
        for attr in ("keys", "values", "conv_states", "recurrent_states"):
            x = getattr(layer, attr, None)
            items = x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else [x]
            held += sum(t.numel() * t.element_size() for t in items if isinstance(t, torch.Tensor))
        per.append(held)
    assert per[0] == per[1] == per[2]
    return per[0], per[3]


@pytest.mark.parametrize("T", [4096] + [pytest.param(T, marks=pytest.mark.slow)
                                       for T in (32768, 131072)])
def test_published_27b_cache_bytes_per_sequence(capsys, T):
    """Qwen3.5-27B at T tokens: plan's .inference.kv_cache_bytes (bf16) = 48 DeltaNet layers'
    conv and recurrent state + 16 attention layers' K and V, each as transformers' cache holds
    it: 423,362,560 (4k), 2,302,410,752 (32k), 8,744,861,696 (128k) bytes."""
    path = FRONTIER / "Qwen3.5-27B.json"
    if not path.exists():
        pytest.skip("the published config.json is not here")
    linear, full = _cache_by_layer_kind(T)
    # conv [1, 10240, 4] bf16 and recurrent [1, 48, 128, 128] float32; K and V [1, 4, T, 256]
    assert linear == 10240 * 4 * 2 + 48 * 128 * 128 * 4 and full == 2 * 4 * T * 256 * 2
    code, out, err = run(capsys, "plan", "--config", str(path), "--ctx", str(T), "--format",
                         "json")
    assert code == 0, err
    got = json.loads(out)["inference"]["kv_cache_bytes"]
    assert got == 48 * linear + 16 * full
    assert got == {4096: 423_362_560, 32768: 2_302_410_752, 131072: 8_744_861_696}[T]


@pytest.mark.slow
def test_published_35b_cache_bytes_per_sequence(capsys):
    """Qwen3.5-35B-A3B at 32k: 30 DeltaNet layers (conv [1, 8192, 4] bf16, recurrent
    [1, 32, 128, 128] float32) and 10 attention layers (K and V [1, 2, T, 256] bf16), each as
    transformers' cache holds it: 735,969,280 bytes."""
    path = FRONTIER / "Qwen3.5-35B-A3B.json"
    if not path.exists():
        pytest.skip("the published config.json is not here")
    T = 32768
    linear, full = _cache_by_layer_kind(T, path.name)
    assert linear == 8192 * 4 * 2 + 32 * 128 * 128 * 4 and full == 2 * 2 * T * 256 * 2
    code, out, err = run(capsys, "plan", "--config", str(path), "--ctx", str(T), "--format",
                         "json")
    assert code == 0, err
    assert json.loads(out)["inference"]["kv_cache_bytes"] == 30 * linear + 10 * full \
        == 735_969_280


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_cut_to_4_layers_verifies(capsys, name):
    """The published file with --num-layers 4 (3 DeltaNet layers and 1 attention layer at
    full width): the flags written back into text_config (layer_types, the rotary factor,
    the experts) and transformers' model built from it agrees with every counter."""
    path = FRONTIER / name
    if not path.exists():
        pytest.skip("the published config.json is not here")
    x = agreeing_check(capsys, "--config", str(path), "--num-layers", "4", "--ctx", "64")
    assert x["transformers"]["agrees"]


@pytest.mark.parametrize("tp", [1, 2])
def test_serve_counts_the_state_per_sequence(capsys, tp):
    """serve on a hybrid: KV per token is the 16 attention layers' K and V only
    (16·2·(4/tp)·256·2 bytes), and each sequence holds the 48 DeltaNet layers' conv window
    (10240/tp channels × 3: vLLM keeps conv_kernel − 1 columns, MambaStateShapeCalculator.
    gated_delta_net_state_shape; transformers keeps 4, above) and recurrent state (48/tp
    heads × 128 × 128, float32),
    whatever its length, heads split over TP as vLLM shards them; concurrency is the pool
    over both (blocks aligned to the state's page, issue 43)."""
    path = FRONTIER / "Qwen3.5-27B.json"
    if not path.exists():
        pytest.skip("the published config.json is not here")
    T = 32768
    code, out, err = run(capsys, "serve", "--config", str(path), "--gpu", "H100", "--tp",
                         str(tp), "--ctx", str(T), "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    per_token = 16 * 2 * (4 // tp) * 256 * 2
    # issue 43: vLLM raises the block so that one attention page holds a DeltaNet layer's
    # state, 16 · ceil(state / (16 · attention bytes per token)), and pads each state to
    # that page (HybridAttentionMambaModelConfig.verify_and_update_config)
    layer_state = 10240 // tp * 3 * 2 + 48 // tp * 128 * 128 * 4
    layer_token = 2 * (4 // tp) * 256 * 2
    block = 16 * -(-layer_state // (16 * layer_token))
    assert block == {1: 784, 2: 784}[tp]
    state = 48 * block * layer_token
    assert (d["kv_bytes_per_token_per_gpu"], d["state_bytes_per_sequence_per_gpu"]) == \
        (per_token, state)
    assert d["assumptions"]["block_size"] == block
    assert d["max_concurrency"] == d["kv_pool_bytes_per_gpu"] // (-(-T // block) * block
                                                                 * per_token + state)
