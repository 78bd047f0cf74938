"""Vision-language wrappers whose language model is a row of the table (issue 41): qwen2_vl
and qwen2_5_vl (Qwen2-VL, Qwen2.5-VL: a Qwen2 language model with M-RoPE), qwen3_vl and
qwen3_vl_moe (Qwen3-VL: Qwen3 / Qwen3-MoE with interleaved M-RoPE), llava (a
Llama/Mistral/Qwen2 text_config), mistral3 (Mistral 3: a Mistral text_config, Pixtral's
tower), idefics3 and smolvlm (a Llama text_config, SigLIP and a pixel-shuffle connector)
internvl (a Qwen2 text_config, InternViT and a pixel-shuffle MLP projector) and
llava_onevision (a Qwen2 text_config, SigLIP, anyres tiles and LLaVA's projector). The language model is read as a config.json of its type;
the vision tower from vision_config (accounting/architecture/vision.py), counted beside it.
Defaults and rules from transformers 5.23.0's configuration_qwen2_vl.py,
configuration_qwen2_5_vl.py and configuration_llava.py.
"""
from __future__ import annotations

from typing import Mapping

from accounting.runtime.errors import UsageError
# the readers of mistral3's, idefics3's and smolvlm's towers (registered on import)
from accounting.architecture import (  # noqa: F401
    vision_idefics3, vision_internvl, vision_onevision, vision_pixtral)
from accounting.architecture.hf_schema import (
    TYPES, WRAPPERS, Required, carry_dtype, check_wrapper_keys, short)

# Qwen2VLConfig / Qwen2_5_VLConfig's own keys (the token ids the processor's placeholders use)
_QWEN_OUTER = frozenset({"vision_config", "image_token_id", "video_token_id",
                         "vision_start_token_id", "vision_end_token_id", "vision_token_id",
                         "tie_word_embeddings", "text_config"})


def _mrope(rope) -> tuple[object, str | None]:
    """M-RoPE (rope type "mrope" or an mrope_section): Qwen2-VL's rotary embedding rotates
    each head's d_k dims with cos/sin built from the temporal, height and width positions in
    mrope_section's slices (apply_multimodal_rotary_pos_emb); for every token the same
    q·cos + rotate_half(q)·sin as RoPE, so the same count. Returns the setting the qwen2
    row reads (the section dropped, the type default) and a note."""
    if not isinstance(rope, dict):
        return rope, None
    kind = rope.get("rope_type", rope.get("type"))
    if kind != "mrope" and "mrope_section" not in rope:
        return rope, None
    plain = {k: v for k, v in rope.items() if k not in ("mrope_section", "type", "rope_type",
                                                        "mrope_interleaved")}
    plain["rope_type"] = "default"
    return plain, (f"M-RoPE (mrope_section {short(rope.get('mrope_section'))}): the rotation "
                   f"of RoPE on each head, its cos/sin from three position ids (the same count).")


def _qwen_vl(outer_type: str, text_type: str, inner_type: str = "qwen2"):
    """Qwen2VLConfig/Qwen2_5_VLConfig.__post_init__: text_config, or (Hub files saved flat)
    the top-level keys Qwen2VLTextConfig/Qwen2_5_VLTextConfig take; read as a qwen2 config
    (Qwen2_5_VLTextModel's decoder layers are Qwen2's: q/k/v biased, o_proj not). Qwen3-VL's
    text_config as qwen3 (Qwen3VLTextDecoderLayer: Qwen3's, QK-norm per head) and Qwen3-VL-MoE's
    as qwen3_moe (Qwen3VLMoeTextSparseMoeBlock: a softmax router, top-k renormalised, no
    shared expert); their deepstack adds (the visual features added to the first layers'
    hidden states) are elementwise, no matmul."""
    def unwrap(data: Mapping, where: str) -> tuple[dict, tuple[str, ...]]:
        text = data.get("text_config")
        if text is not None:
            if not isinstance(text, dict) or text.get("model_type", text_type) != text_type:
                raise UsageError(f"{where}: text_config must be the language model's config "
                                 f"(model_type {text_type}), got {short(text)}")
            check_wrapper_keys({k: v for k, v in data.items() if k != "text_config"}, where,
                               _QWEN_OUTER)
            inner = dict(text)
        else:  # flat: every key not the wrapper's own is the text config's
            inner = {k: v for k, v in data.items() if k not in _QWEN_OUTER}
        inner["model_type"] = inner_type
        carry_dtype(data, inner)
        notes = []
        for key in ("rope_scaling", "rope_parameters"):
            if key in inner:
                inner[key], said = _mrope(inner[key])
                if said:
                    notes.append(said)
        if inner.get("use_mrope") is not None:
            inner.pop("use_mrope")
        tie = data.get("tie_word_embeddings", inner.get("tie_word_embeddings", False))
        inner["tie_word_embeddings"] = tie
        if "vision_config" not in data:
            raise UsageError(f"{where}: no vision_config: transformers would build its default "
                             f"tower; give the checkpoint's vision_config")
        notes.insert(0, f"model_type {outer_type}: the language model read as model_type "
                        f"{inner_type} ({TYPES[inner_type].transformers_class}'s decoder "
                        f"layers); the vision tower and its merger(s) from vision_config, "
                        f"counted beside it (parameters.vision); transformers' cross-check "
                        f"covers the language model.")
        return inner, tuple(notes)
    return unwrap


