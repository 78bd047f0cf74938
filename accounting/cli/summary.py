"""The answer first: a few lines that open every command's human-readable output.

    analysis: total FLOPs, the largest component and its share, parameters, the memory to
              load them, and the cross-check's verdict once it is known (its line comes
              last, so the lines before it can be printed while the cross-check runs);
    plan:     fits or not, the largest batch, the step's peak, FLOPs per step, time to train.

Formatting only: every number is one the Analysis or the Plan already holds (the share is
views.component_percents, the component table's own, so the two always print the same).
"""
from __future__ import annotations

from fractions import Fraction

from accounting.ledger import records as R
from accounting.analysis.mtp import mtp
from accounting.analysis.workload import Analysis
from accounting.architecture.presets import note
from accounting.tables.table import Table
from accounting.planning.optimizers import DEFAULT_OPTIMIZER
from accounting.units import GB, GIGA, MEGA, TERA, GiB, decimal, gigabytes, grouped, si
from accounting.present.views import component_percents, percent_of

LABEL = 14  # width of the answer lines' labels


def _line(label: str, text: str) -> str:
    return f"{label + ':':<{LABEL}} {text}"


def _count(n: int) -> str:
    """2,127,057,600 -> '2,127,057,600 (2.13 billion)'."""
    words = _words(n)
    return grouped(n) + (f" ({words})" if words else "")


def _words(n: int) -> str:
    """419,430,400,000 -> '419.43 billion'; '' below a million."""
    for scale, word in ((TERA, "trillion"), (GIGA, "billion"), (MEGA, "million")):
        if n >= scale:
            return f"{_thousands(decimal(Fraction(n, scale), 2))} {word}"
    return ""


def _thousands(s: str) -> str:
    """'17212.70' -> '17,212.70' (a decimal() string with separators)."""
    whole, _, frac = s.partition(".")
    return f"{int(whole):,}" + (f".{frac}" if frac else "")


def _gb(n: int) -> str:
    return f"{_thousands(decimal(Fraction(n, GB), 2))} GB"


def plural(n: int, word: str) -> str:
    return f"{grouped(n)} {word}{'' if n == 1 else 's'}"


# ---- the analysis ---------------------------------------------------------------------------
def analysis_lines(a: Analysis) -> list[str]:
    mm = a.matmul_flops()
    if a.phase == R.FORWARD:
        ew = a.elementwise_flops
        flops = _line("FLOPs", f"{grouped(mm + ew)} = {si(mm + ew, 'FLOPs')} (forward pass; "
                               f"non-matmul ops {percent_of(ew, mm + ew)})")
    else:
        flops = _line("matmul FLOPs", f"{grouped(mm)} = {si(mm, 'FLOPs')} ({a.phase} pass; "
                                      "non-matmul ops: forward pass only)")
    shares = a.component_shares(a.counting)
    top = max(shares, key=lambda c: shares[c])  # the first of equal ones
    memory = a.param_memory_bytes()
    return [
        flops,
        _line("largest", f"{top}, {component_percents(a, a.counting)[top]} of the matmul FLOPs "
                         f"({a.counting} attention count)"),
        _line("parameters", _count(a.param_count) + _active(a)),
        *_mtp(a),
        _line("load memory", f"{gigabytes(memory['fp32'])} in fp32, {gigabytes(memory['bf16'])} "
                             "in bf16 (GB = 10^9 bytes)"),
    ]


def _mtp(a: Analysis) -> list[str]:
    """The multi-token-prediction modules (accounting/analysis/mtp.py): beside the total."""
    m = mtp(a.config)
    if m is None:
        return []
    return [_line("MTP modules", f"{plural(m.modules, 'module')} of {grouped(m.params_each)} "
                                 f"more, not in the total (transformers' causal LM does not "
                                 f"build them): {_count(a.param_count + m.params)} with them; "
                                 f"trained (in the plan's FLOPs/step), not run at inference")]


