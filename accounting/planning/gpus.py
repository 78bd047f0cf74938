"""The GPU table as data: one record per card, each with its citations, from which the
lookup by name, the `plan --help` list, the interconnect and the docs' GPU table
(accounting/planning/gpu_table.py) are all generated. Add a card here and nowhere else.

Units, stated once for every record: peaks are dense TFLOP/s (10^12 FLOP/s; the datasheets'
Tensor Core figures "with sparsity" are twice the dense ones, and the record keeps that
figure too); memory bandwidth is TB/s (10^12 bytes/s); NVLink is the datasheets' GB/s
(10^9 bytes/s) per GPU, both directions together; the network is Gb/s (10^9 bits/s) per
adapter, one adapter per GPU. All exact (Fractions), never floats.

Memory: the datasheets' "40 GB", "80 GB" and "141 GB" are labels, not byte counts. A record's
memory is the total nvidia-smi reports (memory.total, in MiB = 2^20 bytes) on that card. Not
all of it is usable: the CUDA context and the allocator take some (--margin).
PyTorch runs float32 matmuls in full FP32 by default (TF32 is off for matmuls), so the fp32
peak is the non-Tensor-Core FP32 figure.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from fractions import Fraction

from accounting.runtime.errors import UsageError
from accounting.units import BF16, FP32, GB, TERA, MiB

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
    """A node type's links, per GPU. Sources in the comment above FABRICS."""
    node: str  # "DGX A100"
    nvlink_generation: int
    nvlink_gbs: int  # GB/s per GPU, both directions together, as the datasheets quote it
    adapter: str  # the network adapter, "{gbits}" where its speed goes
    network_gbits: int  # Gb/s per adapter (per direction), one adapter per GPU
    gpus_per_node: int
    cited: str  # where the links' figures are read

    @property
    def nvlink(self) -> Fraction:
        """bytes/s per GPU per direction: half of the bidirectional figure flows each way"""
        return Fraction(self.nvlink_gbs * GBps, 2)

    @property
    def network(self) -> Fraction:
        """bytes/s per GPU per direction (8 bits a byte)"""
        return Fraction(self.network_gbits * GBps, 8)

    def describe(self) -> str:
        adapter = self.adapter.format(gbits=self.network_gbits)
        return (f"NVLink {self.nvlink_generation}: {self.nvlink_gbs} GB/s bidirectional per GPU; "
                f"{self.gpus_per_node} × {adapter} per node (one per GPU)")


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
    memory_source: str  # where the nvidia-smi total is shown

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MiB

    @property
    def peak_tflops(self) -> dict:
        """precision key (a dtype name) -> dense TFLOP/s"""
        return {FP32: self.fp32_tflops, BF16: self.bf16_tflops}

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
_SMI = "nvidia-smi memory.total as listed in https://github.com/modal-labs/modal-client/pull/2797"
_SMI_H200 = "nvidia-smi memory.total in public nvidia-smi logs of 'NVIDIA H200' cards (700 W SXM)"

# ---- node fabrics -----------------------------------------------------------------------
# Sources:
#   NVLink, A100: 12 third-generation links, 600 GB/s total per GPU
#     (https://www.nvidia.com/en-us/data-center/nvlink/; A100 datasheet above: "NVLink 600GB/s").
#   NVLink, H100 and H200 SXM: 18 fourth-generation links, 900 GB/s bidirectional per GPU
#     (https://www.nvidia.com/en-us/data-center/technologies/hopper-architecture/; H100 and
#     H200 datasheets above: "NVLink: 900GB/s").
#   InfiniBand, DGX A100: eight single-port ConnectX-6 HDR 200 Gb/s adapters for the compute
#     fabric, one per GPU (NVIDIA DGX SuperPOD reference architecture RA-09950-001, DGX A100
#     system).
#   InfiniBand, DGX H100 and H200: "four OSFP ports serving eight single-port NVIDIA
#     ConnectX-7 VPI, up to 400 Gb/s InfiniBand/Ethernet" (https://docs.nvidia.com/dgx-basepod/
#     reference-architecture-infrastructure-foundation-enterprise-ai/latest/core-components.html).
# These are link peaks; NCCL reaches a share of them (its "bus bandwidth"): scale them with
# --nvlink-gbs / --network-gbs, as --mfu scales the FLOP/s peak.
_HOPPER_LINKS = ("NVLink: https://www.nvidia.com/en-us/data-center/technologies/hopper-architecture/ "
                 "and the H100 and H200 datasheets; network: https://docs.nvidia.com/dgx-basepod/"
                 "reference-architecture-infrastructure-foundation-enterprise-ai/latest/"
                 "core-components.html")
