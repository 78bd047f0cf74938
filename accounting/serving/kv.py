"""The KV cache per GPU: bytes per token by dtype and layout, from the ledger's cache records
(accounting/ledger/builder/: K and V of h_kv·d_k each per layer, or latent attention's
c_KV and RoPE key of d_kv_a = kv_lora_rank + qk_rope_head_dim).

  dtype      bf16/fp16 2 bytes; fp8 (e4m3 or e5m2) 1 byte. vLLM's fp8 cache keeps one fp32
             scale per layer for K and one for V (Attention._k_scale/_v_scale,
             vllm/attention/layer.py), outside the pool: nothing per token.
  TP         a GPU holds the KV heads of its shard (h_kv / tp; one head, replicated, once tp
             exceeds h_kv: shards.kv_heads_per_gpu). Latent attention's cache has no heads:
             every TP rank stores the whole latent of each token (vLLM's MLAAttentionSpec,
             one "head" of d_kv_a; SGLang's MLATokenToKVPool, cell size (kv_lora_rank +
             qk_rope_head_dim) · layers, not divided by TP either); SGLang's DP attention
             instead gives each rank its own requests.
  window     a sliding-window layer keeps its last W tokens: vLLM's hybrid allocator
             (v1 SlidingWindowManager) frees the blocks that fall out of the window, so a
             sequence holds ceil(W / block) + 1 blocks on such a layer; modelled so. A
             chunked layer (Llama 4) keeps its chunk, min(T, C) (ChunkedLocalAttentionSpec).
  PP         a stage holds only its own layers' cache.
  state      a recurrent layer (gated DeltaNet, Mamba-2, short conv: the ledger's
             per-sequence cache entries) keeps a fixed state per sequence whatever T: its
             conv window (in the cache dtype) and recurrent state (float32 where the ledger
             keeps it so), its heads split over TP as vLLM shards them; not per token.
             The conv window is K − 1 columns in the engine's pool, where transformers'
             cache (the ledger's) keeps K: the newest input is in hand when the conv runs
             (vllm/model_executor/layers/mamba/mamba_utils.py at 02d7108,
             MambaStateShapeCalculator: conv_kernel − 1 for mamba1, mamba2, short_conv,
             gated_delta_net and kda).
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.ledger.ledger import ledger
from accounting.runtime.errors import UsageError
from accounting.serving.shards import kv_heads_per_gpu
from accounting.architecture.config import ModelConfig
from accounting.units import BF16, DTYPE_BYTES, FP8, FP8_E4M3, FP8_E5M2, FP16, STORAGE_BYTES

CONV_WIDTH = "K"  # the ledger's conv kernel width: the engine keeps K − 1 of its columns
KV_DTYPES = {BF16: DTYPE_BYTES[BF16], FP16: DTYPE_BYTES[FP16], FP8: STORAGE_BYTES[FP8_E4M3],
             FP8_E4M3: STORAGE_BYTES[FP8_E4M3], FP8_E5M2: STORAGE_BYTES[FP8_E5M2]}


def kv_dtype_bytes(name: str) -> int:
    if name not in KV_DTYPES:
        raise UsageError(f"unknown --kv-dtype {name!r}; choose {', '.join(KV_DTYPES)}")
    return KV_DTYPES[name]


@dataclass(frozen=True)
class LayerKV:
    """One layer's cache on one GPU: bytes per token, and how many tokens it keeps; a
    recurrent layer's state per sequence."""
    layer: int
    bytes_per_token: int
    window: int | None  # keeps at most this many tokens (sliding window or chunk)
    state_bytes: int = 0  # per sequence, whatever its length (a recurrent layer's)


def layer_caches(config: ModelConfig, kv_bytes: int, tp: int, layers: tuple[int, ...]
                 ) -> list[LayerKV]:
    """Each of `layers`' cache on one TP rank."""
    lg = ledger(config)
    v = lg.values(1, 1)
    heads = kv_heads_per_gpu(config.kv_heads, tp) if not config.mla else None
    # Gemma 4's global layers: their own K/V heads (h_kvG), split over TP the same way
    global_heads = kv_heads_per_gpu(config.global_kv, tp) if config.global_shape else None
    groups = dict(lg.groups)
    out = []
    for i in layers:
        per_token, window, state = 0, None, 0
        for e in lg.cache:
            if e.repeat is not None and i not in groups[e.repeat]:
                continue
            n = 1
            for s in e.shape:
                n *= heads if s == "h_kv" and heads is not None else \
                    global_heads if s == "h_kvG" else \
                    v[s] - 1 if s == CONV_WIDTH and e.per_sequence else v[s]
            if e.per_sequence:  # a recurrent layer's state: per sequence, its heads over TP
                state += -(-n // tp) * (4 if e.fp32 else kv_bytes)
                continue
            if e.shape == ("d_model",):  # multi-head attention written as h·d_k = d_model
                n = n // config.kv_heads * heads
            per_token += n * kv_bytes
            if e.window:
                window = config.sliding_window
            elif e.chunk:
                window = config.attention_chunk
        out.append(LayerKV(i, per_token, window, state))
    return out


def blocks_for(tokens: int, block: int, window: int | None) -> int:
    """Blocks one sequence of `tokens` tokens holds on a layer (window: the hybrid
    allocator's ceil(W / block) + 1 at most)."""
    full = -(-tokens // block)
    if window is None:
        return full
    return min(full, -(-window // block) + 1)


def bytes_per_sequence(caches: list[LayerKV], tokens: int, block: int) -> int:
    """Pool bytes a sequence of `tokens` tokens occupies on this GPU, in whole blocks, and
    the recurrent layers' state."""
    return sum(blocks_for(tokens, block, c.window) * block * c.bytes_per_token + c.state_bytes
               for c in caches)


ATTN_BLOCK_ALIGNMENT = 16  # kernel_block_alignment_size (the backends' smallest kernel block)


def hybrid_block(caches: list[LayerKV], block: int) -> int:
    """vLLM's block size for a hybrid of attention and recurrent layers: one page of every
    layer must hold a recurrent layer's whole state, so the attention block grows to
    16 · ceil(state / (16 · attention bytes per token)) tokens (vllm/model_executor/models/
    config.py, HybridAttentionMambaModelConfig.verify_and_update_config; later
    vllm/platforms/interface.py _align_hybrid_block_size, mamba_cache_mode "none": "Setting
    attention block size to %d tokens to ensure that attention page size is >= mamba page
    size"). Qwen3-Next, Nemotron-H and the like get blocks of hundreds to thousands of tokens;
    a model without both kinds keeps `block`."""
    per_token = max((c.bytes_per_token for c in caches), default=0)
    state = max((c.state_bytes for c in caches), default=0)
    if not per_token or not state:
        return block
    a = ATTN_BLOCK_ALIGNMENT
    return max(block, a * -(-state // (a * per_token)))


def pad_states(caches: list[LayerKV], block: int, page_per_token: int) -> list[LayerKV]:
    """Each recurrent layer's state padded to one attention page (block · bytes per token:
    vLLM's mamba_page_size_padded), what it takes of the shared pool."""
    page = block * page_per_token
    return [LayerKV(c.layer, c.bytes_per_token, c.window, max(c.state_bytes, page))
            if c.state_bytes and not c.bytes_per_token else c for c in caches]
