"""Gemma 4 rows of the Hugging Face table (issue 31): gemma4_text (Gemma4ForCausalLM) and the
vision-language gemma4 wrapper (its language model counted), registered on import
(hf_config.py imports this module). Defaults and rules from transformers 5.23.0's
models/gemma4/configuration_gemma4.py and modeling_gemma4.py:

- Gemma4TextConfig.__post_init__: layer_types default 5 sliding : 1 full, the last layer
  forced to full_attention; global_head_dim (default 512) is every full layer's head_dim,
  and num_global_key_value_heads its K/V heads where attention_k_eq_v (per_layer_config).
- Gemma4TextAttention: q_proj, k_proj, v_proj (none on a full layer with attention_k_eq_v:
  value_states is key_states), o_proj; q_norm and k_norm (head_dim gains) and v_norm
  (Gemma4RMSNorm(with_scale=False): no weight); scaling 1.0 (one multiply per score, as the
  tool's 1/√d_k); RoPE per layer kind (Gemma4TextRotaryEmbedding; "proportional" RoPE
  returns cos/sin of the whole head_dim, zero frequencies past partial_rotary_factor: the
  whole head is rotated, as the spec's RoPE counts it).
- Gemma4TextDecoderLayer: four sandwich RMSNorms with plain gains (weight, not 1 + w), with
  enable_moe_block a Gemma4TextRouter (norm without weight, scale (d), proj (E×d),
  per_expert_scale (E)) and Gemma4TextExperts (gate_up_proj, down_proj) beside the dense
  MLP, three more norms; the block's output times layer_scalar (a buffer).
- Gemma 4 E2B/E4B (issue 41): per-layer embeddings (hidden_size_per_layer_input > 0:
  Gemma4TextModel's embed_tokens_per_layer, per_layer_model_projection and
  per_layer_projection_norm; each layer's per_layer_input_gate, per_layer_projection and
  post_per_layer_input_norm) and KV sharing (num_kv_shared_layers: the last layers hold
  no k_proj, v_proj, k_norm, v_norm and read the K and V of the last earlier layer of their
  kind, Gemma4TextConfig.kv_sharing_modes; with use_double_wide_mlp their MLP is
  2·intermediate_size wide, Gemma4TextMLP).
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from accounting.runtime.errors import UsageError
from accounting.architecture.hf_schema import (
    ATTENTION_BIAS, ATTENTION_DROPOUT, BOOL, CHOICE, EPS, GATED_ACTS, INT, INT_OR_NULL, LIST,
    NONNEG, NUMBER_OR_NULL, ROPE_TYPES, WRAPPERS, Derived, HFType, Key, ModuleNames, Must,
    Required, fused_gelu, head_dim, kv_heads, llama_sizes, register, rope_ok, short)
from accounting.architecture.hf_types_dense import layers_of
from accounting.architecture.hf_types_gemma import GEMMA_NAMES, NORMALIZER, unwrapper

_KINDS = {"full_attention": "global", "sliding_attention": "local"}
_ROPE_TYPES = ROPE_TYPES + ("proportional",)


def _layers(v: Mapping, where: str):
    """Gemma4TextConfig.__post_init__: layer_types as given, else layer i slides unless
    (i + 1) % 6 == 0; the last layer full attention whatever was given (transformers
    warns and forces it)."""
    L, window, given = v["num_hidden_layers"], v["sliding_window"], v["layer_types"]
    notes = []
    if given is None:
        types = ["local" if (i + 1) % 6 else "global" for i in range(L)]
    else:
        if not isinstance(given, list) or len(given) != L or any(t not in _KINDS for t in given):
            raise UsageError(f"{where}: layer_types must list {L} entries (num_hidden_layers), "
                             f"each \"full_attention\" or \"sliding_attention\", got {short(given)}")
        types = [_KINDS[t] for t in given]
    if types[-1] != "global":
        types[-1] = "global"
        notes.append("the last layer is full attention whatever layer_types says "
                     "(Gemma4TextConfig.__post_init__ forces it).")
    n = types.count("local")
    fields = layers_of(types, window, where)
    if n:
        notes.append(f"sliding window {window:,} on {n} of {L} layers.")
    return fields, tuple(notes)


def _global_shape(v: Mapping, where: str):
    """per_layer_config: a full layer's head_dim is global_head_dim; its K/V heads are
    num_global_key_value_heads where attention_k_eq_v and it is given; K = V there."""
    fields: dict = {}
    if v["global_head_dim"] != v["head_dim"]:
        fields["global_head_dim"] = v["global_head_dim"]
    kv = v["num_global_key_value_heads"]
    if v["attention_k_eq_v"]:
        fields["global_k_eq_v"] = True
        if kv is not None:
            fields["global_kv_heads"] = kv
    if fields.get("global_kv_heads", v["num_key_value_heads"]) > v["num_attention_heads"] or \
            v["num_attention_heads"] % fields.get("global_kv_heads", v["num_key_value_heads"]):
        raise UsageError(f"{where}: num_global_key_value_heads {kv} must divide "
                         f"num_attention_heads {v['num_attention_heads']}")
    return fields, ()


def _experts(v: Mapping, where: str):
    """enable_moe_block: every layer runs Gemma4TextRouter and Gemma4TextExperts beside its
    MLP (num_experts, top_k_experts, moe_intermediate_size all needed: transformers
    builds torch.empty(None, ...) otherwise)."""
    if not v["enable_moe_block"]:
        return {}, ()
    E, k, f = v["num_experts"], v["top_k_experts"], v["moe_intermediate_size"]
    if None in (E, k, f):
        raise UsageError(f"{where}: enable_moe_block needs num_experts, top_k_experts and "
                         f"moe_intermediate_size (transformers cannot build the experts "
                         f"without them)")
    if k > E:
        raise UsageError(f"{where}: top_k_experts {k} exceeds num_experts {E}")
    return {"num_experts": E, "experts_per_token": k, "moe_d_ff": f,
            "mlp_beside_moe": True}, ()


def _layers_keys(c) -> Mapping | None:
    """The keys that give the spec's layer kinds (flags on a config.json): layer_types, and
    the window where a layer slides; none where the last layer slides (transformers forces
    it to full attention)."""
    local = [k.local for k in c.layer_kinds]
    if local[-1] or any(k.mixer != "attention" or k.chunked for k in c.layer_kinds):
        return None
    out = {"layer_types": ["sliding_attention" if x else "full_attention" for x in local]}
    return {**out, "sliding_window": c.sliding_window} if any(local) else out


def _global_keys(c) -> Mapping | None:
    """Gemma 4's keys for a global head shape: its own K/V heads only with K = V."""
    if c.global_kv_heads is not None and not c.global_k_eq_v:
        return None
    return {"global_head_dim": c.global_d_k, "attention_k_eq_v": c.global_k_eq_v,
            "num_global_key_value_heads": c.global_kv_heads}


