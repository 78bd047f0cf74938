"""Every cell of the GPU table against the published figures.

The docs' GPU table (accounting/planning/gpu_table.markdown()) is generated from the one
record per card in accounting/planning/gpus.py. This file types the figures itself, from
the documents cited beside each (never from accounting/), parses the generated Markdown and
compares it cell by cell; then checks that what a plan computes with (Hardware,
Interconnect) and what --help and the lookup say come from the same records.

Units: peaks are TFLOP/s (10^12 FLOP/s), dense unless the column says "with sparsity";
memory bandwidth TB/s (10^12 bytes/s); NVLink GB/s (10^9 bytes/s) per GPU with both
directions added, as NVIDIA quotes it; the network Gb/s (10^9 bits/s) per adapter; memory
in MiB (2^20 bytes) as nvidia-smi reports it, and GiB (2^30 bytes).
"""
from __future__ import annotations

from fractions import Fraction

import pytest

from accounting.planning import gpu_table
from accounting.planning.gpus import GPUS, Hardware, get_gpu, interconnect
from accounting.runtime.errors import UsageError

F = Fraction

# ---- the figures, typed from the documents ------------------------------------------------
# A100 (both): NVIDIA A100 Tensor Core GPU datasheet, 1758950-r4 (June 2021), specifications
#   table, columns "A100 40GB SXM" and "A100 80GB SXM":
#   https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
#   "FP32 19.5 TFLOPS"; "BFLOAT16 Tensor Core 312 TFLOPS | 624 TFLOPS*" (* with sparsity);
#   "GPU Memory 40GB HBM2 | 80GB HBM2e"; "GPU Memory Bandwidth 1,555GB/s | 2,039GB/s";
#   "Interconnect: NVIDIA NVLink 600GB/s".
# H100-SXM: NVIDIA H100 Tensor Core GPU datasheet, technical specifications, column
#   "H100 SXM": https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet
#   "FP32 67 teraFLOPS"; "BFLOAT16 Tensor Core 1,979 teraFLOPS*" (* with sparsity; the
#   datasheet gives no dense figure); "GPU memory 80GB"; "GPU memory bandwidth 3.35TB/s";
#   "NVIDIA NVLink: 900GB/s". Memory type HBM3 (the nvidia-smi name, "NVIDIA H100 80GB HBM3").
# H200: NVIDIA H200 product page, specifications, column "H200 SXM":
#   https://www.nvidia.com/en-us/data-center/h200/ "FP32 67 TFLOPS"; "BFLOAT16 Tensor Core
#   1,979 TFLOPS" (with sparsity); "GPU Memory 141GB"; "GPU Memory Bandwidth 4.8TB/s"; memory
#   HBM3e; "NVIDIA NVLink: 900GB/s".
# Dense BF16 on Hopper: the NVIDIA H100 Tensor Core GPU Architecture whitepaper (GTC22) lists
#   989.4 TFLOPS dense BF16 (1,978.9 with sparsity) for the H100 SXM5; the planner uses its
#   whole part. The H200 has the same GH100 compute (same SMs and clocks: the datasheets'
#   FP32 and sparse BF16 figures are equal, checked below).
# B200: NVIDIA DGX B200 datasheet (8 GPUs): "FP4 Tensor Core 144 PFLOPS", "FP8 Tensor Core
#   72 PFLOPS" (with sparsity), "1,440GB total GPU memory", "64TB/s HBM3e bandwidth", NVLink 5
#   "1.8TB/s" per GPU, 8 single-port ConnectX-7 400 Gb/s; NVIDIA HGX page, HGX B200 column:
#   "FP16/BF16 36 PFLOPS" (sparse), "FP32 600 TFLOPS". Per GPU: / 8; dense = sparse / 2.
# B300: NVIDIA HGX page, HGX B300 column: "FP4 Tensor Core 144 PFLOPS | 108 PFLOPS", FP8
#   72 PFLOPS, FP16/BF16 36 PFLOPS, FP32 600 TFLOPS, "2.3 TB" (8 × 288 GB), 64 TB/s; DGX B300:
#   8 ConnectX-8 SuperNICs at 800 Gb/s.
# GB200: NVIDIA GB200 NVL72 page, column GB200 NVL72 (72 GPUs): "FP4 Tensor Core 1,440
#   PFLOPS", "FP8/FP6 Tensor Core 720 PFLOPS", "FP16/BF16 360 PFLOPS" (with sparsity),
#   "FP32 5,760 TFLOPS", "Up to 13.4 TB HBM3e | 576 TB/s", NVLink 130 TB/s (72 × 1.8 TB/s).
# MI300X: amd.com MI300X page: "Peak FP32 163.4 TFLOPs"; "Peak BF16 1307.4 TFLOPs",
#   "2614.9 TFLOPs with structured sparsity"; "Peak FP8 2614.9", "5229.8 with sparsity";
#   "192 GB HBM3", "5.3 TB/s"; "Infinity Fabric links 7", "128 GB/s" each (7 × 128 = 896).
# MI325X: amd.com MI325X page: the same compute as MI300X; "256 GB HBM3E", "6 TB/s".
# MI355X: amd.com MI355X page: "Peak FP32 157.3"; "FP16/BF16 2.5 PFLOPs" = 2,516.6 (2.4 GHz
#   · 512 FMA · 2 · 1,024 matrix cores, stas00/ml-engineering compute/accelerator/README.md),
#   5,033.2 with sparsity; FP8 5,033.2 / 10,066.4; MXFP4 10,066.4; "288 GB HBM3E", "8 TB/s";
#   Infinity Fabric 7 × 153.6 GB/s = 1,075.2.
# L40S: NVIDIA L40S datasheet: "FP32 91.6 TFLOPS", "BF16 Tensor 362.05 | 733*", "FP8 733 |
#   1,466*", "48GB GDDR6", "864GB/s", "PCIe Gen4 x16: 64GB/s bidirectional".
# L4: NVIDIA L4 datasheet: "FP32 30.3 teraFLOPs", "BFLOAT16 Tensor Core 242 teraFLOPS*",
#   "FP8 Tensor Core 485 teraFLOPs*" (* with sparsity), "24GB", "300GB/s", PCIe Gen4 x16.
# A10G: Baseten's A10 vs A10G spec sheet (AWS publishes none): FP32 31.52 TFLOPS, BF16 Tensor
#   70 TFLOPS (140 with sparsity), 24 GB GDDR6, 600 GB/s.
# RTX 4090: NVIDIA Ada GPU architecture whitepaper v2.01, Appendix A: "Peak FP32 TFLOPS
#   82.6", "Peak BF16 Tensor TFLOPS with FP32 Accumulate 165.2/330.4", "Peak FP8 Tensor
#   TFLOPS with FP32 Accumulate 330.3/660.6", "24 GB GDDR6X", "1008 GB/sec".
# RTX 5090: NVIDIA RTX Blackwell GPU architecture whitepaper, appendix: FP32 104.8; BF16 with
#   FP32 accumulate 209.5/419; FP8 with FP32 accumulate 419/838; FP4 1,676/3,352; 32 GB GDDR7;
#   1,792 GB/s; PCIe Gen5 x16 (128 GB/s bidirectional).
# A800-80GB: NVIDIA's A800 product page (nvidia.cn/data-center/a800/), column A800 80GB SXM:
#   the A100 80GB SXM's "FP32 19.5 TFLOPS", "BFLOAT16 Tensor Core 312 | 624*", "80GB HBM2e",
#   "2,039GB/s"; "NVLink 400GB/s". nvidia-smi "NVIDIA A800-SXM4-80GB ... 81920MiB" (a public
#   log: github.com/dexmal/dexbotic issue #41).
# H800: NVIDIA's H800 product page (nvidia.cn/data-center/h800/), column H800 SXM: the H100
#   SXM's "FP32 67", "BFLOAT16 Tensor Core 1,979*", "FP8 3,958*", "80GB", "3.35TB/s";
#   "NVLink 400GB/s". Network: DeepSeek-V3 technical report (arXiv 2412.19437) §3.2.2, "IB
#   (50 GB/s)" per GPU = 400 Gb/s. No nvidia-smi total found: the label read as GiB.
# H20: no NVIDIA datasheet is public; the figures reported from its spec sheet
#   (willitrunai.com/gpus/h20-96gb: "96 GB HBM3 — 4,000 GB/s", "148 TFLOPS FP16", "NVLink
#   4.0 (900 GB/s)"; FP32 44, FP8 296 dense as widely reported). Sparse = 2 × dense (taken,
#   not printed). No nvidia-smi total found: the label read as GiB.
# RTX 3090: NVIDIA Ampere GA102 GPU architecture whitepaper, appendix: "Peak FP32 TFLOPS
#   35.6", "Peak BF16 Tensor TFLOPS with FP32 Accumulate 71/142", "24 GB GDDR6X", "936
#   GB/sec"; no FP8. nvidia-smi 24576MiB (github.com/noonghunna/club-3090 issue #390).
# RTX A6000: NVIDIA RTX A6000 datasheet: "Single-precision performance 38.7 TFLOPS", "Tensor
#   performance 309.7 TFLOPS" (with sparsity; 154.8 dense), "48 GB GDDR6", "768 GB/s", PCIe
#   4.0 x16. No nvidia-smi total found: the label read as GiB.
N = None
DATASHEET = {
    #             fp32 TFLOP/s  bf16 sparse   memory label     bandwidth GB/s  link GB/s
    "A100-40GB": (F("19.5"), F(624), "40 GB HBM2", F(1555), 600),
    "A100-80GB": (F("19.5"), F(624), "80 GB HBM2e", F(2039), 600),
    "H100-SXM": (F(67), F(1979), "80 GB HBM3", F(3350), 900),
    "H200": (F(67), F(1979), "141 GB HBM3e", F(4800), 900),
    "B200": (F(600) / 8, F(36000) / 8, "180 GB HBM3e", F(64000) / 8, 1800),
    "B300": (F(600) / 8, F(36000) / 8, "288 GB HBM3e", F(64000) / 8, 1800),
    "GB200": (F(5760) / 72, F(360000) / 72, "186 GB HBM3e", F(576000) / 72, 1800),
    "MI300X": (F("163.4"), F("2614.9"), "192 GB HBM3", F(5300), 7 * 128),
    "MI325X": (F("163.4"), F("2614.9"), "256 GB HBM3E", F(6000), 7 * 128),
    "MI355X": (F("157.3"), F("5033.2"), "288 GB HBM3E", F(8000), 7 * F("153.6")),
    "L40S": (F("91.6"), F(733), "48 GB GDDR6", F(864), 64),
    "L4": (F("30.3"), F(242), "24 GB GDDR6", F(300), 64),
    "A10G": (F("31.52"), F(140), "24 GB GDDR6", F(600), 64),
    "RTX-4090": (F("82.6"), F("330.4"), "24 GB GDDR6X", F(1008), 64),
    "RTX-5090": (F("104.8"), F(419), "32 GB GDDR7", F(1792), 128),
    "A800-80GB": (F("19.5"), F(624), "80 GB HBM2e", F(2039), 400),
    "H800": (F(67), F(1979), "80 GB HBM3", F(3350), 400),
    "H20": (F(44), 2 * F(148), "96 GB HBM3", F(4000), 900),
    "RTX-3090": (F("35.6"), F(142), "24 GB GDDR6X", F(936), 64),
    "RTX-A6000": (F("38.7"), F("309.7"), "48 GB GDDR6", F(768), 64),
}
# Dense BF16 TFLOP/s: the A100 datasheet's own dense figure; Hopper: the whitepaper's 989.4,
# whole TFLOP/s; Blackwell and AMD: half the sparse figure; L40S, L4, RTX: the dense figure
# the datasheet prints beside the sparse one (L40S 362.05, not 733/2).
DENSE_BF16 = {"A100-40GB": F(312), "A100-80GB": F(312), "A800-80GB": F(312),
              "H800": F(int(F("989.4"))), "H20": F(148), "RTX-3090": F(71),
              "RTX-A6000": F("154.8"),
              "H100-SXM": F(int(F("989.4"))), "H200": F(int(F("989.4"))),
              "B200": F(2250), "B300": F(2250), "GB200": F(2500), "MI300X": F("1307.4"),
              "MI325X": F("1307.4"), "MI355X": F("2516.6"), "L40S": F("362.05"), "L4": F(121),
              "A10G": F(70), "RTX-4090": F("165.2"), "RTX-5090": F("209.5")}
