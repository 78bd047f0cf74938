"""A CrossCheck in words: its tables (rendered by accounting/tables/render.py) and its
one-line summary. Formatting only; the result (result.py) is plain data.

`conventions=False` drops the notes that read the same for every workload, for a
report that prints many cross-checks and states the conventions once (CONVENTIONS).
"""
from __future__ import annotations

from accounting.ledger import records as R
from accounting.crosscheck.result import CrossCheck
from accounting.crosscheck.dispatch import EINSUM_PRODUCT, INT_BOOL, MATMUL, ZERO
from accounting.crosscheck.fvcore_einsum import STOCK_CAP_BYTES
from accounting.tables.table import Table
from accounting.units import FLOPS_PER_MAC, gibibytes, grouped

MATMUL_CONVENTIONS = (
    "Exact integers, executed counts (the full T×T attention core the model computes before "
    "masking). agree: analytic, fvcore ×2 and torch equal to the last FLOP.",
    f"fvcore ×2: fvcore.nn.FlopCountAnalysis counts one per multiply-add, doubled here "
    f"(FLOPS_PER_MAC = {FLOPS_PER_MAC}); it traces the forward pass only (n/a for backward). "
    "Its aten::einsum handle is replaced by an exact one (accounting/crosscheck/fvcore_einsum.py).",
    "torch: torch.utils.flop_counter.FlopCounterMode (aten.mm/bmm FLOPs); backward = its count "
    "over forward + loss.backward() (cross-entropy) minus its forward count.",
    "Modules -> components: each count goes to the component of the innermost module that "
    "ran it, by the ledger's map (below). Both counters count matmuls only; non-matmul FLOPs "
    "are compared in their own table.",
    "fvcore stock: fvcore's own einsum handle (jit_handles.einsum_flop_jit). It parses the "
    "FLOP count numpy.einsum_path prints to 4 significant digits, so it is rounded, and it "
    "allocates every operand as dense float64 np.zeros, so it runs here only where those "
    f"stay within {gibibytes(STOCK_CAP_BYTES, 0)}.",
)
NON_MATMUL_CONVENTIONS = (
    f"Convention (accounting/ledger/records.py): {R.CONVENTION}.",
    "op counter: a TorchDispatchMode over the same forward pass, counting every aten operator "
    "by module; per-block modules (ln1, ln2, attn, ffn; block = the block's own residual "
    "adds) are summed over all blocks.",
)
CONVENTIONS = MATMUL_CONVENTIONS + NON_MATMUL_CONVENTIONS


def _n(v: int | None) -> str:
    return "n/a" if v is None else grouped(v)


def _agree_text(analytic: int, **measured) -> str:
    diffs = [f"{name} {v - analytic:+,}" for name, v in measured.items()
             if v is not None and v != analytic]
    return "yes" if not diffs else "NO: " + ", ".join(diffs)


def _workload(c: CrossCheck) -> str:
    return f"{c.name}, T = {grouped(c.seq)}, B = {grouped(c.batch)}"