def _experts_keys(c) -> Mapping | None:
    """enable_moe_block and its sizes: experts only beside the MLP, in every layer."""
    if c.num_experts is None:
        return {"enable_moe_block": False}
    if not c.mlp_beside_moe or not all(k.moe for k in c.layer_kinds):
        return None
    return {"enable_moe_block": True, "num_experts": c.num_experts,
            "top_k_experts": c.experts_per_token, "moe_intermediate_size": c.expert_d_ff}


def _small(v: Mapping, where: str):
    """Gemma 4 E2B/E4B: per-layer embeddings where hidden_size_per_layer_input > 0
    (transformers' default 256: a file that omits it gets them), with
    vocab_size_per_layer_input rows (default 262,144, whatever vocab_size is); KV sharing of
    the last num_kv_shared_layers layers; use_double_wide_mlp widens their MLP only."""
    fields: dict = {}
    notes = []
    ple, n = v["hidden_size_per_layer_input"], v["num_kv_shared_layers"]
    if ple:
        fields.update(per_layer_input=ple, per_layer_vocab=v["vocab_size_per_layer_input"])
        notes.append(f"per-layer embeddings: {v['vocab_size_per_layer_input']:,} rows of "
                     f"{v['num_hidden_layers']} × {ple} (hidden_size_per_layer_input).")
    if n >= v["num_hidden_layers"]:
        raise UsageError(f"{where}: num_kv_shared_layers {n} must be below num_hidden_layers "
                         f"{v['num_hidden_layers']} (a layer must compute K and V first)")
    if n:
        fields["kv_shared_layers"] = n
        fields["double_wide_mlp"] = v["use_double_wide_mlp"]
        notes.append(f"the last {n} layers reuse earlier layers' K and V (no K/V projections, "
                     f"no cache of their own)" + (", their MLP 2·intermediate_size wide."
                                                  if v["use_double_wide_mlp"] else "."))
    return fields, tuple(notes)


