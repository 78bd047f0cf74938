"""A serving plan: weights per GPU, the engine's KV pool, concurrency at a context length,
the longest context at a concurrency, and the time to first token and per output token.

Exact integers throughout (bytes, blocks, tokens); times are Fractions. Every rule is one of
the modules beside this one: shards (TP/PP layout), kv (cache per token), engines (the pool),
activation (vLLM's profiled peak), timing (prefill and decode).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from accounting.formats.schemes import Scheme
from accounting.planning.gpus import get_gpu
from accounting.runtime.errors import UsageError
from accounting.serving import engines, kv, shards, timing
from accounting.serving.activation import activation_peak, forward_peak
from accounting.architecture.config import ModelConfig
from accounting.units import TERA

MAX_CONTEXT_SEARCH = 10**9


@dataclass(frozen=True)
class StagePool:
    stage: shards.Stage
    caches: tuple[kv.LayerKV, ...]
    kv_bytes_per_token: int  # every layer of the stage, one token (full-length layers)
    activation_bytes: int
    pool_bytes: int  # may be negative: does not fit
    blocks: int
    tokens: int  # blocks · block_size (SGLang: its token count)


@dataclass(frozen=True)
class ServePlan:
    config: ModelConfig
    scheme: Scheme
    engine: str
    gpu: str
    memory_bytes: int
    tp: int
    pp: int
    kv_dtype: str
    ctx: int
    concurrency: int | None  # asked for (None: the largest that fits)
    defaults: engines.Defaults
    utilization: Fraction
    max_num_batched_tokens: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    stages: tuple[StagePool, ...]
    max_concurrency: int
    longest_context: int | None  # at `concurrency` (or 1), capped at MAX_CONTEXT_SEARCH
    time: timing.Timing | None
    notes: tuple[str, ...]

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def binding(self) -> StagePool:
        """The stage that limits: least pool, then most weights."""
        return min(self.stages, key=lambda s: (s.tokens, s.pool_bytes, -s.stage.bytes))

    @property
    def weights_bytes_per_gpu(self) -> int:
        return max(s.stage.bytes for s in self.stages)

    @property
    def kv_bytes_per_token_per_gpu(self) -> int:
        return max(s.kv_bytes_per_token for s in self.stages)

    @property
    def state_bytes_per_sequence_per_gpu(self) -> int:
        """The recurrent layers' state of one sequence (conv windows, recurrent states),
        whatever its length: 0 for a model without such layers."""
        return max(sum(c.state_bytes for c in s.caches) for s in self.stages)

    @property
    def kv_pool_bytes_per_gpu(self) -> int:
        return self.binding.pool_bytes

    @property
    def fits(self) -> bool:
        return self.binding.pool_bytes > 0 and self.max_concurrency >= (self.concurrency or 1)

    @property
    def shortfall_bytes(self) -> int:
        """Bytes per GPU missing: for the weights and reserves (a negative pool), else for
        the asked concurrency at ctx."""
        b = self.binding
        if b.pool_bytes <= 0:
            return -b.pool_bytes
        need = (self.concurrency or 1) * kv.bytes_per_sequence(list(b.caches), self.ctx,
                                                               self.defaults.block_size)
        return max(0, need - b.pool_bytes)


def serve(config: ModelConfig, scheme: Scheme, *, gpu: str | None = None,
          memory_bytes: int | None = None, tp: int = 1, pp: int = 1, kv_dtype: str = "bf16",
          ctx: int | None = None, concurrency: int | None = None,
          engine: str = engines.DEFAULT_ENGINE.name,
          utilization=None, max_num_batched_tokens: int | None = None,
          max_num_seqs: int | None = None, block_size: int | None = None,
          activation_bytes: int | None = None, non_torch_bytes: int | None = None,
          cuda_graph_bytes: int = 0,
          mfu=Fraction(1, 2), bandwidth_efficiency=Fraction(8, 10), names=None,
          model_dtype_bytes: int = 2, peak_tflops=None, bandwidth_tbs=None,
          prompt: int | None = None, notes: tuple[str, ...] = ()) -> ServePlan:
    card = get_gpu(gpu) if gpu else None
    if memory_bytes is None:
        if card is None:
            raise UsageError("serve needs a GPU: --gpu NAME, or --gpu-mem SIZE")
        memory_bytes = card.memory_bytes
    ctx = ctx or config.context_length
    eng = engines.get_engine(engine)
    d = eng.defaults(card.device_name if card else None, memory_bytes, tp, pp, config.mla)
    if block_size is not None:
        d = engines.Defaults(d.utilization, d.max_num_batched_tokens, d.max_num_seqs,
                             block_size, d.why + f"; block_size {block_size} (given)")
    util = d.utilization if utilization is None else Fraction(utilization)
    if not 0 < util <= 1:
        raise UsageError(f"--gpu-memory-utilization must be in (0, 1], got {float(util)}")
    n_tokens = max_num_batched_tokens or d.max_num_batched_tokens
    seqs = max_num_seqs or d.max_num_seqs
    non_torch = (eng.non_torch(tp * pp) if non_torch_bytes is None
                 else non_torch_bytes)
    kv_b = kv.kv_dtype_bytes(kv_dtype)
    stage_list = shards.stages(config, scheme, model_dtype_bytes, tp, pp, names)
    pools = []
    for st in stage_list:
        caches = tuple(kv.layer_caches(config, kv_b, tp, st.layers))
        per_token = sum(c.bytes_per_token for c in caches)
        if eng.profile_run:
            last = st.index == pp - 1  # only the last stage runs the sampler
            act = ((activation_peak(config, n_tokens, seqs, tp) if last
                    else forward_peak(config, n_tokens, tp))
                   if activation_bytes is None else activation_bytes)
            pool = eng.pool(memory_bytes, util, st.bytes, act, non_torch, cuda_graph_bytes)
            page = d.block_size * per_token
            blocks = max(pool, 0) // page if page else 0
            tokens = blocks * d.block_size
        else:
            act = 0
            pool = eng.pool(memory_bytes, util, st.bytes, act, non_torch, cuda_graph_bytes)
            tokens = max(pool, 0) // per_token if per_token else 0
            blocks = tokens
        pools.append(StagePool(st, caches, per_token, act, pool, blocks, tokens))
    bind = min(pools, key=lambda s: (s.tokens, s.pool_bytes))
    per_seq = kv.bytes_per_sequence(list(bind.caches), ctx, d.block_size)
    max_conc = min(max(p.pool_bytes, 0) // kv.bytes_per_sequence(list(p.caches), ctx,
                                                                   d.block_size)
                   for p in pools) if per_seq else 0
    longest = _longest(pools, concurrency or 1, d.block_size) if bind.pool_bytes > 0 else None
    notes = list(notes)
    if eng.chunked_prefill_note and ctx > n_tokens:
        notes.append(eng.chunked_prefill_note.format(ctx=ctx, chunk=n_tokens))
    batch = concurrency or max_conc
    time = None
    if card is not None or (peak_tflops is not None and bandwidth_tbs is not None):
        peak = (Fraction(peak_tflops) if peak_tflops is not None else card.bf16_tflops) * TERA
        bw = (Fraction(bandwidth_tbs) if bandwidth_tbs is not None else card.bandwidth_tbs) * TERA
        time = timing.timing(config, [p.stage for p in pools], [list(p.caches) for p in pools],
                             tp, pp, prompt or ctx, ctx, max(batch, 1), peak, bw, Fraction(mfu),
                             Fraction(bandwidth_efficiency), scheme, model_dtype_bytes)
    return ServePlan(config, scheme, engine, card.name if card else "custom GPU", memory_bytes,
                     tp, pp, kv_dtype, ctx, concurrency, d, util, n_tokens, non_torch,
                     cuda_graph_bytes, tuple(pools), max_conc, longest, time, tuple(notes))


def _longest(pools, batch: int, block: int) -> int:
    """The longest context (tokens) at which `batch` sequences fit in every stage's pool."""
    def fits(t: int) -> bool:
        return all(batch * kv.bytes_per_sequence(list(p.caches), t, block) <= p.pool_bytes
                   for p in pools)
    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= MAX_CONTEXT_SEARCH and fits(hi):
        lo, hi = hi, hi * 2
    if hi > MAX_CONTEXT_SEARCH:
        return MAX_CONTEXT_SEARCH
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo
