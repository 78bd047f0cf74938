"""The 2024-26 mixture-of-experts model_types of the Hugging Face table (hf_schema.py's
rows): OLMoE, Qwen2-MoE, GLM-4.5 (glm4_moe), MiniMax-M2, ERNIE 4.5 MoE; registered on
import (hf_config.py imports this module). Defaults and rules from transformers 5.23.0's
configuration_<type>.py and modeling_<type>.py.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from accounting.runtime.errors import UsageError
from accounting.architecture.config import ModelConfig
from accounting.architecture.hf_schema import (
    ATTENTION_BIAS, ATTENTION_DROPOUT, BOOL, CHOICE, DEEPSEEK_V3_NAMES, EPS, GATED_ACTS, INT,
    INTEGER, INT_OR_ABSENT, INT_OR_NULL, LIST,
    LLAMA_FAMILY, MOE_NAMES, NONNEG, NONNEG_OR_NULL, ROPE_MUST, THETA, Derived, HFType, Key, ModuleNames, Must,
    Noted, Required, head_dim, kv_heads, llama_sizes, register, rope_keys, rope_must, short)
from accounting.architecture.hf_types_dense import layers_of
from accounting.architecture.hf_types_moe import (ROUTER_FREE, ROUTER_NOTES, _deepseek_layers,
                                          MTP_KEY, _qwen3_moe_layers, _write_first_k,
                                          shared_experts)
from accounting.architecture.hf_types_parallel import _FACTOR_ALIASES, _rotary, _rotary_back

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
    moe_intermediate_size shared experts where whole (every release: 5632/1408 = 4,
    20480/2560 = 8), else one of that width (shared_experts). Qwen2MoeConfig.__post_init__: without layer_types, layer i slides iff
    use_sliding_window and i < max_window_layers and i is even ((i + 1) % 2); the window is
    sliding_window where use_sliding_window, else 0."""
    fields, notes = _qwen3_moe_layers({**v, "use_sliding_window": False}, where)
    E, shared, width = v["num_experts"], v["shared_expert_intermediate_size"], \
        v["moe_intermediate_size"]
    if E > 0:
        fields.update(shared_experts(shared, width))
        notes += (f"shared_expert_intermediate_size {shared}"
                  + (f" = {shared // width} × moe_intermediate_size" if not shared % width else "")
                  + ": one shared MLP that wide, its output × sigmoid(shared_expert_gate).",)
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
            "shared_expert_intermediate_size": c.shared_expert_d_ff}
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
        kv_heads(Required(16), INT),  # null refused: transformers fails on it (tests/test_hf_default_sweep.py)
        # not a Qwen2MoeConfig field: Qwen2MoeAttention reads it when given (getattr)
        head_dim(None, INT_OR_ABSENT),  # null refused: transformers fails on it (tests/test_hf_default_sweep.py)
        Key("qkv_bias", ("qkv_bias",), BOOL, True),  # q/k/v_proj; o_proj never
        Key("moe_intermediate_size", ("moe_d_ff",), INT, Required(1408)),
        Key("shared_expert_intermediate_size", (), INT, Required(5632)),
        Key("num_experts", (), NONNEG, Required(60), aliases=("num_local_experts",)),
        Key("num_experts_per_tok", ("experts_per_token",), INT, Required(4)),
        Key("norm_topk_prob", ("norm_topk_prob",), BOOL, False),
        Key("decoder_sparse_step", (), INT, 1),
        Key("mlp_only_layers", (), LIST, None),
        Key("use_sliding_window", (), BOOL, False),
        Key("sliding_window", (), NONNEG_OR_NULL, 4096),  # 0 as transformers writes it unused
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
    derived=(Derived(("num_experts", "dense_layers", "num_shared_experts", "shared_d_ff",
                      "sliding_window", "layer_types"),
                     ("num_hidden_layers", "num_experts", "decoder_sparse_step",
                      "mlp_only_layers", "moe_intermediate_size",
                      "shared_expert_intermediate_size", "use_sliding_window",
                      "sliding_window", "max_window_layers", "layer_types"),
                     _qwen2_moe_layers,
                     "dense layers as qwen3_moe; the shared expert as shared_expert_intermediate"
                     "_size / moe_intermediate_size experts (or one of its own width); local layers: layer_types, else "
                     "the even layers below max_window_layers when use_sliding_window "
                     "(configuration_qwen2_moe.py)", _qwen2_moe_keys),),
    experts_implementation="batched_mm",
))


