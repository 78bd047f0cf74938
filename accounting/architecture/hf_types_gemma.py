"""Gemma 2, Gemma 3 (text) and Granite rows of the Hugging Face table (hf_schema.py's rows),
registered on import (hf_config.py imports this module); issue 24. Defaults and rules from
transformers 5.23.0's models/{gemma2,gemma3,granite}/configuration_*.py and modeling_*.py.
"""
from __future__ import annotations

import math
from types import MappingProxyType
from typing import Mapping

from accounting.architecture.config import ModelConfig
from accounting.architecture.hf_schema import (
    TYPES, WRAPPERS, carry_dtype, check_wrapper_keys,
    ATTENTION_BIAS, ATTENTION_DROPOUT, BOOL, CHOICE, EPS, GATED_ACTS, INT, INT_OR_ABSENT,
    INT_OR_NULL, LIST,
    LLAMA_FAMILY,
    LLAMA_NAMES, NUMBER_OR_NULL, ROPE_MUST, ROPE_TYPES, THETA, Derived, HFType, Key, ModuleNames,
    Must, Noted, Required, fused_gelu, head_dim, kv_heads, llama_sizes, real, register, rope_keys, rope_ok,
    short)
from accounting.architecture.hf_types_dense import layers_of
from accounting.runtime.errors import UsageError

# Gemma2DecoderLayer / Gemma3DecoderLayer: four RMSNorms per block, named after where they sit;
# the ledger's ln1/ln2 are the norms on each sublayer's input, post_attn_norm/post_ffn_norm
# those on its output (spec: norm_placement "sandwich").
GEMMA_NAMES = ModuleNames(LLAMA_NAMES.blocks, MappingProxyType({
    **LLAMA_NAMES.block, "ln1": "input_layernorm", "post_attn_norm": "post_attention_layernorm",
    "ln2": "pre_feedforward_layernorm", "post_ffn_norm": "post_feedforward_layernorm"}),
    LLAMA_NAMES.top)

_KINDS = {"full_attention": "global", "sliding_attention": "local"}


def _gemma_windows(pattern_key: str | None, pattern_default: int):
    """Gemma2Config/Gemma3TextConfig.__post_init__: without layer_types, layer i slides iff
    (i + 1) % pattern != 0 (Gemma 2: pattern 2, so layers 0, 2, … slide; Gemma 3:
    sliding_window_pattern, 6 by default: five local layers, then one global)."""
    def rule(v: Mapping, where: str):
        L, window, given = v["num_hidden_layers"], v["sliding_window"], v["layer_types"]
        pattern = v[pattern_key] if pattern_key else pattern_default
        if given is None:
            types = ["local" if (i + 1) % pattern else "global" for i in range(L)]
        else:
            if not isinstance(given, list) or len(given) != L or any(t not in _KINDS for t in given):
                raise UsageError(f"{where}: layer_types must list {L} entries (num_hidden_layers), "
                                 f"each \"full_attention\" or \"sliding_attention\", got "
                                 f"{short(given)}")
            types = [_KINDS[t] for t in given]
        n = types.count("local")
        how = "layer_types" if given is not None else (
            f"layer i slides unless (i + 1) is a multiple of {pattern}, as transformers' config "
            f"builds layer_types")
        return layers_of(types, window, where), \
            ((f"sliding window {window:,} on {n} of {L} layers ({how}).",) if n else ())
    return rule


def _gemma_windows_keys(c: ModelConfig) -> Mapping:
    local = [k.local for k in c.layer_kinds]
    return {"sliding_window": c.sliding_window if any(local) else None,
            "layer_types": ["sliding_attention" if x else "full_attention" for x in local]}


def _normalizer(v: Mapping, where: str):
    """Gemma2Model/Gemma3TextModel: the embeddings times hidden_size**0.5 (the normalizer,
    Gemma2TextScaledWordEmbedding's embed_scale)."""
    return {"embedding_multiplier": math.sqrt(v["hidden_size"])}, ()


NORMALIZER = Derived(("embedding_multiplier",), ("hidden_size",), _normalizer,
                      "the embeddings multiplied by √hidden_size (Gemma2TextScaledWordEmbedding, "
                      "Gemma3TextScaledWordEmbedding)",
                      lambda c: {} if c.embedding_multiplier == math.sqrt(c.d_model) else None)

