"""Cohere's model_types (hf_schema.py's rows): cohere (Command R, Command R+, Aya 23) and
cohere2 (Command R7B, Command A); registered on import (hf_config.py imports this module).
Defaults and rules from transformers 5.23.0's models/cohere/configuration_cohere.py
(CohereConfig), modeling_cohere.py, models/cohere2/configuration_cohere2.py (Cohere2Config)
and modeling_cohere2.py.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from accounting.architecture.hf_schema import (
    ATTENTION_BIAS, ATTENTION_DROPOUT, BOOL, CHOICE, EPS, GATED_ACTS, INT, INT_OR_NULL, LIST,
    LLAMA_NAMES, ROPE_MUST, INT_OR_ABSENT, THETA, Derived, HFType, Key, head_dim, kv_heads,
    llama_sizes, register)
from accounting.architecture.hf_types_dense import layers_of


def _qk_norm(v: Mapping, where: str):
    """CohereAttention: use_qk_norm builds q_norm = CohereLayerNorm((num_heads, head_dim))
    and k_norm = CohereLayerNorm((num_key_value_heads, head_dim)), applied to each head's
    d_k vector before the transpose: a weight per head (spec qk_norm "per_head")."""
    return {"qk_norm": "per_head" if v["use_qk_norm"] else "none"}, ()


def _qk_norm_back(c):
    """config.json's use_qk_norm for a spec's qk_norm (flags on a config.json); None where
    Cohere cannot mean it (Qwen3's one shared d_k weight, OLMo-2's full width)."""
    if c.qk_norm not in ("none", "per_head"):
        return None
    return {"use_qk_norm": c.qk_norm == "per_head"}


# the keys both types read alike; the class defaults of CohereConfig and Cohere2Config are
# Command R's sizes (256000, 8192, 22528, 40, 64, 8192)
_SHARED = llama_sizes(256000, 8192, 22528, 40, 64, 8192) + (
    kv_heads(),  # CohereConfig/Cohere2Config.__post_init__: None -> num_attention_heads
    head_dim(None, INT_OR_ABSENT),  # CohereAttention: getattr(config, "head_dim", hidden_size // heads)
    ATTENTION_BIAS,  # q/k/v_proj and o_proj alike (CohereAttention, Cohere2Attention)
    Key("hidden_act", ("mlp",), CHOICE, "silu", GATED_ACTS),  # CohereMLP: gated
    Key("layer_norm_eps", ("norm_eps",), EPS, 1e-5),
    Key("tie_word_embeddings", ("tie_embeddings",), BOOL, True),
    # CohereForCausalLM.forward: logits * self.logit_scale, always (a null would fail there)
    Key("logit_scale", ("logit_scale",), THETA, 0.0625))
_FIXED = MappingProxyType(dict(norm="layernorm_nobias", norm_placement="pre", positions="rope",
                               block="parallel_shared_norm", mlp_bias=False))

register(HFType(
    "cohere", "CohereForCausalLM",
    keys=_SHARED + (
        Key("use_qk_norm", (), BOOL, False),
        # CohereConfig.default_theta: 500,000 where config.json gives none
        Key("rope_theta", ("rope_theta",), THETA, 500000.0,
            aliases=("rope_parameters.rope_theta", "rope_scaling.rope_theta"))),
    fixed=_FIXED,
    rules="one CohereLayerNorm (mean-centred, a weight, no bias) per block feeding attention "
          "and the MLP in parallel, x + attn(ln(x)) + mlp(ln(x)) (CohereDecoderLayer); a gated "
          "MLP without biases (CohereMLP); RoPE on interleaved pairs (rotate_half: x[::2], "
          "x[1::2]; the same count); logits times logit_scale (CohereForCausalLM; "
          "modeling_cohere.py)",
    names=LLAMA_NAMES, must=ROPE_MUST, noted=(ATTENTION_DROPOUT,),
    # model_max_length: a tokenizer-side length some Cohere config.json files carry; no
    # Cohere class reads it
    free=frozenset({"model_max_length"}),
    derived=(Derived(("qk_norm",), ("use_qk_norm",), _qk_norm,
                     "use_qk_norm: a CohereLayerNorm over each head's d_k with a weight per head, "
                     "shapes (num_heads, head_dim) and (num_key_value_heads, head_dim), before "
                     "RoPE (CohereAttention)", _qk_norm_back),),
))


# ---- cohere2 (CohereLabs/c4ai-command-r7b-12-2024, Command A) --------------------------------
def _cohere2_layers(v: Mapping, where: str):
    """Cohere2Config.__post_init__: without layer_types, layer i slides iff (i + 1) %
    sliding_window_pattern (default 4; an integer); Cohere2Attention sets its window to
    sliding_window on the sliding layers, None elsewhere, and applies RoPE only where the
    window is set: the global layers are NoPE. Sliding layers with sliding_window null are
    refused (layers_of): transformers' DynamicSlidingWindowLayer fails on a None window."""
    # imported here: importing hf_types_dense2 at the top would register its types before
    # Cohere's and reorder the supported-types lists (hf_config.py's import order)
    from accounting.architecture.hf_types_dense2 import layer_types_of
    L, window, pattern = v["num_hidden_layers"], v["sliding_window"], v["sliding_window_pattern"]
    types = layer_types_of(v["layer_types"], L, where)
    if types is None:  # (sliding_window_pattern: a positive integer, its Key's check)
        types = ["local" if (i + 1) % pattern else "global" for i in range(L)]
    fields = {**layers_of(types, window, where),
              "nope_layers": tuple(i for i, t in enumerate(types) if t == "global")}
    n = types.count("local")
    notes = ((f"sliding window {window:,} with RoPE on {n} of {L} layers; no RoPE on the "
              f"other {L - n} (global NoPE, Cohere2Attention).",) if n else
             (f"no RoPE on any of the {L} layers (all full_attention: Cohere2Attention "
              f"rotates only where it slides).",))
    return fields, notes


