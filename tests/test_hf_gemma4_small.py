"""Gemma 4's small variants (E2B/E4B; issue 41): per-layer embeddings (PLE) and KV sharing,
read from a gemma4_text config.json and counted against hand algebra written here from
transformers 5.23.0's models/gemma4/modeling_gemma4.py, transformers' own Gemma4ForCausalLM
(meta device: parameters; CPU: the cache it keeps) and FlopCounterMode over its forward.

What modeling_gemma4.py builds (read there):
- Gemma4TextModel, with hidden_size_per_layer_input = P > 0: embed_tokens_per_layer
  (vocab_size_per_layer_input × L·P, its rows × √P), per_layer_model_projection (d → L·P,
  no bias, its output × d^-½), per_layer_projection_norm (P); the per-layer inputs
  (norm(projection) + embedding) · 2^-½, shaped (B, T, L, P); layer i reads [:, :, i, :].
- Gemma4TextDecoderLayer, after the MLP's residual add: per_layer_input_gate (d → P),
  the hidden activation, × the layer's per-layer input, per_layer_projection (P → d),
  post_per_layer_input_norm (d), added to the residual, then × layer_scalar.
- Gemma4TextConfig.kv_sharing_modes: the last num_kv_shared_layers layers "reuse"; the last
  earlier layer of each kind "store"s. A reuse layer (Gemma4TextAttention) builds q_proj,
  q_norm and o_proj only (no k_proj, v_proj, k_norm, v_norm), reads K and V from
  shared_kv_states, and never calls past_key_values.update: no cache of its own.
- Gemma4TextMLP: 2·intermediate_size wide on a reuse layer with use_double_wide_mlp.
"""
import json

import pytest

from accounting import analyze
from accounting.architecture.hf_config import translate
from cli_run import agreeing_check, refused_in_one_line, run
from hf_examples import write_config

V, D, F, L, H, KV, HD, GHD = 96, 32, 48, 7, 4, 2, 8, 16
P, VP, SHARED, W = 8, 80, 3, 16
S, G = "sliding_attention", "full_attention"
TYPES = [S, S, G, S, S, S, G]  # layers 4, 5 (sliding) and 6 (full) reuse 3's and 2's K, V
OWN_LOCAL, OWN_GLOBAL, SHARED_LOCAL, SHARED_GLOBAL = 3, 1, 2, 1
DATA = {"architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text", "vocab_size": V,
        "hidden_size": D, "intermediate_size": F, "num_hidden_layers": L,
        "num_attention_heads": H, "num_key_value_heads": KV, "head_dim": HD,
        "global_head_dim": GHD, "hidden_size_per_layer_input": P,
        "vocab_size_per_layer_input": VP, "num_kv_shared_layers": SHARED,
        "use_double_wide_mlp": True, "sliding_window": W, "layer_types": TYPES,
        "max_position_embeddings": 512, "final_logit_softcapping": 30.0,
        "tie_word_embeddings": True, "hidden_activation": "gelu_pytorch_tanh",
        "torch_dtype": "float32"}


def spec(data=DATA):
    return translate(data, "config.json", "gemma4-small").config


def _transformers_model(data=DATA, device="meta"):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Gemma4TextConfig(**{k: v for k, v in data.items()
                                           if k not in ("architectures", "model_type",
                                                        "torch_dtype")})
    with torch.device(device):
        return transformers.Gemma4ForCausalLM(cfg)


def hand_params() -> int:
    """Hand algebra from the modules listed in the docstring (no attention_k_eq_v: every
    own layer has v_proj, global ones num_key_value_heads K/V heads of global_head_dim)."""
    own_local = D * H * HD + 2 * D * KV * HD + H * HD * D + 2 * HD  # q, k, v, o, q/k_norm
    own_global = D * H * GHD + 2 * D * KV * GHD + H * GHD * D + 2 * GHD
    shared_local = D * H * HD + H * HD * D + HD  # q, o, q_norm
    shared_global = D * H * GHD + H * GHD * D + GHD
    ple_block = D * P + P * D + D  # gate, projection, post norm
    block = 4 * D + ple_block  # the four sandwich norms
    mlp, wide_mlp = 3 * D * F, 3 * D * 2 * F
    top = V * D + D + VP * L * P + D * L * P + P  # tied head; table, projection, norm
    return (top + OWN_LOCAL * own_local + OWN_GLOBAL * own_global
            + SHARED_LOCAL * shared_local + SHARED_GLOBAL * shared_global
            + L * block + (L - SHARED) * mlp + SHARED * wide_mlp)


