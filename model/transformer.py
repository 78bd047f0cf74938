"""Pre-norm Transformer block and the full decoder-only LM (section 3.6).

The course's model is the default of every keyword-only argument; the others build the
architectures of accounting/architecture/config.py's spec (TransformerLM.from_config).
"""

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from dataclasses import fields

from accounting.architecture.config import MLPS, ModelConfig

from .attention import CausalMultiHeadSelfAttention
from .latent_attention import LatentAttention
from .layers import ACTIVATIONS, NORM_CLASSES, Embedding, Linear, check_positive_int, feed_forward
from .moe import MoE
from .recurrent import ShortConv
from .delta import GatedDeltaNet
from .kda import KimiDeltaAttention
from .mamba import Mamba2Mixer
from .mamba1 import Mamba1Mixer

MLA_OPTIONS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
               "index_heads", "index_head_dim", "index_topk")  # the last three: DeepSeek-V3.2
# The variants' options and their defaults are the spec's fields (accounting/architecture/config.py),
# read here once, not restated: the default of every option is the course's model. The
# course's own arguments (sizes, rope_theta) stay positional, as CS336's adapters pass them.
_COURSE_ARGS = ("vocab_size", "context_length", "d_model", "num_layers", "num_heads", "d_ff",
                "rope_theta", "name")
SPEC_DEFAULTS = {f.name: f.default for f in fields(ModelConfig)}
OPTIONS = {k: v for k, v in SPEC_DEFAULTS.items() if k not in _COURSE_ARGS}
# the options each block reads (the rest belong to the whole model: positions, layer kinds, MoE)
BLOCK_OPTIONS = ("num_kv_heads", "head_dim", "norm", "norm_eps", "norm_placement", "mlp",
                 "qkv_bias", "out_bias", "mlp_bias", "qk_norm", "attention", "attention_sinks",
                 "block", "rotary_dim", "positions", *MLA_OPTIONS, "norm_offset",
                 "attn_output_gate",
                 "residual_multiplier", "attn_softcap", "v_norm", "mlp_beside_moe", "layer_scalar",
                 "global_k_eq_v")


def _options(given: dict, allowed, where: str) -> dict:
    """The spec's defaults for `allowed`, overridden by `given`; an unknown option is refused."""
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise TypeError(f"{where} got unknown option(s) {', '.join(unknown)}; the options are "
                        f"the spec's fields: {', '.join(allowed)}")
    return {k: given.get(k, OPTIONS[k]) for k in allowed}


