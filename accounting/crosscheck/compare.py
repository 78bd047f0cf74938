"""The model's counters against the ledger: the comparison that builds a CrossCheck.

The counts are mapped onto the ledger's components and blocks by mapping.py; the result
is the plain record of result.py (rendered by views.py). Works on a Measurement's plain
numbers; runs nothing.
"""
from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import replace

from accounting.analysis.workload import Analysis
from accounting.ledger.ledger import Ledger
from accounting.crosscheck.dispatch import (BACKWARD, COUNTED, EINSUM_PRODUCT, EINSUM_SUM,
                                            FORWARD, MATMUL, OUTSIDE, UNKNOWN)
from accounting.crosscheck.mapping import (Split, add, analytic_flops, layer_check,
                                           module_map_text, own, rollup, split)
from accounting.crosscheck.measure import GLOBAL, Measurement
from accounting.crosscheck.result import (ELSEWHERE, TOTAL, Check, ComponentRow, CrossCheck,
                                          HFCheck, LayerCheck, LayerMismatch, NonMatmulRow)
from accounting.ledger.records import COMPONENTS, EXECUTED, PHASES, RECURRENT, TRAIN
from accounting.units import FLOPS_PER_MAC, grouped

FVCORE, TORCH, OP_COUNTER = "fvcore ×2", "torch", "op counter"


def _ops_by_module(m: Measurement, phase: str, kinds) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for r in m.ops:
        if r.phase == phase and r.kind in kinds:
            out[r.module] += r.flops
    return dict(out)



def _rows(scope, analytic: dict, fv: Split | None, stock, torch_split: Split, products: Split,
          fv_total, torch_total, product_total) -> list[ComponentRow]:
    rows = []
    fvc = fv.components() if fv else None
    tc, pc = torch_split.components(), products.components()
    for c in COMPONENTS:
        if c == RECURRENT and not (analytic[c] or (fvc and fvc[c]) or tc[c] or pc[c]):
            continue  # a model without recurrent layers: no row
        st, skipped = (stock[c] if stock else (None, False))
        rows.append(ComponentRow(scope, c, analytic[c], fvc[c] if fvc else None, st, skipped,
                                 tc[c] + pc[c], pc[c]))
    elsewhere_fv = fv.elsewhere if fv else 0
    if elsewhere_fv or torch_split.elsewhere or products.elsewhere:
        rows.append(ComponentRow(scope, ELSEWHERE, 0, elsewhere_fv if fv else None, None, False,
                                 torch_split.elsewhere + products.elsewhere, products.elsewhere,
                                 "counted outside the four components"))
    st_total = None
    if stock and not any(skipped for _, skipped in stock.values()):
        st_total = sum(v for v, _ in stock.values())
    rows.append(ComponentRow(scope, TOTAL, sum(analytic.values()), fv_total, st_total,
                             bool(stock) and st_total is None, torch_total + product_total,
                             product_total))
    return rows


def _stock_by_component(m: Measurement, lg: Ledger):
    """The stock handle's figures (×2) per component, and whether any call was skipped."""
    got, skipped = defaultdict(int), defaultdict(int)
    for call in m.einsum_calls:
        if call.stock_macs is None:
            skipped[call.module] += 1
        else:
            got[call.module] += FLOPS_PER_MAC * call.stock_macs
    gc = split(dict(got), lg, sum(got.values())).components()
    sc = split(dict(skipped), lg, sum(skipped.values())).components()
    return {c: (None if sc[c] else gc[c], bool(sc[c])) for c in COMPONENTS}


def _einsum_summary(m: Measurement) -> tuple[dict, ...]:
    distinct: dict[tuple, dict] = {}
    for call in m.einsum_calls:
        key = (call.equation, call.shapes)
        if key not in distinct:
            distinct[key] = {"equation": call.equation, "shapes": [list(s) for s in call.shapes],
                             "calls": 0, "flops_each": FLOPS_PER_MAC * call.macs,
                             "stock_flops_each": (None if call.stock_macs is None
                                                  else FLOPS_PER_MAC * call.stock_macs),
                             "stock_operand_bytes": call.stock_bytes}
        distinct[key]["calls"] += 1
    return tuple(distinct.values())


