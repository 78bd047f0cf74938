"""Llama 4 rows of the Hugging Face table (hf_schema.py's rows): llama4_text (Llama4ForCausalLM)
and llama4, the multimodal file whose text_config holds the language model (only that is
counted); registered on import (hf_config.py imports this module). Defaults and rules from
transformers 5.23.0's models/llama4/configuration_llama4.py (Llama4TextConfig, Llama4Config)
and modeling_llama4.py.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from accounting.runtime.errors import UsageError
from accounting.architecture.config import ModelConfig
from accounting.architecture.hf_schema import (
    ATTENTION_BIAS, ATTENTION_DROPOUT, BOOL, CHOICE, EPS, GATED_ACTS, INT, INT_OR_NULL,
    LIST, LLAMA_FAMILY, LLAMA_NAMES, ROPE_MUST, THETA, Derived, HFType, Key, ModuleNames,
    Required, register, short)
from accounting.architecture.hf_types_moe import ROUTER_FREE, ROUTER_NOTES

# transformers' module names: Llama4TextDecoderLayer's feed_forward is a Llama4TextMLP
# (dense layers) or a Llama4TextMoe: router (an nn.Linear), experts (gate_up_proj holds W1
# and W3 of each expert, down_proj W2) and shared_expert (a Llama4TextMLP).
LLAMA4_NAMES = ModuleNames(LLAMA_NAMES.blocks, MappingProxyType({
    **{k: v for k, v in LLAMA_NAMES.block.items() if not k.startswith("ffn.")},
    "ffn.w1": "feed_forward.gate_proj", "ffn.w3": "feed_forward.up_proj",
    "ffn.w2": "feed_forward.down_proj", "ffn.router": "feed_forward.router",
    "ffn.experts": "feed_forward.experts",
    "ffn.shared.w1": "feed_forward.shared_expert.gate_proj",
    "ffn.shared.w3": "feed_forward.shared_expert.up_proj",
    "ffn.shared.w2": "feed_forward.shared_expert.down_proj"}), LLAMA_NAMES.top)

_ATTENTION = {"chunked_attention": "chunked", "full_attention": "global"}


def _indices(name: str, v, L: int, where: str) -> list[int]:
    if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < L for i in v):
        raise UsageError(f"{where}: {name} must list layer indices in [0, {L}), got {short(v)}")
    return list(v)


def _llama4_layers(v: Mapping, where: str):
    """Llama4TextConfig.__post_init__ and Llama4TextDecoderLayer/Attention: MoE on moe_layers
    (default every interleave_moe_layer_step-th, from step − 1), a dense MLP of
    intermediate_size_mlp elsewhere; no RoPE where no_rope_layers[i] is 0 (default, and when
    empty: every no_rope_layer_interval-th layer); layer_types (default: chunked_attention
    on RoPE layers, full_attention on NoPE ones); the l2 QK-norm on RoPE layers when
    use_qk_norm; temperature tuning on NoPE layers when attn_temperature_tuning."""
    L, step = v["num_hidden_layers"], v["interleave_moe_layer_step"]
    moe = v["moe_layers"]
    moe = list(range(step - 1, L, step)) if moe is None else _indices("moe_layers", moe, L, where)
    rope = v["no_rope_layers"] or [int((i + 1) % v["no_rope_layer_interval"] != 0)
                                   for i in range(L)]
    if len(rope) < L or any(x not in (0, 1) or isinstance(x, float) for x in rope):
        raise UsageError(f"{where}: no_rope_layers must give 1 (RoPE) or 0 (NoPE) for each of the "
                         f"{L} layers, got {short(rope)}")
    types = v["layer_types"]
    if types is None:
        types = ["chunked_attention" if r else "full_attention" for r in rope]
    if len(types) < L or any(t not in _ATTENTION for t in types[:L]):
        raise UsageError(f"{where}: layer_types must give chunked_attention or full_attention for "
                         f"each of the {L} layers, got {short(types)}")
    nope = tuple(i for i in range(L) if not rope[i])
    fields: dict = {"dense_layers": tuple(i for i in range(L) if i not in moe),
                    "nope_layers": nope, "qk_norm": "l2" if v["use_qk_norm"] else "none",
                    "attention_chunk": v["attention_chunk_size"],
                    "layer_types": tuple(_ATTENTION[t] for t in types[:L])}
    if v["attn_temperature_tuning"] and nope:  # it acts on the NoPE layers only (none: no op)
        fields.update(temperature_floor=v["floor_scale"], temperature_scale=v["attn_scale"])
    notes = []
    if fields["dense_layers"]:
        notes.append(f"{len(fields['dense_layers'])} of {L} layers keep a dense MLP of "
                     f"intermediate_size_mlp (moe_layers, interleave_moe_layer_step).")
    if nope:
        notes.append(f"layer{'s' if len(nope) > 1 else ''} {', '.join(map(str, nope))} "
                     f"{'have' if len(nope) > 1 else 'has'} no RoPE (no_rope_layers)"
                     + ("; attn_temperature_tuning scales the queries there"
                        if "temperature_floor" in fields else "") + ".")
    return fields, tuple(notes)


def _llama4_keys(c: ModelConfig) -> Mapping | None:
    """The keys that mean a config's per-layer fields (flags on a llama4 config.json)."""
    kinds = c.layer_kinds
    if any(k.local for k in kinds) or c.num_experts is None:
        return None
    return {"moe_layers": [i for i, k in enumerate(kinds) if k.moe],
            "no_rope_layers": [0 if k.nope else 1 for k in kinds],
            "layer_types": ["chunked_attention" if k.chunked else "full_attention" for k in kinds],
            "attention_chunk_size": c.attention_chunk or 8192, "use_qk_norm": c.qk_norm == "l2",
            "attn_temperature_tuning": c.temperature_floor is not None,
            "floor_scale": c.temperature_floor or 8192, "attn_scale": c.temperature_scale}