WRAPPERS["qwen2_vl"] = _qwen_vl("qwen2_vl", "qwen2_vl_text")
WRAPPERS["qwen2_5_vl"] = _qwen_vl("qwen2_5_vl", "qwen2_5_vl_text")
WRAPPERS["qwen3_vl"] = _qwen_vl("qwen3_vl", "qwen3_vl_text", "qwen3")
WRAPPERS["qwen3_vl_moe"] = _qwen_vl("qwen3_vl_moe", "qwen3_vl_moe_text", "qwen3_moe")


# LlavaConfig (configuration_llava.py): text_config (default llama), vision_config (CLIP),
# the projector's keys
_LLAVA_OUTER = frozenset({"text_config", "vision_config", "image_token_index", "image_token_id",
                          "projector_hidden_act", "vision_feature_select_strategy",
                          "vision_feature_layer", "image_seq_length",
                          "multimodal_projector_bias", "tie_word_embeddings"})


def _llava(data: Mapping, where: str) -> tuple[dict, tuple[str, ...]]:
    check_wrapper_keys(data, where, _LLAVA_OUTER)
    text = data.get("text_config")
    if not isinstance(text, dict) or text.get("model_type", "llama") not in TYPES:
        raise UsageError(f"{where}: text_config must be a language model's config object of a "
                         f"supported model_type, got {short(text)}")
    inner = {**text, "model_type": text.get("model_type", "llama")}
    carry_dtype(data, inner)
    # LlavaConfig builds text_config with its config class's defaults, and shipped files rely
    # on them (llava-1.5-7b-hf's text_config gives vocab_size and a few more): as gemma3's
    filled = []
    for key in TYPES[inner["model_type"]].keys:
        if isinstance(key.default, Required) and key.hf not in inner:
            inner[key.hf] = key.default.transformers_default
            filled.append(f"{key.hf} {key.default.transformers_default!r}")
    act = data.get("projector_hidden_act", "gelu")
    if act not in ("gelu", "gelu_pytorch_tanh", "gelu_new", "silu", "quick_gelu", "relu"):
        raise UsageError(f"{where}: projector_hidden_act {short(act)} is not an activation the "
                         f"tool knows for LlavaMultiModalProjector")
    return inner, (f"model_type llava: the language model read from text_config as model_type "
                   f"{inner['model_type']}; the CLIP tower and the projector from vision_config, "
                   f"counted beside it (parameters.vision); transformers' cross-check covers "
                   f"the language model.",) + ((
        f"text_config omits {', '.join(filled)}: the text config class's defaults, as "
        f"transformers builds LlavaConfig's text_config.",) if filled else ())


WRAPPERS["llava"] = _llava


# Mistral3Config (configuration_mistral3.py): text_config (default mistral), vision_config
# (Pixtral, accounting/architecture/vision_pixtral.py), the projector's and merger's keys;
# Idefics3Config and SmolVLMConfig (configuration_idefics3.py, configuration_smolvlm.py):
# text_config (default llama), vision_config (SigLIP, vision_idefics3.py), scale_factor
_MISTRAL3_OUTER = frozenset({"text_config", "vision_config", "image_token_index",
                             "image_token_id", "projector_hidden_act", "vision_feature_layer",
                             "multimodal_projector_bias", "spatial_merge_size",
                             "tie_word_embeddings"})
