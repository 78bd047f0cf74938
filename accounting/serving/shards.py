"""Weights per GPU under tensor and pipeline parallelism, as vLLM lays a model out, in the
bytes a weight scheme stores (accounting/formats/).

vLLM's tensor-parallel layout (vllm/model_executor/layers/linear.py, vocab_parallel_embedding.py,
fused_moe/layer.py), module by module of the ledger:
  column-parallel (the output split over TP): q_proj, q_b_proj, kv_b_proj, the MLP's gate and
      up projections (w1, w3), the shared experts' and, in FusedMoE, each routed expert's
      (its intermediate width d_e split: intermediate_size_per_partition);
  K and V (QKVParallelLinear): the KV heads split over TP while TP ≤ h_kv; past that each GPU
      keeps one KV head, replicated TP / h_kv times (num_kv_head_replicas);
  row-parallel (the input split): o_proj, down projections (w2);
  vocab-parallel: the token embedding and the LM head, the vocabulary padded to a multiple of
      64 (DEFAULT_VOCAB_PADDING_SIZE) and split over TP;
  replicated: norms, q_a_proj and kv_a_proj (ReplicatedLinear in models/deepseek_v2.py), the
      router (ReplicatedLinear), learned positions, a row-parallel layer's bias.
  Attention sinks (one per head) split with the heads.
Pipeline stages (vllm/distributed/utils.py, get_pp_indices): L // pp layers each, the
remainder one more to each stage before the last; the embedding on the first stage, the final
norm and LM head on the last (a tied head becomes its own copy there when pp > 1).
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from accounting.formats.schemes import EXPERTS, Scheme
from accounting.ledger.ledger import ledger
from accounting.ledger.symbols import product
from accounting.runtime.errors import UsageError
from accounting.architecture.config import ModelConfig

COL, ROW, KV, VOCAB, REP, HEADS = "column", "row", "kv", "vocab", "replicated", "heads"
VOCAB_PADDING = 64  # vLLM's DEFAULT_VOCAB_PADDING_SIZE
TP_LAYOUT = {
    "attn.q_proj": COL, "attn.q_b_proj": COL, "attn.kv_b_proj": COL,
    "attn.k_proj": KV, "attn.v_proj": KV,
    "attn.output_proj": ROW, "attn.q_a_proj": REP, "attn.kv_a_proj": REP,
    "ffn.w1": COL, "ffn.w3": COL, "ffn.w2": ROW,
    "ffn.shared.w1": COL, "ffn.shared.w3": COL, "ffn.shared.w2": ROW,
    "ffn.router": REP, "token_embeddings": VOCAB, "lm_head": VOCAB,
}
UNQUANTIZED_MODULES = ("token_embeddings", "lm_head", "ffn.router")  # schemes.py's rule
# transformers' names of the ledger's modules where a type gives none (ignore lists name them)
DEFAULT_HF = {"attn.q_proj": "self_attn.q_proj", "attn.k_proj": "self_attn.k_proj",
              "attn.v_proj": "self_attn.v_proj", "attn.output_proj": "self_attn.o_proj",
              "attn.q_a_proj": "self_attn.q_a_proj", "attn.q_b_proj": "self_attn.q_b_proj",
              "attn.kv_a_proj": "self_attn.kv_a_proj_with_mqa",
              "attn.kv_b_proj": "self_attn.kv_b_proj", "ffn.w1": "mlp.gate_proj",
              "ffn.w3": "mlp.up_proj", "ffn.w2": "mlp.down_proj", "ffn.router": "mlp.gate",
              "ffn.experts": "mlp.experts", "ffn.shared.w1": "mlp.shared_experts.gate_proj",
              "ffn.shared.w3": "mlp.shared_experts.up_proj",
              "ffn.shared.w2": "mlp.shared_experts.down_proj", "token_embeddings":
              "model.embed_tokens", "lm_head": "lm_head", "ln_final": "model.norm"}


@dataclass(frozen=True)
class Stage:
    """One pipeline stage's GPU (every TP rank of it holds the same bytes)."""
    index: int
    layers: tuple[int, ...]
    bytes: int  # weights as stored, per GPU
    by_part: tuple[tuple[str, int], ...]  # (what, bytes): quantized matrices, scales, dense
    quantized_bytes: int  # of the matrices the scheme covers (their packed data and scales)
    dense_bytes: int  # every tensor left in the model dtype
    expert_bytes: int = 0  # the routed experts' share (a decode step reads those it routes to)
    lookup_bytes: int = 0  # tables only looked up (a decode step reads B rows of them)


