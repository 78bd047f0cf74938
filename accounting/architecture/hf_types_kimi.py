"""Moonshot AI's Kimi model_types (issue 31): kimi_k2 (Kimi-K2: DeepSeek-V3's architecture
under its own model_type), kimi_k25 (Kimi-K2.5: K2's language model in a vision-language
wrapper, INT4 experts) and kimi_linear (Kimi Linear: Kimi Delta Attention beside latent
attention). Registered on import (hf_config.py imports this module). Rules from transformers
5.23.0's models/deepseek_v3, models/kimi_k25 and models/kimi_linear.
"""
from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Mapping

from accounting.formats.hf_quant import scheme_from_config
from accounting.runtime.errors import UsageError
from accounting.architecture.hf_schema import (
    ATTENTION_DROPOUT, BOOL, CHOICE, DEEPSEEK_V3_NAMES, EPS,
    INT, INT_OR_NULL, LIST, LLAMA_FAMILY, NONNEG, THETA, WRAPPERS, carry_dtype, check_wrapper_keys, Derived,
    HFType, Key, ModuleNames, Must, Required, register, short)
from accounting.architecture.hf_types_moe import DEEPSEEK_FREE, MLA_KEYS, mla_must

# ---- kimi_k2 (moonshotai/Kimi-K2-Instruct, Kimi-K2-Base, Kimi-K2-Thinking) -------------------
# The Hub file names model_type kimi_k2 with auto_map (Moonshot's configuration_deepseek.py /
# modeling_deepseek.py: DeepSeek-V3's code) and architectures DeepseekV3ForCausalLM;
# transformers 5.23 has no kimi_k2 type and builds the file as deepseek_v3 (Kimi_K25Config's
# __post_init__ does the same for K2.5's text_config: "kimi_k2" -> "deepseek_v3"). So does the
# tool: every key is read by deepseek_v3's row (hf_types_moe.py), which judges them all.
_K2_SAID = ("model_type kimi_k2: DeepSeek-V3's architecture (Moonshot's code is DeepSeek-V3's "
            "modeling_deepseek.py), read as model_type deepseek_v3, the class transformers 5.23 "
            "builds (DeepseekV3ForCausalLM).")


def _unwrap_kimi_k2(data: Mapping, where: str) -> tuple[dict, tuple[str, ...]]:
    return {**data, "model_type": "deepseek_v3"}, (_K2_SAID,)


WRAPPERS["kimi_k2"] = _unwrap_kimi_k2


# ---- kimi_k25 (moonshotai/Kimi-K2.5): K2's text model with a MoonViT tower ---------------------
# Kimi_K25Config (configuration_kimi_k25.py): text_config (a deepseek_v3 config; "kimi_k2"
# read as it), vision_config (Kimi_K25VisionConfig), the projector's sizes and token ids.
# Kimi_K25ForConditionalGeneration builds Kimi_K25Model (vision_tower, language_model =
# AutoModel(text_config), mm_projector) and lm_head, tied to the embedding by the TOP-LEVEL
# tie_word_embeddings (Kimi_K25Config's default True; _tied_weights_keys; measured: the
# published file's false gives K2's untied 1,026,408,209,408 language-model parameters).
_K25_OUTER = frozenset({
    "text_config", "vision_config", "tie_word_embeddings", "projection_hidden_size",
    "projection_layer_norm_eps", "image_token_id", "video_token_id", "vision_start_token_id",
    "vision_end_token_id",
    # Moonshot's own configuration_kimi_k25.py (auto_map): placeholders and the vision
    # chunking of its processor, no module of the language model
    "media_placeholder_token_id", "video_placeholder", "use_unified_vision_chunk",
    "ignore_index"})


