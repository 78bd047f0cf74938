"""Inline SVG plots drawn from the CLI's JSON (no numbers of their own: each value is a
field of that JSON, each label the CLI's name for it).

A plot whose fields a command does not have (another subcommand, a newer JSON) is left
out: the answer and the tables are the page's content, the plots a view of them.
"""
from __future__ import annotations

from html import escape

from fractions import Fraction

from accounting.units import gigabytes, percent

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")
WIDTH = 760


def _approx(x) -> float:
    """A JSON number or the CLI's exact fraction ({numerator, denominator, approx})."""
    return float(x["approx"]) if isinstance(x, dict) else float(x)


def _exact(x) -> Fraction:
    """The CLI's exact fraction ({numerator, denominator, approx}) or a JSON integer."""
    return Fraction(x["numerator"], x["denominator"]) if isinstance(x, dict) else Fraction(x)


def _gb(n: float) -> str:
    """As the CLI writes a size (accounting/units.py)."""
    return gigabytes(int(n))


def _legend(names: list[str], y: int) -> tuple[str, int]:
    out, x = [], 10
    for i, name in enumerate(names):
        w = 22 + 7 * len(name)
        if x + w > WIDTH:
            x, y = 10, y + 18
        out.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{PALETTE[i % 10]}"/>'
                   f'<text x="{x + 14}" y="{y}">{escape(name)}</text>')
        x += w
    return "".join(out), y + 10


def _svg(body: str, height: int, title: str, plot_id: str) -> str:
    return (f'<figure class="plot" id="{plot_id}"><figcaption>{escape(title)}</figcaption>'
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
            f'width="100%" style="max-width:{WIDTH * 4 // 3}px" font-size="12" font-family="sans-serif">'
            f'{body}</svg></figure>')


def stacked_bars(rows: list[tuple[str, list[float]]], names: list[str], title: str,
                 plot_id: str, scale: float, labels: list[str], marker: float | None = None,
                 marker_label: str = "", ends: list[str] | None = None) -> str:
    """Horizontal bars, one per row, each the stack of its parts; `scale` = full width;
    `ends`: a label after each bar."""
    left, bar, gap, right = 160, 22, 10, 110 if ends else 20
    span = WIDTH - left - right
    parts, y = [], 10
    for k, ((label, values), text) in enumerate(zip(rows, labels)):
        x = float(left)
        parts.append(f'<text x="{left - 6}" y="{y + 15}" text-anchor="end">{escape(label)}</text>')
        for i, v in enumerate(values):
            w = span * v / scale if scale else 0
            if w > 0:
                parts.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar}" '
                             f'fill="{PALETTE[i % 10]}"><title>{escape(names[i])}: '
                             f'{escape(text.split(";")[i] if ";" in text else text)}</title></rect>')
            x += w
        if ends:
            parts.append(f'<text x="{x + 4:.1f}" y="{y + 15}">{escape(ends[k])}</text>')
        y += bar + gap
    if marker is not None and scale:
        mx = left + span * marker / scale
        parts.append(f'<line x1="{mx:.1f}" y1="4" x2="{mx:.1f}" y2="{y}" stroke="#000" '
                     f'stroke-dasharray="4 3"/><text x="{min(mx, WIDTH - 150):.1f}" y="{y + 12}">'
                     f'{escape(marker_label)}</text>')
        y += 16
    legend, y = _legend(names, y + 14)
    return _svg("".join(parts) + legend, y + 4, title, plot_id)


def flops_shares(sweep: dict[int, dict], counting: str) -> str:
    """Matmul FLOPs shares by component against the context (one CLI run per context)."""
    names: list[str] = []
    for d in sweep.values():
        for n in d["components"][counting]["shares"]:
            if n not in names:
                names.append(n)
    rows, labels = [], []
    for ctx, d in sorted(sweep.items()):
        shares = d["components"][counting]["shares"]
        values = [_approx(shares[n]) if n in shares else 0.0 for n in names]
        rows.append((f"T = {ctx:,}", values))
        labels.append(";".join(percent(_exact(shares[n])) if n in shares else "0%"
                               for n in names))
    return stacked_bars(rows, names, f"Share of the matmul FLOPs by component ({counting} "
                        f"attention count), T = 1k to 16k", "plot-flops", 1.0, labels)


def _memory(parts: list[tuple[str, float]], capacity: float | None, title: str,
            plot_id: str, label: str) -> str:
    names = [n for n, _ in parts]
    values = [v for _, v in parts]
    total = sum(values)
    scale = max(total, capacity or 0)
    mark = f"GPU capacity {_gb(capacity)}" if capacity else ""
    return stacked_bars([(label, values)], names, f"{title}: {_gb(total)} in all",
                        plot_id, scale, [";".join(_gb(v) for v in values)], capacity, mark,
                        [_gb(total)])


