"""H200 measurements for issues 39 (fp8 GEMMs at small M) and 44 (recipe peaks).

    python benchmarks/gpu_fp8_recipes.py PROJECT_DIR OUT_DIR [--smoke] [--only fp8|recipes]

Run on the lent H200 on 2026-11-28 (torch 2.11.0+cu130, Liger 0.8.5 carried as a wheel); its
outputs are tests/data/fp8_gemm_h200.json and tests/data/recipes_h200.json.

fp8: bf16 torch.mm, fp8 e4m3 torch._scaled_mm with tensorwise, rowwise and (when this torch
accepts them) 1x128 / 128x128 block scales, for DeepSeek-V3-like (n, k) shapes at M = 1..4096.
Each time is a CUDA-graph replay of R calls cycling over enough weight copies to exceed the
60 MB L2 (a decode reads its weights from HBM), divided by R; median of 5 replays.

recipes: the course model (model/) from the Llama-3.2-1B spec, fp32 parameters, AdamW foreach,
bf16 autocast, T 4096 B 2 (the peak_moments.py case), per variant: eager F.cross_entropy;
torch.compile(model); torchtune-style chunked CE (8 chunks of the hidden states, each chunk's
logits upcast to fp32 in the loss, as CEWithChunkedOutputLoss); Liger's fused linear CE;
activations saved on the CPU (torch.autograd.graph.save_on_cpu(pin_memory=True)).
Peak = max_memory_allocated / max_memory_reserved over step 2 (step 1 warms up AdamW).
"""
import json
import math
import statistics
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

proj = Path(sys.argv[1]).resolve()
out = Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
smoke = "--smoke" in sys.argv
only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
sys.path.insert(0, str(proj))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

dev = "cpu" if smoke else "cuda"
info = dict(torch=torch.__version__, device=torch.cuda.get_device_name() if dev == "cuda" else "cpu")


def dump(name, obj):
    (out / name).write_text(json.dumps(obj, indent=1))


