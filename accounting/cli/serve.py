"""`python -m accounting serve MODEL --gpu NAME ...`: serving capacity (weights per GPU as
stored, the engine's KV pool, concurrency at a context, TTFT and TPOT). main(argv) -> int;
bad input raises UsageError (exit 2 in accounting.cli.main)."""
from __future__ import annotations

import argparse
import json
from fractions import Fraction

from accounting.cli.args import (Parser, add_model_args, add_output_args, config_from_args,
                                 exact_number, hf_source_from_args, positive_int)
from accounting.cli.plan import parse_size
from accounting.formats.schemes import SCHEMES, get_scheme
from accounting.planning.gpus import gpu_help
from accounting.tables import output
from accounting.runtime.errors import UsageError, shorten
from accounting.serving import engines, kv

QUANT_KEY = "quantization_config"
LLAMA_CPP = engines.LLAMA_CPP  # issue 42: accounting/serving/llamacpp.py


def _fraction(flag: str):
    """A number in (0, 1], read exactly and bounded."""
    return exact_number(flag, lambda x: 0 < x <= 1, "a number in (0, 1]", "fraction")


def _positive(flag: str):
    """A positive number, read exactly and bounded."""
    return exact_number(flag, lambda x: x > 0, "a positive number")


def _images_per_prompt(text: str) -> int:
    """0 (text only) or a positive count up to 10^6, as positive_int reads it."""
    if str(text).strip() in ("0", "+0"):
        return 0
    try:
        return positive_int("--limit-mm-per-prompt", 10**6, "10^6")(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"must be 0 (text only) or a count of images up to "
                                         f"10^6, got {shorten(text)}") from None


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
                   help="GPU memory as torch sees it (80GB, 79.2GiB, 81121MiB ...; default: "
                        "the card's torch.cuda.mem_get_info total)")
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
                   help="tokens per sequence, the engine's max_model_len (default: the config's "
                        "context length; longer only with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 or "
                        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1, as the engines)")
    w.add_argument("--prompt", type=positive_int("--prompt"), metavar="P",
                   help="prompt tokens for the time to first token (default and at most --ctx)")
    w.add_argument("--concurrency", type=positive_int("--concurrency"), metavar="B",
                   help="sequences served at once (default: the most that fit)")
    w.add_argument("--engine", choices=engines.CHOICES, default=engines.VLLM,
                   help="vllm (default) or sglang: whose pool rule and defaults; llama.cpp: "
                        "its whole-context KV cache and the weights as stored (a GGUF "
                        "--checkpoint), one GPU, --concurrency as its sequences (-np)")
    w.add_argument("--engine-version", metavar="V",
                   help="the engine release whose start-up rules apply (vllm: "
                        + ", ".join(engines.versions(engines.VLLM)) + "; sglang: "
                        + ", ".join(engines.versions(engines.SGLANG)) + "; a later release "
                        "takes the latest rule before it; default: vllm "
                        + engines.DEFAULT_VERSION[engines.VLLM] + ", sglang "
                        + engines.DEFAULT_VERSION[engines.SGLANG] + ")")
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
    from accounting.cli.main import add_pixel_args  # issue 41: vLLM's mm_processor_kwargs
    add_pixel_args(w)
    w.add_argument("--limit-mm-per-prompt", type=_images_per_prompt,
                   metavar="N", help="vLLM's limit_mm_per_prompt for images (default 999, V1's):"
                   " the profiled image count is at most max_num_seqs·N; 0 serves the model as "
                   "text only (no encoder profile; vLLM 0.21 does not load the tower)")
    w.add_argument("--activation-peak", type=parse_size, metavar="SIZE",
                   help="vLLM's profiled activation peak per GPU (default: estimated)")
    w.add_argument("--non-torch", type=parse_size, metavar="SIZE",
                   help="memory outside torch per GPU that comes off the KV budget (default: "
                        "vLLM's non-torch increase, a cuBLAS workspace to 0.5GiB, plus NCCL "
                        "and custom all-reduce buffers by TP/PP; SGLang's CUDA context and "
                        "the same buffers)")
    w.add_argument("--cuda-graph-mem", type=parse_size, metavar="SIZE",
                   help="vLLM's CUDA graph memory (default: its profile's estimate from the "
                        "captured sizes, taken off the pool from 0.21, outside it before)")
    t = p.add_argument_group("time")
    t.add_argument("--mfu", type=_fraction("--mfu"), default=None, metavar="F",
                   help="model FLOPs utilization of prefill and decode compute: an override "
                        "(the roofline at F); without it TTFT and TPOT are timed op by op from "
                        "the engine's measured kernels where the GPU has tables, else the "
                        "roofline at 0.5")
    t.add_argument("--bandwidth-efficiency", type=_fraction("--bandwidth-efficiency"),
                   default=Fraction(8, 10), metavar="F",
                   help="share of the memory bandwidth a decode step reaches (default 0.8)")
    from accounting.cli import cost as cost_cli  # issue 42
    cost_cli.add_arg(t)
    from accounting.cli.serve_search import add_search_args
    add_search_args(p, _positive)
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


