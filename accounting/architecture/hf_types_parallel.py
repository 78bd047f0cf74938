"""The model_types of the parallel block, partial rotary and fused projections (hf_schema.py's
rows): GPT-NeoX, Falcon, Phi-3, StarCoder2; registered on import (hf_config.py imports this
module). Defaults and rules from transformers 5.23.0's configuration_<type>.py and
modeling_<type>.py.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from accounting.architecture.hf_schema import (
    ATTENTION_DROPOUT, BOOL, CHOICE, EPS, GATED_ACTS, INT, INT_OR_NULL, LLAMA_FAMILY,
    LLAMA_NAMES, PLAIN_ACTS, THETA, Derived, HFType, Key, ModuleNames, Must, Required, dropout,
    kv_heads, llama_sizes, register, rope_must, short)
from accounting.runtime.errors import UsageError

_THETA_ALIASES = ("rope_parameters.rope_theta", "rope_scaling.rope_theta")
_FACTOR_ALIASES = ("rope_parameters.partial_rotary_factor", "rope_scaling.partial_rotary_factor")


def _rotary(head: int, factor, where: str, key: str) -> dict:
    """transformers' rotary width: int(head_dim · factor) (GPTNeoXAttention.rotary_ndims,
    the RoPE init's dim = int(head_dim * partial_rotary_factor)); all of it: full RoPE."""
    if not 0 < factor <= 1:
        raise UsageError(f"{where}: {key} must be in (0, 1], got {short(factor)}")
    r = int(head * factor)
    if r == head:
        return {}
    if r == 0 or r % 2:
        raise UsageError(f"{where}: {key} {factor} gives int({head}·{factor}) = {r} rotary "
                         f"dims per head; RoPE rotates pairs, so it must be even and positive")
    return {"rotary_dim": r}


def _rotary_back(key: str):
    """config.json's factor for a spec's rotary_dim (flags on a config.json)."""
    return lambda c: {key: (c.rotary_dim or c.d_k) / c.d_k}


# ---- GPT-NeoX (Pythia, GPT-NeoX-20B) ---------------------------------------------------------
def _neox_block(v: Mapping, where: str):
    return {"block": "parallel" if v["use_parallel_residual"] else "sequential"}, ()


def _neox_rotary(v: Mapping, where: str):
    head = v["hidden_size"] // v["num_attention_heads"]
    return _rotary(head, v["rotary_pct"], where, "rotary_pct"), ()


GPT_NEOX_NAMES = ModuleNames(
    blocks="gpt_neox.layers",
    block=MappingProxyType({
        "ln1": "input_layernorm", "ln2": "post_attention_layernorm", "attn": "attention",
        # one fused Linear computes Q, K and V (laid out per head as [q, k, v]: a layout)
        "attn.q_proj": "attention.query_key_value", "attn.k_proj": "attention.query_key_value",
        "attn.v_proj": "attention.query_key_value", "attn.output_proj": "attention.dense",
        "ffn.w1": "mlp.dense_h_to_4h", "ffn.w2": "mlp.dense_4h_to_h"}),
    top=MappingProxyType({"token_embeddings": "gpt_neox.embed_in",
                          "ln_final": "gpt_neox.final_layer_norm", "lm_head": "lm_head"}),
)

