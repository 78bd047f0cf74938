"""A training step, a prefill and a decode step timed op by op (timing/ops.py's rules) from
the ledger the plan already built: nothing here lists an architecture's ops.

A training step on one GPU = the forward records, their gradient records, the records the
backward runs again (recomputation), the memory-bound ops forward and backward, autocast's
weight casts, and the optimizer's update (the bytes its record says the update moves:
Optimizer.update_bytes, planning/optimizers.py; AdamW's foreach ops, each reading its operands
and writing its result), one after another (one CUDA stream: nothing of one GPU's own work
overlaps).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction

from accounting.ledger import records as R
from accounting.ledger.builder import common as B
from accounting.timing import layer_ops as LO
from accounting.timing import ops as O
from accounting.units import DTYPE_BYTES


@dataclass(frozen=True)
class Timed:
    """Op times of one pass or step, and their sum."""
    ops: tuple[O.OpTime, ...]
    machine: O.Machine

    @property
    def seconds(self) -> Fraction:
        return sum((o.seconds for o in self.ops), Fraction(0))

    def by_category(self) -> dict[str, Fraction]:
        out = {c: Fraction(0) for c in O.CATEGORIES}
        for o in self.ops:
            out[o.category] += o.seconds
        return out

    @property
    def source(self) -> str:
        """"kernels" when most of the GEMM and attention time came from measured tables
        (the rest, a batched GEMM or a GPU's missing table, by the roofline: roofline_share
        says how much), else "roofline"."""
        return "kernels" if self.roofline_share < Fraction(1, 2) else "roofline"

    @property
    def roofline_share(self) -> Fraction:
        compute = [o for o in self.ops if o.category in (O.GEMMS, O.ATTENTION)]
        total = sum((o.seconds for o in compute), Fraction(0))
        roof = sum((o.seconds for o in compute if o.source.startswith("roofline")), Fraction(0))
        return roof / total if total else Fraction(1)

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(o.source.split(" (")[0] for o in self.ops))

    @property
    def notes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f"{o.name}: {o.note}" for o in self.ops if o.note))


def _fused(ledger) -> set:
    """(per block?, module) of the attention cores a fused kernel runs."""
    return {(r.per_layer, r.module) for r in ledger.forward
            if r.component == R.ATTN_CORE and r.recompute_in_backward}


def matmul_ops(records, v: dict, machine: O.Machine, fused: set, tp: int, backward: bool,
               skip=lambda r: False, head_rows: int | None = None,
               training: bool = True) -> list[O.OpTime]:
    out, done = [], set()
    for r in records:
        key = (r.per_layer, r.module)
        count = r.count(v)
        if key in fused and r.component == R.ATTN_CORE:
            if (key, r.repeat) in done:
                continue
            t = O.fused_attention([r], v, count, machine, tp, backward, training)
            if t is not None:  # else (no table) its GEMMs one by one, below
                done.add((key, r.repeat))
                out.append(t)
                continue
        gradients = r.gradients() if backward else (r,)
        for g in gradients:
            if skip(r) and g.name.endswith(" dW"):
                continue
            rows = head_rows if r.component == R.LM_HEAD else None
            out.append(O.time_matmul(g, v, count, machine, tp, rows))
    return out


def training_step(ledger, v: dict, machine: O.Machine, precision, optimizer,
                  trained_params: int | None = None, tp: int = 1) -> Timed:
    """One step of one micro-batch (v's B and T) on one GPU, its optimizer's update included
    (`optimizer`: its record, planning/optimizers.py: its name and update_bytes)."""
    fused = _fused(ledger)
    frozen = set()
    if ledger.adapters is not None:  # LoRA's frozen base: no weight gradient (step.py's rule)
        trained = {(p.per_layer, p.module) for p in ledger.params if not p.frozen}
        frozen = {r for r in ledger.forward
                  if r.grads == ("dX", "dW") and (r.per_layer, r.module) not in trained}
    out = matmul_ops(ledger.forward, v, machine, fused, tp, False)
    out += matmul_ops(ledger.forward, v, machine, fused, tp, True, skip=lambda r: r in frozen)
    out += [O.OpTime(f"{o.name} (recomputed)", o.category, o.seconds, o.source, o.note)
            for o in matmul_ops(ledger.recomputed, v, machine, fused, tp, False)]
    # the residual stream's dtype (fp32 under autocast: the norms and adds run on it), the
    # other ops on autocast's bf16 matmul outputs
    act = DTYPE_BYTES[precision.activation_dtype]
    low = DTYPE_BYTES[R.BF16] if precision.autocast is not None else act
    out.append(O.time_elementwise(ledger.elementwise, v, machine, act, False, tp=tp,
                                  matmul_bytes=low))
    out.append(O.time_elementwise(ledger.elementwise, v, machine, act, True, tp=tp,
                                  matmul_bytes=low))
    rate, latency, src = machine.memory_rate()
    if precision.autocast is not None:  # autocast's bf16 copy of each weight, each forward,
        # and each weight's bf16 gradient cast into its fp32 .grad in the backward
        weights = sum(p.count(v) * p.numel(v) for p in ledger.params if p.matmul_weight)
        cast = 2 * weights * (DTYPE_BYTES[precision.param_dtype] + DTYPE_BYTES[R.BF16])
        out.append(O.OpTime("autocast weight and gradient casts", O.MEMORY,
                            Fraction(cast, tp) / rate, src))
    # the loss: F.cross_entropy = log_softmax + nll_loss over the B·T·V logits, in fp32
    # (transformers' loss and model/ upcast them): forward the cast (read the logits, write
    # fp32), log_softmax's two reads (max, then the sum of exponentials) and its write;
    # backward nll_loss_backward's fp32 gradient, log_softmax_backward's two reads and a
    # write, the cast back to the logits' dtype
    logits = v["B"] * v["T"] * v["V"]
    lb = DTYPE_BYTES[R.BF16] if precision.autocast is not None else DTYPE_BYTES[precision.param_dtype]
    per = (lb + 4) + 3 * 4 + 4 + 3 * 4 + (4 + lb)
    out.append(O.OpTime("cross-entropy loss (forward and backward)", O.MEMORY,
                        Fraction(logits * per, tp) / rate + 6 * latency, src))
    n = trained_params if trained_params is not None else sum(
        p.count(v) * p.numel(v) for p in ledger.params if not p.frozen)
    out.append(O.OpTime(f"{optimizer.name} update", O.OPTIMIZER,
                        Fraction(n * optimizer.update_bytes(precision), tp) / rate, src))
    return Timed(tuple(out), machine)


def prefill(ledger, v: dict, machine: O.Machine, tp: int = 1) -> Timed:
    """One forward pass over B prompts of T tokens, the LM head on the last position of
    each only (a server samples one token); an engine's fused memory-bound kernels."""
    fused = _fused(ledger) or {(r.per_layer, r.module) for r in ledger.forward
                               if r.component == R.ATTN_CORE}  # engines run a fused kernel
    moe, covered, notes = LO.routed_experts(ledger.forward, v, machine, tp)
    gdn, mixers = LO.gated_deltanet(ledger, v, machine, tp, "context", v["B"], v["T"])
    records = LO.outside_delta(LO.not_covered(ledger.forward, covered), mixers)
    mla = _latent(ledger, v, machine, tp, "context", v["B"], v["T"], "bfloat16")
    if mla is not None:  # the MLA table's kernel in place of the ledger's QKᵀ and scores·V
        records = [r for r in records if _latent_key(r) not in _latent_cores(ledger)]
    out = _noted(matmul_ops(records, v, machine, fused, tp, False, head_rows=v["B"],
                            training=False), notes)
    out += moe + gdn + ([mla] if mla is not None else [])
    out.append(O.time_elementwise(_outside_kernels(ledger, covered, mixers), v, machine,
                                  DTYPE_BYTES[R.BF16], False, fused=True, tp=tp))
    return Timed(tuple(out), machine)


def _outside_kernels(ledger, experts: set, mixers: set) -> list:
    """The memory-bound ops outside the attention, fused-MoE and gated DeltaNet kernels
    the tables timed."""
    return LO.outside_delta(LO.outside_experts(_outside_attention(ledger), experts), mixers)


def _latent(ledger, v: dict, machine: O.Machine, tp: int, phase: str, batch: int,
            length: int, kv_dtype: str) -> O.OpTime | None:
    """Every latent-attention layer's kernel from the MLA table (None: no table, or not
    latent attention)."""
    if "d_kv_a" not in v:
        return None
    cores = _latent_cores(ledger)
    first = {}
    for r in ledger.forward:
        first.setdefault(_latent_key(r), r)
    layers = sum(first[k].count(v) for k in cores)
    share = Fraction(1)
    if "k_I" in v:  # DeepSeek-V3.2's indexer keeps k_I keys a query (the sparse kernel's)
        if phase == "generation":
            length = min(length, v["k_I"])
        else:
            share = O._useful_share(first[min(cores)], v)
    got = LO.latent_attention(machine, phase, batch, length, v, tp, kv_dtype, layers)
    return got if got is None or share == 1 else dataclasses.replace(
        got, seconds=got.seconds * share, note="; ".join(filter(None, (
            got.note, f"× {float(share):.3g}, the indexer's top-{v['k_I']} share of the pairs"))))


def _latent_key(r) -> tuple:
    return r.per_layer, r.module, r.repeat


def _latent_cores(ledger) -> set:
    """The latent attention's per-head products (batched over the heads), not the DSA
    indexer's scores (batched over the tokens only)."""
    return {_latent_key(r) for r in ledger.forward
            if r.component == R.ATTN_CORE and "h" in r.batch}


def _noted(ops: list, notes: list[str]) -> list:
    """The routed experts' GEMM-table times, with why the MoE table did not time them."""
    if not notes:
        return ops
    return [dataclasses.replace(o, note="; ".join(filter(None, (o.note, *notes))))
            if o.name.startswith("expert W") else o for o in ops]


def _outside_attention(ledger) -> list:
    """The memory-bound ops an engine runs outside its fused attention kernel: the attention
    core's own (scale, mask, softmax, sinks, a T×T matrix each when the ledger's attention is
    unfused, as gpt-oss's eager attention with sinks is) run inside the kernel that the
    attention table times (vLLM's FlashAttention/Triton backends take the sinks as an input),
    so they are not charged twice (a 131k gpt-oss prompt was 534 s of T×T traffic)."""
    return [e for e in ledger.elementwise
            if not (e.per_layer and e.component in _IN_ATTENTION_KERNEL)]


# the attention core's own elementwise ops, per block (the builder's component names): a
# per-pass soft-cap is the final logits', outside the kernel
_IN_ATTENTION_KERNEL = frozenset((B.ATTN_SCALE, B.CAUSAL_MASK, B.SOFTMAX, B.ALIBI, B.SOFTCAP))


def prefill_eager(ledger, v: dict, machine: O.Machine) -> Timed:
    """transformers' own forward pass (eager torch: SDPA's FlashAttention-2, every
    memory-bound op its own kernel), the LM head on the last positions only."""
    fused = _fused(ledger) or {(r.per_layer, r.module) for r in ledger.forward
                               if r.component == R.ATTN_CORE}
    out = matmul_ops(ledger.forward, v, machine, fused, 1, False, head_rows=v["B"],
                     training=True)
    out.append(O.time_elementwise(ledger.elementwise, v, machine, DTYPE_BYTES[R.BF16], False))
    return Timed(tuple(out), machine)


def decode(ledger, v: dict, position: int, machine: O.Machine, tp: int = 1,
           kv_dtype: str = "bfloat16", windows: dict | None = None) -> Timed:
    """One decode step of v's B sequences (v at T = 1) each attending `position` cached keys
    (a window layer min(position, W)): the linear layers' GEMMs at M = B, one generation-
    attention kernel per layer from the measured table (else its KV bytes at the bandwidth),
    the memory-bound ops as an engine's fused kernels."""
    rate, _, src = machine.memory_rate()
    out, covered, notes = LO.routed_experts(ledger.forward, v, machine, tp)
    gdn, mixers = LO.gated_deltanet(ledger, v, machine, tp, "generation", v["B"], 1)
    scans, states = LO.recurrent_decode(ledger, v, machine, tp, mixers)
    mla = _latent(ledger, v, machine, tp, "generation", v["B"], position, kv_dtype)
    out += gdn + scans + ([mla] if mla is not None else [])
    done = set()
    for r in LO.outside_scan(LO.outside_delta(LO.not_covered(ledger.forward, covered),
                                              mixers), states):
        count = r.count(v)
        if r.component != R.ATTN_CORE:
            out += _noted([O.time_matmul(r, v, count, machine, tp)], notes)
            continue
        if mla is not None and _latent_key(r) in _latent_cores(ledger):
            continue
        key = (r.per_layer, r.module, r.repeat)
        if key in done:
            continue
        done.add(key)
        keys = position if not r.window else min(position, v.get("W", position))
        if r.chunk:
            keys = min(position, v.get("C_a", position))
        heads, kv, d = v["h"], v.get("h_kv", v["h"]), product_n(r, v)
        if "d_kv_a" in v:  # latent attention: engines decode it absorbed, reading the latent
            out.append(_mla_decode(v, keys, count, machine, tp, kv_dtype))
            continue
        got = O.attention_seconds(machine, "generation", v["B"], keys, max(1, heads // tp),
                                  max(1, kv // tp), d, kv_dtype)
        if got is not None:
            s, where, note = got
            out.append(O.OpTime("attention (decode kernel)", O.ATTENTION, s * count, where, note))
        else:  # the K and V of every cached key read once
            kv_bytes = 2 * v["B"] * keys * max(1, kv // tp) * d * 2
            out.append(O.OpTime("attention (decode, KV read)", O.ATTENTION,
                                Fraction(kv_bytes * count) / rate, src))
    out.append(O.time_elementwise(LO.outside_scan(_outside_kernels(ledger, covered, mixers),
                                                  states), v, machine, DTYPE_BYTES[R.BF16],
                                  False, fused=True, tp=tp))
    return Timed(tuple(out), machine)


def _mla_decode(v: dict, keys: int, count: int, machine: O.Machine, tp: int,
                kv_dtype: str) -> O.OpTime:
    """Latent attention decoded absorbed (vLLM's and SGLang's MLA kernels): every query head
    of the rank against each cached latent of r_kv + d_rope values, and the same latents
    again as values (r_kv): the longer of those FLOPs at the roofline's share of the peak
    and the cache read once at its share of the bandwidth. aiconfigurator-core's MLA tables
    are not read yet: labelled roofline."""
    heads = max(1, v["h"] // tp)
    width = 1 if kv_dtype.startswith("fp8") else 2
    flops = 2 * v["B"] * heads * keys * (v["d_kv_a"] + v["r_kv"])
    moved = v["B"] * keys * v["d_kv_a"] * width
    s = max(Fraction(flops) / (machine.peak_flops * O.ROOFLINE_DERATE),
            Fraction(moved) / (machine.bandwidth * O.BANDWIDTH_DERATE))
    return O.OpTime("latent attention (decode, absorbed)", O.ATTENTION, s * count,
                    f"roofline (latent attention: {float(O.ROOFLINE_DERATE):g} of the peak, "
                    f"{float(O.BANDWIDTH_DERATE):g} of the bandwidth)")


def product_n(r: R.Matmul, v: dict) -> int:
    from accounting.ledger.symbols import product
    return product(r.n, v)
