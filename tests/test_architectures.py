"""The spec's architectures, each linked three ways: the ledger, model/, and the counters.

  * names: the ledger's parameter names are the model's state-dict keys (in order) and
    named_parameters(); every module path the ledger names is one of named_modules();
  * memory: the ledger's saved-activation records equal the tensors autograd saves on the
    CPU (saved_tensors_hooks, storages counted once, parameters excluded), module by module;
  * FLOPs: analytic = fvcore ×2 = FlopCounterMode = op counter, forward and backward, per
    component and per block, for every preset and for 200 random architectures (every
    field of the spec toggled, small sizes). The variants run here, in the caller's process
    as a notebook runs them; the real checkpoints and the random architectures in a forked
    process set up as `--verify`'s and the report's are (prepared_cross_checks).
Expected values come from the running model (autograd's saved tensors, torch's counters);
the ledger is built without torch, from the spec alone.
"""
import dataclasses
import functools
import random
import weakref
from collections import Counter, defaultdict
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from accounting import analyze  # noqa: E402
from dataclasses import replace  # noqa: E402

from accounting.architecture.config import (BLOCKS, MLPS, NORM_PLACEMENTS, NORMS, POSITIONS, QK_NORMS,  # noqa: E402
                                    ModelConfig)
from accounting.architecture.presets import PRESETS
from accounting.crosscheck import cross_check, views  # noqa: E402
from accounting.ledger.ledger import ledger  # noqa: E402
from model import TransformerLM  # noqa: E402

