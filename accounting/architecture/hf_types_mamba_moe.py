"""Mamba-2 hybrids with experts (issue 31): Nemotron-H's expert blocks (hybrid_override_pattern
'E', NVIDIA Nemotron-3-Nano-30B-A3B; the nemotron_h row itself is in hf_types_hybrid.py and
reads these keys) and IBM Granite 4.0-H (granitemoehybrid), registered on import (hf_config.py
imports this module). Defaults and rules from transformers 5.23.0's configuration_<type>.py
and modeling_<type>.py.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from accounting.runtime.errors import UsageError
from accounting.architecture.hf_schema import (
    ATTENTION_DROPOUT, BOOL, CHOICE, EPS, GATED_ACTS, INT, INT_OR_NULL, LIST, NONNEG, PATTERN, THETA,
    WINDOW_PATTERN, Derived, HFType,
    Key, ModuleNames, Noted, Required, kv_heads, register, rope_must)
from accounting.architecture.hf_types_moe import ROUTER_FREE

# ---- Nemotron-H's expert blocks (NemotronHMoE, modeling_nemotron_h.py): a sigmoid router
# (NemotronHTopkRouter: F.linear in float32, sigmoid, + e_score_correction_bias, a buffer,
# for the choice, n_group groups ranked by their two best, the top-k renormalised and times
# routed_scaling_factor), n_routed_experts squared-ReLU experts of moe_intermediate_size
# (NemotronHExperts: up_proj, down_proj; no gate), one shared squared-ReLU MLP of
# moe_shared_expert_intermediate_size (NemotronHMLP), added to the routed output; with
# moe_latent_size the routed tokens pass fc1_latent_proj (d → latent) before the experts
# (which run at the latent width) and fc2_latent_proj after (Nemotron-3-Super).
NEMOTRON_MOE_KEYS = (
    Key("n_routed_experts", (), INT, 8, aliases=("num_local_experts",)),
    Key("num_experts_per_tok", (), INT, 2),
    Key("moe_intermediate_size", (), INT, 7688),
    Key("moe_shared_expert_intermediate_size", (), INT, 7688),
    Key("n_group", (), INT, 1),
    Key("topk_group", (), INT, 1),
    Key("norm_topk_prob", (), BOOL, True),
    Key("routed_scaling_factor", (), THETA, 1.0),
    Key("moe_latent_size", (), INT_OR_NULL, None))
NEMOTRON_MOE_KEY_NAMES = tuple(k.hf for k in NEMOTRON_MOE_KEYS)
NEMOTRON_MOE_FIELDS = ("num_experts", "experts_per_token", "moe_d_ff", "num_shared_experts",
                       "shared_d_ff", "router_groups", "router_topk_groups", "norm_topk_prob",
                       "routed_scaling_factor", "router", "router_bias", "dense_layers",
                       "moe_latent_size")
NEMOTRON_MOE_NOTED = (
    Noted("num_nextn_predict_layers", lambda v: v in (0, None),
          "{settings}: transformers' NemotronH builds no multi-token-prediction layers (it "
          "skips the checkpoint's mtp.* weights), so they are not counted",
          valid=(lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)
                                         and v >= 0), "a non-negative integer")),)
# n_shared_experts: NemotronHMoE builds one shared MLP of moe_shared_expert_intermediate_size
# whatever it says; moe_shared_expert_overlap: a scheduling switch; the MTP layers' pattern
NEMOTRON_MOE_FREE = frozenset({"n_shared_experts", "moe_shared_expert_overlap",
                               "mtp_layers_block_type", "mtp_hybrid_override_pattern"}) \
    | ROUTER_FREE
NEMOTRON_MOE_NAMES = MappingProxyType({
    "ffn.router": "mixer.gate", "ffn.experts": "mixer.experts",
    "ffn.shared.w1": "mixer.shared_experts.up_proj",
    "ffn.shared.w2": "mixer.shared_experts.down_proj",
    "ffn.fc1_latent": "mixer.fc1_latent_proj", "ffn.fc2_latent": "mixer.fc2_latent_proj"})


def nemotron_experts(v: Mapping, where: str, experts: list[bool]) -> dict:
    """The spec's MoE fields for the layers marked True (NemotronHMoE), none without any."""
    if not any(experts):
        return {}
    E, groups = v["n_routed_experts"], v["n_group"]
    if E % groups:
        raise UsageError(f"{where}: n_group {groups} must divide n_routed_experts {E} "
                         f"(NemotronHTopkRouter views the scores as n_group groups)")
    return {"num_experts": E, "experts_per_token": v["num_experts_per_tok"],
            "moe_d_ff": v["moe_intermediate_size"], "num_shared_experts": 1,
            "shared_d_ff": v["moe_shared_expert_intermediate_size"], "router_groups": groups,
            "router_topk_groups": v["topk_group"], "norm_topk_prob": v["norm_topk_prob"],
            "routed_scaling_factor": v["routed_scaling_factor"], "router": "sigmoid",
            "router_bias": True, "moe_latent_size": v["moe_latent_size"],
            "dense_layers": tuple(i for i, e in enumerate(experts) if not e)}


