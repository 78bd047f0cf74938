"""The GPU table's data: one record per card with its citations (datasheet, driver memory,
node fabric). Add a card here and nowhere else: the lookup by name, `--help`, the interconnect
and the docs' GPU table (gpu_table.py) are generated from CARDS; tests/test_gpus.py types each
card's figures again from its documents. Units: accounting/planning/gpu_records.py.
"""
from __future__ import annotations

from fractions import Fraction

from accounting.planning.gpu_records import DEFAULT_GPUS_PER_NODE, GPU, Fabric, Source

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
A800_DATASHEET = Source(
    "NVIDIA A800 datasheet (SXM, 80 GB)", "NVIDIA A800 Tensor Core GPU, product page / datasheet",
    "https://www.nvidia.cn/data-center/a800/",
    "specifications, column A800 80GB SXM: the A100 80GB SXM's compute and memory (FP32 19.5 "
    "TFLOPS; BF16 Tensor Core 312 | 624 with sparsity; 80 GB HBM2e, 2,039 GB/s), NVLink cut to "
    "400 GB/s")
H800_DATASHEET = Source(
    "NVIDIA H800 datasheet (SXM)", "NVIDIA H800 Tensor Core GPU, product page / datasheet",
    "https://www.nvidia.cn/data-center/h800/",
    "specifications, column H800 SXM: the H100 SXM's tensor compute (FP32 67 TFLOPS; BF16 "
    "Tensor Core 1,979 and FP8 3,958 TFLOPS with sparsity), 80 GB HBM3 at 3.35 TB/s, NVLink "
    "400 GB/s (FP64 cut to 1 TFLOPS)")
H20_SPECS = Source(
    "NVIDIA H20 (no public NVIDIA datasheet; the figures NVIDIA gave its customers, as reported)",
    "NVIDIA HGX H20 specifications as reported (e.g. willitrunai.com/gpus/h20-96gb: '96 GB "
    "HBM3 — 4,000 GB/s', '148 TFLOPS FP16', 'NVLink 4.0 (900 GB/s)')",
    "https://willitrunai.com/es/gpus/h20-96gb",
    "FP32 44 TFLOPS; BF16/FP16 Tensor 148 TFLOPS dense; FP8 296 TFLOPS dense; 96 GB HBM3, "
    "4.0 TB/s; NVLink 900 GB/s. The figures with sparsity are taken as twice the dense ones")
GA102_WHITEPAPER = Source(
    "NVIDIA Ampere GA102 GPU architecture whitepaper (RTX 3090)",
    "NVIDIA AMPERE GA102 GPU ARCHITECTURE, appendix table (GeForce RTX 3090)",
    "https://images.nvidia.com/aem-dam/en-zz/Solutions/geforce/ampere/pdf/NVIDIA-ampere-GA102-"
    "GPU-Architecture-Whitepaper-V1.pdf",
    "Peak FP32 35.6 TFLOPS; Peak BF16 Tensor TFLOPS with FP32 Accumulate 71 | 142; no FP8; "
    "24 GB GDDR6X, 936 GB/s")
A6000_DATASHEET = Source(
    "NVIDIA RTX A6000 datasheet", "NVIDIA RTX A6000 datasheet / product page",
    "https://www.nvidia.com/en-us/design-visualization/rtx-a6000/",
    "specifications: single-precision 38.7 TFLOPS; Tensor performance 309.7 TFLOPS (with "
    "sparsity; 154.8 dense, the GA102 whitepaper's RTX A6000 column); 48 GB GDDR6 with ECC, "
    "768 GB/s; PCIe 4.0 x16 (NVLink bridge for two cards, 112.5 GB/s)")
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

_LABEL_H800 = ("no driver total found: the label's 80 GB read as 80 GiB (the H100 SXM, the same "
               "80 GB HBM3, reports 81,559 MiB)")
_LABEL_H20 = "no driver total found: the label's 96 GB read as 96 GiB"
_LABEL_A6000 = "no driver total found: the label's 48 GB read as 48 GiB"
_SMI_A800 = ("nvidia-smi memory.total 81920MiB in a public log of 'NVIDIA A800-SXM4-80GB' cards "
             "(github.com/dexmal/dexbotic issue #41)")
_SMI_3090 = ("nvidia-smi memory.total 24576MiB in public logs of 'NVIDIA GeForce RTX 3090' cards "
             "(github.com/noonghunna/club-3090 issue #390)")

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
# The export variants (A800, H800): NVLink cut to 400 GB/s per GPU (their datasheets above).
# H800 network: 50 GB/s of InfiniBand per GPU, i.e. 400 Gb/s (DeepSeek-V3 technical report,
# arXiv 2412.19437, §3.2.2: "NVLink offers a bandwidth of 160 GB/s, roughly 3.2 times that of
# IB (50 GB/s)"); the A800's and H20's servers list none (give --network-gbs).
HGX_A800 = Fabric("HGX A800", "NVLink 3", 400, None, None, DEFAULT_GPUS_PER_NODE,
                  "NVLink: the A800 datasheet (400 GB/s); no cluster network listed")
