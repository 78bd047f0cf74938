"""Moonshot AI's Kimi model_types (issue 31): kimi_k2 (Kimi-K2: DeepSeek-V3's architecture
under its own model_type), kimi_k25 (Kimi-K2.5: K2's language model in a vision-language
wrapper, INT4 experts) and kimi_linear (Kimi Linear: Kimi Delta Attention beside latent
attention). Registered on import (hf_config.py imports this module). Rules from transformers
5.23.0's models/deepseek_v3, models/kimi_k25 and models/kimi_linear.
"""
from __future__ import annotations

from typing import Mapping

from accounting.formats.hf_quant import scheme_from_config
from accounting.runtime.errors import UsageError
from accounting.spec.hf_schema import (COMMON_FREE, COMMON_MUST, FREE_VALUES, REFUSED, WRAPPERS,
                                       short)

# ---- kimi_k2 (moonshotai/Kimi-K2-Instruct, Kimi-K2-Base, Kimi-K2-Thinking) -------------------
# The Hub file names model_type kimi_k2 with auto_map (Moonshot's configuration_deepseek.py /
# modeling_deepseek.py: DeepSeek-V3's code) and architectures DeepseekV3ForCausalLM;
# transformers 5.23 has no kimi_k2 type and builds the file as deepseek_v3 (Kimi_K25Config's
# __post_init__ does the same for K2.5's text_config: "kimi_k2" -> "deepseek_v3"). So does the
# tool: every key is read by deepseek_v3's row (hf_types_moe.py), which judges them all.
_K2_SAID = ("model_type kimi_k2: DeepSeek-V3's architecture (Moonshot's code is DeepSeek-V3's "
            "modeling_deepseek.py), read as model_type deepseek_v3, the class transformers 5.23 "
            "builds (DeepseekV3ForCausalLM).")


def _unwrap_kimi_k2(data: Mapping, where: str) -> tuple[dict, tuple[str, ...]]:
    return {**data, "model_type": "deepseek_v3"}, (_K2_SAID,)


WRAPPERS["kimi_k2"] = _unwrap_kimi_k2


# ---- kimi_k25 (moonshotai/Kimi-K2.5): K2's text model with a MoonViT tower ---------------------
# Kimi_K25Config (configuration_kimi_k25.py): text_config (a deepseek_v3 config; "kimi_k2"
# read as it), vision_config (Kimi_K25VisionConfig), the projector's sizes and token ids.
# Kimi_K25ForConditionalGeneration builds Kimi_K25Model (vision_tower, language_model =
# AutoModel(text_config), mm_projector) and lm_head, tied to the embedding by the TOP-LEVEL
# tie_word_embeddings (Kimi_K25Config's default True; _tied_weights_keys; measured: the
# published file's false gives K2's untied 1,026,408,209,408 language-model parameters).
_K25_OUTER = frozenset({
    "text_config", "vision_config", "tie_word_embeddings", "projection_hidden_size",
    "projection_layer_norm_eps", "image_token_id", "video_token_id", "vision_start_token_id",
    "vision_end_token_id",
    # Moonshot's own configuration_kimi_k25.py (auto_map): placeholders and the vision
    # chunking of its processor, no module of the language model
    "media_placeholder_token_id", "video_placeholder", "use_unified_vision_chunk",
    "ignore_index"})


def _unwrap_kimi_k25(data: Mapping, where: str) -> tuple[dict, tuple[str, ...]]:
    for k, why in REFUSED.items():
        if data.get(k) is not None:
            raise UsageError(f"{where}: {k} = {short(data[k])} at the top level is {why}; "
                             f"refusing rather than dropping it")
    known = COMMON_FREE | _K25_OUTER | {m.hf for m in COMMON_MUST}
    unknown = sorted(k for k in data if k not in known)
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(short(k, 30) for k in unknown[:4])}"
                         f": the tool cannot tell whether they change a count of the language "
                         f"model, so it refuses rather than drop them")
    for m in COMMON_MUST:
        if not m.ok(data.get(m.hf, m.default), data):
            raise UsageError(f"{where}: {m.hf} = {short(data.get(m.hf))} means {m.what}")
    for k, (ok, wanted) in FREE_VALUES.items():
        if k in data and not ok(data[k]):
            raise UsageError(f"{where}: {k} = {short(data[k])} is not {wanted}")
    text = data.get("text_config")
    if not isinstance(text, dict) or text.get("model_type", "deepseek_v3") not in (
            "deepseek_v3", "kimi_k2"):
        raise UsageError(f"{where}: text_config must be the language model's config object "
                         f"(model_type kimi_k2 or deepseek_v3), got {short(text)}; transformers "
                         f"would otherwise build its default DeepseekV3Config")
    inner = {**text, "model_type": "deepseek_v3"}
    for k in ("torch_dtype", "dtype"):  # the checkpoint's dtype, given once for the whole model
        if k in data and k not in inner:
            inner[k] = data[k]
    tie = data.get("tie_word_embeddings", True)  # Kimi_K25Config's default
    if "tie_word_embeddings" in inner and inner["tie_word_embeddings"] != tie:
        raise UsageError(f"{where}: tie_word_embeddings {short(tie)}"
                         f"{'' if 'tie_word_embeddings' in data else ' (absent: Kimi_K25Config default)'}"
                         f" contradicts text_config's {short(inner['tie_word_embeddings'])}; "
                         f"transformers ties by the top-level key, so give one value")
    inner["tie_word_embeddings"] = tie
    notes = ["model_type kimi_k25: the language model of Kimi-K2.5's vision-language config, "
             "read from its text_config as model_type deepseek_v3 (K2's); the MoonViT vision "
             "tower and the multimodal projector (vision_config, projection_hidden_size) are "
             "not counted, and transformers' cross-check builds DeepseekV3ForCausalLM from "
             "text_config (AutoModelForImageTextToText would build "
             "Kimi_K25ForConditionalGeneration, vision included)."]
    quant = inner.pop("quantization_config", None)
    if quant is not None:
        scheme = scheme_from_config(quant)  # exit 2 for one the formats cannot lay out
        notes.append(f"text_config.quantization_config: the checkpoint stores its weights as "
                     f"{scheme.label}, except {', '.join(scheme.ignore) or 'none'}; the counts "
                     f"are of the model's parameters as transformers builds them (dense tensors "
                     f"of the config's shapes); 'serve' reads the stored bytes.")
    return inner, tuple(notes)


WRAPPERS["kimi_k25"] = _unwrap_kimi_k25


def checkpoint_quantization(data: Mapping):
    """A config.json's quantization_config: at the top, else a Kimi-K2.5 file's text_config's
    (its language model's weights are the quantized ones)."""
    if data.get("quantization_config") is not None or data.get("model_type") != "kimi_k25":
        return data.get("quantization_config")
    text = data.get("text_config")
    return text.get("quantization_config") if isinstance(text, dict) else None
