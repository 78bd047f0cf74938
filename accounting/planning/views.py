"""A Plan as tables for people (terminal, Markdown). Formatting only: every number comes
from the Plan; rounding happens here, for display, in exact arithmetic."""
from __future__ import annotations

from fractions import Fraction

from accounting.planning import compute, finetune, memory
from accounting.planning.compute import ADAMW_CONVENTION, ADAMW_OPS
from accounting.planning.inference import (
    absorbed_decode_flops_expr,
    decode_flops_expr,
    kv_elements_per_token,
    state_elements_per_sequence,
    weights_read_expr,
)
from accounting.planning.memory import COURSE, MODEL, RECOMPUTE, SCOPES
from accounting.planning.plan import Plan
from accounting.planning import training_state
from accounting.planning.optimizers import get_optimizer, is_default
from accounting.planning.recipes import IMPLEMENTATIONS
from accounting.architecture.presets import title
from accounting.tables.table import Table
from accounting.units import MEGA, TERA, decimal, gibibytes, gigabytes, grouped, si


def _bytes(n: int) -> tuple[str, str, str]:
    return grouped(n), gigabytes(n), gibibytes(n)


def _num(x: Fraction, places: int = 3) -> str:
    """An exact user number as written when it is short, else rounded."""
    s = decimal(x, places).rstrip("0").rstrip(".")
    return s


def _dec(x: Fraction, places: int) -> str:
    """decimal() with thousands separators: 158005.69 -> '158,005.69'."""
    s = decimal(x, places)
    sign, s = ("-", s[1:]) if s.startswith("-") else ("", s)
    whole, _, frac = s.partition(".")
    return f"{sign}{int(whole):,}" + (f".{frac}" if frac else "")


def _seconds(s: Fraction) -> str:
    if s >= 86400:
        return f"{_dec(s / 86400, 2)} days"
    if s >= 3600:
        return f"{_dec(s / 3600, 2)} h"
    if s >= 1:
        return f"{_dec(s, 3)} s"
    if s >= Fraction(1, 1000):
        return f"{decimal(s * 1000, 3)} ms"
    return f"{decimal(s * MEGA, 3)} µs"


def _recipe_rows(p: Plan) -> list[tuple[str, str]]:
    """The implementation, attention kernel and optimizer (accounting/planning/recipes.py)."""
    if p.recipe is None:
        return []
    r, opt = p.recipe, get_optimizer(p.recipe.optimizer)
    trained = p.memory.model.tensors
    n_all, n_trained = training_state.counts(trained)
    return [("implementation", f"{r.implementation}: {IMPLEMENTATIONS[r.implementation]}"
                               + (f"; {r.note}" if r.note else "")),
            ("attention", r.attention_meaning),
            ("optimizer", f"{r.optimizer}: {opt.title} ({opt.source})"),
            ("trained", f"{grouped(n_trained)} of {grouped(n_all)} parameters"
                        + (" (the LoRA adapters; of the base's and the adapters', as PEFT's "
                           "get_nb_trainable_parameters counts)" if p.finetune else ""))]


