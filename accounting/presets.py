"""Presets, looked up by exact name: GPT-2's four shapes on the CS336 architecture (the
course's question), and real checkpoints under their Hugging Face ids. Each row's
parameter count is in its comment; tests/test_presets.py derives each by hand algebra
and cites the published figure beside it.
"""
from __future__ import annotations

import difflib

from accounting.config import ModelConfig
from accounting.errors import UsageError


def _cs336(name: str, num_layers: int, d_model: int, num_heads: int) -> ModelConfig:
    """GPT-2's shape (Radford et al. 2019) on the CS336 architecture: SwiGLU with three
    d_model×4·d_model matrices, RMSNorm, RoPE, untied head, no biases."""
    return ModelConfig(vocab_size=50257, context_length=1024, num_layers=num_layers,
                       d_model=d_model, num_heads=num_heads, d_ff=4 * d_model, name=name)


def _gpt2(name: str, num_layers: int, d_model: int, num_heads: int) -> ModelConfig:
    """OpenAI's GPT-2 (openai-community/gpt2* config.json): pre-norm LayerNorm with bias,
    GELU-tanh MLP of width 4·d_model, biases on every linear, 1,024 learned positions,
    LM head tied to the token embedding."""
    return ModelConfig(vocab_size=50257, context_length=1024, num_layers=num_layers,
                       d_model=d_model, num_heads=num_heads, d_ff=4 * d_model, name=name,
                       norm="layernorm", mlp="gelu_tanh", positions="learned",
                       tie_embeddings=True, qkv_bias=True, out_bias=True, mlp_bias=True)


def _llama(name: str, num_layers: int, d_model: int, num_heads: int, num_kv_heads: int,
           d_ff: int, tie: bool) -> ModelConfig:
    """Meta's Llama 3 (meta-llama/* config.json): vocab 128,256, 131,072 positions,
    rope_theta 500,000 (rope_scaling changes no count), grouped-query attention."""
    return ModelConfig(vocab_size=128256, context_length=131072, num_layers=num_layers,
                       d_model=d_model, num_heads=num_heads, d_ff=d_ff, rope_theta=500000.0,
                       name=name, num_kv_heads=num_kv_heads, tie_embeddings=tie)


def _table() -> dict[str, ModelConfig]:
    return {c.name: c for c in (
        # CS336 architecture at GPT-2's shapes (the course's GPT-2 XL question)
        _cs336("gpt2-small", 12, 768, 12),     # 190,460,160 parameters
        _cs336("gpt2-medium", 24, 1024, 16),   # 505,629,696
        _cs336("gpt2-large", 36, 1280, 20),    # 1,072,469,760
        _cs336("gpt2-xl", 48, 1600, 25),       # 2,127,057,600
        # OpenAI GPT-2 as released
        _gpt2("openai-community/gpt2", 12, 768, 12),          # 124,439,808
        _gpt2("openai-community/gpt2-medium", 24, 1024, 16),  # 354,823,168
        _gpt2("openai-community/gpt2-large", 36, 1280, 20),   # 774,030,080
        _gpt2("openai-community/gpt2-xl", 48, 1600, 25),      # 1,557,611,200
        # Meta Llama 3
        _llama("meta-llama/Llama-3.2-1B", 16, 2048, 32, 8, 8192, tie=True),    # 1,235,814,400
        _llama("meta-llama/Llama-3.1-8B", 32, 4096, 32, 8, 14336, tie=False),  # 8,030,261,248
    )}


# What each preset is, for output headers and --list.
NOTES = {
    "gpt2-small": "GPT-2 small's shape on the CS336 architecture",
    "gpt2-medium": "GPT-2 medium's shape on the CS336 architecture",
    "gpt2-large": "GPT-2 large's shape on the CS336 architecture",
    "gpt2-xl": "GPT-2 XL's shape on the CS336 architecture",
    "openai-community/gpt2": "OpenAI GPT-2 small (124M) as released",
    "openai-community/gpt2-medium": "OpenAI GPT-2 medium (355M) as released",
    "openai-community/gpt2-large": "OpenAI GPT-2 large (774M) as released",
    "openai-community/gpt2-xl": "OpenAI GPT-2 XL (1.5B) as released",
    "meta-llama/Llama-3.2-1B": "Meta Llama 3.2 1B",
    "meta-llama/Llama-3.1-8B": "Meta Llama 3.1 8B",
}


PRESETS: dict[str, ModelConfig] = _table()


def get_preset(name: str) -> ModelConfig:
    """Exact-name lookup; an unknown name suggests the closest presets, never guesses."""
    try:
        return PRESETS[name]
    except KeyError:
        near = difflib.get_close_matches(name[:200], list(PRESETS), n=3, cutoff=0.0)
        shown = name if len(name) <= 40 else name[:39] + "…"
        raise UsageError(f"unknown model {shown!r}; closest presets: {', '.join(near)} "
                         f"(see --list, or give sizes with --config FILE or "
                         f"--num-layers/--d-model/...)") from None


def note(config: ModelConfig) -> str:
    """What a config is: its preset's note, or 'custom' (or 'modified <preset>')."""
    if config.name in NOTES:
        return NOTES[config.name]
    base = config.name.removesuffix(" (modified)")
    if base in NOTES:
        return f"modified from {NOTES[base]}"
    return "custom config"
