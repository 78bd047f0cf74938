"""Hybrid models' model_types (issue 31): LFM2 (short convolutions beside attention);
registered on import (hf_config.py imports this module). Defaults and rules from
transformers 5.23.0's models/lfm2/configuration_lfm2.py (Lfm2Config) and modeling_lfm2.py.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from accounting.runtime.errors import UsageError
from accounting.spec.hf_schema import (
    BOOL, EPS, INT, LIST, LLAMA_FAMILY, NUMBER_OR_NULL, ROPE_MUST, THETA, Derived, HFType, Key,
    ModuleNames, Required, head_dim, kv_heads, register)


def _lfm2_d_ff(v: Mapping, where: str):
    """Lfm2MLP: with block_auto_adjust_ff_dim, int(2·intermediate_size/3), then (with a
    block_ffn_dim_multiplier) int(multiplier·that) rounded up to a multiple of
    block_multiple_of; else intermediate_size as given."""
    f = v["intermediate_size"]
    if v["block_auto_adjust_ff_dim"]:
        f = int(2 * f / 3)
        m = v["block_ffn_dim_multiplier"]
        if m is not None:
            step = v["block_multiple_of"]
            f = step * ((int(m * f) + step - 1) // step)
    if f <= 0:
        raise UsageError(f"{where}: the adjusted MLP width is {f} (intermediate_size "
                         f"{v['intermediate_size']}): transformers cannot build it")
    return {"d_ff": f}, ()


def _lfm2_layers(v: Mapping, where: str):
    """Lfm2Config.__post_init__: layer_types as given ("full_attention" or "conv"), else
    full attention at full_attn_idxs (every layer when that is null too)."""
    L, given = v["num_hidden_layers"], v["layer_types"]
    if given is None:
        idxs = v["full_attn_idxs"]
        idxs = range(L) if idxs is None else idxs
        if not isinstance(idxs, (list, range)) or any(
                isinstance(i, bool) or not isinstance(i, int) for i in idxs):
            raise UsageError(f"{where}: full_attn_idxs must be a list of layer indices")
        given = ["full_attention" if i in idxs else "conv" for i in range(L)]
    kinds = {"full_attention": "global", "conv": "conv"}
    if not isinstance(given, list) or len(given) != L or any(t not in kinds for t in given):
        raise UsageError(f"{where}: layer_types must list {L} entries (num_hidden_layers), "
                         f"each full_attention or conv")
    types = tuple(kinds[t] for t in given)
    return ({"layer_types": types} if "conv" in types else {}), ()


LFM2_NAMES = ModuleNames(
    blocks="model.layers",
    block=MappingProxyType({
        "ln1": "operator_norm", "ln2": "ffn_norm", "attn": "self_attn",
        "attn.q_proj": "self_attn.q_proj", "attn.k_proj": "self_attn.k_proj",
        "attn.v_proj": "self_attn.v_proj", "attn.output_proj": "self_attn.out_proj",
        "attn.q_norm": "self_attn.q_layernorm", "attn.k_norm": "self_attn.k_layernorm",
        "conv": "conv", "conv.conv": "conv.conv", "conv.in_proj": "conv.in_proj",
        "conv.out_proj": "conv.out_proj",
        "ffn.w1": "feed_forward.w1", "ffn.w3": "feed_forward.w3", "ffn.w2": "feed_forward.w2"}),
    top=MappingProxyType({"token_embeddings": "model.embed_tokens",
                          "ln_final": "model.embedding_norm", "lm_head": "lm_head"}),
)

register(HFType(
    "lfm2", "Lfm2ForCausalLM",
    keys=(Key("vocab_size", ("vocab_size",), INT, Required(65536)),
          Key("hidden_size", ("d_model",), INT, Required(2560)),
          Key("num_hidden_layers", ("num_layers",), INT, Required(32)),
          Key("num_attention_heads", ("num_heads",), INT, Required(32)),
          Key("max_position_embeddings", ("context_length",), INT, Required(128000)),
          # Lfm2Config.__post_init__: block_ff_dim, an older spelling, overrides
          Key("intermediate_size", (), INT, Required(12288), aliases=("block_ff_dim",)),
          Key("block_auto_adjust_ff_dim", (), BOOL, True),
          Key("block_ffn_dim_multiplier", (), NUMBER_OR_NULL, 1.0),
          Key("block_multiple_of", (), INT, 256),
          kv_heads(8), head_dim(),
          Key("norm_eps", ("norm_eps",), EPS, 1e-5),
          Key("tie_word_embeddings", ("tie_embeddings",), BOOL, True, aliases=("tie_embedding",)),
          Key("rope_theta", ("rope_theta",), THETA, 1000000.0,
              aliases=("rope_parameters.rope_theta", "rope_scaling.rope_theta")),
          Key("conv_bias", ("conv_bias",), BOOL, False),
          Key("conv_L_cache", ("conv_kernel",), INT, 3),
          Key("full_attn_idxs", (), LIST, None),
          Key("layer_types", (), LIST, None)),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, qk_norm="head", mlp="swiglu", qkv_bias=False,
                                out_bias=False, mlp_bias=False)),
    rules="pre-norm RMSNorm blocks (operator_norm, ffn_norm), each a gated short "
          "convolution (Lfm2ShortConv: in_proj to B, C, x; C·conv1d(B·x); out_proj) or "
          "grouped attention with a per-head RMSNorm on Q and K (q_layernorm, k_layernorm), "
          "then a SwiGLU MLP without biases (Lfm2MLP); the final norm is embedding_norm "
          "(modeling_lfm2.py)",
    names=LFM2_NAMES, must=ROPE_MUST,
    derived=(Derived(("d_ff",), ("intermediate_size", "block_auto_adjust_ff_dim",
                                  "block_ffn_dim_multiplier", "block_multiple_of"), _lfm2_d_ff,
                     "the MLP width: int(2·intermediate_size/3), times block_ffn_dim_multiplier "
                     "rounded up to block_multiple_of, with block_auto_adjust_ff_dim (Lfm2MLP)"),
             Derived(("layer_types",), ("num_hidden_layers", "full_attn_idxs", "layer_types"),
                     _lfm2_layers,
                     "conv layers: those layer_types names conv, else those not in "
                     "full_attn_idxs (Lfm2Config.__post_init__)")),
))