# ---- GLM-4.5 / GLM-4.6 (zai-org/GLM-4.5, GLM-4.5-Air; model_type glm4_moe) -------------------
def _glm4_moe_layers(v: Mapping, where: str):
    """Glm4MoeDecoderLayer: layers from first_k_dense_replace on run Glm4MoeMoE (DeepSeek-V3's
    router and shared experts); RoPE on int(head_dim·partial_rotary_factor) dims."""
    fields, notes = _deepseek_layers(v, where)
    head = v["head_dim"] or v["hidden_size"] // v["num_attention_heads"]
    return {**fields, **_rotary(head, v["partial_rotary_factor"], where,
                                "partial_rotary_factor")}, notes


def _glm4_moe_back(c: ModelConfig) -> Mapping | None:
    keys = _write_first_k(c)
    return None if keys is None else {**keys, **_rotary_back("partial_rotary_factor")(c)}


def _qk_norm_head(v: Mapping, where: str):
    """use_qk_norm: q_norm and k_norm, RMSNorm of head_dim each (Glm4MoeAttention: Qwen3's)."""
    return {"qk_norm": "head" if v["use_qk_norm"] else "none"}, ()


def _qk_norm_head_back(c: ModelConfig) -> Mapping | None:
    return None if c.qk_norm not in ("none", "head") else {"use_qk_norm": c.qk_norm == "head"}


register(HFType(
    "glm4_moe", "Glm4MoeForCausalLM",
    keys=llama_sizes(151552, 4096, 10944, 46, 96, 131072) + (
        kv_heads(Required(8), INT),
        head_dim(None, INT_OR_ABSENT),  # Glm4MoeAttention: getattr(config, "head_dim", hidden_size // heads)
        Key("attention_bias", ("qkv_bias",), BOOL, False),  # q/k/v_proj; o_proj never
        Key("use_qk_norm", (), BOOL, False),
        Key("partial_rotary_factor", (), THETA, 0.5, aliases=_FACTOR_ALIASES),
        Key("moe_intermediate_size", ("moe_d_ff",), INT, Required(1408)),
        # Glm4MoeConfig.attribute_map: num_local_experts is n_routed_experts
        Key("n_routed_experts", ("num_experts",), INT, Required(128),
            aliases=("num_local_experts",)),
        Key("num_experts_per_tok", ("experts_per_token",), INT, Required(8)),
        Key("n_shared_experts", ("num_shared_experts",), NONNEG, Required(1)),
        Key("first_k_dense_replace", (), NONNEG, Required(1)),
        Key("n_group", ("router_groups",), INT, 1),
        Key("topk_group", ("router_topk_groups",), INT, 1),
        Key("norm_topk_prob", ("norm_topk_prob",), BOOL, True),
        Key("routed_scaling_factor", ("routed_scaling_factor",), THETA, 1.0), MTP_KEY)
    + rope_keys(1e-5),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, out_bias=False, mlp_bias=False, router="sigmoid",
                                router_bias=True)),
    rules="grouped-query attention with biases on Q, K and V only, RMSNorm of each head's Q "
          "and K when use_qk_norm, RoPE on int(head_dim·partial_rotary_factor) dims; MoE "
          "layers from first_k_dense_replace on as DeepSeek-V3's (a sigmoid router, mlp.gate, "
          "whose choice adds e_score_correction_bias and keeps the best topk_group of n_group "
          "groups; n_shared_experts·moe_intermediate_size shared) (modeling_glm4_moe.py)",
    names=DEEPSEEK_V3_NAMES, must=rope_must(partial=True),
    noted=(ATTENTION_DROPOUT,),
    free=ROUTER_FREE,
    derived=(Derived(("dense_layers", "rotary_dim"),
                     ("num_hidden_layers", "first_k_dense_replace", "n_routed_experts",
                      "n_group", "hidden_size", "num_attention_heads", "head_dim",
                      "partial_rotary_factor"), _glm4_moe_layers,
                     "layers below first_k_dense_replace keep a dense MLP; RoPE on "
                     "int(head_dim·partial_rotary_factor) dims (modeling_glm4_moe.py)",
                     _glm4_moe_back),
             Derived(("qk_norm",), ("use_qk_norm",), _qk_norm_head,
                     "use_qk_norm: RMSNorm of each head's Q and K (Glm4MoeAttention)",
                     _qk_norm_head_back)),
    experts_implementation="batched_mm",
))


