"""transformers' own expert implementations, run on real CPU tensors at a shrunk size.

The transformers counter (hf_counter.py) counts a mixture-of-experts model on the meta
device with experts_implementation="batched_mm", the one implementation meta can run and
FlopCounterMode can count. transformers' default, grouped_mm, and its "eager" loop over the
experts that got tokens cannot run there (a bfloat16-only meta kernel; nonzero(), which
depends on the data). So the same model_type is shrunk here (SHRINK: two layers, widths of
a few dozen, the config's own experts, top-k and router groups), built on the CPU in float32
with each implementation, and run forward and backward under FlopCounterMode: with its own
router's choice (random weights) and with every token forced to experts 0..k−1 (the most
unbalanced routing). The shrunk config's ledger says what each should count: dropless, the
same B·T·k expert rows whatever the routing. Imports torch and transformers.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from accounting.ledger import records as R

# What is shrunk, per model_type: sizes only (the experts, top-k and routing keys are the
# config's own). One MoE layer (DeepSeek-V3: one dense layer before it, as its
# first_k_dense_replace has).
_WIDTHS = {"hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 4,
           "vocab_size": 64, "num_hidden_layers": 1}
SHRINK: Mapping[str, Mapping[str, object]] = {
    "mixtral": {**_WIDTHS, "num_key_value_heads": 2, "head_dim": 8},
    "qwen3_moe": {**_WIDTHS, "num_key_value_heads": 2, "head_dim": 8,
                  "moe_intermediate_size": 16, "mlp_only_layers": [], "decoder_sparse_step": 1},
    "deepseek_v3": {**_WIDTHS, "num_hidden_layers": 2, "num_key_value_heads": 4,
                    "moe_intermediate_size": 16, "first_k_dense_replace": 1, "kv_lora_rank": 16,
                    "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8},
    # gpt-oss's experts are intermediate_size wide; two layers keep its window alternation
    "gpt_oss": {**_WIDTHS, "intermediate_size": 16, "num_hidden_layers": 2,
                "num_key_value_heads": 2, "head_dim": 8, "sliding_window": 4,
                "layer_types": ["sliding_attention", "full_attention"]},
    # one full-attention layer (its experts and gated shared expert; no DeltaNet layer)
    "qwen3_next": {**_WIDTHS, "num_key_value_heads": 2, "head_dim": 8,
                   "moe_intermediate_size": 16, "shared_expert_intermediate_size": 16,
                   "mlp_only_layers": [], "decoder_sparse_step": 1,
                   "layer_types": ["full_attention"], "linear_num_key_heads": 2,
                   "linear_num_value_heads": 2, "linear_key_head_dim": 8,
                   "linear_value_head_dim": 8},
}
# Qwen3.5-MoE: the same one full-attention layer (no MTP: transformers builds none)
SHRINK["qwen3_5_moe_text"] = {**{k: v for k, v in SHRINK["qwen3_next"].items()
                                 if k not in ("mlp_only_layers", "decoder_sparse_step",
                                              "intermediate_size", "head_dim")},
                              "mtp_num_hidden_layers": 0}  # the config's own head_dim: its
# M-RoPE sections add up to its rotary frequencies (Qwen3.5-35B-A3B: 256 · 0.25 / 2 = 32)
SHRINK["deepseek_v2"] = SHRINK["deepseek_v3"]
# DeepSeek-V3.2: V3's, with a small indexer (3 of the keys per query)
SHRINK["deepseek_v32"] = {**SHRINK["deepseek_v3"], "index_n_heads": 2, "index_head_dim": 8,
                          "index_topk": 3}
# OLMoE: intermediate_size-wide experts, head_dim hidden_size // heads (no head_dim key)
SHRINK["olmoe"] = {**_WIDTHS, "intermediate_size": 16, "num_key_value_heads": 2}
SHRINK["qwen2_moe"] = {**_WIDTHS, "num_key_value_heads": 2, "moe_intermediate_size": 16,
                       "shared_expert_intermediate_size": 32, "mlp_only_layers": [],
                       "decoder_sparse_step": 1}
SHRINK["glm4_moe"] = {**_WIDTHS, "num_hidden_layers": 2, "num_key_value_heads": 2,
                      "head_dim": 8, "moe_intermediate_size": 16, "first_k_dense_replace": 1}
SHRINK["ernie4_5_moe"] = {**_WIDTHS, "num_hidden_layers": 2, "num_key_value_heads": 2,
                          "moe_intermediate_size": 16, "moe_layer_start_index": 1,
                          "moe_layer_end_index": -1, "moe_layer_interval": 1}
SHRINK["minimax_m2"] = {**_WIDTHS, "intermediate_size": 16, "num_key_value_heads": 2,
                        "head_dim": 8, "rotary_dim": 4}  # the same latent attention and layout
# Kimi Linear: DeepSeek-V3's experts beside two latent-attention layers (no KDA layer);
# its token ids default past a shrunk vocabulary (pad_token_id 163839: the embedding refuses)
SHRINK["kimi_linear"] = {**SHRINK["deepseek_v3"], "q_lora_rank": None,
                         "layer_types": ["full_attention"] * 2, "pad_token_id": 0,
                         "bos_token_id": 1, "eos_token_id": 2}
# Jamba: one attention layer with its experts (no Mamba-1 layer)
SHRINK["jamba"] = {**_WIDTHS, "num_key_value_heads": 2, "attn_layer_period": 1,
                   "attn_layer_offset": 0, "expert_layer_period": 1, "expert_layer_offset": 0}
# Gemma 4: one full-attention layer (its own head_dim; the experts beside the MLP, the
# Gemma4TextDecoderLayer holding router and experts, as _force finds them)
SHRINK["gemma4_text"] = {**_WIDTHS, "num_key_value_heads": 2, "head_dim": 8,
                         "global_head_dim": 16, "moe_intermediate_size": 16,
                         "layer_types": ["full_attention"],
                         # one layer: no per-layer embeddings, no KV sharing (E2B/E4B's)
                         "hidden_size_per_layer_input": 0, "num_kv_shared_layers": 0}
# Phi-3.5-MoE: intermediate_size-wide experts, head_dim hidden_size // heads, no RoPE scaling
# (longrope's factor lists are head_dim/2 long: the shrunk heads would not take them)
SHRINK["phimoe"] = {**_WIDTHS, "intermediate_size": 16, "num_key_value_heads": 2,
                    "rope_scaling": None, "rope_parameters": None}
# one expert block (E) of Nemotron-H; one attention layer of Granite 4.0-H with its experts
# and shared MLP (no Mamba-2 layer: the experts are what is checked here)
SHRINK["nemotron_h"] = {"hidden_size": 32, "vocab_size": 64, "moe_intermediate_size": 16,
                        "moe_shared_expert_intermediate_size": 24, "num_hidden_layers": 1,
                        "hybrid_override_pattern": "E", "layers_block_type": None}
SHRINK["granitemoehybrid"] = {**_WIDTHS, "intermediate_size": 16, "shared_intermediate_size": 24,
                              "num_key_value_heads": 2, "layer_types": ["attention"]}
IMPLEMENTATIONS = ("eager", "grouped_mm", "batched_mm")
OWN, FORCED = "its router's choice", "every token to experts 0..k−1"


@dataclass(frozen=True)
class Run:
    implementation: str
    routing: str
    forward: int  # FlopCounterMode's total, this pass
    backward: int


@dataclass(frozen=True)
class ExpertsCheck:
    shrunk: str  # the shrunk sizes, in words
    seq: int
    batch: int
    ledger: tuple[int, int]  # the shrunk config's matmul FLOPs: forward, backward
    experts: tuple[int, int]  # of which the routed experts' matmuls
    runs: tuple[Run, ...]
    seconds: float = field(compare=False)


def shrink(data: Mapping) -> dict:
    """The config.json object at the shrunk size, in float32 (a vision-language file's
    language model, its text_config, shrunk as a file of the text type)."""
    from accounting.architecture.hf_config import TYPES
    t = TYPES.get(data["model_type"])
    if t is not None and t.nested:
        inner = shrink({**data[t.nested], "model_type": f"{t.model_type}_text"})
        outer = {k: v for k, v in data.items() if k not in ("dtype", "torch_dtype")}
        return {**outer, t.nested: inner, "torch_dtype": "float32"}
    small = {k: v for k, v in data.items() if k != "dtype"}
    small.update(SHRINK[data["model_type"]])
    if "q_lora_rank" in small and small["q_lora_rank"] is not None:
        small["q_lora_rank"] = 16
    small["torch_dtype"] = "float32"
    # nn.Embedding refuses a padding index beyond the shrunk vocabulary (gpt-oss's 199,999)
    small["pad_token_id"] = None
    return small


def _force(model, k: int) -> list:
    """Hooks that replace each router's chosen experts by 0..k−1 after it ran."""
    handles = []
    for module in model.modules():
        # the router: mlp.gate, or gpt-oss's mlp.router; each returns (logits, weights, indices)
        router = getattr(module, "gate", None) or getattr(module, "router", None)
        if hasattr(module, "experts") and router is not None:
            def hook(_, __, out):
                logits, weights, indices = out
                return logits, weights, torch.arange(k).expand_as(indices).contiguous()
            handles.append(router.register_forward_hook(hook))
    return handles


