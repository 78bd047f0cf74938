"""DeepSeek-V3.2 (model_type deepseek_v32, issue 31): DeepSeek Sparse Attention's lightning
indexer in every layer, read from config.json and counted against hand algebra written here
from transformers 5.23.0's modeling_deepseek_v32.py, the tool's model/ and transformers' own
DeepseekV32ForCausalLM (meta device); the cross-check, forward and backward, with the
indexer's key cache; the full-size count against ../shared/frontier/DeepSeek-V3.2.json.

What modeling_deepseek_v32.py builds (read there): DeepSeek-V3's layers, and in each
self_attn.indexer (DeepseekV32Indexer): wq_b = Linear(q_lora_rank, index_n_heads·
index_head_dim), wk = Linear(hidden, index_head_dim), k_norm = LayerNorm(index_head_dim)
(weight and bias), weights_proj = Linear(hidden, index_n_heads), no biases; its forward runs
under @torch.no_grad: q = wq_b(q_resid) per head, k = k_norm(wk(x)) (one key per token),
RoPE on the first qk_rope_head_dim dims of each, scores = ReLU(q·kᵀ·d_I^−½) for every (query,
key) pair (torch.matmul: all T² of them), weights_proj(x)·h_I^−½ weighs the heads' scores
and a second matmul sums them, the causal mask, topk(index_topk); the attention's mask keeps
those keys only (eager: the core still computes all T² scores). DynamicIndexedLayer caches
the indexer keys, [B, T, index_head_dim] per layer, beside the latent.
"""
import dataclasses
import json
from pathlib import Path

import pytest

from accounting import analyze
from accounting.architecture.hf_config import translate
from cli_run import agreeing_check, run
from hf_examples import write_config

CONFIGS = {
    'dsv32': {
        "architectures": ["DeepseekV32ForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
        "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 64,
        "index_head_dim": 16, "index_n_heads": 4, "index_topk": 4, "initializer_range": 0.02,
        "intermediate_size": 96, "kv_lora_rank": 16, "max_position_embeddings": 64,
        "model_type": "deepseek_v32", "moe_intermediate_size": 16, "moe_layer_freq": 1,
        "n_group": 2, "n_routed_experts": 8, "n_shared_experts": 1, "norm_topk_prob": True,
        "num_attention_heads": 4, "num_experts_per_tok": 2, "num_hidden_layers": 2,
        "num_key_value_heads": 4, "num_nextn_predict_layers": 1, "q_lora_rank": 24,
        "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "rms_norm_eps": 1e-06,
        "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
        "tie_word_embeddings": False, "topk_group": 1, "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16", "transformers_version": "4.44.2", "use_cache": True,
        "v_head_dim": 8, "vocab_size": 96},
}
DATA = CONFIGS["dsv32"]
V, D, F, L = 96, 64, 96, 2  # layer 0 dense (first_k_dense_replace 1), layer 1 MoE
h, r_q, r_kv, nope, rope, dv = 4, 24, 16, 8, 8, 8  # latent attention
h_I, d_I, k_I = 4, 16, 4  # the indexer
E, k, d_e, d_s = 8, 2, 16, 16  # the experts, one shared expert of moe_intermediate_size


def indexer_params() -> int:
    """wq_b r_q·h_I·d_I, wk D·d_I, k_norm's weight and bias 2·d_I, weights_proj D·h_I."""
    return r_q * h_I * d_I + D * d_I + 2 * d_I + D * h_I


def params_by_hand() -> int:
    """DeepSeek-V3's layer (test_hf_moe's algebra: q_a_proj D·r_q, q_a_layernorm r_q, q_b_proj
    r_q·h·(nope + rope), kv_a_proj_with_mqa D·(r_kv + rope), kv_a_layernorm r_kv, kv_b_proj
    r_kv·h·(nope + v), o_proj h·v·D, two norms) and the indexer, per layer; a dense MLP 3·D·F
    in layer 0, the router E·D, E experts and the shared one 3·D·d_e each in layer 1."""
    attn = (D * r_q + r_q + r_q * h * (nope + rope) + D * (r_kv + rope) + r_kv
            + r_kv * h * (nope + dv) + h * dv * D)
    moe = E * D + (E + 1) * 3 * D * d_e
    return 2 * V * D + D + L * (attn + indexer_params() + 2 * D) + 3 * D * F + moe


def pairs(T: int, window: int) -> int:
    """Σ_{i<T} min(i + 1, window): the (query, key) pairs the top-k keeps, written out."""
    return sum(min(i + 1, window) for i in range(T))


def forward_by_hand(T: int, B: int, useful: bool = False) -> int:
    """2·m·n·p per matmul. Per layer: q_a, q_b, kv_a, kv_b, o_proj; the core's QKᵀ (d_k =
    nope + rope) and scores·V over T² pairs (useful: the k_I kept per query, P_K); the
    indexer's wq_b, wk, weights_proj, its scores (B·T·h_I·d_I·T; useful: the causal half) and
    its weighted sum over the heads (B·T·h_I·T). The MLPs and the head."""
    n = B * T
    core_pairs = pairs(T, k_I) if useful else T * T
    index_pairs = T * (T + 1) // 2 if useful else T * T
    attn = (2 * n * D * r_q + 2 * n * r_q * h * (nope + rope) + 2 * n * D * (r_kv + rope)
            + 2 * n * r_kv * h * (nope + dv) + 2 * B * h * core_pairs * (nope + rope)
            + 2 * B * h * core_pairs * dv + 2 * n * h * dv * D)
    indexer = (2 * n * r_q * h_I * d_I + 2 * n * D * d_I + 2 * n * D * h_I
               + 2 * B * index_pairs * h_I * d_I + 2 * B * index_pairs * h_I)
    mlps = 2 * n * 3 * D * F + 2 * n * D * E + 2 * n * k * 3 * D * d_e + 2 * n * 3 * D * d_s
    return L * (attn + indexer) + mlps + 2 * n * D * V


def indexer_forward(T: int, B: int) -> int:
    """The indexer's matmuls (executed), which run without gradients: no backward."""
    n = B * T
    return L * (2 * n * r_q * h_I * d_I + 2 * n * D * d_I + 2 * n * D * h_I
                + 2 * B * T * T * h_I * d_I + 2 * B * T * T * h_I)


def test_the_config_means_what_transformers_builds():
    c = translate(DATA, "t", "v32").config
    assert (c.index_heads, c.index_head_dim, c.index_topk) == (h_I, d_I, k_I)
    assert (c.q_lora_rank, c.kv_lora_rank, c.mtp_layers) == (r_q, r_kv, 1)


def test_parameters_three_ways_and_flops_at_two_lengths():
    torch = pytest.importorskip("torch")
    c = translate(DATA, "t", "v32").config
    assert analyze(c).param_count == params_by_hand() == 80_336
    from model import TransformerLM
    assert sum(p.numel() for p in TransformerLM.from_config(c, device="meta").parameters()) \
        == params_by_hand()
    for T, B in ((3, 1), (12, 2)):  # T below k_I: every causal pair kept; above: k_I per query
        a = analyze(c, seq=T, batch=B)
        assert a.matmul_flops("executed") == forward_by_hand(T, B)
        assert a.matmul_flops("useful") == forward_by_hand(T, B, useful=True)
        train = analyze(c, seq=T, batch=B, phase="train")
        assert train.matmul_flops("executed") == \
            3 * forward_by_hand(T, B) - 2 * indexer_forward(T, B)
    transformers = pytest.importorskip("transformers")
    data = {kk: v for kk, v in DATA.items() if kk != "architectures"}
    with torch.device("meta"):
        m = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**data))
    assert type(m).__name__ == "DeepseekV32ForCausalLM"
    assert sum(p.numel() for p in m.parameters()) == params_by_hand()
    ix = m.model.layers[0].self_attn.indexer
    assert sum(p.numel() for p in ix.parameters()) == indexer_params()


