"""The names and symbols every builder module shares: non-matmul components in table order, and the
spec's sizes as symbols (Arch)."""
from __future__ import annotations

from accounting.architecture.config import NORMS, ModelConfig


# Non-matmul components, in the order the tables list them.
QK_NORM = "QK-norm"
POSITION_ADD = "position add"
ROPE = "RoPE"
ALIBI = "ALiBi bias"
TEMPERATURE = "temperature tuning"
ATTN_SCALE = "scale by 1/√d_k"
CAUSAL_MASK = "causal mask"
SOFTMAX = "softmax"
OUTPUT_GATE = "attention output gate"  # Qwen3-Next: sigmoid(W_g x) · the merged heads
INDEXER = "sparse-attention indexer"  # DeepSeek-V3.2: its scale, ReLU, mask and top-k
BIAS = "bias adds"
RESIDUAL = "residual adds"
ROUTER = "MoE routing"
# Gemma 2/3 and Granite's scalars (spec: embedding_multiplier, residual_multiplier,
# attn_softcap/final_softcap, logit_scale)
EMBED_SCALE = "embedding multiplier"
SOFTCAP = "tanh soft-capping"
RESIDUAL_SCALE = "residual multiplier"
LOGIT_SCALE = "logit scale"
PER_LAYER = "per-layer embeddings"  # Gemma 4's PLE: scales, the gate's product, the sum
MUP = "muP multipliers"  # Falcon-H1's (spec: mup_multipliers), scalars and one per-channel vector
# the recurrent layers' non-matmul work (issue 31; accounting/ledger/builder/recurrent.py)
SHORT_CONV = "short convolution gating"
SSD = "state-space scan"  # Mamba-2: dt, decays, segment sums, the SSD's elementwise terms
DELTA_RULE = "gated delta rule"  # β, g, SiLU of the conv, L2 norms, decays, the scan's adds
GATED_NORM = "gated RMSNorm"  # the gated DeltaNet's output norm, x·rsqrt·w·SiLU(z)
DROPOUT = "dropout"  # transformers' nn.Dropout in training (builder/dropout.py)
ACTIVATION_COMPONENT = {"swiglu": "SiLU and gating", "geglu": "GELU (tanh) and gating",
                        "geglu_erf": "GELU (erf) and gating", "gelu": "GELU (erf)",
                        "gelu_tanh": "GELU (tanh)", "swiglu_clamped": "clamped SwiGLU and gating",
                        "xielu": "xIELU",
                        "relu2": "squared ReLU"}
ELEMENTWISE_ORDER = (*NORMS.values(), QK_NORM, EMBED_SCALE, POSITION_ADD, ROPE, ALIBI,
                     TEMPERATURE, ATTN_SCALE, SOFTCAP, CAUSAL_MASK, SOFTMAX, OUTPUT_GATE, INDEXER, *dict.fromkeys(ACTIVATION_COMPONENT.values()),
                     SHORT_CONV, DELTA_RULE, SSD, GATED_NORM, ROUTER, BIAS, MUP, PER_LAYER, RESIDUAL_SCALE, DROPOUT, RESIDUAL,
                     LOGIT_SCALE)
NORM_PARAMS = {"rmsnorm": "RMSNorm gains", "layernorm": "LayerNorm weights and biases",
               "layernorm_nobias": "LayerNorm weights (no bias)"}

