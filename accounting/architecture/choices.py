"""The spec's vocabulary: each choice a field may take (its name and what it means), the
MLP kinds, the layer kinds and the bounds on sizes. ModelConfig (config.py) reads its
choices from these tables, and so do the CLI, the builder and model/ (through config.py,
which re-exports them)."""
from __future__ import annotations

from dataclasses import dataclass

from accounting.runtime.errors import UsageError


def default_d_ff(d_model: int) -> int:
    """8/3·d_model rounded up to a multiple of 64 (CS336 §3.5.2), in integers."""
    if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model <= 0:
        raise UsageError(f"d_model must be a positive integer, got {d_model!r}")
    return -(-8 * d_model // (3 * 64)) * 64


@dataclass(frozen=True)
class MLPKind:
    """A feed-forward network: gated (W2(act(W1 x) * W3 x), three matrices) or plain
    (W2 act(W1 x), two matrices), and its activation."""
    name: str
    gated: bool
    activation: str  # "silu", "gelu_tanh" (tanh approximation) or "gelu" (exact, erf)
    label: str

    def default_d_ff(self, d_model: int) -> int:
        # gated: the 8/3 rule keeps the parameter count of a 4·d plain MLP (CS336 §3.5.2)
        return default_d_ff(d_model) if self.gated else 4 * d_model


MLPS: dict[str, MLPKind] = {m.name: m for m in (
    MLPKind("swiglu", True, "silu", "SwiGLU"),
    MLPKind("geglu", True, "gelu_tanh", "GeGLU (tanh GELU)"),
    # the llama family with hidden_act "gelu": ACT2FN["gelu"] is transformers' GELUActivation,
    # the exact (erf) GELU (activations.py), in LlamaMLP's gate
    MLPKind("geglu_erf", True, "gelu", "GeGLU (exact erf GELU)"),
    MLPKind("gelu", False, "gelu", "GELU MLP (exact erf GELU)"),
    MLPKind("gelu_tanh", False, "gelu_tanh", "GELU MLP (tanh approximation, as GPT-2)"),
    # gpt-oss's experts: clamp(gate, max=7)·sigmoid(1.702·gate) · (clamp(up, ±7) + 1)
    MLPKind("swiglu_clamped", True, "silu_clamped", "clamped SwiGLU (gpt-oss)"),
    # Nemotron-H's MLP: W2 relu(W1 x)² (transformers' ReLUSquaredActivation)
    MLPKind("relu2", False, "relu2", "squared-ReLU MLP (Nemotron-H)"),
    # Apertus's MLP: W2 xIELU(W1 x), xIELU with two learned scalars per layer
    # (transformers' XIELUActivation, activations.py; Huang 2024, arXiv:2411.13010)
    MLPKind("xielu", False, "xielu", "xIELU MLP (Apertus: two learned scalars per layer)"),
)}
# layernorm_nobias: mean-centred LayerNorm with a weight and no bias (transformers'
# CohereLayerNorm, modeling_cohere.py)
NORMS = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm", "layernorm_nobias": "LayerNorm (no bias)"}
NORM_PLACEMENTS = {"pre": "pre-norm (norm on each sublayer's input)",
                   "post": "post-sublayer norm (OLMo-2: norm on each sublayer's output, "
                           "inside the residual)",
                   "sandwich": "sandwich norms (Gemma 2/3: a norm on each sublayer's input "
                               "and another on its output, inside the residual)"}
POSITIONS = {"rope": "RoPE", "learned": "learned absolute positions", "none": "no positions",
             "alibi": "ALiBi (a linear bias per head on the scores; Falcon)"}
QK_NORMS = {"none": "no QK-norm", "head": "QK-norm per head (Qwen3)",
            "full": "QK-norm over the full projection width (OLMo-2)",
            # transformers' Llama4TextL2Norm: x·rsqrt(mean(x²) + eps), no gain
            "l2": "weightless RMS norm of each head's Q and K after RoPE, on RoPE layers (Llama 4)",
            # Cohere's use_qk_norm (CohereAttention: CohereLayerNorm((num_heads, head_dim))):
            # each head's d_k vector normalised, with its own d_k weight per head
            "per_head": "QK-norm per head with a weight per head (Command R+)"}
ATTENTIONS = {"naive": "explicit scores, causal mask and softmax (the course's attention)",
              "sdpa": "fused attention kernel: F.scaled_dot_product_attention(is_causal=True)"}
ROUTERS = {"softmax": "softmax over the experts' scores (Mixtral, Qwen3-MoE)",
           "sigmoid": "a sigmoid per expert's score (DeepSeek-V3)",
           # modeling_phimoe.py sparsemixer (inference form): two rounds, each a max, a
           # mask of the scores beyond 2·eps of it (relative), a masked softmax, the best's
           # weight; the second round with the first expert masked out. Top-2 only.
           "sparsemixer": "SparseMixer (Phi-3.5-MoE): the best expert, then the best of the "
                          "rest, each weighted by a softmax over the scores near its max"}
# how group-limited routing ranks a group of experts (router_groups > 1)
GROUP_SCORES = {"top2_sum": "the sum of its two best scores (DeepSeek-V3)",
                "max": "its best score (DeepSeek-V2's group_limited_greedy)"}
BLOCKS = {"sequential": "attention, then the MLP on its result",
          "parallel": "attention and MLP in parallel on the block input, a norm each "
                      "(GPT-NeoX, Falcon-40B)",
          "parallel_shared_norm": "attention and MLP in parallel on one shared norm of the "
                                  "block input (Falcon-7B)",
          "single": "one sublayer per block, a norm before it: the token mixer, or the MLP "
                    "where layer_types says mlp (Nemotron-H)"}
# full causal attention, a sliding window of the last W keys, or the keys of the query's
# own chunk of C tokens (Llama 4's chunked attention); or a layer that mixes tokens without
# attention, keeping a fixed-size state instead of a KV cache: a gated DeltaNet layer
# (Qwen3-Next's linear_attention, transformers' Qwen3NextGatedDeltaNet) or a short gated
# convolution (LFM2's conv, Lfm2ShortConv) or a Mamba-2 mixer (Nemotron-H's M,
# NemotronHMamba2Mixer); or attention and a Mamba-2 mixer side by side on the same normed
# input, their outputs summed (Falcon-H1's "hybrid" layers, FalconH1DecoderLayer); or a
# Mamba-1 mixer, a selective scan with a state per channel (Jamba's, JambaMambaMixer); or, in
# single-sublayer blocks (block "single", Nemotron-H's "-"),
# a block with its MLP only ("mlp")
ATTENTION_TYPES = ("global", "local", "chunked")
# Kimi Delta Attention (Kimi Linear's KDA layers, KimiLinearDeltaAttention): the gated
# delta rule with a decay per key channel (kda)
MIXER_TYPES = ("linear_attention", "kda", "conv", "mamba", "hybrid", "mamba1")
LAYER_TYPES = ATTENTION_TYPES + MIXER_TYPES + ("mlp",)


@dataclass(frozen=True)
class LayerKind:
    """What one block runs: global, local (sliding-window) or chunked attention, or a
    recurrent token mixer (mixer: "linear_attention", "conv", "mamba"; "hybrid": attention
    and Mamba-2 side by side; "attention" otherwise); a
    dense or MoE MLP; RoPE or none (a NoPE layer, Llama 4); its own K and V or an earlier
    layer's (shared: Gemma 4's KV sharing)."""
    local: bool
    moe: bool
    chunked: bool = False
    nope: bool = False
    mixer: str = "attention"
    shared: bool = False  # K and V another layer's (Gemma 4's num_kv_shared_layers)

    @property
    def recurrent(self) -> bool:
        """A token mixer with a fixed-size state (no attention, no KV cache; a hybrid
        layer's attention beside its Mamba-2 mixer keeps one too)."""
        return self.mixer != "attention"

    @property
    def tag(self) -> str:
        attn = self.mixer if self.recurrent else \
            "local" if self.local else "chunked" if self.chunked else "global"
        return "_".join((attn, "moe" if self.moe else "dense") + (("nope",) if self.nope else ())
                        + (("shared",) if self.shared else ()))

# Bounds on sizes: far beyond any real model, small enough that nothing downstream hangs.
MAX_SIZE = 10**12
MAX_LAYERS = 10**4  # every path answers in well under a second (10^7 took 80 s and 1.5 GB)
MAX_REAL = 10**18  # rope_theta, norm_eps, factors: floats, and ints torch takes (< 2^63)
MAX_NAME = 200  # characters of a config's name (it heads every table)
MAX_CONFIG_BYTES = 2**20  # a config file is a few hundred bytes; a JSON file is read whole