def _unwrap_kimi_k25(data: Mapping, where: str) -> tuple[dict, tuple[str, ...]]:
    check_wrapper_keys(data, where, _K25_OUTER)
    text = data.get("text_config")
    if not isinstance(text, dict) or text.get("model_type", "deepseek_v3") not in (
            "deepseek_v3", "kimi_k2"):
        raise UsageError(f"{where}: text_config must be the language model's config object "
                         f"(model_type kimi_k2 or deepseek_v3), got {short(text)}; transformers "
                         f"would otherwise build its default DeepseekV3Config")
    inner = {**text, "model_type": "deepseek_v3"}
    carry_dtype(data, inner)
    tie = data.get("tie_word_embeddings", True)  # Kimi_K25Config's default
    if "tie_word_embeddings" in inner and inner["tie_word_embeddings"] != tie:
        absent = "" if "tie_word_embeddings" in data else " (absent: Kimi_K25Config default)"
        raise UsageError(f"{where}: tie_word_embeddings {short(tie)}{absent} contradicts "
                         f"text_config's {short(inner['tie_word_embeddings'])}; transformers "
                         f"ties by the top-level key, so give one value")
    inner["tie_word_embeddings"] = tie
    notes = ["model_type kimi_k25: the language model of Kimi-K2.5's vision-language config, "
             "read from its text_config as model_type deepseek_v3 (K2's); the MoonViT vision "
             "tower and the multimodal projector (vision_config, projection_hidden_size) are "
             "counted beside it (parameters.vision; accounting/architecture/vision.py), and "
             "transformers' cross-check builds DeepseekV3ForCausalLM from text_config "
             "(AutoModelForImageTextToText builds Kimi_K25ForConditionalGeneration, vision "
             "included)."]
    quant = inner.pop("quantization_config", None)
    if quant is not None:
        scheme = scheme_from_config(quant)  # exit 2 for one the formats cannot lay out
        notes.append(f"text_config.quantization_config: the checkpoint stores its weights as "
                     f"{scheme.label}, except {', '.join(scheme.ignore) or 'none'}; the counts "
                     f"are of the model's parameters as transformers builds them (dense tensors "
                     f"of the config's shapes); 'serve' reads the stored bytes.")
    return inner, tuple(notes)


WRAPPERS["kimi_k25"] = _unwrap_kimi_k25


def checkpoint_quantization(data: Mapping):
    """A config.json's quantization_config: at the top, else a Kimi-K2.5 file's text_config's
    (its language model's weights are the quantized ones)."""
    if data.get("quantization_config") is not None or data.get("model_type") != "kimi_k25":
        return data.get("quantization_config")
    text = data.get("text_config")
    return text.get("quantization_config") if isinstance(text, dict) else None


# ---- kimi_linear (moonshotai/Kimi-Linear-48B-A3B-Instruct, -Base) ------------------------------
# KimiLinearConfig (configuration_kimi_linear.py) and KimiLinearForCausalLM
# (modeling_kimi_linear.py): KimiLinearDecoderLayer runs KimiLinearDeltaAttention (KDA) where
# layer_types says linear_attention, else KimiLinearAttention: DeepSeek's latent attention
# without any rotary embedding (KimiLinearModel deletes rotary_emb; "MLA with NoPE"),
# q_proj where q_lora_rank is null; its MLP is DeepSeek-V3's (KimiLinearMoE: a sigmoid router
# with e_score_correction_bias, group-limited top-k, shared experts) from
# first_k_dense_replace on (mlp_layer_types), else a dense MLP. The Hub file writes the
# linear layers in linear_attn_config (1-indexed kda_layers and full_attn_layers, num_heads,
# head_dim, short_conv_kernel_size), which __post_init__ reads first.
def _kimi_linear_layers(v: Mapping, where: str):
    """Layer kinds: layer_types, else linear_attn_config's 1-indexed full_attn_layers and
    kda_layers, else full attention at every i > 0 with i % 4 == 0 (KimiLinearConfig.
    __post_init__); dense layers: mlp_layer_types, else those below first_k_dense_replace."""
    L, given = v["num_hidden_layers"], v["layer_types"]
    full, kda = v["linear_attn_config.full_attn_layers"], v["linear_attn_config.kda_layers"]
    if given is None and full is not None and kda is not None:
        given = [None] * L
        for idxs, kind in ((full, "full_attention"), (kda, "linear_attention")):
            for i in idxs:
                if isinstance(i, bool) or not isinstance(i, int) or not 1 <= i <= L:
                    raise UsageError(f"{where}: linear_attn_config's layer numbers run from 1 "
                                     f"to num_hidden_layers {L}, got {short(i)}")
                given[i - 1] = kind
    elif given is None:
        given = ["full_attention" if i and i % 4 == 0 else "linear_attention" for i in range(L)]
    kinds = {"full_attention": "global", "linear_attention": "kda"}
    if not isinstance(given, list) or len(given) != L or any(t not in kinds for t in given):
        raise UsageError(f"{where}: layer_types (or linear_attn_config's full_attn_layers and "
                         f"kda_layers, which must name every layer once) must give {L} entries "
                         f"(num_hidden_layers), each full_attention or linear_attention, got "
                         f"{short(given)}")
    mlp = v["mlp_layer_types"]
    if mlp is None:
        mlp = ["dense" if i < v["first_k_dense_replace"] else "sparse" for i in range(L)]
    if not isinstance(mlp, list) or len(mlp) != L or any(t not in ("dense", "sparse") for t in mlp):
        raise UsageError(f"{where}: mlp_layer_types must list {L} entries, each dense or "
                         f"sparse, got {short(mlp)}")
    dense = tuple(i for i, t in enumerate(mlp) if t == "dense")
    if len(dense) == L:
        raise UsageError(f"{where}: no sparse layer; the spec's experts need one")
    E, groups = v["num_experts"], v["num_expert_group"]
    if E % groups or E // groups < 2:
        raise UsageError(f"{where}: num_experts {E} in num_expert_group {groups} groups: "
                         f"transformers' router sums each group's top 2 scores, so the groups "
                         f"must divide the experts, at least 2 each")
    n_kda = sum(t == "linear_attention" for t in given)
    return {"layer_types": tuple(kinds[t] for t in given), "dense_layers": dense}, (
        f"{n_kda} of {L} layers run Kimi Delta Attention, {L - n_kda} latent attention "
        f"without RoPE; {len(dense)} dense MLP layers.",)


