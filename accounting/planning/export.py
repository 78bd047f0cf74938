"""A Plan as machine-readable data: a JSON-able dict (exact ints; fractions as
numerator/denominator with a float beside them) and CSV rows (section, item, formula,
value, unit)."""
from __future__ import annotations

from fractions import Fraction

from accounting.present.export import config_dict
from accounting.tables.data import csv_text, fraction
from accounting.planning import compute, cuda_peak, memory, reserved
from accounting.planning.inference import (decode_flops_expr, kv_elements_per_token,
                                           state_elements_per_sequence)
from accounting.planning.plan import Plan
from accounting.planning import finetune, training_state
from accounting.planning.optimizers import get_optimizer
from accounting.planning.recipes import IMPLEMENTATIONS


def _fraction(f: Fraction | None) -> dict | None:
    return None if f is None else fraction(Fraction(f))


def finetune_dict(ft) -> dict:
    """The LoRA layers and the base of a fine-tuning plan (planning/finetune.py)."""
    return {"method": "qlora" if ft.qlora else "lora", "rank": ft.lora.rank,
            "alpha": fraction(Fraction(ft.lora.alpha)), "dropout": fraction(Fraction(ft.lora.dropout)),
            "scaling": fraction(ft.lora.scaling), "targets": list(ft.lora.targets),
            "layers": [{"name": t.name, "path": t.path, "per_layer": t.per_layer,
                        "ledger_modules": list(t.members)} for t in ft.targets],
            "trainable_parameters": ft.adapter_count(),
            "adapter_dtype": ft.adapters.adapter_dtype, "base_dtype": ft.base_dtype,
            "base_weights": ft.base_weights or ft.base_dtype,
            "double_quant": ft.double_quant if ft.qlora else None,
            "prepare_model_for_kbit_training": ft.kbit_upcast,
            "nf4_bytes": ft.nf4_bytes() if ft.qlora else None,
            "nf4_bytes_torchao_layout": ft.nf4_bytes_torchao() if ft.qlora else None}


def _recipe(p: Plan) -> dict:
    """implementation, attention, optimizer (and what they mean), as strings."""
    r = p.recipe
    if r is None:
        return {}
    opt = get_optimizer(r.optimizer)
    return {"implementation": r.implementation,
            "implementation_meaning": IMPLEMENTATIONS[r.implementation]
            + (f"; {r.note}" if r.note else ""),
            "attention": r.attention, "attention_meaning": r.attention_meaning,
            "optimizer": r.optimizer, "optimizer_meaning": f"{opt.title} ({opt.source})",
            "optimizer_in_backward": p.memory.model.optimizer_in_backward,
            # issue 44's recipe flags (planning/loss_memory.py, activation_offload.py)
            "loss": p.memory.model.loss,
            "loss_chunks": p.memory.model.loss_chunks if p.memory.model.loss == "chunked" else None,
            "offload_activations": p.memory.model.offload_activations,
            "compile": p.memory.model.compile}