def settings_table(p: Plan) -> Table:
    c = p.config
    hw = p.hardware
    rows = [
        ("model", f"{title(c)}: V = {c.vocab_size:,}, context_length = "
                  f"{c.context_length:,}, L = {c.num_layers}, d_model = {c.d_model:,}, "
                  f"h = {c.num_heads}"
                  + (f", h_kv = {c.kv_heads}" if c.kv_heads != c.num_heads else "")
                  + f", d_k = {c.d_k}, d_ff = {c.d_ff:,}"),
        ("architecture", c.architecture),
        ("workload", f"T = {p.seq:,} tokens per sequence, B = {p.batch:,} "
                     f"sequence{'' if p.batch == 1 else 's'} per step"),
        ("precision", f"{p.precision.name}: {p.precision.assumptions}"),
        *_recipe_rows(p),
        ("memory scope", f"{p.scope}: " + (
            SCOPES[p.scope] if p.recipe is None or p.recipe.implementation == "course" else
            "what a training step of transformers' model holds: the tensors autograd saves "
            "(checked on the CPU by tests/test_transformers_saves.py), its buffers (the "
            "rotary inv_freq), the optimizer's state and step counters")),
        ("recomputation", f"{p.recompute}: {RECOMPUTE[p.recompute]}"),
    ]
    if p.finetune is not None:  # issue 28: LoRA/QLoRA overrides the precision's state
        rows.append(("fine-tuning", finetune.describe(p.finetune)))
    if hw is None:
        rows.append(("hardware", "none given (--gpu NAME, or --gpu-mem/--gpu-flops/--gpu-bw): "
                                 "no fit, time or roofline"))
    else:
        rows.append(("hardware", f"{hw.name} ({hw.source})"))
        if hw.memory_bytes:
            rows.append(("GPU memory", f"{hw.memory_bytes:,} bytes = {gigabytes(hw.memory_bytes)} "
                                       f"= {gibibytes(hw.memory_bytes)}"))
        if hw.peak_flops:
            rows.append((f"peak ({p.precision.compute})", f"{_num(hw.peak_flops / TERA)} TFLOP/s"))
        if hw.bandwidth:
            rows.append(("memory bandwidth", f"{_num(hw.bandwidth / TERA)} TB/s"))
    rows.append(("MFU", f"{_num(p.mfu, 4)} of the peak (for the time to train)" if p.prediction
                 is None else f"predicted: {_num(p.prediction.mfu, 4)} (the step timed op by op; "
                              f"--mfu overrides)"))
    rows.append(("margin", f"{_num(p.margin, 4)} of the GPU memory reserved"))
    return Table("Plan: model, workload and assumptions", ("setting", "value"), tuple(rows), align="ll")


def memory_table(p: Plan) -> Table:
    tm = p.memory
    rows = []
    for i in tm.items:
        name = i.name if i.on_gpu else f"{i.name} [CPU: not in the total]"
        rows.append((name, i.formula, *_bytes(i.bytes)))
    rows.append(("total on the GPU", f"{grouped(tm.per_sequence)}·B + {grouped(tm.fixed)}",
                 *_bytes(tm.total)))
    v = p.memory.model.values(p.seq, p.batch)
    n = memory.parameter_count(p.config)
    notes = [f"N = {n} = {grouped(tm.parameters)} parameters."]
    if p.precision.autocast:
        nm = memory.matmul_weight_count(p.config)
        notes.append(f"N_matmul = {nm} = {grouped(tm.matmul_weights)} (the weights matmuls read: "
                     f"not the embedding table, not the RMSNorm gains).")
    course_tables = p.recipe is None or p.recipe.implementation == "course"
    if p.scope == MODEL and memory.buffer_bytes(p.config) and course_tables:
        notes.append(f"T_max = max(T, context_length) = {v['T_max']:,} (the RoPE table length the "
                     f"model is built with).")
    a, b = tm.per_sequence, tm.fixed
    notes.append(f"Total at T = {p.seq:,} as a·batch_size + b: {grouped(a)}·batch_size + "
                 f"{grouped(b)} bytes (a = {gigabytes(a)} = {gibibytes(a)} per sequence; "
                 f"b = {gigabytes(b)} = {gibibytes(b)}).")
    expr = p.memory.model.total_expr()
    poly = expr.partial(v)
    cond = (" (for T ≤ context_length; T_max grows with T beyond it)"
            if p.scope == MODEL and memory.buffer_bytes(p.config) and course_tables else "")
    notes.append(f"Total bytes as a polynomial in B and T{cond}: {poly}.")
    notes.append("This is the sum of what a step holds at one time or another (activations and "
                 "gradients never all at once); the step's peak, which decides what fits in the "
                 "model scope, is the next table.")
    opt = ("AdamW" if p.recipe is None or is_default(p.recipe.optimizer) else
           f"{p.recipe.optimizer} ({get_optimizer(p.recipe.optimizer).title})")
    return Table(f"Training memory with {opt} ({p.precision.name}, B = {p.batch:,}, T = {p.seq:,})",
                 ("item", "bytes (formula)", "bytes", "GB (1e9)", "GiB (2^30)"), tuple(rows),
                 align="llrrr", notes=tuple(notes))


