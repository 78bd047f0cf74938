"""Run the real model on the meta device under fvcore, FlopCounterMode and the op counter.

The meta device carries shapes and dtypes but no data, so GPT-2 XL at 16k tokens runs in
seconds and a few hundred MB. The model is built with context_length = max(seq,
config.context_length): a longer sequence means "this architecture at T tokens", and the
model refuses sequences beyond its context_length.

How the work is arranged (issue 12): the model is built once (torch's lazy imports paid
once); fvcore's jit trace, the longest counter, runs in a child forked from here
(accounting/runtime/fork.py) on the second core, with the tracer's Python source locations off
(crosscheck/tracer.py) and torch's C++ meta kernels (crosscheck/metakernels.py), while
this process runs FlopCounterMode and the op counter over one dispatch hop per op
(dispatch.counting). Where no worker can be forked, fvcore runs here first, as before;
the counts are the same either way (tests/test_crosscheck_workers.py). `python -m
accounting` owns its process and sets it up as the workers are (prepare_process, called
from accounting/cli/main.py); a caller's process (a notebook, the tests) is left as it was.
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import lru_cache

import torch
import torch.nn.functional as F

from accounting.architecture.config import ModelConfig
from accounting.runtime import fork
from accounting.crosscheck.dispatch import BACKWARD, FORWARD, OpCount, counting
from accounting.crosscheck.fused import JIT_NAME, fvcore_sdpa_handle, register_flop_formulas
from accounting.crosscheck.fvcore_einsum import (_STOCK_CACHE, EinsumCall,
                                                 RecordingEinsumHandle)
from accounting.ledger.records import FORWARD, PHASES

GLOBAL = "Global"  # FlopCounterMode's key for everything counted, inside a module or not


@dataclass(frozen=True)
class Measurement:
    config: ModelConfig
    seq: int
    batch: int
    phase: str
    fvcore_macs: dict | None  # fvcore by_module(): module -> multiply-adds (None: not run)
    fvcore_skipped: dict  # fvcore's unsupported (uncounted) operators -> calls
    einsum_calls: tuple[EinsumCall, ...]
    torch_flops: dict  # pass -> module -> FlopCounterMode FLOPs (its module hierarchy)
    ops: tuple[OpCount, ...]  # the op counter's records
    linear_modules: tuple[str, ...]  # names of the model's Linear modules
    embedding_has_grad: bool | None  # None when no backward ran
    token_ids_have_grad: bool | None
    seconds: dict = field(compare=False)  # wall time of each stage (for benchmarks)


@lru_cache(maxsize=4)
def _build(config: ModelConfig, context_length: int) -> torch.nn.Module:
    from model import TransformerLM
    return TransformerLM.from_config(config, context_length=context_length, device="meta")


def build_model(config: ModelConfig, seq: int) -> torch.nn.Module:
    """The spec's model on the meta device. With RoPE it is built with context_length =
    max(seq, context_length) (this architecture at T tokens); a learned position table keeps
    its length (the ledger refuses a longer T)."""
    ctx = config.context_length if config.positions == "learned" else max(seq, config.context_length)
    return _build(config, ctx)


def _relative(name: str, root: str) -> str:
    """FlopCounterMode's 'TransformerLM.layers.0.attn' -> 'layers.0.attn' (root: '')."""
    if name == root:
        return ""
    return name[len(root) + 1:] if name.startswith(root + ".") else name


def _totals(counts: dict, root: str) -> dict[str, int]:
    return {_relative(k, root): int(sum(v.values())) for k, v in counts.items()}


def prepare_process() -> None:
    """Speed torch up for good in a process that ends after counting (a forked worker, the
    report's pool workers, or the CLI's own process when the run is the whole process):
    the tracer without source locations (tracer.py), the C++ meta kernels
    (metakernels.py). Neither changes a count (tests/test_crosscheck_workers.py); neither
    can be undone, so never in a caller's process (a notebook, the tests)."""
    from accounting.crosscheck.metakernels import use_cpp_meta_kernels
    from accounting.crosscheck.tracer import skip_source_locations
    skip_source_locations()
    use_cpp_meta_kernels()


