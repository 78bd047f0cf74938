"""Qwen3.5's model_types (issue 31): qwen3_5_text (dense) and qwen3_5_moe_text (experts), and
their vision-language files qwen3_5 and qwen3_5_moe, whose text_config is the language
model; registered on import (hf_config.py imports this module). Read from transformers
5.23.0's configuration_qwen3_5.py, configuration_qwen3_5_moe.py and their modular_*.py.

Qwen3.5 is Qwen3-Next's layout (hf_types_hybrid.py): gated DeltaNet layers 3:1 with gated
full attention, (1 + w) RMSNorm, partial RoPE, and in the MoE model experts with a gated
shared expert, with four differences the rows below read:
  * Qwen3_5GatedDeltaNet splits the input projections: in_proj_qkv, in_proj_z, in_proj_b,
    in_proj_a (the spec's linear_split_proj; the same parameters and FLOPs as in_proj_qkvz
    and in_proj_ba, other module names and LoRA targets);
  * interleaved M-RoPE (rope_parameters.mrope_section, mrope_interleaved): the rotary
    frequencies split in three sections, each turned by its own position id (time, height,
    width). For text-only input the three ids are the same position (Qwen3_5TextModel
    expands one arange to all three), so every rotated pair turns as RoPE's does: the same
    elementwise rotation on the same int(head_dim · partial_rotary_factor) dims, the same
    count. Read, and said in the output;
  * MTP layers (mtp_num_hidden_layers: vLLM's Qwen3_5MultiTokenPredictor, fc 2d → d, two
    pre-fc norms, a full-attention decoder layer, a final norm, embedding and head shared):
    transformers does not build them (Qwen3_5ForCausalLM ignores mtp.* weights), so they are
    the spec's mtp_layers: counted in training, left out at inference and of the parameter
    count (accounting/analysis/mtp.py);
  * qwen3_5_text has a dense SwiGLU MLP in every layer (Qwen3_5DecoderLayer);
    qwen3_5_moe_text experts in every layer (no decoder_sparse_step or mlp_only_layers:
    Qwen3_5MoeTextConfig deletes them) with the top-k renormalised (Qwen3VLMoeTextTopKRouter).
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from accounting.runtime.errors import UsageError
from accounting.architecture.hf_schema import (
    BOOL, INT, LIST, LLAMA_FAMILY, NONNEG, ATTENTION_DROPOUT, TYPES, HFType, Key, ModuleNames,
    Must, Noted, Derived, Required, head_dim, kv_heads, register, rope_must)
from accounting.architecture.hf_types_hybrid import QWEN3_NEXT_NAMES, _qwen3_next_layers
from accounting.architecture.hf_types_moe import ROUTER_FREE

_NEXT = {k.hf: k for k in TYPES["qwen3_next"].keys}  # the keys Qwen3_5TextConfig shares


def _shared(*names: str) -> tuple[Key, ...]:
    """Qwen3-Next's keys of the same name and default (Qwen3_5TextConfig's fields copy
    Qwen3NextConfig's: modular_qwen3_5.py)."""
    return tuple(_NEXT[n] for n in names)


def _sizes(hidden: int, layers: int, kv: int) -> tuple[Key, ...]:
    return (Key("vocab_size", ("vocab_size",), INT, Required(248320)),
            Key("hidden_size", ("d_model",), INT, Required(hidden)),
            Key("num_hidden_layers", ("num_layers",), INT, Required(layers)),
            Key("num_attention_heads", ("num_heads",), INT, Required(16)),
            Key("max_position_embeddings", ("context_length",), INT, Required(32768)),
            kv_heads(Required(kv), INT), head_dim(Required(256), INT))


_COMMON = _shared("attention_bias", "hidden_act", "rms_norm_eps", "tie_word_embeddings",
                  "rope_theta", "partial_rotary_factor", "linear_conv_kernel_dim",
                  "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads",
                  "linear_num_value_heads", "full_attention_interval", "layer_types") + (
    # not a transformers key: vLLM's and SGLang's MTP modules (absent: none)
    Key("mtp_num_hidden_layers", ("mtp_layers",), NONNEG, 0),
    Key("rope_parameters.mrope_section", (), LIST, None, aliases=("rope_scaling.mrope_section",)),
    Key("rope_parameters.mrope_interleaved", (), BOOL, False,
        aliases=("rope_scaling.mrope_interleaved",)))


