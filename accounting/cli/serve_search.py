"""`serve --search`: the serving layouts that meet a TTFT/TPOT target (issue 40): its flags
and its run. The computation is accounting/serving/search.py, the rendering search_views.py."""
from __future__ import annotations

from fractions import Fraction

from accounting.cli.args import exact_number, positive_int
from accounting.runtime.errors import UsageError, shorten
from accounting.serving import engines

SEARCH_ONLY = ("max_gpus", "isl", "osl", "ttft", "tpot", "request_rate", "emit", "plot",
               "percentile", "seed")

MAX_SEARCH_GPUS = 4096


def add_search_args(p, positive) -> None:
    g = p.add_argument_group("layout search (--search)")
    g.add_argument("--search", action="store_true",
                   help="search TP/PP, weight and KV formats, batch, aggregated or "
                        "disaggregated prefill/decode and replicas for the most output "
                        "tokens/s per GPU meeting --ttft/--tpot (docs/serving_search.md)")
    g.add_argument("--max-gpus", type=positive_int("--max-gpus", MAX_SEARCH_GPUS, "4,096"),
                   metavar="N", help="GPUs the deployment may use (default 8)")
    g.add_argument("--isl", type=_lengths("--isl"), metavar="T|DIST",
                   help="input tokens per request, or a distribution: uniform:A,B, "
                        "normal:MEAN,SD[,LO,HI], list:L1,L2,... or file:PATH (required with "
                        "--search; docs/serving_search.md)")
    g.add_argument("--osl", type=_lengths("--osl"), metavar="T|DIST",
                   help="output tokens per request, or a distribution as --isl's (required "
                        "with --search)")
    g.add_argument("--percentile", type=_percentile, metavar="P",
                   help="hold --ttft and --tpot at the P-th percentile of requests (e.g. 90 "
                        "or p99; default: the mean)")
    g.add_argument("--seed", type=positive_int("--seed"), metavar="N",
                   help="seed of the length distributions' draws (default 1)")
    g.add_argument("--ttft", type=positive("--ttft"), metavar="S",
                   help="time-to-first-token target in seconds (default: none)")
    g.add_argument("--tpot", type=positive("--tpot"), metavar="S",
                   help="time-per-output-token target in seconds (default: none)")
    g.add_argument("--request-rate", type=positive("--request-rate"), metavar="R",
                   help="requests/s to sustain: replicas enough for it (default: as many as "
                        "--max-gpus holds)")
    g.add_argument("--emit", choices=engines.ENGINES, metavar="ENGINE",
                   help="write each layout's launch command for vllm or sglang (default: "
                        "--engine's)")
    g.add_argument("--plot", metavar="FILE.png",
                   help="also draw the Pareto frontier into FILE.png (matplotlib)")
    d = p.add_argument_group("attention data parallelism with expert parallelism (MoE)")
    d.add_argument("--dp", type=positive_int("--dp", 64, "64"), metavar="D",
                   help="D attention data-parallel ranks of --tp each, the routed experts "
                        "over all D·TP GPUs (vLLM --data-parallel-size D "
                        "--enable-expert-parallel; SGLang --attn-dp-size D); --concurrency is "
                        "a rank's; --search tries D itself")
    d.add_argument("--ep-imbalance", type=_at_least_one, default=Fraction(1),
                   metavar="F", help="the busiest GPU's routed tokens over the mean under "
                                     "expert parallelism (default 1: uniform routing)")
    s = p.add_argument_group("speculative decoding (serve and --search)")
    s.add_argument("--speculative", metavar="mtp|MODEL",
                   help="draft k tokens a step with the model's own MTP head ('mtp': one more "
                        "block of the last layer's kind) or a draft model (a preset name); "
                        "needs --acceptance")
    s.add_argument("--num-speculative-tokens", type=positive_int("--num-speculative-tokens",
                                                                 16, "16"),
                   default=1, metavar="K", help="tokens drafted a step (default 1)")
    s.add_argument("--acceptance", type=_unit, metavar="A",
                   help="per-token acceptance rate in [0, 1] (DeepSeek-V3 §5.4.3 reports "
                        "85–90%% for its MTP head's token)")


