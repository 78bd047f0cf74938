"""Inference with a KV cache: cache size, prefill FLOPs, decode FLOPs at position t, and a
roofline estimate of the time per decode step.

Everything is derived from the ledger (accounting/builder.py):
  - the cache holds what the attention's cache entries name (K after RoPE and V: h_kv·d_k
    elements each per token, in each of the L layers);
  - decoding the token at position t runs every forward matmul with a query length of 1
    and a key length of t: in each record the T of the query side (its m) becomes 1 and, in
    the causal (query × key) records, the T on the key side becomes t.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from accounting import records as R
from accounting.analysis import analyze
from accounting.config import ModelConfig
from accounting.ledger import ledger
from accounting.planning.memory import Precision, values
from accounting.symbols import Expr
from accounting.units import FLOPS_PER_MAC


def kv_elements_per_token(config: ModelConfig) -> Expr:
    """Cached elements per token: the ledger's cache entries in every layer."""
    return sum((e.expr() for e in ledger(config).cache), Expr())


def _decode_factors(r: R.Matmul) -> tuple[str, ...]:
    """The record's factors for one query at key length t."""
    assert "T" in r.m, r  # the query side
    m = tuple(f for f in r.m if f != "T")  # query length 1
    n = tuple("t" if f == "T" else f for f in r.n)
    p = tuple("t" if f == "T" else f for f in r.p)
    if not r.causal:
        assert "T" not in r.n + r.p, r  # only the attention core has a key length
    return r.batch + m + n + p


def decode_flops_expr(config: ModelConfig) -> Expr:
    """Matmul FLOPs to decode one token at position t (it attends to t keys) for B sequences."""
    total = Expr()
    for r in ledger(config).forward:
        e = Expr.of(FLOPS_PER_MAC, _decode_factors(r))
        total = total + (e.times(r.repeat) if r.repeat else e)
    return total


def weights_read_expr(config: ModelConfig) -> Expr:
    """Parameter elements a decode step reads: every weight, except that of a table only
    looked up (the token embedding when untied, a learned position table) it reads one row
    per sequence (B·d_model)."""
    total = Expr()
    for p in ledger(config).params:
        e = Expr.of(1, ("B", "d_model")) if p.lookup and not p.matmul_weight else Expr.of(1, p.shape)
        total = total + (e.times(p.repeat) if p.repeat else e)
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
    per_token = kv_elements_per_token(config).evaluate(v) * size
    decode = decode_flops_expr(config).evaluate(v)
    weights = weights_read_expr(config).evaluate(v) * size
    kv_read = batch * t * per_token
    return Inference(config, batch, seq, t, size, per_token, batch * seq * per_token,
                     analyze(config, seq, batch, "forward").matmul_flops(), decode, weights,
                     kv_read, Roofline(decode, weights + kv_read, peak_flops, bandwidth))
