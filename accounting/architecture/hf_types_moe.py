"""The mixture-of-experts and latent-attention model_types of the Hugging Face table
(hf_schema.py's rows): Mixtral, Qwen3-MoE, DeepSeek-V3, DeepSeek-V3.2, DeepSeek-V2;
registered on import (hf_config.py imports this module). Defaults and rules from
transformers 5.23.0's configuration_<type>.py and modeling_<type>.py.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from accounting.architecture.config import ModelConfig
from accounting.architecture.hf_schema import (
    ATTENTION_BIAS, ATTENTION_DROPOUT, BOOL, CHOICE, DEEPSEEK_V3_NAMES, ModuleNames, DROPOUT_VALUE, INT, INT_OR_NULL, LIST,
    LLAMA_FAMILY, MOE_NAMES, NONNEG, ROPE_MUST, THETA, Derived, HFType, Key, Must, Noted,
    Required, head_dim, kv_heads, llama_sizes, register, rope_keys, short)
from accounting.architecture.hf_types_dense import layers_of
from accounting.runtime.errors import UsageError


# ---- mixtures of experts and latent attention ---------------------------------------------
ROUTER_NOTES = (
    Noted("router_jitter_noise", lambda v: v in (0, 0.0),
          "{settings}: transformers multiplies the MoE input by uniform noise in training mode "
          "only; not counted (like dropout: elementwise work, no matmul).", DROPOUT_VALUE),)
# the router's training loss and its output switch: no count of the model's forward
ROUTER_FREE = frozenset({"router_aux_loss_coef", "output_router_logits"})

register(HFType(
    "mixtral", "MixtralForCausalLM",
    keys=llama_sizes(32000, 4096, 14336, 32, 32, 131072) + (
        # MistralConfig/MixtralConfig type it int: null is refused (StrictDataclass)
        kv_heads(Required(8), INT),
        head_dim(),
        # MixtralConfig.attribute_map: num_experts is num_local_experts
        Key("num_local_experts", ("num_experts",), INT, Required(8), aliases=("num_experts",)),
        Key("num_experts_per_tok", ("experts_per_token",), INT, Required(2)),
        # MixtralConfig.default_theta = 1000000.0 (configuration_mixtral.py), not 10,000
        Key("sliding_window", ("sliding_window",), INT_OR_NULL, None)) + rope_keys(1e-5, theta=1e6),
    # each expert is intermediate_size wide (MixtralExperts: no moe_intermediate_size)
    fixed=MappingProxyType(dict(LLAMA_FAMILY, qk_norm="none", qkv_bias=False, out_bias=False,
                                mlp_bias=False, router="softmax", norm_topk_prob=True,
                                num_shared_experts=0, router_bias=False,
                                routed_scaling_factor=1.0)),
    rules="every layer's MLP is a mixture of intermediate_size-wide experts: a router without "
          "bias (mlp.gate), softmax over the experts, top-k, the chosen weights always "
          "renormalised (MixtralTopKRouter), no shared expert (modeling_mixtral.py); a "
          "sliding window, when given, on every layer",
    names=MOE_NAMES, must=ROPE_MUST, noted=(ATTENTION_DROPOUT,) + ROUTER_NOTES,
    free=ROUTER_FREE, experts_implementation="batched_mm",
))


def _qwen3_moe_layers(v: Mapping, where: str):
    """Qwen3MoeDecoderLayer: layer i runs the experts iff i is not in mlp_only_layers and
    num_experts > 0 and (i + 1) % decoder_sparse_step == 0; else a dense MLP of
    intermediate_size. The window (use_sliding_window) applies to every layer."""
    L, E, step, only = (v["num_hidden_layers"], v["num_experts"], v["decoder_sparse_step"],
                        v["mlp_only_layers"])
    only = [] if only is None else only
    if any(isinstance(i, bool) or not isinstance(i, int) for i in only):
        raise UsageError(f"{where}: mlp_only_layers must list layer indices, got {short(only)}")
    fields: dict = {}
    if E > 0:
        fields["num_experts"] = E
        fields["dense_layers"] = tuple(i for i in range(L)
                                       if i in only or (i + 1) % step != 0)
    if v["use_sliding_window"]:
        fields.update(layers_of(["local"] * L, v["sliding_window"], where))
    n_dense = L if E == 0 else len(fields["dense_layers"])
    notes = () if not n_dense else (
        f"{n_dense} of {L} layers keep a dense MLP of intermediate_size "
        + ("(num_experts 0)." if E == 0 else "(mlp_only_layers, decoder_sparse_step)."),)
    return fields, notes


def _qwen3_moe_keys(c: ModelConfig) -> Mapping | None:
    kinds = c.layer_kinds
    if any(k.local for k in kinds) and not all(k.local for k in kinds):
        return None  # Qwen3-MoE's window is on every layer or none
    return {"num_experts": c.num_experts or 0, "decoder_sparse_step": 1,
            "mlp_only_layers": [i for i, k in enumerate(kinds) if not k.moe],
            "use_sliding_window": kinds[0].local, "sliding_window": c.sliding_window}


register(HFType(
    "qwen3_moe", "Qwen3MoeForCausalLM",
    keys=llama_sizes(151936, 2048, 6144, 24, 32, 32768) + (
        # Qwen3MoeConfig has no null here (num_attention_heads // num_key_value_heads)
        kv_heads(Required(4), INT),
        # not a Qwen3MoeConfig field: read when given, else hidden_size // num_attention_heads
        head_dim(None, INT),
        ATTENTION_BIAS,
        Key("moe_intermediate_size", ("moe_d_ff",), INT, Required(768)),
        Key("num_experts", (), NONNEG, Required(128), aliases=("num_local_experts",)),
        Key("num_experts_per_tok", ("experts_per_token",), INT, Required(8)),
        Key("norm_topk_prob", ("norm_topk_prob",), BOOL, False),
        Key("decoder_sparse_step", (), INT, 1),
        Key("mlp_only_layers", (), LIST, None),
        Key("use_sliding_window", (), BOOL, False),
        Key("sliding_window", (), INT_OR_NULL, 4096)) + rope_keys(1e-6),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, qk_norm="head", mlp_bias=False, router="softmax",
                                num_shared_experts=0, router_bias=False,
                                routed_scaling_factor=1.0)),
    rules="RMSNorm of each head's Q and K (as Qwen3); MoE layers of moe_intermediate_size-wide "
          "experts, a router without bias (mlp.gate), softmax over the experts, top-k, no "
          "shared expert (modeling_qwen3_moe.py)",
    names=MOE_NAMES, must=ROPE_MUST, noted=(ATTENTION_DROPOUT,) + ROUTER_NOTES,
    # max_window_layers: Qwen3-MoE's config and model do not read it (every layer slides)
    free=ROUTER_FREE | {"max_window_layers"},
    derived=(Derived(("num_experts", "dense_layers", "sliding_window", "layer_types"),
                     ("num_experts", "decoder_sparse_step", "mlp_only_layers",
                      "use_sliding_window", "sliding_window"), _qwen3_moe_layers,
                     "dense layers: mlp_only_layers, and those where (i + 1) % "
                     "decoder_sparse_step ≠ 0; the window on every layer when "
                     "use_sliding_window (modeling_qwen3_moe.py)", _qwen3_moe_keys),),
    experts_implementation="batched_mm",
))


def _first_k_dense(v: Mapping) -> tuple[dict, tuple[str, ...]]:
    """DeepseekV2/V3DecoderLayer: layers below first_k_dense_replace keep a dense MLP of
    intermediate_size (transformers ignores DeepSeek's moe_layer_freq: a Must below)."""
    L, k = v["num_hidden_layers"], v["first_k_dense_replace"]
    dense = tuple(range(min(k, L)))
    return {"dense_layers": dense}, ((f"first_k_dense_replace {k}: layers 0 to {len(dense) - 1} "
                                      f"keep a dense MLP of intermediate_size.",) if dense else ())


def _write_first_k(c: ModelConfig) -> Mapping | None:
    # only the first k layers can be dense
    return ({"first_k_dense_replace": len(c.dense_layers)}
            if c.dense_layers == tuple(range(len(c.dense_layers))) else None)


def _deepseek_layers(v: Mapping, where: str):
    """DeepseekV3TopkRouter takes each group's two best scores, so a group needs two
    experts; the dense layers as _first_k_dense."""
    E, groups = v["n_routed_experts"], v["n_group"]
    if E % groups == 0 and E // groups < 2:
        raise UsageError(f"{where}: n_group {groups} leaves {E // groups} expert per group; "
                         f"transformers' router sums each group's top 2 scores, so each group "
                         f"needs at least 2 experts")
    return _first_k_dense(v)


# ---- DeepSeek (V2 and V3 share latent attention, the MoE layout and these rules) ---------
MLA_KEYS = (
    Key("q_lora_rank", ("q_lora_rank",), INT_OR_NULL, Required(1536)),
    Key("kv_lora_rank", ("kv_lora_rank",), INT, Required(512)),
    Key("qk_nope_head_dim", ("qk_nope_head_dim",), INT, Required(128)),
    Key("qk_rope_head_dim", ("qk_rope_head_dim",), INT, Required(64)),
    Key("v_head_dim", ("v_head_dim",), INT, Required(128)),
    ATTENTION_BIAS)
# aux_loss_alpha, seq_aux: training-loss settings; ep_size: expert parallelism of DeepSeek's
# code; pretraining_tp: unread. head_dim: DeepseekV2Config (a field) overwrites it with
# qk_rope_head_dim; DeepseekV3Config has no such field, so a given head_dim survives
# __post_init__ and sizes the rotary embedding (DeepseekV3RotaryEmbedding: getattr(config,
# "head_dim")): only qk_rope_head_dim runs (null: TypeError; another value: a shape error)
DEEPSEEK_FREE = ROUTER_FREE | {"aux_loss_alpha", "seq_aux", "ep_size", "pretraining_tp"}
V3_HEAD_DIM = Must("head_dim", lambda v, d: "head_dim" not in d
                   or v == d.get("qk_rope_head_dim", 64),
                   "absent or equal to qk_rope_head_dim",
                   "a rotary embedding of another size than qk_rope_head_dim (transformers' "
                   "DeepseekV3 model fails to run)")


def mla_must(cls: str) -> tuple[Must, ...]:
    """The keys latent attention and DeepSeek's MoE layout honour at some values only."""
    return (
        # the eager attention repeats K/V num_attention_heads // num_key_value_heads times;
        # latent attention's K/V already have one head per query head
        Must("num_key_value_heads", lambda v, d: v is None or v == d.get("num_attention_heads"),
             "null or equal to num_attention_heads",
             "K and V repeated over groups of heads that latent attention does not have "
             "(transformers' model fails to run)", 128),
        # q_proj (no q_lora_rank) has no bias whatever attention_bias says: the spec's
        # qkv_bias would add one
        Must("attention_bias", lambda v, d: v is not True or d.get("q_lora_rank", 1536) is not None,
             "false unless q_lora_rank is set",
             "biases on kv_a_proj_with_mqa and o_proj but not on q_proj (q_lora_rank null), "
             "which the spec's qkv_bias cannot say", False),
        # DeepSeek's own code (auto_map) reads it; transformers does not
        Must("moe_layer_freq", lambda v, d: v in (None, 1), "1",
             f"MoE in only some layers, which transformers' {cls} ignores (every layer "
             f"from first_k_dense_replace on is MoE)"))


def _fp8_blocks(v, d) -> bool:
    return v is None or (isinstance(v, dict) and v.get("quant_method") == "fp8")


def shared_experts(width: int, expert_width: int) -> dict:
    """One shared MLP of `width` (Qwen2-MoE's and Qwen3-Next's shared_expert_intermediate_size)
    as spec fields: n shared experts where it is n experts' width, else one of its own width
    (shared_d_ff); none where it is 0 (no shared expert)."""
    if not width:
        return {"num_shared_experts": 0}
    if width % expert_width:
        return {"num_shared_experts": 1, "shared_d_ff": width}
    return {"num_shared_experts": width // expert_width}


# The multi-token-prediction modules (DeepSeek-V3 §2.2): counted beside the model, in
# training, not at inference (accounting/analysis/mtp.py). DeepseekV3Config's and
# Glm4MoeConfig's num_mtp_layers (attribute_map: num_nextn_predict_layers) defaults to 1: an
# absent key means what transformers means (issue 34), one module; 0 declares none.
MTP_KEY = Key("num_nextn_predict_layers", ("mtp_layers",), NONNEG, 1, aliases=("num_mtp_layers",))

# DeepSeek-V3's routed and shared experts, its group-limited router and MTP: the keys of
# deepseek_v3 and deepseek_v32 alike (DeepseekV32Config extends DeepseekV3Config's)
# keys of DeepSeek's own code (auto_map) that transformers does not read: another value
# would mean a model transformers does not build (deepseek_v3's and deepseek_v32's rows)
V3_CODE_MUST = (
    Must("scoring_func", lambda v, d: v in (None, "sigmoid"), "sigmoid",
         "a router transformers' DeepseekV3 does not build (it always uses sigmoid)"),
    Must("topk_method", lambda v, d: v in (None, "noaux_tc"), "noaux_tc",
         "a routing transformers' DeepseekV3 does not build (it always uses the "
         "corrected, group-limited top-k)"),
    Must("quantization_config", _fp8_blocks, 'null or quant_method "fp8"',
         "a quantized checkpoint whose weights are not dense tensors of the config's "
         "shapes"))
# the rest of both rows: the fp8 checkpoint noted, the free keys, the dense layers
V3_ROW_TAIL = dict(
    noted=(ATTENTION_DROPOUT,
           Noted("quantization_config", lambda v: v is None,
                 "quantization_config fp8: the checkpoint stores most matrices in float8 "
                 "with a float32 scale per 128×128 block (weight_scale_inv); the counts are "
                 "of the model's parameters as transformers builds them (dense tensors of the "
                 "config's shapes, what 671B counts), not of the scales, and the memory tables "
                 "give bytes per dtype, not the checkpoint's mixed fp8/bf16 storage.")),
    # rope_interleave: the same rotation, another layout (DEEPSEEK_FREE: the others)
    free=DEEPSEEK_FREE | {"rope_interleave"},
    derived=(Derived(("dense_layers",), ("first_k_dense_replace",), _deepseek_layers,
                     "layers below first_k_dense_replace keep a dense MLP "
                     "(modeling_deepseek_v3.py)", _write_first_k),),
    experts_implementation="batched_mm")


V3_MOE_KEYS = (
    Key("moe_intermediate_size", ("moe_d_ff",), INT, Required(2048)),
    # DeepseekV3Config.attribute_map: num_local_experts is n_routed_experts
    Key("n_routed_experts", ("num_experts",), INT, Required(256),
        aliases=("num_local_experts",)),
    Key("num_experts_per_tok", ("experts_per_token",), INT, Required(8)),
    Key("n_shared_experts", ("num_shared_experts",), NONNEG, Required(1)),
    Key("first_k_dense_replace", (), NONNEG, Required(3)),
    Key("n_group", ("router_groups",), INT, Required(8)),
    Key("topk_group", ("router_topk_groups",), INT, Required(4)),
    Key("norm_topk_prob", ("norm_topk_prob",), BOOL, True),
    Key("routed_scaling_factor", ("routed_scaling_factor",), THETA, 2.5), MTP_KEY)


register(HFType(
    "deepseek_v3", "DeepseekV3ForCausalLM",
    keys=llama_sizes(129280, 7168, 18432, 61, 128, 4096) + V3_MOE_KEYS + MLA_KEYS
        + rope_keys(1e-6),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, qk_norm="none", mlp_bias=False, router="sigmoid",
                                router_bias=True)),
    rules="multi-head latent attention (q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa, "
          "kv_a_layernorm, kv_b_proj, o_proj); MoE layers of n_routed_experts experts and "
          "n_shared_experts shared ones (one MLP of n_shared_experts·moe_intermediate_size), a "
          "sigmoid router (mlp.gate) whose choice adds e_score_correction_bias (a persistent "
          "buffer, not a parameter) and is limited to the best topk_group of n_group groups "
          "(modeling_deepseek_v3.py)",
    names=DEEPSEEK_V3_NAMES,
    must=ROPE_MUST + mla_must("DeepseekV3") + (V3_HEAD_DIM, *V3_CODE_MUST),
    **V3_ROW_TAIL,
))


