"""The spec's checks: what ModelConfig.__post_init__ refuses, field by field and feature by
feature, each with a one-line UsageError naming the field and what it accepts. The
per-field lists (required sizes, core choices, switches) are read from the fields'
metadata (fields.py), not restated."""
from __future__ import annotations

from dataclasses import MISSING, fields
from functools import cache

from accounting.runtime.errors import UsageError, escape, shorten
from accounting.architecture.choices import (GROUP_SCORES, LAYER_TYPES, MAX_LAYERS, MAX_NAME,
                                      MAX_REAL, MAX_SIZE, MLPS, ROUTERS)
from accounting.architecture.fields import CHOICE, FLAG, SIZE, meta
from accounting.architecture.hints import divisor_hint as _divisor_hint


# the spec's dropout probabilities (config.py), each nn.Dropout's p
DROPOUTS = ("embedding_dropout", "attention_dropout", "residual_dropout")


def validate(c) -> None:
    """Refuse a ModelConfig the tool cannot mean (called by its __post_init__)."""
    _SIZES, _CHOICES, _FLAGS = _field_lists(type(c))
    for f in _SIZES + ("num_kv_heads", "head_dim"):
        value = getattr(c, f)
        if value is None and f in ("num_kv_heads", "head_dim"):
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"{f} must be a positive integer, got {short_value(value)}")
        if not 0 < value <= MAX_SIZE:
            raise UsageError(f"{f} must be a positive integer up to 10^12, got {short_value(value)}")
    if c.num_layers > MAX_LAYERS:
        raise UsageError(f"num_layers must be at most {MAX_LAYERS:,}, got {c.num_layers:,}")
    for f, low in (("rope_theta", "positive"), ("norm_eps", "non-negative")):
        value = getattr(c, f)
        finite = isinstance(value, (int, float)) and not isinstance(value, bool) \
            and value == value and abs(value) <= MAX_REAL
        if not finite or value < 0 or (low == "positive" and value == 0):
            raise UsageError(f"{f} must be a {low} finite number up to 10^18, got {short_value(value)}")
    for f, choices in _CHOICES.items():
        if not one_of(getattr(c, f), choices):
            raise UsageError(f"{f} must be one of {', '.join(choices)}, got {short_value(getattr(c, f))}")
    for f in _FLAGS:
        if not isinstance(getattr(c, f), bool):
            raise UsageError(f"{f} must be true or false, got {short_value(getattr(c, f))}")
    for f in DROPOUTS:  # nn.Dropout takes p in [0, 1]; p = 1 zeroes the tensor
        value = getattr(c, f)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise UsageError(f"{f} must be a probability at least 0 and below 1, got "
                             f"{short_value(value)}")
    if c.fused_gelu and c.mlp_kind.activation != "gelu_tanh":
        raise UsageError(f"fused_gelu (transformers' gelu_pytorch_tanh) needs a tanh GELU MLP "
                         f"(mlp gelu_tanh or geglu), not {c.mlp}: give --no-fused-gelu")
    if isinstance(c.mtp_layers, bool) or not isinstance(c.mtp_layers, int) \
            or not 0 <= c.mtp_layers <= MAX_SIZE:
        raise UsageError(f"mtp_layers must be a non-negative integer up to 10^12, got "
                         f"{short_value(c.mtp_layers)}")
    if not isinstance(c.name, str):
        raise UsageError(f"name must be a string, got {short_value(c.name)}")
    if len(c.name) > MAX_NAME or escape(c.name) != c.name:
        raise UsageError(f"name must be at most {MAX_NAME} printable characters (no "
                         f"newlines or control characters), got {short_value(c.name)}")
    if c.head_dim is None and c.kv_lora_rank is None and c.d_model % c.num_heads:
        hint = _divisor_hint(c.d_model, c.num_heads, c.positions, c.num_kv_heads)
        raise UsageError(
            f"d_model {c.d_model} is not divisible by num_heads {c.num_heads}; choose "
            f"num_heads dividing d_model{hint}, or give head_dim")
    if c.num_heads % c.kv_heads:
        raise UsageError(f"num_heads {c.num_heads} is not divisible by num_kv_heads "
                         f"{c.kv_heads}; each key/value head serves a whole group of query heads")
    if c.positions == "rope" and c.mla is False and c.d_k % 2:
        what = "head_dim" if c.head_dim is not None else "head dimension d_model/num_heads"
        raise UsageError(f"{what} = {c.d_k} is odd; RoPE rotates pairs, so choose an even "
                         f"head dimension (or positions other than rope)")
    if c.attention_sinks and (c.attention != "naive" or c.mla):
        raise UsageError("attention_sinks need the naive attention core of grouped or "
                         "multi-head attention (the fused kernel has no sink column; latent "
                         "attention has none): drop --attention sdpa or the latent ranks")
    for f in ("index_heads", "index_head_dim", "index_topk"):
        _positive(c, f)
    dsa = (c.index_heads, c.index_head_dim, c.index_topk)
    if any(x is not None for x in dsa):
        if None in dsa or c.q_lora_rank is None or not c.mla or c.positions != "rope" \
                or c.index_head_dim < c.qk_rope_head_dim:
            raise UsageError("the sparse-attention indexer (index_heads, index_head_dim, "
                             "index_topk: give all three) reads latent attention's query "
                             "latent and rotates its first qk_rope_head_dim dims: it needs "
                             "kv_lora_rank and q_lora_rank, positions rope, attention naive "
                             "and index_head_dim ≥ qk_rope_head_dim")
    if c.attn_output_gate and c.mla:
        raise UsageError("attn_output_gate gates grouped or multi-head attention's output; "
                         "latent attention has none in the spec: drop one of them")
    _check_block_and_positions(c)
    _check_window(c)
    _check_scales(c)
    _check_moe(c)
    _check_needs(c)
    _check_mla(c)
    _check_llama4(c)
    _check_recurrent(c)
    _check_global_shape(c)
    _check_beside_and_router(c)
    _check_per_layer(c)
    _check_xielu(c)