def compare(a: Analysis, m: Measurement, hf: HFCheck | None = None,
            hf_skipped: str = "") -> CrossCheck:
    """The counters against the ledger; `hf`: transformers' model's counts (hf_compare.py)
    joined as a column and per-block rows, or `hf_skipped`: why it did not run."""
    L, lg = a.config.num_layers, a.ledger
    analytic, block = analytic_flops(a)
    rows: list[ComponentRow] = []
    layer_checks: list[LayerCheck] = []
    checks: list[Check] = []
    notes: list[str] = []
    passes = PHASES[a.phase]

    if FORWARD in passes:
        fv = fv_total = stock = None
        if m.fvcore_macs is not None:
            macs = {k: FLOPS_PER_MAC * v for k, v in m.fvcore_macs.items()}
            fv_total = macs[""]
            fv = split(own(macs), lg, fv_total)
            stock = _stock_by_component(m, lg)
            layer_checks.append(layer_check(FORWARD, FVCORE, fv, block, lg))
        fcm = m.torch_flops[FORWARD]
        t = split(own(fcm), lg, fcm.get(GLOBAL, 0))
        prod_mod = _ops_by_module(m, FORWARD, (EINSUM_PRODUCT,))
        prod_tot = sum(prod_mod.values())
        p = split(prod_mod, lg, prod_tot)
        rows += _rows(FORWARD, analytic[FORWARD], fv, stock, t, p, fv_total,
                      fcm.get(GLOBAL, 0), prod_tot)
        layer_checks.append(layer_check(FORWARD, TORCH, add(t, p), block, lg))
        # The op counter's module attribution, checked where FlopCounterMode's is sound.
        innermost = _ops_by_module(m, FORWARD, (MATMUL,))
        mine = rollup(innermost)
        theirs = {k: v for k, v in fcm.items() if k != GLOBAL}
        differ = sorted(k for k in set(innermost) | set(theirs)
                        if mine.get(k, 0) != theirs.get(k, 0))
        checks.append(Check("forward: the op counter's matmul FLOPs per module = "
                            "FlopCounterMode's module hierarchy",
                            f"{len(theirs)} modules" + (f"; differ: {', '.join(differ[:4])}"
                                                        if differ else ", all equal"),
                            not differ))
    if BACKWARD in passes:
        bwd_mod = _ops_by_module(m, BACKWARD, (MATMUL,))
        prod_mod = _ops_by_module(m, BACKWARD, (EINSUM_PRODUCT,))
        fcm_total = m.torch_flops[BACKWARD].get(GLOBAL, 0)
        mine_total = sum(bwd_mod.values())
        t = split(bwd_mod, lg, mine_total)
        prod_tot = sum(prod_mod.values())
        p = split(prod_mod, lg, prod_tot)
        rows += _rows(BACKWARD, analytic[BACKWARD], None, None, t, p, None, fcm_total, prod_tot)
        layer_checks.append(layer_check(BACKWARD, TORCH, add(t, p), block, lg))
        checks.append(Check("backward: the op counter's matmul FLOPs = FlopCounterMode's",
                            f"{grouped(mine_total)} and {grouped(fcm_total)}",
                            mine_total == fcm_total))
        # attn and ffn (parallel_shared_norm), or attn and the Mamba-2 mixer of a hybrid
        # layer without muP multipliers, read one tensor: FlopCounterMode's backward module
        # hierarchy then sees one module's input gradient as another's
        c = lg.config
        shared = c.block == "parallel_shared_norm" or (
            not c.mup_multipliers and any(k.mixer == "hybrid" for k in c.layer_kinds))
        frozen = {r.module for r in lg.forward if not r.backward}  # run under torch.no_grad
        # Gemma 4's per-layer projection reads block 0's input (the scaled embeddings): the
        # same module-tracker effect credits block 0 (and the model) with its backward
        checks += _backward_checks(m, L, bwd_mod, prod_mod, shared, frozen,
                                   c.per_layer_input is not None)
        notes += _module_tracker_note(m, lg, bwd_mod)
    if len(passes) > 1:
        fwd = [r for r in rows if r.scope == FORWARD and r.component == TOTAL][0]
        bwd = [r for r in rows if r.scope == BACKWARD and r.component == TOTAL][0]
        rows.append(ComponentRow(TRAIN, TOTAL, fwd.analytic + bwd.analytic, None, None, False,
                                 fwd.torch + bwd.torch,
                                 fwd.torch_einsum_products + bwd.torch_einsum_products))
    if any(r.torch_einsum_products for r in rows):
        notes.append("torch includes einsum contractions over a size-1 label (T = 1 leaves one "
                     "key; d_ff = 1), which torch.einsum runs as an elementwise aten.mul, "
                     "not a bmm, so FlopCounterMode counts nothing for them; the op counter "
                     f"adds them at {FLOPS_PER_MAC} FLOPs per product, as for every matmul "
                     "(see the torch_einsum_products figures in --format json).")

    non_matmul, zero_ops, nm_notes = (), (), []
    if a.elementwise_rows:
        non_matmul, zero_ops, nm_layers, nm_notes = _non_matmul(a, m)
        layer_checks.append(nm_layers)
    if a.counting != EXECUTED:
        notes.append("Compared on executed counts (the full T×T attention core the model "
                     "computes and masks, as the counters see it); the useful counts are "
                     "analytic only.")
    if a.config.num_experts is not None and a.config.router_scales_input:
        notes.append("Mixture of experts (Llama 4's form): every expert runs every token, the "
                     "unchosen at weight 0, so the count (E·B·T expert rows) is the same "
                     "whatever the routing; tests/test_model_variants.py checks the values "
                     "against a token-by-token reference on real CPU tensors.")
    elif a.config.num_experts is not None:
        notes.append("Mixture of experts: the meta device has no data for the router to choose "
                     "by, so model/moe.py deals the B·T·k token slots to the experts in turn there. "
                     + ("Dropless, the count is B·T·k expert rows whatever the routing"
                        if a.config.moe_capacity_factor is None else
                        "Under a capacity factor every expert runs its C rows whatever the routing")
                     + ": tests/test_moe.py runs real CPU tensors with every token sent to the "
                     "same experts, perfectly balanced and random routings, and counts the same.")
    if len(lg.groups) > 1:
        notes.append("Blocks of several kinds (" + ", ".join(
            f"{g}: {len(layers)}" for g, layers in lg.groups) + "): each block is checked "
            "against the analytic block of its kind.")
    one = len(lg.groups) == 1
    shown = set(a.components)  # the recurrent mixing only for a model that has it
    per_block = tuple((s if one else f"{s}, a block of {g}",
                       tuple((c, v) for c, v in block[g][s].items() if c in shown))
                      for g, _ in lg.groups for s in passes)
    if hf is not None:
        rows, layer_checks = _join_hf(rows, hf), layer_checks + list(hf.layers)
    return CrossCheck(a.config.name, a.seq, a.batch, a.phase, a.counting, tuple(rows),
                      tuple(layer_checks), per_block, tuple(non_matmul), tuple(zero_ops),
                      tuple(checks), tuple(notes), tuple(nm_notes), _einsum_summary(m),
                      module_map_text(lg), hf, hf_skipped)


def _join_hf(rows: list[ComponentRow], hf) -> list[ComponentRow]:
    """transformers' FLOPs as the rows' fourth column; a 'not in any component' row where it
    counted something the others did not."""
    out = []
    for r in rows:
        if r.component == TOTAL and r.scope != TRAIN:
            if hf.flops.get((r.scope, ELSEWHERE)) and not any(
                    x.scope == r.scope and x.component == ELSEWHERE for x in rows):
                out.append(ComponentRow(r.scope, ELSEWHERE, 0, 0 if r.fvcore is not None else None,
                                        None, False, 0, 0, "counted outside the four components"))
        out.append(r)
    joined = []
    for r in out:
        if r.scope == TRAIN:
            value = sum(hf.flops[(p, TOTAL)] for p in (FORWARD, BACKWARD))
        else:
            value = hf.flops.get((r.scope, r.component), 0)
        joined.append(replace(r, transformers=value))
    return joined



def _backward_checks(m: Measurement, L: int, bwd_mod: dict, prod_mod: dict,
                     shared: bool = False, frozen: frozenset | set = frozenset(),
                     input_shared: bool = False) -> list[Check]:
    """The analytic backward ledger's claims, measured, and where FlopCounterMode's own
    backward module hierarchy is sound (`shared`: attn and ffn read one norm's output, a
    parallel block with a shared norm, or attn and a hybrid layer's mixer do, so only the
    block's total is; `frozen`: the block
    modules the ledger runs under torch.no_grad, DeepSeek-V3.2's indexer, which must run
    no backward matmul)."""
    calls: dict[str, int] = defaultdict(int)
    for r in m.ops:
        if r.phase == BACKWARD and r.kind in (MATMUL, EINSUM_PRODUCT):
            calls[r.module] += r.calls
    def no_grad(n: str) -> bool:
        block = _BLOCK.fullmatch(n)
        return block is not None and block.group(2) in frozen
    two = [n for n in m.linear_modules
           if calls.get(n, 0) == (0 if no_grad(n) else 2)]
    first = [n for n in m.linear_modules if n.startswith("layers.0.")]
    first_two = [n for n in first if n in two]
    emb_ops = sorted({r.op for r in m.ops if r.phase == BACKWARD and r.module == "token_embeddings"})
    emb_matmul = bwd_mod.get("token_embeddings", 0) + prod_mod.get("token_embeddings", 0)
    mine = rollup({k: bwd_mod.get(k, 0) + prod_mod.get(k, 0) for k in set(bwd_mod) | set(prod_mod)})
    fcm = m.torch_flops[BACKWARD]
    coarse = ["", "lm_head"] + [f"layers.{i}{s}" for i in range(L)
                                for s in (("",) if shared else ("", ".attn", ".ffn"))]
    if input_shared:  # block 0's input also feeds a top-level module: its total (and the
        # model's, whose hierarchy is entered there) is not FlopCounterMode's to split
        coarse = [k for k in coarse if k != "layers.0"]
    coarse_differ = [k or "model" for k in coarse if fcm.get(k, 0) + _products(prod_mod, k)
                     != mine.get(k, 0)]
    return [
        Check("every Linear needs dX and dW (2 backward matmuls), block 0's too: its input "
              "depends on the trainable embedding" + (
                  " (the indexer's, under torch.no_grad, none)" if frozen else ""),
              f"{len(two)}/{len(m.linear_modules)} Linear modules ran 2; block 0: "
              f"{len(first_two)}/{len(first)}",
              len(two) == len(m.linear_modules)),
        Check("the embedding's backward is a scatter-add, not a matmul",
              f"token_embeddings: {', '.join(emb_ops) or 'nothing'}; {grouped(emb_matmul)} "
              "matmul FLOPs",
              any("index_put" in op for op in emb_ops) and emb_matmul == 0
              and bool(m.embedding_has_grad)),
        Check("token ids get no gradient",
              "ids.grad is None" if not m.token_ids_have_grad else "the token ids have a gradient",
              m.token_ids_have_grad is False),
        Check("FlopCounterMode's backward totals per block"
              + (" and lm_head (attn and another sublayer share an input here)" if shared else
                 ", attn, ffn and lm_head") + (" (block 0's total aside: the per-layer "
                                              "projection reads its input)" if input_shared
                                              else "") + " = the op counter's",
              f"{len(coarse) - len(coarse_differ)}/{len(coarse)} modules equal"
              + (f"; differ: {', '.join(coarse_differ[:4])}" if coarse_differ else ""),
              not coarse_differ),
    ]