DGX_A100 = Fabric("DGX A100", 3, 600, "HDR InfiniBand {gbits} Gb/s", 200, DEFAULT_GPUS_PER_NODE,
                  "NVLink: https://www.nvidia.com/en-us/data-center/nvlink/ and the A100 "
                  "datasheet; network: NVIDIA DGX SuperPOD reference architecture RA-09950-001 "
                  "(DGX A100 system)")
DGX_H100 = Fabric("DGX H100", 4, 900, "ConnectX-7 {gbits} Gb/s InfiniBand", 400,
                  DEFAULT_GPUS_PER_NODE, _HOPPER_LINKS)
DGX_H200 = Fabric("DGX H200", 4, 900, "ConnectX-7 {gbits} Gb/s InfiniBand", 400,
                  DEFAULT_GPUS_PER_NODE, _HOPPER_LINKS)

# ---- the cards ------------------------------------------------------------------------------
F = Fraction
CARDS: tuple[GPU, ...] = (
    GPU("A100-40GB", None, ("a100-40",), "40 GB HBM2", 40_960, F("19.5"), F(312), F(624),
        F("1.555"), DGX_A100, A100_DATASHEET, _SMI),
    GPU("A100-80GB", "A100", ("a100-80",), "80 GB HBM2e", 81_920, F("19.5"), F(312), F(624),
        F("2.039"), DGX_A100, A100_DATASHEET, _SMI),
    # Dense BF16 on Hopper: the datasheets give only the figure with sparsity (1,979); the
    # dense 989 is the whole part of the Hopper architecture whitepaper's 989.4 (H100 SXM5),
    # a hair under half the sparse figure. The H200 SXM has the same GH100 compute.
    GPU("H100-SXM", "H100", ("h100-80gb",), "80 GB HBM3", 81_559, F(67), F(989), F(1979),
        F("3.35"), DGX_H100, H100_DATASHEET, _SMI),
    GPU("H200", None, ("h200-sxm",), "141 GB HBM3e", 143_771, F(67), F(989), F(1979),
        F("4.8"), DGX_H200, H200_DATASHEET, _SMI_H200),
)
del F

GPUS: dict[str, GPU] = {g.name: g for g in CARDS}
# Every spelling that names a card (lower case) -> its name.
_NAMES = {spelling.lower(): g.name for g in CARDS
          for spelling in (g.name, *((g.nickname,) if g.nickname else ()), *g.aliases)}


def nicknames() -> list[tuple[str, str]]:
    """(nickname, card name) for the cards that have one: ('A100', 'A100-80GB'), ..."""
    return [(g.nickname, g.name) for g in CARDS if g.nickname]


def gpu_help() -> str:
    """The --gpu help: the cards, from the table."""
    aliases = ", ".join(f"{nick} = {name}" for nick, name in nicknames())
    return (f"one of {', '.join(GPUS)} (aliases: {aliases}); datasheet peaks, memory as "
            "nvidia-smi reports it")


def get_gpu(name: str) -> GPU:
    """Case-insensitive lookup; an unknown name lists the known ones."""
    key = name.strip().lower()
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
@dataclass(frozen=True)
class Interconnect:
    name: str
    nvlink: Fraction  # bytes/s per GPU per direction, inside a node
    network: Fraction  # bytes/s per GPU per direction, between nodes
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
