"""`serve --search`: the serving layouts that meet a latency target, ranked by output tokens
per second per GPU (issue 40).

Every worker's figures are `serve`'s for that worker (serving.plan.serve at ctx = ISL + OSL,
prompt = ISL, concurrency = the worker's batch): its TTFT (one prompt prefilled alone, in the
engine's chunks) and its decode step at the batch (TPOT). Nothing is re-derived here; this
module only composes those figures into deployments:

Aggregated (one engine does prefill and decode; vLLM/SGLang continuous batching): a worker
holding B sequences runs, per OSL decode steps, the B prefills of the requests that replace
the finished ones, one after another between steps (the prefill stalls the step it
interrupts; no overlap is credited). With P = serve's TTFT and D(B) = serve's decode step:
    per-user TPOT  = D(B) + B·P / OSL          (B prompts' prefills spread over OSL steps)
    output tokens/s per worker = B / TPOT;     TTFT = P
Disaggregated (prefill and decode workers, the KV cache moved between them: vLLM's
NixlConnector, SGLang's --disaggregation-mode): x prefill workers of layout p and y decode
workers of layout d at batch B make one replica (AIConfigurator's "xPyD"):
    TTFT = P_p + ISL · (KV bytes per token per decode GPU) / link
         (link: NVLink per GPU per direction when the replica's GPUs share a node, else the
          node's network adapter per GPU; gpus.py's fabric)
    TPOT = D_d(B)
    requests/s = min(x / P_p, y · B / (OSL · D_d(B)))   (each prefill worker one prompt at a
                                                         time, each decode worker B at once)
    output tokens/s per GPU = requests/s · OSL / (x·gpus_p + y·gpus_d)
Lengths may be distributions (lengths.py: uniform, normal, an empirical list; seeded):
the plans are at the mean lengths (rounded up), the prefill P at each of the prompt lengths'
points, and the formulas above take E[P] and E[OSL]; TTFT is the mean over requests, or
with a percentile the p-quantile (prefill time grows with the prompt, so without a queue
it is the prefill at the prompt lengths' p-quantile), and an aggregated TPOT the p-quantile
of its spread between requests (tpot_spread.py). At a request rate, TTFT adds the wait for a
server (queueing.py, search_queue.py); a layout at utilisation >= 1 meets nothing.

Layouts per worker: TP in powers of two up to a node's GPUs (vLLM and SGLang run TP inside a
node, PP across nodes: vLLM docs, "Distributed inference and serving", "multi-node: tensor
parallel size the GPUs in each node, pipeline parallel size the number of nodes"); PP only
where no TP inside a node holds the model. Weights: the checkpoint's scheme, and fp8 for a
16-bit checkpoint on a card with FP8 Tensor Cores (vLLM --quantization fp8, dynamic per-tensor
scales); KV: bf16, and fp8 on such a card (--kv-cache-dtype fp8). Batches: powers of two up to
the engine's max_num_seqs and the pool's concurrency at ISL + OSL.

The search bisects a layout's batches for the largest meeting the TPOT target, as a decode
worker and as an aggregated one (TPOT grows with the batch, tokens/s too), and pairs prefill
and decode workers at the two worker ratios around the balance point; `exhaustive=True`
evaluates every batch and pairing (the tests: both, and a brute force, agree).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from fractions import Fraction

from accounting.planning.gpus import get_gpu
from accounting.runtime.errors import UsageError
from accounting.serving import engines
from accounting.serving.queueing import quantile
from accounting.serving.tpot_spread import tpot_quantile
from accounting.serving.workload import Workload  # noqa: F401 (the search's input, here too)
from accounting.units import BF16, FP16

MAX_WORKERS = 8  # prefill or decode workers in one replica (AIConfigurator's default cap)
SIXTEEN_BIT = (BF16, FP16)


@dataclass(frozen=True)
class Worker:
    """One engine instance: its parallel layout, formats and batch, and serve's plan of it."""
    tp: int
    pp: int
    weights: str
    kv_dtype: str
    batch: int
    plan: object  # ServePlan
    online_fp8: bool = False  # a 16-bit checkpoint quantized to fp8 as it loads
    spec: object = None  # speculative.Speculation of the decode step, or None
    dp: int = 1  # attention data-parallel ranks (with expert parallelism): dp_attention.py
    dpw: object = None  # its dp_attention.DPWorker
    points: tuple = ()  # ((prefill seconds, probability), ...) over the prompt lengths

    @cached_property
    def prefill_points(self) -> tuple[tuple[Fraction, Fraction], ...]:
        """In the prompt lengths' order (lengths.Lengths.points)."""
        return self.points or ((self.ttft_seconds, Fraction(1)),)

    @cached_property
    def prefill_sorted(self) -> tuple[tuple[Fraction, Fraction], ...]:
        """In rising order of seconds (queueing.quantile reads them so)."""
        return tuple(sorted(self.prefill_points))

    @cached_property
    def prefill_moments(self) -> tuple[Fraction, Fraction]:
        """(mean, squared CV) of the prefill over the prompt lengths (queueing.py)."""
        from accounting.serving.queueing import mean_service
        return mean_service(self.prefill_points)

    @cached_property
    def mean_prefill(self) -> Fraction:
        """E[P] over the prompt lengths (a fixed prompt: serve's TTFT)."""
        return sum((s * q for s, q in self.prefill_points), Fraction(0))

    @property
    def rank_batch(self) -> int:
        return self.batch // self.dp


    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @cached_property  # (a Timed sums its ops on every read: read once)
    def ttft_seconds(self) -> Fraction:
        return self.dpw.ttft_seconds if self.dpw is not None else self.plan.time.ttft_seconds

    @cached_property
    def step_seconds(self) -> Fraction:
        """Per output token: serve's decode step, or with speculation the speculative step
        over the tokens it emits on average (serving/speculative.py)."""
        if self.spec is not None:
            return self.spec.tpot_seconds
        return self.dpw.step_seconds if self.dpw is not None else self.plan.time.tpot_seconds

    def label(self) -> str:
        dp = f" DP{self.dp}+EP{self.dp * self.tp}" if self.dp > 1 else ""
        return f"TP{self.tp} PP{self.pp}{dp} w {self.weights} kv {self.kv_dtype}"


