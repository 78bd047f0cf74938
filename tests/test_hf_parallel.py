"""Hugging Face config.json in, for the parallel block, partial rotary and fused projections
(gpt_neox, falcon, phi3, starcoder2): each small config, written as transformers writes it,
read into the spec and counted against hand algebra written here from transformers
5.23.0's modeling files, the tool's model/ and transformers' own model (meta device); the
full cross-check agrees; what the spec cannot mean is refused in one line.
"""
import pytest

from accounting import analyze
from cli_run import agreeing_check, refused_in_one_line, run
from accounting.architecture.hf_config import translate
from hf_examples import write_config

V, D, L, H = 96, 64, 2, 4  # every config: vocab, hidden_size, layers, query heads
CONFIGS = {
    # Pythia-like: parallel residual, RoPE on int(16·0.25) = 4 of 16 dims, biased qkv/dense
    "gpt_neox": {
        "architectures": ["GPTNeoXForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 0,
        "eos_token_id": 0, "hidden_act": "gelu", "hidden_dropout": 0.0, "hidden_size": D,
        "initializer_range": 0.02, "intermediate_size": 256, "layer_norm_eps": 1e-05,
        "max_position_embeddings": 64, "model_type": "gpt_neox", "num_attention_heads": H,
        "num_hidden_layers": L, "rotary_emb_base": 10000, "rotary_pct": 0.25,
        "tie_word_embeddings": False, "torch_dtype": "float16", "transformers_version": "4.24.0",
        "use_cache": True, "use_parallel_residual": True, "vocab_size": V},
    # sequential, no attention biases, tied head, RoPE on 8 of 16 dims (rope_parameters)
    "gpt_neox (sequential)": {
        "model_type": "gpt_neox", "hidden_act": "gelu_new", "hidden_size": D,
        "intermediate_size": 256, "max_position_embeddings": 64, "num_attention_heads": H,
        "num_hidden_layers": L, "attention_bias": False, "tie_word_embeddings": True,
        "use_parallel_residual": False, "vocab_size": V,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                            "partial_rotary_factor": 0.5}},
    # Falcon-7B-like: multi-query (one K/V head), parallel_attn (one input_layernorm), tied
    "falcon (7B)": {
        "alibi": False, "apply_residual_connection_post_layernorm": False,
        "architectures": ["FalconForCausalLM"], "attention_dropout": 0.0, "bias": False,
        "bos_token_id": 11, "eos_token_id": 11, "hidden_dropout": 0.0, "hidden_size": D,
        "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "falcon",
        "multi_query": True, "new_decoder_architecture": False, "num_attention_heads": H,
        "num_hidden_layers": L, "parallel_attn": True, "torch_dtype": "bfloat16",
        "transformers_version": "4.27.4", "use_cache": True, "vocab_size": V},
    # Falcon-40B-like: new decoder architecture, 8 heads of 8, 2 K/V heads, ln_attn/ln_mlp
    "falcon (40B)": {
        "alibi": False, "bias": False, "hidden_size": D, "model_type": "falcon",
        "new_decoder_architecture": True, "num_attention_heads": 8, "num_kv_heads": 2,
        "num_hidden_layers": L, "parallel_attn": True, "tie_word_embeddings": False,
        "vocab_size": V},
    # sequential Falcon: post_attention_layernorm, full K/V heads, biases, ffn_hidden_size 96
    "falcon (sequential)": {
        "bias": True, "ffn_hidden_size": 96, "hidden_size": D, "model_type": "falcon",
        "multi_query": False, "num_attention_heads": H, "num_hidden_layers": L,
        "parallel_attn": False, "vocab_size": V},
    # Falcon with ALiBi (FalconModel's build_alibi_tensor, no RoPE): 6 heads of 8, multi-query,
    # parallel_attn, biases, tied
    "falcon (alibi)": {
        "alibi": True, "bias": True, "hidden_size": 48, "model_type": "falcon",
        "multi_query": True, "num_attention_heads": 6, "num_hidden_layers": L,
        "parallel_attn": True, "vocab_size": V},
    # Phi-4-mini-like: fused qkv_proj and gate_up_proj, GQA, RoPE on int(16·0.75) = 12
    # dims, a sliding window of 8 on every layer
    "phi3": {
        "architectures": ["Phi3ForCausalLM"], "attention_dropout": 0.0, "embd_pdrop": 0.0,
        "hidden_act": "silu", "hidden_size": D, "intermediate_size": 96,
        "max_position_embeddings": 64, "model_type": "phi3", "num_attention_heads": H,
        "num_hidden_layers": L, "num_key_value_heads": 2, "original_max_position_embeddings": 64,
        "pad_token_id": None, "partial_rotary_factor": 0.75, "resid_pdrop": 0.0,
        "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0,
        "sliding_window": 8, "tie_word_embeddings": False, "vocab_size": V},
    # StarCoder2-like: LayerNorm, c_fc/c_proj with biases, GQA, tied head, no window
    "starcoder2": {
        "architectures": ["Starcoder2ForCausalLM"], "attention_dropout": 0.0,
        "embedding_dropout": 0.0, "hidden_act": "gelu_pytorch_tanh", "hidden_size": D,
        "intermediate_size": 256, "max_position_embeddings": 64, "model_type": "starcoder2",
        "norm_epsilon": 1e-05, "num_attention_heads": H, "num_hidden_layers": L,
        "num_key_value_heads": 2, "residual_dropout": 0.0, "rope_theta": 100000,
        "sliding_window": None, "use_bias": True, "vocab_size": V},
}
# What each means, read from the modeling files: block, K/V heads, head dim, rotary dims,
# MLP width, gated MLP, biases (qkv/out, mlp), norm, tied head, window.
SHAPES = {
    "gpt_neox": dict(block="parallel", kv=4, dk=16, rot=4, f=256, gated=False, bias=(1, 1),
                     norm="layernorm", tied=False, W=None),
    "gpt_neox (sequential)": dict(block="sequential", kv=4, dk=16, rot=8, f=256, gated=False,
                                  bias=(0, 1), norm="layernorm", tied=True, W=None),
    "falcon (7B)": dict(block="parallel_shared_norm", kv=1, dk=16, rot=None, f=256,
                        gated=False, bias=(0, 0), norm="layernorm", tied=True, W=None),
    "falcon (40B)": dict(block="parallel", kv=2, dk=8, rot=None, f=256, gated=False,
                         bias=(0, 0), norm="layernorm", tied=False, W=None, h=8),
    "falcon (alibi)": dict(block="parallel_shared_norm", kv=1, dk=8, rot=None, f=192,
                           gated=False, bias=(1, 1), norm="layernorm", tied=True, W=None, h=6,
                           d=48, pos="alibi"),
    "falcon (sequential)": dict(block="sequential", kv=4, dk=16, rot=None, f=96, gated=False,
                                bias=(1, 1), norm="layernorm", tied=True, W=None),
    "phi3": dict(block="sequential", kv=2, dk=16, rot=12, f=96, gated=True, bias=(0, 0),
                 norm="rmsnorm", tied=False, W=8),
    "starcoder2": dict(block="sequential", kv=2, dk=16, rot=None, f=256, gated=False,
                       bias=(1, 1), norm="layernorm", tied=True, W=None),
}


