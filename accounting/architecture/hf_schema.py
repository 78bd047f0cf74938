"""The table's schema for Hugging Face config.json files (hf_config.py reads them): the
kinds of value, the row of a model_type (HFType: Key, Must, Noted, Derived, ModuleNames),
the lists every type shares, the keys the llama family shares, and the registry (TYPES,
register). The rows themselves: the hf_types_*.py modules, one per family (listed in
accounting/architecture/__init__.py). Pure Python.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Callable, Mapping

from accounting.architecture.config import MAX_REAL, ModelConfig
from accounting.runtime.errors import UsageError, shorten
from accounting.units import TORCH_DTYPE_NAMES as TORCH_DTYPES

# The transformers release the tables below are read from (pyproject's [hf] extra pins it).
TRANSFORMERS_VERSION = "5.23.0"

# ---- value kinds ---------------------------------------------------------------------------
INT = "a positive integer"
INT_OR_NULL = "a positive integer or null"
# a key whose null transformers' model cannot run (Qwen2/OLMo-2/Cohere/Granite's head_dim:
# their configs keep the null, and the attention's getattr(config, "head_dim", d // h)
# returns None: TypeError in the RoPE or the scaling); absent takes the default
INT_OR_ABSENT = "a positive integer or absent (transformers' model fails on null)"
NONNEG = "a non-negative integer"
# Qwen2-MoE's sliding_window: Qwen2MoeConfig writes 0 when use_sliding_window is false
NONNEG_OR_NULL = "a non-negative integer or null"
LIST = "a list or null"  # its entries are checked by the type's derive rule
PATTERN = "a string or null"  # a layer pattern (Nemotron-H's "M*-"), checked by its rule
BOOL = "true or false"
THETA = "a positive number"
EPS = "a non-negative number"
PROB = "a number at least 0 and below 1"  # a dropout probability (nn.Dropout's p)
NUMBER_OR_NULL = "a positive number or null"  # Gemma's soft-caps (null: none)
CHOICE = "one of"
INTEGER = "an integer"  # ERNIE 4.5's moe_layer_end_index (-1: the last layer)
WINDOW_PATTERN = "a positive integer, a string or null"  # EXAONE 4's sliding_window_pattern ("LLLG")


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
    # the values transformers accepts (others refused, never passed on: see FREE_VALUES)
    valid: tuple[Callable[[object], bool], str] | None = None


@dataclass(frozen=True)
class ModuleNames:
    """transformers' module paths for the ledger's modules (model/'s names): `blocks` is
    the block list, `block` maps paths inside a block, `top` the others. Names only:
    which modules exist, their parameters and components come from the ledger."""
    blocks: str
    block: Mapping[str, str]
    top: Mapping[str, str]
    # the config's model_type (HFType.module_names fills it): PEFT's LoRA reads target names
    # by it (planning/lora_targets.py: MoE conversion, Mamba's refusals)
    model_type: str | None = None


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
    # names that depend on the config.json (Falcon's norms: ln_attn/ln_mlp or
    # input_layernorm); None: `names` for every config of the type
    names_of: Callable[[Mapping], ModuleNames] | None = None
    # whether transformers' KV cache holds K and V broadcast to all h query heads for this
    # config.json (Falcon's new decoder architecture): h/h_kv times the ledger's cache
    kv_broadcast: Callable[[Mapping], bool] | None = None

    def module_names(self, data: Mapping) -> ModuleNames:
        names = self.names if self.names_of is None else self.names_of(data)
        return replace(names, model_type=self.model_type)
    # a multimodal file (Llama 4): the language model's keys are those of the object under
    # `nested` ("text_config"), read as the row's keys; `outer` lists the other top-level
    # keys, which change no count of the language model (the vision tower is not counted)
    nested: str | None = None
    outer: frozenset[str] = frozenset()

    def declares(self, key: str) -> bool:
        """The type reads (or lists) this key itself, under its own name or an alias (a
        REFUSED key a type reads as an alias, such as Mixtral's num_experts, is the type's:
        MixtralConfig.attribute_map; the shared refusal is for types that do not read it)."""
        return key in ({k.hf for k in self.keys} | {a for k in self.keys for a in k.aliases
                                                     if "." not in a}
                       | {m.hf for m in self.must} | {n.hf for n in self.noted} | self.free)


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
    # _num_labels: the spelling of num_labels that transformers 2.x-4.x wrote (distilgpt2's
    # Hub file has it); PreTrainedConfig keeps it as an unread attribute. is_llama_config and
    # rope_interleaved: nanotron's export keys (SmolLM2's Hub files); no transformers 5.23.0
    # configuration_*.py or modeling_*.py reads either (grep: only "mrope_interleaved", a
    # Qwen3-VL key, contains the text)
    "_num_labels", "is_llama_config", "rope_interleaved",
    # tf_legacy_loss: transformers 4.x PretrainedConfig's TensorFlow-loss switch (Kimi-K2.5's
    # text_config, written by 4.56.2); 5.23 neither defines nor reads it
    "tf_legacy_loss",
})

# The values those keys may take, as transformers' config classes accept them (5.x: strict
# dataclass fields of PreTrainedConfig and the llama family; a dtype is looked up as
# getattr(torch, name)). Junk in a key that changes no count is still bad input: it would
# reach transformers and come back as a failed cross-check, a false verdict (issue 23).
# The cross-check also asks transformers itself before any work (crosscheck.refusal).
# (TORCH_DTYPES: units.TORCH_DTYPE_NAMES, imported above)


def _bool_or_null(v) -> bool:
    return v is None or isinstance(v, bool)


def _id_or_null(v) -> bool:
    return v is None or (isinstance(v, int) and not isinstance(v, bool))


def _ids_or_null(v) -> bool:
    return _id_or_null(v) or (isinstance(v, list) and all(_id_or_null(i) and i is not None
                                                          for i in v))


def real(v) -> bool:
    """A number that is not a bool, finite and at most MAX_REAL (10^18) in size, checked
    the same way for an int and a float: JSON has no NaN, but Python's json reads it, and
    an integer of 400 digits is valid JSON that math.isfinite cannot take (OverflowError,
    issue 32); abs(v) <= MAX_REAL compares either exactly."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) <= MAX_REAL


FREE_VALUES = MappingProxyType({
    "torch_dtype": (lambda v: v is None or (isinstance(v, str) and v in TORCH_DTYPES),
                    "null or a torch dtype's name such as \"bfloat16\""),
    "dtype": (lambda v: v is None or (isinstance(v, str) and v in TORCH_DTYPES),
              "null or a torch dtype's name such as \"bfloat16\""),
    "use_cache": (_bool_or_null, BOOL),
    **{k: (_id_or_null, "an integer or null") for k in (
        "bos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id")},
    "eos_token_id": (_ids_or_null, "an integer, a list of integers or null"),
    "initializer_range": (lambda v: v is None or real(v), "a number"),
})

# Keys of architectures a model_type does not build: refused (unless null) in every type
# that does not read them itself. (A key a type does not know at all is refused as unknown.)
_MOE = ("a mixture-of-experts key, which this model_type does not build (the types with "
        "experts: mixtral, qwen3_moe, deepseek_v2, deepseek_v3, gpt_oss, llama4_text, llama4, "
        "olmoe, qwen2_moe, glm4_moe, minimax_m2)")
_MLA = ("a multi-head latent attention key, which this model_type does not build (deepseek_v2 "
        "and deepseek_v3 do)")
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
                           "the config's shapes; the 'serve' subcommand reads it: python -m "
                           "accounting serve --config FILE)",
})

ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3")