HGX_H800 = Fabric("HGX H800", "NVLink 4", 400, "InfiniBand {gbits} Gb/s", 400,
                  DEFAULT_GPUS_PER_NODE, "NVLink: the H800 datasheet (400 GB/s); network: "
                  "DeepSeek-V3 technical report §3.2.2 (IB 50 GB/s per GPU)")
HGX_H20 = Fabric("HGX H20", "NVLink 4", 900, None, None, DEFAULT_GPUS_PER_NODE,
                 "NVLink: the H20's reported specifications (900 GB/s); no cluster network listed")

# ---- the cards ------------------------------------------------------------------------------
F = Fraction
# torch.cuda.mem_get_info()'s total: the H200's measured on this project's H200 SXM (driver
# 580.159.04, CUDA 13.0, torch 2.11: 150,109,880,320 bytes = nvidia-smi's 143,771 MiB less its
# 616 MiB "Reserved"); the H100's as vLLM printed it, "total_gpu_memory 79.22GiB" (vllm PR
# #10511, an H100 80GB HBM3 of 81,559 MiB), to the 0.01 GiB printed.
_H200_TORCH = 150_109_880_320
_H100_TORCH = round(F("79.22") * 2**30)

CARDS: tuple[GPU, ...] = (
    GPU(name="A100-40GB", nickname=None, aliases=("a100-40",), label="40 GB HBM2",
        memory_mib=40_960, fp32_tflops=F("19.5"), bf16_tflops=F(312),
        bf16_sparse_tflops=F(624), bandwidth_tbs=F("1.555"), fabric=DGX_A100,
        datasheet=A100_DATASHEET, memory_source=_SMI, arch="sm80",
        device_name="NVIDIA A100-SXM4-40GB"),
    GPU(name="A100-80GB", nickname="A100", aliases=("a100-80",), label="80 GB HBM2e",
        memory_mib=81_920, fp32_tflops=F("19.5"), bf16_tflops=F(312),
        bf16_sparse_tflops=F(624), bandwidth_tbs=F("2.039"), fabric=DGX_A100,
        datasheet=A100_DATASHEET, memory_source=_SMI, arch="sm80",
        device_name="NVIDIA A100-SXM4-80GB"),
    # Dense BF16 on Hopper: the datasheets give only the figure with sparsity (1,979); the
    # dense 989 is the whole part of the Hopper architecture whitepaper's 989.4 (H100 SXM5),
    # a hair under half the sparse figure; FP8 likewise 1,979 (3,958 with sparsity). The
    # H200 SXM has the same GH100 compute.
    GPU(name="H100-SXM", nickname="H100", aliases=("h100-80gb",), label="80 GB HBM3",
        memory_mib=81_559, fp32_tflops=F(67), bf16_tflops=F(989), bf16_sparse_tflops=F(1979),
        bandwidth_tbs=F("3.35"), fabric=DGX_H100, datasheet=H100_DATASHEET, memory_source=_SMI,
        fp8_tflops=F(1979), fp8_sparse_tflops=F(3958), arch="sm90",
        device_name="NVIDIA H100 80GB HBM3", mem_get_info_bytes=_H100_TORCH),
    GPU(name="H200", nickname=None, aliases=("h200-sxm",), label="141 GB HBM3e",
        memory_mib=143_771, fp32_tflops=F(67), bf16_tflops=F(989), bf16_sparse_tflops=F(1979),
        bandwidth_tbs=F("4.8"), fabric=DGX_H200, datasheet=H200_DATASHEET,
        memory_source=_SMI_H200, fp8_tflops=F(1979), fp8_sparse_tflops=F(3958), arch="sm90",
        device_name="NVIDIA H200", mem_get_info_bytes=_H200_TORCH),
    # Blackwell: the per-GPU figures are the 8-GPU (72-GPU) system's divided by 8 (72); the
    # dense ones half of those with sparsity, except B300's FP4, whose dense figure is given.
    GPU(name="B200", nickname=None, aliases=("b200-sxm", "hgx-b200"), label="180 GB HBM3e",
        memory_mib=183_359, fp32_tflops=F(75), bf16_tflops=F(2250), bf16_sparse_tflops=F(4500),
        bandwidth_tbs=F(8), fabric=DGX_B200, datasheet=B200_DATASHEET,
        memory_source=_smi_logs("NVIDIA B200", "1000 W"), fp8_tflops=F(4500),
        fp8_sparse_tflops=F(9000), fp4_tflops=F(9000), fp4_sparse_tflops=F(18000),
        arch="sm100", device_name="NVIDIA B200"),
    GPU(name="B300", nickname=None, aliases=("b300-sxm", "hgx-b300"), label="288 GB HBM3e",
        memory_mib=275_040, fp32_tflops=F(75), bf16_tflops=F(2250), bf16_sparse_tflops=F(4500),
        bandwidth_tbs=F(8), fabric=DGX_B300, datasheet=B300_DATASHEET,
        memory_source=_smi_logs("NVIDIA B300 SXM6 AC", "1100 W"), fp8_tflops=F(4500),
        fp8_sparse_tflops=F(9000), fp4_tflops=F(13500), fp4_sparse_tflops=F(18000),
        arch="sm103", device_name="NVIDIA B300 SXM6 AC"),
    GPU(name="GB200", nickname=None, aliases=("gb200-nvl72", "b200-nvl72"),
        label="186 GB HBM3e", memory_mib=189_471, fp32_tflops=F(80), bf16_tflops=F(2500),
        bf16_sparse_tflops=F(5000), bandwidth_tbs=F(8), fabric=NVL72,
        datasheet=GB200_DATASHEET, memory_source=_smi_logs("NVIDIA GB200", "1200 W"),
        fp8_tflops=F(5000), fp8_sparse_tflops=F(10000), fp4_tflops=F(10000),
        fp4_sparse_tflops=F(20000), arch="sm100", device_name="NVIDIA GB200"),
    GPU(name="MI300X", nickname=None, aliases=("amd-mi300x",), label="192 GB HBM3",
        memory_mib=196_288, fp32_tflops=F("163.4"), bf16_tflops=F("1307.4"),
        bf16_sparse_tflops=F("2614.9"), bandwidth_tbs=F("5.3"), fabric=MI300X_PLATFORM,
        datasheet=MI300X_DATASHEET, memory_source=_ROCM_MI300X, fp8_tflops=F("2614.9"),
        fp8_sparse_tflops=F("5229.8"), vendor="AMD", arch="gfx942"),
    GPU(name="MI325X", nickname=None, aliases=("amd-mi325x",), label="256 GB HBM3E",
        memory_mib=262_144, fp32_tflops=F("163.4"), bf16_tflops=F("1307.4"),
        bf16_sparse_tflops=F("2614.9"), bandwidth_tbs=F(6), fabric=MI325X_PLATFORM,
        datasheet=MI325X_DATASHEET, memory_source=_LABEL_MI325X, fp8_tflops=F("2614.9"),
        fp8_sparse_tflops=F("5229.8"), memory_from_label=True, vendor="AMD", arch="gfx942"),
    GPU(name="MI355X", nickname=None, aliases=("amd-mi355x",), label="288 GB HBM3E",
        memory_mib=294_896, fp32_tflops=F("157.3"), bf16_tflops=F("2516.6"),
        bf16_sparse_tflops=F("5033.2"), bandwidth_tbs=F(8), fabric=MI355X_PLATFORM,
        datasheet=MI355X_DATASHEET, memory_source=_ROCM_MI355X, fp8_tflops=F("5033.2"),
        fp8_sparse_tflops=F("10066.4"), fp4_tflops=F("10066.4"), vendor="AMD", arch="gfx950"),
    GPU(name="L40S", nickname=None, aliases=(), label="48 GB GDDR6", memory_mib=46_068,
        fp32_tflops=F("91.6"), bf16_tflops=F("362.05"), bf16_sparse_tflops=F(733),
        bandwidth_tbs=F("0.864"), fabric=PCIE4_SERVER, datasheet=L40S_DATASHEET,
        memory_source=_smi_logs("NVIDIA L40S", "350 W"), fp8_tflops=F(733),
        fp8_sparse_tflops=F(1466), arch="sm89", device_name="NVIDIA L40S"),
    GPU(name="L4", nickname=None, aliases=(), label="24 GB GDDR6", memory_mib=23_034,
        fp32_tflops=F("30.3"), bf16_tflops=F(121), bf16_sparse_tflops=F(242),
        bandwidth_tbs=F("0.3"), fabric=PCIE4_SERVER, datasheet=L4_DATASHEET,
        memory_source=_smi_logs("NVIDIA L4", "72 W"), fp8_tflops=F("242.5"),
        fp8_sparse_tflops=F(485), arch="sm89", device_name="NVIDIA L4"),
    GPU(name="A10G", nickname=None, aliases=(), label="24 GB GDDR6", memory_mib=23_028,
        fp32_tflops=F("31.52"), bf16_tflops=F(70), bf16_sparse_tflops=F(140),
        bandwidth_tbs=F("0.6"), fabric=PCIE4_SERVER, datasheet=A10G_DATASHEET,
        memory_source=_smi_logs("NVIDIA A10G", "300 W"), arch="sm86",
        device_name="NVIDIA A10G"),
    GPU(name="RTX-4090", nickname=None, aliases=("rtx4090", "4090", "geforce-rtx-4090"),
        label="24 GB GDDR6X", memory_mib=24_564, fp32_tflops=F("82.6"), bf16_tflops=F("165.2"),
        bf16_sparse_tflops=F("330.4"), bandwidth_tbs=F("1.008"), fabric=PCIE4_SERVER,
        datasheet=ADA_WHITEPAPER, memory_source=_smi_logs("NVIDIA GeForce RTX 4090", "450 W"),
        fp8_tflops=F("330.3"), fp8_sparse_tflops=F("660.6"), arch="sm89",
        device_name="NVIDIA GeForce RTX 4090"),
    GPU(name="RTX-5090", nickname=None, aliases=("rtx5090", "5090", "geforce-rtx-5090"),
        label="32 GB GDDR7", memory_mib=32_607, fp32_tflops=F("104.8"), bf16_tflops=F("209.5"),
        bf16_sparse_tflops=F(419), bandwidth_tbs=F("1.792"), fabric=PCIE5_SERVER,
        datasheet=RTX_BLACKWELL_WHITEPAPER,
        memory_source=_smi_logs("NVIDIA GeForce RTX 5090", "575 W"), fp8_tflops=F(419),
        fp8_sparse_tflops=F(838), fp4_tflops=F(1676), fp4_sparse_tflops=F(3352), arch="sm120",
        device_name="NVIDIA GeForce RTX 5090"),
    # export variants (A800, H800, H20) and workstation cards (RTX 3090, RTX A6000)
    GPU(name="A800-80GB", nickname="A800", aliases=("a800-sxm4-80gb", "a800-80"),
        label="80 GB HBM2e", memory_mib=81_920, fp32_tflops=F("19.5"), bf16_tflops=F(312),
        bf16_sparse_tflops=F(624), bandwidth_tbs=F("2.039"), fabric=HGX_A800,
        datasheet=A800_DATASHEET, memory_source=_SMI_A800, arch="sm80",
        device_name="NVIDIA A800-SXM4-80GB"),
    GPU(name="H800", nickname=None, aliases=("h800-sxm",), label="80 GB HBM3",
        memory_mib=81_920, fp32_tflops=F(67), bf16_tflops=F(989), bf16_sparse_tflops=F(1979),
        bandwidth_tbs=F("3.35"), fabric=HGX_H800, datasheet=H800_DATASHEET,
        memory_source=_LABEL_H800, fp8_tflops=F(1979), fp8_sparse_tflops=F(3958),
        memory_from_label=True, arch="sm90", device_name="NVIDIA H800"),
    GPU(name="H20", nickname=None, aliases=("h20-96gb",), label="96 GB HBM3", memory_mib=98_304,
        fp32_tflops=F(44), bf16_tflops=F(148), bf16_sparse_tflops=F(296),
        bandwidth_tbs=F(4), fabric=HGX_H20, datasheet=H20_SPECS, memory_source=_LABEL_H20,
        fp8_tflops=F(296), fp8_sparse_tflops=F(592), memory_from_label=True, arch="sm90",
        device_name="NVIDIA H20"),
    GPU(name="RTX-3090", nickname=None, aliases=("rtx3090", "3090", "geforce-rtx-3090"),
        label="24 GB GDDR6X", memory_mib=24_576, fp32_tflops=F("35.6"), bf16_tflops=F(71),
        bf16_sparse_tflops=F(142), bandwidth_tbs=F("0.936"), fabric=PCIE4_SERVER,
        datasheet=GA102_WHITEPAPER, memory_source=_SMI_3090, arch="sm86",
        device_name="NVIDIA GeForce RTX 3090"),
    GPU(name="RTX-A6000", nickname=None, aliases=("a6000",), label="48 GB GDDR6",
        memory_mib=49_152, fp32_tflops=F("38.7"), bf16_tflops=F("154.8"),
        bf16_sparse_tflops=F("309.7"), bandwidth_tbs=F("0.768"), fabric=PCIE4_SERVER,
        datasheet=A6000_DATASHEET, memory_source=_LABEL_A6000, memory_from_label=True,
        arch="sm86", device_name="NVIDIA RTX A6000"),
)
del F
