"""Hugging Face config.json -> the architecture spec (ModelConfig): one table per model_type.

A config.json is recognised by its "model_type". Each supported type is one HFType row
below, and nothing else in the tool knows about it:

  * `keys`: the keys that change a count and the spec fields they set, with the default
    transformers uses when a key is absent (or Required: a size whose class default is
    some reference model's, which is never what a user means);
  * `derive`: the spec fields that several keys decide together, by transformers' own rule
    (Qwen's use_sliding_window/max_window_layers/layer_types -> which layers are local;
    Qwen3-MoE's decoder_sparse_step/mlp_only_layers and DeepSeek-V3's first_k_dense_replace
    -> which layers keep a dense MLP);
  * `fixed`: the model_type's rules that have no key (Qwen2's Q/K/V biases, Qwen3's
    per-head QK-norm, OLMo-2's full-width QK-norm and post-sublayer norms, DeepSeek-V3's
    sigmoid router with its correction bias);
  * `must`: keys the spec honours at some values only (DeepSeek-V3's scoring_func sigmoid);
  * `noted`: keys accepted with a note in the output (dropout: not counted);
  * `free`: keys that change no count, listed so that an unknown key is a decision;
  * `names`: the module names transformers gives the ledger's modules (for its cross-check).

Every key of a file falls in one of these, in the shared lists (COMMON_FREE, COMMON_MUST,
REFUSED) or is refused as unknown: no key is dropped silently. Defaults and rules are read
from transformers 5.23.0: models/<type>/configuration_<type>.py (class defaults) and
modeling_<type>.py (which biases and norms each type builds). Pure Python.
"""
from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Mapping

from accounting.spec.config import MAX_SIZE, ModelConfig
from accounting.spec.own_format import config_from_dict, read_json
from accounting.runtime.errors import UsageError, shorten

# The transformers release the tables below are read from (pyproject's [hf] extra pins it).
TRANSFORMERS_VERSION = "5.23.0"

# ---- value kinds ---------------------------------------------------------------------------
INT = "a positive integer"
INT_OR_NULL = "a positive integer or null"
NONNEG = "a non-negative integer"
LIST = "a list or null"  # its entries are checked by the type's derive rule
BOOL = "true or false"
THETA = "a positive number"
EPS = "a non-negative number"
CHOICE = "one of"


@dataclass(frozen=True)
class Required:
    """No default is taken: transformers would fall back to this class default (a
    reference model's size), which is never what a config that omits it means."""
    transformers_default: object


@dataclass(frozen=True)
class Key:
    """A key that changes a count, read into spec fields (`fields`, all set to its value).
    None (JSON null) of an INT_OR_NULL key leaves the fields at the spec's default, which
    is transformers' meaning of null (num_kv_heads = heads, head_dim = d/h, d_ff = 4d)."""
    hf: str
    fields: tuple[str, ...]
    kind: str
    default: object
    choices: Mapping[str, str] | None = None  # CHOICE: config.json value -> spec value
    aliases: tuple[str, ...] = ()  # other spellings transformers reads ("a.b": nested)
    absent: str = ""  # a note for the output when the key is absent (its default is taken)


@dataclass(frozen=True)
class Must:
    """A key that changes a count, honoured only where `ok(value, data)` holds; `default`
    is transformers' value when the key is absent (checked too)."""
    hf: str
    ok: Callable[[object, Mapping], bool]
    wanted: str  # the accepted values, in words
    what: str  # what another value would mean
    default: object = None


@dataclass(frozen=True)
class Noted:
    """Accepted, with a note in the output unless `quiet(value)`."""
    hf: str
    quiet: Callable[[object], bool]
    note: str  # formatted with settings: "key = value" of each key with this note


@dataclass(frozen=True)
class ModuleNames:
    """transformers' module paths for the ledger's modules (model/'s names): `blocks` is
    the block list, `block` maps paths inside a block, `top` the others. Names only:
    which modules exist, their parameters and components come from the ledger."""
    blocks: str
    block: Mapping[str, str]
    top: Mapping[str, str]


@dataclass(frozen=True)
class Derived:
    """Spec fields decided by several keys together, by transformers' rule: `rule(values,
    where)` gets the values the type's keys were read as (defaults taken) and returns the
    fields (those it leaves out keep the spec's default) and notes for the output; it
    raises UsageError for a combination the spec cannot mean."""
    fields: tuple[str, ...]
    keys: tuple[str, ...]  # the config.json keys it reads (for the translation table)
    rule: Callable[[Mapping, str], tuple[Mapping[str, object], tuple[str, ...]]]
    words: str  # the rule in words, with where transformers has it
    # the keys that mean a spec's fields (for flags on a config.json), None where none can
    write: Callable[[ModelConfig], Mapping | None] | None = None


@dataclass(frozen=True)
class HFType:
    model_type: str
    transformers_class: str
    keys: tuple[Key, ...]
    fixed: Mapping[str, object]  # spec fields the model_type sets without a key
    rules: str  # the fixed rules in words, with where transformers has them
    names: ModuleNames
    must: tuple[Must, ...] = ()
    noted: tuple[Noted, ...] = ()
    free: frozenset[str] = frozenset()
    divides: tuple[tuple[str, str], ...] = ()  # (a, b): transformers refuses b not divisible by a
    derived: tuple[Derived, ...] = ()
    # how transformers' experts run for the cross-check (None: no experts in this type);
    # see accounting/crosscheck/hf_counter.py for why not transformers' default
    experts_implementation: str | None = None

    def declares(self, key: str) -> bool:
        """The type reads (or lists) this key itself."""
        return key in ({k.hf for k in self.keys} | {m.hf for m in self.must}
                       | {n.hf for n in self.noted} | self.free)


# ---- shared lists --------------------------------------------------------------------------
# Keys of every config that change no count: bookkeeping, token ids, generation settings
# (transformers pops those), labels for other heads, output switches.
COMMON_FREE = frozenset({
    "model_type", "architectures", "auto_map", "transformers_version", "_name_or_path",
    "name_or_path", "_commit_hash", "use_cache", "initializer_range", "bos_token_id",
    "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    "task_specific_params", "id2label", "label2id", "num_labels", "problem_type",
    "finetuning_task", "tokenizer_class", "prefix", "return_dict", "output_hidden_states",
    "output_attentions", "torchscript", "use_bfloat16", "chunk_size_feed_forward",
    "attn_implementation", "_attn_implementation", "tie_encoder_decoder", "is_decoder",
    "cross_attention_hidden_size", "max_length", "min_length", "do_sample", "early_stopping",
    "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p",
    "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
    "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id",
    "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens",
    # the checkpoint's storage dtype: no count; read for the note and the transformers build
    "torch_dtype", "dtype",
})

