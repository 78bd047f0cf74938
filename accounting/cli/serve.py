"""`python -m accounting serve MODEL --gpu NAME ...`: serving capacity (weights per GPU as
stored, the engine's KV pool, concurrency at a context, TTFT and TPOT). main(argv) -> int;
bad input raises UsageError (exit 2 in accounting.cli.main)."""
from __future__ import annotations

import argparse
import json
from fractions import Fraction

from accounting.cli.args import Parser, add_model_args, add_output_args, config_from_args, positive_int
from accounting.cli.plan import parse_size
from accounting.formats.schemes import SCHEMES, get_scheme
from accounting.planning.compute import exact
from accounting.planning.gpus import gpu_help
from accounting.present import output
from accounting.runtime.errors import UsageError, shorten
from accounting.serving import engines, kv

QUANT_KEY = "quantization_config"


def _fraction(flag: str):
    """A number in (0, 1], read exactly and bounded (planning/compute.py's exact())."""
    def parse(text: str) -> Fraction:
        try:
            x = exact(text, flag)
        except UsageError as e:
            raise argparse.ArgumentTypeError(str(e).removeprefix(flag + ": ").removeprefix(flag + " ")) from None
        if not 0 < x <= 1:
            raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {shorten(text)}")
        return x
    parse.__name__ = "fraction"
    return parse


def _positive(flag: str):
    """A positive number, read exactly and bounded."""
    def parse(text: str) -> Fraction:
        try:
            x = exact(text, flag)
        except UsageError as e:
            raise argparse.ArgumentTypeError(str(e).removeprefix(flag + ": ").removeprefix(flag + " ")) from None
        if x <= 0:
            raise argparse.ArgumentTypeError(f"must be a positive number, got {shorten(text)}")
        return x
    parse.__name__ = "number"
    return parse


def parser() -> Parser:
    p = Parser(prog="python -m accounting serve",
               description="Serving capacity: weights per GPU as the checkpoint stores them "
                           "(quantization_config or --weights), KV bytes per token per GPU, "
                           "the engine's KV pool (vLLM's gpu_memory_utilization rule or "
                           "SGLang's mem_fraction_static), the most sequences of --ctx tokens "
                           "that fit, the longest context at --concurrency, time to first "
                           "token and per output token. Exact integers; every rule cited in "
                           "docs/serving.md.")
    add_model_args(p)
    g = p.add_argument_group("hardware and parallelism")
    g.add_argument("--gpu", metavar="NAME", help=gpu_help())
    g.add_argument("--gpu-mem", type=parse_size, metavar="SIZE",
                   help="GPU memory (80GB, 80GiB, 81559MiB ...; default: the card's)")
    g.add_argument("--gpu-flops", type=_positive("--gpu-flops"), metavar="TFLOPS",
                   help="dense bf16 peak TFLOP/s (default: the card's)")
    g.add_argument("--gpu-bw", type=_positive("--gpu-bw"), metavar="TB/S",
                   help="memory bandwidth in TB/s (default: the card's)")
    g.add_argument("--gpus", type=positive_int("--gpus", 4096, "4,096"), metavar="N",
                   help="GPUs of one replica (= tp · pp; default tp · pp)")
    g.add_argument("--tp", type=positive_int("--tp", 4096, "4,096"), metavar="N",
                   help="tensor-parallel size (default: --gpus / --pp, else 1)")
    g.add_argument("--pp", type=positive_int("--pp", 4096, "4,096"), default=1, metavar="N",
                   help="pipeline-parallel stages (default 1)")
    s = p.add_argument_group("weights and KV cache")
    s.add_argument("--weights", metavar="SCHEME",
                   help=f"store an unquantized model's weights as: {', '.join(SCHEMES)} "
                        "(default: the config's quantization_config, else bf16)")
    s.add_argument("--group-size", type=positive_int("--group-size", 10**6, "10^6"),
                   metavar="N", help="group size of a grouped scheme (awq, gptq, w4a16)")
    s.add_argument("--kv-dtype", choices=tuple(kv.KV_DTYPES), default="bf16",
                   help="KV cache dtype (default bf16; fp8 = fp8_e4m3)")
    w = p.add_argument_group("workload and engine")
    w.add_argument("--ctx", type=positive_int("--ctx"), metavar="T",
                   help="tokens per sequence (default: the config's context length)")
    w.add_argument("--prompt", type=positive_int("--prompt"), metavar="P",
                   help="prompt tokens for the time to first token (default --ctx)")
    w.add_argument("--concurrency", type=positive_int("--concurrency"), metavar="B",
                   help="sequences served at once (default: the most that fit)")
    w.add_argument("--engine", choices=engines.ENGINES, default=engines.VLLM,
                   help="vllm (default) or sglang: whose pool rule and defaults")
    w.add_argument("--gpu-memory-utilization", type=_fraction("--gpu-memory-utilization"),
                   metavar="F", help="vLLM's gpu_memory_utilization (default 0.9) or SGLang's "
                                     "mem_fraction_static (default: its reserve rule)")
    w.add_argument("--max-num-batched-tokens", type=positive_int("--max-num-batched-tokens"),
                   metavar="N", help="tokens of vLLM's profile run (default 8192 on ≥ 70 GiB "
                                     "cards but A100, else 2048)")
    w.add_argument("--max-num-seqs", type=positive_int("--max-num-seqs"), metavar="N",
                   help="vLLM's max_num_seqs (default 1024 or 256, as above)")
    w.add_argument("--block-size", type=positive_int("--block-size", 10**6, "10^6"),
                   metavar="N", help="tokens per KV block (default vLLM 16, 64 for MLA; "
                                     "SGLang 1)")
    w.add_argument("--activation-peak", type=parse_size, metavar="SIZE",
                   help="vLLM's profiled activation peak per GPU (default: estimated)")
    w.add_argument("--non-torch", type=parse_size, metavar="SIZE",
                   help="memory outside torch per GPU (default 0.5GiB; SGLang with several "
                        "GPUs 2.5GiB: its NCCL buffers)")
    w.add_argument("--cuda-graph-mem", type=parse_size, metavar="SIZE",
                   help="CUDA graph memory vLLM subtracts from the pool (newer vLLM, "
                        "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS; default 0: outside it)")
    t = p.add_argument_group("time")
    t.add_argument("--mfu", type=_fraction("--mfu"), default=Fraction(1, 2), metavar="F",
                   help="model FLOPs utilization of prefill and decode compute (default 0.5)")
    t.add_argument("--bandwidth-efficiency", type=_fraction("--bandwidth-efficiency"),
                   default=Fraction(8, 10), metavar="F",
                   help="share of the memory bandwidth a decode step reaches (default 0.8)")
    add_output_args(p)
    return p


