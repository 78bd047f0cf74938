"""`serve --checkpoint`: each pipeline stage's weights as the checkpoint stores them.

A tensor's stage is its block's (`<blocks>.<i>.…`, the layers serving/shards.py gives the
stage); the embeddings go to the first stage and the rest (final norm, head) to the last,
as shards.stages places them. On TP ranks each stage's stored bytes are divided as the
scheme's own bytes of that stage divide between tp = 1 and tp (the same tensors split the
same way: column/row shards, replicated norms, padded vocabulary), rounded up.
"""
from __future__ import annotations

import re
from dataclasses import replace
from fractions import Fraction
from math import ceil

from accounting.checkpoint.headers import Checkpoint

PART = "as stored in the checkpoint"


def _layer_of(name: str, blocks: str, prefix: str) -> int | None:
    for b in (blocks, blocks.removeprefix(prefix)):
        m = re.match(re.escape(b) + r"\.(\d+)\.", name)
        if m:
            return int(m.group(1))
    return None


def override(ck: Checkpoint, names, config, scheme, model_bytes: int, tp: int, pp: int):
    """A function of shards.stages' list -> the same stages with the stored bytes."""
    blocks = names.blocks if names is not None else "layers"
    prefix = blocks.split(".")[0] + "." if "." in blocks else ""
    first_only = tuple(names.top.get(m, m) if names is not None else m
                       for m in ("token_embeddings", "position_embeddings"))

    def apply(stage_list):
        from accounting.serving import shards
        whole = shards.stages(config, scheme, model_bytes, 1, pp, names) if tp > 1 else stage_list
        of_layer = {i: s.index for s in stage_list for i in s.layers}
        stored = [0] * len(stage_list)
        for t in ck.tensors:
            layer = _layer_of(t.name, blocks, prefix)
            if layer is not None:
                s = of_layer.get(layer, len(stage_list) - 1)  # a layer past the model's: the last
            elif any(t.name.startswith(m + ".") or (prefix + t.name).startswith(m + ".")
                     for m in first_only):
                s = 0
            else:
                s = len(stage_list) - 1
            stored[s] += t.nbytes
        out = []
        for st, w, b in zip(stage_list, whole, stored):
            share = Fraction(st.bytes, w.bytes) if w.bytes else Fraction(1)
            per_gpu = ceil(b * share)
            scale = Fraction(per_gpu, st.bytes) if st.bytes else Fraction(0)
            out.append(replace(st, bytes=per_gpu, by_part=((PART, per_gpu),),
                               quantized_bytes=0, dense_bytes=per_gpu,
                               expert_bytes=int(st.expert_bytes * scale),
                               lookup_bytes=int(st.lookup_bytes * scale)))
        return out
    return apply
