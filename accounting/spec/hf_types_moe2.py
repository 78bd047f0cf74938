"""The 2024-26 mixture-of-experts model_types of the Hugging Face table (hf_schema.py's
rows): OLMoE, Qwen2-MoE; registered on import (hf_config.py imports this module). Defaults
and rules from transformers 5.23.0's configuration_<type>.py and modeling_<type>.py.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from accounting.runtime.errors import UsageError
from accounting.spec.config import ModelConfig
from accounting.spec.hf_schema import (
    ATTENTION_BIAS, ATTENTION_DROPOUT, BOOL, INT, INT_OR_NULL, LIST, LLAMA_FAMILY, MOE_NAMES,
    NONNEG, ROPE_MUST, Derived, HFType, Key, ModuleNames, Must, Required, head_dim, kv_heads,
    llama_sizes, register, rope_keys, short)
from accounting.spec.hf_types_dense import layers_of
from accounting.spec.hf_types_moe import ROUTER_FREE, ROUTER_NOTES, _qwen3_moe_layers

# OLMoE-1B-7B (allenai/OLMoE-1B-7B-0924): OlmoeAttention's q_norm over hidden_size and
# k_norm over (hidden_size // heads)·kv_heads, on the projections before the head split
# (OLMo-2's full-width QK-norm), pre-norm blocks (input_layernorm, post_attention_layernorm:
# llama's places), and on every layer OlmoeSparseMoeBlock: OlmoeTopKRouter (a bare weight,
# softmax over the experts, top-k of the probabilities, renormalised iff norm_topk_prob)
# and OlmoeExperts (gate_up_proj (E, 2·intermediate_size, d), down_proj), no shared expert.
register(HFType(
    "olmoe", "OlmoeForCausalLM",
    keys=llama_sizes(50304, 2048, 2048, 16, 16, 4096) + (
        kv_heads(),  # OlmoeConfig.__post_init__: None -> num_attention_heads
        ATTENTION_BIAS,  # q/k/v/o_proj alike (OlmoeAttention)
        # OlmoeConfig.attribute_map: num_local_experts is num_experts
        Key("num_experts", ("num_experts",), INT, Required(64), aliases=("num_local_experts",)),
        Key("num_experts_per_tok", ("experts_per_token",), INT, Required(8)),
        Key("norm_topk_prob", ("norm_topk_prob",), BOOL, False)) + rope_keys(1e-5),
    # each expert is intermediate_size wide (OlmoeExperts: no moe_intermediate_size)
    fixed=MappingProxyType(dict(LLAMA_FAMILY, qk_norm="full", mlp_bias=False, router="softmax",
                                num_shared_experts=0, router_bias=False,
                                routed_scaling_factor=1.0)),
    rules="RMSNorm over the full Q and K projections before the head split (q_norm of "
          "hidden_size, k_norm of kv_heads·head_dim: OLMo-2's); every layer's MLP a mixture "
          "of intermediate_size-wide experts, a router without bias (mlp.gate), softmax over "
          "the experts, top-k, no shared expert (modeling_olmoe.py)",
    names=MOE_NAMES,
    must=ROPE_MUST + (
        Must("clip_qkv", lambda v, d: v is None, "null",
             "Q, K and V clamped to ±clip_qkv (elementwise ops the tool does not count)"),),
    noted=(ATTENTION_DROPOUT,),
    free=ROUTER_FREE, experts_implementation="batched_mm",
))


# ---- Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B) -----------------------------------------
def _qwen2_moe_layers(v: Mapping, where: str):
    """Qwen2MoeDecoderLayer: the experts as Qwen3-MoE's rule (mlp_only_layers,
    decoder_sparse_step, num_experts > 0); Qwen2MoeSparseMoeBlock's shared_expert is one
    Qwen2MoeMLP of shared_expert_intermediate_size, read as shared_expert_intermediate_size /
    moe_intermediate_size shared experts (a whole number in every release: 5632/1408 = 4,
    20480/2560 = 8). Qwen2MoeConfig.__post_init__: without layer_types, layer i slides iff
    use_sliding_window and i < max_window_layers and i is even ((i + 1) % 2); the window is
    sliding_window where use_sliding_window, else 0."""
    fields, notes = _qwen3_moe_layers({**v, "use_sliding_window": False}, where)
    E, shared, width = v["num_experts"], v["shared_expert_intermediate_size"], \
        v["moe_intermediate_size"]
    if E > 0:
        if shared % width:
            raise UsageError(f"{where}: shared_expert_intermediate_size {shared} is not a "
                             f"multiple of moe_intermediate_size {width}; the spec writes the "
                             f"shared expert as n experts of moe_intermediate_size (--shared-"
                             f"experts n), so it cannot mean this one")
        fields.update(num_shared_experts=shared // width)
        notes += (f"shared_expert_intermediate_size {shared} = {shared // width} × "
                  f"moe_intermediate_size: one shared MLP that wide, its output × "
                  f"sigmoid(shared_expert_gate).",)
    L, given, use = v["num_hidden_layers"], v["layer_types"], v["use_sliding_window"]
    if given is None:
        types = ["local" if use and i < v["max_window_layers"] and (i + 1) % 2 else "global"
                 for i in range(L)]
    else:
        kinds = {"full_attention": "global", "sliding_attention": "local"}
        if len(given) != L or any(t not in kinds for t in given):
            raise UsageError(f"{where}: layer_types must list {L} entries (num_hidden_layers), "
                             f"each \"full_attention\" or \"sliding_attention\", got "
                             f"{short(given)}")
        types = [kinds[t] for t in given]
    fields.update(layers_of(types, v["sliding_window"] if use else None, where))
    return fields, notes


def _qwen2_moe_keys(c: ModelConfig) -> Mapping | None:
    kinds = c.layer_kinds
    keys = {"num_experts": c.num_experts or 0, "decoder_sparse_step": 1,
            "mlp_only_layers": [i for i, k in enumerate(kinds) if not k.moe],
            "shared_expert_intermediate_size": c.num_shared_experts * c.expert_d_ff}
    if not any(k.local for k in kinds):
        return {**keys, "use_sliding_window": False, "layer_types": None}
    return {**keys, "use_sliding_window": True, "sliding_window": c.sliding_window,
            "layer_types": ["sliding_attention" if k.local else "full_attention" for k in kinds]}


QWEN2_MOE_NAMES = ModuleNames(MOE_NAMES.blocks, MappingProxyType({
    **MOE_NAMES.block, "ffn.shared.w1": "mlp.shared_expert.gate_proj",
    "ffn.shared.w3": "mlp.shared_expert.up_proj", "ffn.shared.w2": "mlp.shared_expert.down_proj",
    "ffn.shared_gate": "mlp.shared_expert_gate"}), MOE_NAMES.top)

register(HFType(
    "qwen2_moe", "Qwen2MoeForCausalLM",
    keys=llama_sizes(151936, 2048, 5632, 24, 16, 32768) + (
        kv_heads(Required(16)),
        # not a Qwen2MoeConfig field: Qwen2MoeAttention reads it when given (getattr)
        head_dim(),
        Key("qkv_bias", ("qkv_bias",), BOOL, True),  # q/k/v_proj; o_proj never
        Key("moe_intermediate_size", ("moe_d_ff",), INT, Required(1408)),
        Key("shared_expert_intermediate_size", (), INT, Required(5632)),
        Key("num_experts", (), NONNEG, Required(60), aliases=("num_local_experts",)),
        Key("num_experts_per_tok", ("experts_per_token",), INT, Required(4)),
        Key("norm_topk_prob", ("norm_topk_prob",), BOOL, False),
        Key("decoder_sparse_step", (), INT, 1),
        Key("mlp_only_layers", (), LIST, None),
        Key("use_sliding_window", (), BOOL, False),
        Key("sliding_window", (), INT_OR_NULL, 4096),
        Key("max_window_layers", (), NONNEG, 28),
        Key("layer_types", (), LIST, None)) + rope_keys(1e-6),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, qk_norm="none", out_bias=False, mlp_bias=False,
                                router="softmax", router_bias=False, routed_scaling_factor=1.0,
                                shared_expert_gate=True)),
    rules="biases on Q, K and V only (as Qwen2); MoE layers of moe_intermediate_size-wide "
          "experts, a router without bias (mlp.gate), softmax over the experts, top-k; beside "
          "them one shared MLP of shared_expert_intermediate_size whose output is scaled by "
          "sigmoid(shared_expert_gate(x)), a d_model → 1 linear map without bias "
          "(Qwen2MoeSparseMoeBlock, modeling_qwen2_moe.py)",
    names=QWEN2_MOE_NAMES, must=ROPE_MUST, noted=(ATTENTION_DROPOUT,) + ROUTER_NOTES,
    free=ROUTER_FREE,
    derived=(Derived(("num_experts", "dense_layers", "num_shared_experts", "sliding_window",
                      "layer_types"),
                     ("num_hidden_layers", "num_experts", "decoder_sparse_step",
                      "mlp_only_layers", "moe_intermediate_size",
                      "shared_expert_intermediate_size", "use_sliding_window",
                      "sliding_window", "max_window_layers", "layer_types"),
                     _qwen2_moe_layers,
                     "dense layers as qwen3_moe; the shared expert as shared_expert_intermediate"
                     "_size / moe_intermediate_size experts; local layers: layer_types, else "
                     "the even layers below max_window_layers when use_sliding_window "
                     "(configuration_qwen2_moe.py)", _qwen2_moe_keys),),
    experts_implementation="batched_mm",
))
