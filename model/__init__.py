"""From-scratch pre-norm decoder-only Transformer LM (CS336 assignment 1, chapter 3).

Written with torch tensor ops and einops only.
"""

from .attention import CausalMultiHeadSelfAttention, scaled_dot_product_attention, softmax
from .layers import (
    MLP,
    Embedding,
    GatedMLP,
    LayerNorm,
    Linear,
    RMSNorm,
    RotaryPositionalEmbedding,
    SwiGLU,
    default_d_ff,
    gelu,
    gelu_tanh,
    silu,
)
from .transformer import TransformerBlock, TransformerLM

__all__ = [
    "Linear",
    "Embedding",
    "RMSNorm",
    "silu",
    "gelu",
    "gelu_tanh",
    "LayerNorm",
    "GatedMLP",
    "MLP",
    "default_d_ff",
    "SwiGLU",
    "RotaryPositionalEmbedding",
    "softmax",
    "scaled_dot_product_attention",
    "CausalMultiHeadSelfAttention",
    "TransformerBlock",
    "TransformerLM",
]
