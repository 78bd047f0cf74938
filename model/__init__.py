"""From-scratch pre-norm decoder-only Transformer LM (CS336 assignment 1, chapter 3).

Written with torch tensor ops and einops only.
"""

from .attention import CausalMultiHeadSelfAttention, scaled_dot_product_attention, softmax
from .layers import (
    Embedding,
    Linear,
    RMSNorm,
    RotaryPositionalEmbedding,
    SwiGLU,
    default_d_ff,
    silu,
)
from .transformer import TransformerBlock, TransformerLM

__all__ = [
    "Linear",
    "Embedding",
    "RMSNorm",
    "silu",
    "default_d_ff",
    "SwiGLU",
    "RotaryPositionalEmbedding",
    "softmax",
    "scaled_dot_product_attention",
    "CausalMultiHeadSelfAttention",
    "TransformerBlock",
    "TransformerLM",
]
