"""A ParallelPlan (or a search) as data: a JSON-able dict with exact integers (fractions as
numerator/denominator with a float beside them) and flat rows for CSV and DataFrames."""
from __future__ import annotations

from fractions import Fraction

from accounting.present.export import config_dict, csv_text, fraction
from accounting.planning.parallel.layout import ZERO_STAGES, Layout
from accounting.planning.parallel.plan import CHECKED, FORMULA_ONLY, ParallelPlan


def _f(x: Fraction | None) -> dict | None:
    return None if x is None else fraction(Fraction(x))


def layout_dict(lo: Layout) -> dict:
    name, engine, meaning = ZERO_STAGES[lo.zero]
    return {"gpus": lo.gpus, "tp": lo.tp, "pp": lo.pp, "dp": lo.dp, "ep": lo.ep, "sp": lo.sp,
            "zero": lo.zero, "zero_name": name, "engine": engine, "engine_meaning": meaning,
            "micro_batch": lo.micro_batch, "global_batch": lo.global_batch,
            "micro_batches": lo.micro_batches, "recompute": lo.recompute}


def to_dict(p: ParallelPlan) -> dict:
    b = p.layout.micro_batch
    out = {"config": config_dict(p.config), "seq": p.seq, "layout": layout_dict(p.layout),
           "precision": p.precision.name, "mfu": _f(p.mfu),
           "memory_per_gpu_bytes": p.memory, "worst_stage": p.worst.stage,
           "bubble": _f(p.bubble), "checked_on_torch_distributed": list(CHECKED),
           "formula_only": list(FORMULA_ONLY), "stages": []}
    for s in p.stages:
        out["stages"].append({
            "stage": s.stage, "layers": s.layers, "memory_bytes": s.memory(b),
            "activations_per_micro_batch": {"a": s.activations.per_micro_batch.a,
                                            "c": s.activations.per_micro_batch.c},
            "micro_batches_in_flight": s.activations.in_flight,
            "items": [{"name": i.name, "formula": i.formula, "bytes": i.bytes.at(b),
                       "on_gpu": i.on_gpu, "note": i.note} for i in s.items],
            "flops": {"forward_per_micro_batch": s.flops.forward,
                      "backward_per_micro_batch": s.flops.backward,
                      "recompute_per_micro_batch": s.flops.recompute,
                      "adamw": s.flops.adamw, "total": s.flops.total},
            "collectives": [{"group": c.group, "op": c.op, "what": c.what, "phase": c.phase,
                             "calls": c.calls, "exact_calls": c.exact_calls, "bytes": c.bytes,
                             "ranks": c.ranks, "traffic_bytes": _f(c.traffic),
                             "formula": c.formula} for c in s.collectives]})
    if p.fit is not None:
        f = p.fit
        out["fit"] = {"usable_bytes": f.budget.usable, "largest_micro_batch": f.largest,
                      "shortfall_bytes": f.shortfall, "headroom_bytes": f.headroom}
    if p.time is not None:
        t = p.time
        out["step_time"] = {"seconds": _f(t.seconds), "no_overlap_seconds": _f(t.no_overlap),
                            "critical_path_seconds": _f(t.pipeline_path),
                            "data_parallel_seconds": _f(t.data_parallel),
                            "links": {g: {"bytes_per_s": _f(bw), "kind": k}
                                      for g, (bw, k) in t.links.items()}}
        if p.steps is not None and not (p.fit is not None and p.fit.shortfall):  # (fits)
            out["time_to_train"] = {"tokens": p.tokens, "steps": p.steps,
                                    "seconds": _f(t.seconds * p.steps)}
    return out


def rows(p: ParallelPlan) -> list[dict]:
    """Flat rows: one per memory item, FLOP count and collective of each stage shown."""
    return flat_rows(to_dict(p))


COLUMNS = ("model", "gpus", "tp", "pp", "dp", "sp", "zero", "micro_batch", "global_batch",
           "stage", "section", "item", "formula", "value", "unit")


def search_dict(s) -> dict:
    return {"gpus": s.gpus, "seq": s.seq, "config": config_dict(s.config),
            "ranked": [to_dict(p) for p in s.ranked],
            "rejected": [{"layout": layout_dict(r.layout), "reason": r.reason,
                          "shortfall_bytes": r.shortfall} for r in s.rejected]}


def flat_rows(data: dict) -> list[dict]:
    """The rows of a plan's dict, or of every ranked plan of a search's dict."""
    flat = []
    plans = data["ranked"] if "ranked" in data else [data]
    for d in plans:
        lo = d["layout"]
        common = {"model": d["config"]["name"], "gpus": lo["gpus"], "tp": lo["tp"], "pp": lo["pp"],
                  "dp": lo["dp"], "sp": lo["sp"], "zero": lo["zero"],
                  "micro_batch": lo["micro_batch"], "global_batch": lo["global_batch"]}
        for s in d["stages"]:
            for i in s["items"]:
                flat.append({**common, "stage": s["stage"], "section": "memory", "item": i["name"],
                             "formula": i["formula"], "value": i["bytes"], "unit": "bytes"})
            for k, v in s["flops"].items():
                flat.append({**common, "stage": s["stage"], "section": "flops", "item": k,
                             "formula": "", "value": v, "unit": "FLOPs"})
            for c in s["collectives"]:
                flat.append({**common, "stage": s["stage"], "section": f"comm: {c['group']}",
                             "item": f"{c['op']}: {c['what']} ({c['phase']})",
                             "formula": c["formula"], "value": c["bytes"], "unit": "bytes"})
    return flat


def to_csv(data: dict) -> str:
    """CSV of a plan's or a search's dict."""
    return csv_text(flat_rows(data), COLUMNS)