def to_dict(p: Plan) -> dict:
    c, tm, hw = p.config, p.memory, p.hardware
    v = tm.model.values(p.seq, p.batch)
    out = {
        "config": config_dict(c),
        "workload": {"seq": p.seq, "batch": p.batch},
        "assumptions": {
            "precision": p.precision.name, "precision_convention": p.precision.assumptions,
            "scope": p.scope, "scope_meaning": memory.SCOPES[p.scope],
            "recompute": p.recompute, "recompute_meaning": memory.RECOMPUTE[p.recompute],
            "mfu": _fraction(p.mfu), "margin": _fraction(p.margin),
            "adamw_flops": compute.ADAMW_CONVENTION,
            **_recipe(p),
        },
        "hardware": None if hw is None else {
            "name": hw.name, "source": hw.source, "memory_bytes": hw.memory_bytes,
            "peak_flops_per_s": _fraction(hw.peak_flops), "bandwidth_bytes_per_s": _fraction(hw.bandwidth)},
        "parameters": {"formula": str(memory.parameter_count(p.config)),
                       "count": tm.parameters,
                       "trainable": tm.trainable},
        "training_memory": {
            "items": [{"name": i.name, "formula": i.formula, "expression": i.expression,
                       "bytes": i.bytes, "per_sequence": i.per_sequence, "fixed": i.fixed,
                       "on_gpu": i.on_gpu, "note": i.note} for i in tm.items],
            "total_bytes": tm.total,
            "per_sequence_a": tm.per_sequence, "fixed_b": tm.fixed,
            "total_polynomial": str(tm.model.total_expr().partial(v)),
        },
        "peak": None if tm.model.scope != memory.MODEL else {
            "moments": [{"name": ph.name, "bytes": ph.bytes.evaluate(v), "formula": str(ph.bytes),
                         "what": ph.what} for ph in tm.model.peak_terms],
            "peak_bytes": tm.model.peak(p.batch, p.seq),
            # issue 44: the caching allocator's reserve at that moment (planning/reserved.py)
            "reserved_bytes": reserved.one_gpu(
                tm.model, p.batch, p.seq,
                capacity=p.hardware.memory_bytes if p.hardware is not None else None)[0],
            "device": tm.model.device,
            "cuda_rules": [{"rule": a.rule, "bytes": a.bytes.evaluate(v), "formula": str(a.bytes),
                            "what": a.what, "source": cuda_peak.RULES[a.rule].source}
                           for a in tm.model.peak_rules],
        },
        "activations": [{"name": r.record.name, "shape": list(r.record.shape),
                         "per_layer": r.record.per_layer, "copies": r.record.copies,
                         "course_item": r.record.course or None,
                         "saved_in": r.record.saved_in or None, "why": r.record.why,
                         "in_scope": memory.in_scope(r.record, p.scope), "elements": r.elements,
                         "bytes": r.bytes} for r in tm.activation_rows],
        "flops_per_step": {"forward": p.flops.forward, "backward": p.flops.backward,
                           "recompute": p.flops.recompute, "adamw": p.flops.adamw,
                           "optimizer": p.flops.adamw,
                           # multi-token prediction modules (0 without): forward + backward
                           # matmuls, and their AdamW update (accounting/analysis/mtp.py)
                           "mtp": p.flops.mtp, "mtp_adamw": p.flops.mtp_adamw,
                           "total": p.flops.total,
                           # issue 41: a vision-language tower's part of the total
                           # (planning/vision_flops.py); null without a tower
                           "vision": _vision_flops(p.flops.vision),
                           # of the total, the linear layers' fp8 GEMMs (0 without fp8)
                           "fp8_linear_gemms": p.fp8_flops, "forward_non_matmul_not_in_total":
                               p.flops.forward_non_matmul,
                           "adamw_formula": compute.adamw_formula(p.config)},
        "adamw_ops": [{"name": o.name, "op": o.op, "flops_per_element": o.flops_per_element,
                       "per": o.per} for o in compute.ADAMW_OPS],
    }
    if p.finetune is not None:  # issue 28: LoRA / QLoRA
        out["finetune"] = finetune_dict(p.finetune)
    if p.batch_fit is not None:
        bf, cf, b = p.batch_fit, p.context_fit, p.batch_fit.budget
        out["fit"] = {"capacity_bytes": b.capacity, "reserved_bytes": b.reserved,
                      "usable_bytes": b.usable,
                      "largest_batch": bf.largest, "bytes_at_largest_batch": bf.bytes_at_largest,
                      "batch_1_shortfall_bytes": bf.shortfall,
                      "longest_context": cf.longest, "bytes_at_longest_context": cf.bytes_at_longest,
                      "context_1_shortfall_bytes": cf.shortfall}
    if p.prediction is not None:  # issue 39's contract: .time.step_seconds, tokens_per_second, source
        pr = p.prediction
        out["time"] = {"step_seconds": _fraction(pr.step_seconds),
                       "tokens_per_second": _fraction(pr.tokens_per_second),
                       "source": pr.source, "mfu": _fraction(pr.mfu),
                       "breakdown_seconds": {k: _fraction(v) for k, v in
                                             pr.timed.by_category().items()},
                       "tables": list(pr.timed.sources)}
    elif p.time is not None:
        out["time"] = {"step_seconds": _fraction(p.time.seconds_per_step),
                       "tokens_per_second": _fraction(p.batch * p.seq / p.time.seconds_per_step),
                       "source": "mfu"}
    if p.time is not None:
        t = p.time
        out["time_to_train"] = {"steps": t.steps, "tokens": t.tokens,
                                "total_flops": t.total_flops, "seconds": _fraction(t.seconds),
                                "days": _fraction(t.days)}
    i, r = p.inference, p.inference.roofline
    out["inference"] = {
        "bytes_per_element": i.bytes_per_element,
        "kv_cache_bytes_per_token": i.kv_bytes_per_token, "kv_cache_bytes": i.kv_bytes,
        "recurrent_state_bytes": i.state_bytes,
        "state_elements_per_sequence_formula": str(state_elements_per_sequence(p.config)),
        "kv_elements_per_token_formula": str(kv_elements_per_token(p.config)),
        "prefill_flops": i.prefill_flops, "position": i.position,
        "decode_flops": i.decode_flops, "decode_flops_formula": str(decode_flops_expr(p.config)),
        "decode_weight_bytes_read": i.weight_bytes_read, "decode_kv_bytes_read": i.kv_bytes_read,
        "decode_flops_absorbed": i.decode_flops_absorbed,
        "decode_experts_read": None if i.experts_read is None else {
            "worst_case": i.experts_read[0], "uniform_routing_expectation": _fraction(i.experts_read[1])},
        "decode_weight_bytes_read_uniform_routing": _fraction(i.weight_bytes_read_expected),
        "roofline": {"compute_seconds": _fraction(r.compute_seconds),
                     "memory_seconds": _fraction(r.memory_seconds), "bound": r.bound},
    }
    return out