# ---- Granite 4.0-H (granitemoehybrid): Mamba-2 or attention, then a mixture of experts
# beside a shared SwiGLU MLP in every layer, with Granite's multipliers
# (transformers 5.23.0's configuration_granitemoehybrid.py, modeling_granitemoehybrid.py)
GRANITE_KINDS = {"mamba": "mamba", "linear_attention": "mamba", "attention": "global",
                 "full_attention": "global"}


def _granite_layers(v: Mapping, where: str):
    """GraniteMoeHybridConfig.__post_init__: layer_types as given (transformers' legacy
    names mamba and attention read as linear_attention and full_attention), else every
    layer Mamba-2; mamba_d_head "auto" is mamba_expand·hidden_size // mamba_n_heads;
    GraniteMoeHybridDecoderLayer: a MoE (num_local_experts > 0) plus shared_mlp, else
    shared_mlp alone; RoPE iff position_embedding_type is "rope"."""
    L, given = v["num_hidden_layers"], v["layer_types"]
    given = ["mamba"] * L if given is None else given
    if not isinstance(given, list) or len(given) != L or any(t not in GRANITE_KINDS
                                                             for t in given):
        raise UsageError(f"{where}: layer_types must list {L} entries (num_hidden_layers), "
                         f"each mamba or attention")
    fields: dict = {}
    types = tuple(GRANITE_KINDS[t] for t in given)
    if "global" not in types:
        raise UsageError(f"{where}: layer_types has no attention layer (null: every layer "
                         f"Mamba-2); transformers' GraniteMoeHybridModel fails on it (its "
                         f"cache's get_seq_length needs an attention layer)")
    if "mamba" in types:
        d, heads, expand = v["hidden_size"], v["mamba_n_heads"], v["mamba_expand"]
        if not isinstance(expand, int) or isinstance(expand, bool) or expand <= 0:
            raise UsageError(f"{where}: mamba_expand must be a positive integer, got {expand!r}")
        inner, head = expand * d, v["mamba_d_head"]
        if head == "auto":
            head = inner // heads
        if not isinstance(head, int) or isinstance(head, bool) or head * heads != inner:
            raise UsageError(f"{where}: mamba_n_heads {heads} × mamba_d_head {head!r} must be "
                             f"mamba_expand·hidden_size = {inner} (GraniteMoeHybridConfig)")
        limit = v["time_step_limit"]
        if not (isinstance(limit, (list, tuple)) and len(limit) == 2 and isinstance(limit[0], (int, float))
                and not isinstance(limit[0], bool) and 0 <= limit[0]):
            raise UsageError(f"{where}: time_step_limit must be [min, max] with min ≥ 0, got "
                             f"{limit!r}")
        fields.update(layer_types=types, mamba_heads=heads, mamba_head_dim=head,
                      mamba_dt_min=float(limit[0]))
    E, shared = v["num_local_experts"], v["shared_intermediate_size"]
    if E:
        fields.update(num_experts=E, moe_d_ff=v["intermediate_size"], num_shared_experts=1,
                      shared_d_ff=shared, experts_per_token=v["num_experts_per_tok"])
    fields["d_ff"] = shared  # the dense MLP (no experts) is shared_mlp alone
    pos = v["position_embedding_type"]
    if pos not in (None, "rope", "nope"):
        raise UsageError(f"{where}: position_embedding_type must be rope, nope or null, got "
                         f"{pos!r}")
    fields["positions"] = "rope" if pos == "rope" else "none"
    if pos == "rope":  # rope_theta counts nothing, but the spec keeps it only with RoPE
        fields["rope_theta"] = v["rope_theta"]
    return fields, ()


