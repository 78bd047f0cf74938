"""The architecture spec: one frozen dataclass that says which operations run, with sizes.

The defaults are the CS336 chapter 3 LM (pre-norm RMSNorm, SwiGLU, RoPE, causal
multi-head attention, untied LM head, no biases). Every other field switches one
feature people plan with (see ../shared/architectures.md): grouped-query attention,
head_dim ≠ d_model/h, LayerNorm, GELU MLPs, learned positions, a tied head, biases,
QK-norm and OLMo-2's norm placement; Gemma 2/3's sandwich norms, (1 + w) gains, scaled
embedding and soft-caps, Granite's multipliers. accounting/ledger/builder/ walks this spec
into the ledger, and model/ builds the same network from it.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cached_property

from accounting.architecture import describe
from accounting.architecture.checks import validate
from accounting.architecture.derived import DerivedSizes
# the vocabulary, re-exported: the CLI, the builder and model/ read it as config.X
from accounting.architecture.choices import (  # noqa: F401
    ATTENTIONS, BLOCKS, GROUP_SCORES, LAYER_TYPES, MAX_CONFIG_BYTES, MIXER_TYPES, MAX_LAYERS, MAX_NAME,
    MAX_REAL, MAX_SIZE, MLPS, NORM_PLACEMENTS, NORMS, POSITIONS, QK_NORMS, ROUTERS, LayerKind,
    MLPKind, default_d_ff)
from accounting.architecture.fields import (CHOICE, COUNT, EXTRAS, FLAG, LAYERS, NUMBER, NUMBER0, SIZE,
                                     SIZES, TEXT, TYPES, spec)


@dataclass(frozen=True)
class ModelConfig(DerivedSizes):
    """Sizes and the choices that decide which operations run (defaults: CS336)."""

    vocab_size: int = spec(kind=SIZE, flag="--vocab-size", group=SIZES, help="vocabulary size V")
    # the learned position table's length when positions = "learned"
    context_length: int = spec(kind=SIZE, flag="--context-length", group=SIZES,
                               help="context length (with --positions learned, the table's length)")
    num_layers: int = spec(kind=SIZE, flag="--num-layers", group=SIZES, help="blocks L")
    d_model: int = spec(kind=SIZE, flag="--d-model", group=SIZES, help="model width d_model")
    num_heads: int = spec(kind=SIZE, flag="--num-heads", group=SIZES, help="attention (query) heads h")
    d_ff: int = spec(kind=SIZE, flag="--d-ff", group=SIZES,
                     help="feed-forward inner width (default: 8/3·d_model rounded up to a multiple "
                          "of 64 for a gated MLP, 4·d_model for a plain one)")
    rope_theta: float = spec(10000.0, kind=NUMBER, flag="--rope-theta", group=SIZES,
                             help="RoPE's theta (default 10,000; changes no count)")
    name: str = spec("custom", kind=TEXT, help="the config's name (heads every table)")
    num_kv_heads: int | None = spec(None, kind=SIZE, flag="--num-kv-heads",
                                    help="key/value heads (default: num_heads; 1 = multi-query; "
                                         "fewer = grouped-query attention)")
    head_dim: int | None = spec(None, kind=SIZE, flag="--head-dim",
                                help="head dimension (default: d_model/num_heads)")
    norm: str = spec("rmsnorm", kind=CHOICE, flag="--norm", choices=NORMS,
                     help="rmsnorm (default), layernorm (with bias) or layernorm_nobias "
                          "(a weight only: Cohere)")
    norm_eps: float = spec(1e-5, kind=NUMBER0, flag="--norm-eps",
                           help="the norms' epsilon (changes no count)")
    norm_placement: str = spec("pre", kind=CHOICE, flag="--norm-placement", choices=NORM_PLACEMENTS,
                               help="pre (default), post (OLMo-2: norm on each sublayer's "
                                    "output) or sandwich (Gemma 2/3: norms on its input and output)")
    mlp: str = spec("swiglu", kind=CHOICE, flag="--mlp", choices=MLPS,
                    help="feed-forward: swiglu (default), geglu (tanh GELU), geglu_erf (exact GELU), "
                         "gelu (exact), gelu_tanh (GPT-2), swiglu_clamped (gpt-oss), relu2 "
                         "(Nemotron-H: relu(W1 x)², two matrices), xielu (Apertus: two "
                         "matrices, xIELU with two learned scalars per layer)")
    positions: str = spec("rope", kind=CHOICE, flag="--positions", choices=POSITIONS,
                          help="rope (default), learned (a table of context_length positions), "
                               "none, or alibi (Falcon's linear bias per head on the scores)")
    tie_embeddings: bool = spec(False, kind=FLAG, flag="--tie-embeddings",
                                help="the LM head reads the token embedding table (default: untied)")
    qkv_bias: bool = spec(False, kind=FLAG, flag="--qkv-bias",  # GPT-2, Qwen2
                          help="biases on the Q, K, V projections")
    out_bias: bool = spec(False, kind=FLAG, flag="--out-bias",  # GPT-2
                          help="bias on the attention output projection")
    mlp_bias: bool = spec(False, kind=FLAG, flag="--mlp-bias",  # GPT-2
                          help="biases on the MLP matrices")
    lm_head_bias: bool = spec(False, kind=FLAG, flag="--lm-head-bias",  # Phi-3.5-MoE
                              help="a bias on the LM head (V)")
    # ---- Gemma 2/3 and Granite (issue 24): scalars that each add an elementwise op where
    # set (their values change no count; None: the op is not run). Sandwich norms are
    # norm_placement "sandwich". logit_scale is generic: Granite divides its logits by
    # logits_scaling (logit_scale = 1/logits_scaling), Cohere multiplies by logit_scale.
    norm_offset: bool = spec(False, kind=FLAG, flag="--norm-offset",
                             help="RMSNorm gains applied as (1 + w), w initialised to 0 (Gemma): "
                                  "one add over the gain vector per norm call")
    embedding_multiplier: float | None = spec(None, kind=NUMBER, flag="--embedding-multiplier",
                                              help="token embeddings multiplied by X (Gemma: "
                                                   "√d_model; Granite: embedding_multiplier)")
    residual_multiplier: float | None = spec(None, kind=NUMBER, flag="--residual-multiplier",
                                             help="each sublayer's output multiplied by X before "
                                                  "its residual add (Granite)")
    attn_softcap: float | None = spec(None, kind=NUMBER, flag="--attn-softcap",
                                      help="attention scores soft-capped: cap·tanh(scores/cap) "
                                           "(Gemma 2; naive attention only)")
    final_softcap: float | None = spec(None, kind=NUMBER, flag="--final-softcap",
                                       help="logits soft-capped: cap·tanh(logits/cap) (Gemma 2/3)")
    logit_scale: float | None = spec(None, kind=NUMBER, flag="--logit-scale",
                                     help="logits multiplied by X (Cohere's logit_scale; "
                                          "Granite's 1/logits_scaling)")
    qk_norm: str = spec("none", kind=CHOICE, flag="--qk-norm", choices=QK_NORMS,
                        help="none (default), head (Qwen3), full (OLMo-2), l2 (Llama 4: "
                             "weightless, after RoPE, on RoPE layers) or per_head (Cohere: a d_k "
                             "weight for each head)")
    attention: str = spec("naive", kind=CHOICE, flag="--attention", choices=ATTENTIONS,
                          help="how the attention core runs: naive (default: the course's explicit "
                               "scores, mask and softmax) or sdpa (the fused kernel, "
                               "F.scaled_dot_product_attention)")
    # ---- what only training runs (issue 41): nn.Dropout's probabilities (GPT-2's embd_pdrop,
    # attn_pdrop, resid_pdrop) and which tanh GELU transformers' ACT2FN runs. model/ has
    # neither (no dropout; the tanh GELU's explicit ops): they act under --implementation
    # transformers only, dropout in train() only (builder/dropout.py, layers.activation)
    embedding_dropout: float = spec(0.0, kind=NUMBER0, flag="--embedding-dropout",
                                    help="dropout probability on the embeddings (GPT-2's "
                                         "embd_pdrop; below 1; training only)")
    attention_dropout: float = spec(0.0, kind=NUMBER0, flag="--attention-dropout",
                                    help="dropout probability on the attention probabilities "
                                         "(GPT-2's attn_pdrop; below 1; training only)")
    residual_dropout: float = spec(0.0, kind=NUMBER0, flag="--residual-dropout",
                                   help="dropout probability on each sublayer's output (GPT-2's "
                                        "resid_pdrop; below 1; training only)")
    fused_gelu: bool = spec(False, kind=FLAG, flag="--fused-gelu",
                            help="the tanh GELU as one F.gelu(approximate='tanh') "
                                 "(transformers' gelu_pytorch_tanh), not gelu_new's eight "
                                 "elementwise ops (the course's model runs the eight)")
    # -- the parallel block and partial rotary (GPT-NeoX, Falcon, Phi-3; Cohere can reuse them)
    # parallel: attention and MLP both read the block input x, and both add to it:
    # x + attn(ln1(x)) + mlp(ln2(x)) (GPT-NeoX's use_parallel_residual, Falcon-40B's ln_attn
    # and ln_mlp), or with one shared norm x + attn(ln1(x)) + mlp(ln1(x)) (Falcon-7B's
    # parallel_attn, Cohere): no ln2
    block: str = spec("sequential", kind=CHOICE, flag="--block", choices=BLOCKS,
                      help="sequential (default: y = x + attn, y + mlp), parallel (x + attn + "
                           "mlp, a norm each), parallel_shared_norm (one norm feeds both) or "
                           "single (one sublayer per block: Nemotron-H)")
    # RoPE on the first rotary_dim dims of each head only, the rest passed through and
    # concatenated back (GPT-NeoX's rotary_pct, Phi's partial_rotary_factor); None: all d_k
    rotary_dim: int | None = spec(None, kind=SIZE, flag="--rotary-dim",
                                  help="RoPE on the first N dims of each head (even, below "
                                       "head_dim; default: the whole head)")
    # sliding-window (local) attention: each query attends its last W keys (itself included)
    sliding_window: int | None = spec(None, kind=SIZE, flag="--sliding-window", group=EXTRAS,
                                      help="a local layer attends its last W keys (every layer "
                                           "local unless --layer-types says which)")
    # per layer "global"/"local"; None: every layer local when sliding_window is set, else global
    layer_types: tuple[str, ...] | None = spec(None, kind=TYPES, flag="--layer-types", group=EXTRAS,
                                               choices=dict.fromkeys(LAYER_TYPES),
                                               help="each layer's kind, one per layer: "
                                                    "global, local, chunked (attention), "
                                                    "linear_attention (gated DeltaNet), kda "
                                                    "(Kimi Delta Attention), conv "
                                                    "(short convolution), mamba (Mamba-2), hybrid "
                                                    "(attention beside Mamba-2, Falcon-H1), mamba1 "
                                                    "(Mamba-1, Jamba), mlp "
                                                    "(an MLP-only block, with --block single)")
    # mixture of experts (None: a dense MLP in every layer)
    num_experts: int | None = spec(None, kind=SIZE, flag="--num-experts", group=EXTRAS,
                                   help="routed experts per MoE layer (a mixture of experts)")
    experts_per_token: int = spec(2, kind=SIZE, flag="--experts-per-token", group=EXTRAS,
                                  needs="num_experts", help="top-k: experts each token runs (default 2)")
    moe_d_ff: int | None = spec(None, kind=SIZE, flag="--moe-d-ff", group=EXTRAS, needs="num_experts",
                                help="each expert's inner width (default: d_ff)")
    # one MLP of n·moe_d_ff every token runs (DeepSeek)
    num_shared_experts: int = spec(0, kind=COUNT, flag="--shared-experts", group=EXTRAS,
                                   needs="num_experts",
                                   help="experts every token runs beside its top-k (DeepSeek)")
    # Nemotron-H's and Granite 4.0-H's shared MLP has its own width (moe_shared_expert_
    # intermediate_size, shared_intermediate_size), not n experts' (None: n·moe_d_ff), as
    # Qwen2-MoE's and Qwen3-Next's shared_expert_intermediate_size may (any width)
    shared_d_ff: int | None = spec(None, kind=SIZE, flag="--shared-d-ff", group=EXTRAS,
                                   needs="num_experts",
                                   help="the shared experts' inner width (default: "
                                        "--shared-experts × the experts' width)")
    # Nemotron-3-Super's latent experts: the routed tokens projected to this width before
    # the experts and back after (NemotronHMoE's fc1_latent_proj, fc2_latent_proj)
    moe_latent_size: int | None = spec(None, kind=SIZE, flag="--moe-latent-size", group=EXTRAS,
                                       needs="num_experts",
                                       help="the routed experts run at this width between two "
                                            "projections (Nemotron-H's moe_latent_size)")
    # Qwen2-MoE's shared_expert_gate (Qwen3-Next's too): sigmoid(x·w), w of d_model, scales the
    # shared experts' output per token
    shared_expert_gate: bool = spec(False, kind=FLAG, flag="--shared-expert-gate", group=EXTRAS,
                                    needs="num_experts",
                                    help="the shared experts' output times sigmoid(x·w), a "
                                         "learned gate of d_model weights (Qwen2-MoE)")
    router: str = spec("softmax", kind=CHOICE, flag="--router", group=EXTRAS, choices=ROUTERS,
                       needs="num_experts",
                       help="softmax over the experts (Mixtral, Qwen3) or a sigmoid each "
                            "(DeepSeek-V3; with --router-topk-first, of the top k: Llama 4)")
    router_groups: int = spec(1, kind=SIZE, flag="--router-groups", group=EXTRAS, needs="num_experts",
                              help="DeepSeek's n_group: the experts in this many groups (default 1)")
    router_topk_groups: int = spec(1, kind=SIZE, flag="--router-topk-groups", group=EXTRAS,
                                   needs="num_experts",
                                   help="DeepSeek's topk_group: the groups chosen before the "
                                        "experts (group-limited routing; default 1)")
    router_bias: bool = spec(False, kind=FLAG, flag="--router-bias", group=EXTRAS, needs="num_experts",
                             help="DeepSeek-V3's e_score_correction_bias (a buffer) on the choice")
    # ERNIE 4.5 keeps the correction bias as a frozen nn.Parameter (Ernie4_5_MoeStatics): E
    # more parameters per MoE layer in the count, where DeepSeek-V3's is a buffer
    router_bias_param: bool = spec(False, kind=FLAG, flag="--router-bias-param", group=EXTRAS,
                                   needs="num_experts",
                                   help="--router-bias held as a frozen parameter (ERNIE 4.5: "
                                        "counted), not a buffer")
    norm_topk_prob: bool = spec(True, kind=FLAG, flag="--norm-topk-prob", group=EXTRAS,
                                needs="num_experts",
                                help="renormalise the chosen experts' weights to sum to 1 (default)")
    routed_scaling_factor: float = spec(1.0, kind=NUMBER, flag="--routed-scaling-factor",
                                        group=EXTRAS, needs="num_experts",
                                        help="the routed experts' weights scaled by X (default 1)")
    dense_layers: tuple[int, ...] = spec((), kind=LAYERS, flag="--dense-layers", group=EXTRAS,
                                         needs="num_experts",
                                         help="layers that keep a dense MLP among MoE layers "
                                              "(DeepSeek's first k)")
    moe_capacity_factor: float | None = spec(None, kind=NUMBER, flag="--capacity-factor",
                                             group=EXTRAS, needs="num_experts",
                                             help="each expert runs ⌈X·B·T·k/E⌉ rows (padding or "
                                                  "dropping); default dropless")
    # DeepSeek-V2's group score and gpt-oss's router and experts (the clamped SwiGLU is the
    # mlp "swiglu_clamped"): each off by default, so every other model is unchanged
    router_group_score: str = spec("top2_sum", kind=CHOICE, flag="--router-group-score",
                                   group=EXTRAS, choices=GROUP_SCORES, needs="num_experts",
                                   help="how group-limited routing ranks a group: top2_sum "
                                        "(DeepSeek-V3, default) or max (DeepSeek-V2)")
    router_topk_first: bool = spec(False, kind=FLAG, flag="--router-topk-first", group=EXTRAS,
                                   needs="num_experts",
                                   help="top-k over the router's logits first, then the softmax "
                                        "(or sigmoid) over the k chosen only (gpt-oss)")
    router_linear_bias: bool = spec(False, kind=FLAG, flag="--router-linear-bias", group=EXTRAS,
                                    needs="num_experts",
                                    help="a learned bias on the router's linear map (gpt-oss)")
    expert_bias: bool = spec(False, kind=FLAG, flag="--expert-bias", group=EXTRAS,
                             needs="num_experts",
                             help="biases on the routed experts' matrices (gpt-oss)")
    # Qwen3-Next's gated attention (Qiu et al. 2025, "Gated Attention for LLMs"): a second
    # projection of Q's width (transformers doubles q_proj) whose sigmoid scales the heads'
    # merged output before the output projection
    attn_output_gate: bool = spec(False, kind=FLAG, flag="--attn-output-gate", group=EXTRAS,
                                  help="attention's merged heads times sigmoid(W_g x), a gate "
                                       "of Q's width, before the output projection "
                                       "(Qwen3-Next)")
    # one learned logit per head, an extra column of every softmax row (gpt-oss)
    attention_sinks: bool = spec(False, kind=FLAG, flag="--attention-sinks", group=EXTRAS,
                                 help="a learned sink logit per head joins each attention "
                                      "softmax row (gpt-oss)")
    # multi-head latent attention (DeepSeek-V2/V3): set kv_lora_rank and the head dims
    q_lora_rank: int | None = spec(None, kind=SIZE, flag="--q-lora-rank", group=EXTRAS,
                                   help="latent attention: the query latent width (default: none)")
    kv_lora_rank: int | None = spec(None, kind=SIZE, flag="--kv-lora-rank", group=EXTRAS,
                                    help="multi-head latent attention: the K/V latent width (with "
                                         "--qk-nope-head-dim, --qk-rope-head-dim, --v-head-dim)")
    qk_nope_head_dim: int | None = spec(None, kind=SIZE, flag="--qk-nope-head-dim", group=EXTRAS,
                                        help="latent attention: per-head Q/K dims without RoPE")
    qk_rope_head_dim: int | None = spec(None, kind=SIZE, flag="--qk-rope-head-dim", group=EXTRAS,
                                        help="latent attention: per-head Q/K dims with RoPE")
    v_head_dim: int | None = spec(None, kind=SIZE, flag="--v-head-dim", group=EXTRAS,
                                  help="latent attention: per-head value dims")
    # DeepSeek Sparse Attention (DeepSeek-V3.2; transformers' DeepseekV32Indexer): a lightning
    # indexer in every latent-attention layer scores all T keys per query with index_heads
    # heads of index_head_dim (ReLU, weighted per head, no gradients) and the attention keeps
    # the index_topk best: executed T×T in the eager core, T·k useful, plus the indexer's T²
    index_heads: int | None = spec(None, kind=SIZE, flag="--index-heads", group=EXTRAS,
                                   help="DeepSeek-V3.2's lightning indexer: its heads (with "
                                        "--index-head-dim and --index-topk; latent attention)")
    index_head_dim: int | None = spec(None, kind=SIZE, flag="--index-head-dim", group=EXTRAS,
                                      help="the indexer's head dimension (its first "
                                           "qk_rope_head_dim dims rotated)")
    index_topk: int | None = spec(None, kind=SIZE, flag="--index-topk", group=EXTRAS,
                                  help="the keys each query attends, chosen by the indexer")
    # Llama 4 (transformers' modeling_llama4.py): layers without RoPE (NoPE), chunked
    # attention (layer_types "chunked"), a weightless QK-norm after RoPE (qk_norm "l2"),
    # attention-temperature tuning on the NoPE layers, and a router whose sigmoid weight
    # scales the expert's input (router sigmoid, router_topk_first, router_scales_input)
    nope_layers: tuple[int, ...] = spec((), kind=LAYERS, flag="--nope-layers", group=EXTRAS,
                                        help="layers without RoPE (NoPE: Llama 4's every 4th)")
    attention_chunk: int | None = spec(None, kind=SIZE, flag="--attention-chunk", group=EXTRAS,
                                       help="a chunked layer's query attends only the keys of its "
                                            "own chunk of C tokens (every layer chunked unless "
                                            "--layer-types says which)")
    temperature_floor: int | None = spec(None, kind=SIZE, flag="--temperature-floor",
                                         group=EXTRAS,
                                         help="NoPE layers scale Q at position i by 1 + "
                                              "s·log(1 + ⌊(i + 1)/F⌋) (Llama 4's floor_scale F)")
    temperature_scale: float = spec(0.1, kind=NUMBER, flag="--temperature-scale", group=EXTRAS,
                                    needs="temperature_floor",
                                    help="the temperature tuning's s (Llama 4's attn_scale, 0.1)")
    router_scales_input: bool = spec(False, kind=FLAG, flag="--router-scales-input",
                                     group=EXTRAS, needs="num_experts",
                                     help="the router's weight (the sigmoid of its top-k raw "
                                          "scores: --router sigmoid --router-topk-first) scales "
                                          "each expert's input and "
                                          "every expert runs every token, the unchosen at weight "
                                          "0 (Llama 4: E·B·T expert rows executed, B·T·k useful)")

    # multi-token prediction (DeepSeek-V3 §2.2, GLM-4.5): modules that train beside the model
    # (accounting/analysis/mtp.py); not in the model's parameter count or its inference
    mtp_layers: int = spec(0, kind=COUNT, flag="--mtp-layers", group=EXTRAS,
                           help="multi-token-prediction modules (DeepSeek-V3's "
                                "num_nextn_predict_layers): counted apart and in training, "
                                "left out at inference")
    # ---- hybrid models (issue 31): token mixers without attention, chosen per layer by
    # layer_types. A gated DeltaNet layer (Qwen3-Next's Qwen3NextGatedDeltaNet, Yang et al.
    # 2024, "Gated Delta Networks"): in_proj_qkvz and in_proj_ba, a depthwise causal conv1d
    # over Q, K and V, the chunked gated delta rule (fla's chunk_gated_delta_rule, chunk 64;
    # transformers' torch_chunk_gated_delta_rule), a gated RMSNorm, out_proj. A short
    # convolution (LFM2's Lfm2ShortConv): in_proj to B, C, x; B·x; a depthwise causal conv1d;
    # C·conv; out_proj.
    conv_kernel: int | None = spec(None, kind=SIZE, flag="--conv-kernel", group=EXTRAS,
                                   help="the depthwise causal convolution's width K of the "
                                        "recurrent layers (LFM2's conv_L_cache, Qwen3-Next's "
                                        "linear_conv_kernel_dim)")
    conv_bias: bool = spec(False, kind=FLAG, flag="--conv-bias", group=EXTRAS,
                           help="biases on the short convolution layers' in_proj, conv and "
                                "out_proj (LFM2's conv_bias)")
    linear_key_heads: int | None = spec(None, kind=SIZE, flag="--linear-key-heads", group=EXTRAS,
                                        help="gated DeltaNet layers: query/key heads "
                                             "(linear_num_key_heads); KDA layers: their heads, "
                                             "as many as linear_value_heads")
    linear_value_heads: int | None = spec(None, kind=SIZE, flag="--linear-value-heads",
                                          group=EXTRAS,
                                          help="gated DeltaNet layers: value heads, a multiple "
                                               "of the key heads (linear_num_value_heads)")
    linear_key_head_dim: int | None = spec(None, kind=SIZE, flag="--linear-key-head-dim",
                                           group=EXTRAS,
                                           help="gated DeltaNet layers: each query/key head's "
                                                "width (linear_key_head_dim)")
    linear_value_head_dim: int | None = spec(None, kind=SIZE, flag="--linear-value-head-dim",
                                             group=EXTRAS,
                                             help="gated DeltaNet layers: each value head's "
                                                  "width (linear_value_head_dim)")
    # Qwen3.5's Qwen3_5GatedDeltaNet (transformers 5.23's modular_qwen3_5.py): the same
    # layer with in_proj_qkv, in_proj_z, in_proj_b and in_proj_a for Qwen3-Next's two
    linear_split_proj: bool = spec(False, kind=FLAG, flag="--linear-split-proj", group=EXTRAS,
                                   needs="linear_key_heads",
                                   help="gated DeltaNet layers: four input projections "
                                        "(in_proj_qkv, in_proj_z, in_proj_b, in_proj_a: "
                                        "Qwen3.5) instead of in_proj_qkvz and in_proj_ba "
                                        "(Qwen3-Next); the same parameters and FLOPs, other "
                                        "LoRA targets and no regrouping copies")
    # Mamba-2 layers (layer_types "mamba"; Nemotron-H's NemotronHMamba2Mixer, transformers'
    # Mamba2Mixer): in_proj to z, x·B·C, dt; conv1d over x·B·C; the chunked SSD scan;
    # a grouped gated RMSNorm; out_proj
    mamba_heads: int | None = spec(None, kind=SIZE, flag="--mamba-heads", group=EXTRAS,
                                   help="Mamba-2 layers: heads (mamba_num_heads)")
    mamba_head_dim: int | None = spec(None, kind=SIZE, flag="--mamba-head-dim", group=EXTRAS,
                                      help="Mamba-2 layers: each head's width (mamba_head_dim)")
    ssm_state: int | None = spec(None, kind=SIZE, flag="--ssm-state", group=EXTRAS,
                                 help="Mamba-2 layers: the state per head (ssm_state_size)")
    mamba_groups: int = spec(1, kind=SIZE, flag="--mamba-groups", group=EXTRAS,
                             help="Mamba-2 layers: groups sharing B and C (n_groups, default 1)")
    mamba_chunk: int = spec(256, kind=SIZE, flag="--mamba-chunk", group=EXTRAS,
                            help="Mamba-2 layers: the SSD scan's chunk (chunk_size, default 256)")
    mamba_bias: bool = spec(False, kind=FLAG, flag="--mamba-bias", group=EXTRAS,
                            help="Mamba-2 layers: biases on in_proj and out_proj (use_bias)")
    mamba_dt_min: float = spec(0.0, kind=NUMBER0, flag="--mamba-dt-min", group=EXTRAS,
                               help="Mamba-2 layers: dt clamped from below (time_step_min; "
                                    "changes no count)")
    # Falcon-H1 (layer_types "hybrid": attention and a Mamba-2 mixer side by side, summed;
    # FalconH1DecoderLayer): its mixer without the grouped gated RMSNorm (mamba_rms_norm
    # false: y·SiLU(z)), and its muP multipliers, each an elementwise op transformers runs
    mamba_gate_only: bool = spec(False, kind=FLAG, flag="--mamba-gate-only", group=EXTRAS,
                                 help="Mamba-2 layers: y·SiLU(z) before out_proj, no grouped "
                                      "gated RMSNorm (Falcon-H1's mamba_rms_norm false)")
    mup_multipliers: bool = spec(False, kind=FLAG, flag="--mup-multipliers", group=EXTRAS,
                                 help="Falcon-H1's muP multipliers on hybrid layers: attention "
                                      "input, K and output, the Mamba-2 input, in_proj output "
                                      "(per channel) and output, the MLP's gate and output")
    # Mamba-1 layers (layer_types "mamba1"; Jamba's JambaMambaMixer): in_proj to x and z;
    # conv1d over x; x_proj to dt, B, C (each RMS-normed); dt_proj; the sequential selective
    # scan with a d_state state per channel; out_proj (ssm_state, conv_kernel, conv_bias,
    # mamba_bias as Mamba-2's)
    mamba_inner: int | None = spec(None, kind=SIZE, flag="--mamba-inner", group=EXTRAS,
                                   help="Mamba-1 layers: the inner width (mamba_expand · "
                                        "hidden_size)")
    mamba_dt_rank: int | None = spec(None, kind=SIZE, flag="--mamba-dt-rank", group=EXTRAS,
                                     help="Mamba-1 layers: dt's rank (mamba_dt_rank)")
    linear_chunk: int = spec(64, kind=SIZE, flag="--linear-chunk", group=EXTRAS,
                             help="gated DeltaNet layers: the chunk size C of the chunked delta "
                                  "rule (default 64: fla's chunk_gated_delta_rule and "
                                  "transformers' torch_chunk_gated_delta_rule)")

    # ---- Gemma 4 (issue 31; transformers' modeling_gemma4.py): global layers with their own
    # head shape and K = V, a weightless RMSNorm on V, a dense MLP beside the experts
    global_head_dim: int | None = spec(None, kind=SIZE, flag="--global-head-dim", group=EXTRAS,
                                       help="global (full-attention) layers' head dimension, "
                                            "where local ones use head_dim (Gemma 4)")
    global_kv_heads: int | None = spec(None, kind=SIZE, flag="--global-kv-heads", group=EXTRAS,
                                       help="global layers' key/value heads (Gemma 4's "
                                            "num_global_key_value_heads)")
    global_k_eq_v: bool = spec(False, kind=FLAG, flag="--global-k-eq-v", group=EXTRAS,
                               help="global layers have no v_proj: V is K's projection "
                                    "(Gemma 4's attention_k_eq_v)")
    v_norm: bool = spec(False, kind=FLAG, flag="--v-norm", group=EXTRAS,
                        help="a weightless RMSNorm of each value head (Gemma 4)")
    mlp_beside_moe: bool = spec(False, kind=FLAG, flag="--mlp-beside-moe", group=EXTRAS,
                                needs="num_experts",
                                help="MoE layers run a dense MLP (d_ff) beside the experts, "
                                     "each output normed, summed (Gemma 4's enable_moe_block; "
                                     "its router: weightless RMSNorm, a d_model scale, a "
                                     "per-expert scale)")
    layer_scalar: bool = spec(False, kind=FLAG, flag="--layer-scalar", group=EXTRAS,
                              help="each block's output times a one-element buffer (Gemma 4)")
    # Gemma 4 E2B/E4B (transformers' Gemma4TextModel): per-layer embeddings (PLE) and the
    # last layers reading earlier layers' K and V (accounting/architecture/derived.py)
    per_layer_input: int | None = spec(None, kind=SIZE, flag="--per-layer-input", group=EXTRAS,
                                       help="per-layer embeddings of this width into every "
                                            "block (Gemma 4's hidden_size_per_layer_input)")
    per_layer_vocab: int | None = spec(None, kind=SIZE, flag="--per-layer-vocab", group=EXTRAS,
                                       needs="per_layer_input",
                                       help="rows of the per-layer embedding table (default: "
                                            "vocab_size; vocab_size_per_layer_input)")
    kv_shared_layers: int = spec(0, kind=COUNT, flag="--kv-shared-layers", group=EXTRAS,
                                 help="the last n layers reuse K and V of the last earlier "
                                      "layer of their kind: no K/V projections, no cache "
                                      "(Gemma 4's num_kv_shared_layers)")
    double_wide_mlp: bool = spec(False, kind=FLAG, flag="--double-wide-mlp", group=EXTRAS,
                                 help="the KV-sharing layers' MLP is 2·d_ff wide (Gemma 4's "
                                      "use_double_wide_mlp)")

    def __post_init__(self) -> None:
        _plain_numbers(self)
        validate(self)

    @cached_property
    def layer_kinds(self) -> tuple[LayerKind, ...]:
        """Each block's kind, in order. Computed once per config (the instance's __dict__;
        the frozen fields never change): callers index it per layer, and recomputing it per
        index made the many-GPU plan quadratic in the layer count (issue 32: 1,000 layers
        on 64 GPUs with --search, 202 s)."""
        default = "local" if self.sliding_window else "chunked" if self.attention_chunk else "global"
        types = self.layer_types or (default,) * self.num_layers
        dense, nope = set(self.dense_layers), set(self.nope_layers)
        first_shared = self.num_layers - self.kv_shared_layers
        return tuple(LayerKind(t == "local", self.num_experts is not None and i not in dense,
                               t == "chunked", i in nope,
                               t if t in MIXER_TYPES or t == "mlp" else "attention",
                               i >= first_shared)
                     for i, t in enumerate(types))

    @property
    def architecture(self) -> str:
        """The choices in words, e.g. 'pre-norm RMSNorm, SwiGLU, RoPE, multi-head attention,
        untied LM head, no biases' (accounting/architecture/describe.py)."""
        return describe.architecture(self)

    def model_kwargs(self) -> dict:
        """Keyword arguments for model.TransformerLM."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "name"}

    def with_overrides(self, **overrides) -> ModelConfig:
        """A copy with the given fields changed (None: keep). A new num_layers keeps the
        per-layer lists in step unless they are given too: dense_layers keeps the indices
        below it (nope_layers too); layer_types repeats its pattern (the first n layers' kinds, Gemma's
        alternation continued)."""
        changed = {k: v for k, v in overrides.items() if v is not None and getattr(self, k) != v}
        n = changed.get("num_layers")
        if n is not None and isinstance(n, int) and not isinstance(n, bool) and n > 0:
            for f in ("dense_layers", "nope_layers"):  # the indices below n
                if overrides.get(f) is None and getattr(self, f):
                    changed[f] = tuple(i for i in getattr(self, f) if i < n)
            if overrides.get("layer_types") is None and self.layer_types:
                types = self.layer_types
                changed["layer_types"] = tuple(types[i % len(types)] for i in range(n))
            if changed.get("nope_layers") == () and overrides.get("temperature_floor") is None \
                    and overrides.get("temperature_scale") is None:
                # the temperature tuning acts on NoPE layers only: with none left, none
                changed.update(temperature_floor=None, temperature_scale=next(
                    f.default for f in fields(self) if f.name == "temperature_scale"))
        if not changed:
            return self
        return replace(self, name=self.name if self.name == "custom" else f"{self.name} (modified)",
                       **changed)


def _plain_numbers(c: ModelConfig) -> None:
    """numpy's scalars as the Python numbers they hold, as analyze() takes them (issue 45:
    ModelConfig refused np.int64(100) as 'not a positive integer'): an integer type is one
    with __index__ (never bool), a numpy float is read by float(). Nothing is imported."""
    for f in fields(c):
        v = getattr(c, f.name)
        if isinstance(v, (bool, int, float, str)) or v is None:
            continue
        if type(v).__module__ == "numpy":
            if hasattr(v, "__index__") and type(v).__name__ != "bool":
                object.__setattr__(c, f.name, v.__index__())
            elif hasattr(v, "is_integer"):  # numpy's floating scalars
                object.__setattr__(c, f.name, float(v))
