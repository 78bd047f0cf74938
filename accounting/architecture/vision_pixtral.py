"""Mistral 3's vision tower (issue 41): Pixtral's ViT and Mistral3MultiModalProjector, read
from a mistral3 config.json's vision_config (transformers 5.23.0's modeling_pixtral.py,
modeling_mistral3.py, configuration_pixtral.py, configuration_mistral3.py). Registered in
accounting/architecture/vision.py's READERS on import (hf_types_vlm.py imports it).

PixtralVisionModel: patch_conv Conv2d(C, d, p, stride p, no bias) over each image at its own
(resized) size, ln_pre RMSNorm; num_hidden_layers PixtralAttentionLayer: attention_norm and
ffn_norm (RMSNorm), attention q/k/v/o_proj (d → d, no bias, head_dim d/h: PixtralVisionConfig
sets it so), 2D RoPE (PixtralVisionRotaryEmbedding, no table), a gated MLP gate/up/down_proj
(no bias); each image attends within itself (generate_block_attention_mask). Every layer runs
(vision_feature_layer -1). Mistral3MultiModalProjector: norm (RMSNorm of d),
Mistral3PatchMerger (unfold s×s patches, merging_layer d·s² → d, no bias), linear_1 (d → text
width), act, linear_2 (text → text), biased with multimodal_projector_bias (default false).
"""
from __future__ import annotations

from typing import Mapping

from accounting.runtime.errors import UsageError
from accounting.architecture.vision import VisionSpec, _get, _int, _keys, _section, reader

# keys of a Pixtral vision_config that change no count: PixtralVisionConfig overwrites
# head_dim with hidden_size // num_attention_heads; Mistral3Config's default vision_config
# carries a vocab_size the tower never reads
_PIXTRAL_KEYS = frozenset({"hidden_size", "intermediate_size", "num_hidden_layers",
                           "num_attention_heads", "num_channels", "image_size", "patch_size",
                           "hidden_act", "head_dim", "vocab_size"})


@reader("mistral3")
def _mistral3(data: Mapping, where: str, text: int) -> VisionSpec:
    """Mistral3Config's vision_config (PixtralVisionConfig; Mistral3Config's own defaults
    where it omits a key: 1,024 wide, 24 layers, 16 heads, MLP 4,096, patch 14, image_size
    1,540) and its spatial_merge_size (default 2). The processor fits each image within
    image_size a side (Mistral-Small-3.1's preprocessor_config.json: longest_edge 1,540 =
    its vision_config.image_size)."""
    vc = _section(data, where)
    if vc.get("model_type", "pixtral") != "pixtral":
        raise UsageError(f"{where}: vision_config.model_type {vc.get('model_type')!r}: the tool "
                         f"reads Mistral 3's Pixtral tower only")
    _keys(vc, where, _PIXTRAL_KEYS)
    layer = data.get("vision_feature_layer", -1)
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise UsageError(f"{where}: vision_feature_layer must be one layer index (a list "
                         f"concatenates several layers' features: not read)")
    width, heads = _get(vc, "hidden_size", 1024, where), _get(vc, "num_attention_heads", 16, where)
    if width % heads:
        raise UsageError(f"{where}: vision_config.hidden_size {width} must be a multiple of "
                         f"num_attention_heads {heads} (PixtralAttention's head_dim)")
    merge = _int(data.get("spatial_merge_size", 2), "spatial_merge_size", where)
    size = _get(vc, "image_size", 1540, where)
    return VisionSpec(
        "pixtral", _get(vc, "num_hidden_layers", 24, where), width, heads,
        _get(vc, "intermediate_size", 4096, where), True, vc.get("hidden_act", "gelu"),
        "rmsnorm", _get(vc, "patch_size", 14, where), 1, _get(vc, "num_channels", 3, where),
        False, 0, False, True, False, merge, None, (), "mistral3",
        bool(data.get("multimodal_projector_bias", False)), text, None, None,
        longest_edge=size)