COLUMNS = ("section", "item", "formula", "value", "unit")


def rows(p: Plan) -> list[dict]:
    out = []

    def add(section, item, formula, value, unit):
        out.append({"section": section, "item": item, "formula": formula, "value": value, "unit": unit})
    for key, value in _recipe(p).items():
        if not key.endswith("_meaning"):
            add("recipe", key, "", value, "")
    add("recipe", "precision", "", p.precision.name, "")
    add("parameters", "count", str(memory.parameter_count(p.config)), p.memory.parameters,
        "parameters")
    add("parameters", "trainable", "LoRA adapters" if p.finetune is not None else "",
        p.memory.trainable, "parameters")
    for i in p.memory.items:
        add("training memory", i.name + ("" if i.on_gpu else " (CPU)"), i.formula, i.bytes, "bytes")
    add("training memory", "total on the GPU", "a·B + b", p.memory.total, "bytes")
    add("training memory", "a (per sequence)", "", p.memory.per_sequence, "bytes")
    add("training memory", "b (fixed)", "", p.memory.fixed, "bytes")
    for r in p.memory.activation_rows:
        if memory.in_scope(r.record, p.scope):
            add("activations", r.record.name, "×".join(r.record.shape), r.bytes, "bytes")
    if p.scope == memory.MODEL:
        # the memory model's values (LoRA's rank r, the loss recipe's chunks, the offload
        # rows' symbols), as to_dict takes them: the bare ledger's lacked them (KeyError)
        v = p.memory.model.values(p.seq, p.batch)
        for ph in p.memory.model.peak_terms:
            add("peak", ph.name, str(ph.bytes), ph.bytes.evaluate(v), "bytes")
        for a in p.memory.model.peak_rules:
            add("peak", f"CUDA rule: {a.rule}", str(a.bytes), a.bytes.evaluate(v), "bytes")
    if p.batch_fit is not None:
        add("fit", "usable memory", "", p.batch_fit.budget.usable, "bytes")
        add("fit", "largest batch", "floor((usable − b) / a)", p.batch_fit.largest, "sequences")
        add("fit", "longest context", "binary search", p.context_fit.longest, "tokens")
    f = p.flops
    for name, value in (("forward", f.forward), ("backward", f.backward),
                        ("recompute", f.recompute), ("adamw", f.adamw), ("total", f.total)):
        formula = ((compute.adamw_formula(p.config) if p.finetune is None else
                    finetune.adamw_formula(p.finetune)) if name == "adamw" and p.recipe is not None
                   and get_optimizer(p.recipe.optimizer).adamw_update else "")
        add("flops per step", "optimizer" if name == "adamw" and formula == "" else name,
            formula, value, "FLOPs")
    if p.fp8_flops:
        add("flops per step", "of which fp8 linear GEMMs", "forward, grad-input, grad-weight",
            p.fp8_flops, "FLOPs")
    if p.time is not None:
        add("time to train", "steps", "", p.time.steps, "steps")
        add("time to train", "seconds", "steps·FLOPs per step / (MFU·peak)", float(p.time.seconds), "s")
        add("time to train", "days", "", float(p.time.days), "days")
    i = p.inference
    add("inference", "KV cache per token", str(kv_elements_per_token(p.config)), i.kv_bytes_per_token, "bytes")
    add("inference", "recurrent state", "B·(" + str(state_elements_per_sequence(p.config)) + ")",
        i.state_bytes, "bytes")
    add("inference", "KV cache", "B·T·per token + recurrent state", i.kv_bytes, "bytes")
    add("inference", "prefill", "forward matmuls", i.prefill_flops, "FLOPs")
    add("inference", f"decode at t = {i.position}", str(decode_flops_expr(p.config)), i.decode_flops, "FLOPs")
    if i.roofline.seconds is not None:
        add("inference", f"decode step ({i.roofline.bound}-bound)", "max(FLOPs/peak, bytes/bandwidth)",
            float(i.roofline.seconds), "s")
    return out


def to_csv(p: Plan) -> str:
    return csv_text(rows(p), COLUMNS)


def to_frame(p: Plan):
    """The CSV rows as a pandas DataFrame (pandas imported on call)."""
    import pandas as pd
    return pd.DataFrame(rows(p), columns=list(COLUMNS))


def _vision_flops(t) -> dict | None:
    """A tower's FLOPs in the step (planning/vision_flops.py's TowerFlops), or None."""
    if t is None:
        return None
    return {"images_per_step": t.images, "trained": t.trained,
            "projector_only": t.projector_only, "forward": t.forward,
            "backward": t.backward, "recompute": t.recompute, "optimizer": t.update,
            "total": t.total, "model_flops": t.model_flops}