@dataclass(frozen=True)
class Layout:
    disaggregated: bool
    decode: Worker  # aggregated: the worker itself
    decode_workers: int
    prefill: Worker | None
    prefill_workers: int
    ttft_seconds: Fraction
    tpot_seconds: Fraction
    requests_per_second: Fraction  # one replica
    kv_transfer_seconds: Fraction = Fraction(0)
    replicas: int = 1
    link: str = ""
    demand: Fraction | None = None  # --request-rate: the requests/s the replicas serve
    service: tuple = ()  # ((own TTFT seconds, probability), ...): prefill (+ KV transfer)
    utilisation: Fraction | None = None  # at --request-rate: demand / capacity
    wait: object = None  # queueing.Wait at --request-rate
    tpot_mean: Fraction | None = None  # where tpot_seconds is a percentile's (tpot_spread.py)

    @property
    def step_mean(self) -> Fraction:  # the mean TPOT (the capacity's)
        return self.tpot_seconds if self.tpot_mean is None else self.tpot_mean

    @property
    def served_requests_per_second(self) -> Fraction:
        """All replicas: their capacity, or the asked rate when one is given (the replicas
        then run below their batch: Little's law, concurrency = rate × latency)."""
        cap = self.requests_per_second * self.replicas
        return cap if self.demand is None else min(cap, self.demand)

    @property
    def gpus_per_replica(self) -> int:
        p = self.prefill.gpus * self.prefill_workers if self.prefill else 0
        return p + self.decode.gpus * self.decode_workers

    @property
    def gpus(self) -> int:
        return self.gpus_per_replica * self.replicas

    def tokens_per_second(self, osl: int) -> Fraction:
        return self.served_requests_per_second * osl

    def tokens_per_second_per_gpu(self, osl: int) -> Fraction:
        return self.tokens_per_second(osl) / self.gpus

    def cost_per_million_tokens(self, w: Workload) -> Fraction | None:
        """price a GPU-hour × GPUs / output tokens an hour, per 10^6 output tokens (one
        price for every GPU: the ranking by tokens/s per GPU is the ranking by cost)."""
        if w.price_per_gpu_hour is None:
            return None
        return w.price_per_gpu_hour * self.gpus * 10**6 / (self.tokens_per_second(w.osl_mean) * 3600)

    @property
    def tokens_per_second_per_user(self) -> Fraction:
        return 1 / self.tpot_seconds

    def meets(self, w: Workload) -> bool:
        return (w.ttft is None or self.ttft_seconds <= w.ttft) and \
            (w.tpot is None or self.tpot_seconds <= w.tpot) and \
            (self.utilisation is None or self.utilisation < 1)

    def key(self) -> tuple:
        p = self.prefill
        return (self.disaggregated, self.decode.dp, self.decode.tp, self.decode.pp,
                self.decode.weights,
                self.decode.kv_dtype, self.decode.batch, self.decode_workers,
                p and (p.tp, p.pp, p.weights, p.kv_dtype), self.prefill_workers)


