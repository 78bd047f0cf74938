"""Inference with a KV cache: cache size, prefill FLOPs, decode FLOPs at position t, and a
roofline estimate of the time per decode step.

Everything is derived from the ledger (accounting/ledger/builder/):
  - the cache holds what the attention's cache entries name (K after RoPE and V: h_kv·d_k
    elements each per token, in each of the L layers; latent attention's latent and RoPE
    key, d_kv_a); a local (sliding-window) layer keeps only its last W tokens;
  - decoding the token at position t runs every forward matmul with a query length of 1
    and a key length of t: in each record the T of the query side (its m) becomes 1 and, in
    the causal (query × key) records, the T on the key side becomes t (t_W = min(t, W) on a
    local layer). A record that reads the cache itself (latent attention's kv_b_proj, which
    re-expands the latent: the naive form) runs over the t cached tokens;
  - latent attention's absorbed form (DeepSeek-V2 §2.1.3: W^UK folded into the query, W^UV
    into the output) replaces kv_b_proj and the attention core by attention over the latent:
    h·(2·d_nope·r_kv + 2·t·(r_kv + d_rope) + 2·t·r_kv + 2·r_kv·d_v) per layer and sequence;
  - a recurrent layer (short convolution, gated DeltaNet) caches a fixed-size state per
    sequence instead of K and V per token (its conv window, its recurrent state), read and
    written once per decode step; kv_bytes counts it beside the attention layers' KV;
  - a mixture of experts' decode step reads the weights of the experts its B·k token slots
    touch: at worst min(E, B·k); under uniform routing, E·(1 − (1 − k/E)^B) on average
    (an assumption: real routers are not uniform).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from accounting.ledger import records as R
from accounting.analysis.workload import analyze
from accounting.ledger.builder.delta import STATE_UPDATE
from accounting.ledger.builder.moe import expert_capacity
from accounting.architecture.config import ModelConfig
from accounting.ledger.ledger import ledger
from accounting.planning.memory import Precision, values
from accounting.ledger.symbols import Expr, fold_layers
from accounting.units import FLOPS_PER_MAC


def kv_elements_per_token(config: ModelConfig) -> Expr:
    """Cached elements per token (every layer; a local layer's once T ≤ W; a recurrent
    layer's state is per sequence, not here)."""
    lg = ledger(config)
    return fold_layers(sum((e.expr() for e in lg.cache if not e.per_sequence), Expr()), _kinds(lg))


def state_elements_per_sequence(config: ModelConfig) -> Expr:
    """The recurrent layers' cached state per sequence (conv windows, recurrent states),
    whatever its length: the sum over those layers (0 without any)."""
    lg = ledger(config)
    return fold_layers(sum((e.expr() for e in lg.cache if e.per_sequence), Expr()), _kinds(lg))


def state_bytes_per_sequence(config: ModelConfig, bytes_per_element: int) -> int:
    """The recurrent layers' state in bytes for one sequence: each entry at the cache's
    element size, or 4 where the model keeps it in float32 (the gated delta rule's state)."""
    lg = ledger(config)
    v = lg.values(1, 1)
    return sum(e.expr().evaluate(v) * (4 if e.fp32 else bytes_per_element)
               for e in lg.cache if e.per_sequence)


def _kinds(lg) -> tuple[str, ...]:
    return tuple(g for g, _ in lg.groups)


def kv_elements(config: ModelConfig, tokens: int) -> int:
    """Cached elements for one sequence of `tokens` tokens: a local layer keeps min(T, W), a
    chunked one min(T, C) (its query attends at most its chunk's C keys)."""
    lg = ledger(config)
    v = lg.values(max(tokens, 1), 1)
    w, chunk = config.sliding_window, config.attention_chunk
    return sum(e.expr().evaluate(v) * (min(tokens, w) if e.window else min(tokens, chunk)
                                       if e.chunk else tokens)
               for e in lg.cache if not e.per_sequence)


def _decode_factors(r: R.Matmul) -> tuple[str, ...]:
    """The record's factors for one query at key length t (t_W = min(t, W) on a local layer,
    t_C = min(t, C) on a chunked one: the rolling cache a step attends, masked to the keys of
    its own chunk, ((t − 1) mod C) + 1 of them, as transformers' DynamicSlidingWindowLayer
    and chunked mask run it)."""
    key = "t_W" if r.window else "t_C" if r.chunk else "t_K" if r.topk else "t"
    # DeepSeek-V3.2's indexer scores every cached key (t); the attention then reads the
    # t_K = min(t, k_I) it chose (the sparse kernel's count; transformers' eager path masks
    # all t). The indexer's weighted sum has its query rows in the batch (B·T)
    if "T" in r.batch:
        return tuple(f for f in r.batch if f != "T") + r.m + r.n + \
            tuple(key if f == "T" else f for f in r.p)
    if r.reads_cache:  # it runs over every cached token
        return r.batch + tuple(key if f == "T" else f for f in r.m) + r.n + r.p
    if "T" not in r.m:  # experts under a capacity factor: E·C rows, C at one token each
        assert r.m == ("E", "C"), r
        return r.batch + ("E", "C_1") + r.n + r.p
    m = tuple(f for f in r.m if f != "T")  # query length 1
    n = tuple(key if f == "T" else f for f in r.n)
    p = tuple(key if f == "T" else f for f in r.p)
    if not r.causal:
        assert "T" not in r.n + r.p, r  # only the attention core has a key length
    return r.batch + m + n + p


# the chunked delta rule's and the SSD scan's records (builder/delta.py, builder/mamba.py)
CHUNKED = ("N_c", "N_c-1", "C_l", "P_L", "N_m", "N_m+1", "C_m")


def _chunked(r: R.Matmul) -> bool:
    return any(f in CHUNKED for f in r.factors)


def recurrent_decode_expr(config: ModelConfig) -> Expr:
    """A gated DeltaNet layer's decode step per sequence, in place of its chunked records
    (transformers' torch_recurrent_gated_delta_rule, fla's fused_recurrent kernel): three
    products of the d_lk × d_lv state of each value head with one vector, kᵀS (what the
    state predicts for the key), k·δᵀ (the delta-rule write) and qᵀS (the read): 2·3·B·
    h_lv·d_lk·d_lv FLOPs; the decay and β scalings are elementwise (0 here). A Mamba-2
    layer's (transformers' selective_state_update, mamba_ssm's kernel): the state write
    dt·B·xᵀ and the read state·C, 2·2·B·h_m·p_m·n_s."""
    total = Expr()
    for g, layers in ledger(config).groups:
        mixer = config.layer_kinds[layers[0]].mixer
        if mixer in ("linear_attention", "kda"):  # KDA: the same three products
            # (fla's fused_recurrent_kda; its per-channel decay is elementwise)
            total = total + Expr({("B", "h_lv", "d_lk", "d_lv"): 3 * FLOPS_PER_MAC}).times(g)
        elif mixer in ("mamba", "hybrid"):  # a hybrid layer's attention decodes as any
            total = total + Expr({("B", "h_m", "p_m", "n_s"): 2 * FLOPS_PER_MAC}).times(g)
    return total


def final_state_expr(config: ModelConfig) -> Expr:
    """The prefill's last gated DeltaNet state update, which a forward without a cache
    skips (the ledger's N_c − 1 updates, builder/delta.py) and a prefill runs for its cache
    (transformers' torch_chunk_gated_delta_rule returns it; fla's chunk kernel with
    output_final_state=True): one more Kᵀ·V_new per layer and sequence, 2·B·h_lv·d_lk·
    C_l·d_lv matmul FLOPs (the state-update record at N_c − 1 = 1)."""
    total = Expr()
    for r in ledger(config).forward:
        if r.name == STATE_UPDATE:
            e = Expr.of(FLOPS_PER_MAC, tuple(f for f in r.factors if f != "N_c-1"))
            total = total + (e.times(r.repeat) if r.repeat else e)
    return fold_layers(total, _kinds(ledger(config)))


def prefill_flops(config: ModelConfig, seq: int, batch: int) -> int:
    """A prefill's forward matmul FLOPs (logits at every position): the forward's, and the
    final state update of each gated DeltaNet layer (final_state_expr)."""
    extra = final_state_expr(config).evaluate(values(config, seq, batch)) if \
        config.linear_key_heads is not None else 0
    return analyze(config, seq, batch, R.FORWARD).matmul_flops() + extra


def decode_flops_expr(config: ModelConfig) -> Expr:
    """Matmul FLOPs to decode one token at position t (it attends to t keys) for B sequences
    (latent attention: the naive form, as trained; a gated DeltaNet layer: its recurrent
    form, recurrent_decode_expr)."""
    total = recurrent_decode_expr(config)
    for r in ledger(config).forward:
        if _chunked(r):
            continue
        e = Expr.of(FLOPS_PER_MAC, _decode_factors(r))
        total = total + (e.times(r.repeat) if r.repeat else e)
    return fold_layers(total, _kinds(ledger(config)))


def absorbed_decode_flops_expr(config: ModelConfig) -> Expr | None:
    """Latent attention's absorbed decode form (None without latent attention): the naive
    count less kv_b_proj and the attention core, plus attention over the latent."""
    if not config.mla:
        return None
    total = recurrent_decode_expr(config)
    for r in ledger(config).forward:
        if r.reads_cache or r.component == R.ATTN_CORE or _chunked(r):
            continue
        e = Expr.of(FLOPS_PER_MAC, _decode_factors(r))
        total = total + (e.times(r.repeat) if r.repeat else e)
    for g, layers in ledger(config).groups:
        local = any(config.layer_kinds[i].local for i in layers)
        t = "t_W" if local else "t"
        latent = Expr({("B", "h", "d_nope", "r_kv"): 2, ("B", "h", t, "r_kv"): 4,
                       ("B", "h", t, "d_rope"): 2, ("B", "h", "r_kv", "d_v"): 2})
        total = total + latent.times(g)
    return fold_layers(total, _kinds(ledger(config)))


def weights_read_expr(config: ModelConfig) -> Expr:
    """Parameter elements a decode step reads: every weight, except that of a table only
    looked up (the token embedding when untied, a learned position table) it reads one row
    per sequence (B·d_model), and the routed experts' of which it reads E_read (the experts
    the step's token slots touch)."""
    total = Expr()
    for p in ledger(config).params:
        if p.lookup and not p.matmul_weight:
            e = Expr.of(1, ("B", "d_model"))
        elif p.routed_expert:
            e = Expr.of(1, ("E_read",) + p.shape[1:])
        else:
            e = Expr.of(1, p.shape)
        total = total + (e.times(p.repeat) if p.repeat else e)
    return fold_layers(total, _kinds(ledger(config)))


# Once B·k ≥ 64·E an expert is missed by all B tokens with probability (1 − k/E)^B < e^−64:
# every expert is counted as read. The exact power has B·log2(E) bits, and B is a bounded
# input up to 10^15: computing it would not end (serve and plan at a huge batch).
ALL_EXPERTS_AT = 64


def experts_read(config: ModelConfig, batch: int) -> tuple[int, Fraction] | None:
    """(worst case, expectation under uniform routing) of the distinct experts one MoE
    layer's decode step touches: B tokens, k distinct experts each. Uniform: each expert is
    missed by a token with probability 1 − k/E, by all B with (1 − k/E)^B (all E once
    B·k ≥ 64·E)."""
    if config.num_experts is None:
        return None
    E, k = config.num_experts, config.experts_per_token
    if config.moe_capacity_factor is not None or config.router_scales_input:
        return E, Fraction(E)  # every expert runs (its C rows; Llama 4: every token)
    if batch * k >= ALL_EXPERTS_AT * E:
        return E, Fraction(E)
    return min(E, batch * k), E * (1 - (1 - Fraction(k, E)) ** batch)


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
    kv_bytes_per_token: int  # every layer's entry (a local layer's while T ≤ W)
    kv_bytes: int  # for (batch, seq): a local layer holds min(seq, W) tokens; with the
    #               recurrent layers' states (state_bytes) included
    prefill_flops: int  # forward matmuls over seq tokens (logits for every position)
    decode_flops: int  # at position t, all B sequences (latent attention: naive form)
    weight_bytes_read: int  # MoE: at worst (min(E, B·k) experts per layer)
    kv_bytes_read: int  # B sequences' cache at position t
    roofline: Roofline
    decode_flops_absorbed: int | None = None  # latent attention's absorbed form
    experts_read: tuple[int, Fraction] | None = None  # (worst, uniform expectation) per layer
    weight_bytes_read_expected: Fraction | None = None  # MoE, uniform routing (assumption)
    state_bytes: int = 0  # the recurrent layers' states for the batch (in kv_bytes too)


def inference(config: ModelConfig, batch: int, seq: int, precision: Precision,
              position: int | None = None, peak_flops: Fraction | None = None,
              bandwidth: Fraction | None = None) -> Inference:
    t = seq if position is None else position
    v = values(config, seq, batch)
    v["t"] = t
    if config.sliding_window is not None:
        v["t_W"] = min(t, config.sliding_window)
    if config.attention_chunk is not None:  # the rolling cache of a chunked layer
        v["t_C"] = min(t, config.attention_chunk)
    if config.index_topk is not None:  # the keys the indexer keeps (DeepSeek-V3.2)
        v["t_K"] = min(t, config.index_topk)
    if config.moe_capacity_factor is not None:
        v["C_1"] = expert_capacity(config.moe_capacity_factor, batch * config.experts_per_token,
                                   config.num_experts)
    size = precision.inference_bytes
    per_token = kv_elements_per_token(config).evaluate({**v, "T": 1}) * size
    decode = decode_flops_expr(config).evaluate(v)
    absorbed = absorbed_decode_flops_expr(config)
    read = experts_read(config, batch)
    expected = None
    w = weights_read_expr(config)
    if read is not None:
        weights = w.evaluate({**v, "E_read": read[0]}) * size
        expected = w.value({**v, "E_read": read[1]}) * size
    else:
        weights = w.evaluate(v) * size
    state = batch * state_bytes_per_sequence(config, size)  # read and written each step
    kv_read = batch * kv_elements(config, t) * size + state
    return Inference(config, batch, seq, t, size, per_token,
                     batch * kv_elements(config, seq) * size + state,
                     prefill_flops(config, seq, batch), decode, weights,
                     kv_read, Roofline(decode, weights + kv_read, peak_flops, bandwidth),
                     None if absorbed is None else absorbed.evaluate(v), read, expected, state)
