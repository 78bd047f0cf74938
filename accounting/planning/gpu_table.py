"""The GPU table for the docs, generated from the records in accounting/planning/gpus.py
(never typed by hand): one row per card, every unit in its column's name, the sources
under it. Formatting only."""
from __future__ import annotations

from fractions import Fraction

from accounting.planning.gpus import CARDS, GPU
from accounting.tables.render import markdown_table
from accounting.tables.table import Table
from accounting.units import GiB, decimal, grouped

COLUMNS = ("GPU", "also", "memory (MiB)", "memory (GiB)", "torch's total (GiB)",
           "memory as reported by",
           "datasheet memory", "fp32 TFLOP/s (dense)", "bf16 TFLOP/s (dense)",
           "bf16 TFLOP/s (with sparsity)", "fp8 TFLOP/s (dense)", "fp8 TFLOP/s (with sparsity)",
           "fp4 TFLOP/s (dense)", "fp4 TFLOP/s (with sparsity)", "memory bandwidth (TB/s)",
           "GPU link", "link (GB/s, bidirectional)", "network (Gb/s per GPU)", "node")
NONE = "–"  # the card has no Tensor Core format of that width (or no network listed)
TITLE = "GPU table"


def _plain(x: Fraction) -> str:
    """19.5 -> '19.5', 989 -> '989', 1979 -> '1,979' (exact: the table's figures are short
    decimals)."""
    places = 0
    while (x * 10**places).denominator != 1:
        places += 1
    whole, _, frac = decimal(x, places).partition(".")
    return f"{int(whole):,}" + (f".{frac}" if frac else "")


def _maybe(x: Fraction | int | None) -> str:
    return NONE if x is None else _plain(Fraction(x))


def row(g: GPU) -> tuple[str, ...]:
    also = ", ".join(([g.nickname] if g.nickname else []) + list(g.aliases))
    torch_total = decimal(Fraction(g.usable_bytes, GiB), 2) + \
        ("" if g.mem_get_info_bytes is not None else " (est.)")
    return (g.name, also, grouped(g.memory_mib), decimal(Fraction(g.memory_bytes, GiB), 2),
            torch_total, "label (no driver figure)" if g.memory_from_label else g.smi,
            g.label, _plain(g.fp32_tflops), _plain(g.bf16_tflops), _plain(g.bf16_sparse_tflops),
            _maybe(g.fp8_tflops), _maybe(g.fp8_sparse_tflops), _maybe(g.fp4_tflops),
            _maybe(g.fp4_sparse_tflops), _plain(g.bandwidth_tbs), g.fabric.link,
            _plain(Fraction(g.fabric.nvlink_gbs)), _maybe(g.fabric.network_gbits),
            f"{g.fabric.node}, {g.fabric.gpus_per_node} GPUs")


def table() -> Table:
    sources: dict[str, list[str]] = {}
    for g in CARDS:
        for text in (f"{g.datasheet.document}, {g.datasheet.url}: {g.datasheet.where}",
                     f"memory: {g.memory_source}", f"links: {g.fabric.cited}"):
            sources.setdefault(text, []).append(g.name)
    notes = ("TFLOP/s = 10^12 FLOP/s; TB/s = 10^12 bytes/s; GB/s = 10^9 bytes/s; Gb/s = 10^9 "
             "bits/s; MiB = 2^20 bytes, GiB = 2^30 bytes. Dense peaks are what the planner uses; "
             "the datasheets' Tensor Core figures with 2:4 sparsity are twice as high (B300's "
             "fp4: 13,500 dense as NVIDIA gives it). Memory is the total the driver reports "
             "(nvidia-smi memory.total, rocm-smi VRAM total), or the label read as GiB where no "
             "driver figure was found (marked). Torch's total is what torch.cuda.mem_get_info() "
             "reports and the serving engines budget from (the driver's total less its reserved "
             "memory: measured on an H200, printed by vLLM on an H100; (est.): the total less "
             "the H200's 616 MiB reserve). " + NONE + ": no Tensor Core format of that width "
             "(or no cluster network listed: give --network-gbs). The GPU link (NVLink, AMD "
             "Infinity Fabric, PCIe) as the datasheets quote it (both directions together; half "
             "flows each way); the network is one adapter per GPU; the node is the fast-link "
             "domain (72 GPUs in a GB200 NVL72 rack). Names are matched in any case, a space "
             "as a hyphen.",
             *(f"Source ({', '.join(names)}): {text}" for text, names in sources.items()))
    return Table(TITLE, COLUMNS, tuple(row(g) for g in CARDS), align="ll" + "r" * 3 + "ll"
                 + "r" * 8 + "l" + "r" * 2 + "l", notes=notes)


def markdown() -> str:
    """The docs' GPU table (Markdown, no heading): the table, then its units and sources."""
    return "\n".join(markdown_table(table(), heading="")).rstrip("\n") + "\n"
