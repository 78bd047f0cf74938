"""Hugging Face config.json in, for Nemotron-H with expert blocks (model_type nemotron_h,
hybrid_override_pattern 'E'; NVIDIA Nemotron-3-Nano-30B-A3B; issue 31): counted against
hand algebra written here from transformers 5.23.0's modeling_nemotron_h.py, transformers'
own NemotronHForCausalLM (meta device: parameters; CPU: the cache it builds) and the
published figures.

What modeling_nemotron_h.py builds for 'E' (read there): NemotronHBlock: norm (d) and
mixer = NemotronHMoE: gate = NemotronHTopkRouter (weight (E, d), no bias; the buffer
e_score_correction_bias (E), not a parameter; F.linear in float32, sigmoid, + bias for the
choice, n_group groups by their two best, top-k, renormalised, × routed_scaling_factor);
experts = NemotronHExperts: up_proj (E, f_e, d) and down_proj (E, d, f_e), relu², no gate;
shared_experts = NemotronHMLP(up_proj d → f_s, down_proj f_s → d, relu²) with f_s =
moe_shared_expert_intermediate_size (n_shared_experts is not read); with moe_latent_size l,
fc1_latent_proj (d → l) before the experts, which then run at l (up_proj (E, f_e, l),
down_proj (E, l, f_e)), and fc2_latent_proj (l → d) after their sum, the shared MLP still on
the block's input. The other blocks as tests/test_hf_nemotron_h.py.
"""
import json
import math

import pytest

from accounting import analyze
from accounting.architecture.hf_config import translate
from cli_run import agreeing_check, run
from hf_examples import write_config

V, D, H, KV, HD, F = 96, 32, 4, 2, 8, 48
MH, MP, N, G, K, C = 4, 4, 3, 2, 4, 16
E, TOPK, FE, FS = 8, 2, 16, 24
DATA = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "vocab_size": V,
        "hidden_size": D, "intermediate_size": F, "num_hidden_layers": 5,
        "hybrid_override_pattern": "ME*E-", "num_attention_heads": H, "num_key_value_heads": KV,
        "head_dim": HD, "mamba_num_heads": MH, "mamba_head_dim": MP, "ssm_state_size": N,
        "n_groups": G, "conv_kernel": K, "chunk_size": C, "use_conv_bias": True,
        "use_bias": False, "mlp_hidden_act": "relu2", "mamba_hidden_act": "silu",
        "layer_norm_epsilon": 1e-5, "max_position_embeddings": 512, "time_step_min": 0.001,
        "tie_word_embeddings": False, "torch_dtype": "float32", "expand": 2,
        "n_routed_experts": E, "num_experts_per_tok": TOPK, "moe_intermediate_size": FE,
        "moe_shared_expert_intermediate_size": FS, "n_group": 2, "topk_group": 1,
        "norm_topk_prob": True, "routed_scaling_factor": 2.5, "n_shared_experts": 1,
        "moe_latent_size": None, "num_nextn_predict_layers": 0}
XBC = MH * MP + 2 * G * N
MOE_BLOCKS = 2


def spec():
    return translate(DATA, "config.json", "nemotron-h-moe-tiny").config


def _transformers_model(device: str, data=DATA):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.NemotronHConfig(**{k: v for k, v in data.items()
                                           if k not in ("architectures", "model_type", "torch_dtype")})
    with torch.device(device):
        return transformers.NemotronHForCausalLM(cfg)


def test_read_as_written():
    c = spec()
    assert c.layer_types == ("mamba", "mlp", "global", "mlp", "mlp")
    assert [k.moe for k in c.layer_kinds] == [False, True, False, True, False]
    assert (c.num_experts, c.experts_per_token, c.moe_d_ff, c.shared_d_ff) == (E, TOPK, FE, FS)
    assert c.router == "sigmoid" and c.router_bias and c.router_groups == 2
    assert c.mlp == "relu2" and c.routed_scaling_factor == 2.5


def hand_params() -> int:
    mamba = XBC * K + XBC + D * (2 * MH * MP + 2 * G * N + MH) + 3 * MH + MH * MP + MH * MP * D
    attn = 2 * D * H * HD + 2 * D * KV * HD
    mlp = 2 * D * F
    moe = E * D + 2 * E * FE * D + 2 * D * FS  # router, experts (up, down), shared (up, down)
    return 2 * V * D + D + 5 * D + mamba + attn + mlp + MOE_BLOCKS * moe