def _check_recurrent(c) -> None:
    """The hybrid layers (issue 31): each kind's sizes given where layer_types names it."""
    for f in ("conv_kernel", "linear_key_heads", "linear_value_heads", "linear_key_head_dim",
              "linear_value_head_dim", "linear_chunk", "mamba_heads", "mamba_head_dim",
              "ssm_state", "mamba_groups", "mamba_chunk", "mamba_inner", "mamba_dt_rank"):
        _positive(c, f)
    value = c.mamba_dt_min  # a number as the other number fields: bounded (issue 32)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_REAL:
        raise UsageError(f"mamba_dt_min must be a non-negative finite number up to 10^18, got "
                         f"{short_value(value)}")
    if not isinstance(c.linear_split_proj, bool):
        raise UsageError(f"linear_split_proj must be true or false, got "
                         f"{short_value(c.linear_split_proj)}")
    types = set(c.layer_types or ())
    if c.mup_multipliers and "hybrid" not in types:
        raise UsageError("mup_multipliers (Falcon-H1's) needs hybrid layers (layer_types hybrid: "
                         "attention beside Mamba-2)")
    if types & {"mamba", "hybrid"}:
        missing = [f for f in ("mamba_heads", "mamba_head_dim", "ssm_state", "conv_kernel")
                   if getattr(c, f) is None]
        if missing:
            raise UsageError(f"layer_types has mamba or hybrid layers but {', '.join(missing)} "
                             f"not given")
        if c.mamba_heads % c.mamba_groups:
            raise UsageError(f"mamba_heads {c.mamba_heads} is not a multiple of mamba_groups "
                             f"{c.mamba_groups}")
    if "mamba1" in types:
        missing = [f for f in ("mamba_inner", "mamba_dt_rank", "ssm_state", "conv_kernel")
                   if getattr(c, f) is None]
        if missing:
            raise UsageError(f"layer_types has mamba1 layers but {', '.join(missing)} not given")
    if "mlp" in types and c.block != "single":
        raise UsageError("layer_types mlp (a block with its MLP only) needs block single (one "
                         "sublayer per block, Nemotron-H)")
    if types & {"linear_attention", "kda", "conv"} and c.conv_kernel is None:
        raise UsageError("layer_types has linear_attention, kda or conv layers but conv_kernel "
                         "is not given (the depthwise convolution's width, e.g. --conv-kernel 4)")
    lin = ("linear_key_heads", "linear_value_heads", "linear_key_head_dim",
           "linear_value_head_dim")
    for kind in ("linear_attention", "kda"):
        missing = [f for f in lin if getattr(c, f) is None]
        if kind in types and missing:
            raise UsageError(f"layer_types has {kind} layers but {', '.join(missing)} not given")
    if "kda" in types and c.linear_key_heads != c.linear_value_heads:
        raise UsageError(f"kda layers have one head count for Q, K and V, but "
                         f"linear_key_heads is {c.linear_key_heads} and linear_value_heads "
                         f"{c.linear_value_heads}; give equal values")
    if "linear_attention" in types:
        if c.linear_value_heads % c.linear_key_heads:
            raise UsageError(f"linear_value_heads {c.linear_value_heads} is not a multiple of "
                             f"linear_key_heads {c.linear_key_heads}")
    if types & {"linear_attention", "kda", "conv", "mamba", "mamba1"} and \
            c.block not in ("sequential", "single"):
        raise UsageError("recurrent layers (linear_attention, kda, conv, mamba, mamba1) need block "
                         "sequential or single")
    if "hybrid" in types and (c.block != "sequential" or c.norm_placement != "pre" or c.mla):
        raise UsageError("hybrid layers (attention beside Mamba-2) need block sequential, "
                         "norm_placement pre and attention without a latent (Falcon-H1's)")