def _cohere2_back(c) -> Mapping | None:
    """config.json's layer_types for a spec's windows; None unless exactly the global layers
    are NoPE (Cohere2Attention has no other choice)."""
    local = [k.local for k in c.layer_kinds]
    if tuple(c.nope_layers) != tuple(i for i, x in enumerate(local) if not x):
        return None
    return {"sliding_window": c.sliding_window,
            "layer_types": ["sliding_attention" if x else "full_attention" for x in local]}


register(HFType(
    "cohere2", "Cohere2ForCausalLM",
    keys=_SHARED + (
        # Cohere2Config sets no default_theta: PreTrainedConfig's 10,000 where config.json
        # gives none (Cohere2Config().rope_parameters)
        Key("rope_theta", ("rope_theta",), THETA, 10000.0,
            aliases=("rope_parameters.rope_theta", "rope_scaling.rope_theta")),
        Key("sliding_window", (), INT_OR_NULL, 4096),
        # popped from the kwargs by Cohere2Config.__post_init__ when layer_types is absent
        Key("sliding_window_pattern", (), INT, 4),
        Key("layer_types", (), LIST, None)),
    fixed=_FIXED,
    rules="Cohere's parallel block (cohere: one CohereLayerNorm without bias feeding "
          "attention and a gated MLP, x + attn(ln(x)) + mlp(ln(x))), no QK-norm; RoPE on "
          "interleaved pairs only on the sliding-window layers, none on the global ones "
          "(Cohere2Attention); logits times logit_scale (modeling_cohere2.py)",
    names=LLAMA_NAMES, must=ROPE_MUST, noted=(ATTENTION_DROPOUT,),
    # Command R7B's config.json carries these; no transformers 5.23.0 module reads them (grep),
    # and its values name what Cohere2 hard-codes: cache_implementation (generate()'s cache),
    # layer_switch 4, order_of_interleaved_layers "local_attn_first", position_embedding_type
    # "rope_gptj" (interleaved), rotary_pct 1.0, use_embedding_sharing (tie_word_embeddings),
    # use_gated_activation (Cohere2MLP is gated)
    free=frozenset({"model_max_length", "cache_implementation", "layer_switch",
                    "order_of_interleaved_layers", "position_embedding_type", "rotary_pct",
                    "use_embedding_sharing", "use_gated_activation"}),
    derived=(Derived(("sliding_window", "layer_types", "nope_layers"),
                     ("num_hidden_layers", "sliding_window", "sliding_window_pattern",
                      "layer_types"), _cohere2_layers,
                     "local layers: layer_types, else all but every sliding_window_pattern-th; "
                     "RoPE only on the local ones (configuration_cohere2.py, Cohere2Attention)",
                     _cohere2_back),),
))
