"""Dense model_types with a plain (ungated) MLP of the llama layout (hf_schema.py's rows):
Arcee (AFM-4.5B); registered on import (hf_config.py imports this module). Defaults and rules
from transformers 5.23.0's models/arcee/configuration_arcee.py (ArceeConfig) and
modeling_arcee.py.
"""
from __future__ import annotations

from types import MappingProxyType

from accounting.spec.hf_schema import (
    ATTENTION_BIAS, ATTENTION_DROPOUT, BOOL, CHOICE, EPS, LLAMA_FAMILY, LLAMA_NAMES, PLAIN_ACTS,
    ROPE_MUST, THETA, HFType, Key, ModuleNames, head_dim, kv_heads, llama_sizes, register)

# ArceeMLP: down_proj(act_fn(up_proj(x))), two matrices (no gate_proj): the spec's plain
# MLPs, relu2 (ACT2FN["relu2"], ReLUSquaredActivation: relu(x)²) its default
ARCEE_ACTS = MappingProxyType({**PLAIN_ACTS, "relu2": "relu2"})
ARCEE_NAMES = ModuleNames(LLAMA_NAMES.blocks, MappingProxyType({
    **{k: v for k, v in LLAMA_NAMES.block.items() if k not in ("ffn.w1", "ffn.w3")},
    "ffn.w1": "mlp.up_proj"}), LLAMA_NAMES.top)

register(HFType(
    "arcee", "ArceeForCausalLM",
    # ArceeConfig's class defaults are AFM-4.5B-Base's sizes (32000, 2560, 18432, 32, 32, 4096)
    keys=llama_sizes(32000, 2560, 18432, 32, 32, 4096) + (
        kv_heads(),  # ArceeConfig.__post_init__: None -> num_attention_heads
        head_dim(),  # ArceeConfig.__post_init__: None -> hidden_size // num_attention_heads
        ATTENTION_BIAS,  # q/k/v/o_proj: bias=config.attention_bias (ArceeAttention)
        Key("mlp_bias", ("mlp_bias",), BOOL, False),  # up_proj, down_proj alike
        Key("hidden_act", ("mlp",), CHOICE, "relu2", ARCEE_ACTS),
        Key("rms_norm_eps", ("norm_eps",), EPS, 1e-5),
        Key("tie_word_embeddings", ("tie_embeddings",), BOOL, False),
        # ArceeConfig sets no default_theta: PreTrainedConfig's 10,000
        Key("rope_theta", ("rope_theta",), THETA, 10000.0,
            aliases=("rope_parameters.rope_theta", "rope_scaling.rope_theta"))),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, qk_norm="none")),
    rules="the llama layout with a plain MLP of two matrices, down_proj(act(up_proj(x))), "
          "squared ReLU by default (ArceeMLP, modeling_arcee.py)",
    names=ARCEE_NAMES, must=ROPE_MUST, noted=(ATTENTION_DROPOUT,),
    divides=(("num_attention_heads", "hidden_size"),),  # ArceeConfig.validate_architecture
))
