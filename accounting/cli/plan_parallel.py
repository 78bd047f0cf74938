"""`python -m accounting plan MODEL --gpus N ...`: the multi-GPU flags and their dispatch
(planning/cli.py adds these flags and hands over when --gpus is given)."""
from __future__ import annotations

import argparse

from accounting.tables import output
from accounting.cli.args import integer_digits, positive_int
from accounting.cli.plan_recipes import components as recipe_components
from accounting.runtime.errors import UsageError
from accounting.planning.gpus import DEFAULT_GPUS_PER_NODE, interconnect
from accounting.planning.optimizers import DEFAULT_OPTIMIZER, is_default
from accounting.planning.memory import BF16_MIXED, FP32, MODEL, get_precision
from accounting.planning.precisions import (FP8_TE, FP8_TE_CURRENT, FP8_TORCHAO,
                                             FP8_TORCHAO_FSDP)
from accounting.planning.mfu import COMPUTE, CONVENTIONS, END_TO_END, EXECUTED, SCOPES
from accounting.planning.parallel import export, views
from accounting.planning.parallel.layout import FSDP_NAMES, Layout, resolve
from accounting.planning.parallel.plan import parallel_plan
from accounting.planning.parallel.search import search
from accounting.planning.parallel.search_views import tables as search_tables
from accounting.planning.parallel.megatron import FLASH, KERNELS
from accounting.planning.parallel.offload import parse as parse_offload
from accounting.planning.parallel.stack_memory import StackRun
from accounting.planning.parallel.stacks import DEFAULT_STACK, STACKS, get_stack

