"""Issue 41's rows of transformers 5.23.0 (hf_schema.py's table): arcee (AFM-4.5B: the llama
layout with a plain MLP), apertus (Apertus: QK-norm and a xIELU MLP) and mamba2
(Mamba-Codestral: Mamba-2 blocks only); registered on
import (hf_config.py imports this module). Defaults and rules from transformers 5.23.0's
models/<type>/configuration_<type>.py and modeling_<type>.py.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from accounting.runtime.errors import UsageError
from accounting.architecture.hf_schema import (
    ATTENTION_BIAS, ATTENTION_DROPOUT, BOOL, CHOICE, EPS, INT, INT_OR_ABSENT, LIST, LLAMA_FAMILY,
    LLAMA_NAMES, PLAIN_ACTS, ROPE_MUST, THETA, Derived, HFType, Key, ModuleNames, Required, head_dim,
    kv_heads, llama_sizes, register, short)

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


# ---- apertus (swiss-ai/Apertus-8B, -70B): llama's layout with QK-norm and a xIELU MLP ----------
# ApertusConfig (configuration_apertus.py: class defaults Apertus-8B's sizes, rope_parameters
# llama3 with rope_theta 12,000,000 when absent) and modeling_apertus.py: ApertusAttention
# (q/k/v/o_proj, bias with attention_bias; q_norm and k_norm, RMSNorm of head_dim),
# ApertusMLP (up_proj, down_proj, no bias; act_fn XIELUActivation: alpha_p and alpha_n
# parameters, beta and eps buffers), ApertusDecoderLayer (attention_layernorm,
# feedforward_layernorm: pre-norm RMSNorm).
APERTUS_NAMES = ModuleNames(LLAMA_NAMES.blocks, MappingProxyType({
    **{k: v for k, v in LLAMA_NAMES.block.items() if k not in ("ffn.w1", "ffn.w3")},
    "ln1": "attention_layernorm", "ln2": "feedforward_layernorm",
    "ffn.w1": "mlp.up_proj", "ffn.act_fn": "mlp.act_fn"}), LLAMA_NAMES.top)

register(HFType(
    "apertus", "ApertusForCausalLM",
    keys=llama_sizes(131072, 4096, 14336, 32, 32, 65536) + (
        kv_heads(),  # ApertusConfig: None -> num_attention_heads
        # ApertusAttention: getattr(config, "head_dim", hidden // heads): null fails there
        head_dim(None, INT_OR_ABSENT),
        ATTENTION_BIAS,
        Key("hidden_act", ("mlp",), CHOICE, "xielu", MappingProxyType({"xielu": "xielu"})),
        Key("rms_norm_eps", ("norm_eps",), EPS, 1e-5),
        Key("tie_word_embeddings", ("tie_embeddings",), BOOL, False),
        Key("rope_theta", ("rope_theta",), THETA, 12000000.0,
            aliases=("rope_parameters.rope_theta", "rope_scaling.rope_theta"))),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, qk_norm="head")),
    rules="the llama layout with RMSNorm of each head's Q and K (q_norm, k_norm) and a plain "
          "MLP of two matrices, down_proj(xIELU(up_proj(x))), xIELU with two learned scalars "
          "per layer (ApertusMLP, XIELUActivation; modeling_apertus.py, activations.py)",
    names=APERTUS_NAMES, must=ROPE_MUST, noted=(ATTENTION_DROPOUT,),
))


# ---- mamba2 (Mamba-Codestral-7B, state-spaces/mamba2-*): every block Mamba-2 -----------------
# Mamba2Config (configuration_mamba2.py) and Mamba2ForCausalLM (modeling_mamba2.py):
# Mamba2Block is x + Mamba2Mixer(Mamba2RMSNorm(x)), the residual kept in fp32 where
# residual_in_fp32 (a cast, no count); Mamba2Mixer is Nemotron-H's mixer (in_proj to z, x·B·C
# and dt; conv1d over x·B·C and SiLU; mamba2_chunk_scan with dt clamped to time_step_limit;
# MambaRMSNormGated over n_groups; out_proj) with intermediate_size = expand·hidden_size,
# which validate_architecture requires to equal num_heads·head_dim; no attention, no MLP, no
# positions: backbone.embeddings, backbone.norm_f, lm_head.
def _mamba2_layers(v: Mapping, where: str):
    """Every layer Mamba-2 (Mamba2Config.layer_types: a property, "linear_attention" for all);
    the mixer's width expand·hidden_size must be num_heads·head_dim (validate_architecture);
    dt is clamped to time_step_limit: its lower end is the spec's mamba_dt_min, an upper end
    short of infinity another clamp the spec does not hold."""
    L, d, expand = v["num_hidden_layers"], v["hidden_size"], v["expand"]
    heads, dim = v["num_heads"], v["head_dim"]
    if isinstance(expand, bool) or not isinstance(expand, (int, float)) or expand <= 0 \
            or int(expand * d) != heads * dim:
        raise UsageError(f"{where}: expand·hidden_size ({short(expand)}·{d}) must equal "
                         f"num_heads·head_dim ({heads}·{dim}): transformers' Mamba2Config "
                         f"refuses the file otherwise")
    limit = v["time_step_limit"]
    if (not isinstance(limit, (list, tuple)) or len(limit) != 2
            or any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in limit)
            or not 0 <= limit[0] or limit[1] != float("inf")):
        raise UsageError(f"{where}: time_step_limit must be [min, Infinity] with min ≥ 0 "
                         f"(the spec clamps dt from below only), got {short(limit)}")
    return {"layer_types": ("mamba",) * L, "mamba_dt_min": float(limit[0])}, (
        f"{L} Mamba-2 blocks, no attention and no MLP (Mamba2Block).",)


MAMBA2_NAMES = ModuleNames(
    blocks="backbone.layers",
    block=MappingProxyType({
        "ln1": "norm", "mixer": "mixer", "mixer.conv1d": "mixer.conv1d",
        "mixer.in_proj": "mixer.in_proj", "mixer.norm": "mixer.norm",
        "mixer.out_proj": "mixer.out_proj"}),
    top=MappingProxyType({"token_embeddings": "backbone.embeddings",
                          "ln_final": "backbone.norm_f", "lm_head": "lm_head"}),
)

register(HFType(
    "mamba2", "Mamba2ForCausalLM",
    # Mamba2Config's class defaults are Mamba-Codestral-7B's sizes
    keys=(Key("vocab_size", ("vocab_size",), INT, Required(32768)),
          Key("hidden_size", ("d_model",), INT, Required(4096)),
          Key("num_hidden_layers", ("num_layers",), INT, Required(64)),
          # the mixer's heads; the spec's num_heads (attention's, unused here) set alike
          Key("num_heads", ("mamba_heads", "num_heads"), INT, Required(128)),
          Key("head_dim", ("mamba_head_dim",), INT, Required(64)),
          Key("state_size", ("ssm_state",), INT, Required(128)),
          Key("n_groups", ("mamba_groups",), INT, 8),
          Key("conv_kernel", ("conv_kernel",), INT, 4),
          Key("chunk_size", ("mamba_chunk",), INT, 256),
          Key("use_conv_bias", ("conv_bias",), BOOL, True),
          Key("use_bias", ("mamba_bias",), BOOL, False),  # in_proj and out_proj
          Key("expand", (), THETA, 2),
          Key("time_step_limit", (), LIST, [0.0, float("inf")]),
          Key("hidden_act", (), CHOICE, "silu", MappingProxyType({"silu": "silu"})),
          Key("layer_norm_epsilon", ("norm_eps",), EPS, 1e-5),
          Key("tie_word_embeddings", ("tie_embeddings",), BOOL, False)),
    # no position limit: the plan's default length (context_length) is 4,096 tokens
    fixed=MappingProxyType(dict(norm="rmsnorm", norm_placement="pre", positions="none",
                                block="single", qk_norm="none", context_length=4096)),
    rules="blocks of one sublayer each, x + mixer(norm(x)) (Mamba2Block): the Mamba-2 mixer "
          "(Mamba2Mixer: in_proj to z, x·B·C, dt; conv1d and SiLU; the chunked SSD scan; a "
          "grouped gated RMSNorm; out_proj) of expand·hidden_size = num_heads·head_dim; no "
          "attention, no MLP, no positions (the plan's default length 4,096); final norm_f "
          "(modeling_mamba2.py)",
    names=MAMBA2_NAMES,
    # the SSM's initialisation (time_step_min/max/floor, time_step_rank: read only by
    # _init_weights), its fp32 residual (a cast), rescale_prenorm_residual (init only);
    # rms_norm (Mamba-Codestral's file: true): mamba_ssm's switch, no transformers module reads
    # it (grep), Mamba2Mixer builds its gated norm always
    free=frozenset({"time_step_min", "time_step_max", "time_step_floor", "time_step_rank",
                    "residual_in_fp32", "rescale_prenorm_residual", "rms_norm"}),
    derived=(Derived(("layer_types", "mamba_dt_min"),
                     ("num_hidden_layers", "hidden_size", "expand", "num_heads", "head_dim",
                      "time_step_limit"), _mamba2_layers,
                     "every layer Mamba-2 (Mamba2Config.layer_types); expand·hidden_size = "
                     "num_heads·head_dim; dt clamped from time_step_limit's lower end"),),
))
