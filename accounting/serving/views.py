"""A ServePlan as tables (text/Markdown), a JSON-able dict and CSV rows. Formatting only:
every number is one the plan holds."""
from __future__ import annotations

from fractions import Fraction

from accounting.present.export import config_dict
from accounting.tables.data import csv_text, fraction
from accounting.tables.table import Table
from accounting.serving.engines import DEFAULT_VERSION
from accounting.serving import tower_views
from accounting.serving.plan import ServePlan
from accounting.units import GB, GiB, decimal, grouped

LABEL = 16


def _line(label: str, text: str) -> str:
    return f"{label + ':':<{LABEL}} {text}"


def _gb(n: int | Fraction) -> str:
    return f"{decimal(Fraction(n, GB), 2)} GB ({decimal(Fraction(n, GiB), 2)} GiB)"


def _ms(s: Fraction) -> str:
    return f"{decimal(s * 1000, 2)} ms"


def _plain(x: Fraction) -> str:
    return decimal(Fraction(x), 4).rstrip("0").rstrip(".")


def _span(lo: int, hi: int) -> str:
    """bytes as GB (GiB), a range where the ends differ"""
    if lo == hi:
        return _gb(hi)
    return (f"{decimal(Fraction(lo, GB), 2)}–{decimal(Fraction(hi, GB), 2)} GB "
            f"({decimal(Fraction(lo, GiB), 2)}–{decimal(Fraction(hi, GiB), 2)} GiB)")


def _count(lo: int, hi: int) -> str:
    return grouped(lo) if lo == hi else f"{grouped(lo)}–{grouped(hi)}"