def pp_layers(num_layers: int, pp: int) -> list[tuple[int, ...]]:
    """vLLM's get_pp_indices: L // pp each, the remainder to the stages before the last."""
    if pp > num_layers:
        raise UsageError(f"--pp {pp} is more than the {num_layers} layers; choose at most "
                         f"{num_layers}")
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    out, start = [], 0
    for n in sizes:
        out.append(tuple(range(start, start + n)))
        start += n
    return out


def _divide(n: int, tp: int, what: str) -> int:
    if n % tp:
        raise UsageError(f"--tp {tp} does not divide the {n:,} {what}; choose a TP that "
                         f"divides it")
    return n // tp


def kv_heads_per_gpu(h_kv: int, tp: int) -> int:
    """QKVParallelLinear: h_kv / tp while tp ≤ h_kv, else one head, replicated tp / h_kv times."""
    if tp <= h_kv:
        return _divide(h_kv, tp, "KV heads")
    if tp % h_kv:
        raise UsageError(f"--tp {tp} is neither a divisor nor a multiple of the {h_kv} KV heads; "
                         f"choose one (vLLM replicates a KV head over tp / h_kv GPUs)")
    return 1


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    """A checkpoint's ignore list: 're:REGEX' (compressed-tensors, re.match), a glob with '*'
    (gpt-oss' modules_to_not_convert), else a substring of the module's name (transformers'
    modules_to_not_convert rule: any(key in name ...))."""
    for pat in patterns:
        if pat.startswith("re:"):
            if re.match(pat[3:], name):
                return True
        elif "*" in pat:
            if fnmatch.fnmatch(name, pat) or fnmatch.fnmatch(name, pat + ".*"):
                return True
        elif pat in name:
            return True
    return False


def _hf_name(module: str, layer: int | None, names) -> str:
    if names is not None:
        table = names.block if layer is not None else names.top
        hf = table.get(module) or DEFAULT_HF.get(module, module)
        return f"{names.blocks}.{layer}.{hf}" if layer is not None else hf
    hf = DEFAULT_HF.get(module, module)
    return f"model.layers.{layer}.{hf}" if layer is not None else hf