# ---- MiniMax-M2 (MiniMaxAI/MiniMax-M2) -------------------------------------------------------
def _minimax_m2_rotary(v: Mapping, where: str):
    """MiniMaxM2Config.convert_rope_params_to_dict: rotary_dim sets partial_rotary_factor =
    rotary_dim / head_dim unless the factor is given; RoPE on int(head_dim·factor) dims."""
    head, factor, rd = v["head_dim"], v["partial_rotary_factor"], v["rotary_dim"]
    if rd is not None and factor == 1.0:
        factor = rd / head
    elif rd is not None and int(head * factor) != rd:
        raise UsageError(f"{where}: rotary_dim {rd} and partial_rotary_factor {factor} "
                         f"disagree (head_dim {head}); transformers reads the factor, so give one")
    return _rotary(head, factor, where, "rotary_dim / partial_rotary_factor"), ()


MINIMAX_MTP = ("{settings}: MiniMax's multi-token-prediction modules are not counted: "
               "transformers' MiniMaxM2ForCausalLM does not build them (the checkpoint "
               "holds them for speculative decoding).")

register(HFType(
    "minimax_m2", "MiniMaxM2ForCausalLM",
    keys=llama_sizes(200064, 3072, 1536, 62, 48, 196608) + (
        kv_heads(Required(8), INT),
        head_dim(Required(128), INT),  # MiniMaxM2Config.head_dim: 128 by default
        Key("rotary_dim", (), INT_OR_NULL, None),
        Key("partial_rotary_factor", (), THETA, 1.0, aliases=_FACTOR_ALIASES),
        Key("num_local_experts", ("num_experts",), INT, Required(256)),
        # MiniMaxM2Config.default_theta = 5000000.0 (configuration_minimax_m2.py)
        Key("num_experts_per_tok", ("experts_per_token",), INT, Required(8))) + rope_keys(1e-6, theta=5e6),
    # each expert is intermediate_size wide; MiniMaxM2TopKRouter renormalises always
    fixed=MappingProxyType(dict(LLAMA_FAMILY, qk_norm="full", qkv_bias=False, out_bias=False,
                                mlp_bias=False, router="sigmoid", router_bias=True,
                                norm_topk_prob=True, num_shared_experts=0,
                                routed_scaling_factor=1.0)),
    rules="grouped-query attention without biases, RMSNorm over the full Q and K projections "
          "(q_norm of heads·head_dim, k_norm of kv_heads·head_dim), RoPE on rotary_dim dims of "
          "each head; on every layer a mixture of intermediate_size-wide experts whose router "
          "(mlp.gate, no bias) takes a sigmoid per expert, chooses the top k of the scores "
          "plus e_score_correction_bias (a buffer) and renormalises the k weights; no shared "
          "expert (modeling_minimax_m2.py)",
    names=MOE_NAMES, must=rope_must(partial=True) + (
        # keys of MiniMax's own code (auto_map): another value would be another model
        Must("scoring_func", lambda v, d: v in (None, "sigmoid"), "sigmoid",
             "a router transformers' MiniMaxM2 does not build (it always uses sigmoid)"),
        Must("use_routing_bias", lambda v, d: v in (None, True), "true",
             "a router without the correction bias, which transformers always builds"),
        Must("use_qk_norm", lambda v, d: v in (None, True), "true",
             "attention without QK-norm, which transformers' MiniMaxM2Attention always has"),
        Must("qk_norm_type", lambda v, d: v in (None, "per_layer"), "per_layer",
             "a QK-norm other than transformers' (one over the whole projection)"),
        Must("shared_intermediate_size", lambda v, d: v in (None, 0), "0",
             "a shared expert, which transformers' MiniMaxM2 does not build"),
        Must("attn_type_list", lambda v, d: v is None or (isinstance(v, list) and all(
            x == 1 for x in v)), "null or all 1 (full attention)",
             "lightning (linear) attention layers, MiniMax-01's, which MiniMax-M2 does not have "
             "(transformers' minimax type builds them)"),
        Must("quantization_config", lambda v, d: v is None or (
            isinstance(v, dict) and v.get("quant_method") == "fp8"), 'null or quant_method "fp8"',
             "a quantized checkpoint whose weights are not dense tensors of the config's "
             "shapes")),
    noted=(ATTENTION_DROPOUT,) + ROUTER_NOTES + (
        Noted("use_mtp", lambda v: not v, MINIMAX_MTP),
        Noted("num_mtp_modules", lambda v: not v, MINIMAX_MTP),
        Noted("mtp_transformer_layers", lambda v: not v, MINIMAX_MTP),
        Noted("quantization_config", lambda v: v is None,
              "quantization_config fp8: the checkpoint stores most matrices in float8 with "
              "block scales; the counts are of the model's parameters as transformers builds "
              "them (dense tensors of the config's shapes), not of the scales.")),
    free=ROUTER_FREE,
    derived=(Derived(("rotary_dim",), ("head_dim", "rotary_dim", "partial_rotary_factor"),
                     _minimax_m2_rotary, "RoPE on rotary_dim (or int(head_dim·"
                     "partial_rotary_factor)) dims of each head (modeling_minimax_m2.py)",
                     lambda c: {"rotary_dim": c.rotary_dim or c.d_k,
                                "partial_rotary_factor": 1.0}),),
    experts_implementation="batched_mm",
))