BASE = dict(vocab_size=37, context_length=8, num_layers=2, d_model=24, num_heads=2, d_ff=40)
VARIANTS = {
    "cs336": {},
    "gqa": dict(d_model=32, num_heads=4, num_kv_heads=2),
    "mqa": dict(d_model=32, num_heads=4, num_kv_heads=1),
    "head_dim": dict(num_heads=4, head_dim=6),
    "gpt2": dict(norm="layernorm", mlp="gelu_tanh", positions="learned", tie_embeddings=True,
                 qkv_bias=True, out_bias=True, mlp_bias=True),
    "gelu_erf": dict(mlp="gelu"),
    "geglu": dict(mlp="geglu"),
    # issue 24: the llama family's hidden_act "gelu" (gated, exact erf GELU), dense and experts
    "geglu_erf": dict(mlp="geglu_erf"),
    "moe_geglu_erf": dict(num_experts=4, experts_per_token=2, moe_d_ff=8, mlp="geglu_erf"),
    "no_positions": dict(positions="none"),
    "qwen3": dict(d_model=32, num_heads=4, num_kv_heads=2, head_dim=6, qk_norm="head"),
    "qwen2": dict(d_model=32, num_heads=4, num_kv_heads=2, qkv_bias=True),
    "olmo2": dict(qk_norm="full", norm_placement="post"),
    "qk_head_no_rope": dict(qk_norm="head", positions="none"),
    "post_layernorm_gqa": dict(norm="layernorm", norm_placement="post", qk_norm="full",
                               d_model=32, num_heads=4, num_kv_heads=2),
    # issue 15: sliding windows, mixtures of experts, latent attention
    "window": dict(sliding_window=3),
    "window_alternating": dict(sliding_window=3, layer_types=("local", "global")),
    "window_sdpa": dict(sliding_window=3, attention="sdpa", num_heads=4, num_kv_heads=2),
    "moe": dict(num_experts=4, experts_per_token=2, moe_d_ff=8),
    "moe_deepseek": dict(num_experts=8, experts_per_token=2, moe_d_ff=8, num_shared_experts=1,
                         router="sigmoid", router_bias=True, router_groups=4, router_topk_groups=2,
                         routed_scaling_factor=2.5, dense_layers=(0,)),
    "moe_capacity": dict(num_experts=4, experts_per_token=2, moe_d_ff=8, moe_capacity_factor=1.0),
    "mla": dict(kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=6),
    "mla_q_lora_sdpa": dict(q_lora_rank=10, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4,
                            v_head_dim=6, attention="sdpa"),
    "mla_window_moe": dict(kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=2, v_head_dim=4,
                           sliding_window=2, num_experts=3, experts_per_token=1),
    # issue 24 (h3): gpt-oss (attention sinks with grouped heads and alternating windows;
    # experts with the clamped SwiGLU and biases; a biased router, top-k before the softmax),
    # DeepSeek-V2 (groups ranked by their best score, V2-Lite's plain q_proj)
    "gpt_oss": dict(d_model=32, num_heads=4, num_kv_heads=2, qkv_bias=True, out_bias=True,
                    attention_sinks=True, sliding_window=3, layer_types=("local", "global"),
                    num_experts=4, experts_per_token=2, moe_d_ff=8, mlp="swiglu_clamped",
                    router_topk_first=True, router_linear_bias=True, expert_bias=True,
                    norm_topk_prob=False),
    "sinks_mha": dict(attention_sinks=True, positions="none"),
    "clamped_dense_bias": dict(mlp="swiglu_clamped", mlp_bias=True),
    "moe_topk_first_sigmoid": dict(num_experts=4, experts_per_token=2, moe_d_ff=8,
                                   router="sigmoid", router_topk_first=True,
                                   routed_scaling_factor=2.0, num_shared_experts=1,
                                   mlp="swiglu_clamped"),
    "deepseek_v2": dict(kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=6,
                        num_experts=8, experts_per_token=2, moe_d_ff=8, num_shared_experts=2,
                        router_groups=4, router_topk_groups=2, router_group_score="max",
                        norm_topk_prob=False, routed_scaling_factor=16.0, dense_layers=(0,)),
    # issue 24: Gemma 2/3 (sandwich norms, (1 + w) gains, scaled embedding, soft-caps), Granite
    "gemma2": dict(d_model=32, num_heads=4, num_kv_heads=2, head_dim=16, norm_placement="sandwich",
                   norm_offset=True, mlp="geglu", tie_embeddings=True, embedding_multiplier=32 ** 0.5,
                   attn_softcap=0.7, final_softcap=0.9, sliding_window=3,
                   layer_types=("local", "global")),
    "gemma3": dict(num_heads=4, num_kv_heads=1, head_dim=8, norm_placement="sandwich",
                   norm_offset=True, qk_norm="head", mlp="geglu", embedding_multiplier=24 ** 0.5,
                   final_softcap=1.5, sliding_window=2, layer_types=("local", "global")),
    "granite": dict(embedding_multiplier=12.0, residual_multiplier=0.22, logit_scale=1 / 8,
                    tie_embeddings=True, num_kv_heads=1),
    "sandwich_layernorm_sdpa": dict(norm="layernorm", norm_placement="sandwich", attention="sdpa",
                                    residual_multiplier=0.5, final_softcap=5.0),
    "sandwich_mla_moe": dict(kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=6,
                             norm_placement="sandwich", num_experts=4, experts_per_token=2,
                             moe_d_ff=8, residual_multiplier=0.5, logit_scale=2.0,
                             embedding_multiplier=3.0),
    # issue 24: the parallel block and partial rotary (GPT-NeoX, Falcon, Phi-3)
    "neox": dict(norm="layernorm", mlp="gelu", block="parallel", rotary_dim=4, qkv_bias=True,
                 out_bias=True, mlp_bias=True),
    "falcon7b": dict(d_model=32, num_heads=4, num_kv_heads=1, norm="layernorm", mlp="gelu",
                     block="parallel_shared_norm", tie_embeddings=True),
    "phi3_sdpa_window": dict(d_model=32, num_heads=4, num_kv_heads=2, rotary_dim=6,
                             sliding_window=3, attention="sdpa"),
    # ALiBi (Falcon's alibi): 3 heads (not a power of two), and multi-query, parallel, biased
    "alibi": dict(positions="alibi", num_heads=3),
    "falcon_alibi": dict(positions="alibi", d_model=32, num_heads=4, num_kv_heads=1,
                         block="parallel_shared_norm", norm="layernorm", mlp="gelu",
                         qkv_bias=True, out_bias=True, mlp_bias=True, sliding_window=3),
    # Llama 4 (h4): NoPE layers with temperature tuning, chunked RoPE layers with the weightless
    # QK-norm, MoE every other layer (top-1, sigmoid after top-k scaling the experts' input,
    # every expert on every token) with a shared expert, dense layers between
    "llama4": dict(num_layers=4, d_model=32, num_heads=4, num_kv_heads=2, nope_layers=(3,),
                   attention_chunk=3, layer_types=("chunked", "chunked", "chunked", "global"),
                   qk_norm="l2", temperature_floor=2, temperature_scale=0.5, num_experts=4,
                   experts_per_token=1, moe_d_ff=8, router="sigmoid",
                   router_topk_first=True, router_scales_input=True, norm_topk_prob=False, num_shared_experts=1,
                   dense_layers=(0, 2)),
    "llama4_sdpa_top2": dict(nope_layers=(0,), attention_chunk=2, attention="sdpa",
                             qk_norm="l2", temperature_floor=1, num_experts=3,
                             experts_per_token=2, router="sigmoid",
                             router_topk_first=True, router_scales_input=True,
                             norm_topk_prob=False, tie_embeddings=True),
    "chunked_window": dict(num_layers=3, sliding_window=2, attention_chunk=3,
                           layer_types=("local", "chunked", "global")),
    # issue 24: Cohere (CohereLayerNorm: no bias; one shared norm; logits × logit_scale) and
    # Command R+'s QK-norm with a weight per head, grouped, and under the fused kernel
    "cohere": dict(d_model=32, num_heads=4, num_kv_heads=2, norm="layernorm_nobias",
                   block="parallel_shared_norm", tie_embeddings=True, logit_scale=0.0625,
                   qkv_bias=True, out_bias=True),
    "cohere_plus": dict(d_model=32, num_heads=4, num_kv_heads=2, norm="layernorm_nobias",
                        block="parallel_shared_norm", qk_norm="per_head", tie_embeddings=True,
                        logit_scale=0.125),
    "per_head_rms_sdpa": dict(num_heads=4, head_dim=8, qk_norm="per_head", attention="sdpa",
                              sliding_window=3),
    # issue 31: Qwen2-MoE's sigmoid-gated shared expert; Qwen3-Next's gated attention output
    # (biased, grouped; and under the fused kernel with a window)
    "qwen2_moe": dict(num_layers=3, num_experts=4, experts_per_token=2, moe_d_ff=8,
                      num_shared_experts=2, shared_expert_gate=True, norm_topk_prob=False,
                      qkv_bias=True, dense_layers=(1,)),
    "gated_attention": dict(num_heads=4, num_kv_heads=2, qk_norm="head", qkv_bias=True,
                            attn_output_gate=True, rotary_dim=4),
    "gated_attention_sdpa": dict(attn_output_gate=True, attention="sdpa", sliding_window=3,
                                 nope_layers=(0,)),
    # ERNIE 4.5: the correction bias a frozen parameter (RouterStatics), softmax router
    "ernie_router_statics": dict(num_layers=3, num_experts=4, experts_per_token=2, moe_d_ff=8,
                                 router_bias=True, router_bias_param=True,
                                 num_shared_experts=1, dense_layers=(0,)),
    # DeepSeek-V3.2's sparse attention: the indexer's top 3 keys per query (latent attention)
    "dsa_mla_moe": dict(kv_lora_rank=8, q_lora_rank=6, qk_nope_head_dim=4, qk_rope_head_dim=4,
                        v_head_dim=6, index_heads=2, index_head_dim=6, index_topk=3,
                        num_experts=4, experts_per_token=2, moe_d_ff=8, router="sigmoid",
                        router_bias=True, dense_layers=(0,)),
    # and under the fused kernel: the top-k as SDPA's boolean mask (transformers' sdpa path)
    # (the same weights as dsa_mla_moe: this variant's own drew near-equal index scores, a
    # top-k that float32 and the float64 reference of test_model_variants.py break apart)
    "dsa_mla_sdpa": dict(kv_lora_rank=8, q_lora_rank=6, qk_nope_head_dim=4, qk_rope_head_dim=4,
                         v_head_dim=6, index_heads=2, index_head_dim=6, index_topk=3,
                         num_experts=4, experts_per_token=2, moe_d_ff=8, router="sigmoid",
                         router_bias=True, dense_layers=(0,), attention="sdpa"),
    # issue 31: hybrid layers. LFM2: short convolutions (K = 3) beside attention layers with
    # a per-head QK-norm; biased, with MoE and a window
    "lfm2": dict(num_layers=3, d_model=32, num_heads=4, num_kv_heads=2, qk_norm="head",
                 conv_kernel=3, layer_types=("conv", "global", "conv"), tie_embeddings=True),
    # Qwen3-Next's gated DeltaNet (chunk 2: three or more chunks at the tested lengths),
    # grouped value heads, beside a global attention layer
    "gated_deltanet": dict(num_layers=3, d_model=32, num_heads=4, num_kv_heads=2,
                           conv_kernel=3, linear_key_heads=2, linear_value_heads=4,
                           linear_key_head_dim=8, linear_value_head_dim=6, linear_chunk=2,
                           layer_types=("linear_attention", "global", "linear_attention")),
    "gated_deltanet_moe": dict(conv_kernel=4, linear_key_heads=2, linear_value_heads=2,
                               linear_key_head_dim=4, linear_value_head_dim=4, linear_chunk=2,
                               layer_types=("linear_attention", "linear_attention"),
                               num_experts=4, experts_per_token=2, moe_d_ff=8),
    # Qwen3-Next: (1 + w) norms, gated attention with partial RoPE and the per-head QK-norm,
    # a gated shared expert beside softmax-routed experts, gated DeltaNet layers
    "qwen3_next": dict(num_layers=4, d_model=32, num_heads=4, num_kv_heads=2, head_dim=8,
                       rotary_dim=2, qk_norm="head", norm_offset=True,
                       attn_output_gate=True, num_experts=4, experts_per_token=2,
                       moe_d_ff=8, num_shared_experts=1, shared_expert_gate=True,
                       conv_kernel=4, linear_key_heads=2, linear_value_heads=4,
                       linear_key_head_dim=4, linear_value_head_dim=4, linear_chunk=2,
                       layer_types=("linear_attention",) * 3 + ("global",)),
    # Kimi Delta Attention (chunk 2: three or more chunks); and Kimi Linear: KDA layers
    # beside latent attention without RoPE, DeepSeek-V3's experts
    "kda": dict(num_layers=3, d_model=32, num_heads=4, conv_kernel=3, linear_key_heads=2,
                linear_value_heads=2, linear_key_head_dim=6, linear_value_head_dim=6,
                linear_chunk=2, layer_types=("kda", "global", "kda")),
    "kimi_linear": dict(num_layers=4, positions="none", kv_lora_rank=8, qk_nope_head_dim=4,
                        qk_rope_head_dim=4, v_head_dim=6, num_experts=4, experts_per_token=2,
                        moe_d_ff=8, router="sigmoid", router_bias=True, num_shared_experts=1,
                        dense_layers=(0,), conv_kernel=4, linear_key_heads=2,
                        linear_value_heads=2, linear_key_head_dim=4, linear_value_head_dim=4,
                        linear_chunk=2, layer_types=("kda",) * 3 + ("global",)),
    # Qwen3.5: the same layers with the gated DeltaNet's input projections split in four
    # (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a) and ungrouped value heads, a dense MLP
    "qwen3_5": dict(num_layers=4, d_model=32, num_heads=4, num_kv_heads=2, head_dim=8,
                    rotary_dim=2, qk_norm="head", norm_offset=True, attn_output_gate=True,
                    conv_kernel=4, linear_key_heads=2, linear_value_heads=4,
                    linear_key_head_dim=4, linear_value_head_dim=6, linear_chunk=2,
                    linear_split_proj=True, layer_types=("linear_attention",) * 3 + ("global",)),
    # a shared expert of its own width (Qwen3-Next's shared_expert_intermediate_size, no
    # multiple of the experts' 8)
    "shared_d_ff": dict(num_experts=3, experts_per_token=2, moe_d_ff=8, num_shared_experts=1,
                        shared_d_ff=5, shared_expert_gate=True),
    "gated_attention_sdpa_shared_gate": dict(attention="sdpa", attn_output_gate=True,
                                             num_experts=3, experts_per_token=1,
                                             num_shared_experts=2, shared_expert_gate=True),
    # Nemotron-H: one sublayer per block (Mamba-2, attention without RoPE, or a squared-ReLU
    # MLP), grouped B and C; and Mamba-2 in sequential blocks with biases and a MoE
    "nemotron_h": dict(num_layers=4, positions="none", block="single", mlp="relu2",
                       layer_types=("mamba", "global", "mlp", "mamba"), conv_kernel=4,
                       conv_bias=True, mamba_heads=4, mamba_head_dim=4, ssm_state=3,
                       mamba_groups=2, mamba_chunk=2, mamba_dt_min=0.001),
    "mamba_sequential_moe": dict(layer_types=("mamba", "global"), conv_kernel=3, mamba_heads=2,
                                 mamba_head_dim=6, ssm_state=4, mamba_chunk=3, mamba_bias=True,
                                 num_experts=4, experts_per_token=2, moe_d_ff=8),
    # Falcon-H1: attention beside Mamba-2 in every layer (hybrid), its muP multipliers, the
    # mixer without its norm; and with the grouped gated norm, no multipliers, a MoE
    "falcon_h1": dict(num_layers=2, d_model=32, num_heads=4, num_kv_heads=2,
                      layer_types=("hybrid", "hybrid"), conv_kernel=4, conv_bias=True,
                      mamba_heads=4, mamba_head_dim=4, ssm_state=3, mamba_groups=2,
                      mamba_chunk=2, mamba_gate_only=True, mup_multipliers=True,
                      embedding_multiplier=2.0, logit_scale=0.5),
    "hybrid_norm_moe": dict(layer_types=("hybrid", "global"), conv_kernel=3, mamba_heads=2,
                            mamba_head_dim=6, ssm_state=4, mamba_chunk=3, mamba_bias=True,
                            num_experts=4, experts_per_token=2, moe_d_ff=8),
    # Jamba: Mamba-1 (a sequential selective scan) beside attention without RoPE, a MoE
    "jamba": dict(num_layers=3, positions="none", layer_types=("mamba1", "global", "mamba1"),
                  conv_kernel=4, conv_bias=True, mamba_inner=48, mamba_dt_rank=3, ssm_state=4,
                  num_experts=4, experts_per_token=2, dense_layers=(0, 2), norm_topk_prob=False),
    # Gemma 4: global layers with their own head shape and K = V, a weightless V norm, the
    # experts beside the dense MLP (Gemma4TextRouter's gains), layer_scalar, sandwich norms
    "gemma4": dict(num_layers=3, d_model=32, num_heads=4, num_kv_heads=2, head_dim=8,
                   global_head_dim=16, global_kv_heads=1, global_k_eq_v=True, v_norm=True,
                   qk_norm="head", norm_placement="sandwich", mlp="geglu", sliding_window=3,
                   layer_types=("local", "local", "global"), num_experts=4,
                   experts_per_token=2, moe_d_ff=8, mlp_beside_moe=True, layer_scalar=True,
                   embedding_multiplier=2.0, final_softcap=30.0, tie_embeddings=True),
    # Gemma 4 E2B/E4B: per-layer embeddings into every block, the last two layers reading
    # layers 2's and 1's K and V (KV sharing), their MLP twice as wide (issue 41)
    "gemma4_small": dict(num_layers=5, d_model=32, num_heads=4, num_kv_heads=2, head_dim=8,
                         global_head_dim=16, v_norm=True, qk_norm="head",
                         norm_placement="sandwich", mlp="geglu", sliding_window=3,
                         layer_types=("local", "global", "local", "local", "global"),
                         per_layer_input=4, per_layer_vocab=40, kv_shared_layers=2,
                         double_wide_mlp=True, layer_scalar=True, embedding_multiplier=2.0,
                         tie_embeddings=True),
    # Apertus: QK-norm per head and a xIELU MLP (two learned scalars per layer)
    "apertus": dict(mlp="xielu", qk_norm="head", num_kv_heads=1, d_ff=40),
    # Phi-3.5-MoE: LayerNorm with biases, biased attention and LM head, SparseMixer routing
    "phimoe": dict(norm="layernorm", qkv_bias=True, out_bias=True, lm_head_bias=True,
                   num_kv_heads=2, num_experts=4, experts_per_token=2, router="sparsemixer",
                   norm_topk_prob=False, moe_d_ff=8),
    "short_conv_bias_moe": dict(conv_kernel=2, conv_bias=True, sliding_window=3,
                                layer_types=("conv", "local"), num_experts=4, experts_per_token=2,
                                moe_d_ff=8),
}