@dataclass(frozen=True)
class SearchResult:
    model: str
    gpu: str
    engine: str
    workload: Workload
    layouts: tuple[Layout, ...]  # meeting the targets, best first
    frontier: tuple[Layout, ...]  # Pareto: tokens/s/GPU against tokens/s/user (TTFT met)
    evaluated: int  # serve plans computed
    notes: tuple[str, ...] = field(default_factory=tuple)


def _pow2(limit: int) -> list[int]:
    out, n = [], 1
    while n <= limit:
        out.append(n)
        n *= 2
    return out


class _Plans:
    """serve() once per (tp, pp, weights, kv, batch); None where it refuses or does not fit."""

    def __init__(self, config, scheme, gpu: str, engine: str, workload: Workload, kwargs,
                 speculative=None):
        self.config, self.scheme, self.gpu, self.engine = config, scheme, gpu, engine
        self.w, self.kwargs, self.cache = workload, kwargs, {}
        self.speculative = speculative  # (method, tokens, acceptance, draft config) or None
        self.plans = {}
        self.imbalance = Fraction(1)

    def scheme_of(self, name: str):
        from accounting.formats.schemes import get_scheme
        return self.scheme if name == self.scheme.name else get_scheme(name)

    def raw(self, tp: int, pp: int, weights: str, kv: str, batch: int, isl: int | None = None):
        """serve's plan, fitting or not (None where it refuses the layout); at the prompt
        length isl when given (the prefill at one of a distribution's points)."""
        key = (tp, pp, weights, kv, batch) + ((isl,) if isl is not None else ())
        if key not in self.plans:
            from accounting.serving.plan import serve
            prompt = self.w.isl if isl is None else isl
            try:
                p = serve(self.config, self.scheme_of(weights), gpu=self.gpu, tp=tp, pp=pp,
                          kv_dtype=kv, ctx=prompt + self.w.osl, prompt=prompt,
                          concurrency=batch, engine=self.engine, **self.kwargs)
            except (UsageError, ValueError, ZeroDivisionError):
                p = None
            self.plans[key] = p
        return self.plans[key]

    def points(self, tp: int, pp: int, weights: str, kv: str, dp: int = 1):
        """((prefill seconds, probability), ...) at the prompt lengths' points (lengths.py);
        () for a fixed prompt (the worker's own TTFT); None where a point's plan refuses."""
        if self.w.isl_dist is None:
            return ()
        key = ("points", tp, pp, weights, kv, dp)
        if key not in self.cache:
            out = []
            for isl, q in self.w.isl_dist.points:
                p = self.raw(tp, pp, weights, kv, 1, isl)
                if p is None or p.time is None:
                    out = None
                    break
                if dp > 1:
                    from accounting.serving.dp_attention import dp_worker
                    d = dp_worker(self.config, p, dp, self.imbalance, isl)
                    if d is None:
                        out = None
                        break
                    out.append((d.ttft_seconds, q))
                else:
                    out.append((p.time.ttft_seconds, q))
            self.cache[key] = None if out is None else tuple(out)
        return self.cache[key]

    def dp(self, tp: int, dp: int, weights: str, kv: str, rank_batch: int) -> Worker | None:
        """A DP-attention + EP worker of dp ranks at TP tp (dp_attention.py), if it fits."""
        key = ("dp", tp, dp, weights, kv, rank_batch)
        if key not in self.cache:
            from accounting.serving.dp_attention import dp_worker
            p = self.raw(tp, 1, weights, kv, rank_batch)
            d = None if p is None or p.time is None else \
                dp_worker(self.config, p, dp, self.imbalance, self.w.isl)
            ok = d is not None and d.fits and rank_batch <= p.max_num_seqs
            pts = self.points(tp, 1, weights, kv, dp) if ok else None
            ok = ok and pts is not None
            online = weights == "fp8" and self.scheme.name in SIXTEEN_BIT
            spec = None
            if ok and self.speculative is not None:  # asked for: every worker speculates
                from accounting.serving.speculative import speculate_dp
                method, tokens, acceptance, draft = self.speculative
                spec = speculate_dp(self.config, p, d, method, tokens, acceptance, draft)
                ok = spec is not None
            self.cache[key] = Worker(tp, 1, weights, kv, dp * rank_batch, p, online, spec, dp,
                                     d, pts) if ok else None
        return self.cache[key]

    def get(self, tp: int, pp: int, weights: str, kv: str, batch: int) -> Worker | None:
        key = (tp, pp, weights, kv, batch)
        if key not in self.cache:
            p = self.raw(tp, pp, weights, kv, batch)
            ok = p is not None and p.fits and p.time is not None
            pts = self.points(tp, pp, weights, kv) if ok else None
            ok = ok and pts is not None
            online = weights == "fp8" and self.scheme.name in SIXTEEN_BIT
            spec = None
            if ok and self.speculative is not None:
                from accounting.serving.speculative import speculate
                method, tokens, acceptance, draft = self.speculative
                spec = speculate(self.config, p, method, tokens, acceptance, draft)
            self.cache[key] = Worker(tp, pp, weights, kv, batch, p, online, spec,
                                     points=pts) if ok else None
        return self.cache[key]