# ---- ERNIE 4.5 MoE (baidu/ERNIE-4.5-21B-A3B-PT, ERNIE-4.5-300B-A47B-PT) -------------------------
def _ernie_layers(v: Mapping, where: str):
    """Ernie4_5_MoeDecoderLayer: layer i runs the experts iff (i + 1) % moe_layer_interval
    == 0 and moe_layer_start_index ≤ i ≤ moe_layer_end_index (-1: the last layer,
    Ernie4_5_MoeConfig.__post_init__); the others a dense MLP of intermediate_size."""
    L, start, end, step = (v["num_hidden_layers"], v["moe_layer_start_index"],
                           v["moe_layer_end_index"], v["moe_layer_interval"])
    end = L - 1 if end == -1 else end
    dense = tuple(i for i in range(L) if not ((i + 1) % step == 0 and start <= i <= end))
    if len(dense) == L:
        raise UsageError(f"{where}: moe_layer_start_index {start}, moe_layer_end_index "
                         f"{v['moe_layer_end_index']} and moe_layer_interval {step} leave no MoE "
                         f"layer; the spec's experts need one (write the model as dense)")
    return {"dense_layers": dense}, ((f"{len(dense)} of {L} layers keep a dense MLP of "
                                      f"intermediate_size (moe_layer_start_index, "
                                      f"moe_layer_end_index, moe_layer_interval).",)
                                     if dense else ())


def _ernie_back(c: ModelConfig) -> Mapping | None:
    moe = [i for i, k in enumerate(c.layer_kinds) if k.moe]
    if moe != list(range(moe[0], moe[-1] + 1)):
        return None  # only a contiguous run of MoE layers (interval 1) is written back
    return {"moe_layer_start_index": moe[0], "moe_layer_end_index": moe[-1],
            "moe_layer_interval": 1}