# Keys of architectures a model_type does not build: refused (unless null) in every type
# that does not read them itself. (A key a type does not know at all is refused as unknown.)
_MOE = ("a mixture-of-experts key, which this model_type does not build (the types with "
        "experts: mixtral, qwen3_moe, deepseek_v3)")
_MLA = "a multi-head latent attention key, which this model_type does not build (deepseek_v3 does)"
REFUSED = MappingProxyType({
    **{k: _MOE for k in ("num_local_experts", "num_experts", "num_experts_per_tok",
                         "moe_intermediate_size", "shared_expert_intermediate_size",
                         "n_routed_experts", "n_shared_experts", "first_k_dense_replace",
                         "moe_layer_freq", "decoder_sparse_step", "mlp_only_layers",
                         "norm_topk_prob", "router_aux_loss_coef", "output_router_logits",
                         "topk_group", "n_group", "routed_scaling_factor")},
    **{k: _MLA for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                         "qk_rope_head_dim", "v_head_dim")},
    "num_nextn_predict_layers": "multi-token-prediction layers (deepseek_v3 reads them; no "
                                "other type has them)",
    "quantization_config": "a quantized checkpoint (its weights are not dense tensors of "
                           "the config's shapes; quantization is not supported)",
})

ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3")


def _rope_ok(value, data) -> bool:
    """RoPE scaling changes frequencies, not counts, for these types; a partial rotary
    factor would rotate only part of each head (a different count)."""
    if value is None:
        return True
    if not isinstance(value, dict):
        return False
    kind = value.get("rope_type", value.get("type", "default"))
    return kind in ROPE_TYPES and value.get("partial_rotary_factor", 1) in (1, 1.0)


COMMON_MUST = (
    Must("is_encoder_decoder", lambda v, d: v is False, "false", "an encoder-decoder model",
         False),
    Must("add_cross_attention", lambda v, d: v is False, "false",
         "cross-attention layers in every block", False),
    Must("pruned_heads", lambda v, d: not v, "empty", "pruned attention heads (smaller "
         "projections in some blocks)", {}),
    Must("partial_rotary_factor", lambda v, d: v in (1, 1.0), "1.0",
         "RoPE on only part of each head", 1.0),
)
ROPE_MUST = (
    Must("rope_scaling", _rope_ok, f"null or rope_type {', '.join(ROPE_TYPES)}",
         "a RoPE variant the tool does not know to leave every count unchanged"),
    Must("rope_parameters", _rope_ok, f"null or rope_type {', '.join(ROPE_TYPES)}",
         "a RoPE variant the tool does not know to leave every count unchanged"),
)
DROPOUT_NOTE = ("{settings}: dropout is not counted (the tool's model has none; it does "
                "not run at inference, and in training it adds elementwise work per dropped "
                "tensor)")
ATTENTION_DROPOUT = Noted("attention_dropout", lambda v: v in (0, 0.0), DROPOUT_NOTE)

# Activations by name (transformers' ACT2FN). Gated: the MLP of the llama family,
# act(W1·x) · W3·x. gelu_new and gelu_pytorch_tanh are both the tanh approximation.
GATED_ACTS = MappingProxyType({"silu": "swiglu", "swish": "swiglu", "gelu_new": "geglu",
                               "gelu_pytorch_tanh": "geglu"})