@cache
def _field_lists(cls):
    """What validate checks field by field, read from the fields' metadata (fields.py), in
    the spec's order: the required sizes; the choices and switches of the core architecture
    (the mixture of experts' own are checked with it, in _check_moe, which knows whether it
    applies)."""
    sizes = tuple(f.name for f in fields(cls) if meta(f).kind == SIZE and f.default is MISSING)
    choices = {f.name: meta(f).choices for f in fields(cls)
               if meta(f).kind == CHOICE and meta(f).needs is None}
    flags = tuple(f.name for f in fields(cls) if meta(f).kind == FLAG and meta(f).needs is None)
    return sizes, choices, flags


def _positive(c, f: str, allow_none: bool = True) -> None:
    value = getattr(c, f)
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_SIZE:
        raise UsageError(f"{f} must be a positive integer up to 10^12, got {short_value(value)}")


def _check_block_and_positions(c) -> None:
    _positive(c, "rotary_dim")
    if c.block != "sequential" and c.norm_placement != "pre":
        raise UsageError(f"block {c.block} reads norms of the block input: it needs "
                         f"norm_placement pre, got {c.norm_placement}")
    if c.positions == "alibi" and (c.mla or c.attention != "naive"):
        raise UsageError("positions alibi adds its bias to the scores of the naive attention "
                         "core (the fused kernel would take it as a float mask; latent attention "
                         "has its own RoPE): use attention naive and no latent attention")
    if c.rotary_dim is not None and (c.positions != "rope" or c.mla
                                     or c.rotary_dim % 2 or c.rotary_dim >= c.d_k):
        raise UsageError(f"rotary_dim {c.rotary_dim} must be even and below the head dimension "
                         f"{c.d_k}, with positions rope and no latent attention (for RoPE on "
                         f"the whole head leave it unset)")