def _run(data: Mapping, implementation: str, routing: str, ids: torch.Tensor, k: int) -> Run:
    from accounting.crosscheck.hf_counter import build
    torch.manual_seed(0)
    model = build(data, device="cpu", experts=implementation)
    handles = _force(model, k) if routing == FORCED else []
    try:
        with FlopCounterMode(display=False) as fcm:
            logits = model(input_ids=ids, use_cache=False).logits
            forward = fcm.get_total_flops()
            F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1)).backward()
            backward = fcm.get_total_flops() - forward
    finally:
        for h in handles:
            h.remove()
    return Run(implementation, routing, forward, backward)


def check(data: Mapping, seq: int = 4, batch: int = 2) -> ExpertsCheck:
    """Each implementation (eager with two routings, grouped_mm, batched_mm) of the shrunk
    model_type, against the shrunk config's ledger."""
    from accounting.analysis.workload import analyze
    from accounting.architecture.hf_config import translate
    start = time.perf_counter()
    small = shrink(data)
    config = translate(small, "the shrunk config.json", "shrunk").config
    a = analyze(config, seq, batch, R.TRAIN)
    total = {p: 0 for p in (R.FORWARD, R.BACKWARD)}
    experts = dict(total)
    for r in a.matmul_rows:
        total[r.record.phase] += r.flops
        if r.record.module.endswith("experts"):  # the routed experts' matmuls
            experts[r.record.phase] += r.flops
    ids = torch.randint(0, config.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(0))
    runs = [_run(small, "eager", routing, ids, config.experts_per_token) for routing in (OWN, FORCED)]
    runs += [_run(small, impl, OWN, ids, config.experts_per_token) for impl in IMPLEMENTATIONS[1:]]
    L = config.num_layers
    shown = (f"{L} layer{'s' if L != 1 else ''} ({sum(k.moe for k in config.layer_kinds)} MoE), "
             f"d_model {config.d_model}, expert width {config.expert_d_ff}, the config's "
             f"{config.num_experts} experts and top-{config.experts_per_token}"
             + (f", {config.router_groups} groups (top {config.router_topk_groups})"
                if config.router_groups > 1 else ""))
    return ExpertsCheck(shown, seq, batch, (total[R.FORWARD], total[R.BACKWARD]),
                        (experts[R.FORWARD], experts[R.BACKWARD]), tuple(runs),
                        time.perf_counter() - start)