# fp8 and fp4 (dense, with sparsity); None: no such Tensor Core format. Hopper fp8: the
# whitepaper's 1,978.9 dense (3,957.8 sparse), whole TFLOP/s as the datasheets print them.
FP8 = {"A100-40GB": (N, N), "A100-80GB": (N, N), "A800-80GB": (N, N),
       "H800": (F(1979), F(3958)), "H20": (F(296), 2 * F(296)), "RTX-3090": (N, N),
       "RTX-A6000": (N, N), "H100-SXM": (F(1979), F(3958)),
       "H200": (F(1979), F(3958)), "B200": (F(72000) / 16, F(72000) / 8),
       "B300": (F(72000) / 16, F(72000) / 8), "GB200": (F(720000) / 144, F(720000) / 72),
       "MI300X": (F("2614.9"), F("5229.8")), "MI325X": (F("2614.9"), F("5229.8")),
       "MI355X": (F("5033.2"), F("10066.4")), "L40S": (F(733), F(1466)),
       "L4": (F("242.5"), F(485)), "A10G": (N, N), "RTX-4090": (F("330.3"), F("660.6")),
       "RTX-5090": (F(419), F(838))}
FP4 = {"B200": (F(144000) / 16, F(144000) / 8), "B300": (F(108000) / 8, F(144000) / 8),
       "GB200": (F(1440000) / 144, F(1440000) / 72), "MI355X": (F("10066.4"), N),
       "RTX-5090": (F(1676), F(3352))}

