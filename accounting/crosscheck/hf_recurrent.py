"""transformers' recurrent layers beside the ledger's (issue 31): what their torch paths
run that the ledger does not count, subtracted with a stated reason (hf_compare.py)."""
from __future__ import annotations

from collections import defaultdict

from accounting.analysis.workload import Analysis
from accounting.crosscheck.mapping import Split
from accounting.crosscheck.result import Check
from accounting.ledger.builder.delta import STATE_UPDATE
from accounting.ledger import records as R
from accounting.units import grouped


def conv_surplus(a: Analysis) -> dict[int, int]:
    """FLOPs transformers' torch fallback of the depthwise causal conv runs beyond the
    ledger's, per block: causal_conv1d_fn (modeling_lfm2.py, modeling_qwen3_next.py) is
    F.conv1d with padding K − 1, T + K − 1 outputs per channel of which it keeps the first
    T; the ledger counts the T a causal conv kernel computes. Each conv record's FLOPs at
    T = K − 1: 2·B·C·(K − 1)·K."""
    c, lg = a.config, a.ledger
    if c.conv_kernel is None or c.conv_kernel == 1:
        return {}
    v = {**a.values, "T": c.conv_kernel - 1}
    layers = dict(lg.groups)
    out: dict[int, int] = defaultdict(int)
    for r in lg.forward:
        if r.component == R.RECURRENT and r.n == ("K",):
            for i in layers[r.repeat]:
                out[i] += r.flops(v)
    return dict(out)


def state_surplus(a: Analysis) -> dict[int, int]:
    """transformers' torch_chunk_gated_delta_rule updates the state after the last chunk
    too (its final state, returned for the cache): one more Kᵀ·V_new per gated DeltaNet
    layer than the ledger's N_c − 1 (a forward without a cache has no use for it), its
    FLOPs the state-update record's at N_c − 1 = 1: 2·B·h_lv·d_lk·C_l·d_lv."""
    lg = a.ledger
    v = {**a.values, "N_c-1": 1}
    layers = dict(lg.groups)
    out: dict[int, int] = defaultdict(int)
    for r in lg.forward:
        if r.name == STATE_UPDATE:
            for i in layers[r.repeat]:
                out[i] += r.flops(v)
    return dict(out)


CONV_CLAIM = ("transformers' depthwise conv1d (the torch fallback causal_conv1d_fn: F.conv1d "
              "with padding K − 1) computes T + K − 1 outputs per channel and keeps T: its "
              "count less 2·B·C·(K − 1)·K per conv layer is compared (the ledger counts the T "
              "outputs a causal conv kernel computes)")
STATE_CLAIM = ("transformers' chunked delta rule (torch_chunk_gated_delta_rule) updates the "
               "state after the last chunk as well, for its cache: its count less that one "
               "Kᵀ·V_new per gated DeltaNet layer (2·B·h_lv·d_lk·C_l·d_lv) is compared (the "
               "ledger's forward has no cache: N_c − 1 updates)")


def surpluses(a: Analysis) -> list[tuple[str, str, dict[int, int]]]:
    """(claim, what the subtracted FLOPs are, per block) for each form transformers' torch
    path runs beyond the ledger's."""
    out = []
    conv, state = conv_surplus(a), state_surplus(a)
    if conv:
        out.append((CONV_CLAIM, "for the K − 1 dropped outputs", conv))
    if state:
        out.append((STATE_CLAIM, "for the final state update", state))
    return out


def less_surplus(s: Split, surplus: dict[int, int], claim: str, what: str) -> tuple[Split, Check]:
    """transformers' recurrent-mixing counts less a stated surplus, per block."""
    core = R.RECURRENT
    got = [layer[core] for layer in s.layers]
    layers = tuple({**layer, core: layer[core] - surplus.get(i, 0)} for i, layer in enumerate(s.layers))
    total = sum(surplus.values())
    return Split(layers, s.top, s.elsewhere), Check(
        claim, f"{len(surplus)} layers, {grouped(sum(got))} measured, {grouped(total)} {what}",
        all(g >= surplus.get(i, 0) for i, g in enumerate(got)))


def recurrent_states(a: Analysis, m, itemsize: int) -> tuple[int, str]:
    """The recurrent layers' cache (hf_compare.py's KV check): the ledger's per-sequence
    entries in bytes, at the model's element size (float32 where the model keeps them so),
    and the detail naming transformers' state tensors (m.states: shape, bytes/element)."""
    v = a.values
    state_size = (m.states[0][1] if m.states else itemsize) or 4
    analytic = sum(int(e.expr().value(v)) * (4 if e.fp32 else state_size)
                   for e in a.ledger.cache if e.per_sequence) * a.batch
    if not m.states:
        return analytic, ""
    held = "; ".join(f"{list(s)}" for s in sorted({s for s, _ in m.states}))
    return analytic, (f"; and {len(m.states)} recurrent-layer states ({held}: conv windows of "
                      f"the last K inputs, recurrent states), per sequence whatever T")
