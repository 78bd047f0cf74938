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
DATASHEET = {
    #             fp32 TFLOP/s  bf16 sparse   memory label     bandwidth GB/s  NVLink GB/s
    "A100-40GB": (F("19.5"), F(624), "40 GB HBM2", F(1555), 600),
    "A100-80GB": (F("19.5"), F(624), "80 GB HBM2e", F(2039), 600),
    "H100-SXM": (F(67), F(1979), "80 GB HBM3", F(3350), 900),
    "H200": (F(67), F(1979), "141 GB HBM3e", F(4800), 900),
}
# Dense BF16 TFLOP/s: the A100 datasheet's own dense figure; Hopper: the whitepaper's 989.4,
# whole TFLOP/s.
DENSE_BF16 = {"A100-40GB": F(312), "A100-80GB": F(312),
              "H100-SXM": F(int(F("989.4"))), "H200": F(int(F("989.4")))}

# nvidia-smi memory.total (MiB): A100 40GB 40960MiB, A100 80GB 81920MiB, H100 81559MiB as
# listed in https://github.com/modal-labs/modal-client/pull/2797; H200 143771MiB as printed
# ("x MiB / 143771MiB", 700 W cap) in public nvidia-smi logs of NVIDIA H200 cards.
SMI_MIB = {"A100-40GB": 40_960, "A100-80GB": 81_920, "H100-SXM": 81_559, "H200": 143_771}

# Network per GPU: DGX A100 has eight ConnectX-6 HDR InfiniBand 200 Gb/s adapters for the
# compute fabric, one per GPU (NVIDIA DGX SuperPOD reference architecture RA-09950-001);
# DGX H100/H200 "eight single-port NVIDIA ConnectX-7 VPI, up to 400 Gb/s" (DGX BasePOD
# reference architecture, core components). Eight GPUs per node (DGX/HGX baseboards).
NETWORK_GBITS = {"A100-40GB": 200, "A100-80GB": 200, "H100-SXM": 400, "H200": 400}
NODE = {"A100-40GB": "DGX A100", "A100-80GB": "DGX A100", "H100-SXM": "DGX H100",
        "H200": "DGX H200"}
GPUS_PER_NODE = 8

# The names users type, other than the card's own (matched in any case).
ALSO = {"A100-40GB": {"a100-40"}, "A100-80GB": {"A100", "a100-80"},
        "H100-SXM": {"H100", "h100-80gb"}, "H200": {"h200-sxm"}}


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
    return {
        "GPU": lambda c: c == name,
        "also": lambda c: set(c.split(", ")) == ALSO[name],
        "memory (nvidia-smi, MiB)": lambda c: c == f"{mib:,}",
        # 1 GiB = 1,024 MiB; two decimals (no tie occurs, so the rounding rule does not matter)
        "memory (GiB)": lambda c: _number(c) == Fraction(round(Fraction(mib, 1024) * 100), 100),
        "datasheet memory": lambda c: c == label,
        "fp32 TFLOP/s (dense)": lambda c: _number(c) == fp32,
        "bf16 TFLOP/s (dense)": lambda c: _number(c) == DENSE_BF16[name],
        "bf16 TFLOP/s (with sparsity)": lambda c: _number(c) == sparse,
        "memory bandwidth (TB/s)": lambda c: _number(c) * 1000 == bandwidth_gbs,
        "NVLink (GB/s, bidirectional)": lambda c: _number(c) == nvlink,
        "network (Gb/s per GPU)": lambda c: _number(c) == NETWORK_GBITS[name],
        "node": lambda c: c == f"{NODE[name]}, {GPUS_PER_NODE} GPUs",
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
    for name, (_, sparse, *_) in DATASHEET.items():
        assert abs(2 * DENSE_BF16[name] - sparse) <= 2, name
    assert DATASHEET["H100-SXM"][:2] == DATASHEET["H200"][:2]  # same GH100 compute


def test_the_table_cites_every_card():
    text = gpu_table.markdown()
    for url in ("nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
                "resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
                "www.nvidia.com/en-us/data-center/h200/", "modal-labs/modal-client/pull/2797"):
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
    net = interconnect(name)
    assert net.nvlink == Fraction(nvlink * 10**9, 2)  # half of the bidirectional figure each way
    assert net.network == Fraction(NETWORK_GBITS[name] * 10**9, 8)  # bits to bytes
    assert (net.name, net.gpus_per_node) == (NODE[name], GPUS_PER_NODE)


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