# Memory as the driver reports it, MiB. nvidia-smi memory.total: A100 40GB 40960MiB, A100
# 80GB 81920MiB, H100 81559MiB as listed in https://github.com/modal-labs/modal-client/pull/2797;
# H200 143771MiB, B200 183359MiB, B300 ("NVIDIA B300 SXM6 AC") 275040MiB, GB200 189471MiB,
# L40S 46068MiB, L4 23034MiB, A10G 23028MiB, RTX 4090 24564MiB, RTX 5090 32607MiB as printed
# ("x MiB / N MiB") in public nvidia-smi logs of those cards. rocm-smi "VRAM Total Memory (B)":
# MI300X 205822885888 bytes, MI355X 309,220,868,096 bytes (public logs). MI325X: no driver
# figure found: the label's 256 read as GiB (the ROCm gpu-specs table's "VRAM (GiB) 256").
SMI_MIB = {"A100-40GB": 40_960, "A100-80GB": 81_920, "H100-SXM": 81_559, "H200": 143_771,
           "B200": 183_359, "B300": 275_040, "GB200": 189_471,
           "MI300X": 205_822_885_888 // 2**20, "MI325X": 256 * 1024,
           "MI355X": 309_220_868_096 // 2**20, "L40S": 46_068, "L4": 23_034, "A10G": 23_028,
           "RTX-4090": 24_564, "RTX-5090": 32_607, "A800-80GB": 81_920, "H800": 80 * 1024,
           "H20": 96 * 1024, "RTX-3090": 24_576, "RTX-A6000": 48 * 1024}
