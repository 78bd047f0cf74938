"""The 2025-26 dense model_types of the Hugging Face table (hf_schema.py's rows): SmolLM3,
GLM-4-0414, OLMo-3, Seed-OSS, EXAONE 4.0; registered on import (hf_config.py imports this
module). Defaults and rules from transformers 5.23.0's configuration_<type>.py and
modeling_<type>.py.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from accounting.runtime.errors import UsageError
from accounting.architecture.config import ModelConfig
from accounting.architecture.hf_schema import (
    ATTENTION_BIAS, ATTENTION_DROPOUT, BOOL, CHOICE, EPS, GATED_ACTS, INT, INT_OR_ABSENT, INT_OR_NULL, LIST,
    LLAMA_FAMILY, LLAMA_NAMES, OLMO2_NAMES, WINDOW_PATTERN, ROPE_MUST, ROPE_TYPES, THETA, Derived,
    HFType, Key, ModuleNames, Must, Required, dropout, head_dim, kv_heads, llama_sizes,
    register, rope_keys, rope_must, rope_ok, short)
from accounting.architecture.hf_types_dense import layers_of
from accounting.architecture.hf_types_parallel import _FACTOR_ALIASES, _rotary, _rotary_back

_KINDS = {"full_attention": "global", "sliding_attention": "local"}


def layer_types_of(given, L: int, where: str) -> list[str] | None:
    """config.json's layer_types as the spec's kinds ("global"/"local"); None when absent."""
    if given is None:
        return None
    if len(given) != L or any(t not in _KINDS for t in given):
        raise UsageError(f"{where}: layer_types must list {L} entries (num_hidden_layers), each "
                         f"\"full_attention\" or \"sliding_attention\", got {short(given)}")
    return [_KINDS[t] for t in given]


def _windows_back(c: ModelConfig) -> Mapping:
    """layer_types for a spec's windows (flags on a config.json)."""
    local = [k.local for k in c.layer_kinds]
    return {"sliding_window": c.sliding_window,
            "layer_types": ["sliding_attention" if x else "full_attention" for x in local]}


def _nested_rope_ok(value, data) -> bool:
    """rope_parameters per layer kind ({"full_attention": {..}, "sliding_attention": {..}},
    OLMo-3's and EXAONE 4's form) or one flat setting; each a variant of no count."""
    if isinstance(value, dict) and set(value) and set(value) <= set(_KINDS):
        return all(rope_ok(v, data) for v in value.values())
    return rope_ok(value, data)


NESTED_ROPE_MUST = (
    Must("rope_scaling", rope_ok, f"null or rope_type {', '.join(ROPE_TYPES)}",
         "a RoPE variant the tool does not know to leave every count unchanged"),
    Must("rope_parameters", _nested_rope_ok, f"null or rope_type {', '.join(ROPE_TYPES)} (per "
         "layer kind, or one)", "a RoPE variant the tool does not know to leave every count "
         "unchanged"))


# ---- SmolLM3 (HuggingFaceTB/SmolLM3-3B): NoPE on every no_rope_layer_interval-th layer ------
def _smollm3_layers(v: Mapping, where: str):
    """SmolLM3Config.__post_init__: no_rope_layers[i] is 1 where layer i uses RoPE, 0 where
    it does not (NoPE); absent, int((i + 1) % no_rope_layer_interval != 0): every 4th layer
    NoPE. layer_types absent: "sliding_attention" where use_sliding_window, sliding_window
    set and the layer is NoPE. SmolLM3Attention slides iff use_sliding_window and its
    layer_types entry is sliding."""
    L, flags = v["num_hidden_layers"], v["no_rope_layers"]
    if flags is None:
        flags = [int((i + 1) % v["no_rope_layer_interval"] != 0) for i in range(L)]
    elif len(flags) != L or any(f not in (0, 1) or isinstance(f, bool) for f in flags):
        raise UsageError(f"{where}: no_rope_layers must list {L} entries (num_hidden_layers), "
                         f"each 1 (RoPE) or 0 (no RoPE), got {short(flags)}")
    nope = tuple(i for i in range(L) if not flags[i])
    use, window = v["use_sliding_window"], v["sliding_window"]
    types = layer_types_of(v["layer_types"], L, where)
    if types is None:
        types = ["local" if use and window is not None and not flags[i] else "global"
                 for i in range(L)]
    if not use:
        types = ["global"] * L  # SmolLM3Attention: no window unless use_sliding_window
    fields = {"nope_layers": nope, **layers_of(types, window, where)}
    notes = (f"no RoPE on {len(nope)} of {L} layers (no_rope_layers: "
             f"{', '.join(map(str, nope)) if len(nope) <= 8 else 'every ' + str(v['no_rope_layer_interval']) + 'th'}).",) if nope else ()
    return fields, notes