# ------------------------------------------------------------------ fp8 GEMMs
def graph_time(fn_list, reps=5):
    """Seconds per call: a CUDA graph of the calls in fn_list, replayed; median of reps."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fn_list[:3]:
            f()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in fn_list:
            f()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / len(fn_list))
    del g
    return statistics.median(times)


def fp8_cases():
    shapes = [(2112, 7168), (3072, 1536), (7168, 2048), (4608, 7168), (7168, 2304), (4096, 4096)]
    ms = [1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096]
    if smoke:
        return dict(skipped="smoke")
    e4m3 = torch.float8_e4m3fn
    rows, forms = [], {}
    for n, k in shapes:
        copies = max(2, min(48, math.ceil(300e6 / (n * k))))
        wb = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
        w8 = [w.to(e4m3) for w in wb]
        for m in ms:
            a16 = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            a8 = a16.to(e4m3)
            row = dict(m=m, n=n, k=k, copies=copies)
            reps = max(copies, 16)
            try:
                row["bf16_us"] = 1e6 * graph_time([(lambda w=wb[i % copies]: torch.mm(a16, w.t())) for i in range(reps)])
            except Exception as e:
                row["bf16_err"] = str(e)[:200]
            one = torch.ones((), device=dev)
            variants = {
                "tensorwise": (one, one),
                "rowwise": (torch.ones(m, 1, device=dev), torch.ones(1, n, device=dev)),
            }
            kb, nb = k // 128, n // 128
            # block scales: several layouts; keep the first this torch accepts
            variants["block_1x128_128x128_a"] = (torch.ones(kb, m, device=dev).t(), torch.ones(kb, nb, device=dev))
            variants["block_1x128_128x128_b"] = (torch.ones(m, kb, device=dev), torch.ones(nb, kb, device=dev).t())
            variants["block_1x128_128x128_c"] = (torch.ones(kb, m, device=dev).t(), torch.ones(nb, kb, device=dev).t())
            variants["block_1x128_1x128"] = (torch.ones(kb, m, device=dev).t(), torch.ones(kb, n, device=dev).t())
            for name, (sa, sb) in variants.items():
                try:
                    f = [(lambda w=w8[i % copies]: torch._scaled_mm(a8, w.t(), scale_a=sa, scale_b=sb,
                                                                 out_dtype=torch.bfloat16)) for i in range(reps)]
                    f[0]()
                    torch.cuda.synchronize()
                    row[f"fp8_{name}_us"] = 1e6 * graph_time(f)
                    forms[name] = "ok"
                except Exception as e:
                    forms.setdefault(name, str(e)[:300])
            row["weight_bytes_fp8"] = n * k
            row["roofline_fp8_us"] = 1e6 * max(n * k / 4.8e12, 2 * m * n * k / 1979e12)
            rows.append(row)
            print(json.dumps(row), flush=True)
        del wb, w8
        torch.cuda.empty_cache()
        dump("fp8_gemm.json", dict(info=info, forms=forms, rows=rows))
    return dict(info=info, forms=forms, rows=rows)


# ------------------------------------------------------------------ recipes
def recipes():
    import accounting
    from accounting.planning import PRECISIONS, MemoryModel
    from model import TransformerLM

    c = accounting.get_preset("meta-llama/Llama-3.2-1B")
    T, B = (64, 2) if smoke else (4096, 2)
    c = replace(c, attention="sdpa")
    if smoke:
        c = replace(c, num_layers=2, d_model=64, num_heads=4, num_kv_heads=2, d_ff=128, vocab_size=512)
    V = c.vocab_size
    rows = []

    def run(variant):
        torch.manual_seed(0)
        if dev == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        model = TransformerLM.from_config(c, device=dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, foreach=True)
        ids = torch.randint(0, V, (B, T), device=dev)
        tgt = torch.randint(0, V, (B, T), device=dev)
        fwd = model
        if variant.startswith("compile"):
            fwd = torch.compile(model)

        def body(x):
            # model.forward up to ln_final (the Llama spec has no position table or multipliers)
            h = model.token_embeddings(x)
            for layer in model.layers:
                h = layer(h)
            return model.ln_final(h)

        lce = None
        if variant == "fused-linear":
            from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
            lce = LigerFusedLinearCrossEntropyLoss()

        def loss_fn():
            if variant in ("eager", "compile", "offload"):
                return F.cross_entropy(fwd(ids).reshape(-1, V), tgt.reshape(-1))
            if variant == "chunked":
                h = body(ids)
                chunks = [model.lm_head(hc) for hc in h.chunk(8, dim=1)]
                tc = tgt.chunk(8, dim=1)
                total = sum(F.cross_entropy(lc.float().reshape(-1, V), t.reshape(-1), reduction="sum")
                            for lc, t in zip(chunks, tc))
                return total / tgt.numel()
            if variant == "fused-linear":
                h = body(ids)
                return lce(model.lm_head.weight, h.reshape(-1, h.shape[-1]), tgt.reshape(-1))
            raise ValueError(variant)

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast(dev, dtype=torch.bfloat16):
                if variant == "offload":
                    with torch.autograd.graph.save_on_cpu(pin_memory=(dev == "cuda")):
                        loss = loss_fn()
                else:
                    loss = loss_fn()
            loss.backward()
            opt.step()

        t0 = time.perf_counter()
        step()
        sync()
        first = time.perf_counter() - t0
        base = torch.cuda.memory_allocated() if dev == "cuda" else 0
        if dev == "cuda":
            torch.cuda.reset_peak_memory_stats()
        step()
        sync()
        peak = torch.cuda.max_memory_allocated() if dev == "cuda" else 0
        reserved = torch.cuda.max_memory_reserved() if dev == "cuda" else 0
        times = []
        for _ in range(0 if smoke else 3):
            t0 = time.perf_counter()
            step()
            sync()
            times.append(time.perf_counter() - t0)
        del model, opt, fwd
        return dict(variant=variant, T=T, B=B, base_bytes=base, peak_allocated_bytes=peak,
                    peak_reserved_bytes=reserved, first_step_s=first,
                    step_s=statistics.median(times) if times else None)

    plan_peak = MemoryModel(c, PRECISIONS["bf16-mixed"], "model", "none").peak(B, T)
    for v in ("eager", "chunked", "fused-linear", "offload", "compile"):
        try:
            r = run(v)
        except Exception as e:
            r = dict(variant=v, error=f"{type(e).__name__}: {str(e)[:300]}", tb=traceback.format_exc()[-800:])
            if dev == "cuda":
                torch.cuda.empty_cache()
        rows.append(r)
        print(json.dumps(r), flush=True)
        dump("recipes.json", dict(info=info, config="meta-llama/Llama-3.2-1B (course model, model/)",
                                  precision="bf16-mixed autocast, fp32 parameters, AdamW foreach",
                                  plan_peak_bytes_eager=plan_peak, rows=rows))


def sync():
    if dev == "cuda":
        torch.cuda.synchronize()


if only in (None, "fp8"):
    try:
        fp8_cases()
    except Exception:
        traceback.print_exc()
if only in (None, "recipes"):
    recipes()
print("done", info)
