"""A ServePlan as tables (text/Markdown), a JSON-able dict and CSV rows. Formatting only:
every number is one the plan holds."""
from __future__ import annotations

from fractions import Fraction

from accounting.present.export import config_dict, csv_text, fraction
from accounting.present.table import Table
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


def answer(p: ServePlan) -> Table:
    b = p.binding
    conc = p.concurrency
    lines = []
    if p.fits and p.cacheless:
        lines.append(_line("fits", f"yes: no layer keeps a KV cache or a recurrent state "
                                   f"(MLP-only blocks), so the pool bounds no sequence count: "
                                   f"up to {grouped(p.max_concurrency)} sequences at once "
                                   f"({'max_num_seqs' if p.engine == 'vllm' else 'max_running_requests'}"
                                   f"), any context length"))
    elif p.fits and conc is None:
        lines.append(_line("fits", f"yes: up to {grouped(p.max_concurrency)} sequences of "
                                   f"{grouped(p.ctx)} tokens in a {_gb(b.pool_bytes)} KV pool "
                                   f"per GPU"))
    elif p.fits:
        lines.append(_line("fits", f"yes: {grouped(conc)} × {grouped(p.ctx)} tokens in a "
                                   f"{_gb(b.pool_bytes)} KV pool per GPU (at most "
                                   f"{grouped(p.max_concurrency)} sequences)"))
    elif b.pool_bytes <= 0:
        lines.append(_line("fits", f"NO: the weights and the engine's reserves exceed "
                                   f"{p.utilization and _plain(p.utilization)} of the memory "
                                   f"by {_gb(p.shortfall_bytes)} per GPU"))
    else:
        lines.append(_line("fits", f"NO: {grouped(conc or 1)} × {grouped(p.ctx)} tokens need "
                                   f"{_gb(p.shortfall_bytes)} more KV pool per GPU "
                                   f"(at most {grouped(p.max_concurrency)} sequences)"))
    lines.append(_line("weights/GPU", f"{_gb(p.weights_bytes_per_gpu)}: {p.scheme.label}"))
    lines.append(_line("KV/token/GPU", f"{grouped(p.kv_bytes_per_token_per_gpu)} bytes "
                                       f"({p.kv_dtype}; every layer of a stage)"))
    if p.state_bytes_per_sequence_per_gpu:
        lines.append(_line("state/seq/GPU", f"{grouped(p.state_bytes_per_sequence_per_gpu)} "
                                            f"bytes (the recurrent layers' conv windows and "
                                            f"states, whatever the length; in the pool)"))
    lines.append(_line("KV pool/GPU", f"{_gb(max(b.pool_bytes, 0))}: {grouped(b.tokens)} tokens"
                                      f" in blocks of {p.defaults.block_size}"))
    lines.append(_line("max concurrency", f"{grouped(p.max_concurrency)} sequences of "
                                          f"{grouped(p.ctx)} tokens"))
    if p.longest_context is not None:
        beyond = (f" (past the model's {grouped(p.config.context_length)}-token context)"
                  if p.longest_context > p.config.context_length else "")
        lines.append(_line("longest context", f"{grouped(p.longest_context)} tokens at "
                                              f"concurrency {grouped(conc or 1)}{beyond}"))
    t = p.time
    if t is not None:
        were = "" if b.pool_bytes > 0 else " were it to fit"
        lines.append(_line("TTFT", f"{_ms(t.ttft_seconds)} for a {grouped(t.prompt)}-token "
                                   f"prompt (compute-bound at MFU {_plain(t.mfu)}){were}"))
        seqs = f"{grouped(t.batch)} sequence{'s' if t.batch != 1 else ''}"
        lines.append(_line("TPOT", f"{_ms(t.tpot_seconds)} per step of {seqs} at t = "
                                   f"{grouped(t.position)} ({t.bound}-bound, bandwidth "
                                   f"efficiency {_plain(t.bandwidth_efficiency)}){were}"))
        lines.append(_line("throughput", f"{decimal(t.tokens_per_second_per_gpu, 1)} tokens/s "
                                         f"per GPU ({grouped(p.gpus)} GPU{'s' if p.gpus > 1 else ''}, one batch in "
                                         f"flight; CUDA-graph regime)"))
    lines.append(_line("engine", f"{p.engine}: " + _pool_rule(p)))
    title = (f"Answer: serve {p.config.name} on {grouped(p.gpus)} × {p.gpu} (TP {p.tp}, PP "
             f"{p.pp}), {p.engine}, KV {p.kv_dtype}, ctx {grouped(p.ctx)}")
    return Table(title, notes=tuple(lines) + p.notes)