def _smollm3_back(c: ModelConfig) -> Mapping:
    nope = set(c.nope_layers)
    local = [k.local for k in c.layer_kinds]
    return {"no_rope_layers": [0 if i in nope else 1 for i in range(c.num_layers)],
            "use_sliding_window": any(local), "sliding_window": c.sliding_window,
            "layer_types": ["sliding_attention" if x else "full_attention" for x in local]}


register(HFType(
    "smollm3", "SmolLM3ForCausalLM",
    keys=llama_sizes(128256, 2048, 11008, 36, 16, 32768) + (
        kv_heads(Required(4)),  # SmolLM3Config.__post_init__: None -> num_attention_heads
        head_dim(None, INT_OR_ABSENT),  # SmolLM3Attention: getattr(config, "head_dim", hidden_size // heads)
        ATTENTION_BIAS,  # q/k/v/o_proj alike
        Key("mlp_bias", ("mlp_bias",), BOOL, False),
        Key("hidden_act", ("mlp",), CHOICE, "silu", GATED_ACTS),
        Key("rms_norm_eps", ("norm_eps",), EPS, 1e-6),
        Key("tie_word_embeddings", ("tie_embeddings",), BOOL, True),
        # SmolLM3Config.default_theta
        Key("rope_theta", ("rope_theta",), THETA, 2_000_000.0,
            aliases=("rope_parameters.rope_theta", "rope_scaling.rope_theta")),
        Key("no_rope_layers", (), LIST, None),
        Key("no_rope_layer_interval", (), INT, 4),
        Key("use_sliding_window", (), BOOL, False),
        Key("sliding_window", (), INT_OR_NULL, None),
        Key("layer_types", (), LIST, None)),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, qk_norm="none")),
    rules="the llama architecture with RoPE only on the layers no_rope_layers marks 1 "
          "(SmolLM3Attention.use_rope; by default every no_rope_layer_interval-th layer has "
          "none) (modeling_smollm3.py)",
    names=LLAMA_NAMES, must=ROPE_MUST, noted=(ATTENTION_DROPOUT,),
    # SmolLM3-3B's config.json carries both; neither SmolLM3Config nor its model reads them
    free=frozenset({"max_window_layers", "pretraining_tp"}),
    derived=(Derived(("nope_layers", "sliding_window", "layer_types"),
                     ("num_hidden_layers", "no_rope_layers", "no_rope_layer_interval",
                      "use_sliding_window", "sliding_window", "layer_types"), _smollm3_layers,
                     "NoPE layers: no_rope_layers' zeros, else every no_rope_layer_interval-th "
                     "layer; local layers (use_sliding_window): layer_types, else the NoPE "
                     "layers (configuration_smollm3.py)", _smollm3_back),),
))


# ---- GLM-4-0414 (THUDM/GLM-4-9B-0414, GLM-4-32B-0414; model_type glm4) -----------------------
def _glm4_rotary(v: Mapping, where: str):
    return _rotary(v["head_dim"], v["partial_rotary_factor"], where, "partial_rotary_factor"), ()


GLM4_NAMES = ModuleNames(LLAMA_NAMES.blocks, MappingProxyType({
    **LLAMA_NAMES.block,
    # Glm4DecoderLayer: input_layernorm, post_self_attn_layernorm (on attention's output),
    # post_attention_layernorm (the MLP's input), post_mlp_layernorm (on the MLP's output);
    # gate_up_proj: W1 and W3 stacked, up · act(gate) (Glm4MLP)
    "ln1": "input_layernorm", "post_attn_norm": "post_self_attn_layernorm",
    "ln2": "post_attention_layernorm", "post_ffn_norm": "post_mlp_layernorm",
    "ffn.w1": "mlp.gate_up_proj", "ffn.w3": "mlp.gate_up_proj"}), LLAMA_NAMES.top)