def _granite_logits(v: Mapping, where: str):
    """GraniteMoeHybridForCausalLM: logits / logits_scaling, counted as the spec's
    logit_scale (a multiply by 1/logits_scaling: one op per logit either way)."""
    return {"logit_scale": 1 / v["logits_scaling"]}, ()


GRANITE_NAMES = ModuleNames(
    blocks="model.layers",
    block=MappingProxyType({
        "ln1": "input_layernorm", "ln2": "post_attention_layernorm", "attn": "self_attn",
        "attn.q_proj": "self_attn.q_proj", "attn.k_proj": "self_attn.k_proj",
        "attn.v_proj": "self_attn.v_proj", "attn.output_proj": "self_attn.o_proj",
        "mixer": "mamba", "mixer.conv1d": "mamba.conv1d", "mixer.in_proj": "mamba.in_proj",
        "mixer.norm": "mamba.norm", "mixer.out_proj": "mamba.out_proj",
        "ffn": "block_sparse_moe", "ffn.router": "block_sparse_moe.router",
        "ffn.experts": "block_sparse_moe.experts",
        # shared_mlp.input_linear computes the gate and up halves (2·d_s rows): the spec's
        # w1 and w3, one module of transformers'
        "ffn.shared.w1": "shared_mlp.input_linear", "ffn.shared.w3": "shared_mlp.input_linear",
        "ffn.shared.w2": "shared_mlp.output_linear",
        "ffn.w1": "shared_mlp.input_linear", "ffn.w3": "shared_mlp.input_linear",
        "ffn.w2": "shared_mlp.output_linear"}),
    top=MappingProxyType({"token_embeddings": "model.embed_tokens", "ln_final": "model.norm",
                          "lm_head": "lm_head"}),
)

