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
from accounting.formats.loaded import Loaded, loaded
from accounting.serving import engines, kv, max_len, shards, startup, timing
from accounting.serving.activation import activation_peak, forward_peak
from accounting.serving.startup import ZERO, Span
from accounting.serving.vision import TowerServe, tower_terms
from accounting.architecture.config import ModelConfig
from accounting.units import GiB, TERA

MAX_CONTEXT_SEARCH = 10**9


@dataclass(frozen=True)
class StagePool:
    """One pipeline stage's GPU. The pool, blocks and tokens are the pessimistic end (every
    range term at its high end), the `*_high` fields the optimistic end."""
    stage: shards.Stage
    caches: tuple[kv.LayerKV, ...]
    kv_bytes_per_token: int  # every layer of the stage, one token (full-length layers)
    activation_bytes: int
    pool_bytes: int  # may be negative: does not fit
    blocks: int
    tokens: int  # blocks · block_size (SGLang: its token count)
    weights: Loaded  # as the kernel holds them (low, high); stage.bytes is as stored
    pool_bytes_high: int = 0
    tokens_high: int = 0


@dataclass(frozen=True)
class ServePlan:
    config: ModelConfig
    scheme: Scheme
    engine: str
    gpu: str
    memory_bytes: int  # as torch sees it (mem_get_info's total), or --gpu-mem
    tp: int
    pp: int
    kv_dtype: str
    ctx: int
    concurrency: int | None  # asked for (None: the largest that fits)
    defaults: engines.Defaults
    utilization: Fraction
    max_num_batched_tokens: int
    non_torch_bytes: int  # the high end
    cuda_graph_bytes: int  # the high end
    stages: tuple[StagePool, ...]
    max_concurrency: int
    longest_context: int | None  # at `concurrency` (or 1), capped at MAX_CONTEXT_SEARCH
    time: timing.Timing | None
    notes: tuple[str, ...]
    record: engines.Engine | None = None
    non_torch: Span = ZERO
    cuda_graphs: Span = ZERO
    max_concurrency_high: int = 0
    max_num_seqs: int = 0
    # a vision-language model's tower (serving/vision.py): its weights on every GPU and, for
    # an engine that profiles the encoder, its profile run and encoder cache (None: no tower)
    tower: TowerServe | None = None

    @property
    def tower_bytes_per_gpu(self) -> int:
        return self.tower.weights_bytes if self.tower is not None else 0

    @property
    def engine_version(self) -> str:
        return self.record.version if self.record else ""

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def binding(self) -> StagePool:
        """The stage that limits: least pool, then most weights (among the stages that keep
        anything per sequence, when any does: a stage of MLP-only layers holds no cache)."""
        return min(_holding(self.stages), key=lambda s: (s.tokens, s.pool_bytes,
                                                          -s.weights.high))

    @property
    def cacheless(self) -> bool:
        """No layer keeps anything per sequence (no KV, no recurrent state: MLP-only
        blocks): the pool bounds no sequence count; vLLM's max_num_seqs does."""
        return not any(_per_sequence(s) for s in self.stages)

    @property
    def weights_bytes_per_gpu(self) -> int:
        """As loaded (the high end: the kernel path that pads most)."""
        return max(s.weights.high for s in self.stages)

    @property
    def weights_bytes_per_gpu_low(self) -> int:
        return max(s.weights.low for s in self.stages)

    @property
    def weights_stored_bytes_per_gpu(self) -> int:
        return max(s.stage.bytes for s in self.stages) + self.tower_bytes_per_gpu

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
    def kv_pool_bytes_per_gpu_high(self) -> int:
        return min(s.pool_bytes_high for s in self.stages)

    @property
    def kv_pool_tokens_high(self) -> int:
        return min(s.tokens_high for s in self.stages)

    @property
    def fits(self) -> bool:
        """Only when the pessimistic end fits."""
        if self.cacheless:  # more sequences than max_num_seqs wait in the queue: they fit
            return self.binding.pool_bytes > 0
        return self.binding.pool_bytes > 0 and self.max_concurrency >= (self.concurrency or 1)

    @property
    def may_fit(self) -> bool:
        """The optimistic end fits (where the pessimistic one does not: a range)."""
        return self.kv_pool_bytes_per_gpu_high > 0 and \
            self.max_concurrency_high >= (self.concurrency or 1)

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
          ctx: int | None = None, concurrency: int | None = None, engine: str = engines.VLLM,
          engine_version: str | None = None,
          utilization=None, max_num_batched_tokens: int | None = None,
          max_num_seqs: int | None = None, block_size: int | None = None,
          activation_bytes: int | None = None, non_torch_bytes: int | None = None,
          cuda_graph_bytes: int | None = None,
          mfu=None, bandwidth_efficiency=Fraction(8, 10), names=None,
          model_dtype_bytes: int = 2, peak_tflops=None, bandwidth_tbs=None,
          prompt: int | None = None, notes: tuple[str, ...] = (),
          stored=None, max_model_len: int | None = None,
          allow_long_context: bool = False, tower=None, tower_quant=None,
          tower_pixels: tuple[int, int] | None = None, tower_config=None,
          limit_mm_per_prompt: int | None = None) -> ServePlan:
    """The serving plan. `max_model_len`: the engine's derived maximum context
    (accounting/serving/max_len.py; default the config's context_length); a longer --ctx is
    refused as the engine refuses it unless `allow_long_context` (its environment switch).
    `stored`: a checkpoint's bytes as stored, per stage (accounting/checkpoint/stored.py).
    `tower`: a vision-language config's VisionSpec (its quantization_config `tower_quant`,
    Qwen's processor bounds `tower_pixels`): its weights on every GPU and, where the engine
    profiles the encoder, vLLM's multimodal profile run (serving/vision.py)."""
    card = get_gpu(gpu) if gpu else None
    smi_bytes = memory_bytes  # --gpu-mem: what SGLang's nvidia-smi reading is too
    if memory_bytes is None:
        if card is None:
            raise UsageError("serve needs a GPU: --gpu NAME, or --gpu-mem SIZE")
        memory_bytes = card.usable_bytes
    smi_bytes = smi_bytes or card.memory_bytes
    arch = card.arch if card is not None else None
    nvlink = card is None or "PCIe" not in card.fabric.link
    ctx = ctx or config.context_length
    notes = list(notes) + list(max_len.check(config, ctx, prompt, engine,
                                             max_model_len or config.context_length,
                                             allow_long_context))
    rec = engines.get_engine(engine, engine_version)
    d = rec.defaults(card.device_name if card else None, memory_bytes, smi_bytes, tp, pp, config.mla)
    if block_size is not None:
        d = engines.Defaults(d.utilization, d.max_num_batched_tokens, d.max_num_seqs,
                             block_size, d.why + f"; block_size {block_size} (given)")
    if tower is not None and rec.vlm_fraction and utilization is None:  # SGLang's VLM scale
        from accounting.serving.vision import sglang_vlm_factor
        f = sglang_vlm_factor(tower_config)
        d = engines.Defaults(d.utilization * f, d.max_num_batched_tokens, d.max_num_seqs,
                             d.block_size, d.why + f"; × {float(f):.4f} for the vision tower "
                             f"(adjust_mem_fraction_for_vlm)")
    util = d.utilization if utilization is None else Fraction(utilization)
    if not 0 < util <= 1:
        raise UsageError(f"--gpu-memory-utilization must be in (0, 1], got {float(util)}")
    n_tokens = max_num_batched_tokens or d.max_num_batched_tokens
    seqs = max_num_seqs or d.max_num_seqs
    if limit_mm_per_prompt is not None and not rec.profiles_encoder:
        raise UsageError(f"--limit-mm-per-prompt is vLLM's; {rec.engine} has no such setting "
                         f"(drop it)")
    vt = None if tower is None else tower_terms(
        tower, tp, n_tokens, seqs, tower_quant, tower_pixels, model_dtype_bytes,
        limit_mm_per_prompt, not rec.skips_disabled_tower)
    other = startup.non_torch(rec.profiled, tp, pp, nvlink, arch) if non_torch_bytes is None \
        else Span.exact(non_torch_bytes, "given")
    kv_b = kv.kv_dtype_bytes(kv_dtype)
    stage_list = shards.stages(config, scheme, model_dtype_bytes, tp, pp, names)
    if stored is not None:  # a checkpoint's bytes as stored (accounting/checkpoint/stored.py)
        stage_list = stored(stage_list)
    if not rec.profiled:
        graphs = ZERO  # SGLang: in its reserve
    elif cuda_graph_bytes is not None:
        graphs = Span.exact(cuda_graph_bytes, "given")
    else:
        sizes = startup.capture_sizes(seqs, n_tokens)
        graphs = startup.cuda_graphs(forward_peak(config, sizes[-1], tp), sizes)
    hybrid = None
    if rec.profiled and block_size is None:
        every = kv.layer_caches(config, kv_b, tp, tuple(range(config.num_layers)))
        block = kv.hybrid_block(every, d.block_size)
        if block != d.block_size:
            hybrid = max(c.bytes_per_token for c in every)
            d = engines.Defaults(d.utilization, d.max_num_batched_tokens, d.max_num_seqs,
                                 block, d.why + f"; block_size {block}: aligned to the "
                                 f"recurrent state's page (vLLM's hybrid rule)")
    moe = set(range(config.num_layers)) - set(config.dense_layers) \
        if config.num_experts is not None else set()
    pools = []
    for st in stage_list:
        caches = kv.layer_caches(config, kv_b, tp, st.layers)
        caches = tuple(kv.pad_states(caches, d.block_size, hybrid) if hybrid else caches)
        per_token = sum(c.bytes_per_token for c in caches)
        w = loaded(config, scheme.name, st.bytes, len(moe & set(st.layers)), tp, arch)
        if vt is not None:  # the tower on every stage's GPU (an upper bound beyond stage 0)
            w = Loaded(w.low + vt.weights_bytes, w.high + vt.weights_bytes, w.paths,
                       w.rule + "; the vision tower as stored")
        last = st.index == pp - 1  # only the last stage runs the sampler
        if not rec.profiled:
            act = act_low = 0
        elif activation_bytes is not None:
            act = act_low = activation_bytes
        elif last:
            act = activation_peak(config, n_tokens, seqs, tp)
            act_low = activation_peak(config, n_tokens, seqs, tp, high=False)
        else:
            act = act_low = forward_peak(config, n_tokens, tp)
        if vt is not None and rec.profiles_encoder and activation_bytes is None:
            act, act_low = vt.profile_peak(act), vt.profile_peak(act_low)
        ends = []
        for wb, nt, gb, ab in ((w.high, other.high, graphs.high, act),
                               (w.low, other.low, graphs.low, act_low)):
            pool = rec.pool(memory_bytes, util, wb, ab, nt, gb)
            if rec.profiled:
                page = d.block_size * per_token
                blocks = max(pool, 0) // page if page else 0
                tokens = blocks * d.block_size
            else:
                tokens = max(pool, 0) // per_token if per_token else 0
                blocks = tokens
            ends.append((pool, blocks, tokens))
        (pool, blocks, tokens), (pool_hi, _, tokens_hi) = ends
        pools.append(StagePool(st, caches, per_token, act, pool, blocks, tokens, w, pool_hi,
                               tokens_hi))
    bind = min(_holding(pools), key=lambda s: (s.tokens, s.pool_bytes))
    max_conc = _most(pools, ctx, d.block_size, lambda p: p.pool_bytes, seqs)
    max_hi = _most(pools, ctx, d.block_size, lambda p: p.pool_bytes_high, seqs)
    bounded = any(kv.bytes_per_sequence(list(p.caches), ctx, d.block_size) for p in pools)
    longest = (_longest(pools, concurrency or 1, d.block_size)
               if bind.pool_bytes > 0 and bounded else None)  # None: no bound, or no pool
    if rec.profiled and ctx > n_tokens:
        notes.append(f"vLLM prefills a {ctx:,}-token prompt in chunks of {n_tokens:,} "
                     f"(max_num_batched_tokens; chunked prefill)")
    if rec.profiled and not rec.graphs_in_pool and graphs.high + startup.CONTEXT_BYTES > \
            memory_bytes - int(memory_bytes * util):
        notes.append(f"vLLM {rec.version} captures CUDA graphs after the pool is allocated, in "
                     f"the (1 − {float(util):g}) headroom: up to {graphs.high / GiB:.2f} GiB of "
                     f"graphs and the 0.51 GiB context may not fit it (an out-of-memory at "
                     f"capture; lower --gpu-memory-utilization)")
    # the decode step's batch: what the engine runs at once, at most max_num_seqs (issue 45:
    # it was the pool's whole concurrency, max_num_seqs ignored)
    batch = min(concurrency or max_conc, seqs)
    time = None
    if card is not None or (peak_tflops is not None and bandwidth_tbs is not None):
        peak = (Fraction(peak_tflops) if peak_tflops is not None else card.bf16_tflops) * TERA
        bw = (Fraction(bandwidth_tbs) if bandwidth_tbs is not None else card.bandwidth_tbs) * TERA
        kernels = None
        if mfu is None and card is not None and peak_tflops is None and bandwidth_tbs is None:
            from accounting.timing.serve import serve_times  # issue 39: measured kernels
            kernels = serve_times(config, card, rec, scheme.kind, tp, prompt or ctx,
                                  n_tokens if rec.profiled else prompt or ctx,
                                  max(batch, 1), ctx,
                                  "fp8" if kv_dtype.startswith("fp8") else "bfloat16")
        time = timing.timing(config, [p.stage for p in pools], [list(p.caches) for p in pools],
                             tp, pp, prompt or ctx, ctx, max(batch, 1), peak, bw,
                             Fraction(1, 2) if mfu is None else Fraction(mfu),
                             Fraction(bandwidth_efficiency), scheme, model_dtype_bytes, kernels)
    return ServePlan(config, scheme, engine, card.name if card else "custom GPU", memory_bytes,
                     tp, pp, kv_dtype, ctx, concurrency, d, util, n_tokens, other.high,
                     graphs.high, tuple(pools), max_conc, longest, time, tuple(notes), rec,
                     other, graphs, max_hi, seqs, vt)


def _most(pools, ctx: int, block: int, pool_of, seqs: int) -> int:
    """The most sequences of ctx tokens every stage's pool holds: each stage that keeps
    something per sequence bounds the count by its pool; a model that keeps nothing (MLP-only
    blocks: no KV, no state) is bounded by the scheduler's max_num_seqs alone (vLLM's
    SchedulerConfig; SGLang's max_running_requests), not 0."""
    if any(pool_of(p) <= 0 for p in pools):
        return 0
    bounds = [pool_of(p) // need for p in pools
              if (need := kv.bytes_per_sequence(list(p.caches), ctx, block))]
    return min(bounds) if bounds else seqs


def _per_sequence(p: StagePool) -> bool:
    return any(c.bytes_per_token or c.state_bytes for c in p.caches)


def _holding(pools):
    """The stages that keep something per sequence or have no pool at all, else all (a
    cacheless model)."""
    return [p for p in pools if _per_sequence(p) or p.pool_bytes <= 0] or list(pools)


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