def _products(prod_mod: dict, module: str) -> int:
    """Einsum products (not seen by FlopCounterMode) run inside `module`, children included."""
    return sum(v for k, v in prod_mod.items()
               if module == "" and k != OUTSIDE or k == module or k.startswith(module + "."))


def _module_tracker_note(m: Measurement, lg: Ledger, bwd_mod: dict) -> list[str]:
    """How FlopCounterMode's own backward module hierarchy would split the components."""
    fcm = m.torch_flops[BACKWARD]
    theirs = split(own(fcm), lg, fcm.get(GLOBAL, 0)).components()
    ours = split(bwd_mod, lg, sum(bwd_mod.values())).components()
    if theirs == ours:
        return []
    diffs = ", ".join(f"{c} {grouped(theirs[c])} ({theirs[c] - ours[c]:+,})"
                      for c in COMPONENTS if theirs[c] != ours[c])
    block0 = [f"{n.removeprefix('layers.0.')} {fcm.get(n, 0) // bwd_mod[n]}×"
              for n in m.linear_modules if n.startswith("layers.0.") and bwd_mod.get(n)
              and fcm.get(n, 0) != bwd_mod[n] and fcm.get(n, 0) % bwd_mod[n] == 0]
    return ["Backward components: each FLOP FlopCounterMode counts goes to the module whose "
            "forward created the autograd node that ran it. FlopCounterMode's own module "
            f"hierarchy would give {diffs}: its ModuleTracker (torch 2.13) keeps a module "
            "'entered' in backward until the gradient of its input is complete, so modules "
            "sharing an input are credited with each other's backward FLOPs"
            + (f" (block 0: {', '.join(block0)} their own)" if block0 else "")
            + (". Its block and lm_head totals are sound (checked below; with one norm shared "
               "by a parallel block's attn and ffn, theirs are not)"
               if lg.config.block == "parallel_shared_norm" else
               ". Its block, attn, ffn and lm_head totals are sound (checked below).")]