def activation_table(p: Plan) -> Table:
    rows = []
    for r in p.memory.activation_rows:
        a = r.record
        counted = "yes" if memory.in_scope(a, p.scope) else "-"
        rows.append((a.name, "×".join(a.shape) if a.shape else "scalar",
                     ("L × " if a.per_layer else "") + (f"{a.copies}" if a.copies > 1 else "1"),
                     a.course or "-", a.saved_in or "-", counted, grouped(r.bytes), a.why))
    course, saved = p.memory.scope_bytes(COURSE), p.memory.scope_bytes(MODEL)
    only_course = sum(r.bytes for r in p.memory.activation_rows if r.record.course and not r.record.saved)
    only_saved = sum(r.bytes for r in p.memory.activation_rows if r.record.saved and not r.record.course)
    notes = (
        f"'counted' marks the rows of the {p.scope} scope. Bytes at B = {p.batch:,}, "
        f"T = {p.seq:,}, all layers, {p.precision.name}"
        + (f" (with {p.recompute} recomputation)." if p.recompute != "none" else "."),
        f"Course list: {grouped(course)} bytes; saved by autograd: {grouped(saved)} bytes "
        f"(ratio {decimal(Fraction(saved, course), 3)}). The course counts "
        f"{grouped(only_course)} bytes autograd does not keep (outputs that no backward "
        f"formula needs) and misses {grouped(only_saved)} bytes it does keep ("
        + ("RMSNorm and softmax internals, the inputs of the matmuls, RoPE tables, SiLU's "
           "sigmoid, the mask, token ids and targets)."
           if p.recipe is None or p.recipe.implementation == "course" else
           "the norms' internals, the inputs of the matmuls, the rotary cos/sin, the fused "
           "kernel's log-sum-exp, token ids and targets)."),
        "'saved in' is the module whose op saves the tensor (relative to a block, or to the "
        "model; 'loss' is F.cross_entropy); tests/test_planning_reality.py checks every row "
        "against the tensors autograd saves on the CPU (torch.autograd.graph."
        "saved_tensors_hooks, storages counted once, parameters excluded).",
    )
    return Table(f"Activations kept for the backward pass ({p.scope} scope)",
                 ("activation", "shape", "count", "course item", "saved in", "counted",
                  "bytes", "why"), tuple(rows), align="lllllrrl",
                 notes=notes)


def peak_table(p: Plan) -> Table:
    """The step's peak: the two moments that decide it (model scope)."""
    model = p.memory.model
    if model.scope != MODEL:
        return Table("Peak of a training step", notes=(
            "The course's accounting is a sum of what a step holds; the peak is given for the "
            "model scope (--scope model).",))
    v = p.memory.model.values(p.seq, p.batch)
    rows, values_ = [], []
    for ph in model.peak_terms:
        n = ph.bytes.evaluate(v)
        values_.append(n)
        rows.append((ph.name, *_bytes(n)))
    top = max(range(len(values_)), key=values_.__getitem__)
    rows.append((f"peak ({model.peak_terms[top].name.split(' (')[0]})", *_bytes(values_[top])))
    notes = [f"{ph.name}: {ph.what}." for ph in model.peak_terms]
    notes.append("Each moment's bytes are exact (measured on a real CPU step by "
                 "tests/test_peak.py, and on CUDA with the rules of "
                 "accounting/planning/cuda_peak.py, checked against H200 measurements by "
                 "tests/test_cuda_peak.py), with optimizer.zero_grad(set_to_none=True). "
                 "Not modelled: "
                 "gradient temporaries inside one block's backward pass, which can exceed both "
                 "with the naive attention at long contexts (its softmax backward makes five "
                 "tensors of B·h·T²) or with a wide MLP; the fused attention (--attention sdpa) "
                 "makes none of that size. The batch and context that fit are solved against "
                 "this peak; the CUDA context and allocator fragmentation are not counted "
                 "(--margin).")
    return Table(f"Peak of a training step ({p.precision.name}, B = {p.batch:,}, T = {p.seq:,})",
                 ("moment", "bytes", "GB (1e9)", "GiB (2^30)"), tuple(rows), align="lrrr",
                 notes=tuple(notes))