GEMMA_FIXED = MappingProxyType(dict(LLAMA_FAMILY, norm_placement="sandwich", norm_offset=True,
                                    mlp_bias=False))
_GEMMA_RULES = ("four RMSNorms per block, on each sublayer's input and output inside the "
                "residual (input_layernorm, post_attention_layernorm, pre_feedforward_layernorm, "
                "post_feedforward_layernorm), every RMSNorm's gain applied as (1 + w) "
                "({m}RMSNorm), the embeddings scaled by √hidden_size, a gated MLP of "
                "hidden_activation, a tied head by default")


def _query_scalar(model: str) -> Noted:
    return Noted("query_pre_attn_scalar", lambda v: False,
                 "{settings}: " + model + " scales the scores by query_pre_attn_scalar**-0.5 "
                 "instead of 1/√head_dim (one multiply per score either way: the same count; "
                 "the tool's model divides by √d_k)", (lambda v: real(v) and v > 0, "a positive number"))


_HIDDEN_ACT = Noted("hidden_act", lambda v: False,
                    "{settings}: unread by transformers' Gemma MLP, which runs hidden_activation")
_BIDIRECTIONAL = Must("use_bidirectional_attention", lambda v, d: not v, "null or false",
                      "attention without the causal mask (an encoder)")
_GEMMA_FREE = frozenset({"cache_implementation"})  # generate()'s cache choice: no count


def _gemma_keys(sizes, kv_default, softcap_default):
    return sizes + (
        kv_heads(Required(kv_default), INT),  # typed int: null refused (StrictDataclass)
        head_dim(Required(256), INT),  # the real models' 256, whatever hidden_size/heads is
        ATTENTION_BIAS,
        Key("hidden_activation", ("mlp",), CHOICE, "gelu_pytorch_tanh", GATED_ACTS),
        Key("rms_norm_eps", ("norm_eps",), EPS, 1e-6),
        Key("tie_word_embeddings", ("tie_embeddings",), BOOL, True),
        Key("attn_logit_softcapping", ("attn_softcap",), NUMBER_OR_NULL, softcap_default[0]),
        Key("final_logit_softcapping", ("final_softcap",), NUMBER_OR_NULL, softcap_default[1]),
        Key("sliding_window", (), INT_OR_NULL, 4096),
        Key("layer_types", (), LIST, None))


register(HFType(
    "gemma2", "Gemma2ForCausalLM",
    keys=_gemma_keys(llama_sizes(256000, 2304, 9216, 26, 8, 8192), 4, (50.0, 30.0)) + (
        Key("rope_theta", ("rope_theta",), THETA, 10000.0,
            aliases=("rope_parameters.rope_theta", "rope_scaling.rope_theta")),),
    fixed=MappingProxyType(dict(GEMMA_FIXED, qk_norm="none")),
    rules=_GEMMA_RULES.format(m="Gemma2") + "; the scores soft-capped, attn_logit_softcapping·"
          "tanh(scores/attn_logit_softcapping), and the logits likewise by "
          "final_logit_softcapping (modeling_gemma2.py: eager_attention_forward, "
          "Gemma2ForCausalLM)",
    names=GEMMA_NAMES, must=ROPE_MUST + (_BIDIRECTIONAL,),
    noted=(ATTENTION_DROPOUT, _query_scalar("Gemma2Attention"), _HIDDEN_ACT), free=_GEMMA_FREE,
    divides=(("num_attention_heads", "hidden_size"),),  # Gemma2Config.validate_architecture
    derived=(Derived(("sliding_window", "layer_types"), ("num_hidden_layers", "sliding_window",
                                                         "layer_types"),
                     _gemma_windows(None, 2),
                     "local layers: those of layer_types, else every other layer from layer 0 "
                     "(configuration_gemma2.py)", _gemma_windows_keys), NORMALIZER,
             fused_gelu("hidden_activation")),
))


def _nested_rope_ok(value, data) -> bool:
    """Gemma3TextConfig.rope_parameters: one RoPE setting per layer kind
    ({"full_attention": {..}, "sliding_attention": {..}}), or the flat form; each a RoPE
    variant that changes no count."""
    if isinstance(value, dict) and set(value) and set(value) <= set(_KINDS):
        return all(rope_ok(v, data) for v in value.values())
    return rope_ok(value, data)