class TransformerBlock(nn.Module):
    """y = x + MHA(RMSNorm(x)); z = y + FFN(RMSNorm(y)) (eq. 15 and figure 2).

    Norms sit on the sublayer inputs, leaving an un-normalized residual stream.
    norm_placement="post" is OLMo-2's: y = x + ln1(MHA(x)); z = y + ln2(FFN(y)).
    norm_placement="sandwich" is Gemma 2/3's (Gemma2DecoderLayer): y = x + post_attn_norm(
    MHA(ln1(x))); z = y + post_ffn_norm(FFN(ln2(y))). residual_multiplier m (Granite's
    GraniteDecoderLayer) scales each sublayer's output before its add: y = x + m·MHA(...).
    block="parallel" (GPT-NeoX, Falcon-40B): z = x + MHA(ln1(x)) + FFN(ln2(x));
    "parallel_shared_norm" (Falcon-7B): h = ln1(x), z = x + MHA(h) + FFN(h), no ln2.
    """

    def __init__(self, d_model, num_heads, d_ff, max_seq_len, theta, device=None, dtype=None, *,
                 window=None, chunk=None, temperature=None, moe=None, mixer=None,
                 kv_share=None, per_layer=None, **options):
        o = _options(options, BLOCK_OPTIONS, "TransformerBlock")
        norm, norm_eps, mlp = o["norm"], o["norm_eps"], o["mlp"]
        norm_placement, qkv_bias, out_bias = o["norm_placement"], o["qkv_bias"], o["out_bias"]
        offset = {"offset": True} if o["norm_offset"] else {}  # Gemma's (1 + w) gains
        self.residual_multiplier = o["residual_multiplier"]
        attention, kv_lora_rank = o["attention"], o["kv_lora_rank"]
        super().__init__()
        if o["layer_scalar"]:  # Gemma4TextDecoderLayer.layer_scalar: a persistent buffer
            self.register_buffer("layer_scalar", torch.ones(1, device=device, dtype=torch.float32))
        else:
            self.layer_scalar = None
        if norm not in NORM_CLASSES:
            raise ValueError(f"norm must be one of {', '.join(NORM_CLASSES)}, got {norm!r}")
        if norm_placement not in ("pre", "post", "sandwich"):
            raise ValueError(f"norm_placement must be pre, post or sandwich, got {norm_placement!r}")
        self.post_norm, self.sandwich = norm_placement == "post", norm_placement == "sandwich"
        if o["block"] not in ("sequential", "parallel", "parallel_shared_norm", "single"):
            raise ValueError(f"block must be sequential, parallel, parallel_shared_norm or "
                             f"single, got {o['block']!r}")
        if o["block"] != "sequential" and norm_placement != "pre":
            raise ValueError("a parallel block needs norm_placement pre")
        self.block = o["block"]
        norm_cls = NORM_CLASSES[norm]
        self.ln1 = norm_cls(d_model, eps=norm_eps, device=device, dtype=dtype, **offset)
        single = self.block == "single"  # one sublayer per block (Nemotron-H)
        kind = None if mixer is None else mixer["kind"]
        if kind == "mlp":  # a block with its MLP only (single): no token mixer
            pass
        elif mixer is not None:  # a recurrent token mixer (issue 31): mixer holds its options
            # (a hybrid layer's attention is built below, beside it)
            options = {k: v for k, v in mixer.items() if k != "kind"}
            # registered under transformers' names for them (Lfm2DecoderLayer.conv,
            # Qwen3NextDecoderLayer.linear_attn); .attn is the block's token mixer
            if kind == "conv":
                self.conv = ShortConv(d_model, device=device, dtype=dtype, **options)
            elif kind == "linear_attention":
                self.linear_attn = GatedDeltaNet(d_model, device=device, dtype=dtype,
                                                 norm_eps=norm_eps, **options)
            elif kind == "kda":  # Kimi Linear's KDA (registered .kda: model/kda.py)
                self.kda = KimiDeltaAttention(d_model, device=device, dtype=dtype,
                                              norm_eps=norm_eps, **options)
            elif kind in ("mamba", "hybrid"):  # NemotronHBlock.mixer, FalconH1DecoderLayer.mamba
                self.mixer = Mamba2Mixer(d_model, device=device, dtype=dtype, norm_eps=norm_eps,
                                         **{k: v for k, v in options.items() if k != "mup"},
                                         mup=options.get("mup", False))
            elif kind == "mamba1":  # JambaMambaDecoderLayer.mamba
                self.mixer = Mamba1Mixer(d_model, device=device, dtype=dtype, norm_eps=norm_eps,
                                         **options)
            else:
                raise ValueError(f"mixer must be conv, linear_attention, kda, mamba, hybrid, "
                                 f"mamba1 or mlp, got {kind!r}")
        if kind not in (None, "hybrid"):
            pass  # no attention: the recurrent mixer (or none, "mlp") mixes the tokens
        elif kv_lora_rank is not None:  # multi-head latent attention (DeepSeek)
            self.attn = LatentAttention(
                d_model, num_heads, max_seq_len=max_seq_len, theta=theta, device=device,
                dtype=dtype, **{k: o[k] for k in MLA_OPTIONS}, qkv_bias=qkv_bias,
                out_bias=out_bias, norm=norm, norm_eps=norm_eps, attention=attention, window=window)
        else:
            self.attn = CausalMultiHeadSelfAttention(
                d_model, num_heads, max_seq_len=max_seq_len, theta=theta, device=device, dtype=dtype,
                num_kv_heads=o["num_kv_heads"], head_dim=o["head_dim"], qkv_bias=qkv_bias,
                out_bias=out_bias, qk_norm=o["qk_norm"], norm=norm, norm_eps=norm_eps,
                attention=attention, window=window, attention_sinks=o["attention_sinks"],
                norm_offset=o["norm_offset"], attn_softcap=o["attn_softcap"],
                rotary_dim=o["rotary_dim"], alibi=o["positions"] == "alibi",
                chunk=chunk, temperature=temperature, output_gate=o["attn_output_gate"],
                k_eq_v=o["global_k_eq_v"], v_norm=o["v_norm"], kv_share=kv_share,
            )
        if self.sandwich:
            self.post_attn_norm = norm_cls(d_model, eps=norm_eps, device=device, dtype=dtype, **offset)
        if self.block not in ("parallel_shared_norm", "single"):
            self.ln2 = norm_cls(d_model, eps=norm_eps, device=device, dtype=dtype, **offset)
        if single and kind != "mlp":
            pass  # the token mixer is the block's one sublayer
        elif moe is not None and o["mlp_beside_moe"]:  # Gemma 4: the MLP and the experts
            # side by side, each output normed (post_feedforward_layernorm_1/_2), the
            # experts' input its own norm (pre_feedforward_layernorm_2)
            if not self.sandwich:
                raise ValueError("mlp_beside_moe needs norm_placement sandwich")
            self.ffn = feed_forward(mlp, d_model, d_ff, device=device, dtype=dtype, bias=o["mlp_bias"])
            self.moe = MoE(d_model, device=device, dtype=dtype, activation=MLPS[mlp].activation,
                           gains=True, norm_eps=norm_eps, **moe)
            for n in ("post_ffn_norm_1", "pre_ffn_norm_2", "post_ffn_norm_2"):
                setattr(self, n, norm_cls(d_model, eps=norm_eps, device=device, dtype=dtype, **offset))
        elif moe is not None:  # a mixture of experts: moe holds MoE's options
            self.ffn = MoE(d_model, device=device, dtype=dtype,
                           activation=MLPS[mlp].activation, **moe)
        else:
            self.ffn = feed_forward(mlp, d_model, d_ff, device=device, dtype=dtype, bias=o["mlp_bias"])
        # Falcon-H1's muP multipliers (hybrid layers): scalars at 1.0 here, as its defaults
        # (their values change no count); each is an op transformers runs
        self.is_hybrid = kind == "hybrid"
        self.mup = self.is_hybrid and mixer.get("mup", False)
        if self.mup:
            self.attn.key_multiplier = 1.0
            self.ffn.multipliers = (1.0, 1.0)
        if self.sandwich:
            self.post_ffn_norm = norm_cls(d_model, eps=norm_eps, device=device, dtype=dtype, **offset)
        # Gemma4TextDecoderLayer's per-layer input (per_layer: its width d_ple): gate
        # (d → d_ple), the MLP's activation, × the layer's per-layer input, projection
        # (d_ple → d), norm, added to the residual before layer_scalar
        if per_layer is not None:
            if not self.sandwich:
                raise ValueError("per-layer inputs need norm_placement sandwich (Gemma 4)")
            self.per_layer_input_gate = Linear(d_model, per_layer, device=device, dtype=dtype)
            self.per_layer_projection = Linear(per_layer, d_model, device=device, dtype=dtype)
            self.post_per_layer_input_norm = norm_cls(d_model, eps=norm_eps, device=device,
                                                      dtype=dtype, **offset)
            self.per_layer_act = ACTIVATIONS[MLPS[mlp].activation]
        self.per_layer = per_layer

    @property
    def attn(self) -> nn.Module:
        """The block's token mixer: its attention, or a recurrent layer (self.conv)."""
        for name in ("conv", "linear_attn", "kda", "attn", "mixer"):  # hybrid: attn beside mixer
            if name in self._modules:
                return self._modules[name]
        return None  # a block with its MLP only

    def scaled(self, out: torch.Tensor) -> torch.Tensor:
        """A sublayer's output as added to the residual (× residual_multiplier, if set)."""
        return out if self.residual_multiplier is None else out * self.residual_multiplier

    def forward(self, x: torch.Tensor, token_positions: torch.Tensor | None = None,
                per_layer_input: torch.Tensor | None = None) -> torch.Tensor:
        # x: (batch seq d_model) -> (batch seq d_model)
        if self.block == "single":  # x + sublayer(ln1(x)) (NemotronHBlock)
            h = self.ln1(x)
            return x + self.scaled(self.attn(h, token_positions) if self.attn is not None
                                   else self.ffn(h))
        if self.block != "sequential":  # attention and MLP both read x, both add to it
            h = self.ln1(x)
            y = x + self.scaled(self.attn(h, token_positions))
            return y + self.scaled(self.ffn(h if self.block == "parallel_shared_norm" else self.ln2(x)))
        if self.post_norm:
            y = x + self.scaled(self.ln1(self.attn(x, token_positions)))
            return y + self.scaled(self.ln2(self.ffn(y)))
        if self.sandwich:
            y = x + self.scaled(self.post_attn_norm(self.attn(self.ln1(x), token_positions)))
            f = self.ffn(self.ln2(y))
            if "moe" in self._modules:  # Gemma4TextDecoderLayer: the router reads y
                f = self.post_ffn_norm_1(f) + self.post_ffn_norm_2(
                    self.moe(self.pre_ffn_norm_2(y), router_x=y))
            z = y + self.scaled(self.post_ffn_norm(f))
            if self.per_layer is not None:
                g = self.per_layer_act(self.per_layer_input_gate(z)) * per_layer_input
                z = z + self.post_per_layer_input_norm(self.per_layer_projection(g))
            return z if self.layer_scalar is None else z * self.layer_scalar
        h = self.ln1(x)
        y = x + self.scaled(self.hybrid(h, token_positions) if self.is_hybrid
                            else self.attn(h, token_positions))
        z = y + self.scaled(self.ffn(self.ln2(y)))
        return z


    def hybrid(self, h: torch.Tensor, token_positions=None) -> torch.Tensor:
        """FalconH1DecoderLayer: mamba(h)·ssm_out + attn(h·attention_in)·attention_out (the
        multipliers with mup), the Mamba-2 mixer first."""
        if not self.mup:
            return self.mixer(h) + self.attn(h, token_positions)
        m = self.mixer(h) * 1.0
        return m + self.attn(h * 1.0, token_positions) * 1.0