def fit_table(p: Plan) -> Table:
    bf, cf = p.batch_fit, p.context_fit
    if bf is None:
        return Table("What fits", notes=("No GPU memory given (--gpu NAME or --gpu-mem SIZE).",))
    budget = bf.budget
    rows = [("GPU memory", *_bytes(budget.capacity)),
            (f"reserved (margin {_num(budget.margin, 4)})", *_bytes(budget.reserved)),
            ("usable", *_bytes(budget.usable))]
    notes = [("What must fit: the step's peak (the larger of its two moments, each a·B + b)."
              if p.memory.model.scope == MODEL else
              "What must fit: the course's sum of memory items, a·B + b.")]
    if bf.fits:
        rows.append((f"largest batch at T = {bf.seq:,}", f"{bf.largest:,}", "", ""))
        rows.append((f"memory at B = {bf.largest:,}", *_bytes(bf.bytes_at_largest)))
        notes.append(f"Largest batch = floor((usable − b) / a) = floor(({grouped(budget.usable)} − "
                     f"{grouped(bf.fixed)}) / {grouped(bf.per_sequence)}) = {bf.largest:,}.")
    else:
        rows.append((f"largest batch at T = {bf.seq:,}", "does not fit", "", ""))
        rows.append(("missing at B = 1", *_bytes(bf.shortfall)))
        notes.append(f"Batch 1 needs {grouped(bf.per_sequence + bf.fixed)} bytes, "
                     f"{grouped(bf.shortfall)} more than the {grouped(budget.usable)} usable "
                     f"({gigabytes(bf.shortfall)} = {gibibytes(bf.shortfall)} short)."
                     + (" Even the batch-independent part b alone does not fit."
                        if bf.fixed > budget.usable else ""))
    if cf.fits and cf.table_limit:
        rows.append((f"longest context at B = {cf.batch:,}", f"{cf.longest:,}", "", ""))
        rows.append((f"memory at T = {cf.longest:,}", *_bytes(cf.bytes_at_longest)))
        notes.append(f"Longest context: the learned position table's {cf.table_limit:,} positions "
                     f"(the model cannot run longer sequences; memory is not the limit).")
    elif cf.fits:
        rows.append((f"longest context at B = {cf.batch:,}", f"{cf.longest:,}", "", ""))
        rows.append((f"memory at T = {cf.longest:,}", *_bytes(cf.bytes_at_longest)))
        notes.append(f"Longest context: the largest T whose bytes (as above) fit at B = {cf.batch:,}, by "
                     f"binary search on the exact integer bytes (they have T² terms); T + 1 = "
                     f"{cf.longest + 1:,} needs {grouped(cf.bytes_at_next)} bytes.")
    else:
        rows.append((f"longest context at B = {cf.batch:,}", "does not fit", "", ""))
        rows.append(("missing at T = 1", *_bytes(cf.shortfall)))
    name = p.hardware.name if p.hardware else "the GPU"
    return Table(f"What fits in {name} ({p.memory.model.scope} scope, {p.precision.name}, "
                 f"recompute {p.recompute})", ("", "bytes / count", "GB (1e9)", "GiB (2^30)"),
                 tuple(rows), align="lrrr", notes=tuple(notes))


