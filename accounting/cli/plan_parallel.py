"""`python -m accounting plan MODEL --gpus N ...`: the multi-GPU flags and their dispatch
(planning/cli.py adds these flags and hands over when --gpus is given)."""
from __future__ import annotations

import argparse

from accounting.present import output
from accounting.cli.args import positive_int
from accounting.runtime.errors import UsageError
from accounting.planning.gpus import DEFAULT_GPUS_PER_NODE, interconnect
from accounting.planning.memory import MODEL, get_precision
from accounting.planning.parallel import export, views
from accounting.planning.parallel.layout import FSDP_NAMES, Layout, resolve
from accounting.planning.parallel.plan import parallel_plan
from accounting.planning.parallel.search import search
from accounting.planning.parallel.search_views import tables as search_tables

LAYOUT_FLAGS = ("tp", "pp", "dp", "ep", "sp", "zero", "fsdp", "micro_batch", "search",
                "nvlink_gbs", "network_gbs", "gpus_per_node")


def add_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("many GPUs (with --gpus N: a per-GPU plan of a parallel layout)")
    g.add_argument("--gpus", type=positive_int("--gpus"), metavar="N",
                   help="number of GPUs; turns on the multi-GPU plan (per-GPU memory, FLOPs, "
                        "communication and step time)")
    g.add_argument("--tp", type=positive_int("--tp"), default=1, metavar="N",
                   help="tensor-parallel degree (Megatron-LM: heads, d_ff and the vocabulary "
                        "split; default 1)")
    g.add_argument("--pp", type=positive_int("--pp"), default=1, metavar="N",
                   help="pipeline stages (1F1B schedule; default 1)")
    g.add_argument("--dp", type=positive_int("--dp"), metavar="N",
                   help="data-parallel degree (default: gpus / (tp·pp))")
    g.add_argument("--ep", type=positive_int("--ep"), default=1, metavar="N",
                   help="expert-parallel degree (mixture-of-experts models only; default 1)")
    g.add_argument("--sp", action="store_true",
                   help="sequence parallelism over the tensor-parallel group (Korthikanti et al. "
                        "2022)")
    s = g.add_mutually_exclusive_group()
    s.add_argument("--zero", type=int, choices=(0, 1, 2, 3), metavar="{0,1,2,3}",
                   help="sharding stage: 0 DDP, 1 optimizer state (ZeroRedundancyOptimizer), "
                        "2 + gradients (FSDP SHARD_GRAD_OP), 3 + parameters (FSDP FULL_SHARD); "
                        "default 0")
    s.add_argument("--fsdp", nargs="?", const="full_shard", choices=tuple(FSDP_NAMES),
                   help="FSDP's name for the stage: full_shard (= --zero 3; the default of "
                        "--fsdp), shard_grad_op (= --zero 2) or no_shard (= --zero 0)")
    g.add_argument("--micro-batch", type=positive_int("--micro-batch"), metavar="b",
                   help="sequences per micro-batch on each data-parallel rank (default 1); "
                        "--batch is then the global batch")
    g.add_argument("--search", action="store_true",
                   help="rank every feasible layout of --gpus N by estimated step time, and "
                        "say why each other one fails")
    g.add_argument("--nvlink-gbs", metavar="GB/S",
                   help="per-GPU, per-direction bandwidth inside a node (default: the GPU table)")
    g.add_argument("--network-gbs", metavar="GB/S",
                   help="per-GPU, per-direction bandwidth between nodes (default: the GPU table)")
    g.add_argument("--gpus-per-node", type=positive_int("--gpus-per-node"), metavar="N",
                   help=f"GPUs per node (default {DEFAULT_GPUS_PER_NODE})")


def check_single(ns: argparse.Namespace) -> None:
    """Layout flags without --gpus are a mistake."""
    given = [f for f in LAYOUT_FLAGS if getattr(ns, f) not in (None, False, 1)
             or (f == "zero" and ns.zero is not None)]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise UsageError(f"{flag} describes a multi-GPU layout; give --gpus N with it")


def _ticker():
    """--search's progress on stderr once it has run a few seconds (issue 32)."""
    from accounting.runtime.progress import Ticker
    ticker = None

    def tick(done: int, total: int) -> None:
        nonlocal ticker
        ticker = ticker or Ticker("plan --search", total, "(tp, pp) pairs planned")
        ticker(done)
    return tick


def run(ns: argparse.Namespace, config) -> int:
    from accounting.planning.plan import hardware
    precision = get_precision(ns.precision)
    if ns.scope != MODEL:
        raise UsageError("--scope course is a one-GPU view; the multi-GPU plan counts what "
                         "autograd saves (--scope model)")
    for flag in ("steps", "position"):
        if getattr(ns, flag) is not None:
            raise UsageError(f"--{flag} is not used by the multi-GPU plan (give --tokens for a "
                             f"time to train)")
    hw = hardware(ns.gpu, ns.gpu_mem, ns.gpu_flops, ns.gpu_bw, precision.compute)
    net = interconnect(ns.gpu, ns.nvlink_gbs, ns.network_gbs, ns.gpus_per_node)
    zero = FSDP_NAMES[ns.fsdp] if ns.fsdp else (ns.zero or 0)
    micro = ns.micro_batch or 1
    seq = ns.ctx or config.context_length
    if ns.search:
        if ns.dp is not None or ns.tp != 1 or ns.pp != 1:
            raise UsageError("--search tries every tp, pp and dp; leave them out")
        if hw is None or not hw.memory_bytes or not hw.peak_flops:
            raise UsageError("--search ranks layouts by memory and step time; give --gpu NAME "
                             "(or --gpu-mem and --gpu-flops)")
        base = Layout(ns.gpus, ep=ns.ep, sp=ns.sp, zero=zero, micro_batch=micro,
                      global_batch=ns.batch or ns.gpus * micro, recompute=ns.recompute)
        result = search(config, base, seq, precision=precision, hardware=hw, net=net,
                        mfu=ns.mfu, margin=ns.margin, fix_zero=ns.zero is not None or bool(ns.fsdp),
                        fix_sp=ns.sp, fix_micro=ns.micro_batch is not None, fix_ep=ns.ep != 1,
                        progress=_ticker(), tokens=ns.tokens)
        tables, data = search_tables, export.search_dict
    else:
        dp = resolve(ns.gpus, ns.tp, ns.pp, ns.dp)
        lo = Layout(ns.gpus, ns.tp, ns.pp, dp, ns.ep, ns.sp, zero, micro,
                    ns.batch or dp * micro * ns.pp, ns.recompute)
        result = parallel_plan(config, lo, seq, precision=precision, hardware=hw, net=net,
                               mfu=ns.mfu, margin=ns.margin, tokens=ns.tokens)
        tables, data = views.tables, export.to_dict
    output.emit(ns.format, ns.output, lambda: tables(result), lambda: data(result),
                lambda: export.to_csv(data(result)))
    return 0