def _v32_dense_layers(v: Mapping, where: str):
    """DeepseekV32Config.__post_init__: mlp_layer_types, when null, is "dense" for the first
    min(first_k_dense_replace, L) layers and "sparse" after; DeepseekV32DecoderLayer builds
    DeepseekV32MoE where it says "sparse", DeepseekV32MLP elsewhere (modeling_deepseek_v32.py),
    so a config.json that writes the list out (save_pretrained does) is read from it."""
    given, L = v["mlp_layer_types"], v["num_hidden_layers"]
    if given is None:
        return _deepseek_layers(v, where)
    if not isinstance(given, list) or len(given) != L or any(
            t not in ("dense", "sparse") for t in given):
        raise UsageError(f"{where}: mlp_layer_types must list {L} entries (num_hidden_layers), "
                         f"each \"dense\" or \"sparse\", got {short(given)}")
    if "sparse" not in given:
        raise UsageError(f"{where}: mlp_layer_types has no sparse layer; the spec's experts "
                         f"need one (a dense DeepSeek is deepseek_v3 without experts)")
    fields, _ = _deepseek_layers(v, where)  # the group check
    dense = tuple(i for i, t in enumerate(given) if t == "dense")
    k = v["first_k_dense_replace"]
    notes = () if dense == tuple(range(min(k, L))) else (
        (f"mlp_layer_types: a dense MLP in layer(s) {', '.join(map(str, dense))}" if dense
         else "mlp_layer_types: no dense MLP layer")
        + f" (first_k_dense_replace {k} is not read where the list is given).",)
    if dense == tuple(range(min(k, L))) and dense:
        notes = (f"first_k_dense_replace {k}: layers 0 to {len(dense) - 1} keep a dense MLP of "
                 f"intermediate_size.",)
    return {"dense_layers": dense}, notes