def _small_keys(c) -> Mapping | None:
    """The keys that give per-layer embeddings and KV sharing (flags on a config.json)."""
    return {"hidden_size_per_layer_input": c.per_layer_input or 0,
            "vocab_size_per_layer_input": c.ple_vocab,
            "num_kv_shared_layers": c.kv_shared_layers,
            "use_double_wide_mlp": c.double_wide_mlp}


def _rope_parameters_ok(value, data) -> bool:
    """One RoPE setting per layer kind (or one for both): a type that changes no count;
    partial_rotary_factor only with "proportional" (or "default", whose Gemma 4 form reads
    the whole head_dim), which return cos/sin of the whole head."""
    def one(p) -> bool:
        if not isinstance(p, dict):
            return p is None
        kind = p.get("rope_type", "default")
        if kind in ("proportional", "default"):
            return True
        return rope_ok(p, data, _ROPE_TYPES)
    if isinstance(value, dict) and set(value) and set(value) <= set(_KINDS):
        return all(one(p) for p in value.values())
    return one(value)


GEMMA4_NAMES = ModuleNames(GEMMA_NAMES.blocks, MappingProxyType({
    **GEMMA_NAMES.block,
    "post_ffn_norm_1": "post_feedforward_layernorm_1",
    "pre_ffn_norm_2": "pre_feedforward_layernorm_2",
    "post_ffn_norm_2": "post_feedforward_layernorm_2",
    "moe": "router", "moe.router": "router.proj", "moe.experts": "experts",
    **{n: n for n in ("per_layer_input_gate", "per_layer_projection",
                      "post_per_layer_input_norm")}}),
    MappingProxyType({**GEMMA_NAMES.top, "per_layer_embeddings": "model.embed_tokens_per_layer",
                      "per_layer_model_projection": "model.per_layer_model_projection",
                      "per_layer_projection_norm": "model.per_layer_projection_norm"}))