ROW = ("B", "T", "d_model")
COURSE, TRANSFORMERS = "course", "transformers"  # the implementations the builder mirrors
# Megatron-Core with Transformer Engine (builder/megatron.py): the `--stack megatron` plans'
# implementation, its fused modules' saved tensors (not a single-GPU --implementation)
MEGATRON = "megatron"
# torchtitan's own Llama (builder: torch's fused rms_norm, complex RoPE, repeat_kv, F.silu,
# the loss in fp32): the `--stack torchtitan` plans' implementation for dense Llama blocks
TORCHTITAN = "torchtitan"
# llm-foundry's MPT (llmfoundry/models/mpt/modeling_mpt.py, layers/blocks.py MPTBlock, as
# its pretraining yamls run it): low-precision LayerNorm (F.layer_norm on the bf16 input),
# nn.GELU in one op, a fused flash/triton attention kernel, no dropout (builder/megatron.py)
LLMFOUNDRY = "llm-foundry"
# torchtune's own Llama (torchtune/models/llama3_1/_component_builders.py, 0.6.1): its ops
# planned as transformers' Llama's (the RMSNorm in float32 then cast back, F.silu, SDPA);
# what differs is its LoRA (adapters in the model's dtype) and NF4 (torchao's NF4Tensor),
# planning/finetune.py
TORCHTUNE = "torchtune"
DROPOUT_MASK = "dropout mask"  # the label every dropout's saved 1-byte mask ends with


def gemma3_layout(c: ModelConfig) -> bool:
    """Gemma 3's text layout as transformers runs it (Gemma3ForCausalLM): sandwich norms with
    (1 + w) gains, GeGLU, per-head QK-norm, no attention soft-cap (Gemma 2 has one and no
    QK-norm; Gemma 4 has its own head shapes and scalars)."""
    return (c.norm_placement == "sandwich" and c.norm_offset and c.mlp == "geglu"
            and c.qk_norm == "head" and c.attn_softcap is None and not c.global_shape
            and not c.layer_scalar and not c.v_norm)


def gemma4_layout(c: ModelConfig) -> bool:
    """Gemma 4's text layout as transformers runs it (Gemma4ForCausalLM, builder/
    hf_gemma4.py): sandwich norms with plain gains (Gemma4RMSNorm: no 1 + w), GeGLU,
    per-head QK-norm and the weightless v_norm, layer_scalar, no attention soft-cap, RoPE
    per layer type; a dense MLP, or the MLP beside the experts (26B-A4B); per-layer
    embeddings and KV sharing (E2B/E4B)."""
    return (c.norm_placement == "sandwich" and not c.norm_offset and c.mlp == "geglu"
            and c.norm == "rmsnorm" and c.qk_norm == "head" and c.v_norm and c.layer_scalar
            and c.attn_softcap is None and c.positions == "rope" and c.block == "sequential"
            and not c.mla and (c.num_experts is None or c.mlp_beside_moe)
            and not c.num_shared_experts)


def gemma2_layout(c: ModelConfig) -> bool:
    """Gemma 2's layout as transformers runs it (Gemma2ForCausalLM): Gemma 3's sandwich
    norms, (1 + w) gains, GeGLU and scaled embedding, no QK-norm, the attention soft-cap
    (which keeps transformers on its eager attention), one RoPE for every layer."""
    return (c.norm_placement == "sandwich" and c.norm_offset and c.mlp == "geglu"
            and c.qk_norm == "none" and c.attn_softcap is not None and not c.global_shape
            and not c.layer_scalar and not c.v_norm and c.num_experts is None
            and c.positions == "rope" and c.block == "sequential")


def deepseek_v3_layout(c: ModelConfig, indexer: bool = False) -> bool:
    """DeepSeek-V3's layout as transformers runs it (DeepseekV3ForCausalLM): latent
    attention (DeepseekV3Attention, builder/hf_latent.py), the sigmoid router with its
    correction bias and group top-k by each group's two best (DeepseekV3TopkRouter), SwiGLU
    experts, shared experts beside them; no sparse-attention indexer, unless `indexer`:
    then DeepSeek-V3.2's (DeepseekV32ForCausalLM: V3's layers, the lightning indexer in
    every attention, its top-k folded into SDPA's mask; a query latent always)."""
    return (c.mla and c.num_experts is not None and c.router == "sigmoid" and c.router_bias
            and c.router_group_score == "top2_sum"
            and (c.index_topk is None or indexer and c.q_lora_rank is not None)
            and c.mlp == "swiglu" and c.norm == "rmsnorm" and c.norm_placement == "pre"
            and c.positions == "rope" and c.qk_norm == "none")