ERNIE_NAMES = ModuleNames(MOE_NAMES.blocks, MappingProxyType({
    **MOE_NAMES.block, "ffn.router_statics": "mlp.gate.moe_statics",
    "ffn.shared.w1": "mlp.shared_experts.gate_proj", "ffn.shared.w3": "mlp.shared_experts.up_proj",
    "ffn.shared.w2": "mlp.shared_experts.down_proj"}), MOE_NAMES.top)

register(HFType(
    "ernie4_5_moe", "Ernie4_5_MoeForCausalLM",
    keys=llama_sizes(103424, 2560, 12288, 28, 20, 131072) + (
        kv_heads(Required(4), INT),  # null refused: transformers fails on it (tests/test_hf_default_sweep.py)
        head_dim(None, INT_OR_ABSENT),  # Ernie4_5_MoeAttention: getattr(config, "head_dim", hidden // heads)
        Key("moe_intermediate_size", ("moe_d_ff",), INT, Required(1536)),
        # Ernie4_5_MoeConfig.attribute_map: num_experts, num_experts_per_tok
        Key("moe_num_experts", ("num_experts",), INT, Required(64), aliases=("num_experts",)),
        Key("moe_k", ("experts_per_token",), INT, Required(6), aliases=("num_experts_per_tok",)),
        Key("moe_num_shared_experts", ("num_shared_experts",), NONNEG, Required(2)),
        Key("moe_layer_start_index", (), NONNEG, 1),
        Key("moe_layer_end_index", (), INTEGER, -1),
        Key("moe_layer_interval", (), INT, 1),
        Key("hidden_act", ("mlp",), CHOICE, "silu", GATED_ACTS),
        Key("rms_norm_eps", ("norm_eps",), EPS, 1e-5),
        Key("tie_word_embeddings", ("tie_embeddings",), BOOL, True),
        Key("rope_theta", ("rope_theta",), THETA, 500_000.0,  # Ernie4_5_MoeConfig.default_theta
            aliases=("rope_parameters.rope_theta", "rope_scaling.rope_theta"))),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, qk_norm="none", qkv_bias=False, out_bias=False,
                                mlp_bias=False, router="softmax", router_bias=True,
                                router_bias_param=True, norm_topk_prob=True,
                                routed_scaling_factor=1.0)),
    rules="grouped-query attention; MoE layers (moe_layer_start_index to moe_layer_end_index, "
          "every moe_layer_interval-th) of moe_intermediate_size-wide experts and one shared "
          "MLP of moe_num_shared_experts·moe_intermediate_size; the router (mlp.gate, a float32 "
          "weight) takes a softmax over the experts, chooses the top k of the probabilities "
          "plus e_score_correction_bias (Ernie4_5_MoeStatics: a frozen nn.Parameter, counted) "
          "and renormalises the k weights (their sum clamped at moe_norm_min: one op per "
          "token, not counted) (modeling_ernie4_5_moe.py)",
    names=ERNIE_NAMES, must=ROPE_MUST + (
        # Ernie4_5_MoeAttention, MLPs and the LM head all take bias=use_bias: the spec's head
        # has no bias
        Must("use_bias", lambda v, d: v in (None, False), "false",
             "biases on every projection and on the LM head, which the spec's head cannot have",
             False),),
    noted=(ATTENTION_DROPOUT,),
    # moe_norm_min: the clamp's floor (no count); moe_capacity, moe_gate, moe_use_aux_free,
    # use_rmsnorm, compression_ratio, ...: keys of Baidu's own code some files carry are
    # judged by the CLI (unknown keys)
    free=ROUTER_FREE | {"moe_norm_min"},
    derived=(Derived(("dense_layers",), ("num_hidden_layers", "moe_layer_start_index",
                                         "moe_layer_end_index", "moe_layer_interval"),
                     _ernie_layers, "MoE layers: every moe_layer_interval-th from "
                     "moe_layer_start_index to moe_layer_end_index (-1: the last); the others "
                     "dense (modeling_ernie4_5_moe.py)", _ernie_back),),
    experts_implementation="batched_mm",
))
