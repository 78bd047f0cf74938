"""What the tool read from a Hugging Face config.json, as a table. Formatting only."""
from __future__ import annotations

import json

from accounting.architecture.hf_config import COMMON_FREE, COMMON_MUST, HFConfig
from accounting.tables.table import Table


def _json(value) -> str:
    """The value as JSON; a long list that repeats one period written once, × its count
    (Qwen3.5's 64 layer_types: ["linear_attention", …, "full_attention"] × 16)."""
    period = _period(value)
    if period:
        return f"{json.dumps(value[:period], ensure_ascii=False)} × {len(value) // period}"
    return json.dumps(value, ensure_ascii=False)


def _period(value) -> int:
    """The shortest period a list of more than 8 entries repeats whole, or 0."""
    if not isinstance(value, (list, tuple)) or len(value) <= 8:
        return 0
    n = len(value)
    return next((p for p in range(1, n // 2 + 1) if n % p == 0 and
                 list(value) == list(value[:p]) * (n // p)), 0)


def _spec(c, field: str) -> str:
    """A spec field's value; null written as what it means."""
    value = getattr(c, field)
    if value is None:
        return {"head_dim": f"{c.d_k} (d_model/num_heads)",
                "num_kv_heads": f"{c.kv_heads} (num_heads)",
                "layer_types": ("every layer local" if c.sliding_window else "every layer global"),
                "sliding_window": "null (no window)",
                "num_experts": "null (dense MLPs)"}.get(field, "null")
    if isinstance(value, tuple):
        if all(isinstance(v, int) for v in value):
            return _ranges(value)
        period = _period(value)
        if period:
            return f"({', '.join(map(str, value[:period]))}) × {len(value) // period}"
        return ", ".join(map(str, value)) or "none"
    return json.dumps(value) if isinstance(value, bool) else str(value)


def _ranges(indices: tuple[int, ...]) -> str:
    """Layer indices, runs written a–b: '0–2' for (0, 1, 2); 'none' for ()."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in runs) or "none"


def translation_table(hf: HFConfig) -> Table:
    """Each count-changing key, its value and the spec field it sets; the model_type's
    rules with no key; what was accepted as count-free."""
    t, c = hf.type, hf.config
    rows = [(key, _json(value) if given else f"(absent) {_json(value)}",
             ", ".join(fields) if fields else "→ (rule)", ", ".join(_spec(c, f) for f in fields))
            for key, value, fields, given in hf.mapped]
    rows += [("(rule)", "the keys marked → (rule)", field, _spec(c, field))
             for d in t.derived for field in d.fields]
    rows += [("(no key)", f"model_type {t.model_type}", field, _spec(c, field))
             for field in t.fixed]
    free = sorted(k for k in hf.data if k in COMMON_FREE | t.free | t.outer and k != "model_type")
    if t.nested:  # a multimodal file: the language model's count-free keys too
        free += sorted(f"{t.nested}.{k}" for k in hf.data[t.nested]
                       if k in COMMON_FREE | t.free and k != "model_type")
    notes = [f"model_type {t.model_type}: transformers' {t.transformers_class}; rules with no "
             f"key: {t.rules}.",
             *(f"(rule) {', '.join(d.fields)}: {d.words}." for d in t.derived),
             *hf.notes]
    if hf.dtype is not None:
        notes.append(f"torch_dtype {hf.dtype}: the checkpoint's storage dtype, which changes no "
                     f"count (memory per dtype is in the tables below); transformers' model is "
                     f"built in it for the cross-check (its KV-cache bytes).")
    checked = [f"{m.hf} {_json(hf.data[m.hf])}" for m in COMMON_MUST + t.must if m.hf in hf.data]
    if checked:
        notes.append(f"Checked (counted only at such values, refused otherwise): "
                     f"{', '.join(checked)}.")
    if free:
        notes.append(f"Accepted as count-free: {', '.join(free)}.")
    return Table(f"Read from config.json ({hf.origin})",
                 ("config.json key", "value", "spec field", "spec value"), tuple(rows),
                 align="llll", notes=tuple(notes))