def variant(name: str) -> ModelConfig:
    return ModelConfig(**{**BASE, **VARIANTS[name]}, name=name)


# ---- names ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(PRESETS))
def test_ledger_names_are_the_models_for_every_preset(name):
    c = PRESETS[name]
    model = TransformerLM.from_config(c, device="meta")
    lg = ledger(c)
    assert lg.state_dict_keys() == list(model.state_dict())
    assert lg.parameter_names() == [n for n, _ in model.named_parameters()]
    modules = {n for n, _ in model.named_modules()}
    # a per-layer record is looked for in the first block of its kind (DeepSeek-V3's block 0
    # is dense: its experts live in block 3)
    first = {g: layers[0] for g, layers in lg.groups}
    named = [(r.per_layer and first[r.repeat], r.module)
             for r in (*lg.params, *lg.forward, *lg.elementwise, *lg.buffers, *lg.cache)]
    named += [(a.per_layer and first[a.repeat], "" if a.saved_in == "model" else a.saved_in)
              for a in lg.activations if a.saved and a.saved_in != "loss"]
    missing = {m for i, m in named
               if (f"layers.{i}.{m}" if i is not False and m else f"layers.{i}"
                   if i is not False else m) not in modules}
    assert not missing
    # and the counts: parameters and buffers as torch holds them
    v = lg.values(c.context_length, 1)
    assert sum(p.numel() for p in model.parameters()) == sum(p.count(v) * p.numel(v) for p in lg.params)
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    assert buffers == sum(b.expr().evaluate(v) for b in lg.buffers)