def flops_table(p: Plan) -> Table:
    f = p.flops
    rows = [("forward (matmuls)", f.forward_formula, grouped(f.forward), si(f.forward, "FLOP")),
            ("backward (matmuls)", f.backward_formula, grouped(f.backward), si(f.backward, "FLOP"))]
    if p.recompute != "none":
        rows.append((f"recomputation ({p.recompute})", "the checkpointed matmuls' forward again",
                     grouped(f.recompute), si(f.recompute, "FLOP")))
    ft = p.finetune  # issue 28: LoRA/QLoRA (planning/finetune.py): the adapters are trained
    adamw = p.recipe is None or get_optimizer(p.recipe.optimizer).adamw_update
    if adamw:
        rows.append(("AdamW update", compute.adamw_formula(p.config) if ft is None else
                     finetune.adamw_formula(ft), grouped(f.adamw), si(f.adamw, "FLOP")))
    else:
        opt = get_optimizer(p.recipe.optimizer)
        rows.append((f"{p.recipe.optimizer} update", f"{opt.source} (per {'adapter ' if ft else ''}tensor)",
                     grouped(f.adamw), si(f.adamw, "FLOP")))
    rows.append(("total per step", "", grouped(f.total), si(f.total, "FLOP")))
    ratio = Fraction(f.backward, f.forward)
    # a ratio such as 456866/222289 reads as a decimal, the exact fraction beside it
    r = (f"{ratio.numerator} × forward, exactly" if ratio.denominator == 1 else
         f"{decimal(ratio, 4)} × forward ({ratio.numerator:,}/{ratio.denominator:,} exactly)")
    fused = ("" if p.config.attention == "naive" else
             f" With the fused attention kernel (--attention {p.config.attention}) the backward "
             "also recomputes the scores QKᵀ: 5 T×T matmuls per head where the forward runs 2 "
             "(eager attention's backward: 4), so the attention core's backward is 5/2 of its "
             "forward, the rest 2×.")
    notes = [
        (f"Backward = {r}: "
         "the analytic ledger (accounting.analysis.workload, phase 'backward') has one gradient "
         "matmul per operand of every forward matmul, each the size of the forward one (the "
         "embedding's backward is a scatter-add, not a matmul)." if ft is None else
         f"Backward = {r}: LoRA computes every matmul's input gradient and "
         "a weight gradient only for the adapters (the frozen weights' are never computed); "
         "the adapters' matmuls are in both passes.") + fused,
        "Matmul FLOPs, executed count (the full T×T attention scores the model computes), "
        "2 FLOPs per multiply-add. Non-matmul FLOPs (norms, softmax, SiLU, residuals, the "
        f"cross-entropy) are not in the total: {grouped(f.forward_non_matmul)} in the forward "
        f"pass ({decimal(Fraction(100 * f.forward_non_matmul, f.forward), 2)}% of the forward "
        "matmuls).",
        f"{ADAMW_CONVENTION}." if adamw else
        f"{p.recipe.optimizer} update: {_first_line(get_optimizer(p.recipe.optimizer))}",
        f"Per token: {_dec(Fraction(f.total, p.batch * p.seq), 1)} FLOPs (the 6·N rule of "
        f"thumb gives {grouped(6 * p.memory.parameters)}).",
    ]
    if p.recompute != "none":
        notes.append("Recomputation reruns the checkpointed regions' forward matmuls; the time to train counts "
                     "them (the utilization then applies to executed FLOPs, i.e. hardware FLOPs "
                     "utilization; MFU proper excludes recomputation).")
    return Table(f"FLOPs per training step (B = {p.batch:,}, T = {p.seq:,})",
                 ("part", "formula (B, T)", "FLOPs", ""), tuple(rows), align="llrr",
                 notes=tuple(notes))


def _first_line(opt) -> str:
    """The optimizer's rule as its registry entry states it (its docstring, one line)."""
    return " ".join(type(opt).__doc__.split())


def adamw_table(p: Plan) -> Table:
    rows = tuple((o.name, o.op, str(o.flops_per_element), o.per, o.counted_as or "-")
                 for o in ADAMW_OPS)
    v = p.memory.model.values(1, 1)
    if p.finetune is not None:  # issue 28: AdamW over the adapters
        n, tensors = finetune.adamw_exprs(p.finetune)
        return Table("AdamW update FLOPs (torch.optim.AdamW over the LoRA adapters)",
                     ("operation", "torch op", "FLOPs", "per", "counted as"), rows, align="llrll",
                     notes=(f"{finetune.adamw_formula(p.finetune)} = "
                            f"{grouped(finetune.adamw_flops(p.finetune).evaluate(v))} "
                            f"FLOPs per step (N_LoRA = {grouped(n.evaluate(v))} adapter "
                            f"parameters in {grouped(tensors.evaluate(v))} tensors; the frozen "
                            "base is not updated).",))
    e = compute.adamw_flops_expr(p.config)
    return Table("AdamW update FLOPs (torch.optim.AdamW)",
                 ("operation", "torch op", "FLOPs", "per", "counted as"), rows, align="llrll",
                 notes=(f"{compute.adamw_formula(p.config)} = {e} = {grouped(e.evaluate(v))} FLOPs per step for "
                        f"this model (N = {grouped(memory.parameter_count(p.config).evaluate(v))}, "
                        f"{grouped(memory.tensor_count(p.config).evaluate(v))} parameter tensors).",))


