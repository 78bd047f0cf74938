"""The third counter: transformers' own model of a config.json, run on the meta device.

The model is AutoModelForCausalLM.from_config(attn_implementation="eager") built from the
config.json object itself, not from the tool's translation of it, so a wrong translation
shows as a difference. Its matmul FLOPs are counted by FlopCounterMode (forward: its
module hierarchy) and by the op counter (backward: each FLOP goes to the module whose
forward made the autograd node that ran it; see dispatch.py), its parameters by
named_parameters(), its KV cache read from past_key_values after the prefill. Built in
the config's torch_dtype (float32 if none), which only the KV-cache bytes depend on.
Imports torch and transformers: accounting.crosscheck imports this module only when a
Hugging Face config is verified and transformers is installed.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Mapping

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from accounting.crosscheck.dispatch import BACKWARD, FORWARD, OpCount, counting
from accounting.crosscheck.measure import _totals
from accounting.architecture.hf_config import storage_dtype
from accounting.ledger.records import FORWARD, PHASES

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class HFMeasurement:
    model_type: str
    transformers_class: str
    version: str  # transformers.__version__
    dtype: str  # the dtype the model was built in
    params: tuple[tuple[str, int], ...]  # named_parameters(): each parameter once, in order
    tied: bool  # lm_head.weight is the input embedding's weight
    module_classes: Mapping[str, str]  # module name -> class name
    torch_flops: Mapping[str, Mapping[str, int]]  # pass -> module -> FlopCounterMode's FLOPs
    ops: tuple[OpCount, ...]  # the op counter's records
    kv: tuple[tuple[tuple[int, ...], tuple[int, ...], int], ...]  # per layer: K, V shapes, bytes/elt
    seconds: Mapping[str, float] = field(compare=False)
    # DeepSeek-V3.2's indexer key cache per layer (DynamicIndexedLayer.indexer_keys): shape,
    # bytes per element
    indexer_kv: tuple[tuple[tuple[int, ...], int], ...] = ()
    # the recurrent layers' cache (issue 31): bytes of every conv and recurrent state tensor
    # of the cache's LinearAttentionLayer objects (cache_utils.py), and their shapes
    states: tuple[tuple[tuple[int, ...], int], ...] = ()


def _state_tensors(layer) -> list:
    """The conv and recurrent state tensors a cache layer holds (a dict or list by state
    index in transformers 5.23's LinearAttentionLayer; none in a DynamicLayer)."""
    out = []
    for attr in ("conv_states", "recurrent_states"):
        held = getattr(layer, attr, None)
        items = held.values() if isinstance(held, dict) else held if isinstance(held, (list, tuple)) \
            else [held]
        out += [x for x in items if isinstance(x, torch.Tensor)]
    return out


@contextmanager
def _quiet():
    """transformers logs warnings about token ids and defaults while building; the
    cross-check reports what matters itself."""
    from transformers.utils import logging
    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


def transformers_config(data: Mapping):
    """transformers' config object of a config.json object: its config class's own checks
    (5.x: strict dataclass fields; a dtype must name a torch dtype) run here, so a value it
    refuses is found before any counting (accounting.crosscheck.refusal)."""
    from transformers import AutoConfig
    # auto_map names remote code; the counter builds transformers' own class for model_type
    kwargs = {k: v for k, v in data.items() if k not in ("model_type", "auto_map")}
    with _quiet():
        return AutoConfig.for_model(data["model_type"], **kwargs)


def build(data: Mapping, device: str = "meta", experts: str | None = None) -> torch.nn.Module:
    """transformers' model of a config.json object, on the meta device, eager attention.

    Experts (a mixture of experts) run as `experts` if given, else as the model_type's table
    says (hf_config.HFType.experts_implementation: "batched_mm"). Not transformers' default,
    grouped_mm: FlopCounterMode has no formula for aten._grouped_mm (it counts the experts'
    matmuls as 0) and its meta kernel refuses float32; nor "eager", a loop over the experts
    that got tokens (nonzero(): data-dependent, no meta kernel). batched_mm gathers each
    (token, expert) slot's weights and runs one bmm per matrix: the same multiply-adds,
    B·T·k expert rows, which meta runs and FlopCounterMode counts."""
    from transformers import AutoModelForCausalLM
    from accounting.architecture.hf_config import TYPES
    dtype = DTYPES.get(storage_dtype(data), torch.float32)
    t = TYPES.get(data["model_type"])
    experts = experts or (t.experts_implementation if t is not None else None)
    extra = {"experts_implementation": experts} if experts else {}
    config = transformers_config(data)
    with _quiet():
        # quantization_config: from_config builds the dense model (a quantizer runs only in
        # from_pretrained), which is what the tool counts (hf_config.py's note)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, attn_implementation="eager",
                                                     dtype=dtype, **extra)
    return model.eval()  # no dropout: the tool's model has none