PLAIN_ACTS = MappingProxyType({"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                               "gelu": "gelu"})

LLAMA_NAMES = ModuleNames(
    blocks="model.layers",
    block=MappingProxyType({
        "ln1": "input_layernorm", "ln2": "post_attention_layernorm", "attn": "self_attn",
        "attn.q_proj": "self_attn.q_proj", "attn.k_proj": "self_attn.k_proj",
        "attn.v_proj": "self_attn.v_proj", "attn.output_proj": "self_attn.o_proj",
        "attn.q_norm": "self_attn.q_norm", "attn.k_norm": "self_attn.k_norm",
        "ffn.w1": "mlp.gate_proj", "ffn.w3": "mlp.up_proj", "ffn.w2": "mlp.down_proj"}),
    top=MappingProxyType({"token_embeddings": "model.embed_tokens", "ln_final": "model.norm",
                          "lm_head": "lm_head"}),
)
# A mixture of experts (Mixtral, Qwen3-MoE): the router is mlp.gate (a bare weight, F.linear),
# the experts one module holding gate_up_proj (E, 2·d_e, d: W1 and W3 of each expert stacked)
# and down_proj (E, d, d_e); dense layers keep the llama names.
MOE_NAMES = ModuleNames(LLAMA_NAMES.blocks, MappingProxyType({
    **LLAMA_NAMES.block, "ffn.router": "mlp.gate", "ffn.experts": "mlp.experts"}),
    LLAMA_NAMES.top)
# DeepSeek-V3: latent attention's projections and norms, and the shared experts (one MLP).
DEEPSEEK_V3_NAMES = ModuleNames(LLAMA_NAMES.blocks, MappingProxyType({
    **MOE_NAMES.block,
    "attn.q_a_proj": "self_attn.q_a_proj", "attn.q_a_norm": "self_attn.q_a_layernorm",
    "attn.q_b_proj": "self_attn.q_b_proj", "attn.kv_a_proj": "self_attn.kv_a_proj_with_mqa",
    "attn.kv_a_norm": "self_attn.kv_a_layernorm", "attn.kv_b_proj": "self_attn.kv_b_proj",
    "ffn.shared.w1": "mlp.shared_experts.gate_proj", "ffn.shared.w3": "mlp.shared_experts.up_proj",
    "ffn.shared.w2": "mlp.shared_experts.down_proj"}), LLAMA_NAMES.top)
# OLMo-2 names its post-sublayer norms after where they sit.
OLMO2_NAMES = ModuleNames(LLAMA_NAMES.blocks, MappingProxyType({
    **LLAMA_NAMES.block, "ln1": "post_attention_layernorm", "ln2": "post_feedforward_layernorm"}),
    LLAMA_NAMES.top)
GPT2_NAMES = ModuleNames(
    blocks="transformer.h",
    block=MappingProxyType({
        "ln1": "ln_1", "ln2": "ln_2", "attn": "attn",
        # one fused Conv1D computes Q, K and V: the ledger's three projections
        "attn.q_proj": "attn.c_attn", "attn.k_proj": "attn.c_attn", "attn.v_proj": "attn.c_attn",
        "attn.output_proj": "attn.c_proj", "ffn.w1": "mlp.c_fc", "ffn.w2": "mlp.c_proj"}),
    top=MappingProxyType({"token_embeddings": "transformer.wte",
                          "position_embeddings": "transformer.wpe",
                          "ln_final": "transformer.ln_f", "lm_head": "lm_head"}),
)


def _sizes(vocab: int, hidden: int, inter: int, layers: int, heads: int, positions: int):
    """The llama family's size keys, all required (transformers' class defaults given)."""
    return (Key("vocab_size", ("vocab_size",), INT, Required(vocab)),
            Key("hidden_size", ("d_model",), INT, Required(hidden)),
            Key("intermediate_size", ("d_ff",), INT, Required(inter)),
            Key("num_hidden_layers", ("num_layers",), INT, Required(layers)),
            Key("num_attention_heads", ("num_heads",), INT, Required(heads)),
            Key("max_position_embeddings", ("context_length",), INT, Required(positions)))


def _rope_keys(eps: float, tie: bool = False):
    """The llama family's activation, norm epsilon, tie and RoPE theta keys."""
    return (Key("hidden_act", ("mlp",), CHOICE, "silu", GATED_ACTS),
            Key("rms_norm_eps", ("norm_eps",), EPS, eps),
            Key("tie_word_embeddings", ("tie_embeddings",), BOOL, tie),
            # transformers 5 writes rope_parameters: {"rope_theta": ..}; older files rope_theta
            Key("rope_theta", ("rope_theta",), THETA, 10000.0,
                aliases=("rope_parameters.rope_theta", "rope_scaling.rope_theta")))


_LLAMA_FAMILY = dict(norm="rmsnorm", norm_placement="pre", positions="rope")
_ATTENTION_BIAS = Key("attention_bias", ("qkv_bias", "out_bias"), BOOL, False)

TYPES: dict[str, HFType] = {}


def register(t: HFType) -> None:
    """Add a model_type; refuses a duplicate type, a key listed twice, a key in two
    categories, and a spec field set both by a key and by a fixed rule."""
    if t.model_type in TYPES:
        raise ValueError(f"model_type {t.model_type!r} is registered twice")
    names = [k.hf for k in t.keys] + [a.split(".")[0] for k in t.keys for a in k.aliases
                                      if "." not in a] + list(t.free)
    # a Must may restrict a key the type reads, and a note explain a key a Must restricts
    must, noted = [m.hf for m in t.must], [n.hf for n in t.noted]
    shared = set(COMMON_FREE) | {m.hf for m in COMMON_MUST}  # (REFUSED: a type may read one)
    repeated = ({n for n in names if names.count(n) > 1} | {n for n in must if must.count(n) > 1}
                | {n for n in noted if noted.count(n) > 1} | (set(names + must + noted) & shared)
                | (set(must) & set(t.free)) | (set(noted) & set(names)))
    if repeated:
        raise ValueError(f"{t.model_type}: key(s) listed twice: {sorted(repeated)}")
    fields_set = [f for k in t.keys for f in k.fields] + [f for d in t.derived for f in d.fields]
    if len(set(fields_set)) != len(fields_set) or set(fields_set) & set(t.fixed):
        raise ValueError(f"{t.model_type}: a spec field is set twice")
    unread = {k for d in t.derived for k in d.keys} - {k.hf for k in t.keys}
    if unread:
        raise ValueError(f"{t.model_type}: a rule reads key(s) the type does not: {sorted(unread)}")
    TYPES[t.model_type] = t


register(HFType(
    "gpt2", "GPT2LMHeadModel",
    keys=(Key("vocab_size", ("vocab_size",), INT, Required(50257)),
          Key("n_embd", ("d_model",), INT, Required(768), aliases=("hidden_size",)),
          Key("n_layer", ("num_layers",), INT, Required(12), aliases=("num_hidden_layers",)),
          Key("n_head", ("num_heads",), INT, Required(12), aliases=("num_attention_heads",)),
          Key("n_positions", ("context_length",), INT, Required(1024),
              aliases=("max_position_embeddings",)),
          Key("n_inner", ("d_ff",), INT_OR_NULL, None),  # null: 4·n_embd
          Key("activation_function", ("mlp",), CHOICE, "gelu_new", PLAIN_ACTS),
          Key("layer_norm_epsilon", ("norm_eps",), EPS, 1e-5),
          Key("tie_word_embeddings", ("tie_embeddings",), BOOL, True)),
    fixed=MappingProxyType(dict(norm="layernorm", norm_placement="pre", positions="learned",
                                qkv_bias=True, out_bias=True, mlp_bias=True, qk_norm="none")),
    rules="LayerNorm, learned positions and a bias on every Conv1D (modeling_gpt2.py)",
    names=GPT2_NAMES,
    must=(Must("reorder_and_upcast_attn", lambda v, d: v is False, "false",
               "attention scores by baddbmm with the scale folded in (one op fewer)", False),
          # transformers ignores n_ctx (an old spelling); a different value is a mistake
          Must("n_ctx", lambda v, d: v == d.get("n_positions", v), "equal to n_positions",
               "a context length transformers ignores (it reads n_positions)")),
    noted=(Noted("resid_pdrop", lambda v: v in (0, 0.0), DROPOUT_NOTE),
           Noted("embd_pdrop", lambda v: v in (0, 0.0), DROPOUT_NOTE),
           Noted("attn_pdrop", lambda v: v in (0, 0.0), DROPOUT_NOTE),
           Noted("scale_attn_weights", lambda v: v is True,
                 "{settings}: transformers multiplies the scores by 1.0 instead of 1/√d_k "
                 "(the same count; the tool's model scales)"),
           Noted("scale_attn_by_inverse_layer_idx", lambda v: v is False,
                 "{settings}: transformers folds 1/(layer + 1) into the one score scale "
                 "(the same count; the tool's model does not)")),
    # summary_*: GPT2DoubleHeadsModel's classification head, not built for a causal LM;
    # n_special, predict_special_tokens, output_past, gradient_checkpointing: old keys
    # transformers no longer reads.
    free=frozenset({"summary_type", "summary_use_proj", "summary_activation",
                    "summary_proj_to_labels", "summary_first_dropout", "n_special",
                    "predict_special_tokens", "output_past", "gradient_checkpointing"}),
))

register(HFType(
    "llama", "LlamaForCausalLM",
    keys=_sizes(32000, 4096, 11008, 32, 32, 2048) + (
        Key("num_key_value_heads", ("num_kv_heads",), INT_OR_NULL, None),
        Key("head_dim", ("head_dim",), INT_OR_NULL, None),
        _ATTENTION_BIAS,
        Key("mlp_bias", ("mlp_bias",), BOOL, False)) + _rope_keys(1e-6),
    fixed=MappingProxyType(dict(_LLAMA_FAMILY, qk_norm="none")),
    rules="RMSNorm before each sublayer, gated MLP, RoPE (modeling_llama.py)",
    names=LLAMA_NAMES, must=ROPE_MUST, noted=(ATTENTION_DROPOUT,),
    free=frozenset({"pretraining_tp"}),  # no longer read (once: the same matmuls, sliced)
    divides=(("num_attention_heads", "hidden_size"),),  # LlamaConfig.validate_architecture
))

register(HFType(
    "mistral", "MistralForCausalLM",
    keys=_sizes(32000, 4096, 14336, 32, 32, 131072) + (
        Key("num_key_value_heads", ("num_kv_heads",), INT_OR_NULL, Required(8)),
        Key("head_dim", ("head_dim",), INT_OR_NULL, None),
        # every layer attends its last W keys; MistralConfig's default is W = 4,096, so an
        # absent key means a window too (null: none)
        Key("sliding_window", ("sliding_window",), INT_OR_NULL, 4096,
            absent="sliding_window absent: transformers' MistralConfig default, a 4,096-token "
                   "window on every layer, is what its model builds (null means no window)")
        ) + _rope_keys(1e-6),
    fixed=MappingProxyType(dict(_LLAMA_FAMILY, qk_norm="none", qkv_bias=False, out_bias=False,
                                mlp_bias=False)),
    rules="the llama architecture without biases (modeling_mistral.py: bias=False); a "
          "sliding window applies to every layer (create_sliding_window_causal_mask)",
    names=LLAMA_NAMES,
    # MistralModel ignores layer_types (it warns) but its DynamicCache reads them: refused
    must=ROPE_MUST + (Must("layer_types", lambda v, d: v is None, "null",
                           "per-layer attention kinds, which transformers' Mistral ignores "
                           "in its attention but not in its KV cache"),),
    noted=(ATTENTION_DROPOUT,),
))


def _layers_of(types: list[str], window, where: str):
    """The spec's window fields for per-layer kinds ("local"/"global"), canonical: no local
    layer -> no window; all local -> the window alone; mixed -> the list too."""
    n = sum(t == "local" for t in types)
    if not n:
        return {}
    if window is None:
        raise UsageError(f"{where}: layers of sliding attention but no window (sliding_window "
                         f"null, or use_sliding_window false): transformers cannot build them")
    return {"sliding_window": window} if n == len(types) else \
        {"sliding_window": window, "layer_types": tuple(types)}


def _qwen_windows(v: Mapping, where: str):
    """Qwen2Config/Qwen3Config.__post_init__: the window is sliding_window if
    use_sliding_window else null; without layer_types, layer i slides iff a window is set
    and i >= max_window_layers (the first max_window_layers layers keep full attention)."""
    L, window = v["num_hidden_layers"], (v["sliding_window"] if v["use_sliding_window"] else None)
    given = v["layer_types"]
    if given is None:
        types = ["local" if window is not None and i >= v["max_window_layers"] else "global"
                 for i in range(L)]
    else:
        kinds = {"full_attention": "global", "sliding_attention": "local"}
        if len(given) != L or any(t not in kinds for t in given):
            raise UsageError(f"{where}: layer_types must list {L} entries (num_hidden_layers), "
                             f"each \"full_attention\" or \"sliding_attention\", got "
                             f"{_short(given)}")
        types = [kinds[t] for t in given]
    fields = _layers_of(types, window, where)
    n = types.count("local")
    notes = () if not n else (
        f"sliding window {window:,} on {n} of {L} layers ("
        + ("layer_types" if given is not None else
           f"use_sliding_window true: layers {v['max_window_layers']} and up, as "
           f"transformers' config builds layer_types from max_window_layers") + ").",)
    return fields, notes


_QWEN_WINDOW_KEYS = (
    Key("use_sliding_window", (), BOOL, False),
    Key("sliding_window", (), INT_OR_NULL, 4096),
    Key("max_window_layers", (), NONNEG, 28),
    Key("layer_types", (), LIST, None))
def _qwen_windows_keys(c: ModelConfig) -> Mapping:
    local = [k.local for k in c.layer_kinds]
    if not any(local):
        return {"use_sliding_window": False, "layer_types": None}
    return {"use_sliding_window": True, "sliding_window": c.sliding_window,
            "layer_types": ["sliding_attention" if x else "full_attention" for x in local]}


_QWEN_WINDOWS = Derived(("sliding_window", "layer_types"),
                        ("use_sliding_window", "sliding_window", "max_window_layers",
                         "layer_types"), _qwen_windows,
                        "local layers: those of layer_types, else (use_sliding_window) layers "
                        "max_window_layers and up (configuration_qwen2/3.py)", _qwen_windows_keys)

register(HFType(
    "qwen2", "Qwen2ForCausalLM",
    keys=_sizes(151936, 4096, 22016, 32, 32, 32768) + (
        Key("num_key_value_heads", ("num_kv_heads",), INT_OR_NULL, Required(32)),
        Key("head_dim", ("head_dim",), INT_OR_NULL, None)) + _rope_keys(1e-6) + _QWEN_WINDOW_KEYS,
    fixed=MappingProxyType(dict(_LLAMA_FAMILY, qk_norm="none", qkv_bias=True, out_bias=False,
                                mlp_bias=False)),
    rules="biases on Q, K and V only (modeling_qwen2.py: bias=True on q/k/v_proj, False on "
          "o_proj)",
    names=LLAMA_NAMES, must=ROPE_MUST, noted=(ATTENTION_DROPOUT,),
    free=frozenset({"use_mrope"}),  # Qwen2-VL's, unread by Qwen2ForCausalLM
    derived=(_QWEN_WINDOWS,),
))

register(HFType(
    "qwen3", "Qwen3ForCausalLM",
    keys=_sizes(151936, 4096, 22016, 32, 32, 32768) + (
        Key("num_key_value_heads", ("num_kv_heads",), INT_OR_NULL, Required(32)),
        # Qwen3Config's default head_dim is 128, whatever hidden_size/heads is
        Key("head_dim", ("head_dim",), INT, Required(128)),
        _ATTENTION_BIAS) + _rope_keys(1e-6) + _QWEN_WINDOW_KEYS,
    fixed=MappingProxyType(dict(_LLAMA_FAMILY, qk_norm="head", mlp_bias=False)),
    rules="RMSNorm of each head's Q and K, head_dim weights each (modeling_qwen3.py: "
          "q_norm, k_norm)",
    names=LLAMA_NAMES, must=ROPE_MUST, noted=(ATTENTION_DROPOUT,),
    derived=(_QWEN_WINDOWS,),
))

register(HFType(
    "olmo2", "Olmo2ForCausalLM",
    keys=_sizes(50304, 4096, 11008, 32, 32, 2048) + (
        Key("num_key_value_heads", ("num_kv_heads",), INT_OR_NULL, None),
        Key("head_dim", ("head_dim",), INT_OR_NULL, None),
        _ATTENTION_BIAS) + _rope_keys(1e-5),
    fixed=MappingProxyType(dict(_LLAMA_FAMILY, norm_placement="post", qk_norm="full",
                                mlp_bias=False)),
    rules="RMSNorm on each sublayer's output inside the residual, and QK-norm over the full "
          "Q and K projections (modeling_olmo2.py)",
    names=OLMO2_NAMES, must=ROPE_MUST, noted=(ATTENTION_DROPOUT,),
))


# ---- mixtures of experts and latent attention ---------------------------------------------
ROUTER_NOTES = (
    Noted("router_jitter_noise", lambda v: v in (0, 0.0),
          "{settings}: transformers multiplies the MoE input by uniform noise in training mode "
          "only; not counted (like dropout: elementwise work, no matmul)."),)
# the router's training loss and its output switch: no count of the model's forward
ROUTER_FREE = frozenset({"router_aux_loss_coef", "output_router_logits"})

register(HFType(
    "mixtral", "MixtralForCausalLM",
    keys=_sizes(32000, 4096, 14336, 32, 32, 131072) + (
        Key("num_key_value_heads", ("num_kv_heads",), INT_OR_NULL, Required(8)),
        Key("head_dim", ("head_dim",), INT_OR_NULL, None),
        # MixtralConfig.attribute_map: num_experts is num_local_experts
        Key("num_local_experts", ("num_experts",), INT, Required(8), aliases=("num_experts",)),
        Key("num_experts_per_tok", ("experts_per_token",), INT, Required(2)),
        Key("sliding_window", ("sliding_window",), INT_OR_NULL, None)) + _rope_keys(1e-5),
    # each expert is intermediate_size wide (MixtralExperts: no moe_intermediate_size)
    fixed=MappingProxyType(dict(_LLAMA_FAMILY, qk_norm="none", qkv_bias=False, out_bias=False,
                                mlp_bias=False, router="softmax", norm_topk_prob=True,
                                num_shared_experts=0, router_bias=False,
                                routed_scaling_factor=1.0)),
    rules="every layer's MLP is a mixture of intermediate_size-wide experts: a router without "
          "bias (mlp.gate), softmax over the experts, top-k, the chosen weights always "
          "renormalised (MixtralTopKRouter), no shared expert (modeling_mixtral.py); a "
          "sliding window, when given, on every layer",
    names=MOE_NAMES, must=ROPE_MUST, noted=(ATTENTION_DROPOUT,) + ROUTER_NOTES,
    free=ROUTER_FREE, experts_implementation="batched_mm",
))


def _qwen3_moe_layers(v: Mapping, where: str):
    """Qwen3MoeDecoderLayer: layer i runs the experts iff i is not in mlp_only_layers and
    num_experts > 0 and (i + 1) % decoder_sparse_step == 0; else a dense MLP of
    intermediate_size. The window (use_sliding_window) applies to every layer."""
    L, E, step, only = (v["num_hidden_layers"], v["num_experts"], v["decoder_sparse_step"],
                        v["mlp_only_layers"])
    only = [] if only is None else only
    if any(isinstance(i, bool) or not isinstance(i, int) for i in only):
        raise UsageError(f"{where}: mlp_only_layers must list layer indices, got {_short(only)}")
    fields: dict = {}
    if E > 0:
        fields["num_experts"] = E
        fields["dense_layers"] = tuple(i for i in range(L)
                                       if i in only or (i + 1) % step != 0)
    if v["use_sliding_window"]:
        fields.update(_layers_of(["local"] * L, v["sliding_window"], where))
    n_dense = L if E == 0 else len(fields["dense_layers"])
    notes = () if not n_dense else (
        f"{n_dense} of {L} layers keep a dense MLP of intermediate_size "
        + ("(num_experts 0)." if E == 0 else "(mlp_only_layers, decoder_sparse_step)."),)
    return fields, notes


def _qwen3_moe_keys(c: ModelConfig) -> Mapping | None:
    kinds = c.layer_kinds
    if any(k.local for k in kinds) and not all(k.local for k in kinds):
        return None  # Qwen3-MoE's window is on every layer or none
    return {"num_experts": c.num_experts or 0, "decoder_sparse_step": 1,
            "mlp_only_layers": [i for i, k in enumerate(kinds) if not k.moe],
            "use_sliding_window": kinds[0].local, "sliding_window": c.sliding_window}


register(HFType(
    "qwen3_moe", "Qwen3MoeForCausalLM",
    keys=_sizes(151936, 2048, 6144, 24, 32, 32768) + (
        # Qwen3MoeConfig has no null here (num_attention_heads // num_key_value_heads)
        Key("num_key_value_heads", ("num_kv_heads",), INT, Required(4)),
        # not a Qwen3MoeConfig field: read when given, else hidden_size // num_attention_heads
        Key("head_dim", ("head_dim",), INT, None),
        _ATTENTION_BIAS,
        Key("moe_intermediate_size", ("moe_d_ff",), INT, Required(768)),
        Key("num_experts", (), NONNEG, Required(128), aliases=("num_local_experts",)),
        Key("num_experts_per_tok", ("experts_per_token",), INT, Required(8)),
        Key("norm_topk_prob", ("norm_topk_prob",), BOOL, False),
        Key("decoder_sparse_step", (), INT, 1),
        Key("mlp_only_layers", (), LIST, None),
        Key("use_sliding_window", (), BOOL, False),
        Key("sliding_window", (), INT_OR_NULL, 4096)) + _rope_keys(1e-6),
    fixed=MappingProxyType(dict(_LLAMA_FAMILY, qk_norm="head", mlp_bias=False, router="softmax",
                                num_shared_experts=0, router_bias=False,
                                routed_scaling_factor=1.0)),
    rules="RMSNorm of each head's Q and K (as Qwen3); MoE layers of moe_intermediate_size-wide "
          "experts, a router without bias (mlp.gate), softmax over the experts, top-k, no "
          "shared expert (modeling_qwen3_moe.py)",
    names=MOE_NAMES, must=ROPE_MUST, noted=(ATTENTION_DROPOUT,) + ROUTER_NOTES,
    # max_window_layers: Qwen3-MoE's config and model do not read it (every layer slides)
    free=ROUTER_FREE | {"max_window_layers"},
    derived=(Derived(("num_experts", "dense_layers", "sliding_window", "layer_types"),
                     ("num_experts", "decoder_sparse_step", "mlp_only_layers",
                      "use_sliding_window", "sliding_window"), _qwen3_moe_layers,
                     "dense layers: mlp_only_layers, and those where (i + 1) % "
                     "decoder_sparse_step ≠ 0; the window on every layer when "
                     "use_sliding_window (modeling_qwen3_moe.py)", _qwen3_moe_keys),),
    experts_implementation="batched_mm",
))


def _deepseek_layers(v: Mapping, where: str):
    """DeepseekV3DecoderLayer: layers below first_k_dense_replace keep a dense MLP of
    intermediate_size; DeepseekV3TopkRouter takes each group's two best scores, so a group
    needs two experts."""
    L, k = v["num_hidden_layers"], v["first_k_dense_replace"]
    E, groups = v["n_routed_experts"], v["n_group"]
    if E % groups == 0 and E // groups < 2:
        raise UsageError(f"{where}: n_group {groups} leaves {E // groups} expert per group; "
                         f"transformers' router sums each group's top 2 scores, so each group "
                         f"needs at least 2 experts")
    dense = tuple(range(min(k, L)))
    return {"dense_layers": dense}, ((f"first_k_dense_replace {k}: layers 0 to {len(dense) - 1} "
                                      f"keep a dense MLP of intermediate_size.",) if dense else ())


def _fp8_blocks(v, d) -> bool:
    return v is None or (isinstance(v, dict) and v.get("quant_method") == "fp8")


def _mtp_note(v) -> bool:
    return v in (0, None)


register(HFType(
    "deepseek_v3", "DeepseekV3ForCausalLM",
    keys=_sizes(129280, 7168, 18432, 61, 128, 4096) + (
        Key("moe_intermediate_size", ("moe_d_ff",), INT, Required(2048)),
        # DeepseekV3Config.attribute_map: num_local_experts is n_routed_experts
        Key("n_routed_experts", ("num_experts",), INT, Required(256),
            aliases=("num_local_experts",)),
        Key("num_experts_per_tok", ("experts_per_token",), INT, Required(8)),
        Key("n_shared_experts", ("num_shared_experts",), NONNEG, Required(1)),
        Key("first_k_dense_replace", (), NONNEG, Required(3)),
        Key("n_group", ("router_groups",), INT, Required(8)),
        Key("topk_group", ("router_topk_groups",), INT, Required(4)),
        Key("norm_topk_prob", ("norm_topk_prob",), BOOL, True),
        Key("routed_scaling_factor", ("routed_scaling_factor",), THETA, 2.5),
        Key("q_lora_rank", ("q_lora_rank",), INT_OR_NULL, Required(1536)),
        Key("kv_lora_rank", ("kv_lora_rank",), INT, Required(512)),
        Key("qk_nope_head_dim", ("qk_nope_head_dim",), INT, Required(128)),
        Key("qk_rope_head_dim", ("qk_rope_head_dim",), INT, Required(64)),
        Key("v_head_dim", ("v_head_dim",), INT, Required(128)),
        _ATTENTION_BIAS) + _rope_keys(1e-6),
    fixed=MappingProxyType(dict(_LLAMA_FAMILY, qk_norm="none", mlp_bias=False, router="sigmoid",
                                router_bias=True)),
    rules="multi-head latent attention (q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa, "
          "kv_a_layernorm, kv_b_proj, o_proj); MoE layers of n_routed_experts experts and "
          "n_shared_experts shared ones (one MLP of n_shared_experts·moe_intermediate_size), a "
          "sigmoid router (mlp.gate) whose choice adds e_score_correction_bias (a persistent "
          "buffer, not a parameter) and is limited to the best topk_group of n_group groups "
          "(modeling_deepseek_v3.py)",
    names=DEEPSEEK_V3_NAMES,
    must=ROPE_MUST + (
        # the eager attention repeats K/V num_attention_heads // num_key_value_heads times;
        # latent attention's K/V already have one head per query head
        Must("num_key_value_heads", lambda v, d: v is None or v == d.get("num_attention_heads"),
             "null or equal to num_attention_heads",
             "K and V repeated over groups of heads that latent attention does not have "
             "(transformers' model fails to run)", 128),
        # q_proj (no q_lora_rank) has no bias whatever attention_bias says: the spec's
        # qkv_bias would add one
        Must("attention_bias", lambda v, d: v is not True or d.get("q_lora_rank", 1536) is not None,
             "false unless q_lora_rank is set",
             "biases on kv_a_proj_with_mqa and o_proj but not on q_proj (q_lora_rank null), "
             "which the spec's qkv_bias cannot say", False),
        # keys of DeepSeek's own code (auto_map) that transformers does not read: another
        # value would mean a model transformers does not build
        Must("scoring_func", lambda v, d: v in (None, "sigmoid"), "sigmoid",
             "a router transformers' DeepseekV3 does not build (it always uses sigmoid)"),
        Must("topk_method", lambda v, d: v in (None, "noaux_tc"), "noaux_tc",
             "a routing transformers' DeepseekV3 does not build (it always uses the "
             "corrected, group-limited top-k)"),
        Must("moe_layer_freq", lambda v, d: v in (None, 1), "1",
             "MoE in only some layers, which transformers' DeepseekV3 ignores (every layer "
             "from first_k_dense_replace on is MoE)"),
        Must("quantization_config", _fp8_blocks, 'null or quant_method "fp8"',
             "a quantized checkpoint whose weights are not dense tensors of the config's "
             "shapes")),
    noted=(ATTENTION_DROPOUT,
           Noted("num_nextn_predict_layers", _mtp_note,
                 "{settings}: the multi-token-prediction module (DeepSeek-V3 §2.2) is not "
                 "counted: transformers' DeepseekV3ForCausalLM does not build it (it loads it "
                 "only as a separate MtpModel for speculative decoding, generate(use_mtp=True)); "
                 "DeepSeek's 671B excludes it, the Hub's safetensors total (685B) includes it."),
           Noted("quantization_config", lambda v: v is None,
                 "quantization_config fp8: the checkpoint stores most matrices in float8 "
                 "with a float32 scale per 128×128 block (weight_scale_inv); the counts are "
                 "of the model's parameters as transformers builds them (dense tensors of the "
                 "config's shapes, what 671B counts), not of the scales, and the memory tables "
                 "give bytes per dtype, not the checkpoint's mixed fp8/bf16 storage.")),
    # aux_loss_alpha, seq_aux: training-loss settings; ep_size: expert parallelism of
    # DeepSeek's code; pretraining_tp: unread; rope_interleave: the same rotation, another
    # layout; head_dim: DeepseekV3Config overwrites it with qk_rope_head_dim
    free=ROUTER_FREE | {"aux_loss_alpha", "seq_aux", "ep_size", "pretraining_tp",
                        "rope_interleave", "head_dim"},
    derived=(Derived(("dense_layers",), ("first_k_dense_replace",), _deepseek_layers,
                     "layers below first_k_dense_replace keep a dense MLP "
                     "(modeling_deepseek_v3.py)",
                     # only the first k layers can be dense
                     lambda c: ({"first_k_dense_replace": len(c.dense_layers)}
                                if c.dense_layers == tuple(range(len(c.dense_layers))) else None)),),
    experts_implementation="batched_mm",
))

# model_types transformers has that the spec cannot express exactly: refused in one line
# rather than approximated (a model_type neither here nor in TYPES: "not supported").
_GEMMA = ("needs what the spec cannot express: four norms per block (sandwich norms before "
          "and after each sublayer), RMSNorm gains applied as (1 + w), the embedding scaled by "
          "√hidden_size, query_pre_attn_scalar in place of head_dim for the score scale, and "
          "{extra}")
UNSUPPORTED = MappingProxyType({
    "gemma2": _GEMMA.format(extra="soft-capped attention and final logits (tanh)"),
    "gemma3": _GEMMA.format(extra="per-head QK-norm with (1 + w) gains; gemma3 is also a "
                                  "vision-language config (text_config)"),
    "gemma3_text": _GEMMA.format(extra="per-head QK-norm with (1 + w) gains and a second RoPE "
                                       "base for the local layers"),
})


# ---- translation ---------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class HFConfig:
    """A config.json read: the spec it means, and what the output should say about it."""
    model_type: str
    data: Mapping  # the config.json object as read (a private copy)
    config: ModelConfig
    origin: str  # the file, or the preset's Hugging Face id
    mapped: tuple[tuple[str, object, tuple[str, ...], bool], ...]  # key, value, fields, given
    notes: tuple[str, ...] = ()
    dtype: str | None = None  # torch_dtype / dtype, when given

    @property
    def type(self) -> HFType:
        return TYPES[self.model_type]


def _short(value, limit: int = 40) -> str:
    return shorten(value, limit)  # control characters escaped, never fails (errors.py)


_MISSING = object()


def _get(data: Mapping, path: str):
    """data[path], or data[a][b] for 'a.b'; _MISSING when absent."""
    head, _, rest = path.partition(".")
    value = data.get(head, _MISSING)
    if not rest or value is _MISSING:
        return value
    return value.get(rest, _MISSING) if isinstance(value, dict) else _MISSING


def _check_kind(key: Key, value, where: str) -> None:
    ok = {
        INT: lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_SIZE,
        INT_OR_NULL: lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)
                                             and 0 < v <= MAX_SIZE),
        NONNEG: lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_SIZE,
        LIST: lambda v: v is None or isinstance(v, list),
        BOOL: lambda v: isinstance(v, bool),
        THETA: lambda v: _number(v) and v > 0,
        EPS: lambda v: _number(v) and v >= 0,
        CHOICE: lambda v: isinstance(v, str) and v in key.choices,
    }[key.kind]
    if not ok(value):
        wanted = (f"{CHOICE} {', '.join(key.choices)} (the activations the tool's spec has)"
                  if key.kind == CHOICE else key.kind)
        raise UsageError(f"{where}: {key.hf} must be {wanted}, got {_short(value)}")


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _read(key: Key, data: Mapping, where: str):
    """The key's value (from it or an alias), checked; contradicting spellings refused."""
    found = [(p, _get(data, p)) for p in (key.hf, *key.aliases)]
    found = [(p, v) for p, v in found if v is not _MISSING]
    if len({repr(v) for _, v in found}) > 1:
        shown = ", ".join(f"{p} = {_short(v)}" for p, v in found)
        raise UsageError(f"{where}: contradictory keys {shown}; transformers reads them as one "
                         f"setting, so give one value")
    if not found:
        if isinstance(key.default, Required):
            raise UsageError(f"{where} is missing {key.hf}; add it (transformers would silently "
                             f"use its class default {key.default.transformers_default!r}, a "
                             f"reference model's size)")
        return key.default
    value = found[0][1]
    _check_kind(key, value, where)
    return value