REPORTED_BY = {n: "nvidia-smi" for n in SMI_MIB} | {"MI300X": "rocm-smi", "MI355X": "rocm-smi",
                                                    "MI325X": "label (no driver figure)",
                                                    "H800": "label (no driver figure)",
                                                    "H20": "label (no driver figure)",
                                                    "RTX-A6000": "label (no driver figure)"}

# Network per GPU: DGX A100 has eight ConnectX-6 HDR InfiniBand 200 Gb/s adapters for the
# compute fabric, one per GPU (NVIDIA DGX SuperPOD reference architecture RA-09950-001);
# DGX H100/H200 "eight single-port NVIDIA ConnectX-7 VPI, up to 400 Gb/s" (DGX BasePOD
# reference architecture, core components); DGX B200 the same; DGX B300 ConnectX-8 800 Gb/s;
# GB200 NVL72 one ConnectX-7 400 Gb/s per GPU; AMD platforms one 400 Gb/s NIC per GPU (Azure
# ND MI300X v5: 8x400 Gigabit NDR); the PCIe cards none listed. Eight GPUs per node (DGX/HGX
# baseboards, 8-GPU OAM platforms, AWS g5/g6/g6e.48xlarge), 72 in one GB200 NVL72 domain.
NETWORK_GBITS = {"A100-40GB": 200, "A100-80GB": 200, "H100-SXM": 400, "H200": 400,
                 "B200": 400, "B300": 800, "GB200": 400, "MI300X": 400, "MI325X": 400,
                 "MI355X": 400, "L40S": N, "L4": N, "A10G": N, "RTX-4090": N, "RTX-5090": N,
                 "A800-80GB": N, "H800": 400, "H20": N, "RTX-3090": N, "RTX-A6000": N}