register(HFType(
    "gemma3_text", "Gemma3ForCausalLM",
    keys=_gemma_keys(llama_sizes(262208, 2304, 9216, 26, 8, 131072), 4, (None, None)) + (
        # the global layers' RoPE base; transformers 5 writes it inside rope_parameters
        # (full_attention.rope_theta), which the tool's RoPE does not read: no count
        Key("rope_theta", ("rope_theta",), THETA, 1_000_000.0),
        Key("sliding_window_pattern", (), INT, 6, aliases=("_sliding_window_pattern",))),
    fixed=MappingProxyType(dict(GEMMA_FIXED, qk_norm="head")),
    rules=_GEMMA_RULES.format(m="Gemma3") + "; RMSNorm of each head's Q and K with (1 + w) "
          "gains (q_norm, k_norm); no attention soft-cap unless attn_logit_softcapping is set; "
          "the logits soft-capped only if final_logit_softcapping is set (modeling_gemma3.py)",
    names=GEMMA_NAMES,
    must=(Must("rope_scaling", rope_ok, f"null or rope_type {', '.join(ROPE_TYPES)}",
               "a RoPE variant the tool does not know to leave every count unchanged"),
          Must("rope_parameters", _nested_rope_ok, f"null or rope_type {', '.join(ROPE_TYPES)} "
               "(per layer kind, or one)", "a RoPE variant the tool does not know to leave "
               "every count unchanged"),
          _BIDIRECTIONAL),
    noted=(ATTENTION_DROPOUT, _query_scalar("Gemma3Attention"), _HIDDEN_ACT,
           Noted("rope_local_base_freq", lambda v: False,
                 "{settings}: the sliding layers' RoPE base (frequencies only: no count)",
                 (lambda v: real(v) and v > 0, "a positive number"))),
    free=_GEMMA_FREE,
    divides=(("num_attention_heads", "hidden_size"),),  # Gemma3TextConfig.validate_architecture
    derived=(Derived(("sliding_window", "layer_types"),
                     ("num_hidden_layers", "sliding_window", "layer_types", "sliding_window_pattern"),
                     _gemma_windows("sliding_window_pattern", 6),
                     "local layers: those of layer_types, else all but every "
                     "sliding_window_pattern-th (configuration_gemma3.py)", _gemma_windows_keys),
             NORMALIZER, fused_gelu("hidden_activation")),
))


def _logits_scaling(v: Mapping, where: str):
    """GraniteForCausalLM: logits / logits_scaling, counted as the spec's logit_scale (a
    multiply by 1/logits_scaling: one op per logit either way)."""
    return {"logit_scale": 1 / v["logits_scaling"]}, ()


register(HFType(
    "granite", "GraniteForCausalLM",
    keys=llama_sizes(32000, 4096, 11008, 32, 32, 2048) + (
        kv_heads(),
        head_dim(None, INT_OR_ABSENT),  # GraniteAttention: getattr(config, "head_dim", hidden_size // heads)
        ATTENTION_BIAS,
        Key("mlp_bias", ("mlp_bias",), BOOL, False),
        # GraniteModel multiplies the embeddings, GraniteDecoderLayer each sublayer's output,
        # always (1.0 included): the ops run whatever the value
        Key("embedding_multiplier", ("embedding_multiplier",), THETA, 1.0),
        Key("residual_multiplier", ("residual_multiplier",), THETA, 1.0),
        Key("logits_scaling", (), THETA, 1.0)) + rope_keys(1e-6),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, qk_norm="none")),
    rules="the llama architecture with the embeddings times embedding_multiplier, each "
          "sublayer's output times residual_multiplier before its residual add, and the logits "
          "divided by logits_scaling (modeling_granite.py: GraniteModel, GraniteDecoderLayer, "
          "GraniteForCausalLM)",
    names=LLAMA_NAMES, must=ROPE_MUST,
    noted=(ATTENTION_DROPOUT,
           Noted("attention_multiplier", lambda v: False,
                 "{settings}: GraniteAttention scales the scores by attention_multiplier "
                 "instead of 1/√head_dim (one multiply per score either way: the same count; "
                 "the tool's model divides by √d_k)", (lambda v: real(v), "a number"))),
    derived=(Derived(("logit_scale",), ("logits_scaling",), _logits_scaling,
                     "logit_scale = 1/logits_scaling (GraniteForCausalLM divides the logits)",
                     lambda c: None if c.logit_scale is None else {"logits_scaling": 1 / c.logit_scale}),),
))