def _local(p, v: dict, tp: int, c: ModelConfig) -> tuple[int, int, int, int, bool]:
    """(matrices, out per GPU, in per GPU, in whole, is a matrix) of a parameter on one TP rank
    (a non-matrix: matrices 1, out = its elements per GPU, in 1)."""
    shape = p.shape
    expert = p.routed_expert
    count = v[shape[0]] if expert else 1
    dims = shape[1:] if expert else shape
    module, leaf = p.module, p.name.rsplit(".", 1)[-1]
    kind = TP_LAYOUT.get(module)
    if expert:
        kind = ROW if leaf.startswith("w2") or "down" in leaf else COL
        if p.name.endswith("_bias") or len(dims) == 1:  # an expert bias (E, out)
            kind = COL if kind == COL else REP
    if module in ("attn.q_proj", "attn.q_b_proj", "attn.output_proj", "attn.kv_b_proj"):
        _divide(c.num_heads, tp, "query heads")
    if module == "attn.sinks" or leaf == "sinks":
        kind = HEADS
    is_matrix = p.matmul_weight and not p.lookup and leaf != "bias" and len(dims) >= 2 \
        and not p.name.endswith("bias")
    if not is_matrix and kind != VOCAB:  # a bias, norm, sink or table
        n = product(dims, v)
        if kind in (COL, HEADS):
            n = _divide(n, tp, f"elements of {p.name}")
        elif kind == KV:  # (Gemma 4's global layers: h_kvG heads)
            hk = c.global_kv if "h_kvG" in dims else c.kv_heads
            n = n // hk * kv_heads_per_gpu(hk, tp)
        elif kind == ROW and dims[0] != shape[-1]:
            pass
        return count, n, 1, 1, False
    if kind == VOCAB:
        V = v["V"]
        padded = -(-V // VOCAB_PADDING) * VOCAB_PADDING
        rows = _divide(padded, tp, "padded vocabulary rows")
        return 1, rows, product(dims[1:], v), product(dims[1:], v), is_matrix
    # a Linear weight: (out..., in); o_proj's in is (h, d_v) when 3-D
    in_dims = dims[1:] if module == "attn.output_proj" and len(dims) == 3 else dims[-1:]
    out_dims = dims[:len(dims) - len(in_dims)]
    out, inp = product(out_dims, v), product(in_dims, v)
    if kind == COL:
        out = _divide(out, tp, f"output rows of {p.name} ({'×'.join(out_dims)})")
    elif kind == KV:
        hk = c.global_kv if "h_kvG" in dims else c.kv_heads
        out = out // hk * kv_heads_per_gpu(hk, tp)
    elif kind == ROW:
        return count, out, _divide(inp, tp, f"input columns of {p.name}"), inp, True
    return count, out, inp, inp, True


def stages(config: ModelConfig, scheme: Scheme, model_bytes: int, tp: int, pp: int,
           names=None) -> list[Stage]:
    """Each pipeline stage's weight bytes per GPU (`model_bytes`: the unquantized tensors'
    element size, the checkpoint's dtype)."""
    lg = ledger(config)
    v = lg.values(1, 1)
    layer_sets = pp_layers(config.num_layers, pp)
    groups = dict(lg.groups)
    out = []
    for s, layers in enumerate(layer_sets):
        first, last = s == 0, s == pp - 1
        parts: dict[str, int] = {}
        quantized = dense = experts = lookups = 0
        for p in lg.params:
            if p.repeat is None:
                on = (first if p.module in ("token_embeddings", "position_embeddings")
                      else last)
                if p.module == "token_embeddings" and config.tie_embeddings and pp > 1 and last:
                    on = True  # the last stage's own LM head copy of the tied table
                where = [None] if on else []
            else:
                where = [i for i in groups[p.repeat] if i in layers]
            if not where:
                continue
            count, o, i, i_whole, matrix = _local(p, v, tp, config)
            for layer in where:
                hf = _hf_name(p.module, layer, names)
                quantize = (matrix and not scheme.dense
                            and p.module not in UNQUANTIZED_MODULES
                            and (scheme.covers != EXPERTS or p.routed_expert)
                            and not _matches(hf, scheme.ignore))
                if quantize:
                    tensors = scheme.tensors(o, i, scale_in=i_whole if i != i_whole else None)
                    b = count * sum(tensors.values())
                    quantized += b
                    for name, n in tensors.items():
                        key = "quantized " + name
                        parts[key] = parts.get(key, 0) + count * n
                else:
                    b = count * o * i * model_bytes
                    dense += b
                    key = "model dtype: " + ("matrices" if matrix else "norms, biases, tables")
                    parts[key] = parts.get(key, 0) + b
                experts += b if p.routed_expert else 0
                lookups += b if p.lookup and not p.matmul_weight else 0
        out.append(Stage(s, layers, quantized + dense, tuple(sorted(parts.items())),
                         quantized, dense, experts, lookups))
    return out