register(HFType(
    "gpt_neox", "GPTNeoXForCausalLM",
    keys=(Key("vocab_size", ("vocab_size",), INT, Required(50432)),
          Key("hidden_size", ("d_model",), INT, Required(6144)),
          Key("intermediate_size", ("d_ff",), INT, Required(24576)),
          Key("num_hidden_layers", ("num_layers",), INT, Required(44)),
          Key("num_attention_heads", ("num_heads",), INT, Required(64)),
          Key("max_position_embeddings", ("context_length",), INT, Required(2048)),
          Key("hidden_act", ("mlp",), CHOICE, "gelu", PLAIN_ACTS),
          Key("layer_norm_eps", ("norm_eps",), EPS, 1e-5),
          Key("tie_word_embeddings", ("tie_embeddings",), BOOL, False),
          Key("attention_bias", ("qkv_bias", "out_bias"), BOOL, True),
          Key("use_parallel_residual", (), BOOL, True),
          # GPTNeoXConfig.convert_rope_params_to_dict: rope_parameters' own values, else
          # rotary_emb_base and rotary_pct (default 0.25)
          Key("rotary_emb_base", ("rope_theta",), THETA, 10000.0, aliases=_THETA_ALIASES),
          Key("rotary_pct", (), THETA, 0.25, aliases=_FACTOR_ALIASES)),
    fixed=MappingProxyType(dict(norm="layernorm", norm_placement="pre", positions="rope",
                                qk_norm="none", mlp_bias=True)),
    rules="LayerNorm with bias, RoPE on the first int(head_size·rotary_pct) dims of each head, "
          "a plain MLP with biases (modeling_gpt_neox.py: GPTNeoXMLP's nn.Linear)",
    names=GPT_NEOX_NAMES, must=rope_must(partial=True),
    noted=(ATTENTION_DROPOUT, dropout("hidden_dropout")),
    free=frozenset({"classifier_dropout"}),  # the classification heads', not built here
    divides=(("num_attention_heads", "hidden_size"),),  # GPTNeoXConfig.validate_architecture
    derived=(Derived(("block",), ("use_parallel_residual",), _neox_block,
                     "use_parallel_residual: x + attn(ln1(x)) + mlp(ln2(x)), else sequential "
                     "(GPTNeoXLayer.forward)",
                     lambda c: None if c.block == "parallel_shared_norm" else
                     {"use_parallel_residual": c.block == "parallel"}),
             Derived(("rotary_dim",), ("hidden_size", "num_attention_heads", "rotary_pct"),
                     _neox_rotary, "RoPE on int(head_size·rotary_pct) dims of each head, the "
                     "rest passed through (apply_rotary_pos_emb: q_rot, q_pass, torch.cat)",
                     _rotary_back("rotary_pct"))),
))


# ---- Falcon (7B, 40B, 180B) --------------------------------------------------------------------
def _falcon_layout(v: Mapping, where: str):
    """FalconAttention and FalconDecoderLayer (modeling_falcon.py): the new decoder
    architecture has num_kv_heads K/V heads and is parallel (ln_attn and ln_mlp, or one
    input_layernorm with num_ln_in_parallel_attn 1); else multi_query is one K/V head and
    parallel_attn one input_layernorm feeding both (sequential: post_attention_layernorm)."""
    h, kv, n_ln = v["num_attention_heads"], v["num_kv_heads"], v["num_ln_in_parallel_attn"]
    # alibi: FalconModel builds build_alibi_tensor's bias and FalconAttention adds it to the
    # scores before the scale, in place of RoPE (config.rotary = not alibi)
    positions = {"positions": "alibi"} if v["alibi"] else \
        {"positions": "rope", "rope_theta": v["rope_theta"]}
    if v["new_decoder_architecture"]:
        if not v["parallel_attn"]:
            raise UsageError(f"{where}: new_decoder_architecture with parallel_attn false: "
                             f"transformers' FalconDecoderLayer builds no ln_attn then and fails")
        if n_ln not in (None, 1, 2):
            raise UsageError(f"{where}: num_ln_in_parallel_attn must be 1, 2 or null, got "
                             f"{short(n_ln)}")
        return {"num_kv_heads": h if kv is None else kv, **positions,
                "block": "parallel_shared_norm" if n_ln == 1 else "parallel"}, ()
    if kv is not None and kv != h and not v["multi_query"]:
        raise UsageError(f"{where}: num_kv_heads {kv} without new_decoder_architecture or "
                         f"multi_query: transformers' Falcon builds 3·hidden_size Q/K/V then "
                         f"and cannot reshape K and V to {kv} heads")
    if v["parallel_attn"] and n_ln not in (None, 1):
        raise UsageError(f"{where}: num_ln_in_parallel_attn {short(n_ln)} without "
                         f"new_decoder_architecture: transformers' layer reads "
                         f"input_layernorm, which it then does not build")
    return {"num_kv_heads": 1 if v["multi_query"] else h, **positions,
            "block": "parallel_shared_norm" if v["parallel_attn"] else "sequential"}, ()


_FALCON_BLOCK = {"ln1": "input_layernorm", "ln2": "post_attention_layernorm",
                 "attn": "self_attention",
                 "attn.q_proj": "self_attention.query_key_value",
                 "attn.k_proj": "self_attention.query_key_value",
                 "attn.v_proj": "self_attention.query_key_value",
                 "attn.output_proj": "self_attention.dense",
                 "ffn.w1": "mlp.dense_h_to_4h", "ffn.w2": "mlp.dense_4h_to_h"}
FALCON_NAMES = ModuleNames(
    "transformer.h", MappingProxyType(_FALCON_BLOCK),
    MappingProxyType({"token_embeddings": "transformer.word_embeddings",
                      "ln_final": "transformer.ln_f", "lm_head": "lm_head"}))
