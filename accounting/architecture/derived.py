"""The spec's derived sizes (a mixin of ModelConfig, accounting/architecture/config.py): each
a size the fields decide together, computed in one place for the builder, model/ and the
checks.

Gemma 4's small variants (transformers 5.23.0, models/gemma4/modeling_gemma4.py) add two:
- per-layer embeddings (Gemma4TextModel: embed_tokens_per_layer, a table of
  vocab_size_per_layer_input rows × num_hidden_layers·hidden_size_per_layer_input, and
  per_layer_model_projection of d_model → the same width): `ple_width`, `ple_vocab`;
- KV sharing (Gemma4TextConfig.kv_sharing_modes): the last num_kv_shared_layers layers
  ("reuse") read K and V that the last earlier layer of their kind ("store") computed, so
  they hold no k_proj, v_proj, k_norm, v_norm and no cache of their own.
"""
from __future__ import annotations

from accounting.architecture.choices import MLPS, MLPKind


class DerivedSizes:
    """Properties over ModelConfig's fields (no fields of its own)."""

    @property
    def kv_heads(self) -> int:
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def d_k(self) -> int:
        """Head dimension; d_v = d_k (CS336 §3.5.5: d_model/h unless head_dim is given; with
        latent attention, qk_nope_head_dim + qk_rope_head_dim)."""
        if self.kv_lora_rank is not None:
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.d_model // self.num_heads if self.head_dim is None else self.head_dim

    @property
    def global_d_k(self) -> int:
        """The global layers' head dimension (Gemma 4's global_head_dim; else d_k)."""
        return self.d_k if self.global_head_dim is None else self.global_head_dim

    @property
    def global_kv(self) -> int:
        return self.kv_heads if self.global_kv_heads is None else self.global_kv_heads

    @property
    def global_shape(self) -> bool:
        """Global layers with a head shape of their own (symbols d_kG, h_kvG, g_G)."""
        return self.global_head_dim is not None or self.global_kv_heads is not None \
            or self.global_k_eq_v

    @property
    def group_size(self) -> int:
        """Query heads per key/value head."""
        return self.num_heads // self.kv_heads

    @property
    def mlp_kind(self) -> MLPKind:
        return MLPS[self.mlp]

    @property
    def mla(self) -> bool:
        """Multi-head latent attention (kv_lora_rank set)."""
        return self.kv_lora_rank is not None

    @property
    def expert_d_ff(self) -> int:
        return self.d_ff if self.moe_d_ff is None else self.moe_d_ff

    @property
    def shared_expert_d_ff(self) -> int:
        """The shared experts' inner width (symbol d_s): shared_d_ff, else n·expert_d_ff."""
        return self.num_shared_experts * self.expert_d_ff if self.shared_d_ff is None \
            else self.shared_d_ff


    @property
    def ple_vocab(self) -> int:
        """Rows of the per-layer embedding table (vocab_size_per_layer_input; else V)."""
        return self.vocab_size if self.per_layer_vocab is None else self.per_layer_vocab

    @property
    def first_shared_layer(self) -> int:
        """The first layer that reuses another's K and V (num_layers: none does)."""
        return self.num_layers - self.kv_shared_layers
