"""Phi-3.5-MoE's row of the Hugging Face table (model_type phimoe; issue 31), registered on
import (hf_config.py imports this module). Defaults and rules from transformers 5.23.0's
models/phimoe/configuration_phimoe.py and modeling_phimoe.py:

- PhimoeDecoderLayer: nn.LayerNorm (weight and bias, eps rms_norm_eps) before attention
  and before the experts; PhimoeAttention: q/k/v/o_proj with biases by attention_bias,
  head_dim hidden_size // num_attention_heads, RoPE (longrope changes frequencies only);
- PhimoeSparseMoeBlock: every layer a mixture of intermediate_size-wide experts
  (PhimoeExperts: gate_up_proj, down_proj, act(gate)·up), routed by PhimoeTopKRouter (an
  nn.Linear without bias) through sparsemixer: two experts, whatever num_experts_per_tok
  says, each weighted by its own masked softmax (the spec's router "sparsemixer", counted
  in its inference form; training draws Gumbel samples and adds input jitter);
- PhimoeForCausalLM: lm_head with a bias by lm_head_bias; the final norm a LayerNorm.
"""
from __future__ import annotations

from types import MappingProxyType

from accounting.architecture.hf_schema import (
    ATTENTION_BIAS, ATTENTION_DROPOUT, BOOL, DROPOUT_VALUE, INT, INT_OR_ABSENT, INT_OR_NULL,
    LLAMA_NAMES, ROPE_MUST, HFType, Key, ModuleNames, Must, Noted, Required, dropout, head_dim,
    kv_heads, llama_sizes, register, rope_keys)
from accounting.architecture.hf_types_moe import ROUTER_FREE

PHIMOE_NAMES = ModuleNames(LLAMA_NAMES.blocks, MappingProxyType({
    **LLAMA_NAMES.block, "ffn.router": "mlp.router", "ffn.experts": "mlp.experts"}),
    LLAMA_NAMES.top)

register(HFType(
    "phimoe", "PhimoeForCausalLM",
    keys=llama_sizes(32064, 4096, 6400, 32, 32, 131072) + (
        kv_heads(8, INT),  # typed int: null refused (StrictDataclass), as transformers fails
        head_dim(None, INT_OR_ABSENT),  # PhimoeAttention: getattr(config, "head_dim", d // h)
        ATTENTION_BIAS,
        Key("lm_head_bias", ("lm_head_bias",), BOOL, False),
        Key("num_local_experts", ("num_experts",), INT, Required(16)),
        Key("num_experts_per_tok", ("experts_per_token",), INT, 2),
        Key("sliding_window", ("sliding_window",), INT_OR_NULL, None),
    ) + rope_keys(1e-5, theta=1e6),
    fixed=MappingProxyType(dict(norm="layernorm", norm_placement="pre", positions="rope",
                                qk_norm="none", mlp_bias=False, router="sparsemixer",
                                norm_topk_prob=False, num_shared_experts=0, router_bias=False,
                                routed_scaling_factor=1.0)),
    rules="LayerNorm with bias before each sublayer and at the end (nn.LayerNorm, eps "
          "rms_norm_eps); attention biases by attention_bias; every layer's MLP a mixture of "
          "intermediate_size-wide experts routed by SparseMixer (PhimoeTopKRouter, "
          "sparsemixer: the best expert, then the best of the rest, each weighted by a "
          "softmax of the scores near its own, counted in its inference form); the LM head "
          "biased by lm_head_bias (modeling_phimoe.py); a sliding window, when given, on "
          "every layer",
    names=PHIMOE_NAMES,
    must=ROPE_MUST + (Must("num_experts_per_tok", lambda v, d: v == 2, "2",
                           "fewer or more experts per token than the two sparsemixer always "
                           "picks (transformers ignores the value)", 2),),
    noted=(ATTENTION_DROPOUT, dropout("hidden_dropout"),
           Noted("router_jitter_noise", lambda v: True,
                 "{settings}: SparseMixer's threshold eps (which scores a round's softmax "
                 "keeps), a value of its comparison: no count", DROPOUT_VALUE),
           Noted("input_jitter_noise", lambda v: v in (0, 0.0),
                 "{settings}: transformers multiplies the MoE input by uniform noise in "
                 "training mode only; not counted (like dropout: elementwise work, no "
                 "matmul).", DROPOUT_VALUE)),
    # longrope's base length (its frequencies only)
    free=ROUTER_FREE | {"original_max_position_embeddings"},
    experts_implementation="batched_mm",
))
