"""Pre-norm Transformer block and the full decoder-only LM (section 3.6).

The course's model is the default of every keyword-only argument; the others build the
architectures of accounting/config.py's spec (TransformerLM.from_config).
"""

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from .attention import CausalMultiHeadSelfAttention
from .layers import NORM_CLASSES, Embedding, Linear, check_positive_int, feed_forward


class TransformerBlock(nn.Module):
    """y = x + MHA(RMSNorm(x)); z = y + FFN(RMSNorm(y)) (eq. 15 and figure 2).

    Norms sit on the sublayer inputs, leaving an un-normalized residual stream.
    norm_placement="post" is OLMo-2's: y = x + ln1(MHA(x)); z = y + ln2(FFN(y)).
    """

    def __init__(self, d_model, num_heads, d_ff, max_seq_len, theta, device=None, dtype=None, *,
                 num_kv_heads=None, head_dim=None, norm="rmsnorm", norm_eps=1e-5,
                 norm_placement="pre", mlp="swiglu", qkv_bias=False, out_bias=False,
                 mlp_bias=False, qk_norm="none", attention="naive"):
        super().__init__()
        if norm not in NORM_CLASSES:
            raise ValueError(f"norm must be one of {', '.join(NORM_CLASSES)}, got {norm!r}")
        if norm_placement not in ("pre", "post"):
            raise ValueError(f"norm_placement must be pre or post, got {norm_placement!r}")
        self.post_norm = norm_placement == "post"
        norm_cls = NORM_CLASSES[norm]
        self.ln1 = norm_cls(d_model, eps=norm_eps, device=device, dtype=dtype)
        self.attn = CausalMultiHeadSelfAttention(
            d_model, num_heads, max_seq_len=max_seq_len, theta=theta, device=device, dtype=dtype,
            num_kv_heads=num_kv_heads, head_dim=head_dim, qkv_bias=qkv_bias, out_bias=out_bias,
            qk_norm=qk_norm, norm=norm, norm_eps=norm_eps, attention=attention,
        )
        self.ln2 = norm_cls(d_model, eps=norm_eps, device=device, dtype=dtype)
        self.ffn = feed_forward(mlp, d_model, d_ff, device=device, dtype=dtype, bias=mlp_bias)

    def forward(self, x: torch.Tensor, token_positions: torch.Tensor | None = None) -> torch.Tensor:
        # x: (batch seq d_model) -> (batch seq d_model)
        if self.post_norm:
            y = x + self.ln1(self.attn(x, token_positions))
            return y + self.ln2(self.ffn(y))
        y = x + self.attn(self.ln1(x), token_positions)
        z = y + self.ffn(self.ln2(y))
        return z


class TransformerLM(nn.Module):
    """Embedding -> num_layers pre-norm blocks -> final RMSNorm -> untied LM head (figure 1).

    positions="learned" adds a learned table of context_length positions (GPT-2) instead
    of RoPE ("none": neither); tie_embeddings=True makes the LM head read the token
    embedding table (one parameter, registered under both names in the state dict).
    """

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
        *,
        positions="rope",
        tie_embeddings=False,
        **block_options,
    ):
        super().__init__()
        check_positive_int("vocab_size", vocab_size)
        check_positive_int("context_length", context_length)
        check_positive_int("num_layers", num_layers)
        if positions not in ("rope", "learned", "none"):
            raise ValueError(f"positions must be rope, learned or none, got {positions!r}")
        self.vocab_size, self.context_length = vocab_size, context_length
        self.token_embeddings = Embedding(vocab_size, d_model, device=device, dtype=dtype)
        if positions == "learned":
            self.position_embeddings = Embedding(context_length, d_model, device=device, dtype=dtype)
        theta = rope_theta if positions == "rope" else None
        self.layers = nn.ModuleList(
            TransformerBlock(d_model, num_heads, d_ff, context_length, theta, device=device, dtype=dtype,
                             **block_options)
            for _ in range(num_layers)
        )
        norm = block_options.get("norm", "rmsnorm")
        self.ln_final = NORM_CLASSES[norm](d_model, eps=block_options.get("norm_eps", 1e-5),
                                           device=device, dtype=dtype)
        self.lm_head = Linear(d_model, vocab_size, device=device, dtype=dtype)
        if tie_embeddings:
            self.lm_head.weight = self.token_embeddings.weight
        self.recompute = "none"

    def set_recompute(self, mode: str) -> "TransformerLM":
        """Activation recomputation for training (torch.utils.checkpoint, non-reentrant, no
        RNG state: the model has no dropout): "full" checkpoints each block (keeps its input,
        runs it again in backward), "selective" only each attention core (Korthikanti et al.
        2022), "none" keeps everything (the default)."""
        if mode not in ("none", "full", "selective"):
            raise ValueError(f"recompute must be none, full or selective, got {mode!r}")
        self.recompute = mode
        for layer in self.layers:
            layer.attn.recompute_core = mode == "selective"
        return self

    @classmethod
    def from_config(cls, config, context_length=None, device=None, dtype=None):
        """The model of an accounting.config.ModelConfig (its spec: which operations run).
        context_length overrides the config's (a longer RoPE table, for T > context_length)."""
        kwargs = config.model_kwargs()
        if context_length is not None:
            kwargs["context_length"] = context_length
        return cls(**kwargs, device=device, dtype=dtype)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        # token_ids: (batch seq) int -> logits: (batch seq vocab), unnormalized
        seq = token_ids.shape[-1]
        if seq > self.context_length:
            raise ValueError(
                f"sequence length {seq} exceeds context_length {self.context_length}; "
                f"build the model with context_length >= {seq}"
            )
        x = self.token_embeddings(token_ids)  # (batch seq d_model)
        if hasattr(self, "position_embeddings"):
            x = x + self.position_embeddings(torch.arange(seq, device=token_ids.device))
        for layer in self.layers:
            if self.recompute == "full":
                x = checkpoint(layer, x, use_reentrant=False, preserve_rng_state=False)
            else:
                x = layer(x)
        return self.lm_head(self.ln_final(x))