# the new decoder architecture's two norms (num_ln_in_parallel_attn 2, its default)
FALCON_TWO_NORMS = ModuleNames(FALCON_NAMES.blocks, MappingProxyType(
    {**_FALCON_BLOCK, "ln1": "ln_attn", "ln2": "ln_mlp"}), FALCON_NAMES.top)


def _falcon_names(data: Mapping) -> ModuleNames:
    two = data.get("new_decoder_architecture") and data.get("num_ln_in_parallel_attn") in (None, 2)
    return FALCON_TWO_NORMS if two else FALCON_NAMES


def _falcon_back(c):
    """The keys that mean a spec's positions, block and K/V heads (flags on a config.json):
    the old architecture where it can (one K/V head or all of them), else the new one."""
    kv, h = c.kv_heads, c.num_heads
    if c.positions not in ("rope", "alibi") or (c.block == "sequential" and kv not in (1, h)):
        return None
    keys = {"alibi": True} if c.positions == "alibi" else {"alibi": False,
                                                           "rope_theta": c.rope_theta}
    if c.block == "sequential" or (c.block == "parallel_shared_norm" and kv in (1, h)):
        return {**keys, "new_decoder_architecture": False, "multi_query": kv == 1,
                "num_kv_heads": None, "num_ln_in_parallel_attn": None,
                "parallel_attn": c.block != "sequential"}
    return {**keys, "new_decoder_architecture": True, "num_kv_heads": kv, "parallel_attn": True,
            "num_ln_in_parallel_attn": 1 if c.block == "parallel_shared_norm" else 2}


register(HFType(
    "falcon", "FalconForCausalLM",
    keys=(Key("vocab_size", ("vocab_size",), INT, Required(65024)),
          Key("hidden_size", ("d_model",), INT, Required(4544), aliases=("n_embed",)),
          Key("num_hidden_layers", ("num_layers",), INT, Required(32)),
          Key("num_attention_heads", ("num_heads",), INT, Required(71)),
          # the Falcon models' own 2,048 (7B, 40B, 180B), not a stand-in size
          Key("max_position_embeddings", ("context_length",), INT, 2048),
          Key("ffn_hidden_size", ("d_ff",), INT_OR_NULL, None),  # null: 4·hidden_size
          Key("activation", ("mlp",), CHOICE, "gelu", PLAIN_ACTS),
          Key("layer_norm_epsilon", ("norm_eps",), EPS, 1e-5),
          Key("tie_word_embeddings", ("tie_embeddings",), BOOL, True),
          Key("bias", ("qkv_bias", "out_bias", "mlp_bias"), BOOL, False),
          Key("rope_theta", (), THETA, 10000.0, aliases=_THETA_ALIASES),  # RoPE's, not ALiBi's
          Key("num_kv_heads", (), INT_OR_NULL, None),
          Key("new_decoder_architecture", (), BOOL, False),
          Key("multi_query", (), BOOL, True),
          Key("parallel_attn", (), BOOL, True),
          Key("num_ln_in_parallel_attn", (), INT_OR_NULL, None),
          Key("alibi", (), BOOL, False)),
    fixed=MappingProxyType(dict(norm="layernorm", norm_placement="pre", qk_norm="none")),
    rules="LayerNorm with bias, one fused query_key_value, a plain MLP (FalconMLP; "
          "modeling_falcon.py)",
    names=FALCON_NAMES, names_of=_falcon_names,
    kv_broadcast=lambda data: bool(data.get("new_decoder_architecture")),
    must=rope_must() + (
        # transformers 5 ignores it; older Falcon code put the residual after the norm
        Must("apply_residual_connection_post_layernorm", lambda v, d: v is False, "false",
             "a residual taken after the norm (older Falcon code; transformers ignores it)",
             False),),
    noted=(ATTENTION_DROPOUT, dropout("hidden_dropout")),
    derived=(Derived(("num_kv_heads", "block", "positions", "rope_theta"),
                     ("num_attention_heads", "num_kv_heads", "new_decoder_architecture",
                      "multi_query", "parallel_attn", "num_ln_in_parallel_attn", "alibi",
                      "rope_theta"),
                     _falcon_layout,
                     "new_decoder_architecture: num_kv_heads K/V heads, parallel with ln_attn "
                     "and ln_mlp (one input_layernorm if num_ln_in_parallel_attn is 1); else "
                     "multi_query: one K/V head, parallel_attn: one input_layernorm feeding "
                     "both, or sequential (FalconAttention, FalconDecoderLayer); alibi: ALiBi "
                     "in place of RoPE (FalconModel: build_alibi_tensor)",
                     _falcon_back),),
))


