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

from accounting.runtime.errors import UsageError

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


# ---- interconnect (the multi-GPU planner: accounting/planning/parallel) -----------------
# Per GPU and per direction, in bytes/s (the datasheets quote NVLink bidirectional: half of
# it flows each way). Nodes of 8 GPUs (DGX/HGX baseboards), one network adapter per GPU.
# Sources:
#   NVLink, A100: 12 third-generation links, 600 GB/s total per GPU
#     (https://www.nvidia.com/en-us/data-center/nvlink/; A100 datasheet above: "NVLink 600GB/s").
#   NVLink, H100 and H200 SXM: 18 fourth-generation links, 900 GB/s bidirectional per GPU
#     (https://www.nvidia.com/en-us/data-center/technologies/hopper-architecture/; H100 and
#     H200 datasheets above: "NVLink: 900GB/s").
#   InfiniBand, DGX A100: eight single-port ConnectX-6 HDR 200 Gb/s adapters for the compute
#     fabric, one per GPU (NVIDIA DGX SuperPOD reference architecture RA-09950-001, DGX A100
#     system): 25 GB/s per GPU per direction.
#   InfiniBand, DGX H100 and H200: "four OSFP ports serving eight single-port NVIDIA
#     ConnectX-7 VPI, up to 400 Gb/s InfiniBand/Ethernet" (https://docs.nvidia.com/dgx-basepod/
#     reference-architecture-infrastructure-foundation-enterprise-ai/latest/core-components.html):
#     50 GB/s per GPU per direction.
# These are link peaks; NCCL reaches a share of them (its "bus bandwidth"): scale them with
# --nvlink-gbs / --network-gbs, as --mfu scales the FLOP/s peak.
GBps = 10**9


@dataclass(frozen=True)
class Interconnect:
    name: str
    nvlink: Fraction  # bytes/s per GPU per direction, inside a node
    network: Fraction  # bytes/s per GPU per direction, between nodes
    gpus_per_node: int
    source: str


# One node type per GPU generation: both A100s ship in the DGX A100, the H100 and H200 on
# the same NVLink 4 / ConnectX-7 fabric.
_DGX_A100_FABRIC = (Fraction(300 * GBps), Fraction(25 * GBps), 8,
                    "NVLink 3: 600 GB/s bidirectional per GPU; 8 × HDR InfiniBand 200 Gb/s per "
                    "node (one per GPU)")
_DGX_H_FABRIC = (Fraction(450 * GBps), Fraction(50 * GBps), 8,
                 "NVLink 4: 900 GB/s bidirectional per GPU; 8 × ConnectX-7 400 Gb/s InfiniBand "
                 "per node (one per GPU)")

INTERCONNECTS: dict[str, Interconnect] = {
    "A100-40GB": Interconnect("DGX A100", *_DGX_A100_FABRIC),
    "A100-80GB": Interconnect("DGX A100", *_DGX_A100_FABRIC),
    "H100-SXM": Interconnect("DGX H100", *_DGX_H_FABRIC),
    "H200": Interconnect("DGX H200", *_DGX_H_FABRIC),
}


def interconnect(gpu_name: str | None, nvlink_gbs=None, network_gbs=None,
                 gpus_per_node: int | None = None) -> Interconnect | None:
    """The table's interconnect for a GPU, with any figure overridden; None when nothing is
    known (a custom GPU without --nvlink-gbs and --network-gbs)."""
    base = INTERCONNECTS.get(get_gpu(gpu_name).name) if gpu_name else None
    if base is None and (nvlink_gbs is None or network_gbs is None):
        return None
    figures = {}
    for flag, value, default in (("--nvlink-gbs", nvlink_gbs, base and base.nvlink),
                                 ("--network-gbs", network_gbs, base and base.network)):
        if value is None:
            figures[flag] = default
            continue
        try:
            x = Fraction(str(value).strip())
        except (ValueError, ZeroDivisionError):
            raise UsageError(f"{flag} must be a number of GB/s, got {value!r}") from None
        if x <= 0:
            raise UsageError(f"{flag} must be positive, got {value}")
        figures[flag] = x * GBps
    nodes = gpus_per_node or (base.gpus_per_node if base else 8)
    changed = base is None or any(v is not None for v in (nvlink_gbs, network_gbs, gpus_per_node))
    return Interconnect(("custom" if base is None else base.name + (" (modified)" if changed else "")),
                        figures["--nvlink-gbs"], figures["--network-gbs"], nodes,
                        "user-given" if base is None else base.source
                        + ("; figures overridden" if changed else ""))