def test_parameters_equal_hand_algebra_and_transformers():
    model = _transformers_model("meta")
    a = analyze(spec(), 8, 1)
    assert a.param_count == hand_params() == sum(p.numel() for p in model.parameters())
    # a token runs k of the E experts in each expert block
    assert a.active_param_count == hand_params() - MOE_BLOCKS * (E - TOPK) * 2 * FE * D


def hand_forward_flops(T: int) -> int:
    n = math.ceil(T / C)
    mamba = (2 * T * D * (2 * MH * MP + 2 * G * N + MH) + 2 * T * XBC * K
             + 2 * MH * n * C * C * N + 2 * MH * n * C * C * MP + 2 * MH * n * C * MP * N
             + 2 * MH * (n + 1) * (n + 1) * MP * N + 2 * MH * n * C * N * MP
             + 2 * T * MH * MP * D)
    attn = 2 * T * D * H * HD * 2 + 2 * 2 * T * D * KV * HD + 2 * 2 * H * T * T * HD
    mlp = 2 * 2 * T * D * F
    # router; the T·k routed slots through up and down; the shared MLP on every token
    moe = 2 * T * D * E + 2 * 2 * T * TOPK * D * FE + 2 * 2 * T * D * FS
    return mamba + attn + mlp + MOE_BLOCKS * moe + 2 * T * D * V


@pytest.mark.parametrize("T", [40, 100])  # 3 and 7 chunks of 16, padded
def test_forward_flops_equal_hand_algebra(T):
    assert analyze(spec(), T, 1, "forward").matmul_flops() == hand_forward_flops(T)


def test_cache_bytes_equal_transformers_cache(tmp_path, capsys):
    """plan's .inference.kv_cache_bytes against the tensors of transformers' cache after a
    CPU forward (fp32): the expert blocks hold none; K and V of the attention block, the
    Mamba-2 block's conv window and SSM state."""
    torch = pytest.importorskip("torch")
    T, B = 20, 2
    model = _transformers_model("cpu").eval()
    with torch.no_grad():
        cache = model(torch.zeros(B, T, dtype=torch.long), use_cache=True).past_key_values
    held = 0
    for layer in cache.layers:
        for attr in ("keys", "values", "conv_states", "recurrent_states"):
            x = getattr(layer, attr, None)
            items = x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else [x]
            held += sum(t.numel() * t.element_size() for t in items if isinstance(t, torch.Tensor))
    assert held == B * (2 * KV * HD * T + XBC * K + MH * MP * N) * 4
    code, out, err = run(capsys, "plan", "--config", str(write_config(tmp_path, DATA)), "--ctx",
                         str(T), "--batch", str(B), "--precision", "fp32", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["inference"]["kv_cache_bytes"] == held


def test_verify_agrees_with_transformers(tmp_path, capsys):
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, DATA)), "--ctx", "40")
    assert x["transformers"]["agrees"] and x["transformers"]["model_type"] == "nemotron_h"


LAT = 12
LATENT = {**DATA, "moe_latent_size": LAT}


def test_latent_experts_equal_hand_algebra_and_transformers():
    """moe_latent_size: + fc1 (d·l) and fc2 (l·d) per expert block, the experts' d → l."""
    model = _transformers_model("meta", LATENT)
    c = translate(LATENT, "config.json", "latent").config
    per_block = D * LAT + LAT * D + 2 * E * FE * (LAT - D)
    assert c.moe_latent_size == LAT
    assert analyze(c, 8, 1).param_count == hand_params() + MOE_BLOCKS * per_block == \
        sum(p.numel() for p in model.parameters())
    T = 40  # fc1 and fc2 on every token; the T·k slots' up and down at l
    flops = 2 * T * D * LAT * 2 + 2 * 2 * T * TOPK * FE * (LAT - D)
    assert analyze(c, T, 1, "forward").matmul_flops() == hand_forward_flops(T) + MOE_BLOCKS * flops


def test_latent_verify_agrees_with_transformers(tmp_path, capsys):
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, LATENT)), "--ctx", "40")
    assert x["transformers"]["agrees"]