def deepseek_v2_layout(c: ModelConfig) -> bool:
    """DeepSeek-V2's layout as transformers runs it (DeepseekV2ForCausalLM): V3's latent
    attention with a complex RoPE (freqs_cis), the softmax router (greedy, or limited to the
    groups with the best single scores), SwiGLU experts, shared experts; its router does
    not renormalise (norm_topk_prob is not read)."""
    return (c.mla and c.num_experts is not None and c.router == "softmax" and not c.router_bias
            and (c.router_groups == 1 or c.router_group_score == "max")
            and not c.norm_topk_prob and c.index_topk is None and c.mlp == "swiglu"
            and c.norm == "rmsnorm" and c.norm_placement == "pre" and c.positions == "rope"
            and c.qk_norm == "none")


def llama4_layout(c: ModelConfig) -> bool:
    """Llama 4's text layout as transformers runs it (Llama4ForCausalLM): RoPE as complex
    products (freqs_cis), the weightless L2 QK-norm on RoPE layers, NoPE layers with
    temperature tuning, chunked layers, and Llama4TextMoe: a top-k-then-sigmoid router whose
    scores scale every expert's copy of the tokens (all E experts run), a shared expert."""
    return (c.router_scales_input and c.router == "sigmoid" and c.router_topk_first
            and c.mlp == "swiglu" and not c.mla and c.norm == "rmsnorm"
            and c.norm_placement == "pre" and c.positions == "rope" and c.block == "sequential"
            and c.qk_norm in ("l2", "none") and not c.expert_bias)


def gpt_oss_layout(c: ModelConfig) -> bool:
    """gpt-oss's layout as transformers runs it (GptOssForCausalLM, modeling_gpt_oss.py):
    attention sinks, pre-norm RMSNorm, RoPE, the clamped SwiGLU experts with biases behind a
    biased router that takes the top k logits before its softmax, no shared expert."""
    return (c.attention_sinks and c.mlp == "swiglu_clamped" and c.num_experts is not None
            and c.router_topk_first and c.expert_bias and not c.num_shared_experts
            and c.norm == "rmsnorm" and c.norm_placement == "pre" and c.positions == "rope"
            and c.block == "sequential" and not c.mla and c.qk_norm == "none"
            and c.router == "softmax" and not c.dense_layers)


def gpt2_layout(c: ModelConfig) -> bool:
    """GPT-2's layout as transformers runs it (GPT2LMHeadModel, modeling_gpt2.py): learned
    positions, pre-norm nn.LayerNorm with bias, one fused c_attn (Conv1D) for Q, K and V,
    multi-head attention, a plain GELU MLP (gelu_new: NewGELUActivation's tanh form), a
    bias on every Conv1D, no window (GPT2Attention has none)."""
    return (c.positions == "learned" and c.norm == "layernorm" and c.norm_placement == "pre"
            and c.mlp in ("gelu_tanh", "gelu") and c.block == "sequential"
            and c.num_experts is None and c.kv_heads == c.num_heads and c.qk_norm == "none"
            and not c.mla and c.qkv_bias and c.out_bias and c.mlp_bias
            and c.sliding_window is None and c.layer_types is None)


def nemotron_h_layout(c: ModelConfig) -> bool:
    """Nemotron-H's layout as transformers runs it (NemotronHForCausalLM,
    modeling_nemotron_h.py): blocks of one sublayer (x + mixer(norm(x))), each Mamba-2
    (NemotronHMamba2Mixer, its torch path: builder/hf_mamba.py), attention without RoPE or
    a squared-ReLU MLP; NemotronHRMSNorm; no experts (NemotronHMoE is not measured)."""
    return (c.block == "single" and c.mlp == "relu2" and c.positions == "none"
            and c.norm == "rmsnorm" and c.norm_placement == "pre" and not c.norm_offset
            and c.num_experts is None and c.qk_norm == "none" and not c.mup_multipliers
            and not c.mamba_gate_only and c.mamba_heads is not None
            and {k.mixer for k in c.layer_kinds} <= {"mamba", "attention", "mlp"})