def _layers(v: Mapping, where: str):
    """Qwen3-Next's rule (layer_types, else every full_attention_interval-th layer full
    attention; RoPE on int(head_dim · partial_rotary_factor) dims), with experts in every
    layer where there are any; the M-RoPE sections and the MTP block checked."""
    E = v.get("num_experts", 0)
    fields, notes = _qwen3_next_layers({**v, "num_experts": E, "decoder_sparse_step": 1,
                                        "mlp_only_layers": None}, where)
    rotary = fields.get("rotary_dim", v["head_dim"])
    section = v["rope_parameters.mrope_section"]
    if section is not None:
        if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in section) \
                or sum(section) != rotary // 2:
            raise UsageError(f"{where}: rope_parameters.mrope_section {section} must be "
                             f"non-negative integers adding up to {rotary // 2}, the rotary "
                             f"frequencies (int(head_dim · partial_rotary_factor) / 2)")
        notes += (f"M-RoPE (mrope_section {section}, "
                  f"{'interleaved' if v['rope_parameters.mrope_interleaved'] else 'in blocks'}): "
                  f"for text-only input the sections' three position ids are one position, so "
                  f"the rotary FLOPs are RoPE's on {rotary} dims per head; image and video "
                  f"tokens change the angles, not the count.",)
    if v["mtp_num_hidden_layers"] and "linear_attention" == fields["layer_types"][-1]:
        raise UsageError(f"{where}: the MTP layers are full-attention layers "
                         f"(Qwen3_5MultiTokenPredictor) and the spec counts an MTP block as the "
                         f"last layer, here linear_attention: not expressible; drop "
                         f"mtp_num_hidden_layers to count the model without them")
    if v["mtp_num_hidden_layers"] > 1:
        raise UsageError(f"{where}: mtp_num_hidden_layers {v['mtp_num_hidden_layers']}: "
                         f"Qwen3.5's MTP layers share one fc and its norms "
                         f"(Qwen3_5MultiTokenPredictor) where the spec's MTP modules each have "
                         f"their own; give 1 (every published Qwen3.5) or 0")
    if v["mtp_num_hidden_layers"]:
        notes += (f"mtp_num_hidden_layers {v['mtp_num_hidden_layers']}: multi-token-prediction "
                  f"layers transformers does not build (vLLM's Qwen3_5MultiTokenPredictor: fc "
                  f"2d → d, two norms, a full-attention decoder layer, a final norm): counted "
                  f"in training and apart from the parameter count, left out at inference.",)
    return fields, notes


def _write(c) -> Mapping | None:
    """The keys that mean a config's layers (flags on a Qwen3.5 config.json, written back
    for transformers' cross-check): layer_types, RoPE's dims as partial_rotary_factor, the
    experts and the shared expert's width; None where the row cannot mean the config."""
    kinds = {"linear_attention": "linear_attention", "global": "full_attention"}
    types = c.layer_types or ("global",) * c.num_layers
    rotary = c.rotary_dim or c.d_k
    if any(t not in kinds for t in types) or c.dense_layers or \
            int(c.d_k * (rotary / c.d_k)) != rotary:
        return None
    out = {"layer_types": [kinds[t] for t in types], "partial_rotary_factor": rotary / c.d_k}
    if c.num_experts is not None:
        if not (c.shared_expert_gate and c.num_shared_experts):
            return None
        out.update(num_experts=c.num_experts,
                   shared_expert_intermediate_size=c.num_shared_experts * c.expert_d_ff)
    return out


_DERIVED_KEYS = ("num_hidden_layers", "layer_types", "full_attention_interval", "head_dim",
                 "partial_rotary_factor", "rope_parameters.mrope_section",
                 "rope_parameters.mrope_interleaved", "mtp_num_hidden_layers")
_DERIVED_WORDS = ("linear_attention layers: layer_types, else those where (i + 1) % "
                  "full_attention_interval ≠ 0; RoPE on int(head_dim · partial_rotary_factor) "
                  "dims, M-RoPE's sections one position for text (Qwen3_5TextConfig, "
                  "Qwen3_5TextRotaryEmbedding)")

_NAMES = ModuleNames(
    blocks=QWEN3_NEXT_NAMES.blocks,
    block=MappingProxyType({
        **{k: v for k, v in QWEN3_NEXT_NAMES.block.items()
           if k not in ("linear_attn.in_proj_qkvz", "linear_attn.in_proj_ba")},
        **{f"linear_attn.in_proj_{n}": f"linear_attn.in_proj_{n}" for n in ("qkv", "z", "b", "a")}}),
    top=QWEN3_NEXT_NAMES.top)

_MUST = rope_must(partial=True) + (
    # Qwen3NextAttention builds the gate whatever the key says (transformers reads no such key)
    Must("attn_output_gate", lambda v, d: v is not False, "true (or absent)",
         "attention without its output gate, which transformers' Qwen3_5Attention builds "
         "regardless (so its count and this file's reader would differ)", True),
    Must("mtp_use_dedicated_embeddings", lambda v, d: not v, "false (or absent)",
         "MTP layers with an embedding of their own, which the MTP count does not include",
         False))