def matmul_table(c: CrossCheck, conventions: bool = True) -> Table:
    rows = []
    hf = c.hf is not None  # transformers' model ran: its column after torch's
    for r in c.components:
        if r.stock_skipped:
            stock, diff = "skipped", ""
        elif r.fvcore_stock is None:
            stock, diff = "n/a", ""
        else:
            stock, diff = grouped(r.fvcore_stock), f"{r.fvcore_stock - r.analytic:+,}"
        rows.append((r.scope, r.component, grouped(r.analytic), _n(r.fvcore), grouped(r.torch))
                    + ((_n(r.transformers),) if hf else ())
                    + (_agree_text(r.analytic, fvcore=r.fvcore, torch=r.torch,
                                   transformers=r.transformers), stock, diff))
    notes = list(MATMUL_CONVENTIONS) if conventions else []
    if hf:
        notes.append(f"transformers (in agree too): {c.hf.transformers_class} (transformers "
                     f"{c.hf.version}) built "
                     "by AutoModelForCausalLM.from_config from the config.json itself, eager "
                     "attention, meta device; forward by FlopCounterMode's module hierarchy, "
                     "backward by the module whose forward made each autograd node (the op "
                     "counter), FlopCounterMode's formulas; its parameters and KV cache are in "
                     "the transformers table below.")
    elif c.hf_skipped:
        notes.append(c.hf_skipped + ".")
    if conventions and c.module_map:
        notes.append(f"Module map (ledger): {c.module_map}.")
    if hf and conventions:
        notes.append(f"Module map (transformers, {c.hf.model_type}; from the ledger's modules "
                     f"and names): {c.hf.module_map}.")
    skipped = [e for e in c.einsum_calls if e["stock_flops_each"] is None]
    if skipped:
        worst = max(skipped, key=lambda e: e["stock_operand_bytes"])
        notes.append(
            "fvcore stock skipped: it would allocate up to "
            f"{gibibytes(worst['stock_operand_bytes'])} for one call ({worst['equation']} on "
            f"{' and '.join(map(str, worst['shapes']))}).")
    notes += c.notes
    return Table(f"Cross-check: matmul FLOPs, analytic vs counted on the model ({_workload(c)})",
                 ("pass", "component", "analytic", "fvcore ×2", "torch")
                 + (("transformers",) if hf else ()) + ("agree", "fvcore stock ×2",
                                                       "stock − analytic"),
                 tuple(rows), align="llrrr" + ("r" if hf else "") + "lrr", notes=tuple(notes))


def transformers_table(c: CrossCheck) -> Table | None:
    """transformers' model: parameters by component and the KV cache, with what it
    computes differently (its FLOPs are a column of the matmul table)."""
    h = c.hf
    if h is None:
        return None
    rows = [(f"parameters: {r.component}", grouped(r.analytic), grouped(r.transformers),
             _agree_text(r.analytic, transformers=r.transformers)) for r in h.params]
    rows.append((f"KV cache after the prefill, bytes ({h.dtype.split(' ')[0]})",
                 grouped(h.kv_bytes[0]), grouped(h.kv_bytes[1]),
                 _agree_text(h.kv_bytes[0], transformers=h.kv_bytes[1])))
    notes = (f"Built in {h.dtype}; only the KV-cache bytes depend on it. KV cache: "
             f"past_key_values after the forward pass with use_cache=True: {h.kv_detail}; "
             "analytic: the ledger's K and V per token and block × B·T × the element size.",
             *h.notes)
    return Table(f"Cross-check: transformers' {h.transformers_class} (transformers {h.version}, "
                 f"{_workload(c)})", ("quantity", "analytic", "transformers", "agree"),
                 tuple(rows), align="lrrl", notes=notes)


def layer_table(c: CrossCheck) -> Table:
    rows = tuple((lc.scope, lc.counter, f"{lc.agreeing}/{lc.layers}",
                  "" if not lc.mismatches else
                  "; ".join(f"block {m.layer} {m.component}: {m.measured - m.analytic:+,}"
                            for m in lc.mismatches[:3])
                  + (f"; … {len(lc.mismatches) - 3} more" if len(lc.mismatches) > 3 else ""))
                 for lc in c.layers)
    per_block = "; ".join(f"{scope}: " + ", ".join(f"{comp} {grouped(v)}" for comp, v in items)
                          for scope, items in c.per_block_analytic)
    return Table(f"Cross-check: each block against the analytic per-block counts ({_workload(c)})",
                 ("pass", "counter", "blocks agreeing", "differences (measured − analytic)"),
                 rows, align="llrl",
                 notes=(f"Analytic matmul FLOPs per block: {per_block}. The op counter row "
                        "compares each block's non-matmul FLOPs by module and operator.",))


