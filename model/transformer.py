"""Pre-norm Transformer block and the full decoder-only LM (section 3.6).

The course's model is the default of every keyword-only argument; the others build the
architectures of accounting/spec/config.py's spec (TransformerLM.from_config).
"""

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from accounting.spec.config import MLPS

from .attention import CausalMultiHeadSelfAttention
from .latent_attention import LatentAttention
from .layers import NORM_CLASSES, Embedding, Linear, check_positive_int, feed_forward
from .moe import MoE

MLA_OPTIONS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


class TransformerBlock(nn.Module):
    """y = x + MHA(RMSNorm(x)); z = y + FFN(RMSNorm(y)) (eq. 15 and figure 2).

    Norms sit on the sublayer inputs, leaving an un-normalized residual stream.
    norm_placement="post" is OLMo-2's: y = x + ln1(MHA(x)); z = y + ln2(FFN(y)).
    """

    def __init__(self, d_model, num_heads, d_ff, max_seq_len, theta, device=None, dtype=None, *,
                 num_kv_heads=None, head_dim=None, norm="rmsnorm", norm_eps=1e-5,
                 norm_placement="pre", mlp="swiglu", qkv_bias=False, out_bias=False,
                 mlp_bias=False, qk_norm="none", attention="naive", window=None, moe=None,
                 q_lora_rank=None, kv_lora_rank=None, qk_nope_head_dim=None,
                 qk_rope_head_dim=None, v_head_dim=None):
        super().__init__()
        if norm not in NORM_CLASSES:
            raise ValueError(f"norm must be one of {', '.join(NORM_CLASSES)}, got {norm!r}")
        if norm_placement not in ("pre", "post"):
            raise ValueError(f"norm_placement must be pre or post, got {norm_placement!r}")
        self.post_norm = norm_placement == "post"
        norm_cls = NORM_CLASSES[norm]
        self.ln1 = norm_cls(d_model, eps=norm_eps, device=device, dtype=dtype)
        if kv_lora_rank is not None:  # multi-head latent attention (DeepSeek)
            self.attn = LatentAttention(
                d_model, num_heads, max_seq_len=max_seq_len, theta=theta, device=device,
                dtype=dtype, q_lora_rank=q_lora_rank, kv_lora_rank=kv_lora_rank,
                qk_nope_head_dim=qk_nope_head_dim, qk_rope_head_dim=qk_rope_head_dim,
                v_head_dim=v_head_dim, qkv_bias=qkv_bias, out_bias=out_bias, norm=norm,
                norm_eps=norm_eps, attention=attention, window=window)
        else:
            self.attn = CausalMultiHeadSelfAttention(
                d_model, num_heads, max_seq_len=max_seq_len, theta=theta, device=device, dtype=dtype,
                num_kv_heads=num_kv_heads, head_dim=head_dim, qkv_bias=qkv_bias, out_bias=out_bias,
                qk_norm=qk_norm, norm=norm, norm_eps=norm_eps, attention=attention, window=window,
            )
        self.ln2 = norm_cls(d_model, eps=norm_eps, device=device, dtype=dtype)
        if moe is not None:  # a mixture of experts: moe holds MoE's options
            self.ffn = MoE(d_model, device=device, dtype=dtype,
                           activation=MLPS[mlp].activation, **moe)
        else:
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
        sliding_window=None,
        layer_types=None,
        dense_layers=(),
        num_experts=None,
        experts_per_token=2,
        moe_d_ff=None,
        num_shared_experts=0,
        router="softmax",
        router_groups=1,
        router_topk_groups=1,
        router_bias=False,
        norm_topk_prob=True,
        routed_scaling_factor=1.0,
        moe_capacity_factor=None,
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
        moe = None if num_experts is None else dict(
            num_experts=num_experts, experts_per_token=experts_per_token,
            d_ff=d_ff if moe_d_ff is None else moe_d_ff, num_shared_experts=num_shared_experts,
            router=router, router_groups=router_groups, router_topk_groups=router_topk_groups,
            router_bias=router_bias, norm_topk_prob=norm_topk_prob,
            routed_scaling_factor=routed_scaling_factor, capacity_factor=moe_capacity_factor)
        types = layer_types or (("local" if sliding_window else "global"),) * num_layers
        self.layers = nn.ModuleList(
            TransformerBlock(d_model, num_heads, d_ff, context_length, theta, device=device, dtype=dtype,
                             window=sliding_window if types[i] == "local" else None,
                             moe=None if i in dense_layers else moe, **block_options)
            for i in range(num_layers)
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
            layer.attn.recompute_core = mode == "selective"  # both attention kinds have it
        return self

    @classmethod
    def from_config(cls, config, context_length=None, device=None, dtype=None):
        """The model of an accounting.spec.config.ModelConfig (its spec: which operations run).
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