def _quantization(ns) -> tuple[object, object, object]:
    """(the checkpoint's quantization_config or None, its HFConfig names or None, its
    config.json or None)."""
    from accounting.architecture import hf_config, presets
    from accounting.architecture.own_format import read_json
    path = ns.config or getattr(ns, "hub_path", None)  # a hub id's config.json (issue 42)
    if path and str(path).endswith(".gguf"):  # llama.cpp's file: its types are its storage
        hf = getattr(ns, "hf_read", None)
        return None, (hf.type.module_names(hf.data) if hf else None), None
    if ns.model and path is None:
        hf = presets.hf_source(ns.model)
        if hf is None:
            return None, None, None
        return hf.data.get(QUANT_KEY), hf.type.names, hf.data
    if path:
        data, _ = read_json(path)
        if isinstance(data, dict) and "model_type" in data:
            from accounting.architecture.hf_types_kimi import checkpoint_quantization
            mt = data["model_type"]
            if mt in hf_config.WRAPPERS:  # a wrapper's language model names the modules
                rest = {k: v for k, v in data.items() if k != QUANT_KEY}
                mt = hf_config.WRAPPERS[mt](rest, path)[0]["model_type"]
            t = hf_config.TYPES.get(mt)
            return checkpoint_quantization(data), (t.names if t is not None else None), data
    return None, None, None


def _max_len(ns, config, data) -> tuple[int, bool]:
    """The engine's derived max_model_len (from the config.json when one was read; the
    given --context-length when given) and whether its environment switch allows more."""
    import os
    from accounting.serving import max_len
    derived = (config.context_length if ns.context_length is not None
               else max_len.derived_max_len(config.context_length, data))
    switch = engines.allow_long_env(ns.engine)
    # vllm/envs.py reads its switch as "1" or "true", any case
    return derived, os.environ.get(switch, "0").strip().lower() in ("1", "true")


_NOT_LLAMA_CPP = (("gpu_memory_utilization", "--gpu-memory-utilization"),
                  ("max_num_batched_tokens", "--max-num-batched-tokens"),
                  ("max_num_seqs", "--max-num-seqs"), ("block_size", "--block-size"),
                  ("non_torch", "--non-torch"), ("cuda_graph_mem", "--cuda-graph-mem"),
                  ("tp", "--tp"), ("gpus", "--gpus"), ("prompt", "--prompt"),
                  ("price_per_gpu_hour", "--price-per-gpu-hour"))