def _parallel(ns) -> tuple[int, int]:
    pp = ns.pp
    if ns.tp is None:
        if ns.gpus is None:
            return 1, pp
        if ns.gpus % pp:
            raise UsageError(f"--pp {pp} does not divide --gpus {ns.gpus}; give --tp too")
        return ns.gpus // pp, pp
    if ns.gpus is not None and ns.tp * pp != ns.gpus:
        raise UsageError(f"--gpus {ns.gpus} is not --tp {ns.tp} × --pp {pp}; give matching "
                         f"values")
    return ns.tp, pp


def _quantization(ns) -> tuple[object, object]:
    """(the checkpoint's quantization_config or None, its HFConfig names or None)."""
    from accounting.spec import hf_config, presets
    from accounting.spec.own_format import read_json
    if ns.model:
        hf = presets.hf_source(ns.model)
        return (None if hf is None else hf.data.get(QUANT_KEY)), (hf.type.names if hf else None)
    if ns.config:
        data, _ = read_json(ns.config)
        if isinstance(data, dict) and "model_type" in data:
            from accounting.spec.hf_types_kimi import checkpoint_quantization
            mt = data["model_type"]
            if mt in hf_config.WRAPPERS:  # a wrapper's language model names the modules
                rest = {k: v for k, v in data.items() if k != QUANT_KEY}
                mt = hf_config.WRAPPERS[mt](rest, ns.config)[0]["model_type"]
            t = hf_config.TYPES.get(mt)
            return checkpoint_quantization(data), (t.names if t is not None else None)
    return None, None


def _tower_note(ns) -> tuple[str, ...]:
    """A vision-language config.json's tower (accounting/spec/vision.py): said on the first
    screen, since these weights and this pool are the language model's alone (vLLM also
    profiles the largest image input before sizing its pool)."""
    from accounting.cli.args import hf_source_from_args
    from accounting.present.vision_views import uncounted
    line = uncounted(hf_source_from_args(ns), "these weights or this KV pool (vLLM loads it "
                                              "and profiles its largest image input first)")
    return () if line is None else (line,)


def main(argv: list[str]) -> int:
    ns = parser().parse_args(argv)
    if ns.list:
        from accounting.present.views import presets_table
        output.emit(ns.format, ns.output, lambda: [presets_table()])
        return 0
    config = config_from_args(ns, drop=(QUANT_KEY,))
    quant, names = _quantization(ns)
    from accounting.formats.hf_quant import scheme_from_config
    notes = ()
    if quant is not None and ns.weights is not None:
        method = quant.get("quant_method") if isinstance(quant, dict) else None
        notes = (f"--weights {ns.weights} replaces the checkpoint's quantization_config "
                 f"(quant_method {json.dumps(method)[:30]}): the weights as if "
                 f"stored so",)
        scheme = get_scheme(ns.weights)
    elif quant is not None:
        scheme = scheme_from_config(quant)
    else:
        scheme = get_scheme(ns.weights or "bf16")
    if ns.group_size is not None:
        scheme = scheme.with_group(ns.group_size)
    notes += _tower_note(ns)
    tp, pp = _parallel(ns)
    from accounting.serving.plan import serve
    from accounting.serving import views
    plan = serve(config, scheme, gpu=ns.gpu, memory_bytes=ns.gpu_mem, tp=tp, pp=pp,
                 kv_dtype=ns.kv_dtype, ctx=ns.ctx, concurrency=ns.concurrency,
                 engine=ns.engine, utilization=ns.gpu_memory_utilization,
                 max_num_batched_tokens=ns.max_num_batched_tokens,
                 max_num_seqs=ns.max_num_seqs, block_size=ns.block_size,
                 activation_bytes=ns.activation_peak, non_torch_bytes=ns.non_torch,
                 cuda_graph_bytes=ns.cuda_graph_mem or 0,
                 mfu=ns.mfu, bandwidth_efficiency=ns.bandwidth_efficiency, names=names,
                 model_dtype_bytes=4 if scheme.name == "fp32" else 2,
                 peak_tflops=ns.gpu_flops, bandwidth_tbs=ns.gpu_bw, prompt=ns.prompt,
                 notes=notes)
    output.emit(ns.format, ns.output, lambda: [views.answer(plan)] + views.tables(plan),
                lambda: views.to_dict(plan), lambda: views.to_csv(plan))
    return 0
