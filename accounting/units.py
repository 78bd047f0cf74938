"""Units and conventions, each named once.

Counts are Python ints everywhere; the helpers here only *format* them. Rounding for
display is exact integer arithmetic, so that the same integer always prints the same string.
"""
from __future__ import annotations

from fractions import Fraction

# A multiply-add is two floating-point operations (CS336 ch. 3: "AB needs 2mnp FLOPs").
# fvcore counts one per multiply-add (a MAC); FlopCounterMode counts FLOPs.
FLOPS_PER_MAC = 2

# Decimal (SI) scales: TFLOP/s is TERA FLOP/s, TB/s is TERA bytes/s, GB/s GIGA bytes/s.
KILO, MEGA, GIGA, TERA = 10**3, 10**6, 10**9, 10**12
GB = GIGA  # decimal gigabyte (what datasheets and "GB (1e9)" columns mean)
TB = TERA  # decimal terabyte
# Binary (IEC) sizes: what nvidia-smi reports (MiB) and "GiB (2^30)" columns mean.
KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40

# ---- dtypes: each name and its bytes per element, stated once -------------------------
# The names are the ones printed and typed (--precision fp32, "bf16 copy", peak keys).
FP32, BF16, FP16, INT8 = "fp32", "bf16", "fp16", "int8"
FP64, INT64, BOOL, UINT8, INT32 = "fp64", "int64", "bool", "uint8", "int32"
# torch.complex64: two float32 (DeepSeek-V2's and Llama 4's RoPE as transformers writes it,
# torch.polar and view_as_complex: the freqs_cis each rotation saves)
COMPLEX64 = "complex64"
# IEEE 754 binary32/binary16/binary64, bfloat16 (16 bits), and torch's element sizes
# (torch.bool, torch.int8 and torch.uint8 take one byte each, torch.int32 four, torch.int64
# eight). uint8 holds 8-bit optimizer state and packed NF4 weights; int32 grouped_mm offsets
# and packed GPTQ/AWQ weights.

# Storage dtypes of quantized checkpoints and KV caches (accounting/formats/, serving/kv.py):
# the two float8 formats' element sizes (tests/test_formats.py checks them against torch);
# int32 and uint8 storage is DTYPE_BYTES'.
FP8, FP8_E4M3, FP8_E5M2 = "fp8", "fp8_e4m3", "fp8_e5m2"
STORAGE_BYTES = {FP8_E4M3: 1, FP8_E5M2: 1}
# an fp8 activation or weight copy (Transformer Engine's saved input) is one of these
DTYPE_BYTES = {FP32: 4, BF16: 2, FP16: 2, INT8: 1, FP64: 8, INT64: 8, BOOL: 1, UINT8: 1, INT32: 4,
               COMPLEX64: 8, **STORAGE_BYTES}

# torch's dtype names as a config.json writes them (torch_dtype / dtype: transformers looks
# each up as getattr(torch, name)); a name outside these is refused (hf_schema.FREE_VALUES).
TORCH_DTYPE_NAMES = frozenset({"float32", "float16", "bfloat16", "float64", "float8_e4m3fn",
                               "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "int8",
                               "uint8", "int16", "int32", "int64", "bool", "complex64"})

# Bytes per parameter for the dtypes users ask about (the parameter-memory table's rows).
BYTES_PER_ELEMENT = {d: DTYPE_BYTES[d] for d in (FP32, BF16, FP16, INT8)}

_SI = ((10**24, "Y"), (10**21, "Z"), (10**18, "E"), (10**15, "P"), (TERA, "T"),
       (GIGA, "G"), (MEGA, "M"), (KILO, "k"))


def decimal(value: int | Fraction, places: int) -> str:
    """Exact value rounded half-even to `places` decimals, in exact integer arithmetic."""
    q = round(Fraction(value) * 10**places)  # Fraction rounds half-even, exactly
    sign, digits = ("-" if q < 0 else ""), str(abs(q))
    if places == 0:
        return sign + digits
    digits = digits.rjust(places + 1, "0")
    return f"{sign}{digits[:-places]}.{digits[-places:]}"


def grouped(n: int) -> str:
    """1234567 -> '1,234,567' (exact)."""
    return f"{n:,}"


def si(n: int | Fraction, unit: str = "", places: int = 3) -> str:
    """4513336524800 -> '4.513 T' + unit; exact input, rounded only for display."""
    for scale, prefix in _SI:
        if abs(n) >= scale:
            return f"{decimal(Fraction(n) / scale, places)} {prefix}{unit}"
    return f"{decimal(Fraction(n), 0 if isinstance(n, int) else places)} {unit}".rstrip()


def percent(share: Fraction, places: int = 2) -> str:
    return f"{decimal(share * 100, places)}%"


def gigabytes(n_bytes: int, places: int = 2) -> str:
    return f"{decimal(Fraction(n_bytes, GB), places)} GB"


def gibibytes(n_bytes: int, places: int = 2) -> str:
    return f"{decimal(Fraction(n_bytes, GiB), places)} GiB"


def rounded_percents(shares: list[Fraction], places: int = 2) -> list[str]:
    """Percentages that add up to exactly 100 at `places` decimals (largest remainder).

    The exact shares sum to 1; rounding each alone can show 99.99% or 100.01%.
    """
    unit = Fraction(1, 100 * 10**places)
    floors = [int(s // unit) for s in shares]
    total = sum(shares, Fraction(0))
    missing = int(round(total / unit)) - sum(floors)
    order = sorted(range(len(shares)), key=lambda i: (-(shares[i] / unit - floors[i]), i))
    for i in order[:max(missing, 0)]:
        floors[i] += 1
    return [f"{decimal(Fraction(f) * unit * 100, places)}%" for f in floors]