def _llamacpp(ns, config, scheme) -> int:
    """serve --engine llama.cpp (accounting/serving/llamacpp.py): one GPU, its whole-context
    KV cache, the weights as stored."""
    for dest, flag in _NOT_LLAMA_CPP:
        if getattr(ns, dest, None) is not None:
            raise UsageError(f"{flag} is vLLM's or SGLang's (or needs the time model); "
                             f"--engine llama.cpp does not take it")
    if ns.pp != 1:
        raise UsageError("--engine llama.cpp is planned on one GPU; leave out --pp")
    if ns.kv_dtype != "bf16":
        raise UsageError(f"--engine llama.cpp: its cache types are f16 (the default) and "
                         f"ggml's quantized ones; --kv-dtype {ns.kv_dtype} is not one")
    from accounting.cli import checkpoint
    from accounting.serving import llamacpp
    from accounting.planning.gpus import get_gpu
    card = get_gpu(ns.gpu) if ns.gpu else None
    memory = ns.gpu_mem or (card.memory_bytes if card else None)
    if memory is None:
        raise UsageError("serve needs a GPU: --gpu NAME, or --gpu-mem SIZE")
    ck = checkpoint.check(ns, config, hf_source_from_args(ns))
    if ck is not None:
        weights, source = ck.bytes, f"as stored in {ck.source}"
    else:
        from accounting.serving import shards
        weights = shards.stages(config, scheme, 4 if scheme.name == "fp32" else 2, 1, 1)[0].bytes
        source = f"{scheme.label} (give the GGUF with --checkpoint for its bytes)"
    p = llamacpp.plan(config, weights, source, memory, card.name if card else "custom GPU",
                      ns.ctx, ns.concurrency or 1, compute_bytes=ns.activation_peak)
    output.emit(ns.format, ns.output, lambda: [checkpoint.answer(llamacpp.answer(p), ck, 16)],
                lambda: checkpoint.add_json(llamacpp.to_dict(p), ck), None)
    return checkpoint.status(ck)


def _cost(ns, plan):
    """Serving's cost per million output tokens at --price-per-gpu-hour: the replica's GPUs
    for the time its decode steps take (plan.time's throughput), None without the flag."""
    from accounting.planning.cost import Cost, price
    p = price(ns.price_per_gpu_hour, plan.gpu if ns.gpu else None)
    if p is None:
        return None
    return Cost(p, plan.gpus, tokens_per_second=plan.time.tokens_per_second
                if plan.time is not None else None)


def _tower_note(ns) -> tuple[str, ...]:
    """--search plans each layout with serve() and the tower's arguments (_tower): a
    vision-language config.json's tower is said on the first screen to be counted."""
    if not ns.search:
        return ()
    from accounting.cli.args import hf_source_from_args
    if getattr(hf_source_from_args(ns), "vision", None) is None:
        return ()
    return ("vision tower: counted in every layout as plain `serve` counts it (its weights on "
            "each GPU; the engine's multimodal profile run and encoder cache where it "
            "profiles the encoder)",)


def _tower(ns) -> dict:
    """serve()'s tower arguments for a vision-language config.json (serving/vision.py): its
    VisionSpec, its quantization_config, Qwen's --min-pixels/--max-pixels (vLLM's
    mm_processor_kwargs); empty for a language model (the pixel flags refused on one)."""
    from accounting.cli.args import hf_source_from_args
    from accounting.cli.main import pixel_bounds, processed
    tower = processed(ns, getattr(hf_source_from_args(ns), "vision", None))
    pixels = pixel_bounds(ns, tower)
    if tower is None:
        if ns.limit_mm_per_prompt is not None:
            raise UsageError("--limit-mm-per-prompt needs a vision-language config.json whose "
                             "tower the tool reads; drop it for a language model")
        return {}
    data = _quantization(ns)[2] or {}
    # the file's top-level quantization_config covers the tower; one under text_config
    # (Kimi-K2.5's) is the language model's alone, and the tower is stored unquantized
    return {"tower": tower, "tower_quant": data.get(QUANT_KEY), "tower_pixels": pixels,
            "tower_config": data.get("vision_config"),
            "limit_mm_per_prompt": ns.limit_mm_per_prompt}


