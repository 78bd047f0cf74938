"""InternVL's vision tower (issue 41): InternViT and the pixel-shuffle MLP projector, read
from an internvl config.json's vision_config (transformers 5.23.0's modeling_internvl.py,
configuration_internvl.py). Registered in accounting/architecture/vision.py's READERS on
import (hf_types_vlm.py imports it).

InternVLVisionModel (model.vision_tower): embeddings.cls_token (d), position_embeddings
((image_size/p)² + 1 rows, with use_absolute_position_embeddings), patch_embeddings.projection
Conv2d(C, d, p, stride p, bias); num_hidden_layers InternVLVisionLayer: layernorm_before and
layernorm_after (norm_type: LayerNorm with bias, or RMSNorm), attention q/k/v_proj (bias with
attention_bias), q_norm and k_norm (RMSNorm of d, with use_qk_norm), projection_layer (bias),
mlp fc1/fc2 (bias), the layer scales lambda_1 and lambda_2 (d each); a final LayerNorm only
without use_mean_pooling. get_image_features drops the class token, pixel-shuffles by
downsample_ratio (0.5: r = 2) and InternVLMultiModalProjector maps it: layer_norm (r²·d),
linear_1 (r²·d → text), act, linear_2 (text → text), biased. Each tile is image_size².
"""
from __future__ import annotations

from typing import Mapping

from accounting.runtime.errors import UsageError
from accounting.architecture.vision import VisionSpec, _get, _keys, _section, reader

_INTERNVIT_KEYS = frozenset({"hidden_size", "num_hidden_layers", "num_attention_heads",
                             "attention_bias", "use_qk_norm", "intermediate_size", "hidden_act",
                             "norm_type", "image_size", "patch_size", "num_channels",
                             "use_mask_token", "use_absolute_position_embeddings",
                             "layer_scale_init_value", "use_mean_pooling",
                             "hidden_dropout_prob", "projection_dropout"})


def _square(vc: Mapping, key: str, default: int, where: str) -> int:
    """image_size and patch_size: an int or [h, w] (InternVLVisionConfig), square here."""
    v = vc.get(key, default)
    if isinstance(v, (list, tuple)):
        if len(v) != 2 or v[0] != v[1]:
            raise UsageError(f"{where}: vision_config.{key} must be square, got {v!r}")
        v = v[0]
    return _get({key: v}, key, default, where)


@reader("internvl")
def _internvl(data: Mapping, where: str, text: int) -> VisionSpec:
    """InternVLVisionConfig's defaults (1,024 wide, 24 layers, 16 heads, MLP 4,096, image
    448, patch 14, layer_norm) where vision_config omits a key; downsample_ratio 0.5."""
    vc = _section(data, where)
    _keys(vc, where, _INTERNVIT_KEYS)
    if vc.get("use_mask_token", False):
        raise UsageError(f"{where}: vision_config.use_mask_token true adds a pretraining mask "
                         f"token the tool does not count")
    if data.get("vision_feature_select_strategy", "default") != "default":
        raise UsageError(f"{where}: vision_feature_select_strategy must be default (the class "
                         f"token dropped before the pixel shuffle)")
    layer = data.get("vision_feature_layer", -1)
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise UsageError(f"{where}: vision_feature_layer must be one layer index")
    if data.get("downsample_ratio", 0.5) != 0.5:
        raise UsageError(f"{where}: downsample_ratio must be 0.5 (InternVL's pixel shuffle)")
    norm = {"layer_norm": "layernorm", "rms_norm": "rmsnorm"}.get(vc.get("norm_type", "layer_norm"))
    if norm is None:
        raise UsageError(f"{where}: vision_config.norm_type must be layer_norm or rms_norm")
    size, patch = _square(vc, "image_size", 448, where), _square(vc, "patch_size", 14, where)
    side = size // patch
    if side % 2:
        raise UsageError(f"{where}: the {side} patches a side must be even (the pixel shuffle)")
    positions = side * side + 1 if vc.get("use_absolute_position_embeddings", True) else 0
    return VisionSpec(
        "internvl", _get(vc, "num_hidden_layers", 24, where), _get(vc, "hidden_size", 1024, where),
        _get(vc, "num_attention_heads", 16, where), _get(vc, "intermediate_size", 4096, where),
        False, vc.get("hidden_act", "gelu"), norm, patch, 1, _get(vc, "num_channels", 3, where),
        True, positions, True, False, not vc.get("use_mean_pooling", True), 2, None, (),
        "internvl", True, text, size, (side // 2) ** 2,
        qkv_bias=bool(vc.get("attention_bias", False)), qk_norm=bool(vc.get("use_qk_norm", False)),
        max_tiles=12,  # GotOcr2ImageProcessor's max_patches (processor.py: --processor reads it)
        feature_layer=layer)
