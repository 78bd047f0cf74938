"""`python -m accounting plan MODEL ...`: training memory, what fits, FLOPs and time to
train, inference cost. main(argv) -> int; bad input raises UsageError (exit 2 in
accounting.cli.main.main, which dispatches here)."""
from __future__ import annotations

from dataclasses import replace

import argparse
import re
from fractions import Fraction

from accounting.cli import summary
from accounting.tables import output
from accounting.cli.args import (Parser, add_model_args, add_output_args, config_from_args,
                                 hf_source_from_args, positive_int)
from accounting.runtime.errors import UsageError
from accounting.runtime.errors import shorten
from accounting.planning import export, views
from accounting.planning.gpus import gpu_help
from accounting.planning.optimizers import optimizer_help
from accounting.cli import plan_parallel as parallel_cli
from accounting.cli import plan_finetune as finetune_cli
from accounting.cli import plan_recipes as recipes_cli
from accounting.cli import checkpoint
from accounting.cli import cost as cost_cli
from accounting.planning.memory import (
    FP32,
    MODEL,
    NO_RECOMPUTE,
    PRECISIONS,
    RECOMPUTE,
    SCOPES,
)
from accounting.planning.plan import MAX_MEMORY_BYTES, plan
from accounting.planning.recipes import IMPLEMENTATIONS, OPTIMIZERS
from accounting.units import GB, KILO, MEGA, TB, GiB, KiB, MiB, TiB

