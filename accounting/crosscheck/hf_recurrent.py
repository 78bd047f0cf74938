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


def conv_backward_surplus(a: Analysis) -> dict[int, int]:
    """FLOPs FlopCounterMode counts for the backward of transformers' depthwise conv beyond
    the ledger's, per block. Its conv_backward_flop (torch 2.13's torch/utils/flop_counter.py,
    "details involving ... groups ... I skip") counts grad_input as the conv over the
    T + K − 1 padded outputs, 2·B·C·K·(T + K − 1), and grad_weight as a dense conv of the
    transposed input and gradient, ignoring groups: 2·B·C²·K·(T + K − 1), C times a
    depthwise conv's; the ledger counts dX and dW of the T outputs, 2·B·T·C·K each. Each
    conv record's FLOPs F(T) = 2·B·T·C·K: the surplus is (1 + C)·F(T + K − 1) − 2·F(T)."""
    c, lg = a.config, a.ledger
    if c.conv_kernel is None:
        return {}
    K, v = c.conv_kernel, a.values
    wide = {**v, "T": v["T"] + K - 1}
    layers = dict(lg.groups)
    out: dict[int, int] = defaultdict(int)
    for r in lg.forward:
        if r.component == R.RECURRENT and r.n == ("K",):
            f, f_wide = r.flops(v), r.flops(wide)
            channels = f // (2 * v["B"] * v["T"] * K)
            for i in layers[r.repeat]:
                out[i] += (1 + channels) * f_wide - 2 * f
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


def kda_surplus(a: Analysis) -> dict[int, int]:
    """What transformers' torch path of Kimi Delta Attention (chunk_kimi_delta_attention,
    modeling_kimi_linear.py) counts beyond the ledger's fla-form records, per KDA block (a
    negative number: it counts less): it forms the UT system and the intra-chunk scores as
    broadcast products summed over d_lk (elementwise: no matmul for FlopCounterMode, where the
    ledger has two C_l × d_lk × C_l products, 4·B·h·N_c·C_l²·d_lk) and applies the UT
    system's inverse, built by a row loop, as two dense C_l × C_l products
    (2·B·h·N_c·C_l²·(d_lk + d_lv), where the ledger has two unit lower-triangular solves,
    2·B·h·N_c·P_L·(d_lk + d_lv))."""
    v = a.values
    if "N_c" not in v:
        return {}
    B, h, n, C, dk, dv, pl = (v[s] for s in ("B", "h_lv", "N_c", "C_l", "d_lk", "d_lv", "P_L"))
    per = B * h * n * (2 * C * C * (dk + dv) - 4 * C * C * dk - 2 * pl * (dk + dv))
    return {i: per for i, k in enumerate(a.config.layer_kinds) if k.mixer == "kda"}


def kda_backward_surplus(a: Analysis) -> dict[int, int]:
    """The same for the backward (a negative number), derived from
    chunk_kimi_delta_attention's code: its matmuls are attn @ v_beta and
    attn @ (k_beta·e^g) over all N_c chunks, attn built from K and β, both operands
    requiring grad in training (Q, K, V, g, β come from trainable projections): a dA and a dB
    each, 2·2·B·h·N_c·C_l²·(d_lv + d_lk); its scores and UT system are elementwise (no
    backward matmul). The ledger's fla form has, for the two C_l × d_lk × C_l products, a dA
    and a dB each, 2·2·2·B·h·N_c·C_l²·d_lk, and for each unit triangular solve a solve and
    one dense product (dB 2·P_L·d, dA = −dB·Xᵀ 2·C_l²·d, d = d_lv, d_lk). The scans' products
    run the same backward in both (the first chunk's W·S_0 and Q·S_0, S_0 zeros without a
    gradient: dA only; A·V_new: both; the N_c − 1 state updates: both, transformers' update
    after the last chunk being off the loss's path, so never differentiated): no term.
    Per KDA layer: B·h·N_c·(2·C_l²·(d_lk + d_lv) − 8·C_l²·d_lk − 2·P_L·(d_lk + d_lv))."""
    v = a.values
    if "N_c" not in v:
        return {}
    B, h, n, C, dk, dv, pl = (v[s] for s in ("B", "h_lv", "N_c", "C_l", "d_lk", "d_lv", "P_L"))
    per = B * h * n * (2 * C * C * (dk + dv) - 8 * C * C * dk - 2 * pl * (dk + dv))
    return {i: per for i, k in enumerate(a.config.layer_kinds) if k.mixer == "kda"}