def _write_v32_dense(c: ModelConfig) -> Mapping:
    dense = set(c.dense_layers)
    keys = _write_first_k(c) or {}
    return {**keys, "mlp_layer_types": ["dense" if i in dense else "sparse"
                                        for i in range(c.num_layers)]}


# DeepSeek-V3.2 (deepseek_v32): V3 with the sparse-attention indexer in every layer; the
# indexer's modules as transformers names them (DeepseekV32Indexer)
DEEPSEEK_V32_NAMES = ModuleNames(DEEPSEEK_V3_NAMES.blocks, MappingProxyType({
    **DEEPSEEK_V3_NAMES.block, **{f"attn.indexer.{n}": f"self_attn.indexer.{n}"
                                  for n in ("wq_b", "wk", "k_norm", "weights_proj")},
    "attn.indexer": "self_attn.indexer"}),
    DEEPSEEK_V3_NAMES.top)

register(HFType(
    "deepseek_v32", "DeepseekV32ForCausalLM",
    keys=llama_sizes(129280, 7168, 18432, 61, 128, 4096) + V3_MOE_KEYS + (
        # DeepseekV32Indexer (modeling_deepseek_v32.py), in every layer
        Key("index_n_heads", ("index_heads",), INT, Required(64)),
        Key("index_head_dim", ("index_head_dim",), INT, Required(128)),
        Key("index_topk", ("index_topk",), INT, Required(2048)),
        # DeepseekV32Config.__post_init__ writes it from first_k_dense_replace when null, and
        # save_pretrained writes that list out; DeepseekV32DecoderLayer reads it per layer
        Key("mlp_layer_types", (), LIST, None)) + MLA_KEYS
        + rope_keys(1e-6),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, qk_norm="none", mlp_bias=False, router="sigmoid",
                                router_bias=True)),
    rules="DeepSeek-V3's layers with DeepSeek Sparse Attention: in every layer a lightning "
          "indexer (self_attn.indexer: wq_b on the query latent, wk and a LayerNorm for one "
          "key per token, weights_proj for per-head weights; ReLU scores over every key, "
          "summed over index_n_heads, the causal top index_topk kept; under torch.no_grad) "
          "whose keys are the only ones the attention attends; "
          "multi-head latent attention (q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa, "
          "kv_a_layernorm, kv_b_proj, o_proj); MoE layers of n_routed_experts experts and "
          "n_shared_experts shared ones (one MLP of n_shared_experts·moe_intermediate_size), a "
          "sigmoid router (mlp.gate) whose choice adds e_score_correction_bias (a persistent "
          "buffer, not a parameter) and is limited to the best topk_group of n_group groups "
          "(modeling_deepseek_v32.py)",
    names=DEEPSEEK_V32_NAMES,
    must=ROPE_MUST + mla_must("DeepseekV32") + (
        *V3_CODE_MUST,
        # DeepseekV32Config.__post_init__ writes these from first_k_dense_replace: other
        # values would be another layout
        Must("layer_types", lambda v, d: v is None or (isinstance(v, list) and all(
            x == "indexed_attention" for x in v)), 'null or all "indexed_attention"',
             "layers without the indexer")),
    **{**V3_ROW_TAIL, "derived": (
        Derived(("dense_layers",), ("first_k_dense_replace", "mlp_layer_types"), _v32_dense_layers,
                "dense MLP where mlp_layer_types says dense, else below first_k_dense_replace "
                "(configuration_deepseek_v32.py, DeepseekV32DecoderLayer)", _write_v32_dense),)},
))


