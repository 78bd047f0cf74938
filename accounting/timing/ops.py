"""Every record of the ledger timed on a named GPU: the rules, one per kind of op.

GEMMs (a Matmul record C = A·B, A: batch×m×n, B: n×p): a GEMM of M = Π m rows, K = Π n,
N = Π p, run Π batch times (a batched matmul: each instance timed alone, a stated upper
bound on the per-head products of an unfused attention), from the measured GEMM table at
the record's dtype (bf16; a linear layer's fp8 GEMM at the fp8 table's rate). Backward: the
ledger's own gradient records (dA = dC·Bᵀ, dB = Aᵀ·dC), each timed as its own GEMM.

Attention with a fused kernel (the ledger marks it: the backward recomputes QKᵀ): one
kernel per layer from the measured context-attention table (FlashAttention-3 in vLLM's
tables; batch, length, query and KV heads, head size), its causal half as the kernel runs
it; a sliding window's or a chunk's share of the causal pairs scales it. Backward: 2.5 ×
the forward, the FLOP ratio of FlashAttention's backward (five matmuls: QKᵀ again, dV, dP,
dQ, dK) to its forward (two), Dao 2023 (FlashAttention-2), §3.1.2 Algorithm 2, at the
forward's measured rate.

Memory-bound ops (each Elementwise record: norms, activations, RoPE, residual adds,
softmax's pieces): the bytes each kernel moves (its input operands and its output) at the
system's memory bandwidth times its measured efficiency, plus the system's constant
per-kernel latency (aiconfigurator-core's systems/<gpu>.yaml: mem_bw_empirical_scaling_factor,
mem_empirical_constant_latency); backward: twice the forward's traffic (the output's
gradient and the saved input read, the input's gradient written).

Where no table covers an op (a GPU without tables, the recurrent layers' mixing), the
roofline: FLOPs at the dense peak times ROOFLINE_DERATE, bytes at the bandwidth times
BANDWIDTH_DERATE — labelled "roofline".
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from accounting.ledger import records as R
from accounting.ledger.symbols import product
from accounting.timing import tables

# Where no table exists: 0.7 of the dense peak for GEMMs (what the measured tables give a
# large bf16 GEMM: torch's F.linear at m = n = k = 8,192 on H100-SXM runs 0.70–0.75 of 989
# TFLOP/s in aiconfigurator-core's vLLM table, tests/test_timing.py checks the table), and
# 0.8 of the datasheet bandwidth (aiconfigurator-core's mem_bw_empirical_scaling_factor).
ROOFLINE_DERATE = Fraction(7, 10)
BANDWIDTH_DERATE = Fraction(4, 5)
FA_BACKWARD_RATIO = Fraction(5, 2)  # FlashAttention-2 Algorithm 2: 5 matmuls against 2
# torch's SDPA with grouped-query heads (enable_gqa=True: model/fused.py, transformers'
# sdpa_attention_forward) runs its flash backend, FlashAttention-2 (aten/src/ATen/native/
# transformers/cuda/flash_attn is its copy; cuDNN's backend takes no enable_gqa); the tables
# measure FlashAttention-3 on Hopper, "1.5-2.0× faster than FlashAttention-2" (Shah et al.
# 2024, abstract): such a step's attention is the FA3 table's time × 1.5, the low end.
# Without grouped heads torch 2.11 picks cuDNN's attention, at the FA3 table's rate: measured
# on an H200 (torch 2.11.0+cu130, causal, h = 32, d = 128, T = 8,192, B = 1 and 2) forward
# 1.01 and 1.76 ms against the table's 0.98 and 1.97, forward and backward 3.75 and 7.20 ms
# against 3.5 × the table's forward, 3.44 and 6.89 (docs/timing.md).
FA2_OVER_FA3 = Fraction(3, 2)

GEMMS, ATTENTION, MEMORY, COMMUNICATION, OPTIMIZER, OVERHEAD = (
    "GEMMs", "attention", "memory-bound", "communication", "optimizer", "engine overhead")
CATEGORIES = (GEMMS, ATTENTION, MEMORY, COMMUNICATION, OPTIMIZER, OVERHEAD)
# operands a kernel reads (besides the one it writes) for the binary aten ops
_BINARY = {"aten.add", "aten.sub", "aten.mul", "aten.div", "aten.where", "aten.masked_fill",
           "aten.maximum", "aten.minimum", "aten.lerp", "aten.index_add"}
_ROW_PARALLEL = ("output_proj", "o_proj", "out_proj", "w2", "down_proj", "dense_4h_to_h")


@dataclass(frozen=True)
class Machine:
    """What the timer knows about a GPU: its aiconfigurator-core system (None: roofline
    only), its dense peaks and datasheet bandwidth."""
    name: str
    system: str | None
    peak_flops: Fraction  # the plan's compute dtype
    fp8_flops: Fraction | None
    bandwidth: Fraction  # bytes/s, datasheet
    engine: str = tables.TRAINING_ENGINE
    # the tables' dtype of the plan's non-fp8 GEMMs and attention: bf16; None for an fp32
    # run (torch's fp32 matmuls, TF32 off by default: no measured table, the roofline)
    gemm_dtype: str | None = "bfloat16"
    # the linear layers' weights in fp8 (a served fp8 checkpoint: "fp8" per-tensor/channel
    # scales, "fp8_block" 128×128 blocks): their GEMMs at that table's rate; None: not
    linear_fp8: str | None = None
    # a served model's experts as aiconfigurator-core's MoE tables name their dtype
    # (layer_ops.MOE_DTYPES): each layer's routed experts one fused call from that table;
    # None (training, a scheme no table measured): the experts' GEMMs from the GEMM table
    moe_dtype: str | None = None

    @property
    def source(self) -> str:
        return "kernels" if self.system else "roofline"

    def memory_rate(self) -> tuple[Fraction, Fraction, str]:
        """(bytes/s, seconds per kernel, where from)."""
        if self.system:
            g = tables.system_spec(self.system)
            f = Fraction(g.get("mem_bw_empirical_scaling_factor", "0.8"))
            lat = Fraction(g.get("mem_empirical_constant_latency", "0"))
            return (self.bandwidth * f, lat,
                    f"aiconfigurator-core {tables.package_version()} {self.system}.yaml: "
                    f"{float(f):g} of the bandwidth, {float(lat) * 1e6:g} µs per kernel")
        return self.bandwidth * BANDWIDTH_DERATE, Fraction(0), \
            f"roofline: {float(BANDWIDTH_DERATE):g} of the datasheet bandwidth"


@dataclass(frozen=True)
class OpTime:
    name: str
    category: str
    seconds: Fraction  # all its instances in the pass (every block)
    source: str  # table, engine and version, or "roofline …"
    note: str = ""  # how a query left the table's grid, when it did


def gemm_seconds(machine: Machine, m: int, n: int, k: int, fp8: bool | str = False,
                 ) -> tuple[Fraction, str, str]:
    """One GEMM of M×K by K×N: (seconds, source, note); fp8 True or a table dtype name."""
    dtype = (fp8 if isinstance(fp8, str) else "fp8") if fp8 else machine.gemm_dtype
    if machine.system is not None and dtype:
        found = tables.gemm(machine.system, dtype, machine.engine)
        if found is not None:
            grid, src, kernel = found
            hit = grid(m, n, k)
            return Fraction(hit.seconds), f"{src} ({kernel})", hit.note
    # the roofline: the longer of the FLOPs and the operands' and result's bytes (a decode
    # step's GEMMs at M = B read their weights: compute-only, Llama-3.1-8B's TPOT came out
    # 0.08 ms on H100 against 5.6 ms for its weights at the bandwidth)
    return (batched_seconds(machine, 1, m, k, n, fp8),
            f"roofline: {float(ROOFLINE_DERATE):g} of the dense peak, "
            f"{float(BANDWIDTH_DERATE):g} of the bandwidth", "")


def _tp_shape(r: R.Matmul, m: int, n: int, p: int, tp: int) -> tuple[int, int, int]:
    """A linear layer's GEMM on one of tp ranks (Megatron's split): a row-parallel layer
    (the attention output, the MLP's down projection) splits its contraction, the others
    (column-parallel: Q/K/V, gate and up, the LM head's vocabulary) their output."""
    if tp == 1:
        return m, n, p
    if r.module.split(".")[-1] in _ROW_PARALLEL:
        return m, -(-n // tp), p
    return m, n, -(-p // tp)


def time_matmul(r: R.Matmul, v: dict, count: int, machine: Machine, tp: int = 1,
                rows: int | None = None) -> OpTime:
    """A GEMM record's instances; `rows` overrides M (the LM head on the last positions)."""
    m = product(r.m, v) if rows is None else rows
    n, p = product(r.n, v), product(r.p, v)
    m, n, p = _tp_shape(r, m, n, p, tp)
    batched = product(r.batch, v)
    # a served checkpoint's fp8 linear layers; not the MoE router, which engines keep in
    # the model dtype (vLLM's DeepseekV2MoE and Qwen3MoeSparseMoeBlock: the gate a
    # ReplicatedLinear with quant_config=None)
    fp8 = r.fp8 or (machine.linear_fp8 if r.component in (R.ATTN_PROJ, R.FFN)
                    and r.name != "router" else False)
    cat = ATTENTION if r.component == R.ATTN_CORE else GEMMS
    if batched > 1:  # one kernel for all instances: no table measures it
        return OpTime(r.name, cat, count * batched_seconds(machine, batched, m, n, p, fp8),
                      f"roofline (a batched GEMM: {float(ROOFLINE_DERATE):g} of the peak, "
                      f"{float(BANDWIDTH_DERATE):g} of the bandwidth)")
    s, src, note = gemm_seconds(machine, m, p, n, fp8)
    return OpTime(r.name, cat, s * count, src, note)


def batched_seconds(machine: Machine, batch: int, m: int, n: int, p: int, fp8) -> Fraction:
    """A batched matmul (cuBLAS's strided-batched GEMM for the unfused attention's per-head
    products, a grouped GEMM for a mixture's experts) is one kernel, which the tables do not
    measure (timing it as `batch` separate GEMMs would pay a kernel's fixed cost `batch`
    times: 256 experts' at decode): the longer of its FLOPs at ROOFLINE_DERATE of the peak
    and its operands' and result's bytes at BANDWIDTH_DERATE of the bandwidth."""
    peak = machine.fp8_flops if fp8 and machine.fp8_flops else machine.peak_flops
    width = 1 if fp8 else 2
    flops = 2 * batch * m * n * p
    moved = batch * (m * n + n * p + m * p) * width
    return max(Fraction(flops) / (peak * ROOFLINE_DERATE),
               Fraction(moved) / (machine.bandwidth * BANDWIDTH_DERATE))


def _useful_share(r: R.Matmul, v: dict) -> Fraction:
    """A window's (chunk's, top-k's) share of the full causal pairs."""
    plain = replace(r, window=False, chunk=False, topk=False, useful=None)
    full = plain.flops(v, R.USEFUL)
    return Fraction(r.flops(v, R.USEFUL), full) if full else Fraction(1)


def attention_seconds(machine: Machine, phase: str, batch: int, length: int, heads: int,
                      kv_heads: int, head_dim: int, kv_dtype: str = "bfloat16",
                      ) -> tuple[Fraction, str, str] | None:
    """One attention kernel (all heads of one layer): context (prefill: `length` tokens
    each attending causally) or generation (decode: one query attending `length` keys)."""
    if machine.system is None or machine.gemm_dtype is None:
        return None
    found = tables.attention(machine.system, phase, heads, kv_heads, head_dim, machine.engine,
                             "bfloat16", kv_dtype)
    if found is None:
        return None
    grid, src, kernel, (h0, _, d0) = found
    hit = grid(batch, length, scales=(True, True))
    s = Fraction(hit.seconds) * Fraction(heads, h0) * Fraction(head_dim, d0)
    if phase == "context" and length > grid.axes[1][-1]:
        s *= Fraction(length) / Fraction(int(grid.axes[1][-1]))  # causal work: quadratic in T
    note = "; ".join(x for x in (hit.note, "" if (h0, d0) == (heads, head_dim) else
                                 f"scaled from {h0} heads of {d0}") if x)
    return s, f"{src} ({kernel})", note


def fused_attention(records: list[R.Matmul], v: dict, count: int, machine: Machine,
                    tp: int, backward: bool, training: bool = False) -> OpTime | None:
    """One layer kind's fused attention core (its forward QKᵀ record first), or None when
    no table covers it."""
    qk = records[0]
    c_heads, kv = v["h"], v.get("h_kv", v["h"])
    d = product(qk.n, v)  # the contracted head size of QKᵀ
    got = attention_seconds(machine, "context", v["B"], v["T"], max(1, c_heads // tp),
                            max(1, kv // tp), d)
    if got is None:
        return None
    s, src, note = got
    s *= _useful_share(qk, v) * count
    if training and "fa3" in src and kv < c_heads:
        s *= FA2_OVER_FA3
        src += f"; × {FA2_OVER_FA3} for torch's FlashAttention-2 (FA3 paper: 1.5-2.0× faster)"
    if backward:
        s *= FA_BACKWARD_RATIO
        src += f"; backward {FA_BACKWARD_RATIO} × forward (FlashAttention-2, Algorithm 2)"
    return OpTime("attention (fused kernel)" + (" backward" if backward else ""), ATTENTION,
                  s, src, note)


def elementwise_bytes(e: R.Elementwise, v: dict, act_bytes: int) -> int:
    operands = 2 if e.op in _BINARY else 1
    return product(e.elements, v) * e.copies * (operands + 1) * act_bytes


def _residual_stream() -> frozenset:
    """The components that run on the residual stream (the parameters' dtype under
    autocast: fp32), the others on a matmul's output (autocast's bf16)."""
    from accounting.ledger.builder import common as C
    from accounting.architecture.config import NORMS
    return frozenset({*NORMS.values(), C.RESIDUAL, C.QK_NORM, C.GATED_NORM, C.RESIDUAL_SCALE,
                      C.EMBED_SCALE, C.POSITION_ADD, C.LOGIT_SCALE})


def time_elementwise(records, v: dict, machine: Machine, act_bytes: int, backward: bool,
                     fused: bool = False, tp: int = 1, matmul_bytes: int | None = None) -> OpTime:
    """The memory-bound ops of a pass: every record a kernel (eager torch), or each
    component of a block one fused kernel (`fused`: an engine's fused norm, rotary and
    activation kernels, vLLM's model_executor/layers/layernorm.py and activation.py).
    `act_bytes` per element of the residual stream's ops, `matmul_bytes` of the others (on
    a matmul's output: bf16 under autocast; None: act_bytes)."""
    rate, latency, src = machine.memory_rate()
    total_bytes, kernels, seen = 0, 0, set()
    stream = _residual_stream()
    for e in records:
        n = e.count(v)
        b = act_bytes if matmul_bytes is None or e.component in stream else matmul_bytes
        total_bytes += n * elementwise_bytes(e, v, b)
        if fused:
            key = (e.component, e.repeat)
            if key not in seen:
                seen.add(key)
                kernels += n
        else:
            kernels += n * e.copies
    factor = 2 if backward else 1
    s = Fraction(total_bytes * factor, tp) / rate + kernels * latency
    return OpTime("memory-bound ops" + (" backward" if backward else ""), MEMORY, s, src)