register(HFType(
    "gemma4_text", "Gemma4ForCausalLM",
    keys=llama_sizes(262144, 2304, 9216, 30, 8, 131072) + (
        kv_heads(Required(4), INT), head_dim(Required(256), INT), ATTENTION_BIAS,
        Key("hidden_activation", ("mlp",), CHOICE, "gelu_pytorch_tanh", GATED_ACTS),
        Key("rms_norm_eps", ("norm_eps",), EPS, 1e-6),
        Key("tie_word_embeddings", ("tie_embeddings",), BOOL, True),
        Key("final_logit_softcapping", ("final_softcap",), NUMBER_OR_NULL, None),
        Key("sliding_window", (), INT, 512),
        Key("layer_types", (), LIST, None),
        Key("global_head_dim", (), INT, 512),
        Key("num_global_key_value_heads", (), INT_OR_NULL, None),
        Key("attention_k_eq_v", (), BOOL, False),
        Key("enable_moe_block", (), BOOL, False),
        Key("num_experts", (), INT_OR_NULL, None),
        Key("top_k_experts", (), INT_OR_NULL, None),
        Key("moe_intermediate_size", (), INT_OR_NULL, None),
        Key("hidden_size_per_layer_input", (), NONNEG, 256),
        Key("vocab_size_per_layer_input", (), INT, 262144),
        Key("num_kv_shared_layers", (), NONNEG, 0),
        Key("use_double_wide_mlp", (), BOOL, False)),
    fixed=MappingProxyType(dict(norm="rmsnorm", norm_placement="sandwich", positions="rope",
                                norm_offset=False, mlp_bias=False, qk_norm="head",
                                v_norm=True, layer_scalar=True)),
    rules="four sandwich RMSNorms per block with plain gains (Gemma4RMSNorm: weight, not "
          "1 + w), the embeddings scaled by √hidden_size, per-head RMSNorm of Q and K and a "
          "weightless one of V, full-attention layers with global_head_dim and (with "
          "attention_k_eq_v) num_global_key_value_heads and no v_proj, V being K; with "
          "enable_moe_block the experts beside the MLP (router: weightless norm, scale, "
          "proj, per_expert_scale); each block's output times layer_scalar; logits soft-capped "
          "if final_logit_softcapping is set (modeling_gemma4.py)",
    names=GEMMA4_NAMES,
    must=(Must("rope_parameters", _rope_parameters_ok,
               f"null or rope_type {', '.join(_ROPE_TYPES)} per layer kind",
               "a RoPE variant the tool does not know to leave every count unchanged"),
          Must("use_bidirectional_attention", lambda v, d: v in (None, "vision"),
               "null or \"vision\" (text tokens causal)",
               "attention without the causal mask for every token (an encoder)"),
),
    noted=(ATTENTION_DROPOUT,),
    free=frozenset({"cache_implementation"}),  # generate()'s cache choice
    derived=(Derived(("sliding_window", "layer_types"),
                     ("num_hidden_layers", "sliding_window", "layer_types"), _layers,
                     "local layers: those of layer_types, else all but every 6th; the last "
                     "layer full attention (Gemma4TextConfig.__post_init__)", _layers_keys),
             Derived(("global_head_dim", "global_kv_heads", "global_k_eq_v"),
                     ("global_head_dim", "num_global_key_value_heads", "attention_k_eq_v",
                      "head_dim", "num_key_value_heads", "num_attention_heads"),
                     _global_shape,
                     "full-attention layers: head_dim global_head_dim; with attention_k_eq_v, "
                     "num_global_key_value_heads K/V heads and no v_proj "
                     "(Gemma4TextConfig.per_layer_config, Gemma4TextAttention)", _global_keys),
             Derived(("num_experts", "experts_per_token", "moe_d_ff", "mlp_beside_moe"),
                     ("enable_moe_block", "num_experts", "top_k_experts",
                      "moe_intermediate_size"), _experts,
                     "with enable_moe_block, num_experts experts (top_k_experts, "
                     "moe_intermediate_size wide) beside the MLP in every layer "
                     "(Gemma4TextDecoderLayer)", _experts_keys),
             Derived(("per_layer_input", "per_layer_vocab", "kv_shared_layers",
                      "double_wide_mlp"),
                     ("hidden_size_per_layer_input", "vocab_size_per_layer_input",
                      "num_kv_shared_layers", "use_double_wide_mlp", "num_hidden_layers"),
                     _small,
                     "hidden_size_per_layer_input > 0: per-layer embeddings of that width "
                     "(vocab_size_per_layer_input rows); the last num_kv_shared_layers layers "
                     "reuse K and V, their MLP 2·intermediate_size wide with "
                     "use_double_wide_mlp (Gemma4TextModel, Gemma4TextConfig.kv_sharing_modes, "
                     "Gemma4TextMLP)", _small_keys),
             NORMALIZER, fused_gelu("hidden_activation")),
    experts_implementation="batched_mm",
))

# Gemma4Config (configuration_gemma4.py): text_config, vision_config, audio_config and the
# multimodal token ids; AutoModelForCausalLM would build Gemma4ForConditionalGeneration
_GEMMA4_OUTER = frozenset({
    "text_config", "vision_config", "audio_config", "boi_token_id", "eoi_token_id",
    "image_token_id", "video_token_id", "boa_token_id", "eoa_token_id", "eoa_token_index",
    "audio_token_id", "vision_soft_tokens_per_image", "initializer_range",
    "tie_word_embeddings"})

WRAPPERS["gemma4"] = unwrapper(
    "gemma4", "gemma4_text", _GEMMA4_OUTER, "Gemma4ForCausalLM",
    "the vision tower and its embedder (vision_config; an audio_config's audio tower is not "
    "counted)")