def time_table(p: Plan) -> Table:
    t = p.time
    if t is None:
        why = ("no peak FLOP/s (--gpu NAME or --gpu-flops TFLOPS)" if not (p.hardware and p.hardware.peak_flops)
               else "no --steps N or --tokens N")
        return Table("Time to train", notes=(f"Not computed: {why}.",))
    rows = [("steps", f"{t.steps:,}"),
            ("tokens", f"{t.tokens:,}" + (f" (the whole steps covering --tokens {t.requested_tokens:,})"
                                          if t.requested_tokens is not None else "")),
            ("FLOPs per step", f"{t.flops_per_step:,}"),
            ("total FLOPs", f"{t.total_flops:,} ({si(t.total_flops, 'FLOP')})"),
            ("peak", f"{_num(t.peak_flops / TERA)} TFLOP/s ({p.precision.compute})"),
            ("utilization (MFU)", _num(t.mfu, 4)),
            ("time per step", _seconds(t.seconds_per_step)),
            ("time", f"{round(t.seconds):,} s = {_dec(t.seconds / 3600, 2)} h = "
                     f"{_dec(t.days, 2)} days")]
    return Table("Time to train", ("", "value"), tuple(rows), align="lr",
                 notes=("time = steps × FLOPs per step / (MFU × peak); exact fraction, rounded "
                        "for display. One GPU; no data loading, communication or evaluation."
                        + (" The MFU is the one the predicted step time implies (FLOPs per step, "
                           "recomputation and optimizer included, over the step's time × peak)."
                           if p.prediction is not None else ""),))