def answer(p: ServePlan) -> Table:
    b = p.binding
    conc = p.concurrency
    lines = []
    pool = _span(max(b.pool_bytes, 0), max(p.kv_pool_bytes_per_gpu_high, 0))
    if p.fits and p.cacheless:
        lines.append(_line("fits", f"yes: no layer keeps a KV cache or a recurrent state "
                                   f"(MLP-only blocks), so the pool bounds no sequence count: "
                                   f"up to {grouped(p.max_concurrency)} sequences at once "
                                   f"({p.record.max_seqs_flag if p.record else 'max_running_requests'}"
                                   f"), any context length"))
    elif p.fits and conc is None:
        lines.append(_line("fits", f"yes: up to {_count(p.max_concurrency, p.max_concurrency_high)}"
                                   f" sequences of {grouped(p.ctx)} tokens in a {pool} KV pool "
                                   f"per GPU"))
    elif p.fits:
        lines.append(_line("fits", f"yes: {grouped(conc)} × {grouped(p.ctx)} tokens in a "
                                   f"{pool} KV pool per GPU (at most "
                                   f"{_count(p.max_concurrency, p.max_concurrency_high)} "
                                   f"sequences)"))
    elif b.pool_bytes <= 0:
        lines.append(_line("fits", f"NO: the weights and the engine's reserves exceed "
                                   f"{p.utilization and _plain(p.utilization)} of the memory "
                                   f"by {_gb(p.shortfall_bytes)} per GPU"
                                   + _maybe(p)))
    else:
        lines.append(_line("fits", f"NO: {grouped(conc or 1)} × {grouped(p.ctx)} tokens need "
                                   f"{_gb(p.shortfall_bytes)} more KV pool per GPU "
                                   f"(at most {grouped(p.max_concurrency)} sequences)"
                                   + _maybe(p)))
    loaded = _span(p.weights_bytes_per_gpu_low, p.weights_bytes_per_gpu)
    stored = p.weights_stored_bytes_per_gpu
    same = p.weights_bytes_per_gpu_low == p.weights_bytes_per_gpu == stored
    lines.append(_line("weights/GPU", (f"{loaded} as loaded and as stored" if same else
                                       f"{loaded} as loaded{_paths(p)}; {_gb(stored)} as "
                                       f"stored") + f": {p.scheme.label}"))
    tower = tower_views.line(p)  # issue 41: a vision-language model's tower
    if tower is not None:
        lines.append(_line("vision tower", tower))
    lines.append(_line("KV/token/GPU", f"{grouped(p.kv_bytes_per_token_per_gpu)} bytes "
                                       f"({p.kv_dtype}; every layer of a stage)"))
    if p.state_bytes_per_sequence_per_gpu:
        lines.append(_line("state/seq/GPU", f"{grouped(p.state_bytes_per_sequence_per_gpu)} "
                                            f"bytes (the recurrent layers' conv windows and "
                                            f"states, whatever the length; in the pool)"))
    lines.append(_line("KV pool/GPU", f"{pool}: {_count(b.tokens, p.kv_pool_tokens_high)} tokens"
                                      f" in blocks of {p.defaults.block_size}"))
    lines.append(_line("max concurrency", f"{_count(p.max_concurrency, p.max_concurrency_high)}"
                                          f" sequences of {grouped(p.ctx)} tokens"))
    if p.longest_context is not None:
        beyond = (f" (past the model's {grouped(p.config.context_length)}-token context)"
                  if p.longest_context > p.config.context_length else "")
        lines.append(_line("longest context", f"{grouped(p.longest_context)} tokens at "
                                              f"concurrency {grouped(conc or 1)}{beyond}"))
    t = p.time
    if t is not None:
        were = "" if b.pool_bytes > 0 else " were it to fit"
        seqs = f"{grouped(t.batch)} sequence{'s' if t.batch != 1 else ''}"
        if t.kernels is not None:  # issue 39: op by op from the engine's measured kernels
            # "roofline": no table for this GPU (or the package absent), timing/ops.py's
            # roofline fallback; it was labelled "roofline: vllm's measured tables"
            where = (f"{p.engine}'s measured tables" if t.timing_source == "kernels"
                     else "no measured tables for this GPU")
            lines.append(_line("TTFT", f"{_ms(t.ttft_seconds)} for a {grouped(t.prompt)}-token "
                                       f"prompt ({t.timing_source}: {where}, chunks of "
                                       f"{grouped(p.max_num_batched_tokens)}){were}"))
            lines.append(_line("TPOT", f"{_ms(t.tpot_seconds)} per step of {seqs} at t = "
                                       f"{grouped(t.position)} ({t.timing_source}){were}"))
        else:
            lines.append(_line("TTFT", f"{_ms(t.ttft_seconds)} for a {grouped(t.prompt)}-token "
                                       f"prompt (compute-bound at MFU {_plain(t.mfu)}){were}"))
            lines.append(_line("TPOT", f"{_ms(t.tpot_seconds)} per step of {seqs} at t = "
                                       f"{grouped(t.position)} ({t.bound}-bound, bandwidth "
                                       f"efficiency {_plain(t.bandwidth_efficiency)}){were}"))
        lines.append(_line("throughput", f"{decimal(t.tokens_per_second_per_gpu, 1)} tokens/s "
                                         f"per GPU ({grouped(p.gpus)} GPU{'s' if p.gpus > 1 else ''}, one batch in "
                                         f"flight; CUDA-graph regime)"))
    lines.append(_line("engine", _engine(p) + ": " + _pool_rule(p)))
    title = (f"Answer: serve {p.config.name} on {grouped(p.gpus)} × {p.gpu} (TP {p.tp}, PP "
             f"{p.pp}), {p.engine} {p.engine_version}, KV {p.kv_dtype}, ctx {grouped(p.ctx)}")
    return Table(title, notes=tuple(lines) + p.notes)


def _maybe(p: ServePlan) -> str:
    if not p.may_fit:
        return ""
    n = p.max_concurrency_high
    return (f"; at the optimistic end of the ranges it would hold {grouped(n)} "
            f"sequence{'s' if n != 1 else ''}, so it may fit, not surely")


def _paths(p: ServePlan) -> str:
    paths = p.binding.weights.paths
    return f" ({', '.join(paths)} kernel path{'s' if len(paths) > 1 else ''})" if paths else ""


def _engine(p: ServePlan) -> str:
    r = p.record
    default = DEFAULT_VERSION.get(r.engine) == r.version
    return (f"{r.engine} {r.version} ({r.releases}"
            + ("; the default, --engine-version V for another" if default else "") + ")")


