"""The transformers implementation's ledger for DeepSeek-V3 and V2 (DeepseekV3ForCausalLM,
DeepseekV2ForCausalLM, transformers 5.23: accounting/ledger/builder/hf_latent.py and
hf_moe.py), against transformers' own model
on the CPU, as tests/test_transformers_saves.py does for the Llama family.

A tiny config (tests/hf_moe_examples.py) built with AutoModelForCausalLM.from_config(
attn_implementation="sdpa"), one training step's forward and loss under saved-tensor hooks;
every storage autograd saves (parameters and buffers excluded, each storage once) compared,
by size and dtype, with the ledger's saved records for implementation "transformers", in
fp32, under the CPU's bf16 autocast and with bf16 parameters. What the model saves, read off
the hooks and modeling_deepseek_v3.py: the latent norms' fp32 inputs, rsqrt and normalized
latents; cos and sin (T × d_rope) once; query_states (cat) and key_states (new_empty with
both parts copied in); SDPA's q, k, the values as the view of kv_b_proj's output, its
output and log-sum-exp; the router's input (its bf16 copy and the weight's under
autocast), the sigmoid's output, the chosen experts' indices, the in-place division's sum
and its copy of the gathered scores; grouped_mm's sorted slots and offsets, the stacked
gate_up output (SiLU's input), SiLU's output, the product, the weights; the shared experts'
MLP. The buffers: inv_freq and original_inv_freq (d_rope/2 each) and each MoE layer's
e_score_correction_bias (in the parameters' dtype). DeepSeek-V2 differs in its RoPE (one
complex64 freqs_cis, T × d_rope/2, saved by the complex products) and its router (softmax in
float32, saved; group_limited_greedy's masked_fill saves its bool mask; no renormalisation).
DeepSeek-V3.2 (DeepseekV32ForCausalLM) is V3's with DeepseekV32Indexer (no_grad: no saves)
in every attention and SDPA's mask causal & its top-k in every layer at every T: the
additive mask (B·T² in the query's dtype) saved besides; its e_score_correction_bias is
float32 (made so), and no gradient reaches the indexer's weights (no AdamW state: the two
moments).

torch's CPU flash kernel needs one head size for q, k and v: with v_head_dim ≠ d_nope +
d_rope (DeepSeek-V3's 128 ≠ 192) it falls back to the math kernel on the CPU, where the
memory-efficient and cuDNN kernels on CUDA take it; the configs here set v_head_dim =
d_nope + d_rope so that the CPU runs the fused kernel the plan assumes (hf_latent.py).
"""
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from accounting.architecture.hf_config import translate
from accounting.planning.recipes import resolve, transformers_gap
from hf_moe_examples import CONFIGS as MOE
from hf_h3_examples import CONFIGS as H3
from test_transformers_saves import MODES, DTYPE, expected, measured
from test_hf_deepseek_v32 import DATA as V32

V3 = MOE["deepseek_v3"]  # a query latent, one dense layer first, 8 experts in 4 groups
CONFIGS = {"deepseek_v3": {**V3, "v_head_dim": 12},
           # no query latent (q_proj), one router group, one shared expert
           "deepseek_v3 (q_proj)": {**MOE["deepseek_v3 (no query latent)"], "v_head_dim": 12,
                                    "n_shared_experts": 1},
           # DeepSeek-V2 (DeepseekV2ForCausalLM): group_limited_greedy over 4 groups, q_proj
           "deepseek_v2": {**H3["deepseek_v2"], "v_head_dim": 12},
           # a query latent with attention_bias, greedy top-3 (v_head_dim 8 = 6 + 2 already)
           "deepseek_v2 (query latent, greedy)": H3["deepseek_v2 (query latent, greedy)"],
           # DeepSeek-V3.2 (DeepseekV32ForCausalLM): V3's layers and the indexer (4 heads of
           # 16, index_topk 4: the T = 5 below selects, T = 2 keeps every key)
           "deepseek_v32": {**V32, "v_head_dim": 16}}
# (d_e 12 in bf16 is not 16-byte aligned: grouped_mm refuses it on the CPU)
CASES = [(n, m) for n in CONFIGS for m in sorted(MODES)
         if (n, m) != ("deepseek_v2 (query latent, greedy)", "bf16")]


def build(name, param_dtype):
    from transformers import AutoModelForCausalLM
    from accounting.crosscheck.hf_counter import transformers_config
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(transformers_config(CONFIGS[name]),
                                             attn_implementation="sdpa",
                                             dtype=DTYPE[param_dtype])
    return model.train()


def planned(name):
    config = translate(CONFIGS[name], "test", name).config
    return resolve(config, from_hf=True)


@pytest.mark.parametrize("name,mode", CASES)
def test_saved_tensors_equal_the_deepseek_transformers_ledger(name, mode):
    autocast, param_dtype = MODES[mode]
    recipe, config = planned(name)
    assert (recipe.implementation, recipe.kernel) == ("transformers", "sdpa")
    model = build(name, param_dtype)
    B = 2
    for T in (5, 2):
        want, buffers = expected(config, B, T, autocast, param_dtype)
        assert measured(model, B, T, autocast) == want, T
    assert sum(b.numel() * b.element_size() for b in model.buffers()) == buffers


@pytest.mark.parametrize("data,T", [(V3, 6), (H3["deepseek_v2"], 6), (V32, 6), (V32, 3)],
                         ids=["v3", "v2", "v32", "v32 (T < index_topk)"])
