"""A served model's time to first token and time per output token, op by op from the
measured kernels of the engine's own tables (timing/ops.py's rules; step.py's passes).

TTFT: one prompt of P tokens prefilled in chunks of the engine's max_num_batched_tokens
(vLLM's chunked prefill: each chunk's GEMMs at M = its tokens; the attention of all chunks
together is the whole prompt's causal attention — the chunks' prefix attentions add up to
it); the linear layers' GEMMs at the weights' dtype (an fp8 checkpoint at the fp8 table's
rate); with TP, two all-reduces per block (after attention and after the MLP, Megatron's
split; vLLM's RowParallelLinear) of the chunk's tokens × d_model from the engine's measured
custom all-reduce table.
TPOT: one decode step of the batch the engine runs (bounded by max_num_seqs), every
block's GEMMs at M = B, one generation-attention kernel per block at the step's key length,
the engine's fused memory-bound kernels, two all-reduces of B × d_model per block.
vLLM's TTFT adds its per-request CPU dispatch, 0.8 ms per layer: aiconfigurator-core's
own figure, "recalibrated at ~0.8ms/layer against the full silicon corpus"
(aiconfigurator_core/sdk/backends/vllm_backend.py, _prefill_dispatch_overhead_ms, 0.12.0;
its SGLang backend adds none). No per-step decode overhead is added (none measured).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction

from accounting.ledger.ledger import ledger as build_ledger
from accounting.timing import ops as O
from accounting.timing import step as S
from accounting.timing import tables

VLLM_DISPATCH_PER_LAYER = Fraction(8, 10_000)  # seconds (0.8 ms), the docstring's source
FP8_TABLES = {"fp8_tensor": "fp8", "fp8_channel": "fp8", "fbgemm_fp8": "fp8",
              "fp8_block": "fp8_block"}


@dataclass(frozen=True)
class ServeTimes:
    ttft: S.Timed
    tpot: S.Timed

    @property
    def source(self) -> str:
        return "kernels" if self.ttft.source == self.tpot.source == "kernels" else "roofline"


def serving_ledger(config):
    """The model as an engine runs it: a fused attention kernel (no T×T softmax ops)."""
    try:
        config = dataclasses.replace(config, attention="sdpa")
    except Exception:  # a config that only runs naive attention keeps it (noqa: BLE001)
        pass
    return build_ledger(config, "cuda", param_dtype="bf16")


def machine(card, kernel_tables: str, scheme_kind: str) -> O.Machine:
    """`kernel_tables`: the engine's folder of aiconfigurator-core's tables (its record's
    kernel_tables, serving/engines.py)."""
    from accounting.units import BF16, FP8, TERA
    fp8 = card.peak_tflops[FP8] * TERA if FP8 in card.peak_tflops else None
    from accounting.timing.layer_ops import MOE_DTYPES
    return O.Machine(card.name, tables.system_of(card.name), card.peak_tflops[BF16] * TERA,
                     fp8, card.bandwidth_tbs * TERA, kernel_tables,
                     linear_fp8=FP8_TABLES.get(scheme_kind) if fp8 else None,
                     moe_dtype=MOE_DTYPES.get(scheme_kind)
                     if fp8 or scheme_kind not in FP8_TABLES else None)


def allreduce(machine: O.Machine, elements: int, tp: int) -> tuple[Fraction, str]:
    """One all-reduce of `elements` bf16 values over tp GPUs of a node: the engine's custom
    all-reduce table (CUDA-graph backend), else NCCL's; else a ring at the NVLink roofline
    is not guessed: 0, labelled."""
    if tp == 1:
        return Fraction(0), ""
    if machine.system is not None:
        found = tables.collective(machine.system, "all_reduce", tp, machine.engine)
        if found is not None:
            grid, src = found
            return Fraction(grid(elements).seconds), str(src)
    return Fraction(0), "no all-reduce table: not timed"


def _comm(machine, config, tokens: int, tp: int, blocks: int) -> O.OpTime | None:
    s, src = allreduce(machine, tokens * config.d_model, tp)
    if tp == 1:
        return None
    return O.OpTime("TP all-reduces (2 per block)", O.COMMUNICATION, 2 * blocks * s, src)


def serve_times(config, card, engine, scheme_kind: str, tp: int, prompt: int,
                chunk: int, batch: int, position: int, kv_dtype: str = "bfloat16") -> ServeTimes:
    """`engine`: its record (serving/engines.py): the tables it reads (kernel_tables) and
    whether aiconfigurator-core's backend adds its prefill dispatch (prefill_dispatch)."""
    lg = serving_ledger(config)
    m = machine(card, engine.kernel_tables, scheme_kind)
    full = S.prefill(lg, lg.values(prompt, 1), m, tp)
    keep = [o for o in full.ops if o.category != O.GEMMS]
    if chunk >= prompt:
        gemms = [o for o in full.ops if o.category == O.GEMMS]
    else:
        whole, rest = divmod(prompt, chunk)
        gemms = [O.OpTime(f"{o.name} (×{whole} chunks of {chunk})", o.category,
                          o.seconds * whole, o.source, o.note)
                 for o in S.prefill(lg, lg.values(chunk, 1), m, tp).ops if o.category == O.GEMMS]
        if rest:
            gemms += [O.OpTime(f"{o.name} (last chunk of {rest})", o.category, o.seconds,
                               o.source, o.note)
                      for o in S.prefill(lg, lg.values(rest, 1), m, tp).ops
                      if o.category == O.GEMMS]
    chunks = -(-prompt // chunk)
    comm = [c for c in (_comm(m, config, min(prompt, chunk), tp, config.num_layers),) if c]
    comm = [dataclasses.replace(c, seconds=c.seconds * chunks) for c in comm]
    extra = []
    if engine.prefill_dispatch:
        extra.append(O.OpTime("vLLM per-request dispatch (0.8 ms per layer)", O.OVERHEAD,
                              VLLM_DISPATCH_PER_LAYER * config.num_layers,
                              f"aiconfigurator-core {tables.package_version()} "
                              "sdk/backends/vllm_backend.py _prefill_dispatch_overhead_ms"))
    ttft = S.Timed(tuple(gemms + keep + comm + extra), m)
    dec = S.decode(lg, lg.values(1, batch), position, m, tp,
                   "fp8" if kv_dtype.startswith("fp8") else "bfloat16")
    comm = [c for c in (_comm(m, config, batch, tp, config.num_layers),) if c]
    return ServeTimes(ttft, S.Timed(dec.ops + tuple(comm), m))
