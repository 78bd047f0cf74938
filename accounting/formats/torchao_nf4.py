"""torchao's NF4 layout (torchao 0.18.0, quantization/quantize_/workflows/nf4/nf4_tensor.py,
NF4Tensor.from_tensor via to_nf4(tensor, block_size=64, scaler_block_size=256)), the
second NF4 layout next to bitsandbytes' (bnb.py). Always double-quantized:
  * quantized_data: two 4-bit codes per byte, uint8, n/2 bytes;
  * quantized_scalers: one int8 scale per block of block_size elements (the blocks' absmax
    less their mean, quantized);
  * quantization_factor: one per scaler_block_size scales, in the input's dtype;
  * scaler_mean: a 0-dim tensor in the input's dtype; nf4: the 16 NF4 values, same dtype.
from_tensor asserts n % block_size == 0 and (n / block_size) % scaler_block_size == 0.
"""
from __future__ import annotations

from accounting.units import DTYPE_BYTES, INT8

DATA, SCALERS, FACTORS, MEAN, CODE = ("quantized_data", "quantized_scalers",
                                      "quantization_factor", "scaler_mean", "nf4")
CODE_VALUES = 16


def torchao_nf4_bytes(out_features: int, in_features: int, *, block_size: int = 64,
                      scaler_block_size: int = 256, dtype: str = "bf16") -> dict[str, int]:
    """Component name -> bytes of to_nf4(W) for W of out × in elements in `dtype`."""
    n = out_features * in_features
    if n <= 0 or n % block_size or (n // block_size) % scaler_block_size:
        raise ValueError(f"torchao's NF4 needs out·in divisible by block_size·scaler_block_size "
                         f"({block_size}·{scaler_block_size}), got {out_features}×{in_features}")
    blocks = n // block_size
    d = DTYPE_BYTES[dtype]
    return {DATA: n // 2, SCALERS: blocks * DTYPE_BYTES[INT8],
            FACTORS: blocks // scaler_block_size * d, MEAN: d, CODE: CODE_VALUES * d}