def measure(data: Mapping, seq: int, batch: int = 1, phase: str = FORWARD,
            model: torch.nn.Module | None = None) -> HFMeasurement:
    """Count transformers' model of `data` (a config.json object) for one workload; `model`:
    build(data)'s model, where the caller already built it (it is built here otherwise)."""
    import transformers
    seconds: dict[str, float] = {}
    t = time.perf_counter()
    model = build(data) if model is None else model
    seconds["build"] = time.perf_counter() - t

    passes = PHASES[phase]
    from accounting.crosscheck.fused import register_flop_formulas
    register_flop_formulas()  # the CPU fused kernel, the triangular solve (its own formulas)
    ids = torch.zeros((batch, seq), dtype=torch.long, device="meta")
    root = type(model).__name__
    torch_flops: dict[str, dict[str, int]] = {}
    t = time.perf_counter()
    # FlopCounterMode and the op counter on one dispatch hop per op (dispatch.counting, as
    # measure.py runs the tool's model: equal to the two modes stacked,
    # tests/test_dispatch_count.py), about a tenth of the CPU time fewer
    with counting(model) as (fcm, counter):
        with torch.set_grad_enabled(BACKWARD in passes):
            out = model(input_ids=ids, use_cache=True)  # the prefill: it fills the KV cache
        forward = _totals(fcm.get_flop_counts(), root)
        torch_flops[FORWARD] = forward
        if BACKWARD in passes:
            counter.phases = {BACKWARD}  # the loss is not part of the model's forward
            logits = out.logits
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1))
            loss.backward()
            both = _totals(fcm.get_flop_counts(), root)
            torch_flops[BACKWARD] = {k: v - forward.get(k, 0) for k, v in both.items()}
    ops = counter.counts()
    seconds["run"] = time.perf_counter() - t

    # Mamba2CausalLMOutput names its cache cache_params (modeling_mamba2.py)
    cache = getattr(out, "past_key_values", None) or out.cache_params
    kv = tuple((tuple(layer.keys.shape), tuple(layer.values.shape), layer.keys.element_size())
               for layer in cache.layers if getattr(layer, "keys", None) is not None)
    indexer_kv = tuple((tuple(layer.indexer_keys.shape), layer.indexer_keys.element_size())
                       for layer in cache.layers if getattr(layer, "indexer_keys", None) is not None)
    states = tuple((tuple(x.shape), x.element_size()) for layer in cache.layers
                   for x in _state_tensors(layer))
    embedding = model.get_input_embeddings().weight
    return HFMeasurement(
        data["model_type"], root, transformers.__version__, str(embedding.dtype).removeprefix("torch."),
        tuple((n, p.numel()) for n, p in model.named_parameters()),
        model.get_output_embeddings().weight is embedding,
        {n: type(m).__name__ for n, m in model.named_modules()},
        torch_flops, ops, kv, seconds, indexer_kv, states)