LAYOUT_FLAGS = ("tp", "pp", "dp", "ep", "cp", "virtual_stages", "stage_layers", "sp", "zero",
                "fsdp", "micro_batch", "search", "nvlink_gbs", "network_gbs", "gpus_per_node",
                "stack", "dropout", "attention_kernel", "compare_formulas", "mfu_convention",
                "mfu_scope", "hfu", "measured_tokens_per_s", "offload", "async_tp")


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
    g.add_argument("--cp", type=positive_int("--cp"), default=1, metavar="N",
                   help="context-parallel degree: each sequence split over N ranks, ring "
                        "attention exchanging keys and values (a fused kernel: --attention sdpa on the "
                        "torch stack; megatron and torchtitan run one; default 1)")
    g.add_argument("--virtual-stages", type=positive_int("--virtual-stages"), default=1,
                   metavar="V", help="virtual pipeline stages per GPU: the interleaved 1F1B "
                                     "schedule, bubble (p − 1)/(v·m) (default 1)")
    g.add_argument("--stage-layers", metavar="N,N,...",
                   help="layers per pipeline stage (per virtual stage with --virtual-stages), "
                        "in model order; default: even, or one fewer on the first and last "
                        "stage where pp does not divide the layers (Llama 3)")
    g.add_argument("--ep", type=positive_int("--ep"), default=1, metavar="N",
                   help="expert-parallel degree (mixture-of-experts models only; default 1)")
    g.add_argument("--sp", action="store_true",
                   help="sequence parallelism over the tensor-parallel group (Korthikanti et al. "
                        "2022)")
    s = g.add_mutually_exclusive_group()
    s.add_argument("--zero", type=_stage, choices=(0, 1, 2, 3), metavar="{0,1,2,3}",
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
                   help=f"GPUs per node: the fast-link domain (default: the GPU table's, "
                        f"{DEFAULT_GPUS_PER_NODE} for most, 72 for GB200 NVL72)")
    u = p.add_argument_group("utilization (with --gpus N: which FLOPs --mfu counts)")
    u.add_argument("--mfu-convention", choices=tuple(CONVENTIONS), default=None,
                   help="executed (full T×T attention, as torchtitan's and PaLM's MFU; "
                        "default), causal (the attention core's causal pairs: MaxText, NeMo / "
                        "Megatron-Bridge), 6N (6 FLOPs per active parameter per token; "
                        "end-to-end scope only); --hfu adds recomputation (hardware FLOPs); "
                        "the predicted MFU (.step_time.mfu) is in this count")
    u.add_argument("--mfu-scope", choices=tuple(SCOPES), default=None,
                   help="end-to-end (the default with --mfu; issue 39): a whole-step figure "
                        "as papers report it, nothing added; compute (the old reading, and "
                        "--search's, which ranks layouts by it): --mfu is the rate each stage "
                        "computes at, the bubble and communication added")
    u.add_argument("--hfu", action="store_true",
                   help="with --mfu-scope end-to-end: the --mfu figure counts the recomputed "
                        "FLOPs (a hardware FLOPs utilization, as Megatron-LM's X)")
    u.add_argument("--measured-tokens-per-s", metavar="N",
                   help="a measured throughput of the whole job, converted into MFU and HFU "
                        "under each convention")
    g.add_argument("--stack", choices=tuple(STACKS), metavar="NAME",
                   help="the training stack whose memory is planned: "
                        + "; ".join(f"{s.name}: {s.title}" for s in STACKS.values())
                        + " (default torch)")
    from accounting.planning.emit import EMITTERS  # issue 42: the stack records' emitters
    g.add_argument("--emit", choices=tuple(EMITTERS),
                   help="print the settings that launch this layout instead of the plan: "
                        "torchtitan's TOML job config, Megatron-LM's arguments, a DeepSpeed "
                        "config JSON or an accelerate FSDP config (a layout the stack cannot "
                        "express is refused, saying why)")
    g.add_argument("--offload", metavar="optimizer|activations|params",
                   help="what is kept in CPU memory (comma-separated): activations "
                        "(torchtune's OffloadActivations: the saved tensors of ≥ 1 KiB but the "
                        "LM head's and the loss's; one GPU too, --stack torch), optimizer "
                        "(--stack deepspeed: offload_optimizer, the master copy, moments and "
                        "gradient partitions), params (--stack deepspeed at --zero 3 with "
                        "optimizer: offload_param; --stack torch at --zero 2|3: FSDP2's "
                        "CPUOffloadPolicy, parameters, gradients and optimizer state)")
    g.add_argument("--dropout", metavar="P",
                   help="--stack megatron: hidden and attention dropout probability (its 1-byte "
                        "masks are kept for the backward pass; default 0: none)")
    g.add_argument("--attention-kernel", choices=tuple(KERNELS),
                   help="--stack megatron: " + "; ".join(f"{k}: {v}" for k, v in KERNELS.items())
                        + f" (default {FLASH})")
    g.add_argument("--async-tp", action="store_true",
                   help="--stack torchtitan with --tp: async TP (its "
                        "enable_async_tensor_parallel: symmetric-memory fused all-gather/"
                        "reduce-scatter matmuls, whose workspace is held per TP group)")
    g.add_argument("--compare-formulas", action="store_true",
                   help="the literature's memory formulas beside the plan (the ZeRO paper, "
                        "Korthikanti et al., Megatron's theoretical_memory_usage.py, Transformer "
                        "Math 101), each reconciled term by term with its exact count")
    p.set_defaults(precision=None)  # a stack other than torch names its own (see stack_run)


def stage_split(text: str | None) -> tuple[int, ...] | None:
    """'7,8,8' -> (7, 8, 8)."""
    if text is None:
        return None
    parts = [x.strip() for x in str(text).split(",")]
    if not parts or len(parts) > 100_000 or not all(x.isdigit() and len(x) <= 12 for x in parts):
        raise UsageError(f"--stage-layers takes positive integers separated by commas (layers "
                         f"per stage, e.g. 7,8,8,7), got {str(text)[:60]!r}")
    return tuple(int(x) for x in parts)


def check_single(ns: argparse.Namespace) -> None:
    """Layout flags without --gpus are a mistake."""
    # a switch (--sp, --search, --hfu, --compare-formulas, --async-tp) is True, which `in`
    # took for the degree 1 (True == 1): each was accepted and ignored on one GPU
    given = [f for f in LAYOUT_FLAGS if getattr(ns, f) is True
             or getattr(ns, f) not in (None, False, 1)
             or (f == "zero" and ns.zero is not None)]
    if given and given[0] == "offload":  # --offload activations runs on one GPU
        from accounting.cli.plan_recipes import offload_activations
        offload_activations(ns)
        given = given[1:]
    if given:
        flag = "--" + given[0].replace("_", "-")
        if given[0] in ("mfu_convention", "mfu_scope", "hfu", "measured_tokens_per_s",
                        "compare_formulas"):
            raise UsageError(f"{flag} is read by the many-GPU planner; give --gpus N with it "
                             f"(--gpus 1 for one GPU)")
        raise UsageError(f"{flag} describes a multi-GPU layout; give --gpus N with it")
    # ns.precision stays None without one: plan()'s recipe picks the input's default