def _fvcore(model: torch.nn.Module, ids: torch.Tensor, stock: bool, worker: bool):
    """fvcore's FlopCountAnalysis of the forward pass: (multiply-adds by module, unsupported
    operators, einsum calls, new stock-handle cache entries, seconds). worker=True: this
    process ends after it (the tracer's source locations can be switched off for good)."""
    t = time.perf_counter()
    from fvcore.nn import FlopCountAnalysis
    if worker:
        prepare_process()
    cached = set(_STOCK_CACHE)
    handle = RecordingEinsumHandle(stock=stock)
    fa = FlopCountAnalysis(model, (ids,)).set_op_handle("aten::einsum", handle)
    fa.set_op_handle(JIT_NAME, fvcore_sdpa_handle)
    from accounting.crosscheck.triangular import JIT_NAME as SOLVE_JIT, fvcore_solve_handle
    fa.set_op_handle(SOLVE_JIT, fvcore_solve_handle)
    fa.unsupported_ops_warnings(False).uncalled_modules_warnings(False).tracer_warnings("none")
    from accounting.crosscheck import tracer
    # with the tracer's no-op callback installed, a signal arriving mid-trace is held and
    # delivered when the trace ends (tracer.active: raised inside the callback, it is lost)
    held = fork.signals_held() if tracer.active() else nullcontext()
    with torch.no_grad(), held:
        macs = {k: int(v) for k, v in fa.by_module().items()}
        skipped = dict(fa.unsupported_ops())
    new = {k: v for k, v in _STOCK_CACHE.items() if k not in cached}
    return macs, skipped, tuple(handle.calls), new, time.perf_counter() - t


def measure(config: ModelConfig, seq: int, batch: int = 1, phase: str = FORWARD,
            fvcore: bool = True, stock: bool = True, parallel: bool | None = None) -> Measurement:
    """Count the model's FLOPs for one workload with every counter. parallel: fvcore in a
    forked worker beside the other counters (None: where fork.available())."""
    passes = PHASES[phase]
    seconds: dict[str, float] = {}
    t = time.perf_counter()
    model = build_model(config, seq)
    ids = torch.zeros((batch, seq), dtype=torch.long, device="meta")
    seconds["build"] = time.perf_counter() - t

    run_fvcore = fvcore and FORWARD in passes  # fvcore traces the forward pass only
    parallel = fork.available() if parallel is None else parallel
    fv = None
    if run_fvcore and not parallel:
        fv = _fvcore(model, ids, stock, worker=False)
    worker = fork.Forked(_fvcore, model, ids, stock, True) if run_fvcore and parallel \
        else nullcontext()
    with worker:
        t = time.perf_counter()
        register_flop_formulas()
        root = type(model).__name__
        torch_flops: dict[str, dict[str, int]] = {}
        embedding_grad = ids_grad = None
        try:
            with counting(model) as (fcm, counter):
                with torch.set_grad_enabled(BACKWARD in passes):
                    logits = model(ids)
                forward = _totals(fcm.get_flop_counts(), root)
                torch_flops[FORWARD] = forward
                if BACKWARD in passes:
                    counter.phases = {BACKWARD}  # the loss is not part of the model's forward
                    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1))
                    loss.backward()
                    both = _totals(fcm.get_flop_counts(), root)
                    torch_flops[BACKWARD] = {k: v - forward.get(k, 0) for k, v in both.items()}
                    embedding_grad = model.token_embeddings.weight.grad is not None
                    ids_grad = ids.requires_grad or ids.grad is not None
            ops = counter.counts()
        finally:
            model.zero_grad(set_to_none=True)  # the cached model must not accumulate gradients
        seconds["torch"] = time.perf_counter() - t
        if run_fvcore and parallel:
            t = time.perf_counter()
            fv = worker.result()
            seconds["wait"] = time.perf_counter() - t

    fvcore_macs, skipped, calls = None, {}, ()
    if fv is not None:
        fvcore_macs, skipped, calls, new_stock, seconds["fvcore"] = fv
        _STOCK_CACHE.update(new_stock)

    from model import Linear
    linears = tuple(n for n, m in model.named_modules() if isinstance(m, Linear))
    return Measurement(config, seq, batch, phase, fvcore_macs, skipped, calls, torch_flops,
                       ops, linears, embedding_grad, ids_grad, seconds)
