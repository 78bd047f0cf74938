"""Safetensors headers, read without the weights.

The format (https://huggingface.co/docs/safetensors/index#format; safetensors' own
safetensors/src/tensor.rs, `Metadata` and `read_metadata`): 8 bytes, a little-endian u64 N,
then N bytes of JSON: {tensor name: {"dtype", "shape", "data_offsets": [begin, end]}} and an
optional "__metadata__" of strings; the data follows. A sharded checkpoint lists its files
in model.safetensors.index.json's "weight_map" (tensor -> file; transformers'
modeling_utils.py, SAFE_WEIGHTS_INDEX_NAME). The stored bytes of a tensor are end − begin:
exact, whatever its dtype (packed 4-bit weights, fp8 and their scales included).
"""
from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from math import prod
from pathlib import Path

from accounting.checkpoint.records import Checkpoint, Tensor  # noqa: F401 (read here, re-exported)
from accounting.runtime.errors import UsageError, shorten, shorten_path

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
# safetensors refuses a header over 100,000,000 bytes (tensor.rs: MAX_HEADER_SIZE)
MAX_HEADER = 100_000_000
# bytes per element of each safetensors dtype (tensor.rs: Dtype::bitsize / 8), to check a
# header's offsets against its shapes; sub-byte dtypes (F4, F6_*) are checked by bits
BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16,
        "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "F64": 64,
        "I64": 64, "U64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "C64": 64}


def tensors_of(header: Mapping, file: str) -> list[Tensor]:
    """A parsed header's tensors, each checked (dtype known, shape of naturals, offsets
    that hold exactly its elements)."""
    if not isinstance(header, Mapping):
        raise UsageError(f"{file}: a safetensors header must be a JSON object")
    out = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
            ok = (dtype in BITS and all(isinstance(n, int) and n >= 0 for n in shape)
                  and isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end)
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            raise UsageError(f"{file}: tensor {shorten(name, 60)} has no valid dtype, shape "
                             f"and data_offsets in its safetensors header")
        if end - begin != -(-prod(shape) * BITS[dtype] // 8):
            raise UsageError(f"{file}: tensor {shorten(name, 60)} stores {end - begin:,} bytes, "
                             f"not the {prod(shape):,} {dtype} elements of its shape {list(shape)}")
        out.append(Tensor(name, dtype, shape, end - begin, file))
    return out


def read_header(path: Path) -> dict:
    """A safetensors file's header: 8-byte little-endian length, then that much JSON."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise UsageError(f"{path}: not a safetensors file (shorter than its 8-byte "
                                 f"header length)")
            n = struct.unpack("<Q", head)[0]
            if n > MAX_HEADER:
                raise UsageError(f"{path}: header length {n:,} bytes is past safetensors' "
                                 f"limit of {MAX_HEADER:,}: not a safetensors file")
            text = f.read(n)
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    if len(text) < n:
        raise UsageError(f"{path}: the header is cut short ({len(text):,} of {n:,} bytes)")
    try:
        return json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise UsageError(f"{path}: the safetensors header is not JSON") from None


def files_of(folder: Path) -> list[str]:
    """The safetensors files of a checkpoint folder: its index's, else every *.safetensors."""
    index = folder / INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            files = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise UsageError(f"{index}: not a safetensors index (a JSON object with a "
                             f"weight_map of tensor -> file)") from None
        # a shard is a file beside the index (the hub's layout): never a path elsewhere
        bad = next((f for f in files if not isinstance(f, str) or "/" in f or "\\" in f
                    or f in ("", ".", "..") or not f.endswith(".safetensors")), None)
        if bad is not None:
            raise UsageError(f"{index}: weight_map names {shorten(bad, 60)}, not a .safetensors "
                             f"file beside the index")
        return files
    return sorted(p.name for p in folder.glob("*.safetensors"))


def read_folder(folder: Path, source: str | None = None) -> Checkpoint:
    files = files_of(folder)
    if not files:
        raise UsageError(f"--checkpoint {shorten_path(folder)}: no {INDEX} and no "
                         f"*.safetensors file in it")
    tensors = []
    for name in files:
        tensors += tensors_of(read_header(folder / name), name)
    return Checkpoint(source or str(folder), tuple(tensors), len(files))


def from_headers(headers: Mapping[str, Mapping], source: str) -> Checkpoint:
    """A checkpoint from headers read elsewhere (the hub's, by ranged reads)."""
    tensors = []
    for file, header in sorted(headers.items()):
        tensors += tensors_of(header, file)
    return Checkpoint(source, tuple(tensors), len(headers))


def read(where: str) -> Checkpoint:
    """--checkpoint DIR, a .safetensors file, or a hub id (its cached snapshot when that
    holds the safetensors files, else the hub's headers by ranged reads)."""
    path = Path(where)
    if path.is_dir():
        return read_folder(path)
    if path.is_file() and path.suffix == ".gguf":  # llama.cpp's format (gguf_file.py)
        from dataclasses import replace
        from accounting.checkpoint import gguf_file
        ck, meta = gguf_file.read(path)
        return replace(ck, gguf_arch=str(meta.get("general.architecture")))
    if path.is_file():
        return Checkpoint(where, tuple(tensors_of(read_header(path), path.name)), 1)
    from accounting.hub import cache, remote
    if not cache.is_repo_id(where):
        raise UsageError(f"--checkpoint {shorten(where, 80)}: no such folder or file, nor a "
                         f"hub id ORG/NAME")
    snap = cache.snapshot(where)
    if snap is not None and files_of(snap) and all((snap / f).is_file() for f in files_of(snap)):
        return read_folder(snap, f"{where} (cached in {cache.cache_dir()})")
    if remote.offline():
        raise UsageError(f"--checkpoint {where}: the cache at {cache.cache_dir()} holds no "
                         f"safetensors files of it, and HF_HUB_OFFLINE is set; read it online "
                         f"(only the headers are fetched) or give a folder")
    return from_headers(remote.safetensors_headers(where), f"{where} (the hub at {remote.endpoint()})")
