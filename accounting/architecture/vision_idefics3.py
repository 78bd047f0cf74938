"""Idefics3 and SmolVLM's vision tower (issue 41): SigLIP and the pixel-shuffle connector,
read from an idefics3 or smolvlm config.json's vision_config (transformers 5.23.0's
modeling_idefics3.py, modeling_smolvlm.py, configuration_idefics3.py,
configuration_smolvlm.py; the two are the same modules under two names). Registered in
accounting/architecture/vision.py's READERS on import (hf_types_vlm.py imports it).

Idefics3VisionTransformer (model.vision_model): embeddings.patch_embedding Conv2d(C, d, p,
stride p, bias), position_embedding of (image_size/p)² rows (looked up); num_hidden_layers
encoder layers (LayerNorm layer_norm1/2 with bias, q/k/v/out_proj with bias, fc1/fc2 with
bias, gelu_pytorch_tanh); post_layernorm. Every tile is image_size² (the processor's
max_image_size). Idefics3Connector (model.connector): pixel_shuffle by scale_factor r
((side/r)² rows of r²·d), modality_projection.proj (r²·d → text width, no bias).
"""
from __future__ import annotations

from typing import Mapping

from accounting.runtime.errors import UsageError
from accounting.architecture.vision import VisionSpec, _get, _int, _keys, _section, reader

_SIGLIP_KEYS = frozenset({"hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "num_channels", "image_size", "patch_size",
                          "hidden_act"})


def _idefics3(data: Mapping, where: str, text: int) -> VisionSpec:
    """Idefics3VisionConfig's defaults (1,152 wide, 12 layers, 16 heads, MLP 3,072, image
    224, patch 32) where vision_config omits a key; scale_factor (default 2) must divide the
    patch grid's side, as pixel_shuffle reshapes it."""
    vc = _section(data, where)
    _keys(vc, where, _SIGLIP_KEYS)
    size, patch = _get(vc, "image_size", 224, where), _get(vc, "patch_size", 32, where)
    r = _int(data.get("scale_factor", 2), "scale_factor", where)
    side = size // patch
    if side % r:
        raise UsageError(f"{where}: scale_factor {r} must divide the {side} patches a side "
                         f"(Idefics3Connector.pixel_shuffle)")
    return VisionSpec(
        "idefics3", _get(vc, "num_hidden_layers", 12, where), _get(vc, "hidden_size", 1152, where),
        _get(vc, "num_attention_heads", 16, where), _get(vc, "intermediate_size", 3072, where),
        False, vc.get("hidden_act", "gelu_pytorch_tanh"), "layernorm", patch, 1,
        _get(vc, "num_channels", 3, where), True, side * side, False, False, True, r, None, (),
        "idefics3", False, text, size, (side // r) ** 2, longest_edge=4 * size)


for _mt in ("idefics3", "smolvlm"):
    reader(_mt)(_idefics3)
