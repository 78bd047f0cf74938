"""The dense model_types of the Hugging Face table (hf_schema.py's rows): GPT-2, Llama,
Mistral, Qwen2, Qwen3, OLMo-2; registered on import (hf_config.py imports this module).
Defaults and rules from transformers 5.23.0's configuration_<type>.py and modeling_<type>.py.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from accounting.architecture.config import ModelConfig
from accounting.architecture.hf_schema import (
    ATTENTION_BIAS, ATTENTION_DROPOUT, BOOL, CHOICE, EPS, GPT2_NAMES, INT, PROB, fused_gelu,
    INT_OR_ABSENT, INT_OR_NULL, LIST, LLAMA_FAMILY, LLAMA_NAMES, NONNEG, OLMO2_NAMES, PLAIN_ACTS, ROPE_MUST,
    Derived, HFType, Key, Must, Noted, Required, head_dim, kv_heads, llama_sizes, register,
    rope_keys, short)
from accounting.runtime.errors import UsageError


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
          Key("tie_word_embeddings", ("tie_embeddings",), BOOL, True),
          # nn.Dropout's p (GPT2Config: 0.1 each when absent): the embeddings' (GPT2Model.drop),
          # the attention probabilities' (SDPA's dropout_p), each sublayer output's
          # (GPT2Attention.resid_dropout, GPT2MLP.dropout)
          Key("embd_pdrop", ("embedding_dropout",), PROB, 0.1),
          Key("attn_pdrop", ("attention_dropout",), PROB, 0.1),
          Key("resid_pdrop", ("residual_dropout",), PROB, 0.1)),
    fixed=MappingProxyType(dict(norm="layernorm", norm_placement="pre", positions="learned",
                                qkv_bias=True, out_bias=True, mlp_bias=True, qk_norm="none")),
    rules="LayerNorm, learned positions and a bias on every Conv1D (modeling_gpt2.py)",
    names=GPT2_NAMES,
    must=(Must("reorder_and_upcast_attn", lambda v, d: v is False, "false",
               "attention scores by baddbmm with the scale folded in (one op fewer)", False),
          # transformers ignores n_ctx (an old spelling); a different value is a mistake
          Must("n_ctx", lambda v, d: v == d.get("n_positions", v), "equal to n_positions",
               "a context length transformers ignores (it reads n_positions)")),
    derived=(fused_gelu("activation_function"),),
    noted=(Noted("scale_attn_weights", lambda v: v is True,
                 "{settings}: transformers multiplies the scores by 1.0 instead of 1/√d_k "
                 "(the same count; the tool's model scales)"),
           Noted("scale_attn_by_inverse_layer_idx", lambda v: v is False,
                 "{settings}: transformers folds 1/(layer + 1) into the one score scale "
                 "(the same count; the tool's model does not)")),
    # summary_*: GPT2DoubleHeadsModel's classification head, not built for a causal LM;
    # n_special, predict_special_tokens, output_past: old keys transformers no longer
    # reads (gradient_checkpointing it still reads: hf_schema.COMMON_MUST).
    free=frozenset({"summary_type", "summary_use_proj", "summary_activation",
                    "summary_proj_to_labels", "summary_first_dropout", "n_special",
                    "predict_special_tokens", "output_past"}),
))

register(HFType(
    "llama", "LlamaForCausalLM",
    keys=llama_sizes(32000, 4096, 11008, 32, 32, 2048) + (
        kv_heads(),
        head_dim(),
        ATTENTION_BIAS,
        Key("mlp_bias", ("mlp_bias",), BOOL, False)) + rope_keys(1e-6),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, qk_norm="none")),
    rules="RMSNorm before each sublayer, gated MLP, RoPE (modeling_llama.py)",
    names=LLAMA_NAMES, must=ROPE_MUST, noted=(ATTENTION_DROPOUT,),
    free=frozenset({"pretraining_tp"}),  # no longer read (once: the same matmuls, sliced)
    divides=(("num_attention_heads", "hidden_size"),),  # LlamaConfig.validate_architecture
))

register(HFType(
    "mistral", "MistralForCausalLM",
    keys=llama_sizes(32000, 4096, 14336, 32, 32, 131072) + (
        # MistralConfig/MixtralConfig type it int: null is refused (StrictDataclass)
        kv_heads(Required(8), INT),
        head_dim(),
        # every layer attends its last W keys; MistralConfig's default is W = 4,096, so an
        # absent key means a window too (null: none)
        Key("sliding_window", ("sliding_window",), INT_OR_NULL, 4096,
            absent="sliding_window absent: transformers' MistralConfig default, a 4,096-token "
                   "window on every layer, is what its model builds (null means no window)")
        ) + rope_keys(1e-6),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, qk_norm="none", qkv_bias=False, out_bias=False,
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


def layers_of(types: list[str], window, where: str):
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
                             f"{short(given)}")
        types = [kinds[t] for t in given]
    fields = layers_of(types, window, where)
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
    keys=llama_sizes(151936, 4096, 22016, 32, 32, 32768) + (
        kv_heads(Required(32)),
        head_dim(None, INT_OR_ABSENT)) + rope_keys(1e-6) + _QWEN_WINDOW_KEYS,
    fixed=MappingProxyType(dict(LLAMA_FAMILY, qk_norm="none", qkv_bias=True, out_bias=False,
                                mlp_bias=False)),
    rules="biases on Q, K and V only (modeling_qwen2.py: bias=True on q/k/v_proj, False on "
          "o_proj)",
    names=LLAMA_NAMES, must=ROPE_MUST, noted=(ATTENTION_DROPOUT,),
    free=frozenset({"use_mrope"}),  # Qwen2-VL's, unread by Qwen2ForCausalLM
    derived=(_QWEN_WINDOWS,),
))

register(HFType(
    "qwen3", "Qwen3ForCausalLM",
    keys=llama_sizes(151936, 4096, 22016, 32, 32, 32768) + (
        kv_heads(Required(32)),
        # Qwen3Config's default head_dim is 128, whatever hidden_size/heads is
        head_dim(Required(128), INT),
        ATTENTION_BIAS) + rope_keys(1e-6) + _QWEN_WINDOW_KEYS,
    fixed=MappingProxyType(dict(LLAMA_FAMILY, qk_norm="head", mlp_bias=False)),
    rules="RMSNorm of each head's Q and K, head_dim weights each (modeling_qwen3.py: "
          "q_norm, k_norm)",
    names=LLAMA_NAMES, must=ROPE_MUST, noted=(ATTENTION_DROPOUT,),
    derived=(_QWEN_WINDOWS,),
))

register(HFType(
    "olmo2", "Olmo2ForCausalLM",
    keys=llama_sizes(50304, 4096, 11008, 32, 32, 2048) + (
        kv_heads(),
        head_dim(None, INT_OR_ABSENT),
        ATTENTION_BIAS) + rope_keys(1e-5),
    fixed=MappingProxyType(dict(LLAMA_FAMILY, norm_placement="post", qk_norm="full",
                                mlp_bias=False)),
    rules="RMSNorm on each sublayer's output inside the residual, and QK-norm over the full "
          "Q and K projections (modeling_olmo2.py)",
    names=OLMO2_NAMES, must=ROPE_MUST, noted=(ATTENTION_DROPOUT,),
))