register(HFType(
    "glm4", "Glm4ForCausalLM",
    keys=llama_sizes(151552, 4096, 13696, 40, 32, 131072) + (
        kv_heads(Required(2), INT),
        # Glm4Config.head_dim is 128 whatever hidden_size / heads is
        head_dim(Required(128), INT),
        Key("attention_bias", ("qkv_bias",), BOOL, True),  # q/k/v_proj; o_proj never
        # Glm4Config.__post_init__: partial_rotary_factor 0.5 unless given
        Key("partial_rotary_factor", (), THETA, 0.5, aliases=_FACTOR_ALIASES),
    ) + rope_keys(1.5625e-07),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, norm_placement="sandwich", qk_norm="none",
                                out_bias=False, mlp_bias=False)),
    rules="four RMSNorms per block: on attention's input and output, on the MLP's input and "
          "output (sandwich: input_layernorm, post_self_attn_layernorm, "
          "post_attention_layernorm, post_mlp_layernorm); biases on Q, K and V only; a gated "
          "MLP with gate and up stacked (gate_up_proj); RoPE on int(head_dim·"
          "partial_rotary_factor) dims, on interleaved pairs (the same count) "
          "(modeling_glm4.py)",
    names=GLM4_NAMES, must=rope_must(partial=True), noted=(ATTENTION_DROPOUT,),
    derived=(Derived(("rotary_dim",), ("head_dim", "partial_rotary_factor"), _glm4_rotary,
                     "RoPE on int(head_dim·partial_rotary_factor) dims of each head, the rest "
                     "passed through (apply_rotary_pos_emb)",
                     _rotary_back("partial_rotary_factor")),),
))


# ---- OLMo 3 (allenai/Olmo-3-7B, Olmo-3-32B) --------------------------------------------------
def _olmo3_windows(v: Mapping, where: str):
    """Olmo3Config.__post_init__: without layer_types, layer i slides iff (i + 1) % 4 != 0
    (three sliding layers, then a full one); Olmo3Attention attends sliding_window keys on
    its sliding layers."""
    L = v["num_hidden_layers"]
    types = layer_types_of(v["layer_types"], L, where) or \
        ["local" if (i + 1) % 4 else "global" for i in range(L)]
    n = types.count("local")
    fields = layers_of(types, v["sliding_window"], where)
    return fields, ((f"sliding window {v['sliding_window']:,} on {n} of {L} layers.",) if n else ())


register(HFType(
    "olmo3", "Olmo3ForCausalLM",
    keys=llama_sizes(50304, 4096, 11008, 32, 32, 2048) + (
        kv_heads(),  # Olmo3Config.__post_init__: None -> num_attention_heads
        head_dim(None, INT_OR_ABSENT),  # null refused: transformers fails on it (tests/test_hf_default_sweep.py)
        ATTENTION_BIAS,
        Key("hidden_act", ("mlp",), CHOICE, "silu", GATED_ACTS),
        Key("rms_norm_eps", ("norm_eps",), EPS, 1e-5),
        Key("tie_word_embeddings", ("tie_embeddings",), BOOL, False),
        # Olmo3Config.default_theta; transformers 5 writes it inside rope_parameters per
        # layer kind (frequencies only: no count)
        Key("rope_theta", ("rope_theta",), THETA, 500_000.0),
        Key("sliding_window", (), INT_OR_NULL, 4096),
        Key("layer_types", (), LIST, None)),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, norm_placement="post", qk_norm="full",
                                mlp_bias=False)),
    rules="OLMo-2's block (RMSNorm on each sublayer's output inside the residual, QK-norm "
          "over the full Q and K projections) with sliding-window layers: three of every "
          "four unless layer_types says (modeling_olmo3.py)",
    names=OLMO2_NAMES, must=NESTED_ROPE_MUST, noted=(ATTENTION_DROPOUT,),
    derived=(Derived(("sliding_window", "layer_types"),
                     ("num_hidden_layers", "sliding_window", "layer_types"), _olmo3_windows,
                     "local layers: layer_types, else all but every 4th "
                     "(configuration_olmo3.py)", _windows_back),),
))


# ---- Seed-OSS (ByteDance-Seed/Seed-OSS-36B) --------------------------------------------------
register(HFType(
    "seed_oss", "SeedOssForCausalLM",
    keys=llama_sizes(155136, 4096, 27648, 64, 80, 524288) + (
        kv_heads(Required(8)),
        # SeedOssConfig: head_dim 128 by default; null -> hidden_size // heads
        head_dim(Required(128)),
        Key("attention_bias", ("qkv_bias",), BOOL, True),  # q/k/v_proj
        Key("attention_out_bias", ("out_bias",), BOOL, False),  # o_proj
        Key("mlp_bias", ("mlp_bias",), BOOL, False)) + rope_keys(1e-6),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, qk_norm="none")),
    rules="the llama architecture with biases on Q, K and V by attention_bias and on the "
          "output projection by attention_out_bias (modeling_seed_oss.py)",
    names=LLAMA_NAMES, must=ROPE_MUST,
    noted=(ATTENTION_DROPOUT, dropout("residual_dropout")),
    free=frozenset({"pretraining_tp"}),  # a SeedOssConfig field no module reads
))


# ---- EXAONE 4.0 (LGAI-EXAONE/EXAONE-4.0-1.2B, -32B) ------------------------------------------
def _exaone4_layers(v: Mapping, where: str):
    """Exaone4Config.__post_init__: without layer_types, layer i slides iff (i + 1) %
    sliding_window_pattern != 0 (an int; a string pattern such as "LLLG" needs layer_types);
    Exaone4Attention applies RoPE only on the sliding layers once sliding_window is set
    ("global NoPE"), on every layer when it is null."""
    L, window, pattern = v["num_hidden_layers"], v["sliding_window"], v["sliding_window_pattern"]
    types = layer_types_of(v["layer_types"], L, where)
    if types is None:
        if window is None or isinstance(pattern, str) or pattern is None:
            raise UsageError(f"{where}: without layer_types, sliding_window_pattern must be a "
                             f"positive integer and sliding_window set (transformers' "
                             f"Exaone4Config computes (i + 1) % sliding_window_pattern), got "
                             f"sliding_window {short(window)}, sliding_window_pattern "
                             f"{short(pattern)}")
        types = ["local" if (i + 1) % pattern else "global" for i in range(L)]
    fields = layers_of(types, window, where)
    if window is not None:
        fields["nope_layers"] = tuple(i for i, t in enumerate(types) if t == "global")
    n = types.count("local")
    notes = (f"sliding window {window:,} on {n} of {L} layers; no RoPE on the other "
             f"{L - n} (global NoPE).",) if n else ()
    return fields, notes


def _exaone4_back(c: ModelConfig) -> Mapping | None:
    local = [k.local for k in c.layer_kinds]
    nope = tuple(i for i, x in enumerate(local) if not x)
    if c.sliding_window is not None and c.nope_layers != nope:
        return None  # the global layers are NoPE exactly when a window is set
    if c.sliding_window is None and c.nope_layers:
        return None
    return {"sliding_window": c.sliding_window,
            "layer_types": ["sliding_attention" if x else "full_attention" for x in local]}


register(HFType(
    "exaone4", "Exaone4ForCausalLM",
    keys=llama_sizes(102400, 4096, 16384, 32, 32, 2048) + (
        kv_heads(Required(32), INT),
        head_dim(None, INT_OR_ABSENT),  # Exaone4Attention: getattr(config, "head_dim", hidden_size // heads)
        Key("sliding_window", (), INT_OR_NULL, 4096),
        Key("sliding_window_pattern", (), WINDOW_PATTERN, 4),
        Key("layer_types", (), LIST, None)) + rope_keys(1e-5),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, norm_placement="post", qk_norm="head",
                                qkv_bias=False, out_bias=False, mlp_bias=False)),
    rules="RMSNorm on each sublayer's output inside the residual (post_attention_layernorm, "
          "post_feedforward_layernorm: OLMo-2's placement), RMSNorm of each head's Q and K "
          "(q_norm, k_norm of head_dim), no biases; sliding-window layers with RoPE and, once "
          "sliding_window is set, global layers without it (modeling_exaone4.py)",
    names=OLMO2_NAMES, must=NESTED_ROPE_MUST, noted=(ATTENTION_DROPOUT,),
    derived=(Derived(("sliding_window", "layer_types", "nope_layers"),
                     ("num_hidden_layers", "sliding_window", "sliding_window_pattern",
                      "layer_types"), _exaone4_layers,
                     "local layers: layer_types, else all but every sliding_window_pattern-th; "
                     "the global layers without RoPE when sliding_window is set "
                     "(configuration_exaone4.py, Exaone4Attention)", _exaone4_back),),
))