def test_the_model_attends_only_the_indexers_keys():
    """model/'s Indexer keeps min(i + 1, k_I) keys per query, all causal, and gives them no
    gradient (torch.no_grad, as transformers)."""
    torch = pytest.importorskip("torch")
    from model import TransformerLM
    c = translate(DATA, "t", "v32").config
    torch.manual_seed(0)
    lm = TransformerLM.from_config(c)
    attn = lm.layers[0].attn
    x = torch.randn(2, 9, D)
    q_latent = attn.q_a_norm(attn.q_a_proj(x))
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    keep = attn.indexer(x, q_latent, attn.rope, torch.arange(9), causal)
    assert keep.shape == (2, 9, 9) and not (keep & ~causal).any()
    assert keep.sum(-1).tolist() == [[min(i + 1, k_I) for i in range(9)]] * 2
    lm(torch.randint(0, V, (2, 9))).sum().backward()
    assert attn.indexer.wq_b.weight.grad is None and attn.q_a_proj.weight.grad is not None


def test_the_cross_check_agrees_with_every_counter(capsys, tmp_path):
    pytest.importorskip("transformers")
    T, B = 12, 1
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, DATA)), "--ctx", str(T),
                       "--batch", str(B), "--pass", "train")
    tf = x["transformers"]
    params = {r["component"]: r["transformers"] for r in tf["parameters"]}
    assert params["total"] == params_by_hand()
    flops = {(r["pass"], r["component"]): r["flops"] for r in tf["matmul_flops"]}
    forward = forward_by_hand(T, B)
    assert flops[("forward", "total")] == forward
    assert flops[("backward", "total")] == 2 * (forward - indexer_forward(T, B))
    # past_key_values: the latent (r_kv) and RoPE key per layer, and the indexer's keys
    # (DynamicIndexedLayer.indexer_keys, [B, T, d_I]), bfloat16
    assert tf["kv_cache_bytes"]["transformers"] == L * B * T * (r_kv + rope + d_I) * 2