def qwen3_next_layout(c: ModelConfig) -> bool:
    """Qwen3-Next's and Qwen3.5's text layout as transformers runs it (Qwen3NextForCausalLM,
    Qwen3_5ForCausalLM): (1 + w) RMSNorms in float32 (Qwen3NextRMSNorm), gated attention
    whose q_proj gives the query and the gate side by side, per-head QK-norm, partial
    rotary, gated DeltaNet layers (builder/hf_delta.py)."""
    return (c.attn_output_gate and c.norm_offset and c.norm == "rmsnorm"
            and c.norm_placement == "pre" and c.qk_norm == "head" and c.positions == "rope"
            and c.block == "sequential" and not c.mla)


def cohere_layout(c: ModelConfig) -> bool:
    """Cohere's and Cohere 2's layout as transformers runs it (CohereForCausalLM,
    Cohere2ForCausalLM): one CohereLayerNorm (no bias) feeding attention and MLP side by
    side, RoPE (Cohere 2: sliding layers with it, NoPE global ones), the logits scaled."""
    return (c.norm == "layernorm_nobias" and c.block == "parallel_shared_norm"
            and c.positions == "rope" and c.qk_norm in ("none", "per_head")
            and c.num_experts is None)


class Arch:
    """The symbols the spec's sizes are written in, shared by every module below."""

    def __init__(self, c: ModelConfig, fold: bool = True, implementation: str = COURSE,
                 dropout: bool = False):
        self.c = c
        # whose ops: model/ as written (COURSE), transformers' modeling code (TRANSFORMERS)
        # or Megatron-Core + TE's fused modules (MEGATRON; `dropout`: its dropouts on)
        self.hf = implementation in (TRANSFORMERS, TORCHTUNE)
        self.megatron = implementation == MEGATRON
        self.titan = implementation == TORCHTITAN
        self.foundry = implementation == LLMFOUNDRY
        self.dropout = dropout and self.megatron
        self.freqs = None  # Megatron: the fp32 RoPE frequencies, computed once per pass
        self.rope_tables = None  # transformers: (cos, sin), computed once per forward
        # Gemma 4: each kind's producer K and V (KV sharing), the per-layer inputs (PLE)
        self.shared_kv: dict = {}
        self.held_kv: dict = {}  # transformers, --recompute full: the dict's pair, kept
        self.ple = None
        # h·d_k is written d_model (fold=False keeps the heads dimension visible: tensor
        # parallelism splits exactly the tensors that have one)
        self.fold = fold and c.num_heads * c.d_k == c.d_model
        self.gqa = c.kv_heads != c.num_heads

    def shape(self, local: bool = True) -> tuple[str, str, str, bool]:
        """A layer's head symbols (d_k, h_kv, g) and whether it groups its K/V heads: a
        global layer of a config with a global head shape of its own (Gemma 4) writes
        d_kG, h_kvG, g_G."""
        c = self.c
        if local or not c.global_shape:
            return "d_k", "h_kv", "g", self.gqa
        return "d_kG", "h_kvG", "g_G", c.global_kv != c.num_heads

    def width(self, kv: bool = False, shape=None) -> tuple[str, ...]:
        """The Q (or K/V) projection's output width."""
        dk, hkv, _, gqa = shape or self.shape()
        if kv and gqa:
            return (hkv, dk)
        return ("d_model",) if self.fold and dk == "d_k" else ("h", dk)

    def heads(self, kv: bool = False, shape=None) -> tuple[str, ...]:
        """A per-head tensor: (B, heads, T, d_k)."""
        dk, hkv, _, gqa = shape or self.shape()
        return ("B", hkv if kv and gqa else "h", "T", dk)