def hand_forward_flops(T: int) -> int:
    """Matmul FLOPs of one sequence (eager: all T×T scores; 2 FLOPs a multiply-add): a
    sharing layer projects Q and O only, its core as any layer's."""
    def core(hd):
        return 2 * 2 * H * T * T * hd
    own_local = 2 * T * D * (H * HD + 2 * KV * HD) + 2 * T * H * HD * D + core(HD)
    own_global = 2 * T * D * (H * GHD + 2 * KV * GHD) + 2 * T * H * GHD * D + core(GHD)
    shared_local = 2 * T * D * H * HD + 2 * T * H * HD * D + core(HD)
    shared_global = 2 * T * D * H * GHD + 2 * T * H * GHD * D + core(GHD)
    mlp = (L - SHARED) * 3 * 2 * T * D * F + SHARED * 3 * 2 * T * D * 2 * F
    ple = L * 2 * (2 * T * D * P) + 2 * T * D * L * P  # gate + projection; the model's
    return (OWN_LOCAL * own_local + OWN_GLOBAL * own_global + SHARED_LOCAL * shared_local
            + SHARED_GLOBAL * shared_global + mlp + ple + 2 * T * D * V)


def test_read_as_written():
    c = spec()
    assert (c.per_layer_input, c.ple_vocab, c.kv_shared_layers, c.double_wide_mlp) == \
        (P, VP, SHARED, True)
    assert [k.shared for k in c.layer_kinds] == [False] * 4 + [True] * 3


def test_parameters_equal_hand_algebra_and_transformers():
    model = _transformers_model()
    assert analyze(spec(), 8, 1).param_count == hand_params() == \
        sum(p.numel() for p in model.parameters())


def test_omitted_ple_keys_take_transformers_defaults():
    """Gemma4TextConfig's defaults: hidden_size_per_layer_input 256 and
    vocab_size_per_layer_input 262,144 whatever vocab_size is; a file that omits them gets
    that table (262,144 × L·256), as transformers builds it."""
    data = {k: v for k, v in DATA.items() if k not in ("hidden_size_per_layer_input",
                                                      "vocab_size_per_layer_input")}
    c = spec(data)
    assert (c.per_layer_input, c.ple_vocab) == (256, 262144)
    model = _transformers_model(data)
    assert analyze(c, 8, 1).param_count == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("T", [12, 40])  # below and beyond the window of 16
def test_forward_flops_equal_hand_algebra(T):
    assert analyze(spec(), T, 1, "forward").matmul_flops() == hand_forward_flops(T)


@pytest.mark.parametrize("T,B", [(12, 2), (10, 1)])
def test_cache_holds_the_producing_layers_only(tmp_path, capsys, T, B):
    """KV cache bytes per token by hand: the 4 layers that compute K and V (3 sliding of
    h_kv·d_h, 1 full of h_kv·d_hG), K and V, 4 bytes (fp32); the 3 sharing layers add none.
    Equal to transformers' cache after a CPU forward (T < W: no window trimming) and to
    plan's kv_cache_bytes."""
    torch = pytest.importorskip("torch")
    per_token = 2 * (OWN_LOCAL * KV * HD + OWN_GLOBAL * KV * GHD) * 4
    model = _transformers_model(device="cpu").eval()
    with torch.no_grad():
        cache = model(torch.zeros(B, T, dtype=torch.long), use_cache=True).past_key_values
    held = sum(t.numel() * t.element_size() for layer in cache.layers
               for t in (layer.keys, layer.values) if t is not None and t.numel())
    assert held == B * T * per_token
    code, out, err = run(capsys, "plan", "--config", str(write_config(tmp_path, DATA)),
                         "--ctx", str(T), "--batch", str(B), "--precision", "fp32",
                         "--format", "json")
    assert code == 0, err
    assert json.loads(out)["inference"]["kv_cache_bytes"] == B * T * per_token


def test_verify_agrees_with_transformers(tmp_path, capsys):
    """--verify at T = 40 (beyond the window): fvcore, FlopCounterMode over model/ and over
    transformers' own Gemma4ForCausalLM (meta device), the op counter, parameters by name
    and the KV cache all agree with the ledger."""
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, DATA)), "--ctx", "40")
    assert x["transformers"]["agrees"]


@pytest.mark.parametrize("change,expected", [
    ({"num_kv_shared_layers": L}, "must be below num_hidden_layers"),
    # sharing layers 2..6 leaves sliding layers 0 and 1 only: no full layer to read from
    ({"num_kv_shared_layers": 5}, "an earlier layer of its kind"),
])
def test_refused_in_one_line(tmp_path, capsys, change, expected):
    refused_in_one_line(capsys, "--config", str(write_config(tmp_path, DATA, change)),
                        "--no-verify", expected=expected)


def test_transformers_refuses_the_same_layout():
    """The refusal above is transformers' own: kv_sharing_modes raises for a kind with no
    earlier producer."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Gemma4TextConfig(**{k: v for k, v in DATA.items() if k not in (
        "architectures", "model_type", "torch_dtype")} | {"num_kv_shared_layers": 5})
    with pytest.raises(ValueError, match="layer types"):
        cfg.kv_sharing_modes


def test_e2b_sized_text_model(tmp_path, capsys):
    """gemma-4-E2B's text_config sizes (35 layers of width 1,536, 8 heads, 1 K/V head of
    256 and 512 on full layers, 4 sliding : 1 full, window 512, PLE 256 over 262,144 rows,
    the last 20 layers sharing K and V with double-wide MLPs of 2·6,144): parameters =
    transformers' Gemma4ForCausalLM on the meta device; the per-layer table alone is
    262,144 × 35·256 = 2,348,810,240 of them (what the model card's "effective" size leaves
    out). KV cache at 4,096 tokens in bf16 by hand: the 15 producing layers only, 12
    sliding × K and V × 256 × 512 tokens and 3 full × K and V × 512 × 4,096, 2 bytes each."""
    types = ([S] * 4 + [G]) * 7
    data = {"architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text",
            "hidden_size": 1536, "num_hidden_layers": 35, "num_attention_heads": 8,
            "num_key_value_heads": 1, "head_dim": 256, "global_head_dim": 512,
            "sliding_window": 512, "vocab_size": 262144, "vocab_size_per_layer_input": 262144,
            "hidden_size_per_layer_input": 256, "num_kv_shared_layers": 20,
            "use_double_wide_mlp": True, "intermediate_size": 6144, "layer_types": types,
            "max_position_embeddings": 131072, "final_logit_softcapping": 30.0,
            "tie_word_embeddings": True, "hidden_activation": "gelu_pytorch_tanh",
            "torch_dtype": "bfloat16"}
    model = _transformers_model(data)
    total = sum(p.numel() for p in model.parameters())
    assert model.model.embed_tokens_per_layer.weight.numel() == 2_348_810_240
    path = write_config(tmp_path, data)
    code, out, err = run(capsys, "--config", str(path), "--no-verify", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["parameters"]["total"] == total
    code, out, err = run(capsys, "plan", "--config", str(path), "--ctx", "4096", "--format",
                         "json")
    assert code == 0, err
    assert json.loads(out)["inference"]["kv_cache_bytes"] == \
        (12 * 2 * 256 * 512 + 3 * 2 * 512 * 4096) * 2


def test_pipeline_stages_are_refused_tensor_parallel_planned(tmp_path, capsys):
    """A stage boundary would cut a sharing layer from the layer whose K and V it reads:
    --pp 2 is refused in one line (it raised StopIteration before); --tp 2 splits the
    double-wide MLPs' 2·d_ff as it splits d_ff (exit 0)."""
    path = str(write_config(tmp_path, DATA))
    refused_in_one_line(capsys, "plan", "--config", path, "--ctx", "64", "--gpus", "2",
                        "--gpu", "H100", "--pp", "2", expected="KV sharing")
    code, out, err = run(capsys, "plan", "--config", path, "--ctx", "64", "--gpus", "2",
                         "--gpu", "H100", "--tp", "2")
    assert code == 0, err
