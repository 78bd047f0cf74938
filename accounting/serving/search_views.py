"""A SearchResult as tables, a JSON-able dict, CSV rows and a frontier plot. Formatting only:
every number is one the result holds (serving/search.py)."""
from __future__ import annotations

from fractions import Fraction

from accounting.tables.data import csv_text, fraction
from accounting.tables.table import Table
from accounting.serving import engines, launch
from accounting.units import decimal, grouped

SHOWN = 10  # ranked layouts in the text table (JSON holds them all)


def _ms(s: Fraction) -> str:
    return f"{decimal(s * 1000, 1)} ms"


def _tok(x: Fraction) -> str:
    return decimal(x, 1)


def _par(wk) -> str:
    if wk.dp > 1:
        return f"DP{wk.dp} TP{wk.tp} EP{wk.dp * wk.tp}"
    return f"TP{wk.tp}{f' PP{wk.pp}' if wk.pp > 1 else ''}"


def describe(lay) -> str:
    d = lay.decode
    if not lay.disaggregated:
        return f"{lay.replicas} × [{_par(d)}, batch {d.batch}]"
    p = lay.prefill
    pre = f"{lay.prefill_workers} prefill {_par(p)}"
    dec = f"{lay.decode_workers} decode {_par(d)} batch {d.batch}"
    return f"{lay.replicas} × [{pre} + {dec}]"


def _formats(lay) -> str:
    d = lay.decode
    spec = "" if d.spec is None else f", {d.spec.method} k={d.spec.tokens}"
    return f"w {d.weights}{' (online)' if d.online_fp8 else ''}, kv {d.kv_dtype}{spec}"


def _lengths(d, n: int) -> str:
    return grouped(n) if d is None else f"{d.spec} (mean {decimal(d.mean, 1)})"


def _p(w) -> str:
    return f"p{decimal(w.percentile * 100, 1).removesuffix('.0')}"


def _stat(w) -> str:
    return "" if w.percentile is None else f" {_p(w)}"


def _queue(lay) -> str:
    if lay.utilisation is None:
        return ""
    return (f", utilisation {decimal(lay.utilisation, 2)}, mean wait "
            f"{_ms(Fraction(lay.wait.mean))}")


def _targets(w) -> str:
    t = [f"TTFT{_stat(w)} ≤ {_ms(w.ttft)}" if w.ttft is not None else "",
         f"TPOT{_stat(w)} ≤ {_ms(w.tpot)}" if w.tpot is not None else "",
         f"{decimal(w.request_rate, 2)} requests/s" if w.request_rate is not None else ""]
    return ", ".join(x for x in t if x) or "none"


def answer(r, model: str, emit: str) -> Table:
    w = r.workload
    lines = [f"workload:           {_lengths(w.isl_dist, w.isl)} tokens in, "
             f"{_lengths(w.osl_dist, w.osl)} out; targets: "
             f"{_targets(w)}; up to {grouped(w.max_gpus)} × {r.gpu}; {r.engine}"]
    best = {}
    for lay in r.layouts:
        best.setdefault(lay.disaggregated, lay)
    if not r.layouts:
        lines.append("best:               none meets the targets (the frontier below: what the "
                     "GPUs reach)")
    for key, name in ((False, "aggregated"), (True, "disaggregated")):
        lay = best.get(key)
        head = f"best {name}:"
        if lay is None:
            lines.append(f"{head:<20}none meets the targets")
            continue
        cost = lay.cost_per_million_tokens(w)
        price = "" if cost is None else f", {decimal(cost, 3)} per 10^6 output tokens"
        lines.append(f"{head:<20}{describe(lay)} on {lay.gpus} GPUs "
                     f"({_formats(lay)}): {_tok(lay.tokens_per_second_per_gpu(w.osl_mean))} "
                     f"tokens/s/GPU, TTFT {_ms(lay.ttft_seconds)}, TPOT "
                     f"{_ms(lay.tpot_seconds)}{_queue(lay)}{price}")
        cmd = launch.command(lay, engines.get_engine(emit), model, w.max_len)
        lines.append(f"{'':20}{cmd}")
    lines.append(f"searched:           {grouped(r.evaluated)} serve plans; every figure is "
                 f"serve's for that worker (docs/serving_search.md)")
    mean = "mean " if w.isl_dist or w.osl_dist else ""
    title = (f"Answer: serving layouts for {model} ({mean}{grouped(w.isl)} in / "
             f"{grouped(w.osl)} out)")
    return Table(title, (), (), notes=tuple(lines) + r.notes)


COLUMNS = ("rank", "layout", "formats", "GPUs", "tokens/s/GPU", "tokens/s/user", "TTFT",
           "TPOT", "KV transfer")


def _row(i: str, lay, osl: int) -> tuple[str, ...]:
    return (i, describe(lay), _formats(lay), grouped(lay.gpus),
            _tok(lay.tokens_per_second_per_gpu(osl)), _tok(lay.tokens_per_second_per_user),
            _ms(lay.ttft_seconds), _ms(lay.tpot_seconds),
            _ms(lay.kv_transfer_seconds) if lay.disaggregated else "")


