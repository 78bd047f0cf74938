"""The cross-check's result: plain data records (rows, checks, the whole comparison).

Rendering is crosscheck/views.py's (views.tables(result), views.summary(result)); the
records hold the numbers, the verdict (agrees) and the JSON (to_dict).
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.ledger import records as R
from accounting.crosscheck.fvcore_einsum import STOCK_CAP_BYTES
from accounting.ledger.records import EXECUTED
from accounting.units import FLOPS_PER_MAC, grouped

TOTAL = "total"
ELSEWHERE = "not in any component"


@dataclass(frozen=True)
class ComponentRow:
    scope: str  # "forward", "backward", or "train" (the forward + backward total)
    component: str  # a component, TOTAL, or ELSEWHERE
    analytic: int
    fvcore: int | None  # FLOPs (multiply-adds × 2); None: fvcore does not count this pass
    fvcore_stock: int | None  # the stock einsum handle, ×2; None: not run (or n/a)
    stock_skipped: bool  # True: the stock handle was not run for part of this row
    torch: int  # FlopCounterMode (+ einsum products it does not see, torch_einsum_products)
    torch_einsum_products: int
    note: str = ""
    transformers: int | None = None  # transformers' own model (hf_compare.py); None: not run

    @property
    def agree(self) -> bool:
        return (self.torch == self.analytic and self.fvcore in (None, self.analytic)
                and self.transformers in (None, self.analytic))


@dataclass(frozen=True)
class LayerMismatch:
    layer: int
    component: str
    analytic: int
    measured: int


@dataclass(frozen=True)
class LayerCheck:
    scope: str
    counter: str
    layers: int
    mismatches: tuple[LayerMismatch, ...]

    @property
    def agreeing(self) -> int:
        return self.layers - len({m.layer for m in self.mismatches})


@dataclass(frozen=True)
class NonMatmulRow:
    where: str  # module, relative to a block for per-block modules
    op: str
    components: str  # the analytic components behind this row
    analytic: int
    measured: int | None  # None: an op outside the convention (unknown)
    note: str = ""

    @property
    def agree(self) -> bool:
        return self.measured == self.analytic


@dataclass(frozen=True)
class Check:
    claim: str
    evidence: str
    holds: bool


@dataclass(frozen=True)
class ParamRow:
    component: str  # a component, ELSEWHERE or TOTAL
    analytic: int
    transformers: int

    @property
    def agree(self) -> bool:
        return self.analytic == self.transformers


@dataclass(frozen=True)
class HFCheck:
    """transformers' model against the ledger: FLOPs (joined to the matmul and per-block
    tables), parameters and KV cache (its own table), with what differs in how it computes."""
    model_type: str
    transformers_class: str
    version: str
    dtype: str  # what the model was built in, and why
    flops: dict  # (pass, component or ELSEWHERE or TOTAL) -> FLOPs
    layers: tuple[LayerCheck, ...]
    params: tuple[ParamRow, ...]
    kv_bytes: tuple[int, int]  # (analytic, transformers) after the prefill
    kv_detail: str
    checks: tuple[Check, ...]
    notes: tuple[str, ...]  # how transformers' model computes differently, for this config
    module_map: str

    @property
    def agrees(self) -> bool:
        return (all(r.agree for r in self.params) and self.kv_bytes[0] == self.kv_bytes[1]
                and all(c.holds for c in self.checks))

    def disagreements(self) -> list[str]:
        out = [f"transformers parameters {r.component}: analytic {grouped(r.analytic)}, "
               f"transformers {grouped(r.transformers)}" for r in self.params if not r.agree]
        if self.kv_bytes[0] != self.kv_bytes[1]:
            out.append(f"transformers KV cache: analytic {grouped(self.kv_bytes[0])} bytes, "
                       f"transformers {grouped(self.kv_bytes[1])} bytes")
        return out + [f"check failed: {c.claim} ({c.evidence})" for c in self.checks if not c.holds]

    def to_dict(self) -> dict:
        return {"model_type": self.model_type, "class": self.transformers_class,
                "transformers_version": self.version, "dtype": self.dtype,
                "agrees": self.agrees,
                "matmul_flops": [{"pass": p, "component": c, "flops": v}
                                 for (p, c), v in self.flops.items()],
                "parameters": [{"component": r.component, "analytic": r.analytic,
                                "transformers": r.transformers, "agree": r.agree}
                               for r in self.params],
                "kv_cache_bytes": {"analytic": self.kv_bytes[0], "transformers": self.kv_bytes[1],
                                   "detail": self.kv_detail},
                "checks": [{"claim": c.claim, "evidence": c.evidence, "holds": c.holds}
                           for c in self.checks],
                "notes": list(self.notes), "module_map": self.module_map}


@dataclass(frozen=True)
class CrossCheck:
    name: str
    seq: int
    batch: int
    phase: str
    counting: str
    components: tuple[ComponentRow, ...]
    layers: tuple[LayerCheck, ...]
    per_block_analytic: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]
    non_matmul: tuple[NonMatmulRow, ...]
    zero_ops: tuple[tuple[str, str, int], ...]  # (op, kind, calls) seen at 0 FLOPs
    checks: tuple[Check, ...]
    notes: tuple[str, ...]  # explanations of this run's differences between methods (matmuls)
    non_matmul_notes: tuple[str, ...]
    einsum_calls: tuple[dict, ...]  # distinct traced einsums with exact and stock counts
    module_map: str = ""  # the ledger's module -> component mapping, in words
    hf: HFCheck | None = None  # transformers' model (hf_compare.py), when it ran
    hf_skipped: str = ""  # why transformers' model did not run, for a Hugging Face config
    vision: object | None = None  # vision_check.VisionCheck: the whole VLM with its images

    @property
    def agrees(self) -> bool:
        return (all(r.agree for r in self.components) and all(not c.mismatches for c in self.layers)
                and all(r.agree for r in self.non_matmul) and all(c.holds for c in self.checks)
                and (self.hf is None or self.hf.agrees)
                and (self.vision is None or self.vision.agrees))

    @property
    def counters(self) -> str:
        """The counters that ran, in words."""
        out = "analytic, fvcore and FlopCounterMode"
        if self.hf is not None:
            out = f"analytic, fvcore, FlopCounterMode and transformers' {self.hf.transformers_class}"
        return out

    def disagreements(self) -> list[str]:
        out = [f"{r.scope} {r.component}: analytic {grouped(r.analytic)}, "
               + (f"fvcore {grouped(r.fvcore)}, " if r.fvcore is not None else "")
               + f"torch {grouped(r.torch)}"
               + (f", transformers {grouped(r.transformers)}" if r.transformers is not None else "")
               for r in self.components if not r.agree]
        out += [f"{c.scope} {c.counter}: {c.layers - c.agreeing} of {c.layers} blocks differ "
                f"(first: block {c.mismatches[0].layer} {c.mismatches[0].component}, analytic "
                f"{grouped(c.mismatches[0].analytic)}, measured {grouped(c.mismatches[0].measured)})"
                for c in self.layers if c.mismatches]
        out += [f"non-matmul {r.where} {r.op}: analytic {grouped(r.analytic)}, measured "
                f"{'unknown op' if r.measured is None else grouped(r.measured)}"
                for r in self.non_matmul if not r.agree]
        out += [f"check failed: {c.claim} ({c.evidence})" for c in self.checks if not c.holds]
        if self.hf is not None:
            out += self.hf.disagreements()
        if self.vision is not None:
            out += self.vision.disagreements()
        return out

    def to_dict(self) -> dict:
        out = self._to_dict()
        if self.hf is not None or self.hf_skipped:
            for row, r in zip(out["components"], self.components):
                row["transformers"] = r.transformers
            out["transformers"] = (self.hf.to_dict() if self.hf is not None
                                   else {"skipped": self.hf_skipped})
        if self.vision is not None:
            out["with_images"] = self.vision.to_dict()
        return out

    def _to_dict(self) -> dict:
        return {
            "agrees": self.agrees,
            "workload": {"model": self.name, "seq": self.seq, "batch": self.batch,
                         "pass": self.phase, "compared_count": EXECUTED},
            "conventions": {"fvcore_unit": "multiply-adds, doubled (FLOPS_PER_MAC = "
                                           f"{FLOPS_PER_MAC}) before comparing",
                            "non_matmul": R.CONVENTION,
                            "stock_einsum_cap_bytes": STOCK_CAP_BYTES},
            "components": [{"scope": r.scope, "component": r.component, "analytic": r.analytic,
                            "fvcore": r.fvcore, "fvcore_stock": r.fvcore_stock,
                            "fvcore_stock_skipped": r.stock_skipped, "torch": r.torch,
                            "torch_einsum_products": r.torch_einsum_products, "agree": r.agree,
                            "note": r.note} for r in self.components],
            "layers": [{"scope": c.scope, "counter": c.counter, "layers": c.layers,
                        "agreeing": c.agreeing,
                        "mismatches": [vars(m) for m in c.mismatches]} for c in self.layers],
            "per_block_analytic": {scope: dict(v) for scope, v in self.per_block_analytic},
            "non_matmul": [{"where": r.where, "op": r.op, "components": r.components,
                            "analytic": r.analytic, "measured": r.measured, "agree": r.agree,
                            "note": r.note} for r in self.non_matmul],
            "zero_flop_ops": [{"op": op, "kind": kind, "calls": n} for op, kind, n in self.zero_ops],
            "checks": [{"claim": c.claim, "evidence": c.evidence, "holds": c.holds}
                       for c in self.checks],
            "notes": list(self.notes) + list(self.non_matmul_notes),
            "einsum_calls": list(self.einsum_calls),
            "disagreements": self.disagreements(),
        }

