"""A training recipe as data: which implementation runs the model, in which precision, with
which attention kernel, recomputation and optimizer, and what is trained. The defaults
follow the input: the course presets (gpt2-small … gpt2-xl on the CS336 architecture) are
planned as model/ runs them, in fp32; a Hugging Face config.json or hub preset as
transformers' modeling code runs it (SDPA attention, its buffers and saved tensors), in bf16
mixed precision (bf16 autocast over fp32 parameters: what transformers' Trainer does with
bf16=True and what torchtitan and Megatron-LM default to), bf16 at inference.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import partial

from accounting.ledger.builder.common import (COURSE, LLMFOUNDRY, TORCHTUNE, TRANSFORMERS,
                                              cohere_layout, deepseek_v2_layout,
                                              deepseek_v3_layout, llama4_layout,
                                              gemma2_layout, gemma3_layout, gemma4_layout,
                                              gpt2_layout, gpt_oss_layout, nemotron_h_layout,
                                              qwen3_next_layout)
from accounting.planning.optimizers import DEFAULT_OPTIMIZER, OPTIMIZERS, get_optimizer, is_default
from accounting.planning.precisions import BF16_MASTER, BF16_MIXED, get_precision
from accounting.runtime.errors import UsageError
from accounting.architecture.checks import DROPOUTS
from accounting.architecture.config import ModelConfig
from accounting.units import FP32

IMPLEMENTATIONS = {
    COURSE: "model/ as written (the course's eager ops: RoPE cos/sin tables in every block, "
            "RMSNorm by sqrt and divide, SiLU as x·sigmoid(x))",
    TRANSFORMERS: "transformers' modeling code (AutoModelForCausalLM, attn_implementation="
                  "'sdpa', or its eager attention where it refuses SDPA): one rotary module "
                  "with two d_k/2 inv_freq buffers, cos/sin computed once per pass, "
                  "LlamaRMSNorm, F.silu; its saved tensors measured on its own model "
                  "(tests/test_transformers_saves.py, and _eager, _deepseek, _llama4, _gpt2, "
                  "_gemma4, _hybrid beside it)",
    LLMFOUNDRY: "llm-foundry's MPT (llmfoundry/models/mpt/modeling_mpt.py, layers/blocks.py "
                "MPTBlock, at mosaicml/llm-foundry@c90b9b3): LPLayerNorm (F.layer_norm on the "
                "bf16 input: saves it and fp32 mean and 1/σ), nn.GELU in one op (saves its "
                "input), its flash/triton attention kernel (no T×T tensor), no dropout",
    TORCHTUNE: "torchtune's own Llama (torchtune 0.6.1, models/llama3_1/_component_builders.py): "
               "its ops planned as transformers' Llama's (RMSNorm in float32, F.silu, SDPA); "
               "its LoRA adapters in the model's dtype (LoRALinear: bf16 under bf16), its "
               "QLoRA base in torchao's NF4Tensor layout; its recipes' chunked loss is "
               "--loss chunked, its standard one on the decoder's float32 logits "
               "(output(h).float(), freed before the backward pass)",
}
ATTENTION_NAMES = {"naive": "naive (the course's explicit softmax(QKᵀ)V, T×T scores saved)",
                   "sdpa": "SDPA (F.scaled_dot_product_attention, fused: no T×T tensor saved)"}
TRAIN_FULL = "full"
# NemotronHMamba2Mixer's path planned (builder/hf_mamba.py): the torch ops transformers runs
# without mamba_ssm; with it, mamba_ssm's fused MambaSplitConv1dScanCombinedFn saves far less
# (state-spaces/mamba mamba_ssm/ops/triton/ssd_combined.py: zxbcdt, the scan's output and
# the norm's rstd per layer) and is not modelled
# Qwen3-Next's and Qwen3.5's gated DeltaNet (builder/delta.py hf): torch_chunk_gated_delta_rule
# and causal_conv1d_fn's F.conv1d, what transformers runs without flash-linear-attention; with
# it, fla's ChunkGatedDeltaRuleFunction keeps q, k, v, g, β, the chunks' A and the L2 norms'
# rstd (fla-org/flash-linear-attention fla/ops/gated_delta_rule/chunk.py, its
# save_for_backward), not modelled
DELTA_TORCH_PATH = ("gated DeltaNet layers as transformers' torch path runs them, without "
                    "flash-linear-attention; its chunk kernels are not modelled")
MAMBA_TORCH_PATH = ("Mamba-2 layers as transformers' torch path runs them, without mamba_ssm; "
                    "its fused kernel is not modelled")
# transformers' eager_attention_forward (builder/hf_eager.py): the kernel of the models it
# refuses SDPA for (eager_only)
EAGER = ("eager (transformers' eager_attention_forward: T×T scores and probabilities saved; "
         "transformers runs this model without SDPA)")

# Spec fields whose transformers ops tests/test_transformers_saves.py measures (llama,
# mistral, qwen2, qwen3, qwen3_moe, olmo2): sizes, biases, a tied head, GQA, head_dim,
# per-head QK-norm; OLMo-2's post-norms with full-width QK-norm; Qwen3-MoE's sparse block.
_MEASURED = {"vocab_size", "context_length", "num_layers", "d_model", "num_heads", "d_ff",
             "rope_theta", "name", "num_kv_heads", "head_dim", "norm_eps", "tie_embeddings",
             "qkv_bias", "out_bias", "mlp_bias", "attention",
             # which tanh GELU ACT2FN runs: only with a tanh GELU MLP (checks.py), and "mlp"
             # is let through by the GPT-2 and Gemma 2/3 layouts alone (measured there)
             "fused_gelu"}
# sliding-window attention layers (Mistral, Mixtral, Qwen2/3's and OLMo-3's layer_types):
# transformers' SDPA path with its mask and repeat_kv (builder/attention.py hf_masked),
# measured; layer_types only while every layer is an attention layer (not a hybrid's)
_WINDOWS = {"sliding_window", "layer_types"}


# Qwen3-MoE's and Mixtral's sparse blocks (softmax router, top-k, grouped_mm experts),
# measured too (the builder tells them apart by Qwen3's QK-norm: only Qwen3-MoE casts the
# top-k weights to the logits' dtype); other routers set fields outside this list
_MOE = {"num_experts", "experts_per_token", "moe_d_ff", "norm_topk_prob", "dense_layers"}


def foundry_gap(config: ModelConfig) -> str | None:
    """Why llm-foundry's MPT does not run this architecture (None: it does): MPT's block is
    dense, pre-norm LayerNorm, a non-gated GELU MLP, one kind of layer
    (llmfoundry/models/mpt/configuration_mpt.py: norm_type, ffn_config, attn_config)."""
    c = config
    why = [(c.num_experts is not None, "a mixture of experts"), (c.mla, "latent attention"),
           (c.block != "sequential", f"the {c.block} block"),
           (c.norm_placement != "pre", f"{c.norm_placement} norms"),
           (c.norm == "rmsnorm", "RMSNorm (MPT's LPLayerNorm is modelled)"),
           (c.mlp != "gelu", f"the {c.mlp} MLP (MPT's is GELU, not gated)"),
           (len(set(c.layer_kinds)) != 1, "layers of several kinds")]
    return next((what for bad, what in why if bad), None)


# Gemma 3's text layout (Gemma3ForCausalLM, measured too): sandwich norms with (1 + w) gains,
# GELUTanh gating, the scaled embedding, per-head QK-norm, sliding-window layers, a final
# soft-cap. Gemma 2 (no QK-norm) is not: transformers refuses SDPA for it (its attention
# soft-cap; Gemma2PreTrainedModel._supports_sdpa = False), and its scale is no buffer
_GEMMA3 = {"norm_placement", "mlp", "norm_offset", "embedding_multiplier", "sliding_window",
           "layer_types", "final_softcap"}
# Cohere's and Cohere 2's (CohereForCausalLM, Cohere2ForCausalLM, measured too): CohereLayerNorm,
# the parallel block, per-head QK-norm, the logit scale; Cohere 2's sliding and NoPE layers
_COHERE = {"norm", "block", "logit_scale", "qk_norm", "sliding_window", "layer_types",
           "nope_layers"}


# gpt-oss's (GptOssForCausalLM, measured too: tests/test_transformers_eager.py): eager
# attention with sinks (transformers refuses SDPA for it), the biased top-k-first router,
# the clamped SwiGLU experts with biases (grouped_mm), sliding-window layers
_GPT_OSS = {"mlp", "router_topk_first", "router_linear_bias", "expert_bias",
            "attention_sinks"}
# Gemma 2's (Gemma2ForCausalLM, measured too): Gemma 3's layout without QK-norm, with the
# attention soft-cap in transformers' eager attention (one RoPE for every layer)
# DeepSeek-V3's (DeepseekV3ForCausalLM, measured too: tests/test_transformers_deepseek.py):
# latent attention as transformers writes it, the sigmoid router with its correction bias
# and group top-k, shared experts, dense first layers; transformers builds no MTP module
# (resolve plans none)
_DEEPSEEK_V3 = {"num_shared_experts", "router", "router_groups", "router_topk_groups",
                "router_bias", "routed_scaling_factor", "q_lora_rank", "kv_lora_rank",
                "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "mtp_layers"}
# DeepSeek-V3.2's (DeepseekV32ForCausalLM, measured too: tests/test_transformers_deepseek.py):
# V3's, and the lightning indexer (no_grad) whose top-k joins SDPA's mask in every layer
_DEEPSEEK_V32 = _DEEPSEEK_V3 | {"index_heads", "index_head_dim", "index_topk"}
# DeepSeek-V2's (DeepseekV2ForCausalLM, measured too): the latent attention with its complex
# RoPE, the softmax router (greedy or group-limited by each group's best), shared experts
_DEEPSEEK_V2 = {"num_shared_experts", "router_groups", "router_topk_groups",
                "router_group_score", "routed_scaling_factor", "q_lora_rank", "kv_lora_rank",
                "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"}
# Llama 4's text model (Llama4ForCausalLM, measured too): complex RoPE, the L2 QK-norm, NoPE
# layers with temperature tuning, chunked layers (the sliding layers' mask rule at C_a), its
# MoE (top-k then sigmoid, every expert on every token, the shared expert), dense layers
_LLAMA4 = _MOE | {"qk_norm", "layer_types", "num_shared_experts", "router",
                  "router_topk_first", "router_scales_input", "nope_layers", "attention_chunk",
                  "temperature_floor"}
_GEMMA2 = {"norm_placement", "mlp", "norm_offset", "embedding_multiplier", "attn_softcap",
           "final_softcap"}
# Gemma 4's text layout (Gemma4ForCausalLM, measured too: tests/test_transformers_gemma4.py,
# builder/hf_gemma4.py): SDPA, Gemma4RMSNorm (plain gains), the weightless v_norm, global
# layers' own head shape and K = V, layer_scalar, the dense MLP beside the experts
# (26B-A4B), per-layer embeddings and KV sharing (E2B/E4B)
_GEMMA4 = {"norm_placement", "mlp", "embedding_multiplier", "sliding_window", "layer_types",
           "final_softcap", "global_head_dim", "global_kv_heads", "global_k_eq_v", "v_norm",
           "mlp_beside_moe", "layer_scalar", "per_layer_input", "per_layer_vocab",
           "kv_shared_layers", "double_wide_mlp"}


# GPT-2's (GPT2LMHeadModel, measured too: tests/test_transformers_gpt2.py): learned
# positions, nn.LayerNorm, the fused c_attn, the tanh GELU MLP; its dropouts
# (embd/attn/resid_pdrop: builder/dropout.py, in training)
_GPT2 = {"norm", "mlp", "positions", "embedding_dropout", "attention_dropout",
         "residual_dropout"}

# Nemotron-H's (NemotronHForCausalLM, measured too: tests/test_transformers_hybrid.py):
# blocks of one sublayer, the Mamba-2 mixer's torch path (builder/hf_mamba.py), attention
# without RoPE, the squared-ReLU MLP
_NEMOTRON_H = {"mlp", "positions", "block", "layer_types", "conv_kernel", "conv_bias",
               "mamba_heads", "mamba_head_dim", "ssm_state", "mamba_groups", "mamba_chunk",
               "mamba_dt_min", "mamba_bias"}

# Qwen3-Next's and Qwen3.5's (Qwen3NextForCausalLM, Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM,
# measured: tests/test_transformers_hybrid.py): (1 + w) norms, gated attention with partial
# rotary (Qwen3.5's M-RoPE cos/sin per sequence), the gated DeltaNet on transformers' torch
# path (builder/delta.py hf), the sparse block with its gated shared expert; transformers
# builds no MTP module (resolve plans none)
_QWEN_NEXT = {"norm_offset", "rotary_dim", "layer_types", "attn_output_gate", "conv_kernel",
              "linear_key_heads", "linear_value_heads", "linear_key_head_dim",
              "linear_value_head_dim", "linear_split_proj", "linear_chunk",
              "num_shared_experts", "shared_expert_gate", "mtp_layers"}

# each measured family: the layout test (builder/common.py) and the fields it lets through
_LAYOUTS = ((gemma3_layout, _GEMMA3), (cohere_layout, _COHERE), (gpt_oss_layout, _GPT_OSS),
            (gemma2_layout, _GEMMA2), (deepseek_v3_layout, _DEEPSEEK_V3),
            (partial(deepseek_v3_layout, indexer=True), _DEEPSEEK_V32),
            (deepseek_v2_layout, _DEEPSEEK_V2), (llama4_layout, _LLAMA4), (gpt2_layout, _GPT2),
            (gemma4_layout, _GEMMA4), (nemotron_h_layout, _NEMOTRON_H),
            (lambda c: qwen3_next_layout(c) and _grouped_delta(c), _QWEN_NEXT))


def _grouped_delta(c: ModelConfig) -> bool:
    """Grouped DeltaNet heads (h_lk ≠ h_lv, every published Qwen3-Next and Qwen3.5) or none:
    with h_lk = h_lv transformers skips repeat_interleave, and in fp32 with C_l dividing T
    its delta rule then reads the conv output's layout, whose torch.matmul copies are not
    modelled (builder/delta.py ALIASED)."""
    return c.linear_key_heads is None or c.linear_key_heads != c.linear_value_heads


def eager_only(config: ModelConfig) -> str | None:
    """Why transformers runs this model with its eager attention only (None: SDPA too):
    the modeling file's _supports_sdpa = False."""
    if config.attention_sinks:
        return "GptOssPreTrainedModel._supports_sdpa = False: its sinks"
    if config.attn_softcap is not None:
        return "Gemma2PreTrainedModel._supports_sdpa = False: its attention soft-cap"
    return None