def params_by_hand(name: str) -> int:
    """nn.Linear(in, out, bias) = in·out (+ out); LayerNorm 2·d, RMSNorm d; the norms per
    block: two, or one for Falcon's shared input_layernorm (FalconDecoderLayer)."""
    s = SHAPES[name]
    h, kv, dk, f, D = s.get("h", H), s["kv"], s["dk"], s["f"], s.get("d", globals()["D"])
    qkv = D * (h + 2 * kv) * dk + s["bias"][0] * (h + 2 * kv) * dk  # fused or not: the same
    out = h * dk * D + s["bias"][0] * D
    mlp = (3 if s["gated"] else 2) * D * f + s["bias"][1] * (f + D)
    norm = (2 if s["norm"] == "layernorm" else 1) * D
    norms = 1 if s["block"] == "parallel_shared_norm" else 2
    return V * D + L * (qkv + out + mlp + norms * norm) + norm + (0 if s["tied"] else V * D)


def forward_matmul_flops_by_hand(name: str, T: int, B: int = 1) -> int:
    """2·m·n·p per matmul: the QKV projection(s), QKᵀ and scores·V over the full T×T the
    eager attention computes (masked after), the output projection, the MLP, the head."""
    s = SHAPES[name]
    h, kv, dk, f, D = s.get("h", H), s["kv"], s["dk"], s["f"], s.get("d", globals()["D"])
    per_layer = (2 * B * T * D * (h + 2 * kv) * dk + 2 * 2 * B * h * T * T * dk
                 + 2 * B * T * h * dk * D + (3 if s["gated"] else 2) * 2 * B * T * D * f)
    return L * per_layer + 2 * B * T * D * V