def plan_memory(d: dict) -> str:
    """A training step's memory as stacked parts, against the GPU's capacity; beside it, the
    step's peak (the answer's), a second bar: the parts are what the step holds at one time
    or another (activations before the update, AdamW's √v temporary during it), so their sum
    is not the peak, and the plot says so (was: "… in all" beside a different peak)."""
    items = [(i["name"], float(i["bytes"])) for i in d["training_memory"]["items"]
             if i.get("on_gpu", True) and i["bytes"]]
    capacity = (d.get("fit") or {}).get("capacity_bytes")
    peak = d.get("peak") or {}
    label = f"B = {d['workload']['batch']:,}"
    if not peak.get("peak_bytes") or not peak.get("moments"):
        return _memory(items, capacity, "Training memory by part, as in its table "
                       "(GB = 10^9 bytes)", "plot-memory", label)
    moment = max(peak["moments"], key=lambda m: m["bytes"])
    names = [n for n, _ in items] + [f"the step's peak: {moment['name']}"]
    parts = [v for _, v in items] + [0.0]
    top = [0.0] * len(items) + [float(peak["peak_bytes"])]
    total = sum(parts)
    title = (f"Training memory by part, as in its table: {_gb(total)} held at one time or "
             f"another, never all at once; the step's peak, {_gb(top[-1])} at the "
             f"{moment['name']} ({moment['what'].split(';')[0]}), is what must fit "
             "(GB = 10^9 bytes)")
    return stacked_bars([(f"{label}: parts", parts), ("the step's peak", top)], names, title,
                        "plot-memory", max(total, top[-1], capacity or 0),
                        [";".join(_gb(v) for v in parts), ";".join(_gb(v) for v in top)],
                        capacity, f"GPU capacity {_gb(capacity)}" if capacity else "",
                        [_gb(total), _gb(top[-1])])


def parallel_memory(d: dict) -> str:
    """A multi-GPU plan: each pipeline stage's memory per GPU as stacked parts, against the
    usable memory of a GPU."""
    stages = d["stages"][:16]
    names: list[str] = []
    for st in stages:
        for i in st["items"]:
            if i.get("on_gpu", True) and i["bytes"] and i["name"] not in names:
                names.append(i["name"])
    rows, labels, ends = [], [], []
    for st in stages:
        held = {i["name"]: float(i["bytes"]) for i in st["items"] if i.get("on_gpu", True)}
        values = [held.get(n, 0.0) for n in names]
        rows.append((f"stage {st['stage']}", values))
        labels.append(";".join(_gb(v) for v in values))
        ends.append(_gb(sum(values)))
    usable = (d.get("fit") or {}).get("usable_bytes")
    scale = max([sum(v) for _, v in rows] + [usable or 0])
    return stacked_bars(rows, names, "Memory per GPU by pipeline stage, by part (GB = 10^9 "
                        "bytes)", "plot-memory", scale, labels, usable,
                        f"usable {_gb(usable)}" if usable else "", ends)


def serve_memory(d: dict) -> str:
    """One GPU's memory when serving: weights, activation peak, KV pool, outside torch."""
    s, a = d["stages"][0], d["assumptions"]
    parts = [("weights", s["weights_bytes"]), ("activation peak", s["activation_peak_bytes"]),
             ("KV cache pool", s["kv_pool_bytes"]), ("outside torch", a["non_torch_bytes"]),
             ("CUDA graphs", a.get("cuda_graph_bytes", 0))]
    return _memory([(n, float(v)) for n, v in parts if v and v > 0], a.get("memory_bytes"),
                   "Memory of one GPU when serving (GB = 10^9 bytes)", "plot-memory", "GPU 0")


def _layout_name(lo: dict) -> str:
    """tp, pp and dp always; the other degrees (cp, ep, virtual stages) where not 1."""
    text = f"tp{lo['tp']} pp{lo['pp']}"
    text += f" v{lo['virtual_stages']}" if lo.get("virtual_stages", 1) != 1 else ""
    text += f" cp{lo['cp']}" if lo.get("cp", 1) != 1 else ""
    text += f" dp{lo['dp']}"
    text += f" ep{lo['ep']}" if lo.get("ep", 1) != 1 else ""
    return text + f" zero{lo['zero']}" + (" sp" if lo.get("sp") else "")


def layouts(d: dict) -> str:
    """The feasible layouts ranked by estimated step time (fastest first); each bar's end
    the CLI's own text for its time (ms under a second, then s: issue 39's timed steps)."""
    from accounting.planning.views import _seconds
    ranked = d["ranked"][:20]
    if not ranked:
        return ""
    rows = [(_layout_name(r["layout"]), [_approx(r["step_time"]["seconds"])]) for r in ranked]
    scale = max(v[0] for _, v in rows)
    labels = [f"{v[0]:.4g} s per step" for _, v in rows]
    return stacked_bars(rows, ["estimated step time"], f"Layouts of {d['gpus']:,} GPUs, "
                        "fastest first (step time, s)", "plot-layouts", scale, labels,
                        ends=[_seconds(_exact(r["step_time"]["seconds"])) for r in ranked])


def plots(answer) -> list[str]:
    """The plots the answer's JSON has the fields for."""
    d, out = answer.data, []
    makers = []
    if answer.sweep:
        counting = (d or {}).get("workload", {}).get("count", "executed")
        makers.append(lambda: flops_shares(answer.sweep, counting))
    if d is not None and "training_memory" in d:
        makers.append(lambda: plan_memory(d))
    if d is not None and "stages" in d and "layout" in d:
        makers.append(lambda: parallel_memory(d))
    if d is not None and "kv_pool_bytes_per_gpu" in d:
        makers.append(lambda: serve_memory(d))
    if d is not None and "ranked" in d:
        makers.append(lambda: layouts(d))
    for make in makers:
        try:
            svg = make()
        except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError):
            continue  # a JSON without the plot's fields: no plot, never a broken page
        if svg:
            out.append(svg)
    return out
