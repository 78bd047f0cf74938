"""The recipe flags' plans against an H200 step (issue 44): tests/data/recipes_h200.json,
measured by benchmarks/gpu_fp8_recipes.py (torch 2.11.0+cu130, Liger 0.8.5) on model/'s
TransformerLM built from Llama-3.2-1B's spec (SDPA), bf16 autocast over fp32 parameters,
AdamW foreach, T = 4,096, B = 2: torch.cuda.max_memory_allocated / max_memory_reserved over
the second step. Each variant is planned with the flag that names it; how the measured run
differs from the flag's rule is said in the row (the docs' table, accounting/cli/
generated.py "recipes-h200"; tests/test_recipes_h200.py holds the ratios)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "recipes_h200.json"
SEQ, BATCH = 4096, 2
# each measured variant: the plan's flags, and what the measured run did beside the rule
VARIANTS = {
    "eager": ({}, "F.cross_entropy on the full logits"),
    "chunked": ({"loss": "chunked"}, "8 chunks of the hidden states, each chunk's logits "
                                     "upcast in the loss, as CEWithChunkedOutputLoss"),
    "fused-linear": ({"loss": "fused-linear"}, "LigerFusedLinearCrossEntropyLoss"),
    "offload": ({"offload_activations": True},
                "torch.autograd.graph.save_on_cpu over the forward and the loss: every saved "
                "tensor moves (the plan's torchtune rule keeps the head's, the loss's and "
                "those under 1 KiB)"),
    "compile": ({"compile": True}, "torch.compile(model), the whole model (the plan compiles "
                                   "each block; the rest eager)"),
}


def rows() -> list[dict]:
    """Each variant: measured allocated and reserved peaks, the plan's, the moment."""
    from accounting.architecture.presets import get_preset
    from accounting.planning import PRECISIONS, MemoryModel
    from accounting.planning import reserved as RS
    data = json.loads(DATA.read_text(encoding="utf-8"))
    config = replace(get_preset("meta-llama/Llama-3.2-1B"), attention="sdpa")
    out = []
    for r in data["rows"]:
        flags, how = VARIANTS[r["variant"]]
        m = MemoryModel(config, PRECISIONS["bf16-mixed"], "model", "none", arch="sm90", **flags)
        reserved, moment = RS.one_gpu(m, BATCH, SEQ)
        out.append(dict(variant=r["variant"], how=how, measured=r["peak_allocated_bytes"],
                        measured_reserved=r["peak_reserved_bytes"], plan=m.peak(BATCH, SEQ),
                        plan_reserved=reserved, moment=moment))
    return out


def markdown() -> str:
    lines = ["| variant (measured run) | measured allocated | plan | plan / measured | "
             "measured reserved | plan reserved | the plan's peak moment |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows():
        lines.append(f"| `{r['variant']}` ({r['how']}) | {r['measured'] / 1e9:.2f} GB | "
                     f"{r['plan'] / 1e9:.2f} GB | {r['plan'] / r['measured']:.3f} | "
                     f"{r['measured_reserved'] / 1e9:.2f} GB | {r['plan_reserved'] / 1e9:.2f} GB "
                     f"| {r['moment']} |")
    return "\n".join(lines) + "\n"


__all__ = ["DATA", "VARIANTS", "markdown", "rows"]