def _stage(text: str) -> int:
    """A ZeRO stage's digit (argparse's choices then bound it); not int()'s '0_1'."""
    digits = integer_digits(text)
    if digits is None:
        raise argparse.ArgumentTypeError(f"must be 0, 1, 2 or 3, got {text!r}")
    return int(digits)


_stage.__name__ = "stage"


def _dropout(text: str | None) -> float:
    if text is None:
        return 0.0
    try:
        p = float(text) if "_" not in text and text.isascii() else -1.0
    except ValueError:
        p = -1.0
    if not 0 <= p < 1:
        raise UsageError(f"--dropout must be a probability in [0, 1), got {text!r}")
    return p


def stack_run(ns: argparse.Namespace) -> tuple[StackRun, str]:
    """The stack and its settings, and the precision name to plan in: the torch stack's is
    --precision (default fp32); the others train in bf16 (their own precision), torchtitan
    also in torchao float8 and megatron in Transformer Engine fp8 (fp8-te, fp8-te-current)."""
    stack = get_stack(ns.stack or DEFAULT_STACK)
    if not stack.megatron_core:
        for flag, v in (("--dropout", ns.dropout), ("--attention-kernel", ns.attention_kernel)):
            if v is not None:
                raise UsageError(f"{flag} is a setting of --stack megatron (Megatron-Core + "
                                 f"Transformer Engine); give --stack megatron with it")
    async_tp = bool(getattr(ns, "async_tp", False))
    if async_tp and not stack.async_tp:
        raise UsageError(f"--async-tp is torchtitan's async tensor parallelism; give --stack "
                         f"{next(s.name for s in STACKS.values() if s.async_tp)} with it")
    precision = ns.precision or FP32
    if "torchao" in stack.fp8 and ns.precision in (FP8_TORCHAO, FP8_TORCHAO_FSDP):
        # torchtitan's float8 converter (torchao's Float8Linear in its bf16 FSDP2 blocks;
        # enable_fsdp_float8_all_gather: fp8-torchao-fsdp; its default, False: fp8-torchao)
        return StackRun(stack, _dropout(ns.dropout), ns.attention_kernel or FLASH,
                        async_tp=async_tp), ns.precision
    if "te" in stack.fp8 and ns.precision in (FP8_TE, FP8_TE_CURRENT):
        # Megatron-Core's --fp8-format hybrid through Transformer Engine (--fp8-recipe
        # delayed: fp8-te; tensorwise, current scaling: fp8-te-current)
        return StackRun(stack, _dropout(ns.dropout), ns.attention_kernel or FLASH,
                        "te"), ns.precision
    if stack.bf16:
        if ns.precision not in (None, BF16_MIXED):
            raise UsageError(f"--stack {stack.name} trains with 16-bit parameters and "
                             f"activations (its own precision); leave --precision out"
                             + (" or give fp8-te / fp8-te-current (Transformer Engine's fp8)"
                                if "te" in stack.fp8 else ""))
        precision = BF16_MIXED
    return StackRun(stack, _dropout(ns.dropout), ns.attention_kernel or FLASH,
                    async_tp=async_tp), precision


def fp8_peak(hw, gpu: str, config, p, seq: int, recompute: str):
    """The table GPU's peak for an fp8 run: the fp8 GEMMs' share of one sequence's step
    (model/'s ops, as the many-GPU plans run them) at the fp8 peak, the rest at bf16."""
    from accounting.ledger.ledger import ledger
    from accounting.planning.compute import step_flops
    from accounting.planning.gpus import get_gpu
    from accounting.planning.plan import fp8_hardware
    lg = ledger(config, p.autocast, recompute, "course", p.param_dtype, fp8=p.fp8)
    from accounting.planning import fp8 as F8
    return fp8_hardware(hw, get_gpu(gpu), F8.matmul_flops(lg, lg.values(seq, 1)),
                        step_flops(config, seq, 1, recompute).total)


def _ticker():
    """--search's progress on stderr once it has run a few seconds (issue 32)."""
    from accounting.runtime.progress import Ticker
    ticker = None

    def tick(done: int, total: int) -> None:
        nonlocal ticker
        ticker = ticker or Ticker("plan --search", total, "(tp, pp) pairs planned")
        ticker(done)
    return tick