def _check_window(c) -> None:
    _positive(c, "sliding_window")
    if c.layer_types is not None:
        if not isinstance(c.layer_types, tuple) or len(c.layer_types) != c.num_layers \
                or any(not one_of(t, LAYER_TYPES) for t in c.layer_types):
            raise UsageError(f"layer_types must list {c.num_layers} entries (one per layer), each "
                             f"{', '.join(LAYER_TYPES)}, got {short_value(c.layer_types)}")
        if "local" in c.layer_types and c.sliding_window is None:
            raise UsageError("layer_types has local layers but sliding_window is not given")
        if "chunked" in c.layer_types and c.attention_chunk is None:
            raise UsageError("layer_types has chunked layers but attention_chunk is not given")


def _check_scales(c) -> None:
    """The Gemma/Granite scalars: positive finite numbers or none, where they can run."""
    for f in ("embedding_multiplier", "residual_multiplier", "attn_softcap", "final_softcap",
              "logit_scale"):
        value = getattr(c, f)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not 0 < value <= MAX_REAL):
            raise UsageError(f"{f} must be a positive finite number up to 10^18 (or none), got "
                             f"{short_value(value)}")
    if c.norm_offset and (c.norm != "rmsnorm" or c.mla):
        raise UsageError("norm_offset (gains applied as 1 + w) is Gemma's RMSNorm, without "
                         "latent attention; use norm rmsnorm and no kv_lora_rank, or drop "
                         "norm_offset")
    if c.attn_softcap is not None and (c.attention != "naive" or c.mla):
        raise UsageError("attn_softcap needs the explicit attention scores: the fused kernel "
                         "(attention sdpa) and latent attention cannot soft-cap them; use "
                         "attention naive without latent attention, or drop attn_softcap")


def _check_needs(c) -> None:
    """A field that means nothing without another (a mixture-of-experts setting on a dense
    model, a temperature scale without the floor) must keep its default: the CLI refuses
    its flag (cli/args.py), and a config file or ModelConfig(...) is refused the same way
    rather than answered with counts that ignore it (issue 32)."""
    for f in fields(c):
        needs = meta(f).needs
        if needs and getattr(c, needs) is None and getattr(c, f.name) != f.default:
            raise UsageError(f"{f.name} = {short_value(getattr(c, f.name))} means nothing "
                             f"without {needs} (the config has none); give {needs} too, or "
                             f"leave {f.name} out (its default: {short_value(f.default)})")