_NOTED = (ATTENTION_DROPOUT,
          Noted("mamba_ssm_dtype", lambda v: v in (None, "float32"),
                "{settings}: the recurrent state's cache dtype in vLLM; the tool keeps it in "
                "float32, as transformers' torch path computes and caches it"))
_RULES = ("Qwen3-Next's layout (qwen3_next): (1 + w) RMSNorm, gated attention with the "
          "per-head QK-norm and partial RoPE (interleaved M-RoPE: one position for text), "
          "gated DeltaNet layers with split input projections in_proj_qkv, in_proj_z, "
          "in_proj_b, in_proj_a (Qwen3_5GatedDeltaNet, chunk 64)")
_FIXED = dict(LLAMA_FAMILY, norm_offset=True, qk_norm="head", attn_output_gate=True,
              mlp_bias=False, linear_chunk=64, linear_split_proj=True)

register(HFType(
    "qwen3_5_text", "Qwen3_5ForCausalLM",
    keys=_sizes(4096, 32, 4) + (Key("intermediate_size", ("d_ff",), INT, Required(12288)),)
    + _COMMON,
    fixed=MappingProxyType(_FIXED),
    rules=_RULES + "; a SwiGLU MLP in every layer (Qwen3_5DecoderLayer, Qwen3_5MLP)",
    names=_NAMES, must=_MUST, noted=_NOTED,
    # Qwen3_5TextConfig deletes mlp_only_layers (every layer dense); the published files
    # still write it, empty
    free=frozenset({"mlp_only_layers"}),
    derived=(Derived(("layer_types", "rotary_dim"), _DERIVED_KEYS, _layers, _DERIVED_WORDS,
                     _write),),
))

register(HFType(
    "qwen3_5_moe_text", "Qwen3_5MoeForCausalLM",
    # no dense MLP (Qwen3_5MoeTextConfig deletes intermediate_size): d_ff is the experts'
    # width, as Mixtral's, not the spec's default
    keys=_sizes(2048, 40, 2) + (Key("moe_intermediate_size", ("d_ff", "moe_d_ff"), INT, 512),)
    + _shared("shared_expert_intermediate_size") + (
        Key("num_experts", (), INT, 256),
        Key("num_experts_per_tok", ("experts_per_token",), INT, 8)) + _COMMON,
    fixed=MappingProxyType(dict(_FIXED, router="softmax", router_bias=False,
                                routed_scaling_factor=1.0, norm_topk_prob=True)),
    rules=_RULES + "; experts in every layer with a softmax router whose top-k is "
                   "renormalised (Qwen3VLMoeTextTopKRouter) and a shared expert gated by "
                   "sigmoid(shared_expert_gate(x)) (Qwen3_5MoeSparseMoeBlock)",
    names=_NAMES, noted=_NOTED,
    must=_MUST + (Must("mlp_only_layers", lambda v, d: not v, "empty (or absent)",
                       "dense layers, which Qwen3_5MoeDecoderLayer does not build (it puts "
                       "the experts in every layer)", None),),
    free=ROUTER_FREE,
    derived=(Derived(("layer_types", "rotary_dim", "num_experts", "num_shared_experts",
                      "shared_expert_gate", "dense_layers"),
                     _DERIVED_KEYS + ("num_experts", "shared_expert_intermediate_size",
                                      "moe_intermediate_size"), _layers,
                     _DERIVED_WORDS + "; experts in every layer, the shared expert as "
                                      "shared/moe intermediate_size experts, gated", _write),),
    experts_implementation="batched_mm",
))

# The vision-language files: transformers' AutoModelForCausalLM builds Qwen3_5ForCausalLM
# (Qwen3_5MoeForCausalLM) from text_config alone ("VLM compatibility", modeling_auto.py),
# its head tied by text_config.tie_word_embeddings; the vision tower (Qwen3_5VisionModel,
# model.visual) is Qwen3_5ForConditionalGeneration's, read by accounting/architecture/vision.py.
_OUTER = frozenset({"vision_config", "image_token_id", "video_token_id",
                    "vision_start_token_id", "vision_end_token_id", "tie_word_embeddings"})
for _mt in ("qwen3_5", "qwen3_5_moe"):
    _text = TYPES[f"{_mt}_text"]
    register(HFType(_mt, _text.transformers_class, keys=_text.keys, fixed=_text.fixed,
                    rules=_text.rules + "; the vision tower (Qwen3_5VisionModel, model.visual: "
                    "vision_config's depth blocks and its merger into hidden_size) is "
                    "Qwen3_5ForConditionalGeneration's, counted beside the language model "
                    "(accounting/architecture/vision.py)", names=_text.names, must=_text.must, noted=_text.noted,
                    free=_text.free, derived=_text.derived,
                    experts_implementation=_text.experts_implementation,
                    nested="text_config", outer=_OUTER))
