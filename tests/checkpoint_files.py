"""Safetensors checkpoints for the tests, headers only: the data is a sparse hole (the file
is truncated to its full length, so the offsets are real and nothing is written).

The tensor names and shapes come from transformers' own model built on the meta device
from the published config.json (an independent source: the ledger never sees it), split
into shards with an index as the hub's checkpoints are (model.safetensors.index.json)."""
from __future__ import annotations

import json
import struct
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BITS = {"BF16": 16, "F16": 16, "F32": 32, "U8": 8, "I32": 32, "F8_E4M3": 8}


@lru_cache(maxsize=None)
def state_dict_shapes(config_file: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(name, shape) of every state-dict tensor of transformers' model for a config.json,
    as save_pretrained writes them (a tied head once)."""
    import torch
    import transformers
    data = json.loads((ROOT / config_file).read_text())
    cfg = transformers.AutoConfig.for_model(**{k: v for k, v in data.items()
                                               if k != "architectures"})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    sd = model.state_dict()
    tied = set(getattr(model, "_tied_weights_keys", None) or ()) if cfg.tie_word_embeddings else set()
    return tuple((k, tuple(v.shape)) for k, v in sd.items() if k not in tied)


def write(folder: Path, tensors, shards: int = 2, dtype: str = "BF16") -> Path:
    """Header-only safetensors shards and their index; `tensors`: (name, shape[, dtype])."""
    folder.mkdir(parents=True, exist_ok=True)
    tensors = [t if len(t) == 3 else (*t, dtype) for t in tensors]
    per = -(-len(tensors) // shards)
    weight_map = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        header, offset = {}, 0
        for name, shape, dt in tensors[s * per:(s + 1) * per]:
            n = 1
            for d in shape:
                n *= d
            nbytes = -(-n * BITS[dt] // 8)
            header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
            weight_map[name] = file
        raw = json.dumps(header).encode()
        with open(folder / file, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            f.truncate(8 + len(raw) + offset)  # the data: a hole, never written
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder
