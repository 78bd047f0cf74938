"""The GPU table as data: one record per card, each with its citations, from which the
lookup by name, the `plan --help` list, the interconnect and the docs' GPU table
(accounting/planning/gpu_table.py) are all generated. Add a card here and nowhere else.

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

import difflib
from dataclasses import dataclass
from fractions import Fraction

from accounting.runtime.errors import UsageError
from accounting.units import BF16, FP8, FP32, GB, TERA, MiB

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


@dataclass(frozen=True)
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


# ---- sources (where each record's figures are read; the figures themselves are stated once,
# in CARDS below, and independently in tests/test_gpus.py) --------------------------------
A100_DATASHEET = Source(
    "NVIDIA A100 datasheet (SXM)", "NVIDIA A100 Tensor Core GPU datasheet (1758950-r4, June 2021)",
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
    "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
    "specifications table, columns A100 40GB SXM and A100 80GB SXM")
H100_DATASHEET = Source(
    "NVIDIA H100 datasheet (SXM)", "NVIDIA H100 Tensor Core GPU datasheet",
    "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
    "technical specifications table, column H100 SXM")
H200_DATASHEET = Source(
    "NVIDIA H200 datasheet (SXM)", "NVIDIA H200 Tensor Core GPU, product page",
    "https://www.nvidia.com/en-us/data-center/h200/", "specifications, column H200 SXM")
B200_DATASHEET = Source(
    "NVIDIA DGX B200 datasheet (per GPU: the 8-GPU figures / 8)",
    "NVIDIA DGX B200 datasheet and the NVIDIA HGX platform page (HGX B200 column)",
    "https://resources.nvidia.com/en-us-dgx-systems/dgx-b200-datasheet; "
    "https://www.nvidia.com/en-us/data-center/hgx/",
    "specifications, 8 GPUs: FP4 Tensor Core 144 PFLOPS, FP8 72 PFLOPS, FP16/BF16 36 PFLOPS "
    "(with sparsity), FP32 600 TFLOPS, 1,440 GB HBM3e, 64 TB/s, NVLink 5 1.8 TB/s per GPU")
B300_DATASHEET = Source(
    "NVIDIA HGX B300 (per GPU: the 8-GPU figures / 8)", "NVIDIA HGX platform page, HGX B300 column",
    "https://www.nvidia.com/en-us/data-center/hgx/",
    "specifications, 8 GPUs: FP4 Tensor Core 144 | 108 PFLOPS (with | without sparsity), FP8 "
    "72 PFLOPS, FP16/BF16 36 PFLOPS (with sparsity), FP32 600 TFLOPS, 2.3 TB HBM3e, 64 TB/s")
GB200_DATASHEET = Source(
    "NVIDIA GB200 NVL72 (per GPU: the rack's figures / 72)", "NVIDIA GB200 NVL72 product page",
    "https://www.nvidia.com/en-us/data-center/gb200-nvl72/",
    "specifications, column GB200 NVL72 (72 Blackwell GPUs): FP4 Tensor Core 1,440 PFLOPS, "
    "FP8/FP6 720 PFLOPS, FP16/BF16 360 PFLOPS (with sparsity), FP32 5,760 TFLOPS, up to 13.4 TB "
    "HBM3e at 576 TB/s, NVLink 130 TB/s (1.8 TB/s per GPU)")
MI300X_DATASHEET = Source(
    "AMD Instinct MI300X specifications", "AMD Instinct MI300X accelerator, product page",
    "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html",
    "specifications: peak FP32 163.4 TFLOPS; FP16/BF16 1,307.4 (2,614.9 with structured "
    "sparsity); FP8 2,614.9 (5,229.8); 192 GB HBM3, 5.3 TB/s; 7 Infinity Fabric links, 128 GB/s "
    "each")
MI325X_DATASHEET = Source(
    "AMD Instinct MI325X specifications", "AMD Instinct MI325X accelerator, product page",
    "https://www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html",
    "specifications: the MI300X's compute (1,307.4 / 2,614.9 BF16, 2,614.9 / 5,229.8 FP8, "
    "163.4 FP32); 256 GB HBM3E, 6 TB/s")
MI355X_DATASHEET = Source(
    "AMD Instinct MI355X specifications", "AMD Instinct MI355X accelerator, product page",
    "https://www.amd.com/en/products/accelerators/instinct/mi350/mi355x.html",
    "specifications: peak FP32 157.3 TFLOPS; FP16/BF16 2,516.6 (5,033.2 with structured "
    "sparsity); FP8 5,033.2 (10,066.4); MXFP4 10,066.4; 288 GB HBM3E, 8 TB/s; Infinity Fabric "
    "7 links of 153.6 GB/s. BF16 = 2.4 GHz · 512 FMA · 2 · 1,024 matrix cores (stas00/"
    "ml-engineering, compute/accelerator/README.md)")
L40S_DATASHEET = Source(
    "NVIDIA L40S datasheet", "NVIDIA L40S GPU datasheet / product page",
    "https://www.nvidia.com/en-us/data-center/l40s/",
    "specifications: FP32 91.6 TFLOPS; BF16 Tensor 362.05 | 733 (with sparsity); FP8 733 | "
    "1,466; 48 GB GDDR6, 864 GB/s; PCIe Gen4 x16 64 GB/s bidirectional")
L4_DATASHEET = Source(
    "NVIDIA L4 datasheet", "NVIDIA L4 Tensor Core GPU datasheet / product page",
    "https://www.nvidia.com/en-us/data-center/l4/",
    "specifications: FP32 30.3 TFLOPS; BF16 Tensor 242 (with sparsity); FP8 485 (with "
    "sparsity); 24 GB GDDR6, 300 GB/s; PCIe Gen4 x16 64 GB/s")
A10G_DATASHEET = Source(
    "A10G (AWS's variant of the A10; no NVIDIA datasheet)",
    "Baseten, 'NVIDIA A10 vs A10G for ML model inference' (AWS publishes no peak figures)",
    "https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/",
    "spec sheet A10 vs A10G: A10G FP32 31.52 TFLOPS, BF16 Tensor 70 TFLOPS (140 with "
    "sparsity), 24 GB GDDR6, 600 GB/s")
ADA_WHITEPAPER = Source(
    "NVIDIA Ada GPU architecture whitepaper (RTX 4090)", "NVIDIA ADA GPU ARCHITECTURE, v2.01, "
    "Appendix A table 2 (GeForce RTX 4090)",
    "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf",
    "Peak FP32 82.6 TFLOPS; Peak BF16 Tensor with FP32 accumulate 165.2 | 330.4; Peak FP8 "
    "Tensor with FP32 accumulate 330.3 | 660.6; 24 GB GDDR6X, 1,008 GB/s")
RTX_BLACKWELL_WHITEPAPER = Source(
    "NVIDIA RTX Blackwell GPU architecture whitepaper (RTX 5090)",
    "NVIDIA RTX BLACKWELL GPU ARCHITECTURE, appendix table (GeForce RTX 5090)",
    "https://images.nvidia.com/aem-dam/Solutions/geforce/blackwell/nvidia-rtx-blackwell-gpu-"
    "architecture.pdf",
    "Peak FP32 104.8 TFLOPS; Peak BF16 Tensor with FP32 accumulate 209.5 | 419; FP8 with FP32 "
    "accumulate 419 | 838; FP4 1,676 | 3,352; 32 GB GDDR7, 1,792 GB/s")
_SMI = "nvidia-smi memory.total as listed in https://github.com/modal-labs/modal-client/pull/2797"
_SMI_H200 = "nvidia-smi memory.total in public nvidia-smi logs of 'NVIDIA H200' cards (700 W SXM)"


def _smi_logs(name: str, watts: str) -> str:
    return f"nvidia-smi memory.total in public nvidia-smi logs of '{name}' cards ({watts})"


_ROCM_MI300X = ("rocm-smi --showmeminfo vram 'VRAM Total Memory (B): 205822885888' in public "
                "logs of MI300X machines (= 196,288 MiB)")
_ROCM_MI355X = ("rocm-smi VRAM total 309,220,868,096 bytes in a public MI355X log (= 294,896 "
                "MiB)")
_LABEL_MI325X = ("no driver total found: the label's 256 GB read as 256 GiB (the ROCm "
                 "gpu-specs table's 'VRAM (GiB) 256'); the driver reports somewhat less (the "
                 "MI300X's 192 GB label is 196,288 MiB, 191.7 GiB)")

# ---- node fabrics -----------------------------------------------------------------------
# Sources:
#   NVLink, A100: 12 third-generation links, 600 GB/s total per GPU
#     (https://www.nvidia.com/en-us/data-center/nvlink/; A100 datasheet above: "NVLink 600GB/s").
#   NVLink, H100 and H200 SXM: 18 fourth-generation links, 900 GB/s bidirectional per GPU
#     (https://www.nvidia.com/en-us/data-center/technologies/hopper-architecture/; H100 and
#     H200 datasheets above: "NVLink: 900GB/s").
#   NVLink 5, Blackwell (B200, B300, GB200): 1.8 TB/s per GPU (the DGX B200 datasheet, the
#     HGX page, the GB200 NVL72 page: "NVLink Switch System 130 TB/s" for 72 GPUs).
#   InfiniBand, DGX A100: eight single-port ConnectX-6 HDR 200 Gb/s adapters for the compute
#     fabric, one per GPU (NVIDIA DGX SuperPOD reference architecture RA-09950-001, DGX A100
#     system).
#   InfiniBand, DGX H100 and H200: "four OSFP ports serving eight single-port NVIDIA
#     ConnectX-7 VPI, up to 400 Gb/s InfiniBand/Ethernet" (https://docs.nvidia.com/dgx-basepod/
#     reference-architecture-infrastructure-foundation-enterprise-ai/latest/core-components.html);
#     DGX B200 the same eight ConnectX-7 400 Gb/s (its datasheet); DGX B300 eight ConnectX-8
#     SuperNICs at 800 Gb/s (its datasheet); GB200 NVL72 one ConnectX-7 400 Gb/s per GPU
#     (four per compute tray of four GPUs; the DGX SuperPOD GB200 reference architecture).
#   AMD Infinity Fabric: seven links per GPU to the seven others of an 8-GPU OAM platform,
#     128 GB/s each on MI300X/MI325X (896 GB/s), 153.6 GB/s on MI355X (1,075.2 GB/s) (the
#     product pages above); the network one 400 Gb/s NIC per GPU (Azure ND MI300X v5:
#     "8x400 Gigabit NDR", learn.microsoft.com nd-mi300x-v5-series).
#   PCIe cards: PCIe Gen4 x16 is 64 GB/s bidirectional (L40S and L4 datasheets), Gen5 x16
#     128 GB/s; a server of 8 (AWS g5.48xlarge: 8 A10G; g6.48xlarge: 8 L4; g6e.48xlarge:
#     8 L40S); no cluster network listed (give --network-gbs).
# These are link peaks; NCCL reaches a share of them (its "bus bandwidth"): scale them with
# --nvlink-gbs / --network-gbs, as --mfu scales the FLOP/s peak.
_HOPPER_LINKS = ("NVLink: https://www.nvidia.com/en-us/data-center/technologies/hopper-architecture/ "
                 "and the H100 and H200 datasheets; network: https://docs.nvidia.com/dgx-basepod/"
                 "reference-architecture-infrastructure-foundation-enterprise-ai/latest/"
                 "core-components.html")
_BLACKWELL_LINKS = ("NVLink 5, 1.8 TB/s per GPU, and the network adapters: the DGX B200 / HGX "
                    "B300 / GB200 NVL72 datasheets cited with each card")
_AMD_LINKS = ("Infinity Fabric links: the AMD product pages cited with each card; network: one "
              "400 Gb/s NIC per GPU (Azure ND MI300X v5, 8x400 Gigabit NDR)")
_PCIE = ("PCIe: the card's datasheet (Gen4 x16 64 GB/s, Gen5 x16 128 GB/s bidirectional); "
         "8 per server (AWS g5/g6/g6e.48xlarge); no cluster network listed")
DGX_A100 = Fabric("DGX A100", "NVLink 3", 600, "HDR InfiniBand {gbits} Gb/s", 200,
                  DEFAULT_GPUS_PER_NODE,
                  "NVLink: https://www.nvidia.com/en-us/data-center/nvlink/ and the A100 "
                  "datasheet; network: NVIDIA DGX SuperPOD reference architecture RA-09950-001 "
                  "(DGX A100 system)")
DGX_H100 = Fabric("DGX H100", "NVLink 4", 900, "ConnectX-7 {gbits} Gb/s InfiniBand", 400,
                  DEFAULT_GPUS_PER_NODE, _HOPPER_LINKS)
DGX_H200 = Fabric("DGX H200", "NVLink 4", 900, "ConnectX-7 {gbits} Gb/s InfiniBand", 400,
                  DEFAULT_GPUS_PER_NODE, _HOPPER_LINKS)
DGX_B200 = Fabric("DGX B200", "NVLink 5", 1800, "ConnectX-7 {gbits} Gb/s InfiniBand", 400,
                  DEFAULT_GPUS_PER_NODE, _BLACKWELL_LINKS)
DGX_B300 = Fabric("DGX B300", "NVLink 5", 1800, "ConnectX-8 SuperNIC {gbits} Gb/s", 800,
                  DEFAULT_GPUS_PER_NODE, _BLACKWELL_LINKS)
NVL72 = Fabric("GB200 NVL72 (one NVLink domain)", "NVLink 5", 1800,
               "ConnectX-7 {gbits} Gb/s InfiniBand", 400, 72, _BLACKWELL_LINKS)
MI300X_PLATFORM = Fabric("MI300X platform", "Infinity Fabric", 896, "{gbits} Gb/s NIC", 400,
                         DEFAULT_GPUS_PER_NODE, _AMD_LINKS)
MI325X_PLATFORM = Fabric("MI325X platform", "Infinity Fabric", 896, "{gbits} Gb/s NIC", 400,
                         DEFAULT_GPUS_PER_NODE, _AMD_LINKS)
MI355X_PLATFORM = Fabric("MI355X platform", "Infinity Fabric", Fraction("1075.2"),
                         "{gbits} Gb/s NIC", 400, DEFAULT_GPUS_PER_NODE, _AMD_LINKS)
PCIE4_SERVER = Fabric("PCIe server", "PCIe Gen4 x16", 64, None, None, DEFAULT_GPUS_PER_NODE,
                      _PCIE)
PCIE5_SERVER = Fabric("PCIe Gen5 server", "PCIe Gen5 x16", 128, None, None,
                      DEFAULT_GPUS_PER_NODE, _PCIE)

# torch.cuda.mem_get_info()'s total: the H200's measured on this project's H200 SXM (driver
# 580.159.04, CUDA 13.0, torch 2.11: 150,109,880,320 bytes = nvidia-smi's 143,771 MiB less its
# 616 MiB "Reserved"); the H100's as vLLM printed it, "total_gpu_memory 79.22GiB" (vllm PR
# #10511, an H100 80GB HBM3 of 81,559 MiB), to the 0.01 GiB printed.
_H200_TORCH = 150_109_880_320
_H100_TORCH = round(Fraction("79.22") * 2**30)

# ---- the cards ------------------------------------------------------------------------------
F = Fraction
CARDS: tuple[GPU, ...] = (
    GPU("A100-40GB", None, ("a100-40",), "40 GB HBM2", 40_960, F("19.5"), F(312), F(624),
        F("1.555"), DGX_A100, A100_DATASHEET, _SMI, arch="sm80"),
    GPU("A100-80GB", "A100", ("a100-80",), "80 GB HBM2e", 81_920, F("19.5"), F(312), F(624),
        F("2.039"), DGX_A100, A100_DATASHEET, _SMI, arch="sm80"),
    # Dense BF16 on Hopper: the datasheets give only the figure with sparsity (1,979); the
    # dense 989 is the whole part of the Hopper architecture whitepaper's 989.4 (H100 SXM5),
    # a hair under half the sparse figure; FP8 likewise 1,979 (3,958 with sparsity). The
    # H200 SXM has the same GH100 compute.
    GPU("H100-SXM", "H100", ("h100-80gb",), "80 GB HBM3", 81_559, F(67), F(989), F(1979),
        F("3.35"), DGX_H100, H100_DATASHEET, _SMI, fp8_tflops=F(1979), fp8_sparse_tflops=F(3958),
        arch="sm90", mem_get_info_bytes=_H100_TORCH),
    GPU("H200", None, ("h200-sxm",), "141 GB HBM3e", 143_771, F(67), F(989), F(1979),
        F("4.8"), DGX_H200, H200_DATASHEET, _SMI_H200, fp8_tflops=F(1979),
        fp8_sparse_tflops=F(3958), arch="sm90", mem_get_info_bytes=_H200_TORCH),
    # Blackwell: the per-GPU figures are the 8-GPU (72-GPU) system's divided by 8 (72); the
    # dense ones half of those with sparsity, except B300's FP4, whose dense figure is given.
    GPU("B200", None, ("b200-sxm", "hgx-b200"), "180 GB HBM3e", 183_359, F(75), F(2250),
        F(4500), F(8), DGX_B200, B200_DATASHEET, _smi_logs("NVIDIA B200", "1000 W"),
        fp8_tflops=F(4500), fp8_sparse_tflops=F(9000), fp4_tflops=F(9000),
        fp4_sparse_tflops=F(18000), arch="sm100"),
    GPU("B300", None, ("b300-sxm", "hgx-b300"), "288 GB HBM3e", 275_040, F(75), F(2250),
        F(4500), F(8), DGX_B300, B300_DATASHEET,
        _smi_logs("NVIDIA B300 SXM6 AC", "1100 W"), fp8_tflops=F(4500),
        fp8_sparse_tflops=F(9000), fp4_tflops=F(13500), fp4_sparse_tflops=F(18000), arch="sm103"),
    GPU("GB200", None, ("gb200-nvl72", "b200-nvl72"), "186 GB HBM3e", 189_471, F(80), F(2500),
        F(5000), F(8), NVL72, GB200_DATASHEET, _smi_logs("NVIDIA GB200", "1200 W"),
        fp8_tflops=F(5000), fp8_sparse_tflops=F(10000), fp4_tflops=F(10000),
        fp4_sparse_tflops=F(20000), arch="sm100"),
    GPU("MI300X", None, ("amd-mi300x",), "192 GB HBM3", 196_288, F("163.4"), F("1307.4"),
        F("2614.9"), F("5.3"), MI300X_PLATFORM, MI300X_DATASHEET, _ROCM_MI300X,
        fp8_tflops=F("2614.9"), fp8_sparse_tflops=F("5229.8"), vendor="AMD", arch="gfx942"),
    GPU("MI325X", None, ("amd-mi325x",), "256 GB HBM3E", 262_144, F("163.4"), F("1307.4"),
        F("2614.9"), F(6), MI325X_PLATFORM, MI325X_DATASHEET, _LABEL_MI325X,
        fp8_tflops=F("2614.9"), fp8_sparse_tflops=F("5229.8"), memory_from_label=True,
        vendor="AMD", arch="gfx942"),
    GPU("MI355X", None, ("amd-mi355x",), "288 GB HBM3E", 294_896, F("157.3"), F("2516.6"),
        F("5033.2"), F(8), MI355X_PLATFORM, MI355X_DATASHEET, _ROCM_MI355X,
        fp8_tflops=F("5033.2"), fp8_sparse_tflops=F("10066.4"), fp4_tflops=F("10066.4"),
        vendor="AMD", arch="gfx950"),
    GPU("L40S", None, (), "48 GB GDDR6", 46_068, F("91.6"), F("362.05"), F(733), F("0.864"),
        PCIE4_SERVER, L40S_DATASHEET, _smi_logs("NVIDIA L40S", "350 W"), fp8_tflops=F(733),
        fp8_sparse_tflops=F(1466), arch="sm89"),
    GPU("L4", None, (), "24 GB GDDR6", 23_034, F("30.3"), F(121), F(242), F("0.3"),
        PCIE4_SERVER, L4_DATASHEET, _smi_logs("NVIDIA L4", "72 W"), fp8_tflops=F("242.5"),
        fp8_sparse_tflops=F(485), arch="sm89"),
    GPU("A10G", None, (), "24 GB GDDR6", 23_028, F("31.52"), F(70), F(140), F("0.6"),
        PCIE4_SERVER, A10G_DATASHEET, _smi_logs("NVIDIA A10G", "300 W"), arch="sm86"),
    GPU("RTX-4090", None, ("rtx4090", "4090", "geforce-rtx-4090"), "24 GB GDDR6X", 24_564,
        F("82.6"), F("165.2"), F("330.4"), F("1.008"), PCIE4_SERVER, ADA_WHITEPAPER,
        _smi_logs("NVIDIA GeForce RTX 4090", "450 W"), fp8_tflops=F("330.3"),
        fp8_sparse_tflops=F("660.6"), arch="sm89"),
    GPU("RTX-5090", None, ("rtx5090", "5090", "geforce-rtx-5090"), "32 GB GDDR7", 32_607,
        F("104.8"), F("209.5"), F(419), F("1.792"), PCIE5_SERVER, RTX_BLACKWELL_WHITEPAPER,
        _smi_logs("NVIDIA GeForce RTX 5090", "575 W"), fp8_tflops=F(419),
        fp8_sparse_tflops=F(838), fp4_tflops=F(1676), fp4_sparse_tflops=F(3352), arch="sm120"),
)
del F

GPUS: dict[str, GPU] = {g.name: g for g in CARDS}
# Every spelling that names a card (lower case) -> its name.
def _key(spelling: str) -> str:
    """How names are compared: any case, a space or underscore as a hyphen ('RTX 4090')."""
    return "-".join(spelling.strip().lower().replace("_", " ").replace("-", " ").split())


_NAMES = {_key(spelling): g.name for g in CARDS
          for spelling in (g.name, *((g.nickname,) if g.nickname else ()), *g.aliases)}


def nicknames() -> list[tuple[str, str]]:
    """(nickname, card name) for the cards that have one: ('A100', 'A100-80GB'), ..."""
    return [(g.nickname, g.name) for g in CARDS if g.nickname]


def gpu_help() -> str:
    """The --gpu help: the cards, from the table."""
    aliases = ", ".join(f"{nick} = {name}" for nick, name in nicknames())
    return (f"one of {', '.join(GPUS)} (aliases: {aliases}); datasheet peaks, memory as "
            "the driver reports it (nvidia-smi, rocm-smi)")


def get_gpu(name: str) -> GPU:
    """Case-insensitive lookup; an unknown name lists the known ones."""
    key = _key(name)
    if key in _NAMES:
        return GPUS[_NAMES[key]]
    near = difflib.get_close_matches(name, list(GPUS), n=1, cutoff=0.3)
    hint = f" (did you mean {near[0]}?)" if near else ""
    nicks = ", ".join(nick for nick, _ in nicknames())
    raise UsageError(f"unknown GPU {name!r}{hint}; known: {', '.join(GPUS)} (aliases {nicks}), "
                     f"or give --gpu-mem, --gpu-flops and --gpu-bw")


@dataclass(frozen=True)
class Hardware:
    """What a plan needs from the hardware; any of the three may be unknown (None)."""
    name: str
    memory_bytes: int | None
    peak_flops: Fraction | None  # FLOP/s at the plan's precision
    bandwidth: Fraction | None  # bytes/s
    source: str
    arch: str | None = None  # GPU.arch (None: numbers given by hand)

    @classmethod
    def from_gpu(cls, gpu: GPU, compute: str) -> Hardware:
        if compute not in gpu.peak_tflops:  # fp8 training on a card without fp8 Tensor Cores
            have = ", ".join(g.name for g in CARDS if compute in g.peak_tflops)
            raise UsageError(f"{gpu.name} has no {compute} Tensor Cores (its datasheet lists "
                             f"none), so {compute} training cannot run on it: give --gpu one "
                             f"of {have}, or --precision bf16-mixed")
        return cls(gpu.name, gpu.memory_bytes, gpu.peak_tflops[compute] * TERA,
                   gpu.bandwidth_tbs * TERA,
                   f"{gpu.source}: {compute} peak {_num(gpu.peak_tflops[compute])} TFLOP/s, "
                   f"{_num(gpu.bandwidth_tbs)} TB/s; memory {gpu.memory_bytes // MiB:,} MiB "
                   + (f"from the label (no driver total found; datasheet: {gpu.label})"
                      if gpu.memory_from_label else
                      f"as {gpu.smi} reports (datasheet: {gpu.label})"), gpu.arch)

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
@dataclass(frozen=True)
class Interconnect:
    name: str
    nvlink: Fraction  # bytes/s per GPU per direction, inside a node (its fast-link domain)
    network: Fraction | None  # bytes/s per GPU per direction, between nodes (None: unknown)
    gpus_per_node: int
    source: str

    @classmethod
    def of(cls, fabric: Fabric) -> Interconnect:
        return cls(fabric.node, fabric.nvlink, fabric.network, fabric.gpus_per_node,
                   fabric.describe())


INTERCONNECTS: dict[str, Interconnect] = {g.name: Interconnect.of(g.fabric) for g in CARDS}


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
    nodes = gpus_per_node or (base.gpus_per_node if base else DEFAULT_GPUS_PER_NODE)
    changed = base is None or any(v is not None for v in (nvlink_gbs, network_gbs, gpus_per_node))
    return Interconnect(("custom" if base is None else base.name + (" (modified)" if changed else "")),
                        figures["--nvlink-gbs"], figures["--network-gbs"], nodes,
                        "user-given" if base is None else base.source
                        + ("; figures overridden" if changed else ""))