def kv_bytes_by_hand(name: str, T: int, B: int, itemsize: int) -> int:
    """past_key_values after the prefill: K and V per layer, [B, heads, tokens, d_k]. Falcon's
    new decoder architecture caches them broadcast to all h heads (_split_heads); a sliding
    layer keeps its last W − 1 tokens (DynamicSlidingWindowLayer)."""
    s = SHAPES[name]
    heads = s.get("h", H) if name == "falcon (40B)" else s["kv"]
    tokens = T if s["W"] is None else min(T, s["W"] - 1)
    return L * 2 * B * heads * tokens * s["dk"] * itemsize


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_each_config_means_what_transformers_builds(name):
    c = translate(CONFIGS[name], "t", name).config
    s = SHAPES[name]
    assert (c.block, c.kv_heads, c.d_k, c.rotary_dim, c.d_ff) == \
        (s["block"], s["kv"], s["dk"], s["rot"], s["f"])
    assert (c.mlp_kind.gated, c.qkv_bias, c.out_bias, c.mlp_bias, c.norm, c.tie_embeddings,
            c.sliding_window) == (s["gated"], *(bool(b) for b in (s["bias"][0], s["bias"][0],
                                                                  s["bias"][1])),
                                  s["norm"], s["tied"], s["W"])
    assert c.positions == s.get("pos", "rope") and c.norm_placement == "pre"


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_parameters_three_ways_and_flops_at_two_lengths(name):
    torch = pytest.importorskip("torch")
    c = translate(CONFIGS[name], "t", name).config
    assert analyze(c).param_count == params_by_hand(name)
    from model import TransformerLM
    assert sum(p.numel() for p in TransformerLM.from_config(c, device="meta").parameters()) \
        == params_by_hand(name)
    for T, B in ((8, 1), (24, 2)):
        assert analyze(c, seq=T, batch=B).matmul_flops("executed") == \
            forward_matmul_flops_by_hand(name, T, B)
    transformers = pytest.importorskip("transformers")
    data = {k: v for k, v in CONFIGS[name].items() if k not in ("architectures",)}
    hf = transformers.AutoConfig.for_model(**data)
    with torch.device("meta"):
        m = transformers.AutoModelForCausalLM.from_config(hf)
    assert sum(p.numel() for p in m.parameters()) == params_by_hand(name)
    # what transformers built means the same: its RoPE's frequencies (rotary_dim/2 of
    # them; Falcon builds them under ALiBi too, unused) and one or two norms per block
    s = SHAPES[name]
    rotary = [mod for n, mod in m.named_modules() if n.endswith("rotary_emb")]
    if s.get("pos", "rope") == "rope":
        assert 2 * rotary[0].inv_freq.numel() == (s["rot"] or s["dk"])
    layer = next(mod for n, mod in m.named_modules() if n.endswith("layers.0") or n.endswith("h.0"))
    norms = [n for n, mod in layer.named_children() if "Norm" in type(mod).__name__]
    assert len(norms) == (1 if s["block"] == "parallel_shared_norm" else 2), norms


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_cross_check_agrees_with_every_counter(capsys, tmp_path, name):
    pytest.importorskip("transformers")
    T, B = 12, 1  # T > the window: the cache keeps W − 1 tokens of a sliding layer
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, CONFIGS[name])),
                       "--ctx", str(T), "--batch", str(B), "--pass", "train")
    tf = x["transformers"]
    params = {r["component"]: r["transformers"] for r in tf["parameters"]}
    assert params["total"] == params_by_hand(name)
    dtype = CONFIGS[name].get("torch_dtype", "float32")
    itemsize = 4 if dtype == "float32" else 2
    assert tf["kv_cache_bytes"]["transformers"] == kv_bytes_by_hand(name, T, B, itemsize)
    flops = {(r["pass"], r["component"]): r["flops"] for r in tf["matmul_flops"]}
    forward = forward_matmul_flops_by_hand(name, T, B)
    assert flops[("forward", "total")] == forward and flops[("backward", "total")] == 2 * forward
    assert flops[("forward", "not in any component")] == 0
    blocks = [c for c in x["layers"] if c["counter"] == "transformers"]
    assert [c["agreeing"] for c in blocks] == [L] * 2