_UNITS = {"b": 1, "kb": KILO, "mb": MEGA, "gb": GB, "tb": TB,
          "kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB}
# digits, optionally in thousands groups ('1,024GB'), as cli/args.py's integers (no '8_0')
_SIZE = re.compile(r"^\s*((?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """'80' (GB), '80GB', '80GiB', '81920MiB', '85899345920B' -> bytes (whole bytes, rounded down)."""
    m = _SIZE.match(text) if len(text) <= 100 else None
    unit = (m.group(2) or "GB").lower() if m else ""
    if not m or unit not in _UNITS:
        raise argparse.ArgumentTypeError(
            f"must be a size like 80, 80GB, 80GiB or 81920MiB (a bare number is GB = 1e9 bytes), "
            f"got {shorten(text)}")
    n = Fraction(m.group(1).replace(",", "")) * _UNITS[unit]
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least one byte, got {shorten(text)}")
    if n > MAX_MEMORY_BYTES:
        raise argparse.ArgumentTypeError(f"must be at most 10^18 bytes, got {shorten(text)}")
    return int(n)


parse_size.__name__ = "size"


def _with_tower(d: dict, result) -> dict:
    """The JSON's "vision" entry: the tower's bytes in a one-GPU plan (issue 41)."""
    if result.tower is not None:
        from accounting.present.vision_views import training_dict
        d["vision"] = training_dict(result.tower)
    return d


def parser() -> Parser:
    p = Parser(prog="python -m accounting plan",
               description="Capacity planning for training and inference: AdamW training memory "
                           "(parameters, gradients, optimizer state, activations) as a·batch_size + b, "
                           "the largest batch and longest context that fit, FLOPs per step, time "
                           "to train at a given MFU, KV cache and decode cost. Exact integers; "
                           "every formula and assumption is printed.")
    add_model_args(p)
    w = p.add_argument_group("workload")
    w.add_argument("--ctx", type=positive_int("--ctx"), metavar="T",
                   help="tokens per sequence (default: the config's context_length)")
    w.add_argument("--batch", type=positive_int("--batch"), metavar="B",
                   help="sequences per step (default 1; with --gpus the global batch, default "
                        "dp·micro-batch·pp); the largest batch that fits is reported whenever a "
                        "GPU memory is known")
    w.add_argument("--precision", choices=tuple(PRECISIONS), default=None,
                   help="fp32 (the default for the course presets), bf16-mixed (the default for "
                        "a Hugging Face config or hub preset: fp32 parameters, gradients and "
                        "optimizer state under bf16 autocast), bf16 (bf16 parameters, gradients "
                        "and optimizer state), bf16-master (bf16 parameters and gradients, an "
                        "fp32 master copy and fp32 moments in the optimizer: 2 + 2 + 12 bytes "
                        "per parameter with AdamW), or fp8 training of the linear layers: "
                        "fp8-torchao (torchao's Float8Linear over bf16-mixed; "
                        "fp8-torchao-fsdp: its fp8 all-gathers under --zero 2|3), fp8-te / "
                        "fp8-te-current (Transformer Engine's delayed / current scaling over "
                        "bf16-master); fp8 needs a GPU with fp8 Tensor Cores")
    w.add_argument("--implementation", choices=tuple(IMPLEMENTATIONS), default=None,
                   help="whose ops are planned: course (model/ as written; the default for the "
                        "course presets) or transformers (transformers' modeling code with SDPA "
                        "attention; the default for a Hugging Face config or hub preset); "
                        "llm-foundry: MPT's blocks as llm-foundry runs them; "
                        "torchtune: its Llama, bf16 LoRA adapters, torchao's NF4")
    w.add_argument("--optimizer", choices=tuple(OPTIMIZERS), default=None,
                   help=optimizer_help())
    w.add_argument("--optimizer-in-backward", action="store_true",
                   help="step each tensor's optimizer in the backward pass as its gradient "
                        "is ready, then free the gradient (torchtune's optimizer_in_bwd: "
                        "register_optim_in_bwd_hooks): no moment holds every gradient")
    from accounting.cli.main import add_image_args, add_train_vision_args
    add_train_vision_args(w)  # issue 41: --train-vision, --train-projector
    add_image_args(w)  # issue 41: the images of each sequence (--ctx holds their tokens)
    recipes_cli.add_args(w)  # issue 44: --loss, --loss-chunks, --compile
    w.add_argument("--recompute", choices=tuple(RECOMPUTE), default=NO_RECOMPUTE,
                   help="none (default), selective (recompute the attention core, Korthikanti "
                        "et al. 2022) or full activation recomputation (keep each block's input; "
                        "one more forward pass of the blocks)")
    w.add_argument("--scope", choices=tuple(SCOPES), default=MODEL,
                   help="which activations count: model (default; what autograd saves in "
                        "model.TransformerLM) or course (the list of CS336 a1 adamwAccounting)")
    g = p.add_argument_group("hardware (a table GPU, or your own numbers)")
    g.add_argument("--gpu", metavar="NAME", help=gpu_help())
    g.add_argument("--gpu-mem", type=parse_size, metavar="SIZE",
                   help="GPU memory: 80 or 80GB (1e9 bytes), 80GiB (2^30 bytes), 81920MiB, ... "
                        "(at most 10^18 bytes)")
    g.add_argument("--gpu-flops", metavar="TFLOPS", help="peak TFLOP/s at the chosen precision")
    g.add_argument("--gpu-bw", metavar="TB/S", help="memory bandwidth in TB/s (1e12 bytes/s)")
    g.add_argument("--margin", default="0", metavar="FRACTION",
                   help="share of the GPU memory to reserve for what is not counted (CUDA "
                        "context, fragmentation, temporaries), e.g. 0.05; default 0")
    t = p.add_argument_group("time to train")
    t.add_argument("--mfu", default=None, metavar="FRACTION",
                   help="model FLOPs utilization, in (0, 1]: an override; without it the step "
                        "is timed op by op from measured kernels (aiconfigurator-core's tables "
                        "for the --gpu), or by the roofline where none exist (0.5 when no "
                        "bandwidth is known)")
    n = t.add_mutually_exclusive_group()
    n.add_argument("--steps", type=positive_int("--steps"), metavar="N", help="training steps")
    n.add_argument("--tokens", type=positive_int("--tokens"), metavar="N",
                   help="training tokens (rounded up to whole steps of B·T tokens)")
    cost_cli.add_arg(t)  # issue 42
    i = p.add_argument_group("inference")
    i.add_argument("--position", type=positive_int("--position"), metavar="t",
                   help="decode the token at position t (it attends to t keys; default T)")
    finetune_cli.add_args(p)  # issue 28: LoRA / QLoRA
    parallel_cli.add_args(p)
    add_output_args(p)
    return p


def _cost(ns, result):
    """The training run's cost at --price-per-gpu-hour (one GPU), None without the flag."""
    from accounting.planning.cost import Cost, price
    p = price(ns.price_per_gpu_hour, result.hardware.name if result.hardware else None)
    if p is None:
        return None
    return Cost(p, 1, result.time.seconds if result.time is not None else None)


def main(argv: list[str]) -> int:
    ns = parser().parse_args(argv)
    if ns.list:
        from accounting.present.views import presets_table
        output.emit(ns.format, ns.output, lambda: [presets_table()])
        return 0
    config = config_from_args(ns)
    hf = hf_source_from_args(ns)
    ck = checkpoint.check(ns, config, hf)  # issue 42: --checkpoint
    if ns.gpus is not None:
        return parallel_cli.run(ns, config, ck)
    if ns.emit:
        raise UsageError(f"--emit {ns.emit} writes a layout's launch settings; give --gpus N "
                         f"(1 for one GPU)")
    parallel_cli.check_single(ns)
    from accounting.cli.main import vision_training, vision_workload
    result = plan(config, ns.ctx, ns.batch or 1, precision=ns.precision, scope=ns.scope,
                  implementation=ns.implementation, optimizer=ns.optimizer,
                  from_hf=hf is not None,
                  attention_given=ns.attention is not None,
                  recompute=ns.recompute, gpu=ns.gpu, memory_bytes=ns.gpu_mem,
                  peak_tflops=ns.gpu_flops, bandwidth_tbs=ns.gpu_bw, mfu=ns.mfu,
                  margin=ns.margin, steps=ns.steps, tokens=ns.tokens, position=ns.position,
                  optimizer_in_backward=ns.optimizer_in_backward,
                  tower=getattr(hf, "vision", None), train_vision=vision_training(ns),
                  images=vision_workload(ns, hf),
                  **recipes_cli.plan_kwargs(ns), **finetune_cli.plan_kwargs(ns))
    line = None
    if result.tower is not None:  # issue 41: said on the first screen
        from accounting.present.vision_views import training_line
        line = training_line(result.tower, result.flops.vision)
    c = _cost(ns, result)

    def answer():
        a = cost_cli.answer(checkpoint.answer(summary.plan_answer(result), ck), c)
        return a if line is None else replace(a, notes=a.notes + (line,))
    output.emit(ns.format, ns.output,  # the answer first, then the details
                lambda: [answer()] + views.tables(result),
                lambda: cost_cli.add_json(checkpoint.add_json(_with_tower(export.to_dict(result),
                                                                      result), ck), c),
                lambda: export.to_csv(result))
    return checkpoint.status(ck)