_IDEFICS3_OUTER = frozenset({"text_config", "vision_config", "image_token_id", "scale_factor",
                             "tie_word_embeddings", "use_cache", "pad_token_id"})
# InternVLConfig (configuration_internvl.py): text_config (default qwen2), vision_config
# (InternViT, vision_internvl.py), the pixel shuffle's and projector's keys
_INTERNVL_OUTER = frozenset({"text_config", "vision_config", "image_token_id",
                             "image_seq_length", "downsample_ratio", "projector_hidden_act",
                             "vision_feature_layer", "vision_feature_select_strategy",
                             "tie_word_embeddings"})
# LlavaOnevisionConfig (configuration_llava_onevision.py): text_config (default qwen2),
# vision_config (SigLIP, vision_onevision.py), anyres and the projector's keys
_ONEVISION_OUTER = frozenset({"text_config", "vision_config", "image_token_index",
                              "video_token_index", "image_token_id", "video_token_id",
                              "projector_hidden_act", "vision_feature_select_strategy",
                              "vision_feature_layer", "multimodal_projector_bias",
                              "tie_word_embeddings", "image_grid_pinpoints",
                              "vision_aspect_ratio", "use_image_newline_parameter"})
_ACTS = ("gelu", "gelu_pytorch_tanh", "gelu_new", "silu", "quick_gelu", "relu")


def _tower_wrapper(model_type: str, outer: frozenset, text_default: str, tie_default: bool,
                   what: str):
    """A wrapper whose language model is text_config (its own model_type, `text_default`
    by default) and whose LM head is tied as the wrapper's tie_word_embeddings says
    (transformers 5.23 ties by it whatever text_config says: Mistral3ForConditionalGeneration
    with the default true, Idefics3/SmolVLM with the default false, measured on the meta
    device)."""
    def unwrap(data: Mapping, where: str) -> tuple[dict, tuple[str, ...]]:
        check_wrapper_keys(data, where, outer)
        text = data.get("text_config")
        if not isinstance(text, dict) or text.get("model_type", text_default) not in TYPES:
            raise UsageError(f"{where}: text_config must be a language model's config object "
                             f"of a supported model_type, got {short(text)}")
        if data.get("projector_hidden_act", "gelu") not in _ACTS:
            raise UsageError(f"{where}: projector_hidden_act "
                             f"{short(data.get('projector_hidden_act'))} is not an activation "
                             f"the tool knows for the projector")
        inner = {**text, "model_type": text.get("model_type", text_default)}
        carry_dtype(data, inner)
        tie = data.get("tie_word_embeddings", tie_default)
        if not isinstance(tie, bool):
            raise UsageError(f"{where}: tie_word_embeddings must be true or false")
        notes = [f"model_type {model_type}: the language model read from text_config as "
                 f"model_type {inner['model_type']}; {what} from vision_config, counted beside "
                 f"it (parameters.vision)."]
        if inner.get("tie_word_embeddings", tie) != tie:
            notes.append(f"tie_word_embeddings {str(tie).lower()} (the wrapper's"
                         f"{'' if 'tie_word_embeddings' in data else ' default'}) decides the "
                         f"LM head, as transformers 5.23 builds the model; text_config's value "
                         f"is not used.")
        inner["tie_word_embeddings"] = tie
        return inner, tuple(notes)
    return unwrap


WRAPPERS["mistral3"] = _tower_wrapper("mistral3", _MISTRAL3_OUTER, "mistral", True,
                                      "the Pixtral tower, patch merger and projector")
for _mt in ("idefics3", "smolvlm"):
    WRAPPERS[_mt] = _tower_wrapper(_mt, _IDEFICS3_OUTER, "llama", False,
                                   "the SigLIP tower and the pixel-shuffle connector")
WRAPPERS["internvl"] = _tower_wrapper("internvl", _INTERNVL_OUTER, "qwen2", True,
                                      "InternViT and the pixel-shuffle MLP projector")
WRAPPERS["llava_onevision"] = _tower_wrapper(
    "llava_onevision", _ONEVISION_OUTER, "qwen2", False,
    "the SigLIP tower, the MLP projector and image_newline")
