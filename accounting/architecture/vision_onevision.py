"""LLaVA-OneVision's vision tower (issue 41): SigLIP, LLaVA's MLP projector and the
image_newline embedding, read from a llava_onevision config.json (transformers 5.23.0's
modeling_llava_onevision.py, configuration_llava_onevision.py). Registered in
accounting/architecture/vision.py's READERS on import (hf_types_vlm.py imports it).

LlavaOnevisionModel: vision_tower (SiglipVisionModel: patch_embedding Conv2d with bias,
position_embedding of (image_size/p)² rows, LayerNorm encoder layers with biased q/k/v/out
and fc1/fc2, post_layernorm; the pooling head only with vision_use_head, refused), every
layer run (vision_feature_layer -1, strategy "full": no class token to drop);
multi_modal_projector (linear_1 d → text, act, linear_2 text → text, biased with
multimodal_projector_bias, default true) on every tile's patches; image_newline (text width).
"""
from __future__ import annotations

from typing import Mapping

from accounting.runtime.errors import UsageError
from accounting.architecture.vision import VisionSpec, _get, _int, _keys, _section, reader

_SIGLIP_KEYS = frozenset({"hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "num_channels", "image_size", "patch_size",
                          "hidden_act", "vision_use_head"})
# LlavaOnevisionConfig's default image_grid_pinpoints: every (h, w) of 1 to 6 tiles of 384 a
# side (configuration_llava_onevision.py)
DEFAULT_PINPOINTS = tuple((384 * i, 384 * j) for i in range(1, 7) for j in range(1, 7))


@reader("llava_onevision")
def _onevision(data: Mapping, where: str, text: int) -> VisionSpec:
    """SiglipVisionConfig's defaults (768 wide, 12 layers, 12 heads, MLP 3,072, image 224,
    patch 16) where vision_config omits a key."""
    vc = _section(data, where)
    if vc.get("model_type", "siglip_vision_model") != "siglip_vision_model":
        raise UsageError(f"{where}: vision_config.model_type {vc.get('model_type')!r}: the tool "
                         f"reads LLaVA-OneVision's SigLIP tower only")
    _keys(vc, where, _SIGLIP_KEYS)
    if vc.get("vision_use_head", True):
        raise UsageError(f"{where}: vision_config.vision_use_head (SiglipVisionConfig's default "
                         f"true) builds SigLIP's pooling head, which LLaVA-OneVision does not "
                         f"use; give vision_use_head false, as the published checkpoints do")
    if data.get("vision_feature_layer", -1) != -1 or data.get(
            "vision_feature_select_strategy", "full") != "full":
        raise UsageError(f"{where}: vision_feature_layer -1 and vision_feature_select_strategy "
                         f"full are what the tool reads (LLaVA-OneVision's defaults)")
    aspect = data.get("vision_aspect_ratio", "anyres_max_9")
    if not isinstance(aspect, str) or not aspect.startswith("anyres_max_") \
            or not aspect[len("anyres_max_"):].isdigit():
        raise UsageError(f"{where}: vision_aspect_ratio must be anyres_max_N")
    pins = data.get("image_grid_pinpoints") or DEFAULT_PINPOINTS
    if not isinstance(pins, (list, tuple)) or not pins or any(
            not isinstance(p, (list, tuple)) or len(p) != 2 for p in pins):
        raise UsageError(f"{where}: image_grid_pinpoints must list [height, width] pairs")
    pins = tuple((_int(p[0], "image_grid_pinpoints", where), _int(p[1], "image_grid_pinpoints",
                                                                   where)) for p in pins)
    size, patch = _get(vc, "image_size", 224, where), _get(vc, "patch_size", 16, where)
    if any(h % size or w % size for h, w in pins):
        raise UsageError(f"{where}: every image_grid_pinpoints side must be a multiple of "
                         f"vision_config.image_size {size} (the tiles)")
    return VisionSpec(
        "llava_onevision", _get(vc, "num_hidden_layers", 12, where),
        _get(vc, "hidden_size", 768, where), _get(vc, "num_attention_heads", 12, where),
        _get(vc, "intermediate_size", 3072, where), False,
        vc.get("hidden_act", "gelu_pytorch_tanh"), "layernorm", patch, 1,
        _get(vc, "num_channels", 3, where), True, (size // patch) ** 2, False, False, True, 1,
        None, (), "llava_mlp", bool(data.get("multimodal_projector_bias", True)), text, size,
        None, pinpoints=pins, anyres_max=int(aspect[len("anyres_max_"):]))