def translate(data: Mapping, source: str, name: str, origin: str = "") -> HFConfig:
    """The spec a Hugging Face config.json object means; UsageError naming the key when a
    key would change a count the tool cannot represent, or is unknown, wrong or missing."""
    mt = data.get("model_type")
    if isinstance(mt, str) and mt in UNSUPPORTED:
        raise UsageError(f"{source}: model_type {mt} is not supported: it {UNSUPPORTED[mt]}; "
                         f"refusing rather than approximating it (supported: {', '.join(TYPES)})")
    if not isinstance(mt, str) or mt not in TYPES:
        raise UsageError(f"{source}: model_type {_short(mt)} is not supported; supported: "
                         f"{', '.join(TYPES)} (or write the tool's own format: see --help)")
    t = TYPES[mt]
    where = f"{source} ({mt})"
    for k, why in REFUSED.items():
        if data.get(k) is not None and not t.declares(k):
            raise UsageError(f"{where}: {k} = {_short(data[k])} is {why}; refusing rather than "
                             f"dropping it")
    known = (COMMON_FREE | set(REFUSED) | {m.hf for m in COMMON_MUST} | {k.hf for k in t.keys}
             | {a for k in t.keys for a in k.aliases if "." not in a} | {m.hf for m in t.must}
             | {n.hf for n in t.noted} | t.free)
    unknown = sorted(k for k in data if k not in known)
    if unknown:
        shown = ", ".join(_short(k, 30) for k in unknown[:4]) + (" …" if len(unknown) > 4 else "")
        raise UsageError(f"{where}: unknown key(s) {shown}: the tool cannot tell whether "
                         f"{'it changes' if len(unknown) == 1 else 'they change'} a count, so it "
                         f"refuses rather than drop {'it' if len(unknown) == 1 else 'them'} "
                         f"(the keys it reads: accounting/spec/hf_config.py, model_type {mt})")
    for m in COMMON_MUST + t.must:
        value = data.get(m.hf, m.default)
        if not m.ok(value, data):
            absent = "" if m.hf in data else " (absent: transformers' default)"
            raise UsageError(f"{where}: {m.hf} = {_short(value)}{absent} means {m.what}; the tool "
                             f"counts only {m.hf} {m.wanted}")
    spec: dict = {"name": name}
    mapped = []
    for key in t.keys:
        value = _read(key, data, where)
        given = any(_get(data, p) is not _MISSING for p in (key.hf, *key.aliases))
        mapped.append((key.hf, value, key.fields, given))
        if value is None:
            continue  # null: the spec's default is transformers' meaning (see Key)
        for f in key.fields:
            spec[f] = key.choices[value] if key.kind == CHOICE else value
    for a, b in t.divides:
        if spec[_field(t, b)] % spec[_field(t, a)]:
            raise UsageError(f"{where}: {b} {spec[_field(t, b)]} is not divisible by {a} "
                             f"{spec[_field(t, a)]}; transformers' {t.transformers_class} refuses "
                             f"it (even with head_dim given)")
    values = {k: v for k, v, _, _ in mapped}
    notes: list[str] = [k.absent for k, (_, _, _, given) in zip(t.keys, mapped)
                        if k.absent and not given]
    for d in t.derived:
        fields, said = d.rule(values, where)
        spec.update(fields)
        notes += said
    spec.update(t.fixed)
    try:
        config = config_from_dict(spec, where)
    except UsageError as e:
        raise UsageError(_in_hf_words(str(e), t)) from None
    noisy: dict[str, list[str]] = {}  # a note once, for all the keys it is about
    for n in t.noted:
        if n.hf in data and not n.quiet(data[n.hf]):
            noisy.setdefault(n.note, []).append(f"{n.hf} = {data[n.hf]!r}")
    notes += [note.format(settings=", ".join(s)) for note, s in noisy.items()]
    notes += _rope_notes(data)
    dtype = storage_dtype(data)
    if dtype is not None and not isinstance(dtype, str):
        raise UsageError(f"{where}: torch_dtype must be a string such as \"bfloat16\", got "
                         f"{_short(dtype)}")
    return HFConfig(mt, MappingProxyType(copy.deepcopy(dict(data))), config, origin or source,
                    tuple(mapped), tuple(notes), dtype)


