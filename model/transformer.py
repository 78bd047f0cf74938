"""Pre-norm Transformer block and the full decoder-only LM (section 3.6)."""

import torch
from torch import nn

from .attention import CausalMultiHeadSelfAttention
from .layers import Embedding, Linear, RMSNorm, SwiGLU, check_positive_int


class TransformerBlock(nn.Module):
    """y = x + MHA(RMSNorm(x)); z = y + FFN(RMSNorm(y)) (eq. 15 and figure 2).

    Norms sit on the sublayer inputs, leaving an un-normalized residual stream.
    """

    def __init__(self, d_model, num_heads, d_ff, max_seq_len, theta, device=None, dtype=None):
        super().__init__()
        self.ln1 = RMSNorm(d_model, device=device, dtype=dtype)
        self.attn = CausalMultiHeadSelfAttention(
            d_model, num_heads, max_seq_len=max_seq_len, theta=theta, device=device, dtype=dtype
        )
        self.ln2 = RMSNorm(d_model, device=device, dtype=dtype)
        self.ffn = SwiGLU(d_model, d_ff, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, token_positions: torch.Tensor | None = None) -> torch.Tensor:
        # x: (batch seq d_model) -> (batch seq d_model)
        y = x + self.attn(self.ln1(x), token_positions)
        z = y + self.ffn(self.ln2(y))
        return z


class TransformerLM(nn.Module):
    """Embedding -> num_layers pre-norm blocks -> final RMSNorm -> untied LM head (figure 1)."""

    def __init__(
        self,
        vocab_size,
        context_length,
        d_model,
        num_layers,
        num_heads,
        d_ff,
        rope_theta=10000.0,
        device=None,
        dtype=None,
    ):
        super().__init__()
        check_positive_int("vocab_size", vocab_size)
        check_positive_int("context_length", context_length)
        check_positive_int("num_layers", num_layers)
        self.vocab_size, self.context_length = vocab_size, context_length
        self.token_embeddings = Embedding(vocab_size, d_model, device=device, dtype=dtype)
        self.layers = nn.ModuleList(
            TransformerBlock(d_model, num_heads, d_ff, context_length, rope_theta, device=device, dtype=dtype)
            for _ in range(num_layers)
        )
        self.ln_final = RMSNorm(d_model, device=device, dtype=dtype)
        self.lm_head = Linear(d_model, vocab_size, device=device, dtype=dtype)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        # token_ids: (batch seq) int -> logits: (batch seq vocab), unnormalized
        seq = token_ids.shape[-1]
        if seq > self.context_length:
            raise ValueError(
                f"sequence length {seq} exceeds context_length {self.context_length}; "
                f"build the model with context_length >= {seq}"
            )
        x = self.token_embeddings(token_ids)  # (batch seq d_model)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.ln_final(x))