NODE = {"A100-40GB": "DGX A100", "A100-80GB": "DGX A100", "H100-SXM": "DGX H100",
        "H200": "DGX H200", "B200": "DGX B200", "B300": "DGX B300",
        "GB200": "GB200 NVL72 (one NVLink domain)", "MI300X": "MI300X platform",
        "MI325X": "MI325X platform", "MI355X": "MI355X platform", "L40S": "PCIe server",
        "L4": "PCIe server", "A10G": "PCIe server", "RTX-4090": "PCIe server",
        "RTX-5090": "PCIe Gen5 server", "A800-80GB": "HGX A800", "H800": "HGX H800",
        "H20": "HGX H20", "RTX-3090": "PCIe server", "RTX-A6000": "PCIe server"}
LINK = {"A100-40GB": "NVLink 3", "A100-80GB": "NVLink 3", "H100-SXM": "NVLink 4",
        "H200": "NVLink 4", "B200": "NVLink 5", "B300": "NVLink 5", "GB200": "NVLink 5",
        "MI300X": "Infinity Fabric", "MI325X": "Infinity Fabric", "MI355X": "Infinity Fabric",
        "L40S": "PCIe Gen4 x16", "L4": "PCIe Gen4 x16", "A10G": "PCIe Gen4 x16",
        "RTX-4090": "PCIe Gen4 x16", "RTX-5090": "PCIe Gen5 x16", "A800-80GB": "NVLink 3",
        "H800": "NVLink 4", "H20": "NVLink 4", "RTX-3090": "PCIe Gen4 x16",
        "RTX-A6000": "PCIe Gen4 x16"}
GPUS_PER_NODE = {n: 8 for n in NODE} | {"GB200": 72}

# The names users type, other than the card's own (matched in any case).
ALSO = {"A100-40GB": {"a100-40"}, "A100-80GB": {"A100", "a100-80"},
        "H100-SXM": {"H100", "h100-80gb"}, "H200": {"h200-sxm"},
        "B200": {"b200-sxm", "hgx-b200"}, "B300": {"b300-sxm", "hgx-b300"},
        "GB200": {"gb200-nvl72", "b200-nvl72"}, "MI300X": {"amd-mi300x"},
        "MI325X": {"amd-mi325x"}, "MI355X": {"amd-mi355x"}, "L40S": set(), "L4": set(),
        "A10G": set(), "RTX-4090": {"rtx4090", "4090", "geforce-rtx-4090"},
        "RTX-5090": {"rtx5090", "5090", "geforce-rtx-5090"},
        "A800-80GB": {"A800", "a800-sxm4-80gb", "a800-80"}, "H800": {"h800-sxm"},
        "H20": {"h20-96gb"}, "RTX-3090": {"rtx3090", "3090", "geforce-rtx-3090"},
        "RTX-A6000": {"a6000"}}