CONV_CLAIM = ("transformers' depthwise conv1d (the torch fallback causal_conv1d_fn: F.conv1d "
              "with padding K − 1) computes T + K − 1 outputs per channel and keeps T: its "
              "count less 2·B·C·(K − 1)·K per conv layer is compared (the ledger counts the T "
              "outputs a causal conv kernel computes)")
STATE_CLAIM = ("transformers' chunked delta rule (torch_chunk_gated_delta_rule, "
               "chunk_kimi_delta_attention) updates the state after the last chunk as well, for "
               "its cache: its count less that one Kᵀ·V_new per gated DeltaNet or KDA layer "
               "(2·B·h_lv·d_lk·C_l·d_lv) is compared (the ledger's forward has no cache: N_c − 1 "
               "updates)")
KDA_CLAIM = ("transformers' Kimi Delta Attention (chunk_kimi_delta_attention, its torch path) "
             "forms the UT system and the intra-chunk scores elementwise (broadcast products "
             "summed over d_lk: no matmul) and applies the UT system's inverse as two dense "
             "C_l × C_l products, where the ledger counts fla's chunk_kda (two C_l × d_lk × C_l "
             "products, two unit triangular solves): its count less 2·B·h·N_c·C_l²·(d_lk + "
             "d_lv) − 4·B·h·N_c·C_l²·d_lk − 2·B·h·N_c·P_L·(d_lk + d_lv) per KDA layer is "
             "compared")


CONV_BACKWARD_CLAIM = (
    "transformers' depthwise conv1d backward as FlopCounterMode counts it (its "
    "conv_backward_flop ignores groups for the weight gradient: 2·B·C²·K·(T + K − 1), C times "
    "a depthwise conv's, and its input gradient spans the T + K − 1 padded outputs): its count "
    "less that surplus per conv layer is compared (the ledger counts dX and dW of the T "
    "outputs, 2·B·T·C·K each)")
KDA_BACKWARD_CLAIM = (
    "transformers' Kimi Delta Attention backward (chunk_kimi_delta_attention's autograd, every "
    "input of the rule requiring grad, as in training): a dA and a dB for its two dense C_l × "
    "C_l products, 4·B·h·N_c·C_l²·(d_lk + d_lv), none for its elementwise UT system and scores, "
    "where the ledger's fla form has a dA and a dB for its two C_l × d_lk × C_l products, "
    "8·B·h·N_c·C_l²·d_lk, and a solve and a dense product per triangular solve, "
    "2·B·h·N_c·(P_L + C_l²)·(d_lk + d_lv); the scans' backward the same in both: its count "
    "less 2·B·h·N_c·C_l²·(d_lk + d_lv) − 8·B·h·N_c·C_l²·d_lk − 2·B·h·N_c·P_L·(d_lk + d_lv) "
    "per KDA layer is compared")


def surpluses(a: Analysis, phase: str = R.FORWARD) -> list[tuple[str, str, dict[int, int]]]:
    """(claim, what the subtracted FLOPs are, per block) for each form transformers' torch
    path runs beyond the ledger's in the pass (the backward's: the op counter's, which reads
    FlopCounterMode's formulas)."""
    if phase != R.FORWARD:
        out = []
        conv, kda = conv_backward_surplus(a), kda_backward_surplus(a)
        if conv:
            out.append((CONV_BACKWARD_CLAIM, "for the conv backward's formula", conv))
        if kda:
            out.append((KDA_BACKWARD_CLAIM, "for the torch path's other form", kda))
        return out
    out = []
    conv, state, kda = conv_surplus(a), state_surplus(a), kda_surplus(a)
    if conv:
        out.append((CONV_CLAIM, "for the K − 1 dropped outputs", conv))
    if state:
        out.append((STATE_CLAIM, "for the final state update", state))
    if kda:
        out.append((KDA_CLAIM, "for the torch path's other form", kda))
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


def in_one_kind(lg, modules: tuple[str, ...]) -> bool:
    """Whether two of the ledger's `modules` run in one kind of block (transformers' module
    then fuses them), not one in each (Kimi Linear's self_attn.q_proj: KDA's or latent
    attention's, by the block's kind)."""
    kinds = defaultdict(set)
    for r in lg.forward:
        kinds[r.module].add(r.repeat)
    return any(len([m for m in modules if g in kinds[m]]) > 1 for x in modules for g in kinds[x])
