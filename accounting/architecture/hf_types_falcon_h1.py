"""Falcon-H1 (model_type falcon_h1; issue 31): a parallel hybrid. Every layer runs a Mamba-2
mixer and grouped attention side by side on the same normed input and sums them, then a
SwiGLU MLP; muP multipliers scale the embeddings, the attention's input, K and output, the
mixer's input, in_proj's output (per channel: mup_vector) and output, the MLP's gate and
output, and the logits. Registered on import (hf_config.py imports this module). Defaults
and rules from transformers 5.23.0's configuration_falcon_h1.py and modeling_falcon_h1.py.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from accounting.runtime.errors import UsageError
from accounting.architecture.hf_schema import (
    ATTENTION_DROPOUT, BOOL, CHOICE, EPS, INT, INT_OR_ABSENT, INT_OR_NULL, LIST, LLAMA_FAMILY,
    ROPE_MUST, THETA, WINDOW_PATTERN, Derived, HFType, Key, ModuleNames, Required, head_dim,
    kv_heads, register)


def _falcon_h1_mixer(v: Mapping, where: str):
    """FalconH1Config.__post_init__ and FalconH1Mixer: the mixer's width mamba_d_ssm (null:
    int(mamba_expand · hidden_size)) in mamba_n_heads heads of mamba_d_head ("auto": the
    width / heads; validate_architecture refuses a product that differs from the width);
    the gated RMSNorm only with mamba_rms_norm (else y·SiLU(z)); in_proj's bias
    mamba_proj_bias, out_proj's projectors_bias; dt clamped to time_step_limit; every layer
    "hybrid" (layers_block_type); the multipliers' lists of 2 (MLP) and 5 (in_proj's z, x,
    B, C, dt) unpacked by transformers."""
    d_ssm, heads, head = v["mamba_d_ssm"], v["mamba_n_heads"], v["mamba_d_head"]
    if d_ssm is None:
        d_ssm = int(v["mamba_expand"] * v["hidden_size"])
    if head == "auto":
        head = d_ssm // heads
    if isinstance(head, bool) or not isinstance(head, int) or head <= 0:
        raise UsageError(f"{where}: mamba_d_head must be \"auto\" or a positive integer, got "
                         f"{head!r}")
    if head * heads != d_ssm:
        raise UsageError(f"{where}: mamba_d_head {head} × mamba_n_heads {heads} is not the "
                         f"mixer's width {d_ssm} (mamba_d_ssm): transformers refuses it")
    if v["mamba_proj_bias"] != v["projectors_bias"]:
        raise UsageError(f"{where}: mamba_proj_bias {v['mamba_proj_bias']} with "
                         f"projectors_bias {v['projectors_bias']}: the spec's Mamba-2 biases "
                         f"are on in_proj and out_proj together (--mamba-bias)")
    if v["mamba_rms_norm"] and v["mamba_norm_before_gate"]:
        raise UsageError(f"{where}: mamba_rms_norm with mamba_norm_before_gate (the norm, then "
                         f"the gate) is not expressed yet; the spec's gated norm gates first "
                         f"(mamba_norm_before_gate false)")
    limit = v["time_step_limit"]
    if not (isinstance(limit, list) and len(limit) == 2 and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in limit)
            and 0 <= limit[0] <= 1e18):
        raise UsageError(f"{where}: time_step_limit must be [min, max], min a non-negative "
                         f"number (dt is clamped to it)")
    for key, n in (("mlp_multipliers", 2), ("ssm_multipliers", 5)):
        m = v[key]
        if m is not None and not (isinstance(m, list) and len(m) == n and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in m)):
            raise UsageError(f"{where}: {key} must list {n} numbers (or be null)")
    L = v["num_hidden_layers"]
    return {"mamba_heads": heads, "mamba_head_dim": head, "mamba_dt_min": float(limit[0]),
            "mamba_gate_only": not v["mamba_rms_norm"], "layer_types": ("hybrid",) * L}, ()


FALCON_H1_NAMES = ModuleNames(
    blocks="model.layers",
    block=MappingProxyType({
        "ln1": "input_layernorm", "ln2": "pre_ff_layernorm", "attn": "self_attn",
        "attn.q_proj": "self_attn.q_proj", "attn.k_proj": "self_attn.k_proj",
        "attn.v_proj": "self_attn.v_proj", "attn.output_proj": "self_attn.o_proj",
        "mixer": "mamba", "mixer.conv1d": "mamba.conv1d", "mixer.in_proj": "mamba.in_proj",
        "mixer.norm": "mamba.norm", "mixer.out_proj": "mamba.out_proj",
        "ffn.w1": "feed_forward.gate_proj", "ffn.w3": "feed_forward.up_proj",
        "ffn.w2": "feed_forward.down_proj"}),
    top=MappingProxyType({"token_embeddings": "model.embed_tokens",
                          "ln_final": "model.final_layernorm", "lm_head": "lm_head"}),
)

# the multipliers: each an elementwise op whatever its value (spec mup_multipliers)
_SCALARS = ("key_multiplier", "attention_in_multiplier", "attention_out_multiplier",
            "ssm_in_multiplier", "ssm_out_multiplier")

register(HFType(
    "falcon_h1", "FalconH1ForCausalLM",
    keys=(Key("vocab_size", ("vocab_size",), INT, Required(128000)),
          Key("hidden_size", ("d_model",), INT, Required(4096)),
          Key("intermediate_size", ("d_ff",), INT, Required(14336)),
          Key("num_hidden_layers", ("num_layers",), INT, Required(32)),
          Key("num_attention_heads", ("num_heads",), INT, Required(32)),
          Key("max_position_embeddings", ("context_length",), INT, 8192),
          kv_heads(8), head_dim(None, INT_OR_ABSENT),
          Key("attention_bias", ("qkv_bias", "out_bias"), BOOL, False),
          Key("mlp_bias", ("mlp_bias",), BOOL, False),
          # the mixer's activation is hidden_act too (FalconH1Mixer.act): SiLU only
          Key("hidden_act", ("mlp",), CHOICE, "silu", MappingProxyType({"silu": "swiglu"})),
          Key("rms_norm_eps", ("norm_eps",), EPS, 1e-5),
          Key("tie_word_embeddings", ("tie_embeddings",), BOOL, False),
          Key("rope_theta", ("rope_theta",), THETA, 10000.0,
              aliases=("rope_parameters.rope_theta", "rope_scaling.rope_theta")),
          Key("mamba_d_ssm", (), INT_OR_NULL, 1024),
          Key("mamba_n_heads", (), INT, 128),
          Key("mamba_d_head", (), WINDOW_PATTERN, "auto"),
          Key("mamba_n_groups", ("mamba_groups",), INT, 1),
          Key("mamba_d_state", ("ssm_state",), INT, 256),
          Key("mamba_d_conv", ("conv_kernel",), INT, 4),
          Key("mamba_expand", (), INT, 2),
          Key("mamba_chunk_size", ("mamba_chunk",), INT, 256),
          Key("mamba_conv_bias", ("conv_bias",), BOOL, True),
          Key("mamba_proj_bias", ("mamba_bias",), BOOL, False),
          Key("projectors_bias", (), BOOL, False),
          Key("mamba_norm_before_gate", (), BOOL, True),
          Key("mamba_rms_norm", (), BOOL, False),
          Key("time_step_limit", (), LIST, [0.0, float("inf")]),
          Key("embedding_multiplier", ("embedding_multiplier",), THETA, 1.0),
          Key("lm_head_multiplier", ("logit_scale",), THETA, 1.0),
          *(Key(k, (), THETA, 1.0) for k in _SCALARS),
          Key("mlp_multipliers", (), LIST, None),
          Key("ssm_multipliers", (), LIST, None)),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, mup_multipliers=True)),
    rules="pre-norm RMSNorm blocks (input_layernorm, pre_ff_layernorm): a Mamba-2 mixer "
          "(FalconH1Mixer: input × ssm_in_multiplier, in_proj × mup_vector, conv1d and "
          "SiLU, the chunked SSD scan, y·SiLU(z) or the gated RMSNorm, out_proj) × "
          "ssm_out_multiplier plus grouped attention with RoPE on the input × "
          "attention_in_multiplier (K × key_multiplier) × attention_out_multiplier, then a "
          "SwiGLU MLP (gate × gate_multiplier, output × down_multiplier); embeddings × "
          "embedding_multiplier, logits × lm_head_multiplier (modeling_falcon_h1.py)",
    names=FALCON_H1_NAMES, must=ROPE_MUST, noted=(ATTENTION_DROPOUT,),
    # num_logits_to_keep: generation only; attn_layer_indices and mamba_use_mlp: keys of
    # older Falcon-H1 files that FalconH1Config and its model never read
    free=frozenset({"num_logits_to_keep", "attn_layer_indices", "mamba_use_mlp"}),
    derived=(Derived(("mamba_heads", "mamba_head_dim", "mamba_dt_min", "mamba_gate_only",
                      "layer_types"),
                     ("hidden_size", "num_hidden_layers", "mamba_d_ssm", "mamba_n_heads",
                      "mamba_d_head", "mamba_expand", "mamba_proj_bias", "projectors_bias",
                      "mamba_rms_norm", "mamba_norm_before_gate", "time_step_limit",
                      "mlp_multipliers", "ssm_multipliers"), _falcon_h1_mixer,
                     "every layer hybrid (attention beside Mamba-2); the mixer's heads of "
                     "mamba_d_head (\"auto\": mamba_d_ssm, else mamba_expand·hidden_size, over "
                     "mamba_n_heads); y·SiLU(z) without mamba_rms_norm (FalconH1Config, "
                     "FalconH1Mixer)"),),
))