register(HFType(
    "granitemoehybrid", "GraniteMoeHybridForCausalLM",
    keys=(Key("vocab_size", ("vocab_size",), INT, Required(32000)),
          Key("hidden_size", ("d_model",), INT, Required(4096)),
          Key("intermediate_size", (), INT, Required(11008)),
          Key("num_hidden_layers", ("num_layers",), INT, Required(32)),
          Key("num_attention_heads", ("num_heads",), INT, Required(32)),
          Key("max_position_embeddings", ("context_length",), INT, 2048),
          kv_heads(None),
          Key("attention_bias", ("qkv_bias", "out_bias"), BOOL, False),
          Key("hidden_act", ("mlp",), CHOICE, "silu", MappingProxyType(
              {k: a for k, a in GATED_ACTS.items() if a == "swiglu"})),
          Key("rms_norm_eps", ("norm_eps",), EPS, 1e-6),
          Key("tie_word_embeddings", ("tie_embeddings",), BOOL, False),
          Key("rope_theta", (), THETA, 10000.0,
              aliases=("rope_parameters.rope_theta", "rope_scaling.rope_theta")),
          Key("embedding_multiplier", ("embedding_multiplier",), THETA, 1.0),
          Key("residual_multiplier", ("residual_multiplier",), THETA, 1.0),
          Key("logits_scaling", (), THETA, 1.0),
          Key("num_local_experts", (), NONNEG, 8),
          Key("num_experts_per_tok", (), INT, 2),
          Key("shared_intermediate_size", (), INT, 1024),
          Key("position_embedding_type", (), PATTERN, None),
          Key("layer_types", (), LIST, None, aliases=("layers_block_type",)),
          Key("mamba_n_heads", (), INT, 128),
          Key("mamba_n_groups", ("mamba_groups",), INT, 1),
          Key("mamba_d_state", ("ssm_state",), INT, 256),
          Key("mamba_d_head", (), WINDOW_PATTERN, "auto"),
          Key("mamba_d_conv", ("conv_kernel",), INT, 4),
          Key("mamba_expand", (), INT, 2),
          Key("mamba_chunk_size", ("mamba_chunk",), INT, 256),
          Key("mamba_conv_bias", ("conv_bias",), BOOL, True),
          Key("mamba_proj_bias", ("mamba_bias",), BOOL, False),
          # only its lower end changes an op (none a count); null fails in transformers' mixer
          Key("time_step_limit", (), LIST, (0.0, float("inf")))),
    fixed=MappingProxyType(dict(norm="rmsnorm", norm_placement="pre", qk_norm="none",
                                mlp_bias=False, router="softmax", router_topk_first=True,
                                norm_topk_prob=False)),
    rules="pre-norm RMSNorm blocks (input_layernorm, post_attention_layernorm), each a Mamba-2 "
          "mixer (GraniteMoeHybridMambaLayer: in_proj to z, x·B·C, dt; conv1d and SiLU; the "
          "chunked SSD scan; a grouped gated RMSNorm; out_proj) or grouped attention "
          "(GraniteMoeHybridAttention, scores scaled by attention_multiplier), then a mixture "
          "of SwiGLU experts (GraniteMoeHybridMoE: a router whose top-k logits are softmaxed "
          "over the k, gate_up_proj and down_proj of intermediate_size) plus a shared SwiGLU "
          "MLP of shared_intermediate_size (shared_mlp); the embeddings times "
          "embedding_multiplier, each sublayer's output times residual_multiplier before its "
          "residual add, the logits divided by logits_scaling (modeling_granitemoehybrid.py)",
    names=GRANITE_NAMES, must=rope_must(),
    noted=(ATTENTION_DROPOUT,
           Noted("attention_multiplier", lambda v: False,
                 "{settings}: GraniteMoeHybridAttention scales the scores by "
                 "attention_multiplier in place of 1/√head_dim (the same one op per score)",
                 valid=(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
                        "a number"))),
    # the router's training loss and its output switch; normalization_function: every
    # norm is GraniteMoeHybridRMSNorm whatever it says; rope_scaling null (rope_must)
    free=ROUTER_FREE | {"normalization_function", "init_method"},
    derived=(Derived(("layer_types", "mamba_heads", "mamba_head_dim", "mamba_dt_min",
                      "num_experts", "moe_d_ff", "num_shared_experts", "shared_d_ff",
                      "experts_per_token", "d_ff", "positions", "rope_theta"),
                     ("num_hidden_layers", "layer_types", "hidden_size", "mamba_n_heads",
                      "mamba_d_head", "mamba_expand", "time_step_limit", "num_local_experts",
                      "intermediate_size", "shared_intermediate_size", "num_experts_per_tok",
                      "position_embedding_type", "rope_theta"), _granite_layers,
                     "mamba layers: layer_types (mamba or attention), else every layer; "
                     "mamba_d_head auto = mamba_expand·hidden_size // mamba_n_heads; experts "
                     "of intermediate_size with one shared MLP of shared_intermediate_size "
                     "(num_local_experts 0: that MLP alone); RoPE iff position_embedding_type "
                     "rope (GraniteMoeHybridConfig, modeling_granitemoehybrid.py)"),
             Derived(("logit_scale",), ("logits_scaling",), _granite_logits,
                     "logit_scale = 1/logits_scaling (GraniteMoeHybridForCausalLM divides "
                     "the logits)")),
    experts_implementation="batched_mm",
))