# NVIDIA-Nemotron-3-Nano-30B-A3B's config.json (huggingface.co/nvidia/NVIDIA-Nemotron-3-Nano-
# 30B-A3B-BF16), its keys that change a count, as published
NANO = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
        "vocab_size": 131072, "hidden_size": 2688, "intermediate_size": 1856,
        "num_hidden_layers": 52,
        "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
        "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
        "mamba_num_heads": 64, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8,
        "conv_kernel": 4, "chunk_size": 128, "use_conv_bias": True, "use_bias": False,
        "mlp_hidden_act": "relu2", "mlp_bias": False, "tie_word_embeddings": False,
        "n_routed_experts": 128, "num_experts_per_tok": 6, "moe_intermediate_size": 1856,
        "moe_shared_expert_intermediate_size": 3712, "n_group": 1, "topk_group": 1,
        "norm_topk_prob": True, "routed_scaling_factor": 2.5, "n_shared_experts": 1,
        "max_position_embeddings": 262144, "torch_dtype": "bfloat16"}


def test_nemotron_3_nano_counts(tmp_path, capsys):
    """Total: transformers 5.23's NemotronHForCausalLM on the meta device counts
    31,577,937,344 (run for this test); NVIDIA's model card: "31.6B total parameters,
    approximately 3.2B active (3.6B including embeddings)": active per token with both
    embedding tables 3,580,073,408, less the input table (a lookup) 3,227,751,872."""
    code, out, err = run(capsys, "--config", str(write_config(tmp_path, NANO)), "--no-verify",
                         "--format", "json")
    assert code == 0, err
    p = json.loads(out)["parameters"]
    assert p["total"] == 31_577_937_344
    assert round(p["total"] / 1e9, 1) == 31.6
    assert round(p["active_per_token"] / 1e9, 1) == 3.6
    assert round((p["active_per_token"] - 131072 * 2688) / 1e9, 1) == 3.2


def test_nemotron_3_super_counts(tmp_path, capsys):
    """NVIDIA-Nemotron-3-Super-120B-A12B's count keys (its config.json: 88 layers, 40 Mamba-2,
    40 latent expert blocks, 8 attention; 512 experts top-22 of 2,688 at latent 1,024, a
    shared MLP of 5,376; the pattern's order changes no count): transformers 5.23 on the
    meta device counts 120,668,687,360 (run for this test); NVIDIA: "120B total, 12B
    active" (active less the input embedding table: 12,233,346,048)."""
    data = {**NANO, "hidden_size": 4096, "num_hidden_layers": 88,
            "hybrid_override_pattern": ("ME" * 5 + "*") * 8, "num_attention_heads": 32,
            "mamba_num_heads": 128, "n_routed_experts": 512, "num_experts_per_tok": 22,
            "moe_intermediate_size": 2688, "moe_latent_size": 1024,
            "moe_shared_expert_intermediate_size": 5376, "routed_scaling_factor": 5.0,
            "num_nextn_predict_layers": 1, "mtp_hybrid_override_pattern": "*E"}
    code, out, err = run(capsys, "--config", str(write_config(tmp_path, data)), "--no-verify",
                         "--format", "json")
    assert code == 0, err
    p = json.loads(out)["parameters"]
    assert p["total"] == 120_668_687_360
    assert round((p["active_per_token"] - 131072 * 4096) / 1e9) == 12


def test_lora_on_named_layers_equals_peft(tmp_path, capsys):
    """PEFT's LoRA (r 4) on transformers' model: up_proj and down_proj are the shared
    experts' and the MLP block's (the routed experts' are stacked parameters, not layers),
    Mamba-2's in_proj, attention's o_proj; trainable parameters as PEFT counts them."""
    peft = pytest.importorskip("peft")
    targets = ["up_proj", "down_proj", "in_proj", "o_proj"]
    pm = peft.get_peft_model(_transformers_model("cpu"), peft.LoraConfig(r=4, target_modules=targets))
    theirs = sum(p.numel() for p in pm.parameters() if p.requires_grad)
    code, out, err = run(capsys, "plan", "--config", str(write_config(tmp_path, DATA)), "--ctx",
                         "64", "--lora-rank", "4", "--lora-targets", ",".join(targets),
                         "--format", "json")
    assert code == 0, err
    assert json.loads(out)["finetune"]["trainable_parameters"] == theirs