def main(argv: list[str]) -> int:
    ns = parser().parse_args(argv)
    if ns.list:
        from accounting.present.views import presets_table
        output.emit(ns.format, ns.output, lambda: [presets_table()])
        return 0
    if ns.search:
        from accounting.cli.serve_search import run
        return run(ns, plan_inputs(ns), _tower(ns))
    from accounting.cli.serve_search import data_parallel, refuse_search_flags, speculation
    refuse_search_flags(ns)
    got = _plan_and_checkpoint(ns)
    if isinstance(got, int):  # llama.cpp's answer, already written
        return got
    plan, ck = got
    from accounting.cli import checkpoint, cost as cost_cli
    from accounting.serving import views
    config = plan.config
    spec = speculation(ns, plan, config)  # issue 40: --speculative beside the plan
    dp = data_parallel(ns, plan, config)  # issue 40: --dp D, the DP-attention + EP worker
    c = _cost(ns, plan)
    output.emit(ns.format, ns.output,
                lambda: dp[0] + [cost_cli.answer(checkpoint.answer(views.answer(plan), ck,
                                                                   views.LABEL), c, views.LABEL)]
                + views.tables(plan) + spec[0],
                lambda: cost_cli.add_json(checkpoint.add_json(views.to_dict(plan), ck), c)
                | dp[1] | spec[1],
                lambda: views.to_csv(plan))
    return checkpoint.status(ck)


def plan_from_args(ns):
    """The ServePlan of parsed serve arguments (also the docs' answers table's)."""
    return _plan_and_checkpoint(ns)[0]


def plan_inputs(ns):
    """(config, weight scheme, HF module names, notes) of parsed serve arguments."""
    config = config_from_args(ns, drop=(QUANT_KEY,))
    quant, names, _ = _quantization(ns)
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
    return config, scheme, names, notes


def _plan_and_checkpoint(ns):
    """(the ServePlan, the checkpoint's cross-check or None) of parsed serve arguments; for
    --engine llama.cpp, its exit status (its answer written)."""
    config, scheme, names, notes = plan_inputs(ns)
    if ns.engine == LLAMA_CPP:
        return _llamacpp(ns, config, scheme)
    derived, allow_long = _max_len(ns, config, _quantization(ns)[2])
    tp, pp = _parallel(ns)
    from accounting.cli import checkpoint  # issue 42: --checkpoint, the weights as stored
    ck, stored = checkpoint.check(ns, config, hf_source_from_args(ns)), None
    if ck is not None:
        from accounting.checkpoint.stored import override
        stored = override(ck.checkpoint, names, config, scheme,
                          4 if scheme.name == "fp32" else 2, tp, pp)
        notes += (f"weights as stored in the checkpoint's safetensors ({ck.bytes:,} bytes in "
                  f"{ck.tensors:,} tensors), not as the scheme computes them",)
    from accounting.serving.plan import serve
    plan = serve(config, scheme, gpu=ns.gpu, memory_bytes=ns.gpu_mem, tp=tp, pp=pp,
                 kv_dtype=ns.kv_dtype, ctx=ns.ctx, concurrency=ns.concurrency,
                 engine=ns.engine, engine_version=ns.engine_version,
                 utilization=ns.gpu_memory_utilization,
                 max_num_batched_tokens=ns.max_num_batched_tokens,
                 max_num_seqs=ns.max_num_seqs, block_size=ns.block_size,
                 activation_bytes=ns.activation_peak, non_torch_bytes=ns.non_torch,
                 cuda_graph_bytes=ns.cuda_graph_mem,
                 mfu=ns.mfu, bandwidth_efficiency=ns.bandwidth_efficiency, names=names,
                 model_dtype_bytes=4 if scheme.name == "fp32" else 2,
                 peak_tflops=ns.gpu_flops, bandwidth_tbs=ns.gpu_bw, prompt=ns.prompt,
                 notes=notes, stored=stored, max_model_len=derived,
                 allow_long_context=allow_long, **_tower(ns))
    return plan, ck
