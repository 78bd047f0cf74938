"""A ParallelPlan (or a search) as data: a JSON-able dict with exact integers (fractions as
numerator/denominator with a float beside them) and flat rows for CSV and DataFrames."""
from __future__ import annotations

from fractions import Fraction

from accounting.present.export import config_dict
from accounting.tables.data import csv_text, fraction
from accounting.planning.parallel.layout import ZERO_STAGES, Layout, layer_split
from accounting.planning.parallel.plan_records import CHECKED, FORMULA_ONLY, ParallelPlan


def _f(x: Fraction | None) -> dict | None:
    return None if x is None else fraction(Fraction(x))


def layout_dict(lo: Layout) -> dict:
    name, engine, meaning = ZERO_STAGES[lo.zero]
    return {"gpus": lo.gpus, "tp": lo.tp, "pp": lo.pp, "dp": lo.dp, "ep": lo.ep, "sp": lo.sp,
            "zero": lo.zero, "zero_name": name, "engine": engine, "engine_meaning": meaning,
            "micro_batch": lo.micro_batch, "global_batch": lo.global_batch,
            "micro_batches": lo.micro_batches, "recompute": lo.recompute, "cp": lo.cp,
            "virtual_stages": lo.vpp, "stage_layers_given": lo.stage_split is not None}


