"""Measured counts mapped onto the calculator's components and blocks, and the analytic side.

Module -> component mapping: the ledger's. Every matmul record names the module it runs
in (e.g. attn.q_proj -> attention projections; attn itself, for its two einsums ->
attention core; ffn.w1 -> feed-forward; lm_head -> LM head), and a measured count goes to
the component of the innermost module that ran it. Anything counted elsewhere is "not in
any component" (analytic 0), so it cannot hide. Shared by compare.py (the model's counters)
and hf_compare.py (transformers' model). Works on plain numbers; runs nothing.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from accounting.analysis.workload import Analysis
from accounting.crosscheck.dispatch import OUTSIDE
from accounting.crosscheck.measure import GLOBAL
from accounting.crosscheck.result import LayerCheck, LayerMismatch
from accounting.ledger.ledger import Ledger
from accounting.ledger.records import BLOCK_COMPONENTS, COMPONENTS, LM_HEAD, PHASES


@dataclass(frozen=True)
class Split:
    """Counts of one pass mapped onto components: per block, outside the blocks, the rest."""

    layers: tuple[dict, ...]  # block i -> {component: FLOPs}
    top: dict  # component -> FLOPs outside the blocks (the LM head)
    elsewhere: int  # counted, but in no component

    def components(self) -> dict[str, int]:
        out = {c: sum(layer[c] for layer in self.layers) + self.top.get(c, 0)
               for c in BLOCK_COMPONENTS}
        out[LM_HEAD] = self.top.get(LM_HEAD, 0)
        return {c: out[c] for c in COMPONENTS}


def rollup(innermost: dict[str, int]) -> dict[str, int]:
    """Per-innermost-module counts -> hierarchical totals (each module includes its
    children; '' is the model). Counts outside the model stay under their own key."""
    out: dict[str, int] = defaultdict(int)
    for name, n in innermost.items():
        if name == OUTSIDE:
            out[OUTSIDE] += n
            continue
        parts = name.split(".") if name else []
        for k in range(len(parts) + 1):
            out[".".join(parts[:k])] += n
    return dict(out)


def own(totals: dict[str, int]) -> dict[str, int]:
    """Hierarchical totals -> each module's own count (its total minus its children's):
    the inverse of rollup. A child is credited to its nearest ancestor that has a total."""
    keys = [k for k in totals if k not in (GLOBAL, OUTSIDE)]
    present = set(keys)
    out = {k: totals[k] for k in keys}
    for k in keys:
        if not k:
            continue
        parent = k.rpartition(".")[0]
        while parent and parent not in present:
            parent = parent.rpartition(".")[0]
        if parent in present:
            out[parent] -= totals[k]
    return out


def _path(layer: int | None, module: str) -> str:
    if layer is None:
        return module
    return f"layers.{layer}" + (f".{module}" if module else "")


def split(counts: dict[str, int], lg: Ledger, total: int) -> Split:
    """Each module's own counts -> components, by the ledger's module map; `total` is
    everything counted."""
    g = counts.get
    modules = lg.matmul_modules()
    layers = []
    for i in range(lg.config.num_layers):
        comp = {c: 0 for c in BLOCK_COMPONENTS}
        for (per_layer, m), c in modules.items():
            if per_layer:
                comp[c] += g(_path(i, m), 0)
        layers.append(comp)
    top: dict[str, int] = defaultdict(int)
    for (per_layer, m), c in modules.items():
        if not per_layer:
            top[c] += g(m, 0)
    s = Split(tuple(layers), dict(top), 0)
    return Split(s.layers, s.top, total - sum(s.components().values()))


def module_map_text(lg: Ledger) -> str:
    """'attn.q_proj, attn.k_proj, ... -> attention projections; attn -> attention core; ...'"""
    by: dict[str, list[str]] = {}
    for (per_layer, m), c in lg.matmul_modules().items():
        by.setdefault(c, []).append((m or "block") + (" (its own einsums)" if m == "attn" else ""))
    return "; ".join(f"{', '.join(ms)} -> {c}" for c, ms in by.items())


def add(x: Split, y: Split) -> Split:
    """Two splits of the same pass, summed."""
    return Split(tuple({c: a[c] + b[c] for c in BLOCK_COMPONENTS} for a, b in zip(x.layers, y.layers)),
                 {c: x.top.get(c, 0) + y.top.get(c, 0) for c in set(x.top) | set(y.top)},
                 x.elsewhere + y.elsewhere)


def analytic_flops(a: Analysis):
    """Executed matmul FLOPs by pass and component, and one block's of each kind by pass
    (block[kind symbol][pass][component]; one kind, "L", when every block is alike)."""
    by = {p: {c: 0 for c in COMPONENTS} for p in PHASES[a.phase]}
    block = {g: {p: {c: 0 for c in BLOCK_COMPONENTS} for p in PHASES[a.phase]}
             for g, _ in a.ledger.groups}
    for r in a.matmul_rows:
        by[r.record.phase][r.record.component] += r.flops
        if r.record.per_layer:
            block[r.record.repeat][r.record.phase][r.record.component] += r.flops_each
    return by, block


def layer_check(scope, counter, s: Split, block: dict, lg: Ledger) -> LayerCheck:
    """Each block against the analytic block of its kind."""
    mismatches = []
    for i, layer in enumerate(s.layers):
        want = block[lg.group_of(i)][scope]
        mismatches += [LayerMismatch(i, c, want[c], layer[c]) for c in BLOCK_COMPONENTS
                       if layer[c] != want[c]]
    return LayerCheck(scope, counter, len(s.layers), tuple(mismatches))