def _check_moe(c) -> None:
    for f in ("num_experts", "moe_d_ff", "shared_d_ff", "moe_latent_size"):
        _positive(c, f)
    for f in ("experts_per_token", "router_groups", "router_topk_groups"):
        _positive(c, f, allow_none=False)
    if isinstance(c.num_shared_experts, bool) or not isinstance(c.num_shared_experts, int) \
            or not 0 <= c.num_shared_experts <= MAX_SIZE:
        raise UsageError(f"num_shared_experts must be a non-negative integer, got {short_value(c.num_shared_experts)}")
    if not one_of(c.router, ROUTERS):
        raise UsageError(f"router must be one of {', '.join(ROUTERS)}, got {short_value(c.router)}")
    if not one_of(c.router_group_score, GROUP_SCORES):
        raise UsageError(f"router_group_score must be one of {', '.join(GROUP_SCORES)}, got "
                         f"{short_value(c.router_group_score)}")
    for f in ("router_bias", "norm_topk_prob", "router_topk_first", "router_linear_bias",
              "expert_bias", "shared_expert_gate", "router_bias_param"):
        if not isinstance(getattr(c, f), bool):
            raise UsageError(f"{f} must be true or false, got {short_value(getattr(c, f))}")
    for f, none_ok in (("routed_scaling_factor", False), ("moe_capacity_factor", True)):
        value = getattr(c, f)
        if value is None and none_ok:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_REAL:
            raise UsageError(f"{f} must be a positive finite number up to 10^18, got {short_value(value)}")
    if c.moe_capacity_factor is not None and c.moe_capacity_factor < 1:
        raise UsageError(f"moe_capacity_factor {c.moe_capacity_factor} is below 1: it drops tokens "
                         "even under perfectly balanced routing; use 1 or more (or none: dropless)")
    if not isinstance(c.dense_layers, tuple) or any(
            isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < c.num_layers for i in c.dense_layers):
        raise UsageError(f"dense_layers must be layer indices in [0, {c.num_layers}), got "
                         f"{short_value(c.dense_layers)}")
    if c.num_experts is None:
        return
    if c.router_bias_param and not c.router_bias:
        raise UsageError("router_bias_param says how the router's correction bias is held, "
                         "but router_bias is off; give --router-bias too or drop it")
    if c.shared_d_ff is not None and not c.num_shared_experts:
        raise UsageError("shared_d_ff is the shared experts' width, but num_shared_experts is "
                         "0; give --shared-experts N or drop --shared-d-ff")
    if c.shared_expert_gate and not c.num_shared_experts:
        raise UsageError("shared_expert_gate scales the shared experts' output, but "
                         "num_shared_experts is 0; give --shared-experts N or drop the gate")
    if c.shared_d_ff is not None and not c.num_shared_experts:
        raise UsageError("shared_d_ff is the shared experts' width, but num_shared_experts is "
                         "0; give --shared-experts N or drop it")
    if not (c.mlp_kind.gated or c.mlp == "relu2") or c.mlp_bias:
        gated = ", ".join(name for name, kind in MLPS.items() if kind.gated)
        raise UsageError(f"mixture-of-experts layers run gated experts ({gated}) or squared-"
                         f"ReLU ones (relu2: Nemotron-H's two matrices) and mlp_bias "
                         f"false (expert_bias gives the routed experts biases), got mlp "
                         f"{c.mlp}{' with biases' if c.mlp_bias else ''}")
    if c.moe_latent_size is not None and c.router_scales_input:
        raise UsageError("moe_latent_size (Nemotron-H's latent experts) routes the projected "
                         "tokens to their experts; router_scales_input (Llama 4's every "
                         "expert on every token) is another layout: drop one of them")
    if c.router_topk_first and (c.router_bias or c.router_groups > 1):
        raise UsageError("router_topk_first takes the top-k of the raw logits (gpt-oss): it has "
                         "no correction bias (router_bias) or group-limited choice (router_groups)")
    E, k = c.num_experts, c.experts_per_token
    if k > E:
        raise UsageError(f"experts_per_token (top-k) {k} is more than num_experts {E}")
    if E % c.router_groups or c.router_topk_groups > c.router_groups:
        raise UsageError(f"router_groups {c.router_groups} must divide num_experts {E}, and "
                         f"router_topk_groups {c.router_topk_groups} be at most router_groups")
    if k > E // c.router_groups * c.router_topk_groups:
        raise UsageError(f"top-{k} cannot be chosen from {c.router_topk_groups} groups of "
                         f"{E // c.router_groups} experts")


def _check_mla(c) -> None:
    dims = ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    for f in ("q_lora_rank", "kv_lora_rank") + dims:
        _positive(c, f)
    given = [f for f in dims if getattr(c, f) is not None]
    if c.kv_lora_rank is None:
        if given or c.q_lora_rank is not None:
            raise UsageError(f"{', '.join(given) or 'q_lora_rank'} given without kv_lora_rank: "
                             "multi-head latent attention needs kv_lora_rank, qk_nope_head_dim, "
                             "qk_rope_head_dim and v_head_dim")
        return
    if len(given) != len(dims):
        missing = [f for f in dims if getattr(c, f) is None]
        raise UsageError(f"kv_lora_rank needs its companions: {', '.join(missing)} missing")
    if c.num_kv_heads is not None or c.head_dim is not None:
        raise UsageError("multi-head latent attention sets its own head dims: drop num_kv_heads "
                         "and head_dim (qk_nope_head_dim, qk_rope_head_dim, v_head_dim)")
    if c.qk_norm != "none":
        raise UsageError("multi-head latent attention has its own latent norms: drop qk_norm")
    if c.positions == "rope" and c.qk_rope_head_dim % 2:
        raise UsageError(f"qk_rope_head_dim = {c.qk_rope_head_dim} is odd; RoPE rotates pairs")