# torch.cuda.mem_get_info()'s total: 150,109,880,320 bytes measured on the project's H200
# (torch 2.11, driver 580.159.04); "total_gpu_memory 79.22GiB" printed by vLLM on an H100
# 80GB HBM3 (vllm PR #10511)
TORCH_TOTAL = {"H200": "139.80", "H100-SXM": "79.22"}


def _cell(x) -> str:
    return "–" if x is None else str(x)


def _number(cell: str) -> Fraction:
    return Fraction(cell.replace(",", ""))


def _rows() -> tuple[list[str], list[dict[str, str]]]:
    """The generated Markdown table, parsed: its header and one dict per row."""
    lines = gpu_table.markdown().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| GPU |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    assert set(lines[start + 1]) <= set("|:-"), lines[start + 1]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == len(header), line
        rows.append(dict(zip(header, cells)))
    return header, rows


def _expected(name: str) -> dict:
    """Each column's check for one card: cell -> bool."""
    fp32, sparse, label, bandwidth_gbs, nvlink = DATASHEET[name]
    mib = SMI_MIB[name]
    fp8, fp8s = FP8[name]
    fp4, fp4s = FP4.get(name, (None, None))

    def peak(x):
        return lambda c: (c == "–") if x is None else (c != "–" and _number(c) == x)
    return {
        "GPU": lambda c: c == name,
        "also": lambda c: set(c.split(", ")) - {""} == ALSO[name],
        "memory (MiB)": lambda c: c == f"{mib:,}",
        "memory as reported by": lambda c: c == REPORTED_BY[name],
        # 1 GiB = 1,024 MiB; two decimals (no tie occurs, so the rounding rule does not matter)
        "memory (GiB)": lambda c: _number(c) == Fraction(round(Fraction(mib, 1024) * 100), 100),
        # issue 43: torch.cuda.mem_get_info()'s total, measured (H200) or printed by vLLM
        # (H100), else the driver's total less the H200's 616 MiB reserve, marked (est.)
        "torch's total (GiB)": lambda c: c == TORCH_TOTAL.get(
            name, f"{float(Fraction(round(Fraction(mib - 616, 1024) * 100), 100)):.2f} (est.)"),
        "datasheet memory": lambda c: c == label,
        "fp32 TFLOP/s (dense)": lambda c: _number(c) == fp32,
        "bf16 TFLOP/s (dense)": lambda c: _number(c) == DENSE_BF16[name],
        "bf16 TFLOP/s (with sparsity)": lambda c: _number(c) == sparse,
        "fp8 TFLOP/s (dense)": peak(fp8), "fp8 TFLOP/s (with sparsity)": peak(fp8s),
        "fp4 TFLOP/s (dense)": peak(fp4), "fp4 TFLOP/s (with sparsity)": peak(fp4s),
        "memory bandwidth (TB/s)": lambda c: _number(c) * 1000 == bandwidth_gbs,
        "GPU link": lambda c: c == LINK[name],
        "link (GB/s, bidirectional)": lambda c: _number(c) == nvlink,
        "network (Gb/s per GPU)": peak(NETWORK_GBITS[name]),
        "node": lambda c: c == f"{NODE[name]}, {GPUS_PER_NODE[name]} GPUs",
    }


def test_every_card_is_checked_and_every_column_has_a_check():
    header, rows = _rows()
    assert [r["GPU"] for r in rows] == list(DATASHEET)  # a new card needs its figures here
    assert set(header) == set(_expected("H200"))  # a new column needs its check here