def formats(scheme, card) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(weight schemes, KV dtypes) the search tries: the checkpoint's own; fp8 besides for a
    16-bit checkpoint, and an fp8 KV cache, on a card with FP8 Tensor Cores."""
    fp8 = card.fp8_tflops is not None
    weights = (scheme.name, "fp8") if fp8 and scheme.name in SIXTEEN_BIT else (scheme.name,)
    return weights, (("bf16", "fp8") if fp8 else ("bf16",))


def shapes(plans: _Plans, card, max_gpus: int, weights: str, kv: str) -> list[tuple[int, int]]:
    """(tp, pp) per worker: TP inside a node; PP (across nodes) only where no such TP fits."""
    node = card.fabric.gpus_per_node
    tps = _pow2(min(node, max_gpus))
    out = [(tp, 1) for tp in tps if plans.get(tp, 1, weights, kv, 1) is not None]
    if out:
        return out
    top = tps[-1]
    for pp in _pow2(max_gpus // top)[1:]:
        if plans.get(top, pp, weights, kv, 1) is not None:
            return [(top, pp)]
    return []


def _sweep(get, grid: list[int], w: Workload, exhaustive: bool) -> list[Worker]:
    """The workers of one layout over the batch grid. Exhaustive: every batch that fits.
    Else two bisections: the largest batch whose decode step meets the TPOT target (the best
    decode worker: its tokens/s grow with the batch) and the largest whose aggregated TPOT
    does (the best aggregated worker); fitting and both TPOTs are monotone in the batch."""
    seen: dict[int, Worker | None] = {}

    def at(i: int):
        if grid[i] not in seen:
            seen[grid[i]] = get(grid[i])
        return seen[grid[i]]

    if exhaustive:
        for i in range(len(grid)):
            if at(i) is None:
                break
        return [x for x in seen.values() if x is not None]

    def bisect(good) -> None:
        lo, hi = -1, len(grid)  # good at lo (or none), not good at hi (or past the grid)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            wk = at(mid)
            lo, hi = (mid, hi) if wk is not None and good(wk) else (lo, mid)

    limit = w.tpot
    bisect(lambda wk: limit is None or wk.step_seconds <= limit)
    bisect(lambda wk: limit is None or _aggregated(wk, w).tpot_seconds <= limit)
    return [seen[b] for b in sorted(seen) if seen[b] is not None]


def _aggregated(wk: Worker, w: Workload) -> Layout:
    p, d, osl = wk.mean_prefill, wk.step_seconds, w.osl_mean
    tpot = d + Fraction(wk.rank_batch) * p / osl  # each rank prefills its own
    m, cs2 = wk.prefill_moments
    stat = tpot_quantile(d, wk.rank_batch, (m, cs2 * m * m), w.osl_lengths, w.percentile)
    return Layout(False, wk, 1, None, 0, quantile(None, wk.prefill_sorted, w.percentile),
                  stat, Fraction(wk.batch) / (osl * tpot), service=wk.prefill_sorted,
                  tpot_mean=None if stat == tpot else tpot)


def _link(card, gpus: int) -> tuple[Fraction | None, str]:
    f = card.fabric
    if gpus <= f.gpus_per_node:
        return f.nvlink, f"{f.link} in one node"
    if f.network is None:
        return None, "no network between nodes"
    return f.network, f.adapter.format(gbits=f.network_gbits)


def _disaggregated(pre: Worker, dec: Worker, x: int, y: int, w: Workload, card,
                   memo: dict) -> Layout | None:
    gpus = x * pre.gpus + y * dec.gpus
    bw, link = _link(card, gpus)
    if bw is None:
        return None
    key = (id(pre), id(dec), bw)  # (the same for every x, y on one link: computed once)
    if key not in memo:
        per_token = Fraction(dec.plan.kv_bytes_per_token_per_gpu) / bw
        # each prompt's own prefill and KV transfer (both grow with the prompt: their points
        # pair up in order)
        pts = w.isl_dist.points if w.isl_dist else ((w.isl, 1),)
        service = tuple(sorted((s + isl * per_token, q)
                               for (s, q), (isl, _) in zip(pre.prefill_points, pts)))
        memo[key] = (service, quantile(None, service, w.percentile),
                     w.isl_lengths.mean * per_token)
    service, ttft, transfer = memo[key]
    rate = min(Fraction(x) / pre.mean_prefill,
               Fraction(y * dec.batch) / (w.osl_mean * dec.step_seconds))
    return Layout(True, dec, y, pre, x, ttft, dec.step_seconds, rate, transfer, 1, link,
                  service=service)


def _pairings(pre: Worker, dec: Worker, w: Workload, exhaustive: bool):
    """(x, y) worker counts: all up to MAX_WORKERS, or the two x around balance per y."""
    for y in range(1, MAX_WORKERS + 1):
        if exhaustive or w.request_rate is not None:
            # (at a rate more prefill workers than balance shorten the wait: try them all)
            xs = range(1, MAX_WORKERS + 1)
        else:
            # x / P = y · B / (OSL · D): the prefill workers that keep y decode workers fed
            # (tokens/s/GPU rises with x below it and falls above: the optimum is next to it)
            want = Fraction(y * dec.batch) * pre.mean_prefill / (w.osl_mean * dec.step_seconds)
            most = min(MAX_WORKERS, (w.max_gpus - y * dec.gpus) // pre.gpus)
            xs = sorted({max(1, min(int(want), most)), max(1, min(int(want) + 1, most))})
        for x in xs:
            if x * pre.gpus + y * dec.gpus <= w.max_gpus:
                yield x, y


def search(config, scheme, gpu: str, workload: Workload, *, engine: str = engines.VLLM,
           model: str = "", exhaustive: bool = False, top: int | None = None,
           speculative=None, ep_imbalance=Fraction(1), **serve_kwargs) -> SearchResult:
    card = get_gpu(gpu)
    w = workload
    if w.max_gpus < 1:
        raise UsageError("--max-gpus must be at least 1")
    plans = _Plans(config, scheme, gpu, engine, w, serve_kwargs, speculative)
    plans.imbalance = Fraction(ep_imbalance)
    weight_opts, kv_opts = formats(scheme, card)
    workers: list[Worker] = []  # every fitting (layout, batch) evaluated
    prefills: list[Worker] = []  # batch 1: the prefill workers
    for wt in weight_opts:
        for kvd in kv_opts:
            for tp, pp in shapes(plans, card, w.max_gpus, wt, kvd):
                first = plans.get(tp, pp, wt, kvd, 1)
                prefills.append(first)
                limit = min(first.plan.max_num_seqs, first.plan.max_concurrency)
                workers += _sweep(lambda b, a=(tp, pp, wt, kvd): plans.get(*a, b),
                                  _pow2(limit), w, exhaustive)
    if config.num_experts is not None:  # attention DP + expert parallelism (decode side)
        node = card.fabric.gpus_per_node
        for wt in weight_opts:
            for kvd in kv_opts:
                for tp in _pow2(node):
                    for dp in _pow2(node // tp)[1:]:
                        if dp * tp > w.max_gpus:
                            continue
                        workers += _sweep(lambda b, a=(tp, dp, wt, kvd): plans.dp(*a, b),
                                          _pow2(4096), w, exhaustive)
    candidates: list[Layout] = [_aggregated(wk, w) for wk in workers]
    # a prefill worker's own TTFT statistic is a floor of the layout's (transfer, wait >= 0)
    memo: dict = {}
    ok_pre = [p for p in prefills
              if w.ttft is None or quantile(None, p.prefill_sorted, w.percentile) <= w.ttft]
    for dec in workers:
        if w.tpot is not None and dec.step_seconds > w.tpot:
            continue
        for pre in ok_pre:
            if (pre.weights, pre.kv_dtype) != (dec.weights, dec.kv_dtype):
                continue  # one checkpoint and one KV format on both sides of the transfer
            for x, y in _pairings(pre, dec, w, exhaustive):
                lay = _disaggregated(pre, dec, x, y, w, card, memo)
                if lay is not None:
                    candidates.append(lay)
    from accounting.serving.search_queue import replicated
    placed = [r for r in (replicated(c, w) for c in candidates) if r is not None]
    osl = w.osl_mean  # output tokens per request, on average
    meeting = [c for c in placed if c.meets(w)]
    # ties (a request rate makes many equal): fewer GPUs, then the faster per user
    rank = {id(c): c.tokens_per_second_per_gpu(osl) for c in placed}
    meeting.sort(key=lambda c: (-rank[id(c)], c.gpus, -c.tokens_per_second_per_user, c.key()))
    timely = [c for c in placed if w.ttft is None or c.ttft_seconds <= w.ttft]
    frontier = pareto([c for c in timely if not c.disaggregated], osl) + \
        pareto([c for c in timely if c.disaggregated], osl)
    notes = []
    if not meeting:
        notes.append("no layout meets the targets within --max-gpus: the frontier shows "
                     "what the GPUs reach")
    return SearchResult(model, card.name, engine, w, tuple(meeting[:top] if top else meeting),
                        tuple(frontier), len(plans.plans), tuple(notes))


def pareto(layouts: list[Layout], osl: int) -> list[Layout]:
    """Those no other beats on both tokens/s/GPU and tokens/s/user; by tokens/s/user."""
    per_gpu = {id(c): c.tokens_per_second_per_gpu(osl) for c in layouts}
    best = {}
    for c in layouts:
        k = c.tokens_per_second_per_user
        if k not in best or per_gpu[id(c)] > per_gpu[id(best[k])]:
            best[k] = c
    pts = sorted(best.values(), key=lambda c: (-c.tokens_per_second_per_user, -per_gpu[id(c)]))
    out, top = [], Fraction(-1)
    for c in pts:
        if per_gpu[id(c)] > top:
            out.append(c)
            top = per_gpu[id(c)]
    return out