@pytest.mark.parametrize("name, changes, expected", [
    ("falcon (alibi)", {"alibi": None}, "alibi must be true or false"),
    ("falcon (40B)", {"parallel_attn": False}, "builds no ln_attn"),
    ("falcon (sequential)", {"num_kv_heads": 2}, "cannot reshape K and V to 2 heads"),
    ("falcon (7B)", {"num_ln_in_parallel_attn": 2}, "which it then does not build"),
    ("gpt_neox", {"rotary_pct": 0.1}, "rotary_pct 0.1 gives int(16·0.1) = 1 rotary dims"),
    ("gpt_neox", {"rotary_pct": 1.5}, "rotary_pct must be in (0, 1]"),
    ("phi3", {"partial_rotary_factor": 0.5, "rope_scaling": {"type": "linear", "factor": 2}},
     "rope_scaling"),
    ("gpt_neox", {"rotary_pct": 0.25, "rope_parameters": {"partial_rotary_factor": 0.5}},
     "contradictory keys"),
])
def test_what_the_spec_cannot_mean_is_refused_in_one_line(capsys, tmp_path, name, changes,
                                                          expected):
    refused_in_one_line(capsys, "--config", str(write_config(tmp_path, CONFIGS[name], changes)),
                        "--no-verify", expected=expected)


def test_full_rotary_is_plain_rope_and_falcon_names_its_norms():
    from accounting.crosscheck.hf_compare import module_map
    from accounting.ledger.ledger import ledger
    c = translate({**CONFIGS["gpt_neox"], "rotary_pct": 1.0}, "t", "n").config
    assert c.rotary_dim is None
    for name, ln1 in (("falcon (7B)", "input_layernorm"), ("falcon (40B)", "ln_attn")):
        h = translate(CONFIGS[name], "t", name)
        mm = module_map(ledger(h.config), h.type.module_names(h.data))
        assert mm.params[f"transformer.h.0.{ln1}"] == "LayerNorm weights and biases"
        assert mm.block["self_attention.query_key_value"][1] == \
            ("attn.q_proj", "attn.k_proj", "attn.v_proj")


def test_flags_are_written_back_as_the_types_own_keys():
    # transformers' own rules decide what a flag means: Falcon's layout keys, GPT-NeoX's
    # use_parallel_residual and rotary_pct, Phi-3's partial_rotary_factor
    from dataclasses import replace
    from accounting.architecture.hf_config import for_transformers
    f7 = translate(CONFIGS["falcon (7B)"], "t", "f7")
    data, why = for_transformers(f7, replace(f7.config, block="parallel"))
    assert why == "" and data["new_decoder_architecture"] is True \
        and data["num_kv_heads"] == 1 and data["num_ln_in_parallel_attn"] == 2
    data, why = for_transformers(f7, replace(f7.config, block="sequential"))
    assert (data["new_decoder_architecture"], data["multi_query"], data["parallel_attn"]) == \
        (False, True, False)
    seq = translate(CONFIGS["falcon (sequential)"], "t", "fs")
    data, why = for_transformers(seq, replace(seq.config, num_kv_heads=2))
    assert data is None and "cannot be written" in why  # sequential Falcon: 1 or h K/V heads
    neox = translate(CONFIGS["gpt_neox"], "t", "n")
    data, why = for_transformers(neox, replace(neox.config, rotary_dim=8, block="sequential"))
    assert (data["rotary_pct"], data["use_parallel_residual"]) == (0.5, False)
    phi = translate(CONFIGS["phi3"], "t", "p")
    data, why = for_transformers(phi, replace(phi.config, rotary_dim=None))
    assert data["partial_rotary_factor"] == 1.0


def test_alibi_is_falcons_own_and_runs_in_the_naive_core(capsys, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.falcon.modeling_falcon import build_alibi_tensor
    from model.attention import alibi_slopes
    # 6 heads: every slope a power of two, so transformers' bfloat16 rounding is exact
    theirs = build_alibi_tensor(torch.ones(1, 2, dtype=torch.long), 6, torch.float32)[:, 0, 1]
    assert torch.equal(alibi_slopes(6), theirs)
    code, out, err = run(capsys, "--config", str(write_config(tmp_path, CONFIGS["falcon (alibi)"])),
                         "--attention", "sdpa", "--no-verify")
    assert code == 2 and "positions alibi adds its bias to the scores of the naive" in err