# ---------------------------------------------------------------- non-matmul FLOPs
_BLOCK = re.compile(r"layers\.(\d+)(?:\.(.*))?")


def _place(module: str) -> tuple[int | None, str]:
    """'layers.3.attn' -> (3, 'attn'); 'layers.3' -> (3, ''); 'ln_final' -> (None, 'ln_final')."""
    b = _BLOCK.fullmatch(module)
    return (int(b.group(1)), b.group(2) or "") if b else (None, module)


def _groups(lg: Ledger) -> dict[tuple[bool, str], str]:
    """(per block, module) -> its row label. Modules that run the same non-matmul ops
    (ln1 and ln2, say) share rows, labelled "ln1, ln2"; '' is the block (or the model)."""
    ops: dict[tuple[bool, str], list] = defaultdict(list)
    for e in lg.elementwise:
        ops[(e.per_layer, e.module)].append((e.op, e.component, e.name, e.elements,
                                             e.per_element * e.copies))
    same: dict[tuple, list[str]] = defaultdict(list)
    for (per_block, module), sig in ops.items():
        same[(per_block, tuple(sorted(sig)))].append(module)
    return {(per_block, m): ", ".join(x or ("block" if per_block else "model") for x in modules)
            for (per_block, _), modules in same.items() for m in modules}


def _non_matmul(a: Analysis, m: Measurement):
    """Forward non-matmul FLOPs by (module group, operator): the ledger vs the op counter.

    Rows sum each group's modules over the blocks; the per-block check compares every
    block's modules one by one."""
    lg, v = a.ledger, a.values
    label_of = _groups(lg)
    expected: dict[tuple, int] = defaultdict(int)  # (label, op) -> FLOPs
    block_expected: dict[tuple, int] = defaultdict(int)  # (kind, module in a block, op) -> FLOPs
    components: dict[tuple, list[str]] = defaultdict(list)
    for e in lg.elementwise:
        label = label_of[(e.per_layer, e.module)]
        expected[(label, e.op)] += e.count(v) * e.flops(v)
        if e.per_layer:
            block_expected[(e.repeat, e.module, e.op)] += e.flops(v)
        if e.component not in components[(label, e.op)]:
            components[(label, e.op)].append(e.component)

    measured: dict[tuple, int] = defaultdict(int)
    per_block: dict[tuple, int] = defaultdict(int)
    unknown: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    zero: Counter = Counter()
    for r in m.ops:
        if r.phase != FORWARD:
            continue
        i, rel = _place(r.module)
        if r.kind in COUNTED:
            fallback = rel or ("block" if i is not None else "model")
            measured[(label_of.get((i is not None, rel), fallback), r.op)] += r.flops
            if i is not None:
                per_block[(i, rel, r.op)] += r.flops
        elif r.kind == UNKNOWN:
            u = unknown[(r.module, r.op)]
            u[0], u[1] = u[0] + r.calls, u[1] + r.elements
        else:
            kind = EINSUM_PRODUCT if r.kind == EINSUM_SUM else r.kind
            zero[(r.op, kind)] += r.calls

    rows = [NonMatmulRow(g, op, ", ".join(components[(g, op)]), n, measured.get((g, op), 0))
            for (g, op), n in expected.items()]
    rows += [NonMatmulRow(g or "model", op, "", 0, n, "counted, but in no analytic record")
             for (g, op), n in measured.items() if (g, op) not in expected]
    rows += [NonMatmulRow(module or "model", op, "", 0, None,
                          f"op outside the convention: {calls} calls, {grouped(elements)} elements")
             for (module, op), (calls, elements) in unknown.items()]
    rows.append(NonMatmulRow(TOTAL, "", "", sum(expected.values()),
                             None if unknown else sum(measured.values())))

    mismatches = []
    for i in range(a.config.num_layers):
        g = lg.group_of(i)
        keys = {(w, op) for (j, w, op) in per_block if j == i} | \
            {(w, op) for (kind, w, op) in block_expected if kind == g}
        for w, op in sorted(keys):
            got, want = per_block.get((i, w, op), 0), block_expected.get((g, w, op), 0)
            if got != want:
                mismatches.append(LayerMismatch(i, f"{w or 'block'} {op}", want, got))
    layer_check = LayerCheck(FORWARD, f"{OP_COUNTER} (non-matmul)", a.config.num_layers,
                             tuple(mismatches))
    zero_ops = tuple(sorted(((op, kind, n) for (op, kind), n in zero.items()),
                            key=lambda x: (x[1], x[0])))
    return rows, zero_ops, layer_check, []