def storage_dtype(data: Mapping):
    """The checkpoint's dtype: "dtype" (transformers 5's spelling) unless null, else
    "torch_dtype", as transformers' PreTrainedConfig reads them."""
    return data["dtype"] if data.get("dtype") is not None else data.get("torch_dtype")


def _field(t: HFType, hf_key: str) -> str:
    return next(k.fields[0] for k in t.keys if k.hf == hf_key)


def _rope_notes(data: Mapping) -> list[str]:
    out = []
    for k in ("rope_scaling", "rope_parameters"):
        v = data.get(k)
        if isinstance(v, dict) and v.get("rope_type", v.get("type", "default")) != "default":
            out.append(f"{k} {v.get('rope_type', v.get('type'))}: rescales RoPE's frequencies "
                       f"(changes no count)")
    return out


def _in_hf_words(message: str, t: HFType) -> str:
    """A spec error, with the config.json keys of the spec fields it names."""
    said = [(f, k.hf) for k in t.keys for f in k.fields if re.search(rf"\b{f}\b", message)
            and f != k.hf]
    if not said:
        return message
    return message + " [in config.json: " + ", ".join(f"{f} is {hf}" for f, hf in said) + "]"


def name_for(path: Path, data: Mapping) -> str:
    """A config.json's model name: its _name_or_path, else its folder (for a file named
    config.json, as checkpoints ship it), else the file's stem."""
    given = data.get("_name_or_path")
    if isinstance(given, str) and given.strip():
        return given.strip()
    if path.name == "config.json" and path.resolve().parent.name:
        return path.resolve().parent.name
    return path.stem


