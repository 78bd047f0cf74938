"""Inference with a KV cache: cache size, prefill FLOPs, decode FLOPs at position t, and a
roofline estimate of the time per decode step.

Everything is derived from the matmul records of accounting/matmuls.py:
  - the cache holds the outputs of the K and V projection records (their p dimension per
    token, in each of the L layers);
  - decoding the token at position t runs every forward matmul with a query length of 1
    and a key length of t: in each record the T of the query side (its m) becomes 1 and, in
    the causal (query × key) records, the T on the key side becomes t.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from accounting import matmuls, params
from accounting.analysis import analyze
from accounting.config import ModelConfig
from accounting.planning.expr import Expr
from accounting.planning.memory import Precision, values
from accounting.units import FLOPS_PER_MAC

CACHED = ("K projection", "V projection")  # the forward records whose outputs are cached


def kv_elements_per_token() -> Expr:
    """Cached elements per token: the K and V projections' outputs in every layer."""
    total = Expr()
    for name in CACHED:
        r = matmuls.MATMULS[("forward", name)]
        assert r.m == ("B", "T"), r  # one output row of p elements per token
        e = Expr.of(1, r.p)
        total = total + (e.times("L") if r.per_layer else e)
    return total


def _decode_factors(r: matmuls.Matmul) -> tuple[str, ...]:
    """The record's factors for one query at key length t."""
    assert "T" in r.m, r  # the query side
    m = tuple(f for f in r.m if f != "T")  # query length 1
    n = tuple("t" if f == "T" else f for f in r.n)
    p = tuple("t" if f == "T" else f for f in r.p)
    if not r.causal:
        assert "T" not in r.n + r.p, r  # only the attention core has a key length
    return r.batch + m + n + p


def decode_flops_expr() -> Expr:
    """Matmul FLOPs to decode one token at position t (it attends to t keys) for B sequences."""
    total = Expr()
    for r in matmuls.matmuls("forward"):
        e = Expr.of(FLOPS_PER_MAC, _decode_factors(r))
        total = total + (e.times("L") if r.per_layer else e)
    return total


def weights_read_expr() -> Expr:
    """Parameter elements a decode step reads: every weight except the embedding table, of
    which it reads one row per sequence (B·d_model)."""
    total = Expr.of(1, ("B", "d_model"))
    for p in params.PARAMS:
        if p.component != params.EMBEDDING:
            e = Expr.of(1, p.shape)
            total = total + (e.times("L") if p.per_layer else e)
    return total


@dataclass(frozen=True)
class Roofline:
    flops: int
    bytes: int  # weights + KV cache read
    peak_flops: Fraction | None
    bandwidth: Fraction | None

    @property
    def compute_seconds(self) -> Fraction | None:
        return None if self.peak_flops is None else Fraction(self.flops) / self.peak_flops

    @property
    def memory_seconds(self) -> Fraction | None:
        return None if self.bandwidth is None else Fraction(self.bytes) / self.bandwidth

    @property
    def seconds(self) -> Fraction | None:
        if self.compute_seconds is None or self.memory_seconds is None:
            return None
        return max(self.compute_seconds, self.memory_seconds)

    @property
    def bound(self) -> str | None:
        if self.seconds is None:
            return None
        return "memory-bandwidth" if self.memory_seconds >= self.compute_seconds else "compute"

    @property
    def intensity(self) -> Fraction:
        """FLOPs per byte moved."""
        return Fraction(self.flops, self.bytes)

    @property
    def ridge(self) -> Fraction | None:
        """FLOPs per byte at which the two bounds meet (peak / bandwidth)."""
        if self.peak_flops is None or self.bandwidth is None:
            return None
        return self.peak_flops / self.bandwidth


@dataclass(frozen=True)
class Inference:
    config: ModelConfig
    batch: int
    seq: int  # context held in the cache
    position: int  # the decoded token's position t (1-based: it attends to t keys)
    bytes_per_element: int
    kv_bytes_per_token: int
    kv_bytes: int  # for (batch, seq)
    prefill_flops: int  # forward matmuls over seq tokens (logits for every position)
    decode_flops: int  # at position t, all B sequences
    weight_bytes_read: int
    kv_bytes_read: int  # B·t tokens
    roofline: Roofline


def inference(config: ModelConfig, batch: int, seq: int, precision: Precision,
              position: int | None = None, peak_flops: Fraction | None = None,
              bandwidth: Fraction | None = None) -> Inference:
    t = seq if position is None else position
    v = values(config, seq, batch)
    v["t"] = t
    size = precision.inference_bytes
    per_token = kv_elements_per_token().evaluate(v) * size
    decode = decode_flops_expr().evaluate(v)
    weights = weights_read_expr().evaluate(v) * size
    kv_read = batch * t * per_token
    return Inference(config, batch, seq, t, size, per_token, batch * seq * per_token,
                     analyze(config, seq, batch, "forward").matmul_flops(), decode, weights,
                     kv_read, Roofline(decode, weights + kv_read, peak_flops, bandwidth))