@pytest.mark.parametrize("name", list(DATASHEET))
def test_every_cell_against_its_source(name):
    row = next(r for r in _rows()[1] if r["GPU"] == name)
    wrong = {col: cell for col, cell in row.items() if not _expected(name)[col](cell)}
    assert not wrong, wrong


def test_sparse_figures_are_twice_the_dense_ones():
    # the datasheets' footnote: sparsity doubles the Tensor Core figure. A100: exactly; the
    # Hopper whitepaper's 989.4 doubles to 1,978.8, which the datasheets round to 1,979.
    # The L40S datasheet prints 362.05 dense beside 733 sparse (not 2 × 362.05 = 724.1).
    for name, (_, sparse, *_) in DATASHEET.items():
        assert abs(2 * DENSE_BF16[name] - sparse) <= (9 if name == "L40S" else 2), name
    for name, (dense, sparse) in [*FP8.items(), *FP4.items()]:
        assert dense is None or sparse is None or abs(2 * dense - sparse) <= 2 or name == "B300"
    assert DATASHEET["H100-SXM"][:2] == DATASHEET["H200"][:2]  # same GH100 compute
    assert DATASHEET["MI300X"][:2] == DATASHEET["MI325X"][:2]  # same CDNA 3 compute
    # MI355X BF16 from its clock: 2.4 GHz · 512 FMA/clock · 2 FLOP · 1,024 matrix cores
    assert round(F(2400 * 512 * 2 * 1024, 10**6), 1) == DENSE_BF16["MI355X"]


def test_the_table_cites_every_card():
    text = gpu_table.markdown()
    for url in ("nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
                "resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
                "www.nvidia.com/en-us/data-center/h200/", "modal-labs/modal-client/pull/2797",
                "dgx-b200-datasheet", "www.nvidia.com/en-us/data-center/hgx/",
                "www.nvidia.com/en-us/data-center/gb200-nvl72/", "mi300/mi300x.html",
                "mi300/mi325x.html", "mi350/mi355x.html", "data-center/l40s/",
                "data-center/l4/", "baseten.co", "nvidia-ada-gpu-architecture.pdf",
                "nvidia-rtx-blackwell-gpu-architecture.pdf"):
        assert url in text
    assert "dense" in text and "with sparsity" in text and "MiB = 2^20 bytes" in text


@pytest.mark.parametrize("name", list(DATASHEET))
def test_a_plan_computes_with_the_same_figures(name):
    fp32, _, _, bandwidth_gbs, nvlink = DATASHEET[name]
    for compute, peak in (("fp32", fp32), ("bf16", DENSE_BF16[name])):
        hw = Hardware.from_gpu(get_gpu(name), compute)
        assert hw.peak_flops == peak * 10**12
        assert hw.bandwidth == bandwidth_gbs * 10**9
        assert hw.memory_bytes == SMI_MIB[name] * 2**20
    if FP8[name][0] is not None:
        assert Hardware.from_gpu(get_gpu(name), "fp8").peak_flops == FP8[name][0] * 10**12
    assert ("fp8" in get_gpu(name).peak_tflops) == (FP8[name][0] is not None)
    assert ("fp4" in get_gpu(name).peak_tflops) == (name in FP4)
    net = interconnect(name)
    assert net.nvlink == Fraction(nvlink * 10**9, 2)  # half of the bidirectional figure each way
    gbits = NETWORK_GBITS[name]
    assert net.network == (None if gbits is None else Fraction(gbits * 10**9, 8))  # bits to bytes
    assert (net.name, net.gpus_per_node) == (NODE[name], GPUS_PER_NODE[name])


def test_vendor_spellings():
    # as NVIDIA and AMD write them, and as nvidia-smi names them
    for spelling, name in (("B200", "B200"), ("GB200", "GB200"), ("MI300X", "MI300X"),
                           ("RTX 4090", "RTX-4090"), ("GeForce RTX 5090", "RTX-5090"),
                           ("mi355x", "MI355X"), ("L40S", "L40S")):
        assert get_gpu(spelling).name == name