def test_the_plan_caches_the_indexer_keys_and_decodes_k_keys(capsys, tmp_path):
    code, out, _ = run(capsys, "plan", "--config", str(write_config(tmp_path, DATA)),
                       "--ctx", "16", "--precision", "fp32", "--format", "json")
    i = json.loads(out)["inference"]  # fp32 named: an HF config's recipe default is bf16-mixed
    assert code == 0 and i["kv_cache_bytes_per_token"] == L * (r_kv + rope + d_I) * 4  # fp32


FRONTIER = Path(__file__).resolve().parents[2] / "shared" / "frontier"


@pytest.mark.parametrize("name, expected", [
    # DeepSeek-V3's 671,026,404,352 (tests/test_presets.py, the report's 671B) + 61 indexers
    # of 1536·64·128 + 7168·128 + 2·128 + 7168·64 = 13,959,424; the frontier README's
    # transformers count
    ("DeepSeek-V3.2.json", 671_026_404_352 + 61 * 13_959_424),
])
def test_full_size(name, expected):
    path = FRONTIER / name
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared frontier configs)")
    data = json.loads(path.read_text())
    assert 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64 == 13_959_424
    c = translate(data, "t", "v32").config
    assert analyze(c).param_count == expected == 671_877_929_216


def test_the_indexer_runs_under_the_fused_kernel(capsys, tmp_path):
    """--attention sdpa with the indexer: the top-k as SDPA's attention mask, as
    transformers' sdpa path passes it (modeling_deepseek_v32.py: index_mask scattered from
    the top-k indices into attention_mask, then F.scaled_dot_product_attention). Every
    counter agrees (transformers' model is skipped in the backward under the fused kernel,
    as for every model: its stated reason); the kernel computes every score the mask then
    drops (executed T², V zero-padded to d_k as the fused path needs one head size:
    2·B·h·T²·(d_k − d_v) more per layer), the useful count the k_I kept keys (P_K) at d_v,
    which is what FlashMLA's sparse kernel (flash_mla_sparse_fwd, top-k indices) runs."""
    T, B = 12, 1
    agreeing_check(capsys, "--config", str(write_config(tmp_path, DATA)), "--ctx", str(T),
                   "--batch", str(B), "--pass", "train", "--attention", "sdpa")
    c = dataclasses.replace(translate(DATA, "t", "dsv32").config, attention="sdpa")
    pad = L * 2 * B * h * T * T * (nope + rope - dv)
    assert analyze(c, T, B, "forward").matmul_flops() == forward_by_hand(T, B) + pad
    assert analyze(c, T, B, "forward", "useful").matmul_flops("useful") == \
        forward_by_hand(T, B, useful=True)


@pytest.mark.parametrize("mlp_types", [None, ["dense", "sparse"], ["sparse", "dense"],
                                       ["sparse", "sparse"]])
def test_mlp_layer_types_as_the_config_class_writes_it(mlp_types):
    """DeepseekV32Config.__post_init__ fills mlp_layer_types from first_k_dense_replace
    (["dense", "sparse"] here) and save_pretrained writes that list; DeepseekV32DecoderLayer
    builds its MoE where the list says "sparse". Expected: transformers' own config's list
    and transformers' model on the meta device (the parameter count of each layout)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    kw = {k: v for k, v in DATA.items()
          if k not in ("architectures", "model_type", "torch_dtype", "transformers_version")}
    if mlp_types is None:  # what the config class writes by default
        mlp_types = transformers.DeepseekV32Config(**kw).mlp_layer_types
        assert mlp_types == ["dense", "sparse"]
    data = {**DATA, "mlp_layer_types": mlp_types}
    c = translate(data, "t", "v32").config
    assert c.dense_layers == tuple(i for i, t in enumerate(mlp_types) if t == "dense")
    with torch.device("meta"):
        m = transformers.AutoModelForCausalLM.from_config(
            transformers.DeepseekV32Config(**{**kw, "mlp_layer_types": mlp_types}))
    assert analyze(c).param_count == sum(p.numel() for p in m.parameters())
    if mlp_types == ["dense", "sparse"]:
        assert analyze(c).param_count == params_by_hand()


@pytest.mark.parametrize("mlp_types, expected", [
    (["dense"], "mlp_layer_types must list 2"),
    (["dense", "moe"], "mlp_layer_types must list 2"),
    (["dense", "dense"], "no sparse layer")])
def test_mlp_layer_types_the_spec_cannot_mean(capsys, tmp_path, mlp_types, expected):
    from cli_run import refused_in_one_line
    refused_in_one_line(capsys, "--config", str(write_config(
        tmp_path, DATA, {"mlp_layer_types": mlp_types})), "--no-verify", expected=expected)