def _rope_ok(value, data, kinds=ROPE_TYPES, partial: bool = False) -> bool:
    """RoPE scaling changes frequencies, not counts, for these types; a partial rotary
    factor would rotate only part of each head (a different count), unless the type reads
    it (`partial`: a Key of the type, GPT-NeoX, Phi-3)."""
    if value is None:
        return True
    if not isinstance(value, dict):
        return False
    kind = value.get("rope_type", value.get("type", "default"))
    return kind in kinds and (partial or value.get("partial_rotary_factor", 1) in (1, 1.0))


def rope_must(kinds=ROPE_TYPES, partial: bool = False) -> tuple[Must, ...]:
    """rope_scaling and rope_parameters: a RoPE type of `kinds`; a partial rotary factor
    inside them only where the type reads it (partial)."""
    words = f"null or rope_type {', '.join(kinds)}"
    what = "a RoPE variant the tool does not know to leave every count unchanged"
    return tuple(Must(k, lambda v, d: _rope_ok(v, d, kinds, partial), words, what)
                 for k in ("rope_scaling", "rope_parameters"))


rope_ok = _rope_ok  # for rows that check a RoPE setting of their own (gemma3_text's per kind)

COMMON_MUST = (
    Must("is_encoder_decoder", lambda v, d: v is False, "false", "an encoder-decoder model",
         False),
    Must("add_cross_attention", lambda v, d: v is False, "false",
         "cross-attention layers in every block", False),
    Must("pruned_heads", lambda v, d: not v, "empty", "pruned attention heads (smaller "
         "projections in some blocks)", {}),
    Must("partial_rotary_factor", lambda v, d: v in (1, 1.0), "1.0",
         "RoPE on only part of each head", 1.0),
    # PreTrainedModel._backward_compatibility_gradient_checkpointing (modeling_utils.py):
    # a true key turns on gradient checkpointing in post_init, so every training step
    # recomputes each block's forward (issue 32: llama ×1.26 matmul FLOPs per step)
    Must("gradient_checkpointing", lambda v, d: v in (False, None), "false (or absent)",
         "transformers recomputing each block's forward in every training step (it turns "
         "on gradient checkpointing for such a file); remove the key and plan the "
         "recomputation with plan's --recompute full", False),
)
ROPE_MUST = rope_must()
# (in training each dropout keeps its mask for the backward pass: native_dropout's bool
# mask on CUDA, aten/src/ATen/native/Dropout.cpp is_fused_kernel_acceptable; SDPA's flash
# and memory-efficient kernels regenerate theirs from the Philox seed: docs/planning.md)
DROPOUT_NOTE = ("{settings}: dropout is not counted (the tool's model has none; it does "
                "not run at inference, and in training it adds elementwise work and, on "
                "CUDA, a 1-byte mask per element of each tensor dropped outside SDPA's fused "
                "kernels)")
