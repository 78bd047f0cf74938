"""Time to first token and time per output token, from the ledger's counts.

Prefill (TTFT) of one prompt of P tokens: the forward matmuls with causal attention (the
useful count: P(P+1)/2 query-key pairs, what FlashAttention's causal kernels compute) and the
LM head on the last position only (a server samples one token), compute-bound at an MFU:
    TTFT = FLOPs / (tp · peak · MFU)      (pipeline stages run one after another for one
                                           request: PP does not shorten it)
Decode (TPOT), one step of B sequences at context t, as a roofline at a bandwidth efficiency:
    bytes  = per GPU, over the stages in turn: the weights (a routed expert's only when the
             step routes a token to it: E·(1 − (1 − k/E)^B) experts per layer under uniform
             routing, all of them once B·k ≥ 64·E; a looked-up table's B rows) plus
             the B sequences' KV cache at t (a window layer's min(t, W))
    TPOT   = max(bytes / (bandwidth · efficiency), FLOPs / (tp · peak · MFU))
The regime is that of an engine that captures CUDA graphs (vLLM, SGLang): eager decode in
transformers ran 59–83 ms per step for Llama-3.1-8B against 0.5–6.7 ms rooflines on an H200
(shared/gpu/README.md, Decode), launch-bound, not memory-bound.
Throughput: B tokens per TPOT for the replica (one batch in flight), divided by its GPUs.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from accounting.analysis.workload import analyze
from accounting.ledger import records as R
from accounting.ledger.builder.moe import expert_capacity
from accounting.planning.inference import (absorbed_decode_flops_expr, decode_flops_expr,
                                           experts_read, final_state_expr)
from accounting.planning.memory import values
from accounting.serving.kv import LayerKV


@dataclass(frozen=True)
class Timing:
    prompt: int
    position: int
    batch: int
    mfu: Fraction
    bandwidth_efficiency: Fraction
    peak_flops: Fraction  # per GPU
    bandwidth: Fraction  # bytes/s per GPU
    prefill_flops: int  # one prompt, causal, last-position logits
    ttft_seconds: Fraction
    decode_flops: int  # one step, B sequences
    weight_bytes_read: Fraction  # per GPU, all stages in turn (expected under uniform routing)
    kv_bytes_read: int  # per GPU, all stages in turn
    tpot_memory_seconds: Fraction
    tpot_compute_seconds: Fraction
    gpus: int
    # issue 39: TTFT and TPOT op by op from the engine's measured kernels (timing/serve.py
    # ServeTimes), when no --mfu is given and the GPU has tables; None: the roofline above
    kernels: object = None

    @property
    def timing_source(self) -> str:
        return "roofline" if self.kernels is None else self.kernels.source

    @property
    def tpot_seconds(self) -> Fraction:
        if self.kernels is not None:
            return self.kernels.tpot.seconds
        return max(self.tpot_memory_seconds, self.tpot_compute_seconds)

    @property
    def bound(self) -> str:
        return ("memory-bandwidth" if self.tpot_memory_seconds >= self.tpot_compute_seconds
                else "compute")

    @property
    def tokens_per_second(self) -> Fraction:
        return self.batch / self.tpot_seconds

    @property
    def tokens_per_second_per_gpu(self) -> Fraction:
        return self.tokens_per_second / self.gpus


def prefill_flops(config, prompt: int) -> int:
    """Forward matmul FLOPs of one prompt: causal (useful) attention, LM head on the last
    position only, and the gated DeltaNet layers' final state update (the cache's)."""
    a = analyze(config, prompt, 1, R.FORWARD, R.USEFUL)
    head = a.component_flops(R.USEFUL)[R.LM_HEAD]
    state = final_state_expr(config).evaluate(values(config, prompt, 1)) \
        if config.linear_key_heads is not None else 0
    return a.matmul_flops(R.USEFUL) - head + head // prompt + state


def decode_flops(config, batch: int, position: int) -> int:
    """One decode step's matmul FLOPs for B sequences at key length t (planning/inference.py's
    expressions; latent attention in its absorbed form, as engines decode it)."""
    v = values(config, position, batch)
    v["t"] = position
    if config.sliding_window is not None:
        v["t_W"] = min(position, config.sliding_window)
    if config.attention_chunk is not None:
        v["t_C"] = min(position, config.attention_chunk)
    if config.moe_capacity_factor is not None:
        v["C_1"] = expert_capacity(config.moe_capacity_factor, batch * config.experts_per_token,
                                   config.num_experts)
    absorbed = absorbed_decode_flops_expr(config)
    return (decode_flops_expr(config) if absorbed is None else absorbed).evaluate(v)


def expert_share(config, batch: int) -> Fraction:
    """The routed experts' share a decode step reads under uniform routing
    (planning/inference.py's experts_read, its expectation over E)."""
    read = experts_read(config, batch)
    return Fraction(1) if read is None else read[1] / config.num_experts


def timing(config, stages, caches: list[list[LayerKV]], tp: int, pp: int, prompt: int,
           position: int, batch: int, peak: Fraction, bandwidth: Fraction, mfu: Fraction,
           efficiency: Fraction, scheme, model_bytes: int, kernels=None) -> Timing:
    decode = decode_flops(config, batch, position)
    share = expert_share(config, batch)
    weights = Fraction(0)
    for st in stages:
        rows = Fraction(st.lookup_bytes * batch, config.vocab_size)  # B rows of the table
        weights += st.bytes - st.expert_bytes - st.lookup_bytes + st.expert_bytes * share \
            + min(rows, st.lookup_bytes)
    # the KV read, and each recurrent layer's state read and written once per step
    kv_read = batch * sum(c.bytes_per_token * (position if c.window is None
                                               else min(position, c.window)) + 2 * c.state_bytes
                          for layer in caches for c in layer)
    flops = prefill_flops(config, prompt)
    ttft = Fraction(flops) / (tp * peak * mfu) if kernels is None else kernels.ttft.seconds
    return Timing(prompt, position, batch, mfu, efficiency, peak, bandwidth, flops,
                  ttft, decode, weights, kv_read,
                  (weights + kv_read) / (bandwidth * efficiency),
                  Fraction(decode) / (tp * peak * mfu), tp * pp, kernels)
