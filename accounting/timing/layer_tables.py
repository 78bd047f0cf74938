"""aiconfigurator-core's tables of whole layer kernels: a mixture's routed experts, latent
attention (MLA) and gated DeltaNet, read where the wheel is installed (tables.py's reader,
nothing copied). Per system and engine version (systems/data/<system>/<op>/<engine>/<v>/):

  moe/.../moe_perf.parquet: (moe_dtype, num_tokens, hidden_size, inter_size, topk,
      num_experts, moe_tp_size, moe_ep_size, distribution, kernel_source) -> latency (ms):
      one fused-MoE call of a layer (vLLM's fused_experts: the gate/up grouped GEMM, the
      activation, the down grouped GEMM, the top-k weighted sum) on num_tokens tokens
      before routing; inter_size the whole expert width, split moe_tp_size ways. The
      collector builds its shapes from named models (ai-dynamo/aiconfigurator
      collector/vllm/collect_moe.py): a lookup needs the model's own (hidden, inter, topk,
      experts, tp, ep) row and interpolates in num_tokens only.
  mla/.../generation_mla_perf, context_mla_perf: (num_heads, batch_size, step or isl,
      kv_cache_dtype) -> latency: the attention kernel of DeepSeek-V3's latent geometry
      (latent 512, RoPE key 64, no-RoPE head 128, value 128) on num_heads query heads
      (128 / TP). vLLM 0.24.0 measures MLA only as a module with its projections
      (mla_*_module_perf), so a vLLM plan reads the decode kernel from the same GPU's
      SGLang (then TensorRT-LLM) table, saying so, and its prefill from its own
      context-attention table (FlashAttention, the kernel its MLA prefill runs).
  linear_attention/.../gdn_perf: (phase, batch_size, seq_len, num_k_heads, num_v_heads,
      head dims 128, kernel_source) -> latency: gated DeltaNet's convolution and chunked
      (context) or recurrent (generation) kernels, Qwen3.5's shapes.

Every lookup names its table, engine and version; a shape a table lacks is not guessed
from another shape: the caller keeps its GEMM-table or roofline time and says why.
"""
from __future__ import annotations

from functools import lru_cache

from accounting.timing import tables
from accounting.timing.tables import Grid, Source

# aiconfigurator-core's default routing skew for its DeepSeek, Nemotron-H, MiniMax and
# hybrid MoE models (sdk/models/deepseek.py: workload_distribution "power_law" with
# _power_law_alpha 1.01); the balanced rows where a shape has no such row.
DISTRIBUTIONS = ("power_law_1.01", "balanced")
# DeepSeek-V3's latent geometry, the MLA tables' one model (their rows name no other)
MLA_GEOMETRY = (("r_kv", 512), ("d_rope", 64), ("d_nope", 128), ("d_v", 128))


def _engines(system: str, op: str, engine: str) -> tuple[str, ...]:
    """Where an engine has no table of a layer kernel on a GPU, the other engines' table of
    the same kernel on the same GPU stands in (tables.stand_ins' order), named."""
    return tables.stand_ins(system, op, engine)


def _label(src: Source, kernel: str, engine: str, why: str) -> str:
    own = "" if src.engine == engine else f"; {engine} has {why}: {src.engine}'s on this GPU"
    return f"{src} ({kernel}{own})"


@lru_cache(maxsize=None)
def moe(system: str, engine: str, dtype: str, hidden: int, inter: int, topk: int,
        experts: int, tp: int, ep: int = 1, distributions: tuple[str, ...] = DISTRIBUTIONS):
    """(Grid over num_tokens, source label) of one MoE layer's fused expert call at this
    shape, or None where no engine's table on the GPU measured it. With EP, num_tokens is
    every token the layer routes (all data-parallel ranks'): the collector feeds them to
    rank 0, whose E/ep experts run the slots routed to them (collect_moe.py, run_moe_torch:
    "requested logical sizes determine local weights and the rank-0 expert map")."""
    for eng in _engines(system, "moe", engine):
        src = tables.find(system, "moe", "moe_perf", eng)
        if src is None:
            continue
        for dist in distributions:
            cols = tables.read(src, "moe", ("kernel_source", "num_tokens", "latency"),
                               moe_dtype=dtype, hidden_size=hidden, inter_size=inter,
                               topk=topk, num_experts=experts, moe_tp_size=tp,
                               moe_ep_size=ep, distribution=dist)
            if not len(cols["latency"]):
                continue
            kernel = cols["kernel_source"].most_common()
            keep = cols["kernel_source"] == kernel
            grid = Grid({k: cols[k][keep] for k in ("num_tokens", "latency")}, ("num_tokens",))
            return grid, _label(src, f"{kernel}, {dist} routing", engine,
                                "no row of this shape")
    return None


