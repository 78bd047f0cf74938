"""Hybrid models' model_types (issue 31): LFM2 (short convolutions beside attention),
Qwen3-Next (gated DeltaNet beside gated attention, experts) and Nemotron-H (Mamba-2 beside
attention); registered on import
(hf_config.py imports this module). Defaults and rules from transformers 5.23.0's
configuration_<type>.py and modeling_<type>.py.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from accounting.runtime.errors import UsageError
from accounting.architecture.hf_schema import (
    ATTENTION_BIAS, ATTENTION_DROPOUT, BOOL, CHOICE, EPS, GATED_ACTS, INT, INT_OR_ABSENT, LIST,
    LLAMA_FAMILY,
    NONNEG, PATTERN, ROPE_MUST, THETA, Derived, HFType, Key, ModuleNames, Must, Noted,
    Required, head_dim, kv_heads, register, rope_must)
from accounting.architecture.hf_types_moe import ROUTER_FREE, shared_experts
from accounting.architecture.hf_types_mamba_moe import (
    NEMOTRON_MOE_FIELDS, NEMOTRON_MOE_FREE, NEMOTRON_MOE_KEY_NAMES, NEMOTRON_MOE_KEYS,
    NEMOTRON_MOE_NAMES, NEMOTRON_MOE_NOTED, nemotron_experts)


def _lfm2_d_ff(v: Mapping, where: str):
    """Lfm2MLP: with block_auto_adjust_ff_dim, int(2·intermediate_size/3), then (with a
    block_ffn_dim_multiplier) int(multiplier·that) rounded up to a multiple of
    block_multiple_of; else intermediate_size as given."""
    f = v["intermediate_size"]
    if v["block_auto_adjust_ff_dim"]:
        f = int(2 * f / 3)
        m = v["block_ffn_dim_multiplier"]
        if m is not None:
            step = v["block_multiple_of"]
            f = step * ((int(m * f) + step - 1) // step)
    if f <= 0:
        raise UsageError(f"{where}: the adjusted MLP width is {f} (intermediate_size "
                         f"{v['intermediate_size']}): transformers cannot build it")
    return {"d_ff": f}, ()


def _lfm2_layers(v: Mapping, where: str):
    """Lfm2Config.__post_init__: layer_types as given ("full_attention" or "conv"), else
    full attention at full_attn_idxs (every layer when that is null too)."""
    L, given = v["num_hidden_layers"], v["layer_types"]
    if given is None:
        idxs = v["full_attn_idxs"]
        idxs = range(L) if idxs is None else idxs
        if not isinstance(idxs, (list, range)) or any(
                isinstance(i, bool) or not isinstance(i, int) for i in idxs):
            raise UsageError(f"{where}: full_attn_idxs must be a list of layer indices")
        given = ["full_attention" if i in idxs else "conv" for i in range(L)]
    kinds = {"full_attention": "global", "conv": "conv"}
    if not isinstance(given, list) or len(given) != L or any(t not in kinds for t in given):
        raise UsageError(f"{where}: layer_types must list {L} entries (num_hidden_layers), "
                         f"each full_attention or conv")
    types = tuple(kinds[t] for t in given)
    return ({"layer_types": types} if "conv" in types else {}), ()


LFM2_NAMES = ModuleNames(
    blocks="model.layers",
    block=MappingProxyType({
        "ln1": "operator_norm", "ln2": "ffn_norm", "attn": "self_attn",
        "attn.q_proj": "self_attn.q_proj", "attn.k_proj": "self_attn.k_proj",
        "attn.v_proj": "self_attn.v_proj", "attn.output_proj": "self_attn.out_proj",
        "attn.q_norm": "self_attn.q_layernorm", "attn.k_norm": "self_attn.k_layernorm",
        "conv": "conv", "conv.conv": "conv.conv", "conv.in_proj": "conv.in_proj",
        "conv.out_proj": "conv.out_proj",
        "ffn.w1": "feed_forward.w1", "ffn.w3": "feed_forward.w3", "ffn.w2": "feed_forward.w2"}),
    top=MappingProxyType({"token_embeddings": "model.embed_tokens",
                          "ln_final": "model.embedding_norm", "lm_head": "lm_head"}),
)

register(HFType(
    "lfm2", "Lfm2ForCausalLM",
    keys=(Key("vocab_size", ("vocab_size",), INT, Required(65536)),
          Key("hidden_size", ("d_model",), INT, Required(2560)),
          Key("num_hidden_layers", ("num_layers",), INT, Required(32)),
          Key("num_attention_heads", ("num_heads",), INT, Required(32)),
          Key("max_position_embeddings", ("context_length",), INT, Required(128000)),
          # Lfm2Config.__post_init__: block_ff_dim, an older spelling, overrides
          Key("intermediate_size", (), INT, Required(12288), aliases=("block_ff_dim",)),
          Key("block_auto_adjust_ff_dim", (), BOOL, True),
          # null refused: Lfm2MLP multiplies by it, and transformers fails on null, as on a
          # null num_key_value_heads or head_dim (tests/test_hf_default_sweep.py)
          Key("block_ffn_dim_multiplier", (), THETA, 1.0),
          Key("block_multiple_of", (), INT, 256),
          kv_heads(8, INT), head_dim(None, INT_OR_ABSENT),
          Key("norm_eps", ("norm_eps",), EPS, 1e-5),
          Key("tie_word_embeddings", ("tie_embeddings",), BOOL, True, aliases=("tie_embedding",)),
          Key("rope_theta", ("rope_theta",), THETA, 1000000.0,
              aliases=("rope_parameters.rope_theta", "rope_scaling.rope_theta")),
          Key("conv_bias", ("conv_bias",), BOOL, False),
          Key("conv_L_cache", ("conv_kernel",), INT, 3),
          Key("full_attn_idxs", (), LIST, None),
          Key("layer_types", (), LIST, None)),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, qk_norm="head", mlp="swiglu", qkv_bias=False,
                                out_bias=False, mlp_bias=False)),
    rules="pre-norm RMSNorm blocks (operator_norm, ffn_norm), each a gated short "
          "convolution (Lfm2ShortConv: in_proj to B, C, x; C·conv1d(B·x); out_proj) or "
          "grouped attention with a per-head RMSNorm on Q and K (q_layernorm, k_layernorm), "
          "then a SwiGLU MLP without biases (Lfm2MLP); the final norm is embedding_norm "
          "(modeling_lfm2.py)",
    names=LFM2_NAMES, must=ROPE_MUST,
    derived=(Derived(("d_ff",), ("intermediate_size", "block_auto_adjust_ff_dim",
                                  "block_ffn_dim_multiplier", "block_multiple_of"), _lfm2_d_ff,
                     "the MLP width: int(2·intermediate_size/3), times block_ffn_dim_multiplier "
                     "rounded up to block_multiple_of, with block_auto_adjust_ff_dim (Lfm2MLP)"),
             Derived(("layer_types",), ("num_hidden_layers", "full_attn_idxs", "layer_types"),
                     _lfm2_layers,
                     "conv layers: those layer_types names conv, else those not in "
                     "full_attn_idxs (Lfm2Config.__post_init__)")),
))


# ---- Qwen3-Next: gated DeltaNet layers 3:1 with gated attention, experts with a gated
# shared expert (transformers 5.23.0's configuration_qwen3_next.py, modeling_qwen3_next.py)
def _qwen3_next_layers(v: Mapping, where: str):
    """Qwen3NextConfig.__post_init__: layer_types as given, else layer i full attention iff
    (i + 1) % full_attention_interval == 0; Qwen3NextDecoderLayer: experts iff i is not in
    mlp_only_layers and num_experts > 0 and (i + 1) % decoder_sparse_step == 0, with the
    shared expert (shared_expert_intermediate_size wide, any width: shared_experts) gated
    by sigmoid(shared_expert_gate(x)); RoPE on int(head_dim · partial_rotary_factor)."""
    L, given, every = v["num_hidden_layers"], v["layer_types"], v["full_attention_interval"]
    if given is None:
        given = ["linear_attention" if (i + 1) % every else "full_attention" for i in range(L)]
    kinds = {"linear_attention": "linear_attention", "full_attention": "global"}
    if not isinstance(given, list) or len(given) != L or any(t not in kinds for t in given):
        raise UsageError(f"{where}: layer_types must list {L} entries (num_hidden_layers), "
                         f"each linear_attention or full_attention")
    fields: dict = {"layer_types": tuple(kinds[t] for t in given)}
    E, step, only = v["num_experts"], v["decoder_sparse_step"], v["mlp_only_layers"] or []
    if any(isinstance(i, bool) or not isinstance(i, int) for i in only):
        raise UsageError(f"{where}: mlp_only_layers must list layer indices")
    if E > 0:
        fields.update(num_experts=E, **shared_experts(v["shared_expert_intermediate_size"],
                                                      v["moe_intermediate_size"]),
                      shared_expert_gate=True,
                      dense_layers=tuple(i for i in range(L) if i in only or (i + 1) % step))
    head, factor = v["head_dim"], v["partial_rotary_factor"]
    if not (isinstance(factor, (int, float)) and 0 < factor <= 1):
        raise UsageError(f"{where}: partial_rotary_factor must be in (0, 1], got {factor!r}")
    r = int(head * factor)
    if r != head:
        if r == 0 or r % 2:
            raise UsageError(f"{where}: partial_rotary_factor {factor} gives {r} rotary dims "
                             f"per head; RoPE rotates pairs, so it must be even and positive")
        fields["rotary_dim"] = r
    return fields, ()


QWEN3_NEXT_NAMES = ModuleNames(
    blocks="model.layers",
    block=MappingProxyType({
        "ln1": "input_layernorm", "ln2": "post_attention_layernorm", "attn": "self_attn",
        # q_proj computes each head's query and output gate (2·h·d_k rows): the spec's q_proj
        # and gate_proj (model/attention.py), one module of transformers'
        "attn.q_proj": "self_attn.q_proj", "attn.gate_proj": "self_attn.q_proj",
        "attn.k_proj": "self_attn.k_proj",
        "attn.v_proj": "self_attn.v_proj", "attn.output_proj": "self_attn.o_proj",
        "attn.q_norm": "self_attn.q_norm", "attn.k_norm": "self_attn.k_norm",
        "linear_attn": "linear_attn", "linear_attn.conv1d": "linear_attn.conv1d",
        "linear_attn.in_proj_qkvz": "linear_attn.in_proj_qkvz",
        "linear_attn.in_proj_ba": "linear_attn.in_proj_ba", "linear_attn.norm": "linear_attn.norm",
        "linear_attn.out_proj": "linear_attn.out_proj",
        "ffn": "mlp", "ffn.router": "mlp.gate", "ffn.experts": "mlp.experts",
        "ffn.shared.w1": "mlp.shared_expert.gate_proj", "ffn.shared.w3": "mlp.shared_expert.up_proj",
        "ffn.shared.w2": "mlp.shared_expert.down_proj", "ffn.shared_gate": "mlp.shared_expert_gate",
        "ffn.w1": "mlp.gate_proj", "ffn.w3": "mlp.up_proj", "ffn.w2": "mlp.down_proj"}),
    top=MappingProxyType({"token_embeddings": "model.embed_tokens", "ln_final": "model.norm",
                          "lm_head": "lm_head"}),
)

register(HFType(
    "qwen3_next", "Qwen3NextForCausalLM",
    keys=(Key("vocab_size", ("vocab_size",), INT, Required(151936)),
          Key("hidden_size", ("d_model",), INT, Required(2048)),
          Key("intermediate_size", ("d_ff",), INT, Required(5632)),
          Key("num_hidden_layers", ("num_layers",), INT, Required(48)),
          Key("num_attention_heads", ("num_heads",), INT, Required(16)),
          Key("max_position_embeddings", ("context_length",), INT, Required(32768)),
          kv_heads(Required(2), INT), head_dim(Required(256), INT),
          ATTENTION_BIAS,
          Key("hidden_act", ("mlp",), CHOICE, "silu", GATED_ACTS),
          Key("rms_norm_eps", ("norm_eps",), EPS, 1e-6),
          Key("tie_word_embeddings", ("tie_embeddings",), BOOL, False),
          Key("rope_theta", ("rope_theta",), THETA, 10000.0,
              aliases=("rope_parameters.rope_theta", "rope_scaling.rope_theta")),
          Key("partial_rotary_factor", (), THETA, 0.25,
              aliases=("rope_parameters.partial_rotary_factor",
                       "rope_scaling.partial_rotary_factor")),
          Key("linear_conv_kernel_dim", ("conv_kernel",), INT, 4),
          Key("linear_key_head_dim", ("linear_key_head_dim",), INT, 128),
          Key("linear_value_head_dim", ("linear_value_head_dim",), INT, 128),
          Key("linear_num_key_heads", ("linear_key_heads",), INT, 16),
          Key("linear_num_value_heads", ("linear_value_heads",), INT, 32),
          Key("moe_intermediate_size", ("moe_d_ff",), INT, 512),
          Key("shared_expert_intermediate_size", (), INT, 512),
          Key("num_experts", (), NONNEG, 512),
          Key("num_experts_per_tok", ("experts_per_token",), INT, 10),
          Key("norm_topk_prob", ("norm_topk_prob",), BOOL, True),
          Key("decoder_sparse_step", (), INT, 1),
          Key("mlp_only_layers", (), LIST, None),
          Key("full_attention_interval", (), INT, 4),
          Key("layer_types", (), LIST, None)),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, norm_offset=True, qk_norm="head",
                                attn_output_gate=True, mlp_bias=False, router="softmax",
                                router_bias=False, routed_scaling_factor=1.0, linear_chunk=64)),
    rules="(1 + w) RMSNorm everywhere (Qwen3NextRMSNorm) but the linear-attention output's "
          "gated RMSNorm (Qwen3NextRMSNormGated); full-attention layers with q_proj computing "
          "each head's query and a sigmoid gate on the attention output, the per-head QK-norm "
          "and partial RoPE (Qwen3NextAttention); gated DeltaNet layers (Qwen3NextGatedDeltaNet, "
          "chunk 64 as torch_chunk_gated_delta_rule); experts with a softmax router and a "
          "shared expert gated by sigmoid(shared_expert_gate(x)) (Qwen3NextSparseMoeBlock)",
    names=QWEN3_NEXT_NAMES, must=rope_must(partial=True), noted=(ATTENTION_DROPOUT,),
    # the router's training loss and its output switch; use_sliding_window, sliding_window
    # and max_window_layers: Qwen3NextConfig and its model read none of them
    free=ROUTER_FREE | {"use_sliding_window", "sliding_window", "max_window_layers"},
    derived=(Derived(("layer_types", "num_experts", "num_shared_experts", "shared_d_ff",
                      "shared_expert_gate", "dense_layers", "rotary_dim"),
                     ("num_hidden_layers", "layer_types", "full_attention_interval",
                      "num_experts", "decoder_sparse_step", "mlp_only_layers",
                      "shared_expert_intermediate_size", "moe_intermediate_size", "head_dim",
                      "partial_rotary_factor"), _qwen3_next_layers,
                     "linear_attention layers: layer_types, else those where (i + 1) % "
                     "full_attention_interval ≠ 0; dense layers: mlp_only_layers and (i + 1) % "
                     "decoder_sparse_step ≠ 0; the shared expert as shared/moe "
                     "intermediate_size experts (or one of its own width), gated; RoPE on int(head_dim · "
                     "partial_rotary_factor) dims (Qwen3NextConfig, modeling_qwen3_next.py)"),),
    experts_implementation="batched_mm",
))


# ---- Nemotron-H: one sublayer per block, Mamba-2 (M), attention without RoPE (*) or a
# squared-ReLU MLP (-) (transformers 5.23.0's configuration_nemotron_h.py, modeling_nemotron_h.py)
NEMOTRON_KINDS = {"M": "mamba", "*": "global", "-": "mlp", "E": "mlp",
                  "linear_attention": "mamba", "mamba": "mamba", "full_attention": "global",
                  "attention": "global", "mlp": "mlp", "moe": "mlp"}


def _nemotron_h_layers(v: Mapping, where: str):
    """NemotronHConfig.__post_init__: layers_block_type (layer_types) as given, else the
    hybrid_override_pattern's characters (M Mamba-2, * attention, - MLP, E experts; absent
    both: "ME*-", NemotronHConfig's default; null fails there); the layer count is that list's length (num_hidden_layers is then ignored)."""
    given, pattern = v["layers_block_type"], v["hybrid_override_pattern"]
    kinds = list(pattern) if given is None and isinstance(pattern, str) else given
    if not isinstance(kinds, list) or not kinds:
        raise UsageError(f"{where}: hybrid_override_pattern (or layers_block_type) must name "
                         f"the layers, e.g. \"M*-\"")
    bad = [k for k in kinds if k not in NEMOTRON_KINDS]
    if bad:
        raise UsageError(f"{where}: unknown Nemotron-H layer kind {bad[0]!r} (M, *, -, E)")
    # E: an MLP block whose MLP is NemotronHMoE (hf_types_mamba_moe.py)
    return {"num_layers": len(kinds), "layer_types": tuple(NEMOTRON_KINDS[k] for k in kinds),
            **nemotron_experts(v, where, [k in ("E", "moe") for k in kinds])}, (
        f"{len(kinds)} layers from the pattern (num_hidden_layers {v['num_hidden_layers']} is "
        f"ignored where they differ, as NemotronHConfig does).",)


NEMOTRON_H_NAMES = ModuleNames(
    blocks="model.layers",
    block=MappingProxyType({
        "ln1": "norm", "attn": "mixer", "attn.q_proj": "mixer.q_proj",
        "attn.k_proj": "mixer.k_proj", "attn.v_proj": "mixer.v_proj",
        "attn.output_proj": "mixer.o_proj", "mixer": "mixer", "mixer.conv1d": "mixer.conv1d",
        "mixer.in_proj": "mixer.in_proj", "mixer.norm": "mixer.norm",
        "mixer.out_proj": "mixer.out_proj", "ffn.w1": "mixer.up_proj",
        "ffn.w2": "mixer.down_proj", **NEMOTRON_MOE_NAMES}),
    top=MappingProxyType({"token_embeddings": "model.embeddings", "ln_final": "model.norm_f",
                          "lm_head": "lm_head"}),
)

register(HFType(
    "nemotron_h", "NemotronHForCausalLM",
    keys=(Key("vocab_size", ("vocab_size",), INT, Required(131072)),
          Key("hidden_size", ("d_model",), INT, Required(4096)),
          Key("intermediate_size", ("d_ff",), INT, Required(21504)),
          Key("num_hidden_layers", (), INT, 52),
          Key("num_attention_heads", ("num_heads",), INT, Required(32)),
          Key("max_position_embeddings", ("context_length",), INT, 4096),
          kv_heads(8, INT), head_dim(128, INT),
          Key("mlp_bias", ("mlp_bias",), BOOL, False),
          Key("mlp_hidden_act", ("mlp",), CHOICE, "relu2", MappingProxyType({"relu2": "relu2"})),
          Key("layer_norm_epsilon", ("norm_eps",), EPS, 1e-5),
          Key("tie_word_embeddings", ("tie_embeddings",), BOOL, False),
          Key("ssm_state_size", ("ssm_state",), INT, 128),
          Key("mamba_num_heads", ("mamba_heads",), INT, 128),
          Key("mamba_head_dim", ("mamba_head_dim",), INT, 64),
          Key("n_groups", ("mamba_groups",), INT, 8, aliases=("mamba_n_groups",)),
          Key("conv_kernel", ("conv_kernel",), INT, 4, aliases=("mamba_d_conv",)),
          Key("chunk_size", ("mamba_chunk",), INT, 128, aliases=("mamba_chunk_size",)),
          Key("use_conv_bias", ("conv_bias",), BOOL, True, aliases=("mamba_conv_bias",)),
          Key("use_bias", ("mamba_bias",), BOOL, False),
          Key("time_step_min", ("mamba_dt_min",), EPS, 0.001, aliases=("mamba_dt_min",)),
          Key("mamba_hidden_act", (), CHOICE, "silu", MappingProxyType({"silu": "silu"})),
          Key("hybrid_override_pattern", (), PATTERN, "ME*-"),
          Key("layers_block_type", (), LIST, None, aliases=("layer_types",)))
        + NEMOTRON_MOE_KEYS,
    fixed=MappingProxyType(dict(norm="rmsnorm", norm_placement="pre", positions="none",
                                block="single", qk_norm="none", qkv_bias=False,
                                out_bias=False)),
    rules="blocks of one sublayer each, x + mixer(norm(x)) (NemotronHBlock): Mamba-2 "
          "(NemotronHMamba2Mixer: in_proj to z, x·B·C, dt; conv1d and SiLU; the chunked SSD "
          "scan; a grouped gated RMSNorm; out_proj), grouped attention without RoPE and "
          "without biases (NemotronHAttention), a squared-ReLU MLP (NemotronHMLP), or (E) "
          "squared-ReLU experts with a sigmoid router whose choice adds "
          "e_score_correction_bias (a buffer) beside one shared squared-ReLU MLP "
          "(NemotronHMoE); final norm_f; head untied unless tie_word_embeddings",
    names=NEMOTRON_H_NAMES, must=(
        Must("sliding_window", lambda v, d: v is None, "null",
             "a sliding window on the attention blocks"),),
    noted=(ATTENTION_DROPOUT, Noted("hidden_dropout", lambda v: v in (0, 0.0, None),
                                    "{settings}: dropout is not counted")) + NEMOTRON_MOE_NOTED,
    # keys NemotronHConfig keeps that no NemotronH module reads for a count (the SSM's
    # init and dt range but time_step_min, its cache dtype, kernel switches, the
    # expand ratio the heads replace, attention_bias: NemotronHAttention has no biases)
    free=frozenset({"expand", "time_step_max", "time_step_floor", "time_step_limit",
                    "time_step_rank", "rescale_prenorm_residual", "residual_in_fp32",
                    "num_logits_to_keep", "use_mamba_kernels", "mamba_proj_bias",
                    "mamba_ssm_cache_dtype", "attention_bias", "attention_head_dim",
                    "rms_norm_eps"}) | NEMOTRON_MOE_FREE,
    derived=(Derived(("num_layers", "layer_types") + NEMOTRON_MOE_FIELDS,
                     ("num_hidden_layers", "hybrid_override_pattern", "layers_block_type")
                     + NEMOTRON_MOE_KEY_NAMES, _nemotron_h_layers,
                     "the layers: layers_block_type, else hybrid_override_pattern's characters "
                     "(M Mamba-2, * attention, - MLP, E experts: NemotronHMoE), their count "
                     "the layer count (NemotronHConfig.__post_init__)"),),
    experts_implementation="batched_mm",
))