def test_tied_head_is_one_parameter_under_two_names():
    c = PRESETS["openai-community/gpt2"]
    model = TransformerLM.from_config(c, device="meta")
    assert model.lm_head.weight is model.token_embeddings.weight
    assert dict(ledger(c).tied) == {"lm_head.weight": "token_embeddings.weight"}


# ---- memory: saved tensors ---------------------------------------------------------------

def saved_tensors(model, ids, targets, use_cache=None, labels=False):
    """{storage: (module path, nbytes, dtype)} of every storage autograd saves, parameters
    excluded; module = the innermost module running when it is first saved. A transformers
    model (use_cache=False given) returns an output whose .logits are taken; with `labels`
    it computes its own loss, as Trainer runs it: model(ids, labels=targets).loss
    (ForCausalLMLoss, accounting/ledger/builder/hf_loss.py)."""
    names = {m: n for n, m in model.named_modules()}
    stack, seen = [], {}
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def enter(module, args):
        stack.append(names[module])

    def leave(module, args, output):  # returns None: the output is left alone
        stack.pop()
    handles = [m.register_forward_pre_hook(enter) for m in model.modules()]
    handles += [m.register_forward_hook(leave) for m in model.modules()]

    packed = []

    def pack(t):
        # a detached alias (same storage): returning t itself would make a saved output and
        # its grad_fn a cycle that nothing frees, keeping alive what an op off the loss's
        # graph saved (transformers' delta rule's last state update, dropped without a
        # cache: measured, tests/test_transformers_hybrid.py test_the_hook_cycle)
        d = t.detach()
        packed.append((weakref.ref(d), stack[-1] if stack else "loss"))
        return d
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            if labels:
                loss = model(ids, labels=targets, use_cache=use_cache).loss
            else:
                logits = model(ids) if use_cache is None else \
                    model(ids, use_cache=use_cache).logits
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    finally:
        for h in handles:
            h.remove()
    # What is held when the backward pass starts: a tensor saved by an op off the gradient
    # path (an MoE router's choice, of which only indices leave) is freed with its node.
    for ref, module in packed:
        t = ref()
        if t is None:
            continue
        s = t.untyped_storage()
        if s.data_ptr() not in params and s.data_ptr() not in seen:
            seen[s.data_ptr()] = (module, s.nbytes(), t.dtype)
    loss.backward()  # the saved tensors were usable
    return seen


