"""The GPU table's record types: a card (GPU, keyword fields), where its figures are read
(Source) and its node's links (Fabric). The cards are gpu_cards.py's, one record each, from
which the lookup by name, the `plan --help` list, the interconnect and the docs' GPU table
(accounting/planning/gpu_table.py) are all generated (gpus.py).

Units, stated once for every record: peaks are dense TFLOP/s (10^12 FLOP/s; the datasheets'
Tensor Core figures "with sparsity" (2:4 structured sparsity) are twice the dense ones, and
the record keeps that figure too) for fp32, bf16, fp8 and fp4 (None where the card has no
such Tensor Core format); memory bandwidth is TB/s (10^12 bytes/s); the GPU-to-GPU link
(NVLink, AMD Infinity Fabric, or PCIe for the cards without either) is the datasheets' GB/s
(10^9 bytes/s) per GPU, both directions together; the network is Gb/s (10^9 bits/s) per
adapter, one adapter per GPU (None for the single-node cards: give --network-gbs). All exact
(Fractions), never floats.

Memory: the datasheets' "40 GB", "80 GB" and "141 GB" are labels, not byte counts. A record's
memory is the total the driver reports on that card: nvidia-smi memory.total (MiB = 2^20
bytes), or rocm-smi's "VRAM Total Memory (B)" for AMD's cards; where no driver figure was
found the label is read as GiB and the record says so (`memory_from_label`). Not all of it is
usable: the runtime's context and the allocator take some (--margin).
PyTorch runs float32 matmuls in full FP32 by default (TF32 is off for matmuls), so the fp32
peak is the non-Tensor-Core FP32 figure.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from accounting.units import BF16, FP8, FP32, GB, MiB

# nvidia-smi -q's "FB Memory Usage: Reserved" on an H200 (143,771 MiB total, 616 reserved,
# torch's total 143,155.94 MiB: measured on this project's H200, driver 580.159.04, torch
# 2.11): the reserve a card without its own mem_get_info figure is planned with.
USABLE_RESERVE_MIB = 616
FP4 = "fp4"  # a peak key (a Tensor Core format; no dtype of the planner's yet); FP8 is units'


GBps = GB  # bytes/s in one GB/s
DEFAULT_GPUS_PER_NODE = 8  # DGX/HGX baseboards; also a custom fabric's default


@dataclass(frozen=True)
class Source:
    """Where a record's figures come from."""
    short: str  # how a plan names it ("NVIDIA A100 datasheet (SXM)")
    document: str
    url: str
    where: str  # the table (and columns) in the document


@dataclass(frozen=True)
class Fabric:
    """A node type's links, per GPU. Sources in the comment above the fabrics.
    `gpus_per_node` is the size of the fast-link domain (the GPUs one NVLink/Infinity Fabric
    switch or mesh joins): 8 on a DGX/HGX or an 8-GPU OAM platform, 72 in a GB200 NVL72 rack
    (18 compute trays of 4 GPUs, one NVLink domain)."""
    node: str  # "DGX A100"
    link: str  # "NVLink 3", "Infinity Fabric", "PCIe Gen4 x16"
    nvlink_gbs: Fraction  # GB/s per GPU over `link`, both directions together, as quoted
    adapter: str | None  # the network adapter, "{gbits}" where its speed goes; None: none
    network_gbits: int | None  # Gb/s per adapter (per direction), one adapter per GPU
    gpus_per_node: int
    cited: str  # where the links' figures are read

    @property
    def nvlink(self) -> Fraction:
        """bytes/s per GPU per direction: half of the bidirectional figure flows each way"""
        return Fraction(self.nvlink_gbs * GBps, 2)

    @property
    def network(self) -> Fraction | None:
        """bytes/s per GPU per direction (8 bits a byte); None: no cluster network listed"""
        return None if self.network_gbits is None else Fraction(self.network_gbits * GBps, 8)

    def describe(self) -> str:
        links = f"{self.link}: {_num(Fraction(self.nvlink_gbs))} GB/s bidirectional per GPU"
        if self.adapter is None:
            return f"{links}; {self.gpus_per_node} GPUs per server, no cluster network listed"
        adapter = self.adapter.format(gbits=self.network_gbits)
        return f"{links}; {self.gpus_per_node} × {adapter} per node (one per GPU)"