# ---- gemma3: Gemma 3's vision-language config (4B, 12B, 27B) --------------------------------
# Gemma3Config (configuration_gemma3.py) holds the language model's Gemma3TextConfig in
# text_config and a SigLIP vision tower's in vision_config; AutoModelForCausalLM builds
# Gemma3ForConditionalGeneration (both, and the multimodal projector). The tool counts the
# language model: text_config read as a gemma3_text config.json, and transformers' cross-check
# builds Gemma3ForCausalLM from it. The vision tower is not counted, and the output says so.
_GEMMA3_OUTER = frozenset({
    "text_config", "vision_config", "mm_tokens_per_image", "boi_token_index", "eoi_token_index",
    "image_token_index", "boi_token_id", "eoi_token_id", "image_token_id", "initializer_range",
    "tie_word_embeddings"})


def unwrapper(outer_type: str, inner_type: str, outer_keys: frozenset, causal_lm: str,
              tower: str, outer_defaults: Mapping | None = None):
    """The unwrap rule of a Gemma vision-language config.json (gemma3, gemma4): text_config
    read as an `inner_type` config.json, the other keys checked and listed as uncounted."""
    def unwrap(data: Mapping, where: str) -> tuple[dict, tuple[str, ...]]:
        return _unwrap(data, where, outer_type, inner_type, outer_keys, causal_lm, tower,
                       outer_defaults or {})
    return unwrap


def _unwrap(data: Mapping, where: str, outer_type: str, inner_type: str, outer_keys: frozenset,
            causal_lm: str, tower: str, outer_defaults: Mapping) -> tuple[dict, tuple[str, ...]]:
    check_wrapper_keys(data, where, outer_keys)
    text = data.get("text_config")
    if not isinstance(text, dict) or text.get("model_type", inner_type) != inner_type:
        raise UsageError(f"{where}: text_config must be the language model's config object "
                         f"(model_type {inner_type}), got {short(text)}; transformers would "
                         f"otherwise build its default text config")
    inner = {**text, "model_type": inner_type}
    carry_dtype(data, inner)
    outer_tie, inner_tie = data.get("tie_word_embeddings", True), inner.get("tie_word_embeddings", True)
    if outer_tie != inner_tie:
        raise UsageError(f"{where}: tie_word_embeddings {short(outer_tie)} contradicts "
                         f"text_config's {short(inner_tie)}; give one value")
    # The text config classes' defaults are the family's own sizes, and shipped configs
    # rely on them (Gemma 3 4B's text_config gives hidden_size, intermediate_size and
    # num_hidden_layers only): inside the wrapper they are what the file means.
    filled = []
    for key in TYPES[inner_type].keys:
        if isinstance(key.default, Required) and key.hf not in inner:
            inner[key.hf] = key.default.transformers_default
            filled.append(f"{key.hf} {key.default.transformers_default!r}")
    for k, v in outer_defaults.items():
        if k not in inner:
            inner[k] = v
            filled.append(f"{k} {v!r}")
    from accounting.architecture.vision import READERS  # a tower the tool reads is counted (issue 41)
    counted = ("counted beside it (parameters.vision)" if outer_type in READERS else
               "not counted")
    notes = [f"model_type {outer_type}: the language model of its vision-language config, "
             f"read from its text_config as model_type {inner_type}; {tower} are "
             f"{counted}, and transformers' cross-check builds {causal_lm} from text_config."]
    outer = sorted(k for k in data if k not in ("text_config", "model_type"))
    if outer:
        notes.append(f"{outer_type}'s own keys, none of which changes the language model's "
                     f"count: {', '.join(outer)}.")
    if filled:
        notes.append(f"text_config omits {', '.join(filled)}: the text config class's "
                     f"defaults, as transformers builds the wrapper's text_config.")
    return inner, tuple(notes)


WRAPPERS["gemma3"] = unwrapper(
    "gemma3", "gemma3_text", _GEMMA3_OUTER, "Gemma3ForCausalLM",
    "the SigLIP vision tower and the multimodal projector (vision_config, mm_tokens_per_image)")