def relative(module: str) -> str:
    if module == "":  # the LM itself (Gemma's logit soft-cap saves its tanh there): the
        return "model"  # ledger's name for a save outside every submodule (trace._saves)
    parts = module.split(".")
    if parts[0] != "layers":
        return module
    # a block's own save (Gemma 4's × layer_scalar): the ledger's "block" (trace._saves)
    return ".".join(parts[2:]) or "block"


DTYPE = {"fp32": (torch.float32, 4), "bf16": (torch.bfloat16, 2), "bool": (torch.bool, 1),
         "int64": (torch.int64, 8)}


# The delta rule's chunks at lengths the (2, 5) and (3, 8) above miss (chunk 2): T < C_l,
# T = C_l (one chunk: no later chunk saves the decayed Q and K or the row-major W), two
# chunks, the last one partial (issue 31)
DELTA_LENGTHS = [(name, B, T) for name in ("gated_deltanet", "qwen3_next")
                 for B, T in ((2, 1), (2, 2), (2, 3), (3, 7))]


@pytest.mark.parametrize("name,B,T", [(n, B, T) for n in sorted(VARIANTS)
                                      for B, T in ((2, 5), (3, 8))] + DELTA_LENGTHS)
def test_saved_activations_equal_the_ledger(name, B, T):
    measured, expected = saved_and_ledger(variant(name), B, T)
    assert measured == expected