DROPOUT_VALUE = (lambda v: v is None or real(v), "a number")


def dropout(key: str) -> Noted:
    """A dropout probability: not counted (a note unless 0), a number or null."""
    return Noted(key, lambda v: v in (0, 0.0, None), DROPOUT_NOTE, DROPOUT_VALUE)


ATTENTION_DROPOUT = dropout("attention_dropout")

# Activations by name (transformers' ACT2FN). Gated: the MLP of the llama family,
# act(W1·x) · W3·x. gelu_new and gelu_pytorch_tanh are both the tanh approximation; "gelu"
# is GELUActivation, nn.functional.gelu without approximation: the exact (erf) GELU
# (activations.py), so LlamaMLP with hidden_act "gelu" is the spec's geglu_erf.
GATED_ACTS = MappingProxyType({"silu": "swiglu", "swish": "swiglu", "gelu_new": "geglu",
                               "gelu_pytorch_tanh": "geglu", "gelu": "geglu_erf"})
PLAIN_ACTS = MappingProxyType({"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                               "gelu": "gelu"})


def fused_gelu(key: str) -> Derived:
    """The spec's fused_gelu from the activation's name, as transformers' ACT2FN runs it
    (activations.py, 5.23): gelu_pytorch_tanh is GELUTanh, one F.gelu(approximate='tanh');
    gelu_new is NewGELUActivation, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) op by op."""
    def rule(values, where):
        return {"fused_gelu": values[key] == "gelu_pytorch_tanh"}, ()

    def write(c):
        if c.mlp_kind.activation != "gelu_tanh":
            return None
        return {key: "gelu_pytorch_tanh" if c.fused_gelu else "gelu_new"}
    return Derived(("fused_gelu",), (key,), rule,
                   f"{key} gelu_pytorch_tanh: one F.gelu(approximate='tanh') (GELUTanh); "
                   f"gelu_new: NewGELUActivation's eight ops (activations.py ACT2FN)", write)


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


def short(value, limit: int = 40) -> str:
    return shorten(value, limit)  # control characters escaped, never fails (errors.py)


def llama_sizes(vocab: int, hidden: int, inter: int, layers: int, heads: int, positions: int):
    """The llama family's size keys, all required (transformers' class defaults given)."""
    return (Key("vocab_size", ("vocab_size",), INT, Required(vocab)),
            Key("hidden_size", ("d_model",), INT, Required(hidden)),
            Key("intermediate_size", ("d_ff",), INT, Required(inter)),
            Key("num_hidden_layers", ("num_layers",), INT, Required(layers)),
            Key("num_attention_heads", ("num_heads",), INT, Required(heads)),
            Key("max_position_embeddings", ("context_length",), INT, Required(positions)))


def kv_heads(default=None, kind: str = INT_OR_NULL) -> Key:
    """num_key_value_heads, the one declaration every type that reads it shares; null (an
    INT_OR_NULL kind, default None): as many K/V heads as query heads, transformers' meaning."""
    return Key("num_key_value_heads", ("num_kv_heads",), kind, default)


def head_dim(default=None, kind: str = INT_OR_NULL) -> Key:
    """head_dim, shared likewise; null: hidden_size // num_attention_heads where the config
    class turns null into it (LlamaConfig, MistralConfig, MixtralConfig); INT_OR_ABSENT where
    the class keeps the null and the model fails on it (Qwen2, OLMo-2, Cohere, Granite)."""
    return Key("head_dim", ("head_dim",), kind, default)


def rope_keys(eps: float, tie: bool = False, theta: float = 10000.0):
    """The llama family's activation, norm epsilon, tie and RoPE theta keys (theta: the
    class's default_theta, 10,000 unless the row says otherwise)."""
    return (Key("hidden_act", ("mlp",), CHOICE, "silu", GATED_ACTS),
            Key("rms_norm_eps", ("norm_eps",), EPS, eps),
            Key("tie_word_embeddings", ("tie_embeddings",), BOOL, tie),
            # transformers 5 writes rope_parameters: {"rope_theta": ..}; older files rope_theta
            Key("rope_theta", ("rope_theta",), THETA, theta,
                aliases=("rope_parameters.rope_theta", "rope_scaling.rope_theta")))


LLAMA_FAMILY = dict(norm="rmsnorm", norm_placement="pre", positions="rope")
ATTENTION_BIAS = Key("attention_bias", ("qkv_bias", "out_bias"), BOOL, False)

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
    # (REFUSED: a type may read one; a COMMON_MUST key too, as a Key: Phi-3's partial factor)
    shared = set(COMMON_FREE) | ({m.hf for m in COMMON_MUST} - {k.hf for k in t.keys})
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


# model_types transformers has that the spec cannot express exactly: refused in one line
# rather than approximated (a model_type neither here nor in TYPES: "not supported").
UNSUPPORTED: Mapping[str, str] = MappingProxyType({
    # (issue 31's families, cohere2 the last, are all read now: a new one names the feature
    # the spec lacks)
    # (apertus, issue 41's last, is read now: hf_types_dense3.py)
})

def check_wrapper_keys(data: Mapping, where: str, outer_keys) -> None:
    """A vision-language wrapper's own top-level keys (WRAPPERS' unwrappers: gemma3's,
    gemma4's, kimi_k25's), checked one way: none of REFUSED set, none unknown beyond
    COMMON_FREE, `outer_keys` and COMMON_MUST's, COMMON_MUST's and FREE_VALUES' values."""
    for k, why in REFUSED.items():
        if data.get(k) is not None:
            raise UsageError(f"{where}: {k} = {short(data[k])} is {why}; refusing rather than "
                             f"dropping it")
    known = COMMON_FREE | outer_keys | {m.hf for m in COMMON_MUST}
    unknown = sorted(k for k in data if k not in known)
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(short(k, 30) for k in unknown[:4])}"
                         f": the tool cannot tell whether they change a count of the language "
                         f"model, so it refuses rather than drop them")
    for m in COMMON_MUST:
        if not m.ok(data.get(m.hf, m.default), data):
            raise UsageError(f"{where}: {m.hf} = {short(data.get(m.hf))} means {m.what}")
    for k, (ok, wanted) in FREE_VALUES.items():
        if k in data and not ok(data[k]):
            raise UsageError(f"{where}: {k} = {short(data[k])} is not {wanted}")


def carry_dtype(data: Mapping, inner: dict) -> None:
    """The checkpoint's dtype, given once at a wrapper's top level, into its text config."""
    for k in ("torch_dtype", "dtype"):
        if k in data and k not in inner:
            inner[k] = data[k]


# model_types whose config.json wraps a language model's config (a vision-language model):
# model_type -> unwrap(data, where) = (the inner config.json object of a type in TYPES, the
# notes the output adds). The rows' modules register them (hf_types_gemma.py: gemma3).
WRAPPERS: dict[str, Callable[[Mapping, str], tuple[dict, tuple[str, ...]]]] = {}