def transformers_gap(config: ModelConfig) -> str | None:
    """Why transformers' ops for this architecture are not modelled yet (None: they are)."""
    defaults = {f.name: f.default for f in fields(ModelConfig)}
    measured = _MEASURED | (_MOE if config.qk_norm in ("head", "none") else set())
    olmo2 = config.norm_placement == "post" and config.qk_norm == "full"  # OLMo-2's layout
    if olmo2:
        measured = measured | {"norm_placement", "qk_norm"}
    if all(k.mixer == "attention" and not k.chunked for k in config.layer_kinds):
        measured = measured | _WINDOWS
    for holds, keys in _LAYOUTS:
        if holds(config):
            measured = measured | keys
    other = [f.name for f in fields(ModelConfig) if f.name not in measured
             and getattr(config, f.name) != defaults[f.name]
             and not (f.name == "qk_norm" and config.qk_norm == "head")]
    if not other:
        return None
    # where transformers itself runs no SDPA, say so
    why = eager_only(config)
    eager = f"; transformers runs it without SDPA ({why})" if why else ""
    return (f"{', '.join(other[:3])}{' …' if len(other) > 3 else ''} (transformers' ops are "
            f"measured for the GPT-2, Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE, Mixtral, OLMo-2, "
            f"Gemma 2, Gemma 3, Gemma 4, Cohere, gpt-oss, DeepSeek-V2/V3/V3.2, Llama 4, "
            f"Nemotron-H, Qwen3-Next and Qwen3.5 layouts only{eager})")


