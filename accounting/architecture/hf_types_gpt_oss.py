"""gpt-oss (gpt-oss-20b, gpt-oss-120b) in the Hugging Face table (hf_schema.py's row);
registered on import (hf_config.py imports this module). Defaults and rules from
transformers 5.23.0's configuration_gpt_oss.py and modeling_gpt_oss.py.

What the type builds (modeling_gpt_oss.py): GptOssAttention with biases on q/k/v/o_proj
(attention_bias, default true), grouped-query heads of head_dim, and `sinks` (one learned
logit per head, concatenated to the scores as an extra column before the softmax and
sliced off after); layers of "sliding_attention" (create_sliding_window_causal_mask) or
"full_attention" (layer_types; default: sliding on even layers); on every layer GptOssMLP:
GptOssTopKRouter (nn.Linear-like weight and bias, top-k of the logits, softmax over the k)
and GptOssExperts (gate_up_proj with interleaved gate/up columns and its bias, down_proj
and its bias; _apply_gate: the clamped SwiGLU of swiglu_alpha and swiglu_limit); no shared
expert; RMSNorm; yarn RoPE by default (frequencies only).
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from accounting.architecture.config import ModelConfig
from accounting.architecture.hf_schema import (
    ATTENTION_DROPOUT, BOOL, EPS, INT, INT_OR_NULL, LIST, LLAMA_FAMILY, LLAMA_NAMES, ROPE_MUST,
    THETA, Derived, HFType, Key, ModuleNames, Must, Noted, Required, head_dim, kv_heads,
    llama_sizes, real, register, short)
from accounting.architecture.hf_types_dense import layers_of
from accounting.architecture.hf_types_moe import ROUTER_FREE
from accounting.runtime.errors import UsageError

# The router is mlp.router (weight and bias), the experts mlp.experts; the rest as llama.
GPT_OSS_NAMES = ModuleNames(LLAMA_NAMES.blocks, MappingProxyType({
    **LLAMA_NAMES.block, "ffn.router": "mlp.router", "ffn.experts": "mlp.experts"}),
    LLAMA_NAMES.top)

_KINDS = {"full_attention": "global", "sliding_attention": "local"}


def _gpt_oss_windows(v: Mapping, where: str):
    """GptOssConfig.__post_init__: without layer_types, layer i is "sliding_attention" iff
    (i + 1) % 2 (even layers); each sliding layer attends its last sliding_window keys."""
    L, given = v["num_hidden_layers"], v["layer_types"]
    if given is None:
        types = ["local" if (i + 1) % 2 else "global" for i in range(L)]
    else:
        if len(given) != L or any(not isinstance(t, str) or t not in _KINDS for t in given):
            raise UsageError(f"{where}: layer_types must list {L} entries (num_hidden_layers), "
                             f"each \"full_attention\" or \"sliding_attention\", got "
                             f"{short(given)}")
        types = [_KINDS[t] for t in given]
    fields = layers_of(types, v["sliding_window"], where)
    n = types.count("local")
    return fields, ((f"{n} of {L} layers attend a sliding window of {v['sliding_window']:,} ("
                     + ("layer_types" if given is not None else
                        "layer_types absent: GptOssConfig's default, the even layers")
                     + ").",) if n else ())


def _gpt_oss_keys(c: ModelConfig) -> Mapping:
    return {"sliding_window": c.sliding_window,
            "layer_types": ["sliding_attention" if k.local else "full_attention"
                            for k in c.layer_kinds]}


def _mxfp4(v, d) -> bool:
    return v is None or (isinstance(v, dict) and v.get("quant_method") == "mxfp4")


def _number(v) -> bool:
    return real(v)


register(HFType(
    "gpt_oss", "GptOssForCausalLM",
    # the experts are intermediate_size wide (no dense MLP, no moe_intermediate_size)
    keys=llama_sizes(201088, 2880, 2880, 36, 64, 131072) + (
        # GptOssConfig types both as int (a null is refused by its strict validation)
        kv_heads(Required(8), INT),
        head_dim(Required(64), INT),
        Key("attention_bias", ("qkv_bias", "out_bias"), BOOL, True),
        # GptOssConfig.attribute_map: num_experts is num_local_experts
        Key("num_local_experts", ("num_experts",), INT, Required(128), aliases=("num_experts",)),
        Key("num_experts_per_tok", ("experts_per_token",), INT, Required(4)),
        Key("sliding_window", (), INT_OR_NULL, 128),
        Key("layer_types", (), LIST, None),
        Key("rms_norm_eps", ("norm_eps",), EPS, 1e-5),
        Key("tie_word_embeddings", ("tie_embeddings",), BOOL, False),
        # GptOssConfig.default_theta; transformers 5 writes rope_parameters.rope_theta
        Key("rope_theta", ("rope_theta",), THETA, 150000.0,
            aliases=("rope_parameters.rope_theta", "rope_scaling.rope_theta"))),
    fixed=MappingProxyType(dict(
        LLAMA_FAMILY, qk_norm="none", mlp="swiglu_clamped", mlp_bias=False,
        attention_sinks=True, router="softmax", router_topk_first=True,
        router_linear_bias=True, expert_bias=True, norm_topk_prob=False, router_bias=False,
        num_shared_experts=0, routed_scaling_factor=1.0)),
    rules="attention sinks (self_attn.sinks: one logit per head, an extra softmax column); "
          "every layer's MLP a mixture of intermediate_size-wide experts with biases "
          "(gate_up_proj_bias, down_proj_bias) and the clamped SwiGLU (GptOssExperts."
          "_apply_gate); a router with a bias (mlp.router), top-k of its logits, then a "
          "softmax over the k (GptOssTopKRouter); no shared expert (modeling_gpt_oss.py)",
    names=GPT_OSS_NAMES,
    must=ROPE_MUST + (
        # OpenAI's own spelling, which transformers does not read (it reads num_experts_per_tok)
        Must("experts_per_token", lambda v, d: v is None or v == d.get("num_experts_per_tok"),
             "equal to num_experts_per_tok", "a top-k transformers ignores (it reads "
             "num_experts_per_tok)"),
        Must("quantization_config", _mxfp4, 'null or quant_method "mxfp4"',
             "a quantized checkpoint whose weights are not dense tensors of the config's "
             "shapes")),
    noted=(ATTENTION_DROPOUT,
           Noted("hidden_act", lambda v: v == "silu",
                 "{settings}: gpt-oss's experts run their clamped SwiGLU whatever it says "
                 "(GptOssExperts does not read hidden_act); counted as they run.",
                 (lambda v: isinstance(v, str), "a string")),
           Noted("swiglu_alpha", lambda v: v == 1.702,
                 "{settings}: the clamped SwiGLU's constants change no count (the same ops at "
                 "any value; the tool's model runs gpt-oss's 1.702 and 7.0).",
                 (_number, "a number")),
           Noted("swiglu_limit", lambda v: v == 7.0,
                 "{settings}: the clamped SwiGLU's constants change no count (the same ops at "
                 "any value; the tool's model runs gpt-oss's 1.702 and 7.0).",
                 (_number, "a number")),
           Noted("quantization_config", lambda v: v is None,
                 "quantization_config mxfp4: the checkpoint stores the experts' matrices in "
                 "MXFP4 (4-bit values, a shared scale per 32); the counts are of the model's "
                 "parameters as transformers builds them (dense tensors of the config's "
                 "shapes, what 21B and 117B count), not of the packed blocks and scales.")),
    # initial_context_length: OpenAI's name for yarn's original context (rope_scaling's
    # original_max_position_embeddings is what transformers reads): frequencies only
    free=ROUTER_FREE | {"initial_context_length"},
    derived=(Derived(("sliding_window", "layer_types"),
                     ("num_hidden_layers", "sliding_window", "layer_types"), _gpt_oss_windows,
                     "sliding layers: those of layer_types, else the even layers "
                     "(configuration_gpt_oss.py)", _gpt_oss_keys),),
    experts_implementation="batched_mm",
))