def test_forward_matmul_flops_equal_flopcountermode(data, T):
    """The ledger's forward matmul FLOPs for implementation transformers (V not padded: the
    core's scores·V d_v wide) equal FlopCounterMode's on transformers' model
    (accounting/crosscheck/hf_counter.py), here with d_v ≠ d_k as DeepSeek-V2/V3 have it.
    DeepSeek-V3.2's indexer adds wq_b, wk, weights_proj and its two T² matmuls (the scores
    over all T keys whatever index_topk, then the heads' weighted sum); the core counts
    every T² score, as SDPA computes them under the mask."""
    from accounting.crosscheck.hf_counter import measure
    from accounting.ledger.ledger import ledger
    config = resolve(translate(data, "test", "x").config, from_hf=True)[1]
    assert config.v_head_dim != config.d_k
    B = 2
    lg = ledger(config, None, "none", "transformers")
    v = lg.values(T, B)
    mine = sum(r.expr().evaluate(v) for r in lg.matmuls("forward"))
    theirs = measure(data, T, B).torch_flops["forward"]
    assert mine == max(theirs.values())


def test_the_recipe_plans_transformers_ops_for_deepseek_v3_without_mtp():
    """Before: DeepSeek-V2 and V3 fell back to the course's ops. transformers'
    DeepseekV3ForCausalLM has no MTP module (checked: no parameter of the config's MTP
    layer), so the plan drops it and says so; DeepSeek-V2 (softmax router, a group's best
    score) too; a V2 config with norm_topk_prob (which DeepseekV2TopkRouter does not read)
    stays on the course's ops, named."""
    from transformers import AutoModelForCausalLM
    from accounting.crosscheck.hf_counter import transformers_config
    config = translate(V3, "test", "v3").config
    assert config.mtp_layers == 1 and transformers_gap(config) is None
    recipe, planned_config = resolve(config, from_hf=True)
    assert recipe.implementation == "transformers" and planned_config.mtp_layers == 0
    assert "no MTP module" in recipe.note
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(transformers_config(V3))
    assert len(model.model.layers) == V3["num_hidden_layers"]  # the MTP layer is not built
    assert not any("mtp" in n or f"layers.{V3['num_hidden_layers']}." in n
                   for n, _ in model.named_parameters())
    v2 = translate(H3["deepseek_v2"], "test", "v2").config
    assert transformers_gap(v2) is None
    assert resolve(v2, from_hf=True)[0].implementation == "transformers"
    renorm = replace(v2, norm_topk_prob=True)
    assert "num_shared_experts" in transformers_gap(renorm)
    assert resolve(renorm, from_hf=True)[0].implementation == "course"


@pytest.mark.slow  # two real steps each under a live-storage tracker
@pytest.mark.parametrize("name", ["deepseek_v3", "deepseek_v32"])
@pytest.mark.parametrize("mode", ["fp32", "autocast"])
def test_the_two_moments_equal_a_real_step_of_deepseek_v3(mode, name):
    """The step's two moments on DeepseekV3ForCausalLM and DeepseekV32ForCausalLM
    (tests/test_transformers_saves.py assert_two_moments; no MTP module: transformers builds
    none)."""
    from test_transformers_saves import assert_two_moments
    assert_two_moments(build(name, MODES[mode][1]), planned(name)[1], mode)


def test_the_recipe_plans_transformers_ops_for_deepseek_v32():
    """Before: DeepSeek-V3.2 (the indexer's fields) fell back to the course's ops. Now
    DeepseekV32ForCausalLM's ops are planned: no MTP module either (checked on the meta
    device: the config's num_nextn_predict_layers builds no layer), the note names the
    class; the gap's message lists V3.2 for a layout it still lacks (a V3.2 config with a
    LayerNorm, which transformers' DeepSeek models do not have)."""
    from transformers import AutoModelForCausalLM
    from accounting.crosscheck.hf_counter import transformers_config
    config = translate(V32, "test", "v32").config
    assert config.index_topk == 4 and config.mtp_layers == 1
    assert transformers_gap(config) is None
    recipe, planned_config = resolve(config, from_hf=True)
    assert (recipe.implementation, recipe.kernel) == ("transformers", "sdpa")
    assert planned_config.mtp_layers == 0 and "DeepseekV32ForCausalLM builds no MTP" in recipe.note
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(transformers_config(V32))
    assert type(model).__name__ == "DeepseekV32ForCausalLM"
    assert len(model.model.layers) == V32["num_hidden_layers"]
    assert not any(f"layers.{V32['num_hidden_layers']}." in n for n, _ in model.named_parameters())
    gap = transformers_gap(replace(config, norm="layernorm"))
    assert gap is not None and "DeepSeek-V2/V3/V3.2" in gap


def test_deepseek_v32_router_bias_is_float32_in_a_bf16_model():
    """DeepseekV32TopkRouter makes e_score_correction_bias with dtype=torch.float32
    (modeling_deepseek_v32.py, 5.23), where DeepseekV3TopkRouter's takes the default dtype
    (bf16 in a model built with dtype=torch.bfloat16): the ledger's buffers equal each
    model's, read off transformers' own modules (meta device)."""
    from transformers import AutoModelForCausalLM
    from accounting.crosscheck.hf_counter import transformers_config
    from accounting.ledger.ledger import ledger
    for name, data in (("v32", V32), ("v3", CONFIGS["deepseek_v3"])):
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(transformers_config(data),
                                                     dtype=torch.bfloat16)
        config = resolve(translate(data, "test", name).config, from_hf=True)[1]
        lg = ledger(config, None, "none", "transformers", "bf16")
        v = lg.values(4, 1)
        assert sum(b.expr().evaluate(v) for b in lg.buffers) == \
            sum(b.numel() * b.element_size() for b in model.buffers()), name
