"""Jamba (model_type jamba; issue 31): Mamba-1 layers with attention every attn_layer_period
layers and a mixture of experts every expert_layer_period layers. Registered on import
(hf_config.py imports this module). Defaults and rules from transformers 5.23.0's
configuration_jamba.py and modeling_jamba.py.
"""
from __future__ import annotations

import math
from types import MappingProxyType
from typing import Mapping

from accounting.runtime.errors import UsageError
from accounting.architecture.hf_schema import (
    ATTENTION_DROPOUT, BOOL, CHOICE, EPS, INT, INT_OR_ABSENT, NONNEG,
    WINDOW_PATTERN, Derived, HFType, Key, ModuleNames, Required, head_dim, kv_heads, register)
from accounting.architecture.hf_types_moe import ROUTER_FREE, ROUTER_NOTES


def _jamba_layers(v: Mapping, where: str):
    """JambaConfig: layer i attention iff i % attn_layer_period == attn_layer_offset, else
    Mamba-1 (layers_block_type); experts iff num_experts > 1 and i % expert_layer_period ==
    expert_layer_offset (layers_num_experts), else JambaMLP; validate_architecture refuses
    an offset not below its period; mamba_dt_rank "auto" is ⌈hidden_size/16⌉; the mixer's
    width mamba_expand · hidden_size."""
    L = v["num_hidden_layers"]
    for what in ("attn", "expert"):
        period, offset = v[f"{what}_layer_period"], v[f"{what}_layer_offset"]
        if offset >= period:
            raise UsageError(f"{where}: {what}_layer_offset {offset} must be below "
                             f"{what}_layer_period {period} (transformers refuses it)")
    rank = v["mamba_dt_rank"]
    rank = math.ceil(v["hidden_size"] / 16) if rank == "auto" else rank
    if isinstance(rank, bool) or not isinstance(rank, int) or rank <= 0:
        raise UsageError(f"{where}: mamba_dt_rank must be \"auto\" or a positive integer, got "
                         f"{rank!r}")
    ap, ao = v["attn_layer_period"], v["attn_layer_offset"]
    fields: dict = {"layer_types": tuple("global" if i % ap == ao else "mamba1" for i in range(L)),
                    "mamba_inner": v["mamba_expand"] * v["hidden_size"], "mamba_dt_rank": rank}
    E = v["num_experts"]
    if E > 1:
        ep, eo = v["expert_layer_period"], v["expert_layer_offset"]
        if v["num_experts_per_tok"] > E:
            raise UsageError(f"{where}: num_experts_per_tok {v['num_experts_per_tok']} is more "
                             f"than num_experts {E}")
        fields.update(num_experts=E, dense_layers=tuple(i for i in range(L) if i % ep != eo))
    return fields, ()


JAMBA_NAMES = ModuleNames(
    blocks="model.layers",
    block=MappingProxyType({
        "ln1": "input_layernorm", "ln2": "pre_ff_layernorm", "attn": "self_attn",
        "attn.q_proj": "self_attn.q_proj", "attn.k_proj": "self_attn.k_proj",
        "attn.v_proj": "self_attn.v_proj", "attn.output_proj": "self_attn.o_proj",
        "mixer": "mamba", "mixer.conv1d": "mamba.conv1d", "mixer.in_proj": "mamba.in_proj",
        "mixer.x_proj": "mamba.x_proj", "mixer.dt_proj": "mamba.dt_proj",
        "mixer.out_proj": "mamba.out_proj", "mixer.dt_layernorm": "mamba.dt_layernorm",
        "mixer.b_layernorm": "mamba.b_layernorm", "mixer.c_layernorm": "mamba.c_layernorm",
        "ffn": "feed_forward", "ffn.router": "feed_forward.router",
        "ffn.experts": "feed_forward.experts", "ffn.w1": "feed_forward.gate_proj",
        "ffn.w3": "feed_forward.up_proj", "ffn.w2": "feed_forward.down_proj"}),
    top=MappingProxyType({"token_embeddings": "model.embed_tokens",
                          "ln_final": "model.final_layernorm", "lm_head": "lm_head"}),
)