# DeepSeek-V2 (V2 236B, V2-Lite 16B): V3's latent attention and MoE layout (MLA_KEYS,
# mla_must, _first_k_dense), with DeepseekV2TopkRouter: softmax over the experts, then top-k
# ("greedy") or top-k within the topk_group groups of n_group whose best score is highest
# ("group_limited_greedy": the max of each group, where V3 sums each group's two best); no
# correction bias; the k weights never renormalised, always × routed_scaling_factor.
_V2_TOPK = MappingProxyType({"greedy": "top-k of all experts",
                             "group_limited_greedy": "top-k within the best groups"})


def _deepseek_v2_routing(v: Mapping, where: str):
    """The dense layers (_first_k_dense) and, for group_limited_greedy only, the groups:
    DeepseekV2TopkRouter reads n_group and topk_group in that branch alone."""
    fields, notes = _first_k_dense(v)
    groups, top = v["n_group"], v["topk_group"]
    if v["topk_method"] == "group_limited_greedy":
        if groups is None or top is None:
            raise UsageError(f"{where}: topk_method group_limited_greedy needs n_group and "
                             f"topk_group (transformers' DeepseekV2TopkRouter fails without them)")
        fields.update(router_groups=groups, router_topk_groups=top)
    elif (groups or 1) > 1:
        notes += (f"topk_method greedy: n_group {groups} and topk_group {top} are not read "
                  f"(DeepseekV2TopkRouter limits groups only in group_limited_greedy).",)
    return fields, notes


