"""bitsandbytes' weight layouts (bitsandbytes 0.50.2): the bytes of every tensor a
quantized nn.Linear weight holds, by component name. The one place for these layouts
(the planner's QLoRA base weights read them; tests/test_formats.py quantizes real layers
with bitsandbytes on the CPU and sums the bytes of each tensor it allocates).

4-bit (bitsandbytes/functional.py quantize_4bit, nn/modules.py Params4bit, Linear4bit):
  * packed weight: two 4-bit codes per byte, uint8, ceil(n/2) bytes for n = out·in
    elements (stored as a (ceil(n/2), 1) tensor);
  * absmax: one scale per block of `blocksize` (default 64) elements, ceil(n/blocksize)
    of them: float32 without double quantization; with it (compress_statistics=True,
    Params4bit's default, bnb_4bit_use_double_quant in transformers) the scales less their
    mean are quantized blockwise again (quantize_blockwise, nested blocksize 256, the
    8-bit dynamic map): uint8 absmax, a float32 absmax per 256 of them (nested absmax),
    the nested map (256 float32, a tensor per layer) and the mean (a 0-dim float32, the
    offset);
  * quant map (code): the 16 values of the NF4 (or FP4) data type, float32, per layer.
LLM.int8 (nn/modules.py Int8Params, Linear8bitLt, has_fp16_weights=False): the int8 weight
(CB, the same storage as weight.data) and a float32 absmax per output row (SCB).
"""
from __future__ import annotations

from accounting.units import DTYPE_BYTES, FP32, INT8, UINT8

NF4, FP4 = "nf4", "fp4"
QUANT_TYPES = (NF4, FP4)  # bitsandbytes' 4-bit data types: 16 values each
CODE_VALUES = 16  # get_4bit_type(): a 16-entry map for nf4 and fp4
NESTED_BLOCKSIZE = 256  # quantize_4bit(compress_statistics=True): quantize_blockwise(absmax, blocksize=256)
NESTED_CODE_VALUES = 256  # create_dynamic_map(): the 8-bit dynamic map, 256 float32
BLOCKSIZES = (32, 64, 128, 256, 512, 1024, 2048, 4096)  # quantize_4bit's accepted block sizes
UINT8_BYTES = DTYPE_BYTES[UINT8]

PACKED, ABSMAX, CODE = "packed weight", "absmax", "quant map"
NESTED_ABSMAX, NESTED_CODE, OFFSET = "nested absmax", "nested quant map", "nested offset"
INT8_WEIGHT, SCB = "int8 weight (CB)", "row absmax (SCB)"


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _check(out_features: int, in_features: int) -> None:
    for name, v in (("out_features", out_features), ("in_features", in_features)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")


def bnb_4bit_bytes(out_features: int, in_features: int, *, quant_type: str = NF4,
                   blocksize: int = 64, double_quant: bool = True) -> dict[str, int]:
    """Component name -> bytes of a bitsandbytes 4-bit weight of out × in elements."""
    _check(out_features, in_features)
    if quant_type not in QUANT_TYPES:
        raise ValueError(f"quant_type must be one of {QUANT_TYPES}, got {quant_type!r}")
    if blocksize not in BLOCKSIZES:
        raise ValueError(f"blocksize must be one of {BLOCKSIZES}, got {blocksize!r}")
    n = out_features * in_features
    blocks = _ceil(n, blocksize)
    f32 = DTYPE_BYTES[FP32]
    out = {PACKED: _ceil(n, 2) * UINT8_BYTES}
    if double_quant:
        out[ABSMAX] = blocks * UINT8_BYTES
        out[NESTED_ABSMAX] = _ceil(blocks, NESTED_BLOCKSIZE) * f32
        out[NESTED_CODE] = NESTED_CODE_VALUES * f32
        out[OFFSET] = f32
    else:
        out[ABSMAX] = blocks * f32
    out[CODE] = CODE_VALUES * f32
    return out


def bnb_8bit_bytes(out_features: int, in_features: int) -> dict[str, int]:
    """Component name -> bytes of an LLM.int8 weight (Linear8bitLt, frozen int8)."""
    _check(out_features, in_features)
    return {INT8_WEIGHT: out_features * in_features * DTYPE_BYTES[INT8],
            SCB: out_features * DTYPE_BYTES[FP32]}
