"""An Analysis as machine-readable data: a JSON-able dict (exact ints) and CSV rows."""
from __future__ import annotations

from fractions import Fraction

from accounting.ledger import records as R
from accounting.architecture.presets import note
from accounting.analysis.mtp import mtp
from accounting.analysis.workload import Analysis
from accounting.ledger.symbols import validity
from accounting.tables.data import csv_text, fraction
from accounting.units import FLOPS_PER_MAC

LEDGER_COLUMNS = ("kind", "name", "component", "phase", "op", "where", "count", "shapes",
                  "formula_each", "flops_each", "flops", "useful_flops")


def ledger_rows(a: Analysis) -> list[dict]:
    """One row per matmul and per non-matmul op: the flat form for CSV and DataFrames."""
    rows = []
    for r in a.matmul_rows:
        m = r.record
        rows.append({"kind": "matmul", "name": m.name, "component": m.component, "phase": m.phase,
                     "op": "matmul", "where": "block" if m.per_layer else "model",
                     "count": r.count, "shapes": m.shapes, "formula_each": m.formula(),
                     "flops_each": r.flops_each, "flops": r.flops, "useful_flops": r.useful_flops})
    for r in a.elementwise_rows:
        e = r.record
        rows.append({"kind": "non-matmul", "name": e.name, "component": e.component,
                     "phase": R.FORWARD, "op": e.op, "where": e.module, "count": r.count,
                     "shapes": "[" + ", ".join(e.elements) + "]", "formula_each": e.formula(),
                     "flops_each": r.flops_each, "flops": r.flops, "useful_flops": r.flops})
    return rows


def to_csv(a: Analysis) -> str:
    return csv_text(ledger_rows(a), LEDGER_COLUMNS)


def config_dict(c) -> dict:
    """The spec as JSON: every field, the derived sizes, and what it is in words."""
    return {**c.model_kwargs(), "name": c.name, "num_kv_heads": c.kv_heads, "head_dim": c.d_k,
            "d_k": c.d_k, "architecture": c.architecture, "preset": note(c)}


def mtp_dict(a: Analysis) -> dict | None:
    """The multi-token-prediction modules (None without): not in `total` (transformers'
    causal LM does not build them), beside it (accounting/analysis/mtp.py)."""
    m = mtp(a.config, a.seq, a.batch)
    if m is None:
        return None
    return {"modules": m.modules, "params_each": m.params_each, "params": m.params,
            "total_with_mtp": a.param_count + m.params,
            "checkpoint_total_with_copies": a.param_count + m.params + m.checkpoint_copies,
            "train_matmul_flops": {"forward": m.forward_flops, "backward": m.backward_flops},
            "note": MTP_NOTE}


MTP_NOTE = ("multi-token-prediction modules: each one block of the last layer's kind, W_eh "
            "(2·d_model → d_model) and three norms, sharing the embedding and the head; not in "
            "the model's total (transformers' causal LM does not build them), run in training "
            "(their FLOPs are in the plan's step), left out at inference. DeepSeek-V3's "
            "checkpoint also stores the embedding and head again per module "
            "(checkpoint_total_with_copies).")


def to_dict(a: Analysis) -> dict:
    c = a.config
    out = {
        "config": config_dict(c),
        "workload": {"seq": a.seq, "batch": a.batch, "pass": a.phase, "count": a.counting},
        "conventions": {"flops_per_multiply_add": FLOPS_PER_MAC,
                        "non_matmul": R.CONVENTION},
        "parameters": {"total": a.param_count, "active_per_token": a.active_param_count,
                       "by_component": a.params_by_component(),
                       "tied": dict(a.ledger.tied),
                       "memory_bytes": a.param_memory_bytes(),
                       "tensors": [{"name": r.record.name, "component": r.record.component,
                                    "shape": list(r.record.shape), "count": r.count,
                                    "numel_each": r.numel_each} for r in a.param_rows],
                       "mtp": mtp_dict(a)},
        "matmul_flops": {"executed": a.matmul_flops("executed"), "useful": a.matmul_flops("useful"),
                         "per_token": {counting: fraction(a.flops_per_token(counting))
                                       for counting in ("executed", "useful")}},
        "components": {counting: {"flops": a.component_flops(counting),
                                  "shares": {k: fraction(v) for k, v in
                                             a.component_shares(counting).items()}}
                       for counting in ("executed", "useful")},
        "ledger": ledger_rows(a),
        "closed_form": {
            "matmul_flops_terms": [{"B_power": f.count("B"), "T_power": f.count("T"),
                                    "coefficient": fraction(Fraction(v))}
                                   for f, v in sorted(a.matmul_polynomial().terms.items(),
                                                      key=lambda kv: (kv[0].count("B"), kv[0].count("T")))],
            "matmul_flops_polynomial": str(a.matmul_polynomial()),
            "ratio_to_context_length": fraction(a.ratio_to_context_length()),
            "valid_for": validity(a.matmul_expr(), a.values) or "every T",
            "attention_core_overtakes_ffn": {
                counting: None if x is None else {"equal_at_seq": fraction(x.equal_at),
                                                  "first_seq": x.first_seq}
                for counting in ("executed", "useful") for x in [a.crossover(counting)]},
        },
    }
    if a.elementwise_rows:
        # the ledger counts the forward pass's non-matmul ops only: in a 'train' analysis
        # they are the forward's, said so here (was: unmarked beside train matmul FLOPs)
        out["non_matmul_pass"] = "forward"
        out["non_matmul_flops"] = a.elementwise_flops
        out["non_matmul_by_component"] = a.elementwise_by_component()
        out["closed_form"]["non_matmul_flops_polynomial"] = str(a.elementwise_polynomial())
    if a.phase == R.FORWARD:
        out["all_flops"] = a.matmul_flops() + a.elementwise_flops
    return out