def _active(a: Analysis) -> str:
    """A mixture of experts: the parameters one token runs through (analysis.py)."""
    if a.config.num_experts is None:
        return ""
    return f"; {_count(a.active_param_count)} active per token"


def analysis_title(a: Analysis) -> str:
    return f"Answer: {a.config.name} ({note(a.config)}), T = {grouped(a.seq)}, B = {grouped(a.batch)}"


def verdict_line(result=None, skipped: str | None = None) -> str:
    """The cross-check's line: its verdict, or why it did not run."""
    if result is None:
        return _line("cross-check", skipped or "not run")
    if result.agrees:
        counters = ("fvcore, FlopCounterMode and transformers' own model" if result.hf is not None
                    else "fvcore and FlopCounterMode run on the model")
        if getattr(result, "vision", None) is not None and not result.vision.skipped:
            counters += " (the whole model with the images, tower and projector included)"
        return _line("cross-check", f"agrees exactly with {counters} (tables at the end)")
    from accounting.crosscheck import views as crosscheck_views  # a result: torch is loaded
    return _line("cross-check", f"DISAGREES: {crosscheck_views.summary(result)} (tables at the end)")


def analysis_answer(a: Analysis, verdict: str | None = None) -> Table:
    """The answer block; `verdict` (verdict_line) is its last line when known."""
    lines = analysis_lines(a) + ([verdict] if verdict else [])
    return Table(analysis_title(a), notes=tuple(lines))


# ---- the plan -------------------------------------------------------------------------------
def _bytes(n: int) -> str:
    return f"{_gb(n)} = {_thousands(decimal(Fraction(n, GiB), 2))} GiB"


