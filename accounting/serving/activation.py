"""The activation peak vLLM's profile run measures (torch_peak_increase), estimated per GPU.

The profile run (vllm/v1/worker/gpu_model_runner.py, GPUModelRunner.profile_run) runs the
model once on max_num_batched_tokens tokens (N), spread over min(max_num_seqs, N) dummy
requests, then the sampler on those requests' last positions. What is live at its peak, in
the activation dtype (2 bytes), on one TP rank (an estimate: kernels' workspaces are not
counted; --activation-peak replaces it):
  forward  3·N·d_model (the residual, the layer input and its norm) plus the larger of
           the MLP's: N·3·d_ff/tp (gate-up output and the activated product, vLLM's
           MergedColumnParallelLinear + SiluAndMul), a MoE layer's N·k·3·d_e/tp (fused_moe's
           intermediate caches) plus its router logits N·E·4 and shared experts;
           and the attention's: N·(q + k + v)/tp plus its output N·h·d_v/tp;
  sampler  R = min(max_num_seqs, N) rows of V logits and the model's output N·d_model. The
           V1 dummy sampler (gpu_model_runner.py _dummy_sampler_run) samples with
           temperature 0.5, top_p 0.9 and top_k V − 1, so the PyTorch top-k/top-p path
           (v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p) sorts every row: live at its
           peak are the bf16 logits (2 bytes an entry), their fp32 copy (4), the sorted values
           (4) and int64 indices (8) and the radix sort's second buffer of both (12): 30 bytes
           an entry, the high end. FlashInfer's sampling kernels, where vLLM takes them, sort
           nothing: the bf16 and fp32 logits, the probabilities and the exponential draws
           (2 + 4 + 4 + 4 = 14), the low end.
The peak is the larger of the two. Checked against vLLM's printed "PyTorch activation peak
memory" (tests/test_serving_pool.py: Llama-3.1-8B at 20,000 and 29,000 tokens, 2.07 and 2.99
GiB in vllm issue #10517).
"""
from __future__ import annotations

from accounting.architecture.config import ModelConfig
from accounting.units import BF16, DTYPE_BYTES, FP32
from accounting.serving.shards import kv_heads_per_gpu

ACT_BYTES = DTYPE_BYTES[BF16]  # bf16/fp16 activations
# bytes per row and vocabulary entry live in the dummy sampler: (FlashInfer, the sort path)
LOGIT_BYTES_LOW = ACT_BYTES + 3 * DTYPE_BYTES[FP32]
LOGIT_BYTES_HIGH = ACT_BYTES + DTYPE_BYTES[FP32] + 2 * (DTYPE_BYTES[FP32] + 8)


def forward_peak(c: ModelConfig, tokens: int, tp: int) -> int:
    n, d = tokens, c.d_model
    hidden = 3 * n * d
    mlps = []
    if c.num_experts is None or c.dense_layers:
        mlps.append(n * 3 * c.d_ff // tp)
    if c.num_experts is not None:
        m = 3 if c.mlp_kind.gated else 2  # squared-ReLU experts (Nemotron-H): up, relu²
        shared = n * m * c.shared_expert_d_ff // tp if c.num_shared_experts else 0
        mlps.append(n * c.experts_per_token * m * c.expert_d_ff // tp + shared
                    + n * c.num_experts * DTYPE_BYTES[FP32] // ACT_BYTES)
    if c.mla:
        attn = n * c.num_heads // tp * (c.d_k + c.v_head_dim + c.d_k)
    else:
        kv = kv_heads_per_gpu(c.kv_heads, tp)
        attn = n * (c.num_heads // tp * c.d_k * 2 + 2 * kv * c.d_k)
    return (hidden + max(mlps + [attn])) * ACT_BYTES


def sampler_peak(c: ModelConfig, tokens: int, max_num_seqs: int, high: bool = True) -> int:
    rows = min(max_num_seqs, tokens)
    per_entry = LOGIT_BYTES_HIGH if high else LOGIT_BYTES_LOW
    return rows * c.vocab_size * per_entry + tokens * c.d_model * ACT_BYTES


def activation_peak(c: ModelConfig, tokens: int, max_num_seqs: int, tp: int,
                    high: bool = True) -> int:
    return max(forward_peak(c, tokens, tp), sampler_peak(c, tokens, max_num_seqs, high))