def _pool_rule(p: ServePlan) -> str:
    nt, cg = p.non_torch, p.cuda_graphs
    if p.record.profiled:
        graphs = (f" − CUDA graphs {_gib(cg.low, cg.high)}" if p.record.graphs_in_pool else
                  f"; CUDA graphs {_gib(cg.low, cg.high)} outside the pool")
        return (f"pool = {_plain(p.utilization)} × {_gib(p.memory_bytes, p.memory_bytes)} − "
                f"weights − activation peak at {grouped(p.max_num_batched_tokens)} tokens and "
                f"{grouped(min(p.max_num_seqs, p.max_num_batched_tokens))} sampled rows − "
                f"outside torch {_gib(nt.low, nt.high)}{graphs}")
    return (f"pool = {_plain(p.utilization)} × (memory {_gib(p.memory_bytes, p.memory_bytes)} − "
            f"before start {_gib(nt.low, nt.high)}) − weights (mem_fraction_static; activations "
            f"and CUDA graphs in the reserve)")


def _gib(lo: int, hi: int) -> str:
    f = (lambda n: decimal(Fraction(n, GiB), 2))
    return f"{f(hi)} GiB" if lo == hi else f"{f(lo)}–{f(hi)} GiB"


def tables(p: ServePlan) -> list[Table]:
    rows = []
    for s in p.stages:
        st = s.stage
        rows.append((str(st.index), f"{st.layers[0]}–{st.layers[-1]}" if st.layers else "-",
                     grouped(s.weights.high), grouped(s.activation_bytes), grouped(s.pool_bytes),
                     grouped(s.kv_bytes_per_token), grouped(s.blocks), grouped(s.tokens)))
    tower = ((f"vision tower ({p.tower.family}, {p.tower.weights_why})",
              grouped(p.tower.weights_bytes)),) if p.tower is not None else ()
    out = [Table("Per GPU, by pipeline stage (bytes)",
                 ("stage", "layers", "weights as loaded", "activation peak", "KV pool",
                  "KV bytes/token", "blocks", "tokens"), tuple(rows),
                 notes=(p.defaults.why, "the pessimistic end of every range (the pool, "
                        "blocks and tokens the verdict uses)"))]
    parts = p.binding.stage.by_part
    out.append(Table(f"Weights per GPU as stored (stage {p.binding.stage.index}; as loaded: "
                     f"{p.binding.weights.rule})",
                     ("tensors", "bytes"), tuple((k, grouped(v)) for k, v in parts) + tower,
                     notes=(f"scheme: {p.scheme.label}",) + ((f"unquantized by the checkpoint: "
                                                             f"{', '.join(p.scheme.ignore)}",)
                                                            if p.scheme.ignore else ())))
    t = p.time
    if t is not None:
        out.append(Table("Time", ("quantity", "value"), (
            ("prefill FLOPs (causal, last-position logits)", grouped(t.prefill_flops)),
            ("decode FLOPs per step", grouped(t.decode_flops)),
            ("weights read per step per GPU (bytes)", grouped(round(t.weight_bytes_read))),
            ("KV read per step per GPU (bytes)", grouped(t.kv_bytes_read)),
            ("TPOT memory bound", _ms(t.tpot_memory_seconds)),
            ("TPOT compute bound", _ms(t.tpot_compute_seconds))),
            notes=("decode assumes an engine with CUDA graphs; eager decode is launch-bound "
                   "(docs/serving.md)",)))
    return out


def _num(x) -> dict | int | None:
    if x is None:
        return None
    return x if isinstance(x, int) else fraction(Fraction(x))


