"""`serve --engine llama.cpp`: what llama.cpp allocates on the GPU for a model, by its own
rules (ggml-org/llama.cpp at 3514e9f6):

- the context (src/llama-context.cpp, llama_context::llama_context): n_ctx defaults to the
  training context, is padded to a multiple of 256 (GGML_PAD(n_ctx, 256)); without a
  unified cache each of the n_seq_max sequences (llama-server's slots, -np) gets
  n_ctx_seq = GGML_PAD(n_ctx / n_seq_max, 256) cells and n_ctx becomes n_ctx_seq·n_seq_max;
- the KV cache (src/llama-kv-cache.cpp, llama_kv_cache::llama_kv_cache, with kv_size =
  n_ctx_seq from llama_model::create_memory): for every layer with a cache, K of
  n_embd_k_gqa × kv_size × n_stream and V of n_embd_v_gqa × kv_size × n_stream elements
  in type_k / type_v (n_stream = 1 unified, else n_seq_max), allocated whole at load:
  bytes = n_ctx · Σ_layers (row(type_k, n_embd_k_gqa) + row(type_v, n_embd_v_gqa)), with
  ggml's row size n / block · type_size (f16: 2 bytes an element, q8_0 34 per 32);
- the weights: the GGUF file's tensors as stored (--checkpoint FILE.gguf), else the
  scheme's bytes;
- the compute buffer: sized at load by reserving the worst-case graph of n_ubatch tokens
  (llama_context::graph_reserve) through ggml's allocator: not derived here; llama.cpp
  prints it ('compute buffer size'); --activation-peak SIZE adds it.

The per-token K and V elements of each layer are the ledger's cache entries
(accounting/serving/kv.py layer_caches), the same as every other engine's.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from accounting.runtime.errors import UsageError
from accounting.serving import kv
from accounting.serving.engines import LLAMA_CPP
from accounting.architecture.config import ModelConfig
from accounting.units import BF16

PAD = 256  # llama-context.cpp: GGML_PAD(n_ctx, 256), GGML_PAD(n_ctx_seq, 256)
# ggml's type traits (ggml/src/ggml.c type_traits: blck_size, type_size) of the cache types
CACHE_TYPES = {"f16": (1, 2), BF16: (1, 2), "f32": (1, 4), "q8_0": (32, 34),
               "q4_0": (32, 18)}
DEFAULT_TYPE = "f16"  # llama_context_default_params: type_k = type_v = GGML_TYPE_F16


def _pad(n: int) -> int:
    return -(-n // PAD) * PAD


@dataclass(frozen=True)
class LlamaCppPlan:
    config: ModelConfig
    gpu: str
    memory_bytes: int
    requested_ctx: int
    n_seq_max: int
    kv_unified: bool
    n_ctx: int  # cells in all, after llama.cpp's padding
    n_ctx_seq: int  # cells a sequence may use
    cache_type: str
    kv_elements_per_token: int  # K and V elements of all layers, one token
    kv_bytes: int
    weights_bytes: int
    weights_source: str
    compute_bytes: int | None  # given (--activation-peak), else not counted

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + (self.compute_bytes or 0)

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.memory_bytes


def context(n_ctx: int, n_seq_max: int, unified: bool) -> tuple[int, int]:
    """(n_ctx, n_ctx_seq) as llama_context's constructor sets them."""
    n_ctx = _pad(n_ctx)
    if unified:
        return n_ctx, n_ctx
    per = _pad(n_ctx // n_seq_max)
    if per == 0:
        raise UsageError(f"llama.cpp: a context of {n_ctx:,} over {n_seq_max:,} sequences "
                         f"leaves none per sequence (n_ctx_seq == 0)")
    return per * n_seq_max, per


def plan(config: ModelConfig, weights_bytes: int, weights_source: str, memory_bytes: int,
         gpu: str, ctx: int | None, n_seq_max: int = 1, unified: bool = False,
         cache_type: str = DEFAULT_TYPE, compute_bytes: int | None = None) -> LlamaCppPlan:
    caches = kv.layer_caches(config, 1, 1, tuple(range(config.num_layers)))
    if any(c.window is not None or c.state_bytes for c in caches) or config.mla:
        raise UsageError("--engine llama.cpp: this model has windowed, recurrent or latent-"
                         "attention layers, whose llama.cpp caches (llama_kv_cache_iswa, "
                         "llama_memory_recurrent) are not modelled; use --engine vllm")
    n_ctx, n_ctx_seq = context(ctx or config.context_length, n_seq_max, unified)
    block, size = CACHE_TYPES[cache_type]
    per_token = sum(c.bytes_per_token for c in caches)  # elements (1 byte each above)
    if any(c.bytes_per_token % (2 * block) for c in caches):
        raise UsageError(f"--engine llama.cpp: a layer's K/V rows are not whole {cache_type} "
                         f"blocks of {block}")
    kv_bytes = n_ctx * per_token // block * size
    return LlamaCppPlan(config, gpu, memory_bytes, ctx or config.context_length, n_seq_max,
                        unified, n_ctx, n_ctx_seq, cache_type, per_token, kv_bytes,
                        weights_bytes, weights_source, compute_bytes)


def _gb(n: int) -> str:
    from accounting.units import GB, GiB, decimal
    return f"{decimal(Fraction(n, GB), 2)} GB ({decimal(Fraction(n, GiB), 2)} GiB)"


def answer(p: LlamaCppPlan):
    from accounting.tables.table import Table
    w = 16

    def line(label: str, text: str) -> str:
        return f"{label + ':':<{w}} {text}"
    compute = (f" + compute buffer {_gb(p.compute_bytes)} (given)" if p.compute_bytes
               else "; compute buffer not counted")
    verdict = "yes" if p.fits else "NO"
    lines = [
        line("fits", f"{verdict}: {_gb(p.total_bytes)} of {_gb(p.memory_bytes)} (weights + KV "
                     f"cache{compute})"),
        line("weights", f"{_gb(p.weights_bytes)}: {p.weights_source}"),
        line("KV cache", f"{_gb(p.kv_bytes)}: {p.n_ctx:,} cells × {p.kv_elements_per_token:,} "
                         f"K/V elements a token ({p.cache_type}), allocated whole at load"),
        line("context", f"{p.n_ctx_seq:,} tokens a sequence × {p.n_seq_max:,} sequence"
                        f"{'s' if p.n_seq_max != 1 else ''} ({'unified cache' if p.kv_unified else 'a stream each'}; "
                        f"asked {p.requested_ctx:,}, padded to a multiple of {PAD})"),
        line("compute buffer", "given" if p.compute_bytes else
             "not counted: llama.cpp sizes it at load by reserving the worst-case graph of "
             "n_ubatch tokens (llama_context::graph_reserve) and prints it ('compute buffer "
             "size'); pass --activation-peak SIZE to include it"),
    ]
    return Table(f"Answer: serve {p.config.name} on 1 × {p.gpu}, llama.cpp, KV {p.cache_type}, "
                 f"ctx {p.requested_ctx:,}", notes=tuple(lines))


def to_dict(p: LlamaCppPlan) -> dict:
    return {"engine": LLAMA_CPP, "gpu": p.gpu, "memory_bytes": p.memory_bytes,
            "fits": p.fits, "weights_bytes": p.weights_bytes, "weights_source": p.weights_source,
            "kv_cache_bytes": p.kv_bytes, "n_ctx": p.n_ctx, "n_ctx_seq": p.n_ctx_seq,
            "n_seq_max": p.n_seq_max, "kv_unified": p.kv_unified, "cache_type": p.cache_type,
            "kv_elements_per_token": p.kv_elements_per_token,
            "compute_buffer_bytes": p.compute_bytes, "total_bytes": p.total_bytes}