def _write_v2_routing(c: ModelConfig) -> Mapping | None:
    keys = _write_first_k(c)
    if keys is None:
        return None
    if c.router_groups == 1:
        return {**keys, "topk_method": "greedy"}
    return {**keys, "topk_method": "group_limited_greedy", "n_group": c.router_groups,
            "topk_group": c.router_topk_groups}


register(HFType(
    "deepseek_v2", "DeepseekV2ForCausalLM",
    keys=llama_sizes(102400, 4096, 11008, 32, 32, 2048) + (
        Key("moe_intermediate_size", ("moe_d_ff",), INT, Required(1407)),
        # DeepseekV2Config.attribute_map: num_experts is n_routed_experts
        Key("n_routed_experts", ("num_experts",), INT, Required(64), aliases=("num_experts",)),
        Key("num_experts_per_tok", ("experts_per_token",), INT, Required(None)),
        Key("n_shared_experts", ("num_shared_experts",), NONNEG, Required(2)),
        Key("first_k_dense_replace", (), NONNEG, 0),
        Key("topk_method", (), CHOICE, "greedy", _V2_TOPK),
        Key("n_group", (), INT_OR_NULL, None),
        Key("topk_group", (), INT_OR_NULL, None),
        Key("routed_scaling_factor", ("routed_scaling_factor",), THETA, 1.0)) + MLA_KEYS
        + rope_keys(1e-6),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, qk_norm="none", mlp_bias=False, router="softmax",
                                router_bias=False, norm_topk_prob=False,
                                router_group_score="max")),
    rules="multi-head latent attention as deepseek_v3 (q_proj where q_lora_rank is null); MoE "
          "layers of n_routed_experts experts and one shared MLP of "
          "n_shared_experts·moe_intermediate_size; a router (mlp.gate) with a softmax over the "
          "experts, top-k, or top-k within the topk_group groups whose best score is highest "
          "(group_limited_greedy), the k weights never renormalised, × routed_scaling_factor "
          "(DeepseekV2TopkRouter, modeling_deepseek_v2.py)",
    names=DEEPSEEK_V3_NAMES,
    must=ROPE_MUST + mla_must("DeepseekV2") + (
        # DeepseekV2Config has the key but DeepseekV2TopkRouter never reads it (DeepSeek's own
        # MoEGate renormalises when it is true): counting what transformers runs would not be
        # the model the file means
        Must("norm_topk_prob", lambda v, d: v in (None, False), "false",
             "renormalised top-k weights, which transformers' DeepseekV2TopkRouter never "
             "computes (DeepSeek's own code does)", False),
        Must("scoring_func", lambda v, d: v in (None, "softmax"), "softmax",
             "a router transformers' DeepseekV2 does not build (it always uses softmax)"),
        # DeepseekV2MLP's biases: on the dense layers and the shared experts, never on the
        # routed experts, which the spec's mlp_bias cannot say
        Must("mlp_bias", lambda v, d: v is False, "false",
             "biases on the dense and shared-expert MLPs but not on the routed experts", False)),
    noted=(ATTENTION_DROPOUT,),
    free=DEEPSEEK_FREE | {"head_dim"},
    derived=(Derived(("dense_layers", "router_groups", "router_topk_groups"),
                     ("num_hidden_layers", "first_k_dense_replace", "topk_method", "n_group",
                      "topk_group"), _deepseek_v2_routing,
                     "layers below first_k_dense_replace keep a dense MLP; n_group and "
                     "topk_group limit the choice only with topk_method group_limited_greedy "
                     "(modeling_deepseek_v2.py)", _write_v2_routing),),
    experts_implementation="batched_mm",
))
