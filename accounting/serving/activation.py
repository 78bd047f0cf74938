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
  sampler  R·V·8 (fp32 logits and probabilities of R = min(max_num_seqs, N) rows) plus the
           model's output N·d_model.
The peak is the larger of the two. Checked against vLLM's printed "PyTorch activation peak
memory" (tests/test_serving_pool.py: Llama-3.1-8B at 20,000 and 29,000 tokens, 2.07 and 2.99
GiB in vllm issue #10517).
"""
from __future__ import annotations

from accounting.architecture.config import ModelConfig
from accounting.units import BF16, DTYPE_BYTES, FP32
from accounting.serving.shards import kv_heads_per_gpu

ACT_BYTES = DTYPE_BYTES[BF16]  # bf16/fp16 activations
LOGIT_BYTES = 2 * DTYPE_BYTES[FP32]  # fp32 logits and fp32 probabilities per row and entry


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


def sampler_peak(c: ModelConfig, tokens: int, max_num_seqs: int) -> int:
    rows = min(max_num_seqs, tokens)
    return rows * c.vocab_size * LOGIT_BYTES + tokens * c.d_model * ACT_BYTES


def activation_peak(c: ModelConfig, tokens: int, max_num_seqs: int, tp: int) -> int:
    return max(forward_peak(c, tokens, tp), sampler_peak(c, tokens, max_num_seqs))