def to_dict(p: ServePlan) -> dict:
    t = p.time
    b = p.binding
    return {
        "fits": p.fits,
        "weights_bytes_per_gpu": p.weights_bytes_per_gpu,
        "weights_bytes_per_gpu_range": [p.weights_bytes_per_gpu_low, p.weights_bytes_per_gpu],
        "weights_stored_bytes_per_gpu": p.weights_stored_bytes_per_gpu,
        "engine_version": p.engine_version,
        "usable_memory_bytes": p.memory_bytes,
        "cuda_graph_bytes_per_gpu": p.cuda_graph_bytes,
        "cuda_graph_bytes_per_gpu_range": [p.cuda_graphs.low, p.cuda_graphs.high],
        "kv_bytes_per_token_per_gpu": p.kv_bytes_per_token_per_gpu,
        "state_bytes_per_sequence_per_gpu": p.state_bytes_per_sequence_per_gpu,
        "kv_pool_bytes_per_gpu": b.pool_bytes,
        "kv_pool_bytes_per_gpu_range": [b.pool_bytes, p.kv_pool_bytes_per_gpu_high],
        "max_concurrency": p.max_concurrency,
        "max_concurrency_range": [p.max_concurrency, p.max_concurrency_high],
        "may_fit": p.may_fit,
        "ttft_seconds": None if t is None else _num(t.ttft_seconds),
        "tpot_seconds": None if t is None else _num(t.tpot_seconds),
        "timing_source": None if t is None else t.timing_source,
        "shortfall_bytes_per_gpu": p.shortfall_bytes,
        "longest_context": p.longest_context,
        "kv_pool_tokens": b.tokens,
        "kv_pool_tokens_range": [b.tokens, p.kv_pool_tokens_high],
        "throughput_tokens_per_second_per_gpu": None if t is None
        else _num(t.tokens_per_second_per_gpu),
        "config": config_dict(p.config),
        "vision": tower_views.as_dict(p),
        "assumptions": {
            "engine": p.engine, "engine_version": p.engine_version,
            "engine_releases": p.record.releases, "engine_source": p.record.source,
            "engine_defaults": p.defaults.why,
            "gpu": p.gpu, "memory_bytes": p.memory_bytes, "tp": p.tp, "pp": p.pp,
            "kv_dtype": p.kv_dtype, "ctx": p.ctx, "concurrency": p.concurrency,
            "weights": p.scheme.name, "weights_label": p.scheme.label,
            "ignored_modules": list(p.scheme.ignore),
            "gpu_memory_utilization": _num(p.utilization),
            "max_num_batched_tokens": p.max_num_batched_tokens,
            "block_size": p.defaults.block_size, "non_torch_bytes": p.non_torch_bytes,
            "non_torch_bytes_range": [p.non_torch.low, p.non_torch.high],
            "non_torch_terms": p.non_torch.why,
            "cuda_graph_bytes": p.cuda_graph_bytes, "cuda_graph_terms": p.cuda_graphs.why,
            "cuda_graphs_in_pool": p.record.graphs_in_pool,
            "max_num_seqs": p.max_num_seqs, "weights_as_loaded": p.binding.weights.rule,
            # the roofline's figure; None when the times come from measured kernels
            "mfu": None if t is None or t.kernels is not None else _num(t.mfu),
            "bandwidth_efficiency": None if t is None else _num(t.bandwidth_efficiency),
            "regime": "CUDA graphs (vLLM/SGLang); eager decode is launch-bound",
        },
        "stages": [{"stage": s.stage.index, "layers": list(s.stage.layers),
                    "weights_bytes": s.weights.high, "weights_stored_bytes": s.stage.bytes,
                    "weights_by_tensor": dict(s.stage.by_part),
                    "activation_peak_bytes": s.activation_bytes, "kv_pool_bytes": s.pool_bytes,
                    "kv_bytes_per_token": s.kv_bytes_per_token, "blocks": s.blocks,
                    "tokens": s.tokens} for s in p.stages],
        "time": None if t is None else {
            "prompt": t.prompt, "position": t.position, "batch": t.batch,
            "prefill_flops": t.prefill_flops, "decode_flops": t.decode_flops,
            "weight_bytes_read_per_gpu": _num(t.weight_bytes_read),
            "kv_bytes_read_per_gpu": t.kv_bytes_read,
            "tpot_memory_seconds": _num(t.tpot_memory_seconds),
            "tpot_compute_seconds": _num(t.tpot_compute_seconds), "bound": t.bound,
            "peak_flops_per_s": _num(t.peak_flops), "bandwidth_bytes_per_s": _num(t.bandwidth)},
        "notes": list(p.notes),
    }


CSV_COLUMNS = ("item", "value")


def to_csv(p: ServePlan) -> str:
    d = to_dict(p)
    rows = [{"item": k, "value": (v["approx"] if isinstance(v, dict) else v)}
            for k, v in d.items() if not isinstance(v, (list,)) and k not in ("config",
                                                                            "assumptions",
                                                                            "time")]
    return csv_text(rows, CSV_COLUMNS)