class TransformerLM(nn.Module):
    """Embedding -> num_layers pre-norm blocks -> final RMSNorm -> untied LM head (figure 1).

    positions="learned" adds a learned table of context_length positions (GPT-2) instead
    of RoPE ("none": neither); tie_embeddings=True makes the LM head read the token
    embedding table (one parameter, registered under both names in the state dict).
    """

    def __init__(
        self,
        vocab_size,
        context_length,
        d_model,
        num_layers,
        num_heads,
        d_ff,
        rope_theta=SPEC_DEFAULTS["rope_theta"],
        device=None,
        dtype=None,
        **options,
    ):
        o = _options(options, OPTIONS, "TransformerLM")
        positions, sliding_window, layer_types = o["positions"], o["sliding_window"], o["layer_types"]
        num_experts, moe_d_ff, dense_layers = o["num_experts"], o["moe_d_ff"], o["dense_layers"]
        block_options = {k: o[k] for k in BLOCK_OPTIONS}
        block_options["global_k_eq_v"] = False  # a local layer's; _global_shape sets it
        super().__init__()
        check_positive_int("vocab_size", vocab_size)
        check_positive_int("context_length", context_length)
        check_positive_int("num_layers", num_layers)
        if positions not in ("rope", "learned", "none", "alibi"):
            raise ValueError(f"positions must be rope, learned, none or alibi, got {positions!r}")
        self.vocab_size, self.context_length = vocab_size, context_length
        self.token_embeddings = Embedding(vocab_size, d_model, device=device, dtype=dtype)
        if positions == "learned":
            self.position_embeddings = Embedding(context_length, d_model, device=device, dtype=dtype)
        theta = rope_theta if positions == "rope" else None
        moe = None if num_experts is None else dict(
            num_experts=num_experts, d_ff=d_ff if moe_d_ff is None else moe_d_ff,
            capacity_factor=o["moe_capacity_factor"], scales_input=o["router_scales_input"],
            **{k: o[k] for k in ("experts_per_token", "num_shared_experts", "router", "router_groups",
                                 "router_topk_groups", "router_bias", "norm_topk_prob",
                                 "routed_scaling_factor", "router_group_score",
                                 "router_topk_first", "router_linear_bias", "expert_bias",
                                 "shared_expert_gate", "router_bias_param", "shared_d_ff",
                                 "moe_latent_size")})
        chunk, nope = o["attention_chunk"], o["nope_layers"]
        default = "local" if sliding_window else "chunked" if chunk else "global"
        types = layer_types or (default,) * num_layers
        # Llama 4's NoPE layers: no RoPE; their queries' temperature tuned when asked
        floor = o["temperature_floor"]
        temperature = None if floor is None else (floor, o["temperature_scale"])
        # Gemma 4's KV sharing: the last kv_shared_layers layers read the K and V each kind's
        # last earlier layer wrote (one dict for the model, keyed by the layer's kind)
        first_shared = num_layers - o["kv_shared_layers"]
        self._shared_kv: dict = {}
        share = (lambda i: None) if not o["kv_shared_layers"] else \
            (lambda i: (self._shared_kv, types[i], i >= first_shared))
        wide = (lambda i: d_ff) if not o["double_wide_mlp"] else \
            (lambda i: 2 * d_ff if i >= first_shared else d_ff)
        self.layers = nn.ModuleList(
            TransformerBlock(d_model, num_heads, wide(i), context_length,
                             None if i in nope else theta, device=device, dtype=dtype,
                             window=sliding_window if types[i] == "local" else None,
                             chunk=chunk if types[i] == "chunked" else None,
                             temperature=temperature if i in nope else None,
                             moe=None if i in dense_layers else moe,
                             mixer=self._mixer(types[i], o), kv_share=share(i),
                             per_layer=o["per_layer_input"],
                             **(block_options if types[i] == "local" else
                                self._global_shape(block_options, o)))
            for i in range(num_layers)
        )
        self.ln_final = NORM_CLASSES[o["norm"]](d_model, eps=o["norm_eps"], device=device, dtype=dtype,
                                                **({"offset": True} if o["norm_offset"] else {}))
        # Gemma/Granite: the embeddings scaled; the logits scaled (Granite, Cohere), then
        # soft-capped (Gemma2ForCausalLM: cap·tanh(logits/cap))
        self.embedding_multiplier = o["embedding_multiplier"]
        self.logit_scale, self.final_softcap = o["logit_scale"], o["final_softcap"]
        self.lm_head = Linear(d_model, vocab_size, device=device, dtype=dtype,
                              bias=o["lm_head_bias"])
        if o["tie_embeddings"]:
            self.lm_head.weight = self.token_embeddings.weight
        self.per_layer = o["per_layer_input"]
        if self.per_layer is not None:  # Gemma4TextModel's per-layer embeddings (its order:
            # after the final norm; the tied head is the token table's, registered before)
            width = num_layers * self.per_layer
            vocab = vocab_size if o["per_layer_vocab"] is None else o["per_layer_vocab"]
            self.per_layer_embeddings = Embedding(vocab, width, device=device, dtype=dtype)
            self.per_layer_model_projection = Linear(d_model, width, device=device, dtype=dtype)
            self.per_layer_projection_norm = NORM_CLASSES[o["norm"]](
                self.per_layer, eps=o["norm_eps"], device=device, dtype=dtype,
                **({"offset": True} if o["norm_offset"] else {}))
        self.recompute = "none"

    @staticmethod
    def _global_shape(block: dict, o: dict) -> dict:
        """A non-local layer's options: Gemma 4's global head shape and K = V where given."""
        out = dict(block, global_k_eq_v=o["global_k_eq_v"])
        if o["global_head_dim"] is not None:
            out["head_dim"] = o["global_head_dim"]
        if o["global_kv_heads"] is not None:
            out["num_kv_heads"] = o["global_kv_heads"]
        return out

    @staticmethod
    def _mixer(kind: str, o: dict) -> dict | None:
        """A recurrent layer's options (None: an attention layer)."""
        if kind == "conv":
            return {"kind": "conv", "kernel": o["conv_kernel"], "bias": o["conv_bias"]}
        if kind in ("mamba", "hybrid"):
            return {"kind": kind, "heads": o["mamba_heads"], "head_dim": o["mamba_head_dim"],
                    "state": o["ssm_state"], "groups": o["mamba_groups"],
                    "kernel": o["conv_kernel"], "chunk": o["mamba_chunk"],
                    "conv_bias": o["conv_bias"], "bias": o["mamba_bias"],
                    "dt_min": o["mamba_dt_min"], "gate_only": o["mamba_gate_only"],
                    **({"mup": o["mup_multipliers"]} if kind == "hybrid" else {})}
        if kind == "mamba1":
            return {"kind": "mamba1", "inner": o["mamba_inner"], "dt_rank": o["mamba_dt_rank"],
                    "state": o["ssm_state"], "kernel": o["conv_kernel"],
                    "conv_bias": o["conv_bias"], "bias": o["mamba_bias"]}
        if kind == "mlp":
            return {"kind": "mlp"}
        if kind == "kda":  # one head count and width for Q, K (linear_key_*) and V
            return {"kind": "kda", "heads": o["linear_key_heads"],
                    "key_dim": o["linear_key_head_dim"], "value_dim": o["linear_value_head_dim"],
                    "kernel": o["conv_kernel"], "chunk": o["linear_chunk"]}
        if kind == "linear_attention":
            return {"kind": "linear_attention", "key_heads": o["linear_key_heads"],
                    "value_heads": o["linear_value_heads"], "key_dim": o["linear_key_head_dim"],
                    "value_dim": o["linear_value_head_dim"], "kernel": o["conv_kernel"],
                    "chunk": o["linear_chunk"], "split": o["linear_split_proj"]}
        return None

    def per_layer_inputs(self, token_ids: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Gemma4TextModel.get_per_layer_inputs and project_per_layer_inputs: the table's rows
        · √d_ple, and norm(projection(x) · d_model^-½), both (... seq L d_ple), summed,
        · 2^-½."""
        shape = (*token_ids.shape, len(self.layers), self.per_layer)
        e = (self.per_layer_embeddings(token_ids) * self.per_layer ** 0.5).reshape(shape)
        p = self.per_layer_model_projection(x) * x.shape[-1] ** -0.5
        p = self.per_layer_projection_norm(p.reshape(shape))
        return (p + e) * 2.0 ** -0.5

    def set_recompute(self, mode: str) -> "TransformerLM":
        """Activation recomputation for training (torch.utils.checkpoint, non-reentrant, no
        RNG state: the model has no dropout): "full" checkpoints each block (keeps its input,
        runs it again in backward), "selective" only each attention core (Korthikanti et al.
        2022), "none" keeps everything (the default)."""
        if mode not in ("none", "full", "selective"):
            raise ValueError(f"recompute must be none, full or selective, got {mode!r}")
        self.recompute = mode
        for layer in self.layers:
            if layer.attn is not None:  # (a block with its MLP only has none)
                layer.attn.recompute_core = mode == "selective"  # every token mixer has it
        return self

    @classmethod
    def from_config(cls, config, context_length=None, device=None, dtype=None):
        """The model of an accounting.architecture.config.ModelConfig (its spec: which operations run).
        context_length overrides the config's (a longer RoPE table, for T > context_length)."""
        kwargs = config.model_kwargs()
        if context_length is not None:
            kwargs["context_length"] = context_length
        return cls(**kwargs, device=device, dtype=dtype)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        # token_ids: (batch seq) int -> logits: (batch seq vocab), unnormalized
        seq = token_ids.shape[-1]
        if seq > self.context_length:
            raise ValueError(
                f"sequence length {seq} exceeds context_length {self.context_length}; "
                f"build the model with context_length >= {seq}"
            )
        x = self.token_embeddings(token_ids)  # (batch seq d_model)
        if self.embedding_multiplier is not None:
            x = x * self.embedding_multiplier
        if hasattr(self, "position_embeddings"):
            x = x + self.position_embeddings(torch.arange(seq, device=token_ids.device))
        per_layer = self.per_layer_inputs(token_ids, x) if self.per_layer is not None else None
        for i, layer in enumerate(self.layers):
            # a block takes its per-layer input only where there is one (Gemma 4): the course's
            # call, layer(x), stays as it is (tensor parallelism's PrepareModuleInput counts
            # a block's inputs)
            args = (x,) if per_layer is None else (x, None, per_layer[..., i, :])
            if self.recompute == "full":
                x = checkpoint(layer, *args, use_reentrant=False, preserve_rng_state=False)
            else:
                x = layer(*args)
        logits = self.lm_head(self.ln_final(x))
        if self.logit_scale is not None:
            logits = logits * self.logit_scale
        if self.final_softcap is not None:
            logits = torch.tanh(logits / self.final_softcap) * self.final_softcap
        return logits
