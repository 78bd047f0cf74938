"""Served layers timed whole from their kernel tables (layer_tables.py): a mixture's routed
experts (one fused-MoE call per layer, the ledger's expert W1, W3 and W2 records and the
activation between them) and latent attention's kernel (the ledger's QKᵀ and scores·V).
Where no table has the shape, nothing here answers and step.py keeps its GEMM-table or
roofline time; a note says why.
"""
from __future__ import annotations

from fractions import Fraction

from accounting.ledger import records as R
from accounting.ledger.builder.common import DELTA_RULE, SSD
from accounting.ledger.symbols import product
from accounting.timing import layer_tables as LT
from accounting.timing import ops as O

# the scheme kinds (formats/schemes.py) whose experts the MoE tables measured, as the
# tables' moe_dtype; another kind (int4, AWQ, bitsandbytes...) keeps the GEMM tables
MOE_DTYPES = {"dense": "bfloat16", "fp8_block": "fp8_block", "fp8_tensor": "fp8",
              "fp8_channel": "fp8", "fbgemm_fp8": "fp8", "mxfp4": "w4a16_mxfp4"}
MOE_OP = "routed experts (fused MoE kernel)"  # the op's name in a pass's times
EXPERTS = "experts"  # the builder's scope of the stacked experts (builder/moe.py)
ROUTED_ROWS = ("B", "T", "k")  # dropless routing: the B·T·k token slots


def _expert_key(r) -> tuple | None:
    """(per block?, module, repeat) of a dropless routed-expert matmul, else None."""
    if isinstance(r, R.Matmul) and r.component == R.FFN and r.m == ROUTED_ROWS \
            and r.module.split(".")[-1] == EXPERTS and not r.batch:
        return r.per_layer, r.module, r.repeat
    return None


def routed_experts(records, v: dict, machine: O.Machine, tp: int,
                   ) -> tuple[list[O.OpTime], set, list[str]]:
    """(op times, the expert groups they cover, notes on the groups no table covers) of a
    pass over v's B·T tokens: each layer's routed experts one fused call from the MoE
    table at (d_model, d_e, k, E, TP, EP 1: vLLM's and SGLang's default, the experts
    split TP ways)."""
    out, covered, notes, seen = [], set(), [], set()
    if machine.system is None or machine.moe_dtype is None:
        return out, covered, notes
    tokens = v["B"] * v["T"]
    for r in records:
        key = _expert_key(r)
        if key is None or key in seen:
            continue
        seen.add(key)
        hidden, inter = product(r.n, v), product(r.p, v)  # W1: d_model → d_e
        found = LT.moe(machine.system, machine.engine, machine.moe_dtype, hidden, inter,
                       v["k"], v["E"], tp)
        if found is None:
            notes.append(f"no MoE table row for d_model {hidden}, d_e {inter}, top-{v['k']} of "
                         f"{v['E']}, TP {tp}, {machine.moe_dtype}: the experts' GEMMs from the "
                         "GEMM table")
            continue
        grid, src = found
        hit = grid(tokens)
        out.append(O.OpTime(MOE_OP, O.GEMMS,
                            Fraction(hit.seconds) * r.count(v), src, hit.note))
        covered.add(key)
    return out, covered, notes


def not_covered(records, covered: set) -> list:
    """The matmul records the MoE table did not time."""
    return [r for r in records if _expert_key(r) not in covered]


def outside_experts(elementwise, covered: set) -> list:
    """The memory-bound ops outside the fused MoE kernels the table timed (the experts'
    activation and gate run inside them)."""
    mods = {(m, rep) for _, m, rep in covered}
    return [e for e in elementwise if (e.module, e.repeat) not in mods]


def latent_attention(machine: O.Machine, phase: str, batch: int, length: int, v: dict,
                     tp: int, kv_dtype: str, count: int) -> O.OpTime | None:
    """Latent attention's kernel for `count` layers from the MLA table, prefill ("context":
    one causal pass over `length` tokens) or decode ("generation": one query against
    `length` cached latents), at the rank's heads; None where no table has its geometry."""
    if machine.system is None or not LT.mla_geometry(v):
        return None
    heads = max(1, v["h"] // tp)
    found = LT.mla(machine.system, phase, machine.engine, heads, kv_dtype)
    if found is None:
        return None
    grid, src, h0 = found
    hit = grid(batch, length, scales=(True, True))
    s = Fraction(hit.seconds) * Fraction(heads, h0)
    if phase == "context" and length > grid.axes[1][-1]:
        s *= Fraction(length) / Fraction(int(grid.axes[1][-1]))  # causal: quadratic in T
    note = "; ".join(x for x in (hit.note, "" if h0 == heads else
                                 f"scaled from {h0} heads") if x)
    name = "latent attention (" + ("prefill kernel)" if phase == "context" else
                                   "decode kernel)")
    return O.OpTime(name, O.ATTENTION, s * count, src, note)


def expert_parallel(machine: O.Machine, config, tokens: int, ep: int) -> O.OpTime | None:
    """Every MoE layer's fused expert call on one GPU of an expert-parallel worker (vLLM's
    --enable-expert-parallel: FusedMoE at tp 1, ep = D·T, E/ep experts whole on each GPU),
    the layer routing `tokens` tokens (all D ranks' batch), balanced routing (the caller's
    imbalance factor is the only skew); None where no table has the shape."""
    if machine.system is None or machine.moe_dtype is None or config.num_experts is None:
        return None
    hidden = config.moe_latent_size or config.d_model
    found = LT.moe(machine.system, machine.engine, machine.moe_dtype, hidden,
                   config.expert_d_ff, config.experts_per_token, config.num_experts, 1, ep,
                   ("balanced",))
    if found is None:
        return None
    grid, src = found
    hit = grid(tokens)
    layers = config.num_layers - len(config.dense_layers)
    return O.OpTime(f"{MOE_OP}, EP {ep}", O.GEMMS, Fraction(hit.seconds) * layers, src, hit.note)


def delta_modules(ledger) -> set:
    """(module, repeat) of each gated DeltaNet mixer (its delta-rule elementwise ops')."""
    return {(e.module, e.repeat) for e in ledger.elementwise if e.component == DELTA_RULE}


def gated_deltanet(ledger, v: dict, machine: O.Machine, tp: int, phase: str, batch: int,
                   length: int) -> tuple[list[O.OpTime], set]:
    """(op times, the (module, repeat) they cover) of every gated DeltaNet mixer from the
    GDN table: its convolution and delta-rule kernels, a prefill's over B sequences of
    `length` tokens ("context"), a decode step's one token of B sequences ("generation"),
    at the rank's heads (h_lk, h_lv split TP ways, vLLM's GatedDeltaNet)."""
    mods = delta_modules(ledger)
    if machine.system is None or machine.gemm_dtype is None or not mods:
        return [], set()
    found = LT.gdn(machine.system, phase, machine.engine, max(1, v["h_lk"] // tp),
                   max(1, v["h_lv"] // tp), v["d_lk"], v["d_lv"])
    if found is None:
        return [], set()
    parts, src = found
    hits = [grid(batch, length if phase == "context" else 1, scales=(True, True))
            for grid, _ in parts]
    seconds = sum((Fraction(h.seconds) for h in hits), Fraction(0))
    note = "; ".join(dict.fromkeys(h.note for h in hits if h.note))
    layers = {}
    for r in ledger.forward:
        if (r.module, r.repeat) in mods:
            layers[(r.module, r.repeat)] = r.count(v)
    out = [O.OpTime("gated DeltaNet (convolution and delta-rule kernels)", O.ATTENTION,
                    seconds * n, src, note) for n in layers.values()]
    return out, set(layers)


def outside_delta(records, covered: set) -> list:
    """The records a GDN table's kernels did not time: a covered mixer's recurrent matmuls
    and delta-rule elementwise ops (the convolution, gates, L2 norms, chunked scan: inside
    the two kernels) leave; its projections and gated norm stay."""
    return [r for r in records if (r.module, r.repeat) not in covered
            or r.component not in (R.RECURRENT, DELTA_RULE)]


def recurrent_decode(ledger, v: dict, machine: O.Machine, tp: int, timed: set,
                     ) -> tuple[list[O.OpTime], set]:
    """(op times, the (module, repeat) they cover) of a decode step's recurrent mixers no
    table timed (Mamba-2; KDA; a gated DeltaNet without a table): one token runs the
    recurrent form, a few products of each head's state with a vector (planning/
    inference.py recurrent_decode_expr: 3 for the delta rules, 2 for Mamba-2), under one
    FLOP per byte of a float32 state: memory-bound, the per-sequence state (the ledger's
    cache entries: conv window and recurrent state, heads split TP ways) read and written
    once at the roofline's share of the bandwidth. The ledger's chunked records (a
    64-token chunk padded around one token) and their scan's elementwise ops are not
    charged."""
    mods = {(r.module, r.repeat) for r in ledger.forward
            if r.component == R.RECURRENT and r.repeat is not None} - timed
    out, covered = [], set()
    for mod, rep in sorted(mods):
        state = sum(product(e.shape, v) * (4 if e.fp32 else 2) for e in ledger.cache
                    if e.per_sequence and e.repeat == rep)
        if not state:
            continue
        moved = Fraction(2 * v["B"] * state, tp)
        out.append(O.OpTime("recurrent state update (decode form)", O.ATTENTION,
                            moved / (machine.bandwidth * O.BANDWIDTH_DERATE) * v[rep],
                            f"roofline (the state read and written once: "
                            f"{float(O.BANDWIDTH_DERATE):g} of the bandwidth)"))
        covered.add((mod, rep))
    return out, covered


SCANS = (DELTA_RULE, SSD)  # the chunked scans' elementwise components (builder/common.py)


def outside_scan(records, covered: set) -> list:
    """The records recurrent_decode's state traffic replaces leave: a covered mixer's
    recurrent matmuls and scan elementwise ops."""
    return [r for r in records if (r.module, r.repeat) not in covered
            or r.component not in (R.RECURRENT, *SCANS)]