def tables(r) -> list[Table]:
    osl = r.workload.osl_mean
    ranked = Table(f"Layouts meeting the targets, by output tokens/s per GPU (top {SHOWN} of "
                   f"{grouped(len(r.layouts))})", COLUMNS,
                   tuple(_row(str(i + 1), lay, osl) for i, lay in enumerate(r.layouts[:SHOWN])),
                   "rlllrrrrrr"[:len(COLUMNS)])
    front = Table("Pareto frontier: tokens/s per GPU against tokens/s per user (TTFT met)",
                  ("mode",) + COLUMNS[1:],
                  tuple(_row("disagg" if lay.disaggregated else "agg", lay, osl)
                        for lay in r.frontier), "lllrrrrrr",
                  notes=("aggregated TPOT = serve's decode step + batch × serve's TTFT / OSL "
                         "(the prefills a worker interleaves); disaggregated TTFT = the prefill "
                         "worker's TTFT + the KV transfer",))
    return [ranked, front]


def _layout_dict(lay, r, emit: str, model: str) -> dict:
    w = r.workload

    def worker(wk):
        return None if wk is None else {
            "tp": wk.tp, "pp": wk.pp, "weights": wk.weights, "kv_dtype": wk.kv_dtype,
            "batch": wk.batch, "gpus": wk.gpus, "online_fp8": wk.online_fp8,
            "serve_ttft_seconds": fraction(wk.ttft_seconds),
            "serve_tpot_seconds": fraction(wk.plan.time.tpot_seconds),
            "speculative": None if wk.spec is None else spec_dict(wk.spec),
            "dp": wk.dp, "ep": wk.dp * wk.tp if wk.dp > 1 else 1,
            "dp_attention": None if wk.dpw is None else {
                "rank_batch": wk.dpw.rank_batch, "experts_per_gpu": wk.dpw.experts_per_gpu,
                "imbalance": fraction(wk.dpw.imbalance),
                "weights_bytes_per_gpu": wk.dpw.weights_bytes_per_gpu,
                "kv_pool_bytes_per_gpu": wk.dpw.pool_bytes,
                "alltoall_seconds": fraction(wk.dpw.alltoall_seconds),
                "ttft_seconds": fraction(wk.dpw.ttft_seconds),
                "step_seconds": fraction(wk.dpw.step_seconds)}}
    tps, tpu = lay.tokens_per_second_per_gpu(w.osl_mean), lay.tokens_per_second_per_user
    cost = lay.cost_per_million_tokens(w)
    # the contract's figures as plain numbers (issue 40: `.layouts[0].tpot_seconds <= 0.05`
    # in jq); their exact ratios under "exact"
    return {"gpus": lay.gpus, "replicas": lay.replicas, "gpus_per_replica": lay.gpus_per_replica,
            "disaggregated": lay.disaggregated,
            "tokens_per_second_per_gpu": float(tps), "tokens_per_second_per_user": float(tpu),
            "tokens_per_second": float(lay.tokens_per_second(w.osl_mean)),
            "ttft_seconds": float(lay.ttft_seconds), "tpot_seconds": float(lay.tpot_seconds),
            "kv_transfer_seconds": float(lay.kv_transfer_seconds), "link": lay.link,
            "prefill_workers": lay.prefill_workers, "decode_workers": lay.decode_workers,
            "prefill": worker(lay.prefill), "decode": worker(lay.decode),
            "layout": describe(lay),
            "cost_per_million_tokens": None if cost is None else float(cost),
            "ttft_statistic": "mean" if w.percentile is None else _p(w),
            "utilisation": None if lay.utilisation is None else float(lay.utilisation),
            "queue_wait_seconds": None if lay.wait is None else lay.wait.mean,
            "tpot_mean_seconds": float(lay.step_mean),
            "command": launch.command(lay, engines.get_engine(emit), model, w.max_len),
            "exact": {"tokens_per_second_per_gpu": fraction(tps),
                      "ttft_seconds": fraction(lay.ttft_seconds),
                      "tpot_seconds": fraction(lay.tpot_seconds)}}


def spec_dict(s) -> dict:
    return {"method": s.method, "tokens": s.tokens, "acceptance": fraction(s.acceptance),
            "expected_tokens": fraction(s.expected_tokens),
            "verify_seconds": fraction(s.verify_seconds),
            "draft_seconds": fraction(s.draft_seconds),
            "tpot_seconds": fraction(s.tpot_seconds)}


def spec_table(s) -> Table:
    """serve's speculative-decoding lines (serving/speculative.py)."""
    rows = (("drafter", "the MTP head (one block)" if s.method == "mtp" else s.method),
            ("tokens drafted a step", str(s.tokens)),
            ("acceptance per token", decimal(s.acceptance, 3)),
            ("expected tokens a step", decimal(s.expected_tokens, 3)),
            ("verify step", _ms(s.verify_seconds)), ("draft steps", _ms(s.draft_seconds)),
            ("TPOT", _ms(s.tpot_seconds)))
    return Table("Speculative decoding", ("", "value"), rows,
                 notes=("E = (1 − a^(k+1)) / (1 − a) tokens a step (Leviathan et al. 2023); "
                        "TPOT = (verify + draft) / E; the drafter's memory is not in the pool",))