register(HFType(
    "jamba", "JambaForCausalLM",
    keys=(Key("vocab_size", ("vocab_size",), INT, Required(65536)),
          Key("hidden_size", ("d_model",), INT, Required(4096)),
          Key("intermediate_size", ("d_ff",), INT, Required(14336)),
          Key("num_hidden_layers", ("num_layers",), INT, Required(32)),
          Key("num_attention_heads", ("num_heads",), INT, Required(32)),
          Key("max_position_embeddings", ("context_length",), INT, 262144),
          # JambaConfig types num_key_value_heads int: null refused (transformers fails)
          kv_heads(8, INT), head_dim(None, INT_OR_ABSENT),
          # the mixer's conv activation is hidden_act too (JambaMambaMixer.act): SiLU only
          Key("hidden_act", ("mlp",), CHOICE, "silu", MappingProxyType({"silu": "swiglu"})),
          Key("rms_norm_eps", ("norm_eps",), EPS, 1e-6),
          Key("tie_word_embeddings", ("tie_embeddings",), BOOL, False),
          # JambaConfig.attribute_map: num_local_experts is num_experts
          Key("num_experts", (), NONNEG, 16, aliases=("num_local_experts",)),
          Key("num_experts_per_tok", ("experts_per_token",), INT, 2),
          Key("expert_layer_period", (), INT, 2),
          Key("expert_layer_offset", (), NONNEG, 1),
          Key("attn_layer_period", (), INT, 8),
          Key("attn_layer_offset", (), NONNEG, 4),
          Key("mamba_d_state", ("ssm_state",), INT, 16),
          Key("mamba_d_conv", ("conv_kernel",), INT, 4),
          Key("mamba_expand", (), INT, 2),
          Key("mamba_dt_rank", (), WINDOW_PATTERN, "auto"),
          Key("mamba_conv_bias", ("conv_bias",), BOOL, True),
          Key("mamba_proj_bias", ("mamba_bias",), BOOL, False)),
    fixed=MappingProxyType(dict(norm="rmsnorm", norm_placement="pre", positions="none",
                                qk_norm="none", qkv_bias=False, out_bias=False,
                                mlp_bias=False, router="softmax", norm_topk_prob=False,
                                num_shared_experts=0, router_bias=False,
                                routed_scaling_factor=1.0)),
    rules="pre-norm RMSNorm blocks (input_layernorm, pre_ff_layernorm), each a Mamba-1 mixer "
          "(JambaMambaMixer: in_proj to x and z, conv1d and SiLU, x_proj to dt, B, C each "
          "RMS-normed, dt_proj, the sequential selective scan, y·SiLU(z), out_proj) or "
          "grouped attention without RoPE or biases (JambaAttention), then a SwiGLU MLP or "
          "a mixture of intermediate_size-wide experts (a router without bias, softmax, top-"
          "k, the k weights not renormalised: JambaTopKRouter) (modeling_jamba.py)",
    names=JAMBA_NAMES, noted=(ATTENTION_DROPOUT,) + ROUTER_NOTES,
    # the kernels' switches (the torch path's sequential loop is what runs here: mambapy's
    # pscan and the associative scan have the same matmul FLOPs) and generation's
    free=ROUTER_FREE | {"use_mamba_kernels", "use_mambapy", "use_associative_scan",
                        "num_logits_to_keep"},
    derived=(Derived(("layer_types", "mamba_inner", "mamba_dt_rank", "num_experts",
                      "dense_layers"),
                     ("num_hidden_layers", "hidden_size", "attn_layer_period",
                      "attn_layer_offset", "expert_layer_period", "expert_layer_offset",
                      "num_experts", "num_experts_per_tok", "mamba_expand", "mamba_dt_rank"),
                     _jamba_layers,
                     "attention layers: i % attn_layer_period == attn_layer_offset, the rest "
                     "Mamba-1; experts where i % expert_layer_period == expert_layer_offset "
                     "(num_experts > 1); mamba_dt_rank \"auto\": ⌈hidden_size/16⌉ "
                     "(JambaConfig)"),),
    experts_implementation="batched_mm",
))
