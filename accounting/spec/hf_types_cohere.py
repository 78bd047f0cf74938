"""Cohere's model_type (hf_schema.py's row): Command R, Command R+, Aya 23; registered on
import (hf_config.py imports this module). Defaults and rules from transformers 5.23.0's
models/cohere/configuration_cohere.py (CohereConfig) and modeling_cohere.py.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from accounting.spec.hf_schema import (
    ATTENTION_BIAS, ATTENTION_DROPOUT, BOOL, CHOICE, EPS, GATED_ACTS, INT, LLAMA_NAMES, ROPE_MUST,
    THETA, Derived, HFType, Key, head_dim, kv_heads, llama_sizes, register)


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


register(HFType(
    "cohere", "CohereForCausalLM",
    # CohereConfig's class defaults are Command R's sizes (256000, 8192, 22528, 40, 64, 8192)
    keys=llama_sizes(256000, 8192, 22528, 40, 64, 8192) + (
        kv_heads(),  # CohereConfig.__post_init__: None -> num_attention_heads
        # CohereAttention: getattr(config, "head_dim", hidden_size // heads); null refused
        head_dim(None, INT),
        ATTENTION_BIAS,  # q/k/v_proj and o_proj alike (CohereAttention)
        Key("hidden_act", ("mlp",), CHOICE, "silu", GATED_ACTS),  # CohereMLP: gated
        Key("layer_norm_eps", ("norm_eps",), EPS, 1e-5),
        Key("tie_word_embeddings", ("tie_embeddings",), BOOL, True),
        # CohereForCausalLM.forward: logits * self.logit_scale, always (a null would fail there)
        Key("logit_scale", ("logit_scale",), THETA, 0.0625),
        Key("use_qk_norm", (), BOOL, False),
        # CohereConfig.default_theta: 500,000 where config.json gives none
        Key("rope_theta", ("rope_theta",), THETA, 500000.0,
            aliases=("rope_parameters.rope_theta", "rope_scaling.rope_theta"))),
    fixed=MappingProxyType(dict(norm="layernorm_nobias", norm_placement="pre", positions="rope",
                                block="parallel_shared_norm", mlp_bias=False)),
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