@pytest.mark.parametrize("name", list(DATASHEET))
def test_every_spelling_finds_its_card(name):
    for spelling in {name, name.lower(), name.upper(), *ALSO[name]}:
        assert get_gpu(f" {spelling} ").name == name


def test_help_and_errors_list_every_card(capsys):
    from accounting.cli.plan import parser
    with pytest.raises(SystemExit):
        parser().parse_args(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for name in DATASHEET:
        assert name in help_text
    assert "A100 = A100-80GB" in help_text and "H100 = H100-SXM" in help_text
    with pytest.raises(UsageError) as e:
        get_gpu("V100")
    assert "known: " + ", ".join(DATASHEET) in str(e.value)
    assert list(GPUS) == list(DATASHEET)


def test_the_new_cards_cite_their_sources():
    text = gpu_table.markdown()
    for url in ("nvidia.cn/data-center/a800/", "nvidia.cn/data-center/h800/", "h20-96gb",
                "NVIDIA-ampere-GA102-GPU-Architecture-Whitepaper-V1.pdf",
                "design-visualization/rtx-a6000/"):
        assert url in text


# ---- a named card with its memory given (issue 45) ----------------------------------------
# 96 GiB = 96 · 2^30 = 103,079,215,104 bytes (hand arithmetic); the H100's own figures stay.
GIB96 = 96 * 2**30


def test_a_named_card_takes_a_given_memory():
    from accounting.planning.plan import hardware
    hw = hardware("H100", GIB96, compute="bf16")
    assert hw.memory_bytes == 103_079_215_104
    assert hw.peak_flops == DENSE_BF16["H100-SXM"] * 10**12  # the card's peak, unchanged
    assert hw.bandwidth == DATASHEET["H100-SXM"][3] * 10**9
    assert "98,304 MiB given" in hw.source  # 96 · 1,024 MiB, said where it came from


@pytest.mark.parametrize("argv", [
    ("plan", "gpt2-small", "--gpu", "H100", "--gpu-mem", "96GiB"),
    ("plan", "gpt2-small", "--gpus", "2", "--gpu", "H100", "--gpu-mem", "96GiB"),
    ("serve", "gpt2-small", "--gpu", "H100", "--gpu-mem", "96GiB"),
])
def test_gpu_and_gpu_mem_together_are_accepted(capsys, argv):
    from cli_run import run
    code, out, err = run(capsys, *argv, "--format", "json")
    assert code == 0, err
    assert str(103_079_215_104) in out  # the given memory, in bytes, is what was planned with


def test_a_named_card_still_refuses_a_given_peak_or_bandwidth(capsys):
    from cli_run import refused_in_one_line
    refused_in_one_line(capsys, "plan", "gpt2-small", "--gpu", "H100", "--gpu-flops", "500",
                        expected="not both")


def test_vllm_batch_defaults_follow_the_device_name():
    # vllm/engine/arg_utils.py EngineArgs.get_batch_defaults: 8192 batched tokens and 1024
    # sequences when total memory >= 70 GiB and "a100" is not in the device name torch
    # reports, else 2048 and 256. The A800 (81,920 MiB, "NVIDIA A800-SXM4-80GB") is not an
    # A100 by that test; the A100 80GB ("NVIDIA A100-SXM4-80GB") is.
    from accounting.formats.schemes import get_scheme
    from accounting.serving.plan import serve
    from accounting.architecture.presets import get_preset
    c = get_preset("gpt2-small")
    for gpu, chunk, seqs in (("A800", 8192, 1024), ("A100", 2048, 256), ("H20", 8192, 1024),
                             ("RTX-3090", 2048, 256)):
        d = serve(c, get_scheme("bf16"), gpu=gpu).defaults
        assert (d.max_num_batched_tokens, d.max_num_seqs) == (chunk, seqs), gpu