_KDA_CONFIG_KEYS = frozenset({"head_dim", "num_heads", "short_conv_kernel_size",
                              "full_attn_layers", "kda_layers"})
KIMI_LINEAR_NAMES = ModuleNames(DEEPSEEK_V3_NAMES.blocks, MappingProxyType({
    **DEEPSEEK_V3_NAMES.block, "kda": "self_attn",
    **{f"kda.{m}": f"self_attn.{m}" for m in (
        "q_proj", "k_proj", "v_proj", "conv1d", "forget_gate", "forget_gate.f_a_proj",
        "forget_gate.f_b_proj", "b_proj", "g_a_proj", "g_b_proj", "o_norm", "o_proj")}}),
    DEEPSEEK_V3_NAMES.top)

register(HFType(
    "kimi_linear", "KimiLinearForCausalLM",
    keys=(Key("vocab_size", ("vocab_size",), INT, Required(163840)),
          Key("hidden_size", ("d_model",), INT, Required(2304)),
          Key("intermediate_size", ("d_ff",), INT, Required(9216)),
          Key("num_hidden_layers", ("num_layers",), INT, Required(27)),
          Key("num_attention_heads", ("num_heads",), INT, Required(32)),
          # KimiLinearConfig.attribute_map: max_position_embeddings is model_max_length
          Key("model_max_length", ("context_length",), INT, Required(1048576),
              aliases=("max_position_embeddings",)),
          Key("q_lora_rank", ("q_lora_rank",), INT_OR_NULL, None)) + MLA_KEYS[1:] + (
          Key("hidden_act", ("mlp",), CHOICE, "silu", MappingProxyType({"silu": "swiglu"})),
          Key("rms_norm_eps", ("norm_eps",), EPS, 1e-5),
          Key("tie_word_embeddings", ("tie_embeddings",), BOOL, False),
          # KDA: one head count and width (linear_attn_config's, read first)
          Key("linear_num_heads", ("linear_key_heads", "linear_value_heads"), INT, 32,
              aliases=("linear_attn_config.num_heads",)),
          Key("linear_head_dim", ("linear_key_head_dim", "linear_value_head_dim"), INT, 128,
              aliases=("linear_attn_config.head_dim",)),
          Key("linear_conv_kernel_dim", ("conv_kernel",), INT, 4,
              aliases=("linear_attn_config.short_conv_kernel_size",)),
          Key("linear_attn_config.full_attn_layers", (), LIST, None),
          Key("linear_attn_config.kda_layers", (), LIST, None),
          Key("layer_types", (), LIST, None),
          # the experts (attribute_map: the Hub file's spellings first)
          Key("moe_intermediate_size", ("moe_d_ff",), INT, Required(1024)),
          Key("num_experts", ("num_experts",), INT, Required(256), aliases=("num_local_experts",)),
          Key("num_experts_per_token", ("experts_per_token",), INT, Required(8),
              aliases=("num_experts_per_tok",)),
          Key("num_shared_experts", ("num_shared_experts",), NONNEG, Required(1),
              aliases=("n_shared_experts",)),
          Key("moe_renormalize", ("norm_topk_prob",), BOOL, True, aliases=("norm_topk_prob",)),
          Key("num_expert_group", ("router_groups",), INT, 1, aliases=("n_group",)),
          Key("topk_group", ("router_topk_groups",), INT, 1),
          Key("routed_scaling_factor", ("routed_scaling_factor",), THETA, 2.446),
          Key("first_k_dense_replace", (), NONNEG, 1),
          Key("mlp_layer_types", (), LIST, None)),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, positions="none", qk_norm="none", mlp_bias=False,
                                router="sigmoid", router_bias=True, linear_chunk=64)),
    rules="Kimi Delta Attention layers (KimiLinearDeltaAttention: q/k/v_proj, one short conv "
          "over Q, K, V with SiLU, a forget gate f_b_proj(f_a_proj(x)) + dt_bias through "
          "−exp(A_log)·softplus, one log-decay per head and key channel, β = sigmoid(b_proj), "
          "the chunked delta rule, chunk 64, as fla's chunk_kda; o_norm gated by "
          "sigmoid(g_b_proj(g_a_proj(x))); o_proj) and latent attention without RoPE "
          "(KimiLinearAttention); DeepSeek-V3's experts (KimiLinearMoE) "
          "(modeling_kimi_linear.py)",
    names=KIMI_LINEAR_NAMES,
    # num_key_value_heads: KimiLinearConfig's default is 32 (DeepSeek-V3's 128)
    must=(replace(mla_must("KimiLinear")[0], default=32),) + mla_must("KimiLinear")[1:] + (
        Must("linear_attn_config", lambda v, d: v is None or (
            isinstance(v, dict) and set(v) <= _KDA_CONFIG_KEYS), "an object of "
             + ", ".join(sorted(_KDA_CONFIG_KEYS)), "KDA settings transformers' "
             "KimiLinearConfig does not read (another gate or layout)"),
        # keys of Moonshot's own code (auto_map) that transformers does not read
        Must("mla_use_nope", lambda v, d: v in (None, True), "true",
             "latent attention with RoPE, which transformers' KimiLinearAttention does not "
             "have"),
        Must("moe_router_activation_func", lambda v, d: v in (None, "sigmoid"), "sigmoid",
             "a router transformers' KimiLinearMoE does not build (sigmoid)"),
        Must("use_grouped_topk", lambda v, d: v in (None, True), "true",
             "a router without the group-limited top-k transformers' KimiLinearMoE always "
             "runs"),
        Must("num_nextn_predict_layers", lambda v, d: v in (None, 0), "0 or absent",
             "multi-token-prediction layers, which KimiLinearConfig does not have")),
    noted=(ATTENTION_DROPOUT,),
    # no rotary embedding anywhere: RoPE keys change nothing; head_dim is overwritten by
    # qk_rope_head_dim (KimiLinearConfig.__post_init__)
    free=DEEPSEEK_FREE | {"rope_theta", "rope_scaling", "rope_parameters", "head_dim"},
    derived=(Derived(("layer_types", "dense_layers"),
                     ("num_hidden_layers", "layer_types", "linear_attn_config.full_attn_layers",
                      "linear_attn_config.kda_layers", "mlp_layer_types",
                      "first_k_dense_replace", "num_experts", "num_expert_group"),
                     _kimi_linear_layers,
                     "KDA layers: layer_types, else linear_attn_config's 1-indexed kda_layers "
                     "and full_attn_layers, else all but every 4th from layer 4; dense MLP "
                     "layers: mlp_layer_types, else those below first_k_dense_replace "
                     "(KimiLinearConfig.__post_init__)"),),
    experts_implementation="batched_mm",
))