def _check_llama4(c) -> None:
    """Llama 4's fields: each means something only with what it acts on."""
    _positive(c, "attention_chunk")
    _positive(c, "temperature_floor")
    if not isinstance(c.router_scales_input, bool):
        raise UsageError(f"router_scales_input must be true or false, got {short_value(c.router_scales_input)}")
    value = c.temperature_scale
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_REAL:
        raise UsageError(f"temperature_scale must be a positive finite number up to 10^18, got {short_value(value)}")
    if not isinstance(c.nope_layers, tuple) or any(
            isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < c.num_layers for i in c.nope_layers):
        raise UsageError(f"nope_layers must be layer indices in [0, {c.num_layers}), got {short_value(c.nope_layers)}")
    if c.sliding_window is not None and c.attention_chunk is not None and c.layer_types is None:
        raise UsageError("sliding_window and attention_chunk together need layer_types (which "
                         "layers are local, which chunked)")
    if c.temperature_floor is not None and not c.nope_layers:  # was: accepted, ignored (issue 32)
        raise UsageError("temperature_floor (--temperature-floor) scales the queries of the NoPE "
                         "layers only, and there are none: give nope_layers (--nope-layers) or "
                         "drop it")
    if (c.nope_layers or c.qk_norm == "l2" or c.temperature_floor) and (c.positions != "rope" or c.mla):
        raise UsageError("nope_layers, qk_norm l2 and temperature_floor act on RoPE attention: "
                         "they need positions rope (and no latent attention)")
    # Llama 4's router (transformers' Llama4Router): the top-k raw scores, a sigmoid of them
    # (router sigmoid, router_topk_first), each weight scaling its expert's input
    if c.router_scales_input and not (c.router == "sigmoid" and c.router_topk_first):
        raise UsageError("router_scales_input is Llama 4's router: it needs router sigmoid and "
                         "router_topk_first (the sigmoid of the top-k raw scores)")
    if c.router_scales_input and (c.norm_topk_prob or c.routed_scaling_factor != 1.0
                                  or c.moe_capacity_factor is not None):
        raise UsageError("router_scales_input (Llama 4) takes no renormalisation, scaling or "
                         "capacity factor: set norm_topk_prob false and drop the others")


def one_of(value, choices) -> bool:
    """Whether a config's value is one of the choices' names: a string first (a JSON list
    or object is unhashable: `in` a dict would raise TypeError, not say what is wrong)."""
    return isinstance(value, str) and value in choices


def short_value(value, limit: int = 40) -> str:
    """A user's value for an error message: repr, control characters escaped, shortened."""
    return shorten(value, limit)


def _check_global_shape(c) -> None:
    """Gemma 4's global layers (global_head_dim, global_kv_heads, global_k_eq_v) and v_norm:
    grouped or multi-head attention only; the global K/V heads divide the query heads."""
    for f in ("global_head_dim", "global_kv_heads"):
        _positive(c, f)
    if (c.global_shape or c.v_norm) and c.mla:
        raise UsageError("global_head_dim, global_kv_heads, global_k_eq_v and v_norm shape "
                         "grouped or multi-head attention; latent attention has none of them")
    if c.num_heads % c.global_kv:
        raise UsageError(f"num_heads {c.num_heads} is not a multiple of global_kv_heads "
                         f"{c.global_kv}: each global K/V head serves a whole group")
    if c.positions == "rope" and c.global_d_k % 2:
        raise UsageError(f"global_head_dim {c.global_d_k} is odd; RoPE rotates pairs")
    if c.global_shape and c.rotary_dim is not None:
        raise UsageError("rotary_dim with a global head shape: the spec's partial rotary is "
                         "one width for every layer; drop one of them")