def inference_table(p: Plan) -> Table:
    i = p.inference
    s = i.bytes_per_element
    r = i.roofline
    c = p.config
    window = c.sliding_window is not None and any(k.local for k in c.layer_kinds)
    chunked = any(k.chunked for k in c.layer_kinds)
    held = ("B·(T on global layers, min(T, W) on local ones)·" if window and not chunked else
            "B·(T on global layers, min(T, C) on chunked ones)·" if chunked and not window else
            "B·(T on global layers, min(T, W) on local, min(T, C) on chunked ones)·" if window
            else "B·T·")
    # the recurrent layers' state per sequence (conv windows; the delta rule's, in float32)
    state = (f" + B·(states: {state_elements_per_sequence(c)}, per sequence)"
             if i.state_bytes else "")
    rows = [
        ("KV cache per token", f"{s}·({kv_elements_per_token(c)})", grouped(i.kv_bytes_per_token), "bytes"),
    ]
    if i.state_bytes:
        rows.append((f"recurrent state for B = {i.batch:,} (any T)",
                     f"B·({state_elements_per_sequence(c)}) elements (the delta rule's state in "
                     f"fp32)", grouped(i.state_bytes), gigabytes(i.state_bytes)))
    rows += [
        (f"KV cache for B = {i.batch:,}, T = {i.seq:,}", f"{s}·{held}({kv_elements_per_token(c)})"
         + state, grouped(i.kv_bytes), f"{gigabytes(i.kv_bytes)} = {gibibytes(i.kv_bytes)}"),
        (f"prefill FLOPs (T = {i.seq:,})", "the forward pass's matmuls", grouped(i.prefill_flops),
         si(i.prefill_flops, "FLOP")),
        (f"decode FLOPs at position t = {i.position:,}" + (" (naive form)" if c.mla else ""),
         str(decode_flops_expr(c)), grouped(i.decode_flops), si(i.decode_flops, "FLOP")),
    ]
    if i.decode_flops_absorbed is not None:
        rows.append(("decode FLOPs, absorbed form", str(absorbed_decode_flops_expr(c)),
                     grouped(i.decode_flops_absorbed), si(i.decode_flops_absorbed, "FLOP")))
    worst = " (worst case)" if i.experts_read is not None else ""
    rows.append((f"decode: weights read{worst}", f"{s}·({weights_read_expr(c)})",
                 grouped(i.weight_bytes_read), gigabytes(i.weight_bytes_read)))
    if i.experts_read is not None:
        most, mean = i.experts_read
        rows.append(("decode: weights read, uniform routing (assumed)", f"E_read = {decimal(mean, 3)}",
                     grouped(round(i.weight_bytes_read_expected)), gigabytes(round(i.weight_bytes_read_expected))))
    rows += [
        ("decode: KV cache read", f"{s}·{held.replace('T', 't')}({kv_elements_per_token(c)})" + state,
         grouped(i.kv_bytes_read), gigabytes(i.kv_bytes_read)),
        ("arithmetic intensity", "FLOPs / bytes", decimal(r.intensity, 3), "FLOP/byte"),
    ]
    notes = [f"Inference in {s}-byte elements ({'fp32' if s == 4 else 'bf16'}). The decode formula "
             "is the forward matmul records with a query length of 1 and a key length of t "
             "(QKᵀ and scores·V grow with t" + ("; t_W = min(t, W) on a local layer" if window else "")
             + ("; t_C = min(t, C) on a chunked layer: the rolling cache it attends, masked to "
                "its own chunk" if chunked else "")
             + "); B sequences decode together. "
             "Prefill computes logits at every position, as the model does."]
    if c.mla:
        notes.append("Latent attention caches the latent and the RoPE key (d_kv_a = r_kv + d_rope "
                     "per token and layer). Naive form, as trained: kv_b_proj re-expands the t "
                     "cached latents every step. Absorbed form (DeepSeek-V2 §2.1.3): W^UK folded "
                     "into the query and W^UV into the output, attention runs over the latent "
                     "(2·h·d_nope·r_kv + 2·h·t·(r_kv + d_rope) + 2·h·t·r_kv + 2·h·r_kv·d_v per "
                     "sequence and layer). The roofline uses the naive form.")
    if i.experts_read is not None:
        most, mean = i.experts_read
        notes.append(f"A decode step reads the experts its B·k token slots touch: at worst "
                     f"min(E, B·k) = {most:,} per MoE layer (used for the roofline); if every "
                     f"token picked its k experts uniformly at random (an assumption: trained "
                     f"routers are not uniform), E·(1 − (1 − k/E)^B) = {decimal(mean, 3)} on average."
                     if c.moe_capacity_factor is None and not c.router_scales_input else
                     "Under a capacity factor every expert runs its C rows: all E are read."
                     if c.moe_capacity_factor is not None else
                     "Every expert runs every token (Llama 4's form): all E are read.")
    if r.ridge is not None:
        rows += [("ridge point (peak / bandwidth)", "", decimal(r.ridge, 3), "FLOP/byte"),
                 ("compute time (FLOPs / peak)", "", _seconds(r.compute_seconds), ""),
                 ("memory time (bytes / bandwidth)", "", _seconds(r.memory_seconds), ""),
                 ("decode step (roofline)", r.bound + "-bound", _seconds(r.seconds),
                  f"{_dec(Fraction(i.batch) / r.seconds, 1)} tokens/s")]
        notes.append("Roofline: a decode step takes at least max(FLOPs / peak, bytes / bandwidth) "
                     "at the datasheet peaks (no utilization factor); bytes = the weights (one "
                     "embedding row per sequence) and the KV cache up to t. Activations and "
                     "writes are not counted.")
    else:
        notes.append("Roofline needs both a peak and a bandwidth (--gpu NAME, or --gpu-flops and --gpu-bw).")
    return Table(f"Inference with a KV cache (B = {i.batch:,})", ("", "formula", "value", ""),
                 tuple(rows), align="llrl", notes=tuple(notes))


def tables(p: Plan) -> list[Table]:
    step = []
    if p.prediction is not None:  # issue 39: the step timed op by op
        from accounting.timing.views import step_table
        step = [step_table(p.prediction)]
    return [settings_table(p), memory_table(p), peak_table(p), activation_table(p), fit_table(p),
            flops_table(p), adamw_table(p), *step, time_table(p), inference_table(p)]