@dataclass(frozen=True, kw_only=True)
class GPU:
    """One card: datasheet peaks, memory as nvidia-smi reports it, its node's fabric."""
    name: str
    nickname: str | None  # the short name people type for it, shown in --help ("A100")
    aliases: tuple[str, ...]  # other accepted spellings (any case)
    label: str  # the datasheet's memory label ("80 GB HBM2e")
    memory_mib: int  # nvidia-smi memory.total, MiB
    fp32_tflops: Fraction  # dense, non-Tensor-Core FP32
    bf16_tflops: Fraction  # dense BF16 Tensor Core
    bf16_sparse_tflops: Fraction  # the datasheet's BF16 Tensor Core figure "with sparsity"
    bandwidth_tbs: Fraction  # memory bandwidth, TB/s
    fabric: Fabric
    datasheet: Source
    memory_source: str  # where the driver's total is shown
    fp8_tflops: Fraction | None = None  # dense FP8 Tensor Core (None: no FP8 Tensor Cores)
    fp8_sparse_tflops: Fraction | None = None
    fp4_tflops: Fraction | None = None  # dense FP4 (NVFP4 / MXFP4) Tensor Core
    fp4_sparse_tflops: Fraction | None = None
    memory_from_label: bool = False  # True: no driver total found; the label read as GiB
    vendor: str = "NVIDIA"
    # the architecture the driver reports: CUDA compute capability "sm<major><minor>"
    # (developer.nvidia.com/cuda-gpus) or AMD's LLVM target "gfx<N>" (ROCm's GPU
    # architecture specs, rocm.docs.amd.com/en/latest/reference/gpu-arch-specs.html); it sizes
    # the cuBLAS/hipBLAS workspace (accounting/planning/cuda_peak.py cublas_workspace_bytes)
    arch: str | None = None
    # the name the driver reports (nvidia-smi's "Name", torch.cuda.get_device_name()), where
    # a public log shows it; engines that branch on it read it here (serving/engines.py)
    device_name: str | None = None
    # The total torch.cuda.mem_get_info() reports (cudaMemGetInfo: nvidia-smi's total less the
    # driver's "Reserved" FB memory), what the engines budget from (vLLM's requested memory,
    # SGLang's free memory); None where no figure was found (usable_bytes then subtracts the
    # largest reserve seen, USABLE_RESERVE_MIB). Issue 43, Must 3.
    mem_get_info_bytes: int | None = None

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MiB

    @property
    def usable_bytes(self) -> int:
        """Memory as torch sees it (torch.cuda.mem_get_info's total)."""
        if self.mem_get_info_bytes is not None:
            return self.mem_get_info_bytes
        return (self.memory_mib - USABLE_RESERVE_MIB) * MiB

    @property
    def peak_tflops(self) -> dict:
        """precision key (a dtype name) -> dense TFLOP/s, for the formats the card has"""
        out = {FP32: self.fp32_tflops, BF16: self.bf16_tflops}
        out.update({k: v for k, v in ((FP8, self.fp8_tflops), (FP4, self.fp4_tflops)) if v})
        return out

    @property
    def sparse_tflops(self) -> dict:
        """precision key -> the datasheet's Tensor Core figure with 2:4 sparsity"""
        return {k: v for k, v in ((BF16, self.bf16_sparse_tflops), (FP8, self.fp8_sparse_tflops),
                                  (FP4, self.fp4_sparse_tflops)) if v}

    @property
    def smi(self) -> str:
        return "label" if self.memory_from_label else \
            "rocm-smi" if self.vendor == "AMD" else "nvidia-smi"

    @property
    def source(self) -> str:
        return self.datasheet.short


def _num(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else str(float(x))
