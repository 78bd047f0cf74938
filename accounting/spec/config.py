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

from dataclasses import MISSING, dataclass, fields, replace

from accounting.runtime.errors import UsageError, escape, shorten
from accounting.spec.fields import (CHOICE, COUNT, EXTRAS, FLAG, LAYERS, NUMBER, NUMBER0, SIZE,
                                     SIZES, TEXT, TYPES, meta, spec)


def default_d_ff(d_model: int) -> int:
    """8/3·d_model rounded up to a multiple of 64 (CS336 §3.5.2), in integers."""
    if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model <= 0:
        raise UsageError(f"d_model must be a positive integer, got {d_model!r}")
    return -(-8 * d_model // (3 * 64)) * 64


@dataclass(frozen=True)
class MLPKind:
    """A feed-forward network: gated (W2(act(W1 x) * W3 x), three matrices) or plain
    (W2 act(W1 x), two matrices), and its activation."""
    name: str
    gated: bool
    activation: str  # "silu", "gelu_tanh" (tanh approximation) or "gelu" (exact, erf)
    label: str

    def default_d_ff(self, d_model: int) -> int:
        # gated: the 8/3 rule keeps the parameter count of a 4·d plain MLP (CS336 §3.5.2)
        return default_d_ff(d_model) if self.gated else 4 * d_model


MLPS: dict[str, MLPKind] = {m.name: m for m in (
    MLPKind("swiglu", True, "silu", "SwiGLU"),
    MLPKind("geglu", True, "gelu_tanh", "GeGLU (tanh GELU)"),
    # the llama family with hidden_act "gelu": ACT2FN["gelu"] is transformers' GELUActivation,
    # the exact (erf) GELU (activations.py), in LlamaMLP's gate
    MLPKind("geglu_erf", True, "gelu", "GeGLU (exact erf GELU)"),
    MLPKind("gelu", False, "gelu", "GELU MLP (exact erf GELU)"),
    MLPKind("gelu_tanh", False, "gelu_tanh", "GELU MLP (tanh approximation, as GPT-2)"),
    # gpt-oss's experts: clamp(gate, max=7)·sigmoid(1.702·gate) · (clamp(up, ±7) + 1)
    MLPKind("swiglu_clamped", True, "silu_clamped", "clamped SwiGLU (gpt-oss)"),
)}
# layernorm_nobias: mean-centred LayerNorm with a weight and no bias (transformers'
# CohereLayerNorm, modeling_cohere.py)
NORMS = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm", "layernorm_nobias": "LayerNorm (no bias)"}
NORM_PLACEMENTS = {"pre": "pre-norm (norm on each sublayer's input)",
                   "post": "post-sublayer norm (OLMo-2: norm on each sublayer's output, "
                           "inside the residual)",
                   "sandwich": "sandwich norms (Gemma 2/3: a norm on each sublayer's input "
                               "and another on its output, inside the residual)"}
POSITIONS = {"rope": "RoPE", "learned": "learned absolute positions", "none": "no positions",
             "alibi": "ALiBi (a linear bias per head on the scores; Falcon)"}
QK_NORMS = {"none": "no QK-norm", "head": "QK-norm per head (Qwen3)",
            "full": "QK-norm over the full projection width (OLMo-2)",
            # Cohere's use_qk_norm (CohereAttention: CohereLayerNorm((num_heads, head_dim))):
            # each head's d_k vector normalised, with its own d_k weight per head
            "per_head": "QK-norm per head with a weight per head (Command R+)"}
ATTENTIONS = {"naive": "explicit scores, causal mask and softmax (the course's attention)",
              "sdpa": "fused attention kernel: F.scaled_dot_product_attention(is_causal=True)"}
ROUTERS = {"softmax": "softmax over the experts' scores (Mixtral, Qwen3-MoE)",
           "sigmoid": "a sigmoid per expert's score (DeepSeek-V3)"}
# how group-limited routing ranks a group of experts (router_groups > 1)
GROUP_SCORES = {"top2_sum": "the sum of its two best scores (DeepSeek-V3)",
                "max": "its best score (DeepSeek-V2's group_limited_greedy)"}
BLOCKS = {"sequential": "attention, then the MLP on its result",
          "parallel": "attention and MLP in parallel on the block input, a norm each "
                      "(GPT-NeoX, Falcon-40B)",
          "parallel_shared_norm": "attention and MLP in parallel on one shared norm of the "
                                  "block input (Falcon-7B)"}
LAYER_TYPES = ("global", "local")  # full causal attention, or a sliding window of the last W keys


@dataclass(frozen=True)
class LayerKind:
    """What one block runs: global or local (sliding-window) attention; a dense or MoE MLP."""
    local: bool
    moe: bool

    @property
    def tag(self) -> str:
        return "_".join(t for t in (("local" if self.local else "global"),
                                     ("moe" if self.moe else "dense")))

# Bounds on sizes: far beyond any real model, small enough that nothing downstream hangs.
MAX_SIZE = 10**12
MAX_LAYERS = 10**4  # every path answers in well under a second (10^7 took 80 s and 1.5 GB)
MAX_REAL = 10**18  # rope_theta, norm_eps, factors: floats, and ints torch takes (< 2^63)
MAX_NAME = 200  # characters of a config's name (it heads every table)
MAX_CONFIG_BYTES = 2**20  # a config file is a few hundred bytes; a JSON file is read whole


@dataclass(frozen=True)
class ModelConfig:
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
                         "gelu (exact), gelu_tanh (GPT-2), swiglu_clamped (gpt-oss)")
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
                        help="none (default), head (Qwen3), full (OLMo-2) or per_head (Cohere: "
                             "a d_k weight for each head)")
    attention: str = spec("naive", kind=CHOICE, flag="--attention", choices=ATTENTIONS,
                          help="how the attention core runs: naive (default: the course's explicit "
                               "scores, mask and softmax) or sdpa (the fused kernel, "
                               "F.scaled_dot_product_attention)")
    # -- the parallel block and partial rotary (GPT-NeoX, Falcon, Phi-3; Cohere can reuse them)
    # parallel: attention and MLP both read the block input x, and both add to it:
    # x + attn(ln1(x)) + mlp(ln2(x)) (GPT-NeoX's use_parallel_residual, Falcon-40B's ln_attn
    # and ln_mlp), or with one shared norm x + attn(ln1(x)) + mlp(ln1(x)) (Falcon-7B's
    # parallel_attn, Cohere): no ln2
    block: str = spec("sequential", kind=CHOICE, flag="--block", choices=BLOCKS,
                      help="sequential (default: y = x + attn, y + mlp), parallel (x + attn + "
                           "mlp, a norm each) or parallel_shared_norm (one norm feeds both)")
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
                                               help="each layer's attention, one per layer")
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
    router: str = spec("softmax", kind=CHOICE, flag="--router", group=EXTRAS, choices=ROUTERS,
                       needs="num_experts",
                       help="softmax over the experts (Mixtral, Qwen3) or a sigmoid each (DeepSeek-V3)")
    router_groups: int = spec(1, kind=SIZE, flag="--router-groups", group=EXTRAS, needs="num_experts",
                              help="DeepSeek's n_group: the experts in this many groups (default 1)")
    router_topk_groups: int = spec(1, kind=SIZE, flag="--router-topk-groups", group=EXTRAS,
                                   needs="num_experts",
                                   help="DeepSeek's topk_group: the groups chosen before the "
                                        "experts (group-limited routing; default 1)")
    router_bias: bool = spec(False, kind=FLAG, flag="--router-bias", group=EXTRAS, needs="num_experts",
                             help="DeepSeek-V3's e_score_correction_bias (a buffer) on the choice")
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

    def __post_init__(self) -> None:
        for f in _SIZES + ("num_kv_heads", "head_dim"):
            value = getattr(self, f)
            if value is None and f in ("num_kv_heads", "head_dim"):
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise UsageError(f"{f} must be a positive integer, got {_short(value)}")
            if not 0 < value <= MAX_SIZE:
                raise UsageError(f"{f} must be a positive integer up to 10^12, got {_short(value)}")
        if self.num_layers > MAX_LAYERS:
            raise UsageError(f"num_layers must be at most {MAX_LAYERS:,}, got {self.num_layers:,}")
        for f, low in (("rope_theta", "positive"), ("norm_eps", "non-negative")):
            value = getattr(self, f)
            finite = isinstance(value, (int, float)) and not isinstance(value, bool) \
                and value == value and abs(value) <= MAX_REAL
            if not finite or value < 0 or (low == "positive" and value == 0):
                raise UsageError(f"{f} must be a {low} finite number up to 10^18, got {_short(value)}")
        for f, choices in _CHOICES.items():
            if not _one_of(getattr(self, f), choices):
                raise UsageError(f"{f} must be one of {', '.join(choices)}, got {_short(getattr(self, f))}")
        for f in _FLAGS:
            if not isinstance(getattr(self, f), bool):
                raise UsageError(f"{f} must be true or false, got {_short(getattr(self, f))}")
        if not isinstance(self.name, str):
            raise UsageError(f"name must be a string, got {_short(self.name)}")
        if len(self.name) > MAX_NAME or escape(self.name) != self.name:
            raise UsageError(f"name must be at most {MAX_NAME} printable characters (no "
                             f"newlines or control characters), got {_short(self.name)}")
        if self.head_dim is None and self.kv_lora_rank is None and self.d_model % self.num_heads:
            hint = _divisor_hint(self.d_model, self.num_heads, self.positions, self.num_kv_heads)
            raise UsageError(
                f"d_model {self.d_model} is not divisible by num_heads {self.num_heads}; choose "
                f"num_heads dividing d_model{hint}, or give head_dim")
        if self.num_heads % self.kv_heads:
            raise UsageError(f"num_heads {self.num_heads} is not divisible by num_kv_heads "
                             f"{self.kv_heads}; each key/value head serves a whole group of query heads")
        if self.positions == "rope" and self.mla is False and self.d_k % 2:
            what = "head_dim" if self.head_dim is not None else "head dimension d_model/num_heads"
            raise UsageError(f"{what} = {self.d_k} is odd; RoPE rotates pairs, so choose an even "
                             f"head dimension (or positions other than rope)")
        if self.attention_sinks and (self.attention != "naive" or self.mla):
            raise UsageError("attention_sinks need the naive attention core of grouped or "
                             "multi-head attention (the fused kernel has no sink column; latent "
                             "attention has none): drop --attention sdpa or the latent ranks")
        _check_block_and_positions(self)
        _check_window(self)
        _check_scales(self)
        _check_moe(self)
        _check_mla(self)

    # ---- derived sizes ------------------------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def d_k(self) -> int:
        """Head dimension; d_v = d_k (CS336 §3.5.5: d_model/h unless head_dim is given; with
        latent attention, qk_nope_head_dim + qk_rope_head_dim)."""
        if self.kv_lora_rank is not None:
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.d_model // self.num_heads if self.head_dim is None else self.head_dim

    @property
    def group_size(self) -> int:
        """Query heads per key/value head."""
        return self.num_heads // self.kv_heads

    @property
    def mlp_kind(self) -> MLPKind:
        return MLPS[self.mlp]

    @property
    def mla(self) -> bool:
        """Multi-head latent attention (kv_lora_rank set)."""
        return self.kv_lora_rank is not None

    @property
    def expert_d_ff(self) -> int:
        return self.d_ff if self.moe_d_ff is None else self.moe_d_ff

    @property
    def layer_kinds(self) -> tuple[LayerKind, ...]:
        """Each block's kind, in order."""
        types = self.layer_types or (("local" if self.sliding_window else "global"),) * self.num_layers
        dense = set(self.dense_layers)
        return tuple(LayerKind(t == "local", self.num_experts is not None and i not in dense)
                     for i, t in enumerate(types))

    @property
    def architecture(self) -> str:
        """The choices in words, e.g. 'pre-norm RMSNorm, SwiGLU, RoPE, multi-head attention,
        untied LM head, no biases'."""
        h, kv = self.num_heads, self.kv_heads
        attn = ("multi-head attention" if kv == h else "multi-query attention" if kv == 1
                else f"grouped-query attention ({h // kv} query heads per KV head)")
        if self.d_k * h != self.d_model:
            attn += f", head_dim {self.d_k}"
        biases = [n for n, on in (("QKV", self.qkv_bias), ("attention output", self.out_bias),
                                  ("MLP", self.mlp_bias), ("router", self.router_linear_bias),
                                  ("experts", self.expert_bias)) if on]
        placement = {"pre": "pre-norm", "post": "post-sublayer-norm",
                     "sandwich": "sandwich-norm"}[self.norm_placement]
        parts = [f"{placement} {NORMS[self.norm]}" + (" (1 + w gains)" if self.norm_offset else ""),
                 self.mlp_kind.label, POSITIONS[self.positions], attn]
        if self.rotary_dim is not None:
            parts[2] = f"RoPE on {self.rotary_dim} of {self.d_k} dims per head"
        if self.qk_norm != "none":
            parts.append(QK_NORMS[self.qk_norm])
        if self.attention_sinks:
            parts.append("attention sinks")
        if self.mla:
            parts[3] = (f"multi-head latent attention (kv_lora_rank {self.kv_lora_rank}"
                        + (f", q_lora_rank {self.q_lora_rank}" if self.q_lora_rank else "") + ")")
        if self.block != "sequential":
            parts.insert(1, "parallel attention and MLP" + (
                " (one shared norm)" if self.block == "parallel_shared_norm" else ""))
        kinds = self.layer_kinds
        n_local = sum(k.local for k in kinds)
        if n_local:
            parts.append(f"sliding window {self.sliding_window:,}"
                         + ("" if n_local == len(kinds) else f" on {n_local} of {len(kinds)} layers"))
        if self.num_experts is not None:
            n_moe = sum(k.moe for k in kinds)
            parts.append(f"MoE: {self.num_experts} experts, top-{self.experts_per_token}"
                         + (f", {self.num_shared_experts} shared" if self.num_shared_experts else "")
                         + ("" if n_moe == len(kinds) else f", on {n_moe} of {len(kinds)} layers"))
        if self.attention != "naive":
            parts.append("fused attention kernel (SDPA)")
        parts += [f"{what} {value:g}" for what, value in (
            ("embeddings ×", self.embedding_multiplier), ("sublayer outputs ×", self.residual_multiplier),
            ("scores soft-capped at", self.attn_softcap), ("logits ×", self.logit_scale),
            ("logits soft-capped at", self.final_softcap)) if value is not None]
        parts.append("tied LM head" if self.tie_embeddings else "untied LM head")
        parts.append("biases on " + ", ".join(biases) if biases else "no biases")
        return ", ".join(parts)

    def model_kwargs(self) -> dict:
        """Keyword arguments for model.TransformerLM."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "name"}

    def with_overrides(self, **overrides) -> ModelConfig:
        """A copy with the given fields changed (None: keep). A new num_layers keeps the
        per-layer lists in step unless they are given too: dense_layers keeps the indices
        below it; layer_types repeats its pattern (the first n layers' kinds, Gemma's
        alternation continued)."""
        changed = {k: v for k, v in overrides.items() if v is not None and getattr(self, k) != v}
        n = changed.get("num_layers")
        if n is not None and isinstance(n, int) and not isinstance(n, bool) and n > 0:
            if overrides.get("dense_layers") is None and self.dense_layers:
                changed["dense_layers"] = tuple(i for i in self.dense_layers if i < n)
            if overrides.get("layer_types") is None and self.layer_types:
                types = self.layer_types
                changed["layer_types"] = tuple(types[i % len(types)] for i in range(n))
        if not changed:
            return self
        return replace(self, name=self.name if self.name == "custom" else f"{self.name} (modified)",
                       **changed)


# What __post_init__ checks field by field, read from the fields' metadata (fields.py), in
# the spec's order: the required sizes; the choices and switches of the core architecture (the
# mixture of experts' own are checked with it, in _check_moe, which knows whether it applies).
_SIZES = tuple(f.name for f in fields(ModelConfig) if meta(f).kind == SIZE and f.default is MISSING)
_CHOICES = {f.name: meta(f).choices for f in fields(ModelConfig)
            if meta(f).kind == CHOICE and meta(f).needs is None}
_FLAGS = tuple(f.name for f in fields(ModelConfig) if meta(f).kind == FLAG and meta(f).needs is None)


def _positive(c: ModelConfig, f: str, allow_none: bool = True) -> None:
    value = getattr(c, f)
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_SIZE:
        raise UsageError(f"{f} must be a positive integer up to 10^12, got {_short(value)}")


def _check_block_and_positions(c: ModelConfig) -> None:
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


def _check_window(c: ModelConfig) -> None:
    _positive(c, "sliding_window")
    if c.layer_types is not None:
        if not isinstance(c.layer_types, tuple) or len(c.layer_types) != c.num_layers \
                or any(not _one_of(t, LAYER_TYPES) for t in c.layer_types):
            raise UsageError(f"layer_types must list {c.num_layers} entries (one per layer), each "
                             f"global or local, got {_short(c.layer_types)}")
        if "local" in c.layer_types and c.sliding_window is None:
            raise UsageError("layer_types has local layers but sliding_window is not given")


def _check_scales(c: ModelConfig) -> None:
    """The Gemma/Granite scalars: positive finite numbers or none, where they can run."""
    for f in ("embedding_multiplier", "residual_multiplier", "attn_softcap", "final_softcap",
              "logit_scale"):
        value = getattr(c, f)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not 0 < value <= MAX_REAL):
            raise UsageError(f"{f} must be a positive finite number up to 10^18 (or none), got "
                             f"{_short(value)}")
    if c.norm_offset and (c.norm != "rmsnorm" or c.mla):
        raise UsageError("norm_offset (gains applied as 1 + w) is Gemma's RMSNorm, without "
                         "latent attention; use norm rmsnorm and no kv_lora_rank, or drop "
                         "norm_offset")
    if c.attn_softcap is not None and (c.attention != "naive" or c.mla):
        raise UsageError("attn_softcap needs the explicit attention scores: the fused kernel "
                         "(attention sdpa) and latent attention cannot soft-cap them; use "
                         "attention naive without latent attention, or drop attn_softcap")


def _check_moe(c: ModelConfig) -> None:
    for f in ("num_experts", "moe_d_ff"):
        _positive(c, f)
    for f in ("experts_per_token", "router_groups", "router_topk_groups"):
        _positive(c, f, allow_none=False)
    if isinstance(c.num_shared_experts, bool) or not isinstance(c.num_shared_experts, int) \
            or not 0 <= c.num_shared_experts <= MAX_SIZE:
        raise UsageError(f"num_shared_experts must be a non-negative integer, got {_short(c.num_shared_experts)}")
    if not _one_of(c.router, ROUTERS):
        raise UsageError(f"router must be one of {', '.join(ROUTERS)}, got {_short(c.router)}")
    if not _one_of(c.router_group_score, GROUP_SCORES):
        raise UsageError(f"router_group_score must be one of {', '.join(GROUP_SCORES)}, got "
                         f"{_short(c.router_group_score)}")
    for f in ("router_bias", "norm_topk_prob", "router_topk_first", "router_linear_bias",
              "expert_bias"):
        if not isinstance(getattr(c, f), bool):
            raise UsageError(f"{f} must be true or false, got {_short(getattr(c, f))}")
    for f, none_ok in (("routed_scaling_factor", False), ("moe_capacity_factor", True)):
        value = getattr(c, f)
        if value is None and none_ok:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_REAL:
            raise UsageError(f"{f} must be a positive finite number up to 10^18, got {_short(value)}")
    if c.moe_capacity_factor is not None and c.moe_capacity_factor < 1:
        raise UsageError(f"moe_capacity_factor {c.moe_capacity_factor} is below 1: it drops tokens "
                         "even under perfectly balanced routing; use 1 or more (or none: dropless)")
    if not isinstance(c.dense_layers, tuple) or any(
            isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < c.num_layers for i in c.dense_layers):
        raise UsageError(f"dense_layers must be layer indices in [0, {c.num_layers}), got "
                         f"{_short(c.dense_layers)}")
    if c.num_experts is None:
        return
    if not c.mlp_kind.gated or c.mlp_bias:
        gated = ", ".join(name for name, kind in MLPS.items() if kind.gated)
        raise UsageError(f"mixture-of-experts layers run gated experts ({gated}) and mlp_bias "
                         f"false (expert_bias gives the routed experts biases), got mlp "
                         f"{c.mlp}{' with biases' if c.mlp_bias else ''}")
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


def _check_mla(c: ModelConfig) -> None:
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


def _one_of(value, choices) -> bool:
    """Whether a config's value is one of the choices' names: a string first (a JSON list
    or object is unhashable: `in` a dict would raise TypeError, not say what is wrong)."""
    return isinstance(value, str) and value in choices


def _short(value, limit: int = 40) -> str:
    """A user's value for an error message: repr, control characters escaped, shortened."""
    return shorten(value, limit)


def _divisor_hint(n: int, target: int, positions: str, kv_heads: int | None = None) -> str:
    """' (e.g. 24)': a nearby head count that divides n and passes the other checks (an even
    head dimension for RoPE, whole groups of the given KV heads); bounded work however
    large n is."""
    best = None
    for delta in range(0, 10_000):
        for d in (target - delta, target + delta):
            if 0 < d <= n and n % d == 0 and (positions != "rope" or (n // d) % 2 == 0) \
                    and (kv_heads is None or d % kv_heads == 0):
                best = d
                break
        if best:
            break
    return f" (e.g. {best})" if best else ""