def _pool_rule(p: ServePlan) -> str:
    if p.engine == "vllm":
        return (f"pool = {_plain(p.utilization)} × memory − weights − activation peak at "
                f"{grouped(p.max_num_batched_tokens)} tokens − non-torch "
                f"{decimal(Fraction(p.non_torch_bytes, GiB), 2)} GiB (assumed) − CUDA graphs "
                f"{decimal(Fraction(p.cuda_graph_bytes, GiB), 2)} GiB (older vLLM: outside "
                f"the pool)")
    return (f"pool = {_plain(p.utilization)} × (memory − non-torch "
            f"{decimal(Fraction(p.non_torch_bytes, GiB), 2)} GiB, assumed) − weights "
            f"(mem_fraction_static; activations and CUDA graphs in the reserve)")


def tables(p: ServePlan) -> list[Table]:
    rows = []
    for s in p.stages:
        st = s.stage
        rows.append((str(st.index), f"{st.layers[0]}–{st.layers[-1]}" if st.layers else "-",
                     grouped(st.bytes), grouped(s.activation_bytes), grouped(s.pool_bytes),
                     grouped(s.kv_bytes_per_token), grouped(s.blocks), grouped(s.tokens)))
    out = [Table("Per GPU, by pipeline stage (bytes)",
                 ("stage", "layers", "weights", "activation peak", "KV pool",
                  "KV bytes/token", "blocks", "tokens"), tuple(rows),
                 notes=(p.defaults.why,))]
    parts = p.binding.stage.by_part
    out.append(Table(f"Weights per GPU as stored (stage {p.binding.stage.index})",
                     ("tensors", "bytes"), tuple((k, grouped(v)) for k, v in parts),
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
        "kv_bytes_per_token_per_gpu": p.kv_bytes_per_token_per_gpu,
        "state_bytes_per_sequence_per_gpu": p.state_bytes_per_sequence_per_gpu,
        "kv_pool_bytes_per_gpu": b.pool_bytes,
        "max_concurrency": p.max_concurrency,
        "ttft_seconds": None if t is None else _num(t.ttft_seconds),
        "tpot_seconds": None if t is None else _num(t.tpot_seconds),
        "shortfall_bytes_per_gpu": p.shortfall_bytes,
        "longest_context": p.longest_context,
        "kv_pool_tokens": b.tokens,
        "throughput_tokens_per_second_per_gpu": None if t is None
        else _num(t.tokens_per_second_per_gpu),
        "config": config_dict(p.config),
        "assumptions": {
            "engine": p.engine, "engine_defaults": p.defaults.why,
            "gpu": p.gpu, "memory_bytes": p.memory_bytes, "tp": p.tp, "pp": p.pp,
            "kv_dtype": p.kv_dtype, "ctx": p.ctx, "concurrency": p.concurrency,
            "weights": p.scheme.name, "weights_label": p.scheme.label,
            "ignored_modules": list(p.scheme.ignore),
            "gpu_memory_utilization": _num(p.utilization),
            "max_num_batched_tokens": p.max_num_batched_tokens,
            "block_size": p.defaults.block_size, "non_torch_bytes": p.non_torch_bytes,
            "cuda_graph_bytes": p.cuda_graph_bytes,
            "mfu": None if t is None else _num(t.mfu),
            "bandwidth_efficiency": None if t is None else _num(t.bandwidth_efficiency),
            "regime": "CUDA graphs (vLLM/SGLang); eager decode is launch-bound",
        },
        "stages": [{"stage": s.stage.index, "layers": list(s.stage.layers),
                    "weights_bytes": s.stage.bytes, "weights_by_tensor": dict(s.stage.by_part),
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
