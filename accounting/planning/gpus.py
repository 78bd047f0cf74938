"""Datasheet peaks of a few GPUs, and the hardware a plan runs on (a table row or the
user's own numbers). Peaks and bandwidths are exact decimals (Fractions), never floats.

Sources (NVIDIA datasheets; dense figures: the datasheets' Tensor Core numbers "with
sparsity" are twice these):
  A100: https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
        FP32 19.5 TFLOPS; BF16 Tensor Core 312 TFLOPS (624 with sparsity);
        40 GB HBM2 at 1,555 GB/s; 80 GB HBM2e at 2,039 GB/s (SXM).
  H100 SXM: https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet
        FP32 67 TFLOPS; BF16 Tensor Core 1,979 TFLOPS with sparsity (989 dense);
        80 GB at 3.35 TB/s.
  H200 SXM: https://www.nvidia.com/en-us/data-center/h200/
        FP32 67 TFLOPS; BF16 Tensor Core 1,979 TFLOPS with sparsity (989 dense);
        141 GB HBM3e at 4.8 TB/s.
Memory: the datasheets' "40 GB", "80 GB" and "141 GB" are labels, not byte counts. The
bytes below are the total nvidia-smi reports (memory.total, in MiB = 2^20 bytes) on these
cards: A100 40GB 40,960 MiB and A100 80GB 81,920 MiB (exactly 40 and 80 GiB), H100 80GB
HBM3 81,559 MiB, H200 143,771 MiB (e.g. the nvidia-smi totals listed in
https://github.com/modal-labs/modal-client/pull/2797 and printed in many public nvidia-smi
logs). Not all of it is usable: the CUDA context and the allocator take some (--margin).
PyTorch runs float32 matmuls in full FP32 by default (TF32 is off for matmuls), so the fp32
column is the non-Tensor-Core FP32 peak.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from fractions import Fraction

from accounting.errors import UsageError

MiB = 2**20
TERA = 10**12


@dataclass(frozen=True)
class GPU:
    name: str
    label: str  # the datasheet's memory label
    memory_bytes: int
    peak_tflops: dict  # precision key ("fp32", "bf16") -> TFLOP/s (Fraction)
    bandwidth_tbs: Fraction  # TB/s (10^12 bytes/s)
    source: str


def _gpu(name, label, mib, fp32, bf16, tbs, source):
    return GPU(name, label, mib * MiB, {"fp32": Fraction(fp32), "bf16": Fraction(bf16)},
               Fraction(tbs), source)


GPUS: dict[str, GPU] = {g.name: g for g in (
    _gpu("A100-40GB", "40 GB HBM2", 40_960, "19.5", 312, "1.555", "NVIDIA A100 datasheet (SXM)"),
    _gpu("A100-80GB", "80 GB HBM2e", 81_920, "19.5", 312, "2.039", "NVIDIA A100 datasheet (SXM)"),
    _gpu("H100-SXM", "80 GB HBM3", 81_559, 67, 989, "3.35", "NVIDIA H100 datasheet (SXM)"),
    _gpu("H200", "141 GB HBM3e", 143_771, 67, 989, "4.8", "NVIDIA H200 datasheet (SXM)"),
)}

# Short names people type; each maps to one row above.
ALIASES = {"a100": "A100-80GB", "a100-80": "A100-80GB", "a100-40": "A100-40GB",
           "h100": "H100-SXM", "h100-80gb": "H100-SXM", "h200-sxm": "H200"}


def get_gpu(name: str) -> GPU:
    """Case-insensitive lookup; an unknown name lists the known ones."""
    by_lower = {k.lower(): k for k in GPUS}
    key = name.strip().lower()
    if key in by_lower:
        return GPUS[by_lower[key]]
    if key in ALIASES:
        return GPUS[ALIASES[key]]
    near = difflib.get_close_matches(name, list(GPUS), n=1, cutoff=0.3)
    hint = f" (did you mean {near[0]}?)" if near else ""
    raise UsageError(f"unknown GPU {name!r}{hint}; known: {', '.join(GPUS)} (aliases A100, H100), "
                     f"or give --gpu-mem, --gpu-flops and --gpu-bw")


@dataclass(frozen=True)
class Hardware:
    """What a plan needs from the hardware; any of the three may be unknown (None)."""
    name: str
    memory_bytes: int | None
    peak_flops: Fraction | None  # FLOP/s at the plan's precision
    bandwidth: Fraction | None  # bytes/s
    source: str

    @classmethod
    def from_gpu(cls, gpu: GPU, compute: str) -> Hardware:
        return cls(gpu.name, gpu.memory_bytes, gpu.peak_tflops[compute] * TERA,
                   gpu.bandwidth_tbs * TERA,
                   f"{gpu.source}: {compute} peak {_num(gpu.peak_tflops[compute])} TFLOP/s, "
                   f"{_num(gpu.bandwidth_tbs)} TB/s; memory {gpu.memory_bytes // MiB:,} MiB "
                   f"as nvidia-smi reports (datasheet: {gpu.label})")

    @classmethod
    def custom(cls, memory_bytes: int | None = None, peak_tflops: Fraction | None = None,
               bandwidth_tbs: Fraction | None = None) -> Hardware:
        return cls("custom GPU", memory_bytes,
                   None if peak_tflops is None else Fraction(peak_tflops) * TERA,
                   None if bandwidth_tbs is None else Fraction(bandwidth_tbs) * TERA,
                   "user-given")


def _num(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else str(float(x))
