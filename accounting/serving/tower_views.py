"""A serving plan's vision tower (serving/vision.py) on the first screen and in the JSON.
Formatting only: every number is the plan's."""
from __future__ import annotations

from fractions import Fraction

from accounting.units import GB, GiB, decimal, grouped


def _gib(n: int) -> str:
    return f"{decimal(Fraction(n, GB), 2)} GB ({decimal(Fraction(n, GiB), 2)} GiB)"


def line(p) -> str | None:
    """The first screen's line: the tower is counted, and how (None: no tower)."""
    t = p.tower
    if t is None:
        return None
    how = "as vLLM shards them" if p.record.profiles_encoder else "assumed as vLLM shards them"
    text = (f"counted: {_gib(t.weights_bytes)} per GPU in the weights ({grouped(t.params)} "
            f"parameters, {t.weights_why}; matrices 1/TP {how})" if t.weights_bytes else
            f"counted: {grouped(t.params)} parameters {t.weights_why}, 0 bytes")
    if p.record.profiles_encoder and not t.items:
        text += ("; --limit-mm-per-prompt 0: no encoder budget, no profile run, no encoder "
                 "cache (text only)")
    elif p.record.profiles_encoder:
        n = t.items
        text += (f"; profile run: {grouped(n)} image{'' if n == 1 else 's'} of "
                 f"{t.item_size[0]}×{t.item_size[1]} (the processor's largest, "
                 f"{grouped(t.item_tokens)} tokens each; encoder budget "
                 f"{grouped(t.budget_tokens)}), encoder peak {_gib(t.encoder_peak_bytes)}, "
                 f"encoder cache {_gib(t.cache_bytes)} held beside the language model's dummy "
                 f"run: activation peak max(encoder, cache + language model)")
        if t.unprofiled_tokens:
            text += (f"; pan-and-scan: vLLM's probe image (gemma3_mm.py, 50·max_num_crops × "
                     f"50) profiles {grouped(t.item_tokens)} tokens, and an image "
                     f"with every crop carries {grouped(t.unprofiled_tokens)} more, "
                     f"unprofiled")
    else:
        text += ("; no profile run: the encoder's activations and its cache live in the "
                 "engine's reserve")
    return text


def as_dict(p) -> dict | None:
    t = p.tower
    if t is None:
        return None
    return {"family": t.family, "parameters": t.params,
            "weights_bytes_per_gpu": t.weights_bytes, "weights": t.weights_why,
            "profiled": p.record.profiles_encoder,
            "profile_item_size": list(t.item_size), "profile_item_tokens": t.item_tokens,
            "profile_item_patches": t.item_patches, "encoder_budget_tokens": t.budget_tokens,
            "profile_items": t.items, "encoder_peak_bytes": t.encoder_peak_bytes,
            "encoder_cache_bytes": t.cache_bytes,
            "unprofiled_image_tokens": t.unprofiled_tokens}