def plan_answer(p) -> Table:
    """Fits or not, the largest batch, the step's peak, FLOPs per step, time to train."""
    from accounting.planning.memory import MODEL
    model = p.memory.model
    need = model.fit_bytes(p.batch, p.seq)
    lines = []
    bf = p.batch_fit
    where = p.hardware.name if p.hardware else "the GPU"
    if bf is None:
        lines.append(_line("fits", "no GPU memory given (--gpu NAME or --gpu-mem SIZE)"))
    else:
        usable = bf.budget.usable
        verdict = "yes" if need <= usable else "NO"
        lines.append(_line("fits", f"{verdict}: batch {grouped(p.batch)} needs {_gb(need)}; "
                                   f"{_gb(usable)} usable on {where}"))
        if bf.fits:
            lines.append(_line("largest batch", f"{plural(bf.largest, 'sequence')} of "
                                                f"{grouped(p.seq)} tokens "
                                                f"({_gb(bf.bytes_at_largest)})"))
        else:
            lines.append(_line("largest batch", f"none: one sequence of {grouped(p.seq)} tokens "
                                                f"is {_gb(bf.shortfall)} short"))
    if model.scope == MODEL:
        recompute = "no recomputation" if p.recompute == "none" else f"{p.recompute} recomputation"
        from accounting.planning.reserved import one_gpu
        reserved, moment = one_gpu(model, p.batch, p.seq, capacity=(
            p.hardware.memory_bytes if p.hardware is not None else None))
        lines.append(_line("step's peak", f"{_bytes(need)} allocated at batch {grouped(p.batch)} "
                                          f"({p.precision.name}, {recompute}), at the {moment}; "
                                          f"reserved at least {_gb(reserved)} (the caching "
                                          "allocator's blocks; the verdict is the allocated)"))
    else:
        lines.append(_line("memory", f"{_bytes(need)} at batch {grouped(p.batch)} (the course's "
                                     "sum of memory items)"))
    recipe = getattr(p, "recipe", None)
    if recipe is not None:  # what is planned, named (accounting/planning/recipes.py)
        lines.append(_line("recipe", f"{recipe.implementation} implementation, "
                                     f"{recipe.precision}, {recipe.kernel} attention, "
                                     f"recomputation {recipe.recompute}, optimizer "
                                     f"{recipe.optimizer}" + _recipe_flags(p)
                                     + (f" ({recipe.note})" if recipe.note else "")))
    mtp_flops = p.flops.mtp + p.flops.mtp_adamw
    lines.append(_line("FLOPs/step", f"{grouped(p.flops.total)} = {si(p.flops.total, 'FLOPs')}"
                       + (f" (the MTP modules' {si(mtp_flops, 'FLOPs')} included, and their "
                          f"weights, gradients, optimizer state and activations in the "
                          f"memory above)" if mtp_flops else "")))
    ft = getattr(p, "finetune", None)
    if ft is not None:  # issue 28: LoRA / QLoRA
        base = (f"NF4 ({'with' if ft.double_quant else 'without'} double quantization, "
                f"bitsandbytes) with bf16 compute" if ft.qlora else ft.base_dtype) \
            + (", the rest in fp32 (PEFT's prepare_model_for_kbit_training)"
               if ft.kbit_upcast else "")
        names = ",".join(dict.fromkeys(t.name for t in ft.targets))
        lines.append(_line("fine-tuning", f"{'QLoRA' if ft.qlora else 'LoRA'} r = {ft.lora.rank} "
                                          f"on {names}: {grouped(ft.adapter_count())} trainable "
                                          f"parameters ({ft.adapters.adapter_dtype}, "
                                          f"{p.recipe.optimizer if p.recipe else DEFAULT_OPTIMIZER}"
                                          f") of "
                                          f"{grouped(p.memory.parameters)}, the base frozen in {base}"))
    if p.prediction is not None:  # issue 39: predicted, op by op
        from accounting.timing.views import answer_line
        lines.append(_line("step time", answer_line(p.prediction)))
    t = p.time
    if t is not None:
        tokens = _words(t.tokens) or grouped(t.tokens)
        # batch B does not fit: no step runs, so the time is what it would be (issue 32)
        unfit = (f"; if it fitted, which batch {grouped(p.batch)} does not on {where}"
                 if bf is not None and need > bf.budget.usable else "")
        rate = (f"at the predicted step time" if p.prediction is not None else
                f"at MFU {_plain(t.mfu)} of {_plain(t.peak_flops / TERA)} TFLOP/s")
        lines.append(_line("time to train", f"{_days(t.seconds)} for {plural(t.steps, 'step')} "
                                            f"({tokens} tokens) {rate}" + unfit))
    else:
        why = ("no peak FLOP/s (--gpu NAME or --gpu-flops)"
               if not (p.hardware and p.hardware.peak_flops) else "give --steps N or --tokens N")
        lines.append(_line("time to train", f"not computed: {why}"))
    title = (f"Answer: plan for {p.config.name}, T = {grouped(p.seq)}, B = {grouped(p.batch)}, "
             f"{p.precision.name}" + (f", {p.hardware.name}" if p.hardware else ""))
    return Table(title, notes=tuple(lines))


def _plain(x: Fraction) -> str:
    """0.5 -> '0.5', 989 -> '989'; tiny or huge -> '1e-30' (three significant digits)."""
    if Fraction(1, 1000) <= x < 10**15:
        return decimal(x, 4).rstrip("0").rstrip(".")
    return f"{float(x):.3g}"


def _days(seconds: Fraction) -> str:
    if seconds >= 86400:
        return f"{_thousands(decimal(seconds / 86400, 2))} days"
    if seconds >= 3600:
        return f"{decimal(seconds / 3600, 2)} hours"
    return f"{decimal(seconds, 3)} seconds"


def _recipe_flags(p) -> str:
    """The issue-44 recipe flags, named where given (--loss, --offload activations,
    --compile)."""
    m = p.memory.model
    out = "" if m.loss == "standard" else f", loss {m.loss}" + (
        f" ({m.loss_chunks} chunks)" if m.loss == "chunked" else "")
    return out + (", activations offloaded to the CPU" if m.offload_activations else "") \
        + (", blocks under torch.compile" if m.compile else "") \
        + (" (the loss eager: --compile-components model)"
           if m.compile and not m.compile_loss and m.loss == "chunked" else "")