def _check_beside_and_router(c) -> None:
    """Gemma 4's block extras (sandwich blocks only) and Phi-3.5-MoE's SparseMixer router."""
    if c.mlp_beside_moe and c.norm_placement != "sandwich":
        raise UsageError("mlp_beside_moe is Gemma 4's sandwich block (each of the MLP's and "
                         "the experts' outputs normed): it needs norm_placement sandwich")
    if c.layer_scalar and c.norm_placement != "sandwich":
        raise UsageError("layer_scalar is Gemma 4's sandwich block: it needs norm_placement "
                         "sandwich")
    if c.router == "sparsemixer" and (c.experts_per_token != 2 or c.router_topk_first
                                      or c.router_groups > 1 or c.router_bias
                                      or c.norm_topk_prob):
        raise UsageError("router sparsemixer (Phi-3.5-MoE) picks two experts in two rounds "
                         "and weights each by its own masked softmax: it needs "
                         "experts_per_token 2, no norm_topk_prob, no router groups, bias or "
                         "topk-first")


def _check_xielu(c) -> None:
    """xIELU's learned scalars belong to a dense MLP (Apertus): experts would each need
    their own, which no model builds."""
    if c.mlp == "xielu" and c.num_experts is not None:
        raise UsageError("mlp xielu (Apertus) with a mixture of experts: its learned scalars "
                         "belong to a dense MLP; choose another mlp for the experts")


def _check_per_layer(c) -> None:
    """Gemma 4's per-layer embeddings and KV sharing (transformers' Gemma4TextDecoderLayer and
    Gemma4TextConfig.kv_sharing_modes): both in Gemma's sandwich block; a sharing layer reads
    the K and V of the last earlier layer of its kind, so every kind among the last n layers
    must occur before them (transformers raises otherwise)."""
    for f in ("per_layer_input", "per_layer_vocab"):
        _positive(c, f)
    n = c.kv_shared_layers
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < c.num_layers:
        raise UsageError(f"kv_shared_layers must be a non-negative integer below num_layers "
                         f"{c.num_layers} (a layer that computes K and V must come first), got "
                         f"{short_value(n)}")
    if c.double_wide_mlp and not n:
        raise UsageError("double_wide_mlp widens the KV-sharing layers' MLP: it means nothing "
                         "without kv_shared_layers")
    if (c.per_layer_input is not None or n) and c.norm_placement != "sandwich":
        raise UsageError("per-layer embeddings and KV sharing are Gemma 4's sandwich block: "
                         "they need norm_placement sandwich")
    if not n:
        return
    kinds = c.layer_kinds
    first = c.first_shared_layer
    if c.mla or any(k.recurrent for k in kinds):
        raise UsageError("kv_shared_layers: KV sharing reuses grouped or multi-head "
                         "attention's K and V; latent attention and recurrent layers have none")
    if any(k.chunked for k in kinds):
        raise UsageError("kv_shared_layers with chunked attention: Gemma 4 shares sliding "
                         "and full attention layers' K and V only")
    before = {k.local for k in kinds[:first]}
    after = {k.local for k in kinds[first:]}
    if not after <= before:
        raise UsageError("kv_shared_layers: a sharing layer needs an earlier layer of its kind "
                         "(sliding or full attention) to read K and V from "
                         "(Gemma4TextConfig.kv_sharing_modes)")
    if any(k.nope for k in kinds[first:]):
        raise UsageError("kv_shared_layers with NoPE layers: not a Gemma 4 layout")
