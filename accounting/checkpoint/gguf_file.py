"""GGUF files (llama.cpp's format), read with llama.cpp's own Python package `gguf` (the
`hf` extra pins it; imported here only): the header's metadata and the tensor table, never
the data (GGUFReader maps the file; no tensor is touched).

Bytes: a tensor of type t with n elements stores n / block_size · type_size bytes,
gguf's GGML_QUANT_SIZES (constants.py; the same table as ggml's ggml-common.h block
structs: Q4_K 256 elements in 144 bytes, Q8_0 32 in 34, Q6_K 256 in 210, F16 1 in 2 …).
Shapes: GGUF lists ne0 (the innermost, contiguous dimension) first; numpy's and
transformers' order is the reverse, used here. Names: llama.cpp's ('blk.0.attn_q.weight'),
matched to transformers' through gguf's TensorNameMap (tensor_mapping.py), the table its
convert_hf_to_gguf.py writes them with.

The architecture: general.architecture and its keys (llama.cpp's llama-arch.cpp
LLM_KV_NAMES: '<arch>.block_count', '.embedding_length', …) as a Hugging Face config.json
object of the same model_type, so that the one translation (accounting/architecture/hf_config.py)
reads it.
"""
from __future__ import annotations

from pathlib import Path

from accounting.checkpoint.records import Checkpoint, Tensor
from accounting.runtime.errors import UsageError, shorten, shorten_path

SUFFIX = ".gguf"
# GGUF architectures the tool maps, to their transformers model_type (convert_hf_to_gguf.py
# writes Mistral's and Llama's dense models as 'llama')
MODEL_TYPES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}


def _gguf():
    try:
        import gguf
    except ImportError:
        raise UsageError("reading a GGUF file needs llama.cpp's gguf package, not importable "
                         "here; install the hf extra (pip install -e '.[hf]')") from None
    return gguf


def _reader(path: Path):
    gguf = _gguf()
    try:
        return gguf.GGUFReader(str(path), "r")
    except (ValueError, OSError, KeyError, IndexError) as e:
        raise UsageError(f"{shorten_path(path)}: not a GGUF file gguf can read "
                         f"({str(e).splitlines()[0][:100] if str(e) else type(e).__name__})") from None


def _value(field):
    v = field.contents()
    return v


def metadata(path: Path) -> dict:
    """The header's key-value pairs (arrays longer than 64 items as their length)."""
    r = _reader(path)
    out = {}
    for name, field in r.fields.items():
        if name.startswith("GGUF."):
            continue
        if len(field.data) > 64:
            out[name] = len(field.data)
            continue
        out[name] = _value(field)
    return out


def read(path: Path) -> tuple[Checkpoint, dict]:
    """(the tensor table as a Checkpoint, the metadata)."""
    gguf = _gguf()
    r = _reader(path)
    tensors = []
    for t in r.tensors:
        block, size = gguf.GGML_QUANT_SIZES[t.tensor_type]
        ne = [int(n) for n in t.shape]
        n = 1
        for d in ne:
            n *= d
        if n % block:
            raise UsageError(f"{path}: tensor {t.name} has {n:,} elements, not whole blocks of "
                             f"{block} ({t.tensor_type.name})")
        tensors.append(Tensor(t.name, t.tensor_type.name, tuple(reversed(ne)),
                              n // block * size, path.name))
    return Checkpoint(str(path), tuple(tensors), 1), metadata(path)


def config_data(meta: dict, tensors: tuple[Tensor, ...], where: str) -> dict:
    """The architecture keys as a config.json object of the same model_type."""
    arch = meta.get("general.architecture")
    if arch not in MODEL_TYPES:
        raise UsageError(f"{where}: GGUF architecture {shorten(arch)} is not mapped to the spec "
                         f"(mapped: {', '.join(MODEL_TYPES)}); give --config with its "
                         f"config.json")

    def key(name, default=None):
        v = meta.get(f"{arch}.{name}", default)
        if v is None:
            raise UsageError(f"{where}: the GGUF header lacks {arch}.{name}")
        return v
    names = {t.name: t for t in tensors}
    vocab = meta.get(f"{arch}.vocab_size") or meta.get("tokenizer.ggml.tokens") \
        or (names["token_embd.weight"].shape[0] if "token_embd.weight" in names else None)
    if not vocab:
        raise UsageError(f"{where}: no vocabulary size in the GGUF header or tensors")
    heads = key("attention.head_count")
    d = key("embedding_length")
    out = {"model_type": MODEL_TYPES[arch], "vocab_size": int(vocab),
           "hidden_size": int(d), "intermediate_size": int(key("feed_forward_length")),
           "num_hidden_layers": int(key("block_count")), "num_attention_heads": int(heads),
           "num_key_value_heads": int(key("attention.head_count_kv", heads)),
           "max_position_embeddings": int(key("context_length")),
           "rms_norm_eps": float(key("attention.layer_norm_rms_epsilon")),
           "rope_theta": float(key("rope.freq_base", 10000.0)),
           # llama.cpp writes no output.weight for a tied head (llama-model.cpp: the output
           # falls back to token_embd, TENSOR_DUPLICATED)
           "tie_word_embeddings": "output.weight" not in names}
    head_dim = meta.get(f"{arch}.attention.key_length")
    if head_dim is not None and int(head_dim) != d // heads or arch == "qwen3":
        out["head_dim"] = int(head_dim if head_dim is not None else d // heads)
    return out


def tensor_names(arch_name: str, n_blocks: int):
    """transformers' name -> llama.cpp's, by gguf's TensorNameMap."""
    gguf = _gguf()
    arch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch_name)
    tmap = gguf.get_tensor_name_map(arch, n_blocks)
    return lambda hf: tmap.get_name(hf, try_suffixes=(".weight", ".bias"))


def read_spec(path, judge=None):
    """--config FILE.gguf: (the spec, its HFConfig) from the header's architecture keys."""
    from accounting.architecture import hf_config
    path = Path(path)
    ck, meta = read(path)
    data = config_data(meta, ck.tensors, path.name)
    name = str(meta.get("general.name") or path.stem)[:80]
    hf = hf_config.translate(data, f"{path.name} (GGUF header)", name, str(path), judge)
    return hf.config, hf