_TEXT = dict(
    keys=(Key("vocab_size", ("vocab_size",), INT, Required(202048)),
          Key("hidden_size", ("d_model",), INT, Required(5120)),
          Key("intermediate_size", ("moe_d_ff",), INT, Required(8192)),
          Key("intermediate_size_mlp", ("d_ff",), INT, Required(16384)),
          Key("num_hidden_layers", ("num_layers",), INT, Required(48)),
          Key("num_attention_heads", ("num_heads",), INT, Required(40)),
          Key("max_position_embeddings", ("context_length",), INT, Required(131072)),
          # Llama4TextConfig types both int: null is refused (StrictDataclass), issue 32
          Key("num_key_value_heads", ("num_kv_heads",), INT, Required(8)),
          Key("head_dim", ("head_dim",), INT, Required(128)),
          Key("num_local_experts", ("num_experts",), INT, Required(16)),
          Key("num_experts_per_tok", ("experts_per_token",), INT, Required(1)),
          Key("hidden_act", ("mlp",), CHOICE, "silu", GATED_ACTS),
          Key("rms_norm_eps", ("norm_eps",), EPS, 1e-5),
          Key("tie_word_embeddings", ("tie_embeddings",), BOOL, False),
          # Llama4TextConfig.default_theta
          Key("rope_theta", ("rope_theta",), THETA, 500000.0,
              aliases=("rope_parameters.rope_theta", "rope_scaling.rope_theta")),
          ATTENTION_BIAS,
          Key("moe_layers", (), LIST, None),
          Key("interleave_moe_layer_step", (), INT, 1),
          Key("no_rope_layers", (), LIST, None),
          Key("no_rope_layer_interval", (), INT, 4),
          # null: transformers' Llama4TextModel builds the chunked mask on every forward
          # (create_chunked_causal_mask raises without it), so it is an INT here
          Key("attention_chunk_size", (), INT, 8192),
          Key("layer_types", (), LIST, None),
          Key("use_qk_norm", (), BOOL, True),
          Key("attn_temperature_tuning", (), BOOL, True),
          Key("floor_scale", (), INT, 8192),
          Key("attn_scale", (), THETA, 0.1)),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, mlp_bias=False, router="sigmoid", router_topk_first=True,
                                router_scales_input=True, norm_topk_prob=False,
                                num_shared_experts=1, router_bias=False,
                                routed_scaling_factor=1.0)),
    rules="MoE layers (Llama4TextMoe) of intermediate_size-wide experts and one shared expert "
          "of the same width; the router (an nn.Linear without bias) takes the top-k raw "
          "scores and a sigmoid of them (Llama4Router), which scales each expert's input, and "
          "every expert runs every token (the unchosen at weight 0); dense layers of "
          "intermediate_size_mlp; no RoPE on no_rope_layers' 0s; chunked attention per "
          "layer_types; a weightless RMS QK-norm after RoPE on RoPE layers (Llama4TextL2Norm); "
          "temperature tuning of the NoPE layers' queries (modeling_llama4.py)",
    names=LLAMA4_NAMES, must=ROPE_MUST, noted=(ATTENTION_DROPOUT,) + ROUTER_NOTES,
    # for_llm_compressor, cache_implementation: Meta's files carry them; no count
    free=ROUTER_FREE | {"for_llm_compressor", "cache_implementation"},
    derived=(Derived(("dense_layers", "nope_layers", "qk_norm", "attention_chunk",
                      "layer_types", "temperature_floor", "temperature_scale"),
                     ("num_hidden_layers", "moe_layers", "interleave_moe_layer_step",
                      "no_rope_layers", "no_rope_layer_interval", "layer_types",
                      "attention_chunk_size", "use_qk_norm", "attn_temperature_tuning",
                      "floor_scale", "attn_scale"), _llama4_layers,
                     "MoE on moe_layers (default every interleave_moe_layer_step-th); NoPE "
                     "where no_rope_layers is 0 (default every no_rope_layer_interval-th); "
                     "chunked attention per layer_types (default on RoPE layers); QK-norm on "
                     "RoPE layers, temperature tuning on NoPE layers (configuration_llama4.py, "
                     "modeling_llama4.py)", _llama4_keys),),
)

register(HFType("llama4_text", "Llama4ForCausalLM", **_TEXT))

# The multimodal file: transformers' AutoModelForCausalLM builds Llama4ForCausalLM from its
# text_config alone (the vision tower and projector are Llama4ForConditionalGeneration's).
register(HFType("llama4", "Llama4ForCausalLM", **_TEXT, nested="text_config",
                outer=frozenset({"vision_config", "boi_token_index", "eoi_token_index",
                                 "image_token_index", "tie_word_embeddings"})))