def recipe(ns: argparse.Namespace, config, stack):
    """The recipe of the one-GPU plan (planning/recipes.py resolve: a Hugging Face model in
    transformers' ops, bf16-mixed, SDPA; a course preset in model/'s, fp32), so that adding
    --gpus changes the layout, never the recipe (issue 45). Returns (implementation,
    precision name or None, config with the recipe's attention kernel). The other stacks
    run their own implementation in their own precision (stack_run)."""
    from accounting.cli.args import hf_source_from_args
    from accounting.planning.recipes import resolve
    if not stack.torch_engines:
        if ns.implementation is not None:
            raise UsageError(f"--implementation chooses the ops of --stack torch; --stack "
                             f"{stack.name} runs its own model: leave --implementation out")
        return "course", ns.precision, config
    r, config = resolve(config, hf_source_from_args(ns) is not None, ns.implementation,
                        ns.precision, ns.optimizer, ns.recompute,
                        getattr(ns, "attention", None) is not None, ns.scope)
    return r.implementation, r.precision, config


def _finetune(ns: argparse.Namespace, config, precision, implementation: str = "course"):
    """The LoRA plan of --lora-rank (planning/finetune.py), or None (issue 30 follow-up)."""
    from accounting.cli.plan_finetune import plan_kwargs
    from accounting.planning.plan import _finetune as resolve_finetune
    # first: a LoRA/QLoRA companion (--prepare-kbit-training, --no-double-quant,
    # --lora-targets …) without --lora-rank is refused here as on one GPU, not ignored
    kw = plan_kwargs(ns) if hasattr(ns, "lora_rank") else {}
    if getattr(ns, "lora_rank", None) is None and not getattr(ns, "base_weights", None):
        return None
    if kw.get("kbit_upcast"):
        raise UsageError("--prepare-kbit-training is planned on one GPU (its fp32 residual "
                         "stream is not yet in the many-GPU rules): leave --gpus or it out")
    return resolve_finetune(config, precision, MODEL, kw.get("lora"), kw["base_weights"],
                            kw.get("double_quant", True), kw.get("module_names"),
                            implementation, None)


def _cost(ns, result, hw):
    """The run's cost on all the layout's GPUs at --price-per-gpu-hour (issue 42)."""
    from accounting.planning.cost import Cost, price
    p = price(ns.price_per_gpu_hour, hw.name if hw is not None else None)
    if p is None:
        return None
    if ns.search:
        raise UsageError("--price-per-gpu-hour costs one layout; with --search, pick one and "
                         "give it (--tp, --pp, --zero …)")
    steps = result.steps
    return Cost(p, result.layout.gpus, result.step_seconds * steps if steps else None)


def _check_emit(ns) -> None:
    if ns.search:
        raise UsageError(f"--emit {ns.emit} writes one layout's settings; with --search, pick "
                         f"one and give it (--tp, --pp, --zero …)")
    if ns.format != "text" or ns.compare_formulas:
        raise UsageError(f"--emit {ns.emit} prints the stack's own format; leave out --format "
                         f"and --compare-formulas")


def _tower(ns, precision, finetune, run_stack, recompute: str, seq: int):
    """(a vision-language config's TowerRun for this plan, or None; the answer's function
    adding its first-screen line). The tower is planned with the torch stack's full
    training of one layout (planning/parallel/vision.py); with --search, LoRA or another
    stack the line says it is left out."""
    from dataclasses import replace
    from accounting.cli.args import hf_source_from_args
    from accounting.cli.main import vision_workload
    from accounting.cli.main import vision_training
    from accounting.present import vision_views as VV
    hf = hf_source_from_args(ns)
    spec, images = getattr(hf, "vision", None), vision_workload(ns, hf)
    if spec is None:
        return None, (lambda a: a)
    why = ("--search" if ns.search else "--lora-rank" if finetune is not None else
           f"--stack {run_stack.name}" if not run_stack.stack.torch_engines else None)
    if why is not None:
        if ns.train_vision or ns.train_projector or (images is not None and images.images):
            raise UsageError(f"--train-vision, --train-projector and --image are planned on "
                             f"many GPUs with the "
                             f"torch stack's full training of one layout, not with {why}")
        line = VV.uncounted(hf, f"this many-GPU plan ({why}: its weights, gradients, optimizer "
                                f"state and activations)")
        return None, (lambda a: replace(a, notes=a.notes + (line,)))
    from accounting.planning.parallel.vision import tower_for
    tower = tower_for(spec, images, precision, ns.optimizer or DEFAULT_OPTIMIZER,
                      vision_training(ns), recompute, seq)
    line = VV.parallel_line(tower.training, tower.flops, parallel=True)
    return tower, (lambda a: replace(a, notes=a.notes + (line,)))