def _lengths(flag: str):
    """A plain integer (as before: a fixed length), or a distribution's SPEC kept as text
    and read with --seed by workload_of (serving/lengths.py)."""
    import argparse
    whole = positive_int(flag)

    def parse(text: str):
        if ":" not in text:
            return whole(text)
        from accounting.serving.lengths import KINDS
        if text.partition(":")[0] not in KINDS:
            raise argparse.ArgumentTypeError(
                f"expected T, uniform:A,B, normal:MEAN,SD[,LO,HI], list:L1,... or file:PATH, "
                f"got {text[:40]!r}")
        return text
    parse.__name__ = "length"
    return parse


def _percentile(text: str):
    """P in (0, 100) (a leading 'p' allowed: p99), as the fraction P/100."""
    import argparse
    from accounting.planning.compute import exact
    try:
        x = exact(text.strip().removeprefix("p").removeprefix("P"), "--percentile")
    except UsageError:
        raise argparse.ArgumentTypeError(f"expected a percentile such as 90 or p99, got "
                                         f"{text[:30]!r}") from None
    if not 0 < x < 100:  # (p100 of a queue's wait is unbounded: its tail is exponential)
        raise argparse.ArgumentTypeError(f"must be above 0 and below 100, got {text[:30]}")
    return x / 100


def workload_of(ns):
    """The search's Workload from the flags (the lengths drawn with --seed)."""
    from accounting.serving import lengths
    from accounting.serving.search import Workload
    seed = 1 if ns.seed is None else ns.seed

    def read(value, flag):
        return lengths.fixed(value) if isinstance(value, int) else \
            lengths.parse(value, flag, seed)
    isl, osl = read(ns.isl, "--isl"), read(ns.osl, "--osl")
    if ns.seed is not None and not {isl.kind, osl.kind} & set(lengths.RANDOM):
        raise UsageError("--seed draws the random lengths (--isl/--osl uniform: or normal:): "
                         "drop --seed or give one of them")
    price = getattr(ns, "price_per_gpu_hour", None)  # issue 42's flag (another branch)
    return Workload.of(isl, osl, ns.ttft, ns.tpot,
                       ns.request_rate, ns.max_gpus or 8,
                       None if price is None else Fraction(price), percentile=ns.percentile)


# --acceptance: a probability; --ep-imbalance: the busiest GPU over the mean, so at least 1
_unit = exact_number("--acceptance", lambda x: 0 <= x <= 1, "in [0, 1]")
_at_least_one = exact_number("--ep-imbalance", lambda x: x >= 1, "at least 1 (the busiest GPU's "
                             "routed tokens over the mean)")


def speculative_of(ns):
    """(method, tokens, acceptance, draft config) of --speculative, or None."""
    if ns.speculative is None:
        if ns.acceptance is not None:
            raise UsageError("--acceptance needs --speculative mtp|MODEL")
        return None
    if ns.acceptance is None:
        raise UsageError("--speculative needs --acceptance A (the per-token acceptance rate)")
    from accounting.serving.speculative import MTP
    draft = None
    if ns.speculative != MTP:
        from accounting.architecture.presets import get_preset
        draft = get_preset(ns.speculative)
    return ns.speculative, ns.num_speculative_tokens, ns.acceptance, draft


def refuse_search_flags(ns) -> None:
    """A search flag without --search would be ignored in silence: refuse it."""
    for name in SEARCH_ONLY:
        if getattr(ns, name) is not None:
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} is a --search flag: add --search (or drop {flag})")


