"""The GPU registry: the cards of gpu_cards.py by name (any spelling), the `--gpu` help, the
Hardware a plan computes with and the Interconnect of the multi-GPU planner. A card is added
in gpu_cards.py and nowhere else; the record types and units are gpu_records.py's.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from fractions import Fraction

from accounting.planning.gpu_cards import CARDS
from accounting.planning.gpu_records import (  # noqa: F401 (the records, re-exported)
    DEFAULT_GPUS_PER_NODE, FP4, GBps, GPU, Fabric, Source, _num)
from accounting.registry import registrar
from accounting.runtime.errors import UsageError
from accounting.units import TERA, MiB

GPUS: dict[str, GPU] = {}
_register = registrar(GPUS, "GPU")
for _card in CARDS:
    _register(_card)
del _card


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