# ---- back to config.json, for a config modified by flags ----------------------------------
RUNTIME_FIELDS = ("attention",)  # spec fields of how model/ runs, not of the architecture
def for_transformers(hf: HFConfig, config: ModelConfig) -> tuple[dict | None, str]:
    """The config.json object that builds `config` in transformers: hf's own when unchanged;
    with the keys of changed fields rewritten (flags like --num-layers); or (None, why) when
    a changed field has no key in this model_type or the result would not mean `config`."""
    data = copy.deepcopy(dict(hf.data))
    t = hf.type
    # how the tool's model runs its attention is no key of config.json (the transformers
    # counter always runs eager attention): it is not written back
    config = replace(config, **{f: getattr(hf.config, f) for f in RUNTIME_FIELDS
                                if hasattr(config, f)})
    mine = hf.config
    if replace(config, name="") == replace(mine, name=""):
        return data, ""  # the config.json itself, whatever the tool read from it
    for key in t.keys:
        values = {getattr(config, f) for f in key.fields}
        if all(getattr(config, f) == getattr(mine, f) for f in key.fields):
            continue
        if len(values) != 1:
            return None, (f"{' and '.join(key.fields)} differ, and {t.model_type}'s "
                          f"{key.hf} sets both")
        value = values.pop()
        if key.kind == CHOICE:
            inverse = [hf_v for hf_v, spec_v in key.choices.items() if spec_v == value]
            if not inverse:
                return None, f"{key.fields[0]} {value!r} has no {key.hf} in {t.model_type}"
            value = inverse[0]
        for p in (key.hf, *key.aliases):
            if _get(data, p) is not _MISSING or p == key.hf:
                head, _, rest = p.partition(".")
                if rest:
                    data[head] = {**data[head], rest: value}
                else:
                    data[head] = value
    for d in t.derived:
        if all(getattr(config, f) == getattr(mine, f) for f in d.fields):
            continue
        keys = d.write(config) if d.write is not None else None
        if keys is None:
            return None, (f"{', '.join(d.fields)} as changed cannot be written as "
                          f"{', '.join(d.keys)} of {t.model_type}")
        data.update(keys)
    changed = [f.name for f in fields(config) if f.name != "name"
               and getattr(config, f.name) != getattr(mine, f.name)]
    fixed = [f for f in changed if f in t.fixed]
    if fixed:
        return None, (f"{', '.join(fixed)} {'is' if len(fixed) == 1 else 'are'} fixed by "
                      f"model_type {t.model_type} (no config.json key sets "
                      f"{'it' if len(fixed) == 1 else 'them'})")
    try:
        again = translate(data, "the rewritten config.json", config.name).config
    except UsageError as e:
        return None, str(e)
    if replace(again, name="") != replace(config, name=""):
        return None, "the flags' changes cannot be written as config.json keys"
    return data, ""


# ---- files ---------------------------------------------------------------------------------
def is_hf(data) -> bool:
    """A JSON object in Hugging Face's format (it names its model_type)."""
    return isinstance(data, dict) and "model_type" in data


def from_file(path: str | Path, data: Mapping, source: str, name: str | None = None) -> HFConfig:
    """A parsed config.json file (own_format.read_json reads and parses it)."""
    path = Path(path)
    return translate(data, source, name or name_for(path, data), str(path))


def load(path: str | Path) -> HFConfig | None:
    """The HFConfig of a JSON file in Hugging Face's format; None for the tool's own format."""
    data, source = read_json(path)
    return from_file(path, data, source) if is_hf(data) else None


# The presets' config.json files, as shipped (package data; accounting/spec/presets.py reads them).
PACKAGED = Path(__file__).resolve().parents[1] / "hf_configs"  # accounting/hf_configs