def run(ns: argparse.Namespace, config, ck=None) -> int:
    if ns.emit:
        _check_emit(ns)
    from accounting.planning.plan import hardware
    if ns.scope != MODEL:
        raise UsageError("--scope course is a one-GPU view; the multi-GPU plan counts what "
                         "autograd saves (--scope model)")
    if getattr(ns, "optimizer_in_backward", False):
        raise UsageError("--optimizer-in-backward is planned on one GPU (torchtune's "
                         "single-device recipes); leave out --gpus")
    implementation, ns.precision, config = recipe(ns, config, get_stack(ns.stack or DEFAULT_STACK))
    run_stack, name = stack_run(ns)
    precision = get_precision(name)
    finetune = _finetune(ns, config, precision, implementation)
    for flag in ("steps", "position"):
        if getattr(ns, flag) is not None:
            raise UsageError(f"--{flag} is not used by the multi-GPU plan (give --tokens for a "
                             f"time to train)")
    hw = hardware(ns.gpu, ns.gpu_mem, ns.gpu_flops, ns.gpu_bw, precision.compute)
    if precision.fp8 is not None and ns.gpu is not None:  # fp8 GEMMs at fp8, the rest bf16
        hw = fp8_peak(hw, ns.gpu, config, precision, ns.ctx or config.context_length,
                      ns.recompute)
    net = interconnect(ns.gpu, ns.nvlink_gbs, ns.network_gbs, ns.gpus_per_node)
    if net is not None and ns.gpus > net.gpus_per_node and ns.gpus % net.gpus_per_node:
        # the step time places the groups on whole nodes (step.group_link): a last node
        # part-filled is not a cluster the links are known for
        raise UsageError(f"--gpus {ns.gpus} is not a whole number of nodes of "
                         f"{net.gpus_per_node} GPUs ({ns.gpus} = {ns.gpus // net.gpus_per_node}"
                         f" × {net.gpus_per_node} + {ns.gpus % net.gpus_per_node}); give --gpus"
                         f" a multiple of {net.gpus_per_node}, or --gpus-per-node the "
                         f"servers' own count")
    if net is not None and net.network is None and ns.gpus > net.gpus_per_node:
        raise UsageError(f"--gpus {ns.gpus} spans more than one {net.name} of "
                         f"{net.gpus_per_node} {ns.gpu} cards, and the GPU table lists no cluster "
                         f"network for them: give --network-gbs (or --gpus-per-node)")
    zero = FSDP_NAMES[ns.fsdp] if ns.fsdp else (
        ns.zero if ns.zero is not None else run_stack.stack.default_zero)
    micro = ns.micro_batch or 1
    seq = ns.ctx or config.context_length
    # issue 39: --mfu means what papers mean, end to end in the named convention; --search
    # ranks layouts by a per-stage rate (an end-to-end figure times every layout alike)
    default_scope = END_TO_END if ns.mfu is not None and not ns.search else COMPUTE
    utilization = {"mfu_convention": ns.mfu_convention or EXECUTED,
                   "mfu_scope": ns.mfu_scope or default_scope, "hfu": ns.hfu}
    if ns.search:
        if finetune is not None:
            raise UsageError("--search ranks layouts of full training; with --lora-rank give "
                             "the layout (--fsdp or --zero 0)")
        if ns.compare_formulas:
            raise UsageError("--compare-formulas sets one plan beside the literature; leave "
                             "--search out")
        if ns.offload:
            raise UsageError("--search ranks layouts with the model states on the GPU; with "
                             "--offload give the layout (--zero)")
        if ns.optimizer is not None and not is_default(ns.optimizer):
            raise UsageError(f"--search ranks layouts with AdamW's state; with --optimizer "
                             f"{ns.optimizer} give the layout (--tp, --pp, --zero)")
        if ns.dp is not None or ns.tp != 1 or ns.pp != 1:
            raise UsageError("--search tries every tp, pp and dp; leave them out")
        if hw is None or not hw.memory_bytes or not hw.peak_flops:
            raise UsageError("--search ranks layouts by memory and step time; give --gpu NAME "
                             "(or --gpu-mem and --gpu-flops)")
        if ns.stage_layers is not None:
            raise UsageError("--stage-layers fixes one pipeline's split; --search tries every "
                             "pp (each split evenly, or one fewer on the first and last stage)")
        if recipe_components(ns) is not None:  # search.py plans the stack's default
            raise UsageError("--compile-components is planned for one layout; --search "
                             "compiles the stack's default: leave it out with --search")
        _, with_line = _tower(ns, precision, finetune, run_stack, ns.recompute, seq)
        base = Layout(ns.gpus, ep=ns.ep, sp=ns.sp, zero=zero, micro_batch=micro,
                      global_batch=ns.batch or ns.gpus * micro, recompute=ns.recompute,
                      cp=ns.cp, vpp=ns.virtual_stages)
        result = search(config, base, seq, precision=precision, hardware=hw, net=net,
                        mfu=ns.mfu, margin=ns.margin, **utilization,
                        fix_zero=ns.zero is not None or bool(ns.fsdp),
                        fix_sp=ns.sp, fix_micro=ns.micro_batch is not None, fix_ep=ns.ep != 1,
                        fix_cp=ns.cp != 1, fix_vpp=ns.virtual_stages != 1,
                        progress=_ticker(), tokens=ns.tokens, stack=run_stack,
                        implementation=implementation, loss=ns.loss,
                        loss_chunks=ns.loss_chunks, compile=ns.compile)
        tables, data = search_tables, export.search_dict
    else:
        dp = resolve(ns.gpus, ns.tp, ns.pp, ns.dp, ns.cp)
        lo = Layout(ns.gpus, ns.tp, ns.pp, dp, ns.ep, ns.sp, zero, micro,
                    ns.batch or dp * micro * ns.pp, ns.recompute, cp=ns.cp,
                    vpp=ns.virtual_stages, stage_split=stage_split(ns.stage_layers))
        tower, with_line = _tower(ns, precision, finetune, run_stack, ns.recompute, seq)
        result = parallel_plan(config, lo, seq, precision=precision, hardware=hw, net=net,
                               mfu=ns.mfu, margin=ns.margin, tokens=ns.tokens, stack=run_stack,
                               **utilization, optimizer=ns.optimizer or DEFAULT_OPTIMIZER,
                               measured_tokens_per_second=ns.measured_tokens_per_s,
                               finetune=finetune, implementation=implementation,
                               offload=parse_offload(ns.offload),
                               loss=ns.loss, loss_chunks=ns.loss_chunks,
                               compile=ns.compile, tower=tower,
                               compile_components=recipe_components(ns))
        tables, data = views.tables, export.to_dict
        if tower is not None:  # issue 41: the JSON's "vision" entry
            from accounting.present.vision_views import parallel_dict
            data = (lambda f, v: lambda r: {**f(r), "vision": v})(
                data, parallel_dict(tower.training))
        if ns.compare_formulas and finetune is not None:
            raise UsageError("--compare-formulas sets full training beside the literature; "
                             "leave it out with --lora-rank")
        if ns.compare_formulas:
            from accounting.literature.memory_compare import compare
            from accounting.planning.parallel.stack_views import formulas_dict, formulas_tables
            est = compare(result)
            tables = lambda r: views.tables(r) + formulas_tables(est)  # noqa: E731
            data = lambda r: {**export.to_dict(r), "literature_memory": formulas_dict(est)}  # noqa: E731
    if ns.emit:  # issue 42: the plan as the stack's launch settings, alone on stdout
        from accounting.planning.emit import emit
        output.write(emit(ns.emit, result), ns.output)
        return 0
    from accounting.cli import checkpoint, cost as cost_cli  # issue 42
    c = _cost(ns, result, hw)
    output.emit(ns.format, ns.output,
                lambda: (lambda t: [cost_cli.answer(checkpoint.answer(with_line(t[0]), ck), c)]
                         + t[1:])(tables(result)),
                lambda: cost_cli.add_json(checkpoint.add_json(data(result), ck), c),
                lambda: export.to_csv(data(result)))
    return checkpoint.status(ck)