def data_parallel(ns, plan, config) -> tuple[list, dict]:
    """serve --dp D: the DP-attention + EP worker's table and JSON key."""
    if ns.dp is None or ns.dp == 1:
        return [], {}
    if ns.pp != 1:
        raise UsageError("--dp runs each rank at --tp without pipeline stages: drop --pp")
    from accounting.serving import search_views
    from accounting.serving.dp_attention import dp_worker
    w = dp_worker(config, plan, ns.dp, ns.ep_imbalance)
    if w is None:
        raise UsageError(f"--dp {ns.dp}: needs a mixture-of-experts model, --gpu NAME with "
                         f"measured tables, D × TP within one node dividing the experts")
    return [search_views.dp_table(w)], {"dp_attention": search_views.dp_dict(w)}


def speculation(ns, plan, config) -> tuple[list, dict]:
    """serve's speculative-decoding table and JSON key, when --speculative is given."""
    spec = speculative_of(ns)
    if spec is None:
        return [], {}
    if plan.time is None:
        raise UsageError("--speculative needs a timed plan: --gpu NAME")
    from accounting.serving import search_views
    from accounting.serving.speculative import speculate, speculate_dp
    s = None
    if ns.dp is not None and ns.dp > 1:  # the DP-attention + EP worker's step, as --search's
        from accounting.serving.dp_attention import dp_worker
        w = dp_worker(config, plan, ns.dp, ns.ep_imbalance)
        s = None if w is None else speculate_dp(config, plan, w, *spec)
    if s is None:
        s = speculate(config, plan, *spec)
    return [search_views.spec_table(s)], {"speculative": search_views.spec_dict(s)}


def run(ns, inputs, tower: dict | None = None) -> int:
    """`inputs`: serve's plan_inputs(ns) (config, scheme, names, notes); `tower`: serve's
    tower arguments for a vision-language config.json (cli/serve.py _tower), passed to every
    layout's serve()."""
    from accounting.tables import output
    from accounting.serving import search_views
    from accounting.serving.search import search
    if ns.gpu is None:
        raise UsageError("--search needs a GPU: --gpu NAME")
    if ns.isl is None or ns.osl is None:
        raise UsageError("--search needs the workload: --isl T_IN --osl T_OUT")
    clash = [f for f, v in (("--tp", ns.tp), ("--gpus", ns.gpus), ("--concurrency",
                                                                    ns.concurrency),
                            ("--ctx", ns.ctx), ("--prompt", ns.prompt), ("--dp", ns.dp))
             if v is not None]
    if ns.pp != 1:
        clash.append("--pp")
    if clash:
        raise UsageError(f"--search chooses the layout and lengths itself: drop {clash[0]} "
                         f"(the workload is --isl/--osl; GPUs are --max-gpus)")
    config, scheme, names, notes = inputs
    emit = ns.emit or ns.engine
    model = ns.model or config.name
    kwargs = dict(engine_version=ns.engine_version, utilization=ns.gpu_memory_utilization,
                  max_num_batched_tokens=ns.max_num_batched_tokens, block_size=ns.block_size,
                  names=names, model_dtype_bytes=4 if scheme.name == "fp32" else 2,
                  **(tower or {}))
    w = workload_of(ns)
    r = search(config, scheme, ns.gpu, w, engine=ns.engine, model=model,
               speculative=speculative_of(ns), ep_imbalance=ns.ep_imbalance, **kwargs)
    if notes:  # the inputs' own (serve's plan_inputs: the tower counted, --weights over a
        # checkpoint's format): said on the first screen and in the JSON, as plain serve says them
        from dataclasses import replace
        r = replace(r, notes=tuple(notes) + tuple(r.notes))
    if ns.plot:
        try:
            search_views.plot(r, ns.plot)
        except ImportError:
            raise UsageError("--plot needs matplotlib: pip install matplotlib (or drop --plot)") \
                from None
        except OSError as e:
            raise UsageError(f"--plot: cannot write {shorten(ns.plot)} ({e.strerror or e}); "
                             f"give a writable FILE.png") from None
    output.emit(ns.format, ns.output,
                lambda: [search_views.answer(r, model, emit)] + search_views.tables(r),
                lambda: search_views.to_dict(r, model, emit),
                lambda: search_views.to_csv(r, model, emit))
    return 0