# ---- Phi-3 (Phi-3-mini/medium, Phi-3.5-mini, Phi-4-mini) ----------------------------------------
def _phi3_rotary(v: Mapping, where: str):
    head = v["hidden_size"] // v["num_attention_heads"]
    return _rotary(head, v["partial_rotary_factor"], where, "partial_rotary_factor"), ()


PHI3_NAMES = ModuleNames(LLAMA_NAMES.blocks, MappingProxyType({
    **LLAMA_NAMES.block,
    # qkv_proj: Q, K and V stacked (h·d_k + 2·h_kv·d_k rows); gate_up_proj: W1 and W3
    # stacked, act(first half) · second half (Phi3MLP)
    "attn.q_proj": "self_attn.qkv_proj", "attn.k_proj": "self_attn.qkv_proj",
    "attn.v_proj": "self_attn.qkv_proj", "ffn.w1": "mlp.gate_up_proj",
    "ffn.w3": "mlp.gate_up_proj"}), LLAMA_NAMES.top)

register(HFType(
    "phi3", "Phi3ForCausalLM",
    keys=llama_sizes(32064, 3072, 8192, 32, 32, 4096) + (
        kv_heads(),
        Key("hidden_act", ("mlp",), CHOICE, "silu", GATED_ACTS),
        Key("rms_norm_eps", ("norm_eps",), EPS, 1e-5),
        Key("tie_word_embeddings", ("tie_embeddings",), BOOL, False),
        Key("rope_theta", ("rope_theta",), THETA, 10000.0, aliases=_THETA_ALIASES),
        # Phi3Config.convert_rope_params_to_dict: rope_parameters' own, else this key
        Key("partial_rotary_factor", (), THETA, 1.0, aliases=_FACTOR_ALIASES),
        # every layer when set (Phi3Model: create_sliding_window_causal_mask)
        Key("sliding_window", ("sliding_window",), INT_OR_NULL, None)),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, qk_norm="none", qkv_bias=False, out_bias=False,
                                mlp_bias=False)),
    rules="RMSNorm, a gated MLP, RoPE on int(head_dim·partial_rotary_factor) dims, no biases; "
          "a sliding window, when given, on every layer (modeling_phi3.py)",
    names=PHI3_NAMES,
    # Phi3Config turns "su" and "yarn" into longrope and validates default or longrope only
    must=rope_must(("default", "longrope", "su", "yarn"), partial=True),
    noted=(ATTENTION_DROPOUT, dropout("resid_pdrop"), dropout("embd_pdrop")),
    free=frozenset({"original_max_position_embeddings"}),  # longrope's frequencies only
    derived=(Derived(("rotary_dim",), ("hidden_size", "num_attention_heads",
                                       "partial_rotary_factor"), _phi3_rotary,
                     "RoPE on int(head_dim·partial_rotary_factor) dims of each head, the rest "
                     "passed through (apply_rotary_pos_emb)", _rotary_back("partial_rotary_factor")),),
))


# ---- StarCoder2 --------------------------------------------------------------------------------
STARCODER2_NAMES = ModuleNames(LLAMA_NAMES.blocks, MappingProxyType({
    **{k: v for k, v in LLAMA_NAMES.block.items() if not k.startswith("ffn.")},
    "ffn.w1": "mlp.c_fc", "ffn.w2": "mlp.c_proj"}), LLAMA_NAMES.top)

register(HFType(
    "starcoder2", "Starcoder2ForCausalLM",
    keys=llama_sizes(49152, 3072, 12288, 30, 24, 4096) + (
        kv_heads(Required(2), INT),
        Key("hidden_act", ("mlp",), CHOICE, "gelu_pytorch_tanh", PLAIN_ACTS),
        Key("norm_epsilon", ("norm_eps",), EPS, 1e-5),
        Key("tie_word_embeddings", ("tie_embeddings",), BOOL, True),
        Key("use_bias", ("qkv_bias", "out_bias", "mlp_bias"), BOOL, True),
        Key("rope_theta", ("rope_theta",), THETA, 10000.0, aliases=_THETA_ALIASES),
        # every layer when set (Starcoder2Model: create_sliding_window_causal_mask)
        Key("sliding_window", ("sliding_window",), INT_OR_NULL, None)),
    fixed=MappingProxyType(dict(norm="layernorm", norm_placement="pre", positions="rope",
                                qk_norm="none")),
    rules="LayerNorm with bias, a plain MLP c_fc/c_proj, RoPE; a sliding window, when given, "
          "on every layer (modeling_starcoder2.py)",
    names=STARCODER2_NAMES, must=rope_must(),
    noted=(ATTENTION_DROPOUT, dropout("residual_dropout"), dropout("embedding_dropout")),
))