def non_matmul_table(c: CrossCheck, conventions: bool = True) -> Table | None:
    if not c.non_matmul:
        return None
    rows = tuple((r.where, r.op, r.components, grouped(r.analytic),
                  "unknown op" if r.measured is None else grouped(r.measured),
                  ("yes" if r.agree else "NO" if r.measured is None
                   else f"NO: {r.measured - r.analytic:+,}") + (f" ({r.note})" if r.note else ""))
                 for r in c.non_matmul)

    def ops(kind):
        return ", ".join(f"{op} ×{n}" for op, k, n in c.zero_ops if k == kind) or "none"

    notes = list(NON_MATMUL_CONVENTIONS) if conventions else []
    notes += [f"Seen at 0 FLOPs by convention (calls): copies, casts, views, indexing: "
              f"{ops(ZERO)}; integer/bool results: {ops(INT_BOOL)}.",
              "Matmul operators (compared in the matmul table, not here): " + ops(MATMUL)
              + (f"; inside einsum, as elementwise products: {ops(EINSUM_PRODUCT)}"
                 if any(k == EINSUM_PRODUCT for _, k, _ in c.zero_ops) else "") + "."]
    notes += c.non_matmul_notes
    return Table(f"Cross-check: non-matmul FLOPs of the forward pass ({_workload(c)})",
                 ("where", "op", "analytic components", "analytic", "op counter", "agree"),
                 rows, align="lllrrl", notes=tuple(notes))


def checks_table(c: CrossCheck) -> Table:
    rows = tuple((k.claim, k.evidence, "yes" if k.holds else "NO")
                 for k in c.checks + (c.hf.checks if c.hf is not None else ()))
    return Table(f"Cross-check: consistency and backward claims ({_workload(c)})",
                 ("check", "measured", "holds"), rows, align="lll",
                 notes=((f"Result: {c.counters} agree exactly."
                         if c.agrees else "Result: DISAGREEMENT — see the rows marked NO."),))


def summary(c: CrossCheck) -> str:
    """One line: the counters agree, or the first three disagreements."""
    d = c.disagreements()
    if not d:
        return (f"{c.counters} agree exactly ({c.name}, "
                f"T={c.seq}, B={c.batch}, {c.phase})")
    more = f" (+{len(d) - 3} more)" if len(d) > 3 else ""
    return f"{c.name}, T={c.seq}, B={c.batch}, {c.phase}: " + "; ".join(d[:3]) + more


def tables(c: CrossCheck, conventions: bool = True) -> list[Table]:
    """Matmul, per-block, non-matmul and checks tables. conventions=False leaves out
    the notes that are the same for every workload (for a report that states them once)."""
    nm, tf = non_matmul_table(c, conventions), transformers_table(c)
    vt = [vision_table(c.vision)] if c.vision is not None else []
    return ([matmul_table(c, conventions)] + ([tf] if tf else []) + vt + [layer_table(c)]
            + ([nm] if nm else []) + [checks_table(c)])


def vision_table(v) -> Table:
    """transformers' whole vision-language model with the images (vision_check.VisionCheck)."""
    title = (f"Cross-check: the whole model with {grouped(v.images)} image"
             f"{'' if v.images == 1 else 's'} ({grouped(v.image_tokens)} image tokens of "
             f"T = {grouped(v.seq)}, B = {grouped(v.batch)}), {v.phase} matmul FLOPs"
             f"{f' ({v.trained})' if v.trained else ''}")
    if v.error or v.skipped:
        return Table(title, notes=(f"not run: {v.error or v.skipped}",))
    rows = tuple((r.component, grouped(r.analytic), grouped(r.transformers),
                  f"{r.transformers - r.analytic:+,}" if not r.agree else "",
                  "yes" if r.agree else "NO") for r in v.rows)
    rows += tuple((f"check: {c.claim}", "", c.evidence, "", "yes" if c.holds else "NO")
                  for c in v.checks)
    return Table(title, ("component", "analytic", f"transformers ({v.transformers_class})",
                         "difference", "agree"), rows, notes=v.notes)