def stack_dict(p: ParallelPlan) -> dict:
    s = p.stack
    z = p.layout.zero
    out = {"name": s.name, "title": s.stack.title, "engine": s.stack.engines.get(z, ""),
           "checked_against": s.stack.checked,
           "dropout": s.dropout if s.stack.megatron_core else None,
           "attention_kernel": s.kernel if s.stack.megatron_core else None}
    if s.stack.megatron_core:  # the per-layer tensors Korthikanti et al. count, by their term
        terms: dict[str, int] = {}
        for _, paper, x in s.megatron_layer(p.config, p.layout, p.seq // p.layout.cp):
            if paper:
                terms[paper] = terms.get(paper, 0) + x * p.layout.micro_batch
        out["per_layer_korthikanti_terms_bytes"] = terms
        out["per_layer_korthikanti_bytes"] = sum(terms.values())
    return out


def to_dict(p: ParallelPlan) -> dict:
    b = p.layout.micro_batch
    out = {"config": config_dict(p.config), "seq": p.seq, "layout": layout_dict(p.layout),
           "precision": p.precision.name, "optimizer": p.optimizer, "mfu": _f(p.mfu),
           "memory_per_gpu_bytes": p.memory, "worst_stage": p.worst.stage,
           "implementation": p.implementation,
           # issue 44: the recipe flags (planning/loss_memory.py, compile_memory.py,
           # activation_offload.py)
           **dict(p.recipe), "offload_activations": "activations" in p.offload,
           "peak_moment": p.peak_moment.name if p.peak_moment else None,
           "memory_per_gpu_items_bytes": p.items_total,
           "memory_per_gpu_reserved_bytes": p.reserved,
           # of memory_per_gpu_bytes, the device memory outside the caching allocator
           # (async TP's symmetric-memory workspace): in the verdict, not in the reserved
           "memory_per_gpu_outside_allocator_bytes": p.outside_allocator,
           "stack": stack_dict(p), "model_states_per_gpu_bytes": p.model_states,
           "per_layer_activation_bytes": p.per_layer_activation_bytes,
           "per_layer_activations": [{"name": n, "bytes": v} for n, v in p.per_layer],
           "bubble": _f(p.bubble), "checked_on_torch_distributed": list(CHECKED),
           "layers_per_chunk": list(layer_split(p.config, p.layout)),
           "formula_only": list(FORMULA_ONLY), "stages": []}
    if p.finetune is not None:
        from accounting.planning.finetune import describe
        out["finetune"] = {"lora_rank": p.finetune.lora.rank,
                           "adapter_parameters": p.finetune.adapter_count(),
                           "assumptions": describe(p.finetune)}
    for s in p.stages:
        out["stages"].append({
            "stage": s.stage, "layers": s.layers, "memory_bytes": s.memory(b),
            "peak_bytes": s.peak(b),
            "moments": [{"name": m.name, "bytes": s.moment_bytes(m, b), "what": m.what}
                        for m in s.moments],
            "model_states_bytes": s.model_states,
            "activations_per_micro_batch": {"a": s.activations.per_micro_batch.a,
                                            "c": s.activations.per_micro_batch.c},
            "micro_batches_in_flight": s.activations.in_flight,
            "items": [{"name": i.name, "formula": i.formula, "bytes": i.bytes.at(b),
                       "on_gpu": i.on_gpu, "model_state": i.model_state, "note": i.note,
                       # a gradient buffer of the backward pass, not yet live at the loss's
                       # backward nor the forward's end (peak.Moment.pass_grads)
                       "pass_grads": i.pass_grads}
                      for i in s.items],
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
                            # issue 39: the stack's overlap rules (overlap.py) and what they
                            # leave exposed; the step, summed by kind
                            "exposed_data_parallel_seconds": _f(t.exposed_data_parallel),
                            "exposed_communication_seconds": _f(t.exposed_communication),
                            "bubble_seconds": _f(t.bubble_seconds),
                            "breakdown_seconds": {k: _f(v) for k, v in t.breakdown().items()},
                            "overlap": {"rules": dict(t.rules),
                                        "source": p.stack.stack.overlap.source},
                            "links": {g: {"bytes_per_s": _f(bw), "kind": k}
                                      for g, (bw, k) in t.links.items()}}
        out["step_time"].update({"mfu_convention": p.mfu_convention, "mfu_scope": p.mfu_scope,
                                 "hfu": p.hfu, "compute_scope_seconds": _f(t.seconds),
                                 "seconds": _f(p.step_seconds),
                                 "tokens_per_second": _f(p.tokens_per_second),
                                 # issue 39's contract: where the time comes from, and the
                                 # MFU it implies in --mfu-convention's count
                                 "source": p.time_source, "mfu": _f(p.predicted_mfu)})
        out["utilization"] = utilization_dict(p, p.measured_tokens_per_second)
        if p.steps is not None:
            out["time_to_train"] = {"tokens": p.tokens, "steps": p.steps,
                                    "seconds": _f(p.step_seconds * p.steps)}
    return out


def utilization_dict(p: ParallelPlan, measured=None) -> list[dict]:
    """Each convention's FLOPs per token and the MFU and HFU at the plan's throughput (and at
    a measured one)."""
    from accounting.planning.mfu import utilizations
    lo = p.layout
    out = []
    for u in utilizations(p.config, p.seq, lo.recompute, p.tokens_per_second, lo.gpus,
                          p.hardware.peak_flops):
        out.append({"convention": u.convention, "model_flops_per_token": _f(u.model_flops_per_token),
                    "hardware_flops_per_token": _f(u.hardware_flops_per_token),
                    "mfu": _f(u.mfu), "hfu": _f(u.hfu)})
    if measured is not None:
        for row, u in zip(out, utilizations(p.config, p.seq, lo.recompute, measured, lo.gpus,
                                            p.hardware.peak_flops)):
            row.update({"measured_tokens_per_second": _f(measured), "measured_mfu": _f(u.mfu),
                        "measured_hfu": _f(u.hfu)})
    return out


def rows(p: ParallelPlan) -> list[dict]:
    """Flat rows: one per memory item, FLOP count and collective of each stage shown."""
    return flat_rows(to_dict(p))


COLUMNS = ("model", "gpus", "tp", "pp", "dp", "sp", "zero", "micro_batch", "global_batch",
           "stage", "section", "item", "formula", "value", "unit")


def search_dict(s) -> dict:
    return {"gpus": s.gpus, "seq": s.seq, "config": config_dict(s.config), "stack": s.stack.name,
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
        flat.append({**common, "stage": d["worst_stage"], "section": "memory",
                     "item": "model states per GPU (most loaded stage)", "formula": "",
                     "value": d["model_states_per_gpu_bytes"], "unit": "bytes"})
        flat.append({**common, "stage": None, "section": "memory",
                     "item": f"one block's activations, one micro-batch ({d['stack']['name']} "
                             f"stack)", "formula": "", "value": d["per_layer_activation_bytes"],
                     "unit": "bytes"})
        for e in d.get("literature_memory", ()):
            f = e["formula_bytes"]
            flat.append({**common, "stage": None, "section": "literature",
                         "item": f"{e['name']}: {e['quantity']}", "formula": e["source"],
                         "value": f["numerator"] if f["denominator"] == 1 else f["approx"],
                         "unit": "bytes"})
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