@dataclass(frozen=True)
class Recipe:
    implementation: str
    precision: str
    attention: str  # the config's attention kernel: naive or sdpa
    recompute: str
    optimizer: str
    train: str = TRAIN_FULL
    note: str = ""  # why a default was not the input's (e.g. transformers' ops not modelled)

    @property
    def kernel(self) -> str:
        """The attention kernel's short name: naive, sdpa, or eager (transformers' own
        eager attention, for the models it refuses SDPA for)."""
        return "eager" if self.implementation == TRANSFORMERS and self.attention == "naive" \
            else self.attention

    @property
    def attention_meaning(self) -> str:
        return EAGER if self.kernel == "eager" else ATTENTION_NAMES[self.attention]

    def lines(self) -> dict[str, str]:
        """The recipe in words, one line per choice (the first screen and --format json)."""
        opt = get_optimizer(self.optimizer)
        return {"implementation": self.implementation + (f" ({self.note})" if self.note else ""),
                "precision": self.precision,
                "attention": self.attention_meaning,
                "recomputation": self.recompute,
                "optimizer": f"{self.optimizer}: {opt.title}"}


def resolve(config: ModelConfig, from_hf: bool, implementation: str | None = None,
            precision: str | None = None, optimizer: str | None = None,
            recompute: str = "none", attention_given: bool = False,
            scope: str = "model") -> tuple[Recipe, ModelConfig]:
    """The recipe for `config` (from a Hugging Face config.json or hub preset when from_hf),
    with the caller's choices where given, and the config its attention kernel sets."""
    note = ""
    if implementation is None:
        implementation = COURSE
        if from_hf and scope != "course":
            gap = transformers_gap(config)
            if gap is None:
                implementation = TRANSFORMERS
            else:
                note = f"transformers' ops not yet modelled for {gap}"
    if implementation not in IMPLEMENTATIONS:
        raise UsageError(f"unknown implementation {implementation!r}; choose "
                         f"{' or '.join(IMPLEMENTATIONS)}")
    if implementation == TORCHTUNE:  # transformers' Llama ops: the same configs
        why = eager_only(config)  # (torchtune's attention is SDPA: no sinks, no soft-cap)
        gap = transformers_gap(config) or (why and f"a model transformers runs without SDPA "
                                                   f"({why})")
        if gap is not None:
            raise UsageError(f"--implementation {TORCHTUNE} plans torchtune's Llama-family "
                             f"models, and not {gap}; give --implementation course")
        config = replace(config, attention="sdpa")  # its MultiHeadAttention: F.sdpa
    if implementation == TRANSFORMERS:
        gap = transformers_gap(config)
        if gap is not None:
            raise UsageError(f"--implementation transformers is not modelled for {gap}; "
                             f"give --implementation course")
        if config.mtp_layers:  # DeepseekV3ForCausalLM and DeepseekV32ForCausalLM have no
            # MTP module (its weights are dropped on load): transformers trains none
            cls = ("Qwen3_5ForCausalLM" if qwen3_next_layout(config) else
                   "DeepseekV32ForCausalLM" if config.index_topk else "DeepseekV3ForCausalLM")
            note = (f"{cls} builds no MTP module: the config's "
                    f"{config.mtp_layers} MTP layer(s) are not planned")
            config = replace(config, mtp_layers=0)
        if nemotron_h_layout(config):  # which Mamba-2 path: said on the first screen
            note = MAMBA_TORCH_PATH
        if qwen3_next_layout(config) and config.linear_key_heads is not None:
            note = "; ".join(n for n in (note, DELTA_TORCH_PATH) if n)
        why = eager_only(config)
        if why is not None:  # its eager attention, whatever the config said
            if attention_given and config.attention == "sdpa":
                raise UsageError(f"transformers runs {config.name} with its eager attention "
                                 f"only ({why}): drop --attention sdpa or give "
                                 f"--implementation course")
            config = replace(config, attention="naive")
        elif config.attention != "sdpa":
            if attention_given:
                raise UsageError("--implementation transformers plans attn_implementation='sdpa'; "
                                 "transformers' eager attention is modelled only for the models "
                                 "it refuses SDPA for (gpt-oss, Gemma 2): drop --attention naive "
                                 "or give "
                                 "--implementation course")
            config = replace(config, attention="sdpa")
    if implementation == LLMFOUNDRY:
        gap = foundry_gap(config)
        if gap is not None:
            raise UsageError(f"--implementation {LLMFOUNDRY} plans MPT's blocks, and "
                             f"{config.name} has {gap}: give --implementation course")
        if config.attention != "sdpa":  # its flash/triton kernel, whatever --attention says
            config = replace(config, attention="sdpa")
    eager = implementation == TRANSFORMERS and eager_only(config) is not None
    if from_hf and scope != "course" and not attention_given and config.attention != "sdpa" \
            and not eager:
        try:  # transformers' default kernel, either way
            config = replace(config, attention="sdpa")
        except UsageError:  # a config whose attention needs the naive core (DSA's indexer)
            pass
    if precision is None:
        precision = BF16_MIXED if from_hf and scope != "course" else FP32
    get_precision(precision)
    optimizer = optimizer or DEFAULT_OPTIMIZER
    opt = get_optimizer(optimizer)
    if scope == "course" and (not is_default(optimizer) or implementation != COURSE
                              or precision not in (FP32, BF16_MIXED)):
        raise UsageError("--scope course is the CS336 problem's accounting (model/, AdamW, fp32 "
                         "or bf16-mixed): drop --optimizer/--implementation/--precision bf16*, "
                         "or give --scope model")
    if opt.refuses_master and precision == BF16_MASTER:
        raise UsageError(f"--optimizer {optimizer} keeps 8-bit moments, while --precision "
                         f"bf16-master means fp32 moments beside the fp32 master copy: give "
                         f"--precision bf16-mixed, bf16 or fp32 with it")
    if implementation not in (TRANSFORMERS, TORCHTUNE) and any(getattr(config, f)
                                                              for f in DROPOUTS):
        # model/ (and the other implementations planned here) run no dropout: said, not
        # silently dropped (transformers' is counted: builder/dropout.py)
        who = "model/" if implementation == COURSE else f"{implementation}'s model"
        said = f"{who} has no dropout: the config's dropout is not counted"
        note = f"{note}; {said}" if note else said
    return Recipe(implementation, precision, config.attention, recompute, optimizer,
                  note=note), config


__all__ = ["IMPLEMENTATIONS", "OPTIMIZERS", "Recipe", "eager_only", "resolve",
           "transformers_gap"]