def dp_dict(d) -> dict:
    return {"dp": d.dp, "tp": d.tp, "ep": d.gpus, "gpus": d.gpus, "rank_batch": d.rank_batch,
            "batch": d.batch, "experts_per_gpu": d.experts_per_gpu,
            "imbalance": fraction(d.imbalance), "fits": d.fits,
            "weights_bytes_per_gpu": d.weights_bytes_per_gpu,
            "kv_pool_bytes_per_gpu": d.pool_bytes, "max_rank_sequences": d.max_rank_sequences,
            "ttft_seconds": fraction(d.ttft_seconds), "tpot_seconds": fraction(d.step_seconds),
            "alltoall_seconds": fraction(d.alltoall_seconds)}


def dp_table(d) -> Table:
    """serve --dp's lines (serving/dp_attention.py): the worker of D ranks, per GPU."""
    from accounting.units import GB
    rows = (("GPUs", f"{d.gpus} (DP {d.dp} × TP {d.tp}; EP {d.gpus})"),
            ("routed experts/GPU", grouped(d.experts_per_gpu)),
            ("weights/GPU", f"{decimal(Fraction(d.weights_bytes_per_gpu, GB), 2)} GB"),
            ("KV pool/GPU", f"{decimal(Fraction(max(d.pool_bytes, 0), GB), 2)} GB"),
            ("sequences", f"{grouped(d.max_rank_sequences)} a rank, "
                          f"{grouped(d.max_rank_sequences * d.dp)} the worker"),
            ("fits", f"{'yes' if d.fits else 'NO'}: {grouped(d.rank_batch)} a rank"),
            ("TTFT", _ms(d.ttft_seconds)),
            ("TPOT", f"{_ms(d.step_seconds)} (all-to-alls {_ms(d.alltoall_seconds)}; "
                     f"imbalance {decimal(d.imbalance, 2)})"),
            ("throughput", f"{decimal(Fraction(d.batch) / d.step_seconds / d.gpus, 1)} "
                           f"tokens/s per GPU"))
    return Table("Attention data parallelism with expert parallelism", ("", "value"), rows,
                 notes=("one rank's serve plan (the tables below) with the routed experts "
                        "spread whole over every GPU (docs/serving_search.md)",))


def to_dict(r, model: str, emit: str) -> dict:
    w = r.workload
    return {"model": model, "gpu": r.gpu, "engine": r.engine, "emit": emit,
            "workload": {"isl": w.isl, "osl": w.osl, "max_gpus": w.max_gpus,
                         "ttft_seconds": fraction(w.ttft) if w.ttft is not None else None,
                         "tpot_seconds": fraction(w.tpot) if w.tpot is not None else None,
                         "request_rate": fraction(w.request_rate)
                         if w.request_rate is not None else None,
                         "isl_distribution": None if w.isl_dist is None else w.isl_dist.spec,
                         "osl_distribution": None if w.osl_dist is None else w.osl_dist.spec,
                         "isl_mean": fraction(w.isl_lengths.mean),
                         "osl_mean": fraction(w.osl_lengths.mean),
                         "percentile": None if w.percentile is None else
                         fraction(w.percentile)},
            "evaluated": r.evaluated,
            "layouts": [_layout_dict(x, r, emit, model) for x in r.layouts],
            "frontier": [_layout_dict(x, r, emit, model) for x in r.frontier],
            "notes": list(r.notes)}


def to_csv(r, model: str, emit: str) -> str:
    rows = [_layout_dict(x, r, emit, model) for x in r.layouts]
    keys = ("gpus", "disaggregated", "layout", "tokens_per_second_per_gpu",
            "tokens_per_second_per_user", "ttft_seconds", "tpot_seconds", "command")
    return csv_text([{k: d[k] for k in keys} for d in rows], keys)


def plot(r, path: str) -> None:
    """The frontier as a PNG (matplotlib's Agg canvas, imported here only)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    osl = r.workload.osl_mean
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    for dis, mark, name in ((False, "o-", "aggregated"), (True, "s-", "disaggregated")):
        pts = [x for x in r.frontier if x.disaggregated == dis]
        ax.plot([float(x.tokens_per_second_per_user) for x in pts],
                [float(x.tokens_per_second_per_gpu(osl)) for x in pts], mark, label=name)
    if r.workload.tpot is not None:
        ax.axvline(float(1 / r.workload.tpot), color="grey", ls="--", label="TPOT target")
    ax.set_xlabel("output tokens/s per user (1 / TPOT)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_title(f"{r.gpu}: {r.workload.isl} in / {osl} out, TTFT met")
    ax.legend()
    FigureCanvasAgg(fig)
    fig.savefig(path, format="png", dpi=100, metadata={"Software": None})