def mla_geometry(v: dict) -> bool:
    """Whether a latent attention has the tables' (DeepSeek-V3's) per-head geometry."""
    return all(v.get(k) == n for k, n in MLA_GEOMETRY)


@lru_cache(maxsize=None)
def mla(system: str, phase: str, engine: str, heads: int, kv_dtype: str = "bfloat16"):
    """(Grid over (batch, length), source label, heads measured) of the latent attention
    kernel, `phase` "context" (length: the prompt) or "generation" (length: the cached
    keys), at the measured head count nearest `heads` (the caller scales by the ratio:
    the work is linear in the heads), or None."""
    import math
    import numpy as np
    length = "isl" if phase == "context" else "step"
    # a prefill's kernel from the engine's own table only: vLLM's MLA prefill runs
    # FlashAttention (varlen, the 192-wide Q·K, V padded), which its own context-attention
    # table measures; SGLang's context_mla rows on H200 read 2–3 × TensorRT-LLM's at 128
    # heads (3.9 against 1.25 ms at 4,096 tokens), so neither stands in for another engine
    for eng in _engines(system, "mla", engine) if phase == "generation" else (engine,):
        src = tables.find(system, "mla", f"{phase}_mla_perf", eng)
        if src is None:
            continue
        cols = tables.read(src, "mla", ("kernel_source", "num_heads", "batch_size", length,
                                        "latency"), mla_dtype="bfloat16", kv_cache_dtype=kv_dtype)
        if not len(cols["latency"]):
            continue
        measured = sorted(set(cols["num_heads"].tolist()))
        h0 = min(measured, key=lambda h: (abs(math.log(h) - math.log(max(heads, 1))), -h))
        keep = np.asarray(cols["num_heads"] == h0)
        kernel = cols["kernel_source"][keep].most_common()
        grid = Grid({"batch_size": cols["batch_size"][keep], length: cols[length][keep],
                     "latency": cols["latency"][keep]}, ("batch_size", length))
        return grid, _label(src, kernel, engine, "no MLA kernel table"), h0
    return None


# gated DeltaNet's two kernels a phase runs (vLLM's GatedDeltaNet: causal_conv1d_fn, then
# chunk_gated_delta_rule, in a prefill; causal_conv1d_update, then the fused recurrent rule,
# in a decode step), by a part of their names in the tables' kernel_source
GDN_KERNELS = ("conv1d", "delta_rule")


@lru_cache(maxsize=None)
def gdn(system: str, phase: str, engine: str, k_heads: int, v_heads: int, dk: int, dv: int):
    """(((Grid over (batch, seq_len), kernel) for the convolution and the delta rule),
    source label) of gated DeltaNet's kernels on one rank's heads, or None where no engine's
    table on the GPU measured both at that head shape."""
    import numpy as np
    for eng in _engines(system, "linear_attention", engine):
        src = tables.find(system, "linear_attention", "gdn_perf", eng)
        if src is None:
            continue
        cols = tables.read(src, "linear_attention", ("kernel_source", "batch_size", "seq_len",
                                                     "latency"), phase=phase,
                           num_k_heads=k_heads, num_v_heads=v_heads, head_k_dim=dk,
                           head_v_dim=dv)
        names = set(cols["kernel_source"].tolist()) if len(cols["latency"]) else set()
        parts = []
        for part in GDN_KERNELS:
            kernel = next((n for n in sorted(names) if part in n), None)
            if kernel is None:
                break
            keep = np.asarray(cols["kernel_source"] == kernel)
            parts.append((Grid({k: cols[k][keep] for k in ("batch_size", "seq_len", "latency")},
                               ("batch_size", "seq_len")), kernel))
        if len(parts) == len(GDN_KERNELS):
            return tuple(parts), _label(src, " + ".join(k for _, k in parts), engine,
                                        "no row of these heads")
    return None