def saved_and_ledger(c, B: int, T: int) -> tuple[dict, dict]:
    """{module: Counter((bytes, dtype))} of the storages autograd saves in a training step
    of model/ at (B, T), and the same from the ledger's records."""
    torch.manual_seed(0)
    model = TransformerLM.from_config(c, context_length=max(T, c.context_length))
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, c.vocab_size, (B, T), generator=g)
    targets = torch.randint(0, c.vocab_size, (B, T), generator=g)
    measured = defaultdict(Counter)
    for module, n, dtype in saved_tensors(model, ids, targets).values():
        measured[relative(module)][(n, dtype)] += 1
    lg = ledger(c)
    v = lg.values(T, B)
    expected = defaultdict(Counter)
    for a in lg.activations:
        if a.saved:
            dtype, size = DTYPE[a.dtype]
            # a record of `storages` equal tensors (the delta rule's per-chunk states): that
            # many storages, each its share
            n = v[a.storages] if a.storages else 1
            if not a.elements.evaluate(v):
                continue  # not saved at this length (the delta rule's [N_c>1])
            expected[a.saved_in][(size * a.elements.evaluate(v) // a.copies // n, dtype)] += \
                a.copies * a.count(v) * n
    if c.per_layer_input is not None:  # Gemma 4's scaled embeddings: one storage, block 0's
        # input (the ledger's ln1 input) that the per-layer projection saves first in model/
        measured["ln1"].update(measured.pop("per_layer_model_projection", Counter()))
    if c.num_experts is not None and c.moe_capacity_factor is None:
        # Dropless experts on a real routing run expert by expert: the ledger's one tensor
        # of B·T·k rows is there in pieces of each expert's rows (sizes that depend on the
        # routing), so ffn.experts is compared by its total bytes per dtype.
        for counts in (measured, expected):
            for experts in ("ffn.experts", "moe.experts"):  # (moe: Gemma 4's, beside the MLP)
                total = Counter()
                for (n, dtype), k in counts.pop(experts, Counter()).items():
                    total[dtype] += n * k
                if total or experts == "ffn.experts":
                    counts[experts] = total
    return dict(measured), dict(expected)


# ---- FLOPs: every counter, every preset and 200 random architectures -----------------------

@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variants_agree_exactly(name):
    result = cross_check(analyze(variant(name), 6, 2, "train"))
    assert result.agrees, views.summary(result)
    assert all(c.agreeing == c.layers for c in result.layers)


# Too slow here (fvcore traces every layer): Qwen3-30B-A3B (48 layers × 128 experts, 15 s),
# DeepSeek-V3 (61 layers × 256 experts, 28 s) and Mixtral-8x7B (4–7 s). Their shipped
# config.json runs at two layers through every counter, transformers' included, in
# tests/test_hf_moe.py; their full size in test_presets.py (parameters by hand) and
# test_hf_moe.py (transformers' parameters).
# Mistral-7B-v0.1 is v0.3's architecture but for its 4,096-token window, which never binds
# at 256 tokens: windows that bind run in test_hf_moe.py (and the window variants above).
SLOW_PRESETS = ("Qwen/Qwen3-30B-A3B", "deepseek-ai/DeepSeek-V3", "mistralai/Mixtral-8x7B-v0.1",
                "mistralai/Mistral-7B-v0.1")


@pytest.mark.parametrize("name", [n for n in sorted(PRESETS)
                                  if not n.startswith("gpt2-") and n not in SLOW_PRESETS])
def test_real_checkpoints_agree_exactly(name):
    # the CS336 presets run in test_crosscheck.py; these at 256 tokens, forward and backward
    [result] = prepared_cross_checks([(PRESETS[name], 256, 1)])
    assert result.agrees, views.summary(result)


def _check(workload):
    c, T, B = workload
    return cross_check(analyze(c, T, B, "train"))


def _checks(workloads):
    """The child's side of prepared_cross_checks: set up for good as a report worker is
    (fvcore in this child, no nested fork), then one result each."""
    from accounting.reporting.checks import start_worker
    start_worker()
    for w in workloads:
        yield _check(w)


@functools.cache
def _warm_up():
    """torch's lazy imports and first-call set-up paid once here, before the forks, as the
    report's pool does (accounting/reporting/checks.py, WARM_UP), not once in each child."""
    from accounting.crosscheck.measure import measure
    from accounting.reporting.checks import WARM_UP
    measure(WARM_UP, 8, phase="train", parallel=False)


def prepared_cross_checks(workloads):
    """cross_check(analyze(c, T, B, "train")) for each workload, run in one forked child set
    up for good as the CLI's process and the report's workers are (measure.prepare_process:
    torch's C++ meta kernels, no tracer source locations): what `--verify` and the report
    run, and about half the CPU time of a caller's process (Python meta kernels), where the
    variants above and tests/test_crosscheck.py's random configs and GPT-2 XL stock checks
    run. One fork for all the workloads (a fork
    per check cost more than these tiny models' checks); both set-ups are compared count by
    count in tests/test_crosscheck_workers.py. In-process where no worker can be forked."""
    from accounting.runtime import fork
    if not fork.available():
        return [_check(w) for w in workloads]
    _warm_up()
    with fork.Streamed(_checks, list(workloads)) as child:
        results = list(child)
    assert len(results) == len(workloads), f"the worker ended after {len(results)} checks"
    return results


def random_configs(n: int, seed: int = 2026):
    """n small configs with every spec field drawn at random (seeded: the same n every run)."""
    rng = random.Random(seed)
    for _ in range(n):
        kv, group = rng.choice([1, 2, 3]), rng.choice([1, 2])
        heads = kv * group
        head_dim = 2 * rng.randint(1, 4)
        explicit = rng.random() < 0.4
        positions = rng.choice(list(POSITIONS))
        if positions != "rope" and rng.random() < 0.3:
            head_dim += 1  # odd head dimensions are fine without RoPE
        c = ModelConfig(
            vocab_size=rng.randint(3, 40), context_length=rng.randint(1, 9),
            num_layers=rng.randint(1, 3), d_model=rng.randint(2, 20) if explicit else heads * head_dim,
            num_heads=heads, d_ff=rng.randint(1, 24), num_kv_heads=kv,
            head_dim=head_dim if explicit else None, norm=rng.choice(list(NORMS)),
            norm_placement=rng.choice(list(NORM_PLACEMENTS)), mlp=rng.choice(list(MLPS)),
            positions=positions, tie_embeddings=rng.random() < 0.5, qkv_bias=rng.random() < 0.5,
            out_bias=rng.random() < 0.5, mlp_bias=rng.random() < 0.5,
            qk_norm=rng.choice([q for q in QK_NORMS if q != "l2" or positions == "rope"]),
            attention_sinks=rng.random() < 0.3,
            name="random")
        # issue 24's scalars (Gemma 2/3, Granite): each set or not; (1 + w) gains on RMSNorm
        scalars = {f: rng.choice([None, 0.5, 2.0]) for f in (
            "embedding_multiplier", "residual_multiplier", "attn_softcap", "final_softcap",
            "logit_scale")}
        c = replace(c, **scalars, norm_offset=c.norm == "rmsnorm" and rng.random() < 0.5)
        # the parallel block (pre-norm only) and partial rotary (an even part of a RoPE head)
        block = rng.choice(list(BLOCKS)) if c.norm_placement == "pre" else "sequential"
        rot = 2 * rng.randint(1, (c.d_k - 1) // 2) if positions == "rope" and c.d_k >= 4 \
            and rng.random() < 0.4 else None
        c = replace(c, block=block, rotary_dim=rot)
        T = rng.randint(1, c.context_length if positions == "learned" else c.context_length + 3)
        B = rng.randint(1, 3)
        yield _hybrid_fields(rng, _llama4_fields(rng, c)), T, B


def _llama4_fields(rng, c):
    """Llama 4's fields drawn on top (h4): NoPE layers (with temperature tuning or not) and
    chunked layers among global ones."""
    L, more = c.num_layers, {}
    if c.positions == "rope" and rng.random() < 0.4:
        more["nope_layers"] = tuple(sorted(rng.sample(range(L), rng.randint(1, L))))
        if rng.random() < 0.5:
            more["temperature_floor"] = rng.randint(1, 4)
            more["temperature_scale"] = rng.choice([0.1, 1.0, 2.5])
    if rng.random() < 0.4:
        more["attention_chunk"] = rng.randint(1, 5)
        more["layer_types"] = tuple(rng.choice(["chunked", "global"]) for _ in range(L))
    return dataclasses.replace(c, **more)


HYBRID_KINDS = ("linear_attention", "mamba", "conv")


def _hybrid_fields(rng, c):
    """Hybrid layer patterns drawn on top (issue 31): gated DeltaNet, Mamba-2 and short-conv
    layers among the attention layers (global, or the chunked ones drawn above), each
    kind's sizes drawn small (chunks of 1 to 4: T spans one chunk, several, a partial last
    one). Recurrent layers run in sequential blocks only (the spec's rule)."""
    if c.block != "sequential" or rng.random() >= 0.4:
        return c
    attention = ["chunked", "global"] if c.attention_chunk else ["global"]
    kinds = [rng.choice(attention + list(HYBRID_KINDS)) for _ in range(c.num_layers)]
    hk, groups = rng.randint(1, 2), rng.randint(1, 2)
    more = dict(layer_types=tuple(kinds), conv_kernel=rng.randint(1, 4),
                conv_bias=rng.random() < 0.5, linear_key_heads=hk,
                linear_value_heads=hk * rng.randint(1, 2), linear_key_head_dim=rng.randint(1, 4),
                linear_value_head_dim=rng.randint(1, 4), linear_chunk=rng.randint(1, 4),
                mamba_heads=groups * rng.randint(1, 2), mamba_groups=groups,
                mamba_head_dim=rng.randint(1, 4), ssm_state=rng.randint(1, 4),
                mamba_chunk=rng.randint(1, 4), mamba_bias=rng.random() < 0.5,
                mamba_dt_min=rng.choice([0.0, 0.001]))
    if "mamba" not in kinds:
        more = {k: v for k, v in more.items() if not k.startswith(("mamba", "ssm"))}
    if "linear_attention" not in kinds:
        more = {k: v for k, v in more.items() if not k.startswith("linear")}
    return dataclasses.replace(c, **more)


RANDOM = list(random_configs(200))


def test_the_random_configs_toggle_every_field():
    seen = defaultdict(set)
    for c, T, _ in RANDOM:
        for f in ("norm", "norm_placement", "mlp", "positions", "qk_norm", "tie_embeddings",
                  "qkv_bias", "out_bias", "mlp_bias", "attention_sinks", "norm_offset"):
            seen[f].add(getattr(c, f))
        for f in ("embedding_multiplier", "residual_multiplier", "attn_softcap", "final_softcap",
                  "logit_scale"):
            seen[f].add(getattr(c, f) is not None)
        seen["attention"].add("mha" if c.kv_heads == c.num_heads else
                              "mqa" if c.kv_heads == 1 else "gqa")
        seen["head_dim"].add(c.head_dim is not None)
        seen["T=1"].add(T == 1)
        seen["block"].add(c.block)
        seen["rotary_dim"].add(c.rotary_dim is not None)
        seen["nope"].add(bool(c.nope_layers))
        seen["temperature"].add(c.temperature_floor is not None)
        seen["chunked"].add(any(k.chunked for k in c.layer_kinds))
        for kind in HYBRID_KINDS:
            seen[kind].add(kind in (c.layer_types or ()))
    assert seen["norm"] == set(NORMS) and seen["mlp"] == set(MLPS)
    assert seen["positions"] == set(POSITIONS) and seen["qk_norm"] == set(QK_NORMS)
    assert seen["norm_placement"] == set(NORM_PLACEMENTS) and seen["attention"] == {"mha", "mqa", "gqa"}
    assert seen["block"] == set(BLOCKS)
    assert all(seen[f] == {True, False} for f in ("tie_embeddings", "qkv_bias", "out_bias",
                                                   "mlp_bias", "head_dim", "T=1", "norm_offset",
                                                   "embedding_multiplier", "residual_multiplier",
                                                   "attn_softcap", "final_softcap", "logit_scale", "attention_sinks",
                                                   "rotary_dim", "nope", "temperature", "chunked")
               + HYBRID_KINDS)


@pytest.mark.parametrize("chunk", range(10))
def test_200_random_architectures_agree_exactly(chunk):
    workloads = RANDOM[chunk::10]
    for (c, T, B), result in zip(workloads, prepared_cross_checks(workloads)):
        assert (result.seq, result.batch, result.phase) == (T, B, "train")  # in order
        assert result.agrees, (c, T, B, views.summary(result))
        assert all(layer.agreeing == layer.layers for layer in result.layers)
