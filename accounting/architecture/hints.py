"""A hint for a bad head count: a nearby one that divides d_model (config.py's check)."""
from __future__ import annotations


def divisor_hint(n: int, target: int, positions: str, kv_heads: int | None = None) -> str:
    """' (e.g. 24)': a nearby head count that divides n and passes the other checks (an even
    head dimension for RoPE, whole groups of the given KV heads); bounded work however
    large n is."""
    best = None
    for delta in range(0, 10_000):
        for d in (target - delta, target + delta):
            if 0 < d <= n and n % d == 0 and (positions != "rope" or (n // d) % 2 == 0) \
                    and (kv_heads is None or d % kv_heads == 0):
                best = d
                break
        if best:
            break
    return f" (e.g. {best})" if best else ""
