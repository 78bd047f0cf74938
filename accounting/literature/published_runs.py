"""Published, measured training runs (issue 44): each run's settings as the source states
them, the plan's flags that express them, and the peak memory per GPU it measured. The docs'
table (docs/parallel.md, "Published runs") sets the tool's answer beside each
(accounting/cli/published_table.py); tests/test_published_runs.py holds the tool to them.

Sources, read at the commits named (the tables typed here, figure for figure):
  * torchtitan, benchmarks/llama3_h100_202412_torchtitan.md (pytorch/torchtitan at
    31a17bfdb70bab6f62a13d21816a5339b911d6e3; runs at torchtitan 9dec370, torch 1963fc8):
    Grand Teton H100s with 96 GB HBM2e; "Memory(GiB)" is torchtitan's memory monitor,
    torch.cuda.max_memory_reserved (torchtitan/components/metrics.py DeviceMemoryMonitor),
    the maximum over all GPUs. Llama 3.1 8B at seq_len 8192 (torchtitan's llama3_8b.toml)
    unless the table gives a sequence length; 70B and 405B at 8192.
  * torchtitan issue #1185 ("issues on llama3 compile + (async) TP + AC"), danielvegamyhre's
    comment of 2025-05-20, data of 2025-03-25: Llama 3 70B on 128 H100s, full AC, FSDP 16 ×
    TP 8, "peak memory" per TP type and precision. Its unit is written "GB", but the figures
    are torchtitan's log line, which at that date printed max_memory_reserved in GiB
    (torchtitan/components/metrics.py at 1daca4c, 2025-03-25, and 441a63c, 2025-05-20:
    `_to_gib` divides by 1024³, "memory: {max_reserved_gib:5.2f}GiB"): read as GiB. Three
    rows are read (the stored copy of the comment ends after the third; any later row is
    not typed). The settings the comment leaves out are taken from the same author's
    benchmark of the same layout (benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md at
    2887250: Grand Teton H100s with 96 GB HBM2e, torch.compile, local batch size 16) and
    from torchtitan at the data's date (1daca4c): llama3_70b.toml seq_len 8192, AC "full",
    float8 enable_fsdp_float8_all_gather false; components/float8.py: tensorwise (no
    recipe_name) and the "output" linear left out of float8; components/loss.py: the loss
    not compiled ("TODO: compiling loss function causes CUDA errors").
  * torchtitan, benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md (pytorch/torchtitan at
    cbccb38; runs at torchtitan e7c0cae, 2025-06): Llama 3.1 8B on 4 and 8 nodes of 8
    H200, "Memory(GiB)" at the 100th iteration; its command: llama3_8b.toml (at e7c0cae:
    seq_len 8192, data_parallel_shard_degree -1, AC selective "op", float8 filter_fqns
    ["output"]), local_batch_size 2, compile, float8 with enable_fsdp_float8_all_gather,
    precompute_float8_dynamic_scale_for_fsdp and force_recompute_fp8_weight_in_bwd. At
    e7c0cae training.compile also compiles the loss (components/loss.py
    build_cross_entropy_loss, since bbb1b61, 2025-04-02): the plan's --compile-components
    default under --stack torchtitan (planning/loss_memory.py compiled_whole).
  * torchtune, README.md "Memory and training speed" (pytorch/torchtune at
    0031bfb080bd35ec533c412df883cf2bf7bf7fe4): batch size 2, a dataset packed to 2,048
    tokens, torch.compile on; "Peak Memory per GPU" is the recipes' log_memory_stats
    (torchtune/training/memory.py get_memory_stats: peak_memory_active); the configs
    named (recipes/configs/llama3_1/8B_*_single_device.yaml) set bf16 weights, activation
    checkpointing, and for the full fine-tune bitsandbytes' PagedAdamW8bit stepped in the
    backward pass (optimizer_in_bwd: True). The table's figures were set by
    pytorch/torchtune@30b8519e8 ("Readme Updates (#1664)", 2024-09-24), whose configs the
    rows are planned with (unchanged up to 0031bfb in what they plan). The A6000 rows
    name no config: planned as the RTX 4090 rows'. Where a config for them was looked for,
    none found: the README's history (`git log -S "A6000" -- README.md`: e802c057d #357,
    a3fc7ac65 #422, a95c6b931 #551, f6f6855da #615 are the earlier Llama 2 tables;
    30b8519e8 #1664 sets these rows, its message and diff name no config); PR #1664's
    thread and torchtune's issues searched for the table, A6000 and its figures (37.4 GiB,
    30.3 GiB, 2,579 and 4,699 tokens/s); the repository at 30b8519e8 and 0031bfb
    (`git grep -i a6000`: the README alone); the "Memory Optimization Overview" tutorial
    (pytorch.org/torchtune/0.3 and main, tutorials/memory_optimizations.html), which gives
    no per-card figure.
  * torchtune, README.md "Optimization flags" (added by pytorch/torchtune@1814feb17a90,
    PR #2003, 2024-11-18): Llama 3.2 3B, full_finetune_single_device, batch size 2, max
    sequence length 4,096, bf16, A100; "Peak Memory Active (GiB)" as above; each technique
    on top of the previous one, LoRA and QLoRA (lora_finetune_single_device) without
    optimizer_in_bwd or the 8-bit AdamW, the README's command for the QLoRA row below the
    table. Configs at that commit: recipes/configs/llama3_2/3B_full_single_device.yaml,
    3B_lora_single_device.yaml, 3B_qlora_single_device.yaml. Its Baseline row (25.5 GiB)
    is left out: unpacked, each batch is padded to its longest alpaca sample, so its
    length is the dataset's, not a setting; "+ Packed Dataset" packs to max_seq_len 4,096.
  * llm-foundry, scripts/train/benchmarking/README.md "H100 80GB BF16" (mosaicml/llm-foundry
    at c90b9b312c644dbde5c9e6eef75c6f1c117d8782): MPT runs on 8 H100 80GB, amp_bf16, FSDP
    FULL_SHARD with Composer's DEFAULT mixed precision (fp32 parameters), micro-batch and
    activation checkpointing as listed. No memory is published: each ran, so a plan must
    say it fits. MPT's shape (scripts/train/yamls/pretrain/mpt-*.yaml; llmfoundry/models/mpt
    configuration_mpt.py): expansion_ratio 4, vocab 50,368, tied embeddings; flash
    attention. Its NumParams column fixes the rest: a learned position table (MPTConfig's
    learned_pos_emb default, not ALiBi: NumParams grows by (T − 2,048)·d_model from each
    size's 2,048-token row) and biases (MPTConfig's no_bias default False: Wqkv, out_proj,
    up_proj, down_proj and both LayerNorms, 11·d_model a block, and the final norm's):
    tests/test_published_runs.py holds the plan's parameter count to NumParams. The
    implementation is llm-foundry's (--implementation llm-foundry).
  * Unsloth's "Context length benchmarks" (unsloth.ai/blog/llama3-3, 2024-12; unslothai/unsloth
    README.md at e3162dc5bf88bf4c2b598c74cbcaba0706c4067b): its Hugging Face + FA2 column, the
    longest context QLoRA ran on a card of each VRAM (the block at the end of this file).
    LLaMA-Factory publishes no measured table to add: its README's "Hardware Requirement"
    table is marked "* estimated" (hiyouga/LLaMA-Factory README.md), and its "Benchmark"
    (ChatGLM2-6B, peak memory at bs 1, cutoff_len 1,024) is a figure, assets/benchmark.svg,
    whose numbers are not given in text.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from accounting.ledger.builder.common import LLMFOUNDRY, TORCHTUNE
from accounting.planning.optimizers import ADAMW, ADAMW_FUSED, ADAMW8BIT_TORCHAO, PAGED_ADAMW8BIT
from accounting.planning.parallel.stacks import TORCHTITAN
from accounting.registry import registrar
from accounting.units import BF16

TORCHTITAN_2412 = ("torchtitan benchmarks/llama3_h100_202412_torchtitan.md "
                   "(pytorch/torchtitan@31a17bf)")
TORCHTUNE_README = "torchtune README.md, Memory and training speed (pytorch/torchtune@0031bfb)"
TORCHTUNE_FLAGS = "torchtune README.md, Optimization flags (pytorch/torchtune@1814feb)"
RESERVED, ACTIVE, RAN = "max_memory_reserved", "peak_memory_active", "ran (no memory published)"
FOUNDRY = ("llm-foundry scripts/train/benchmarking/README.md, H100 80GB BF16 "
           "(mosaicml/llm-foundry@c90b9b3)")

# Llama 3.1 70B and 405B's config.json (meta-llama/Llama-3.1-70B, -405B on the Hub), as
# flags over the 8B preset (same V, RoPE, norm; hidden_size, layers, heads, KV heads, FFN)
L70B = ("--num-layers", "80", "--d-model", "8192", "--num-heads", "64", "--num-kv-heads", "8",
        "--d-ff", "28672")
L405B = ("--num-layers", "126", "--d-model", "16384", "--num-heads", "128", "--num-kv-heads",
         "8", "--d-ff", "53248")
TITAN = ("--stack", TORCHTITAN, "--gpu-mem", "96GB")  # Grand Teton's H100 96 GB HBM2e
COMPILE = "torch.compile"
# torchtitan's torch.compile (each TransformerBlock compiled after its AC wrapper,
# apply_compile): --compile plans it under --stack torchtitan (planning/compile_memory.py).
# Tables 1-3 carry it; Tables 4-6 (TP, PP: their rules are being reworked under issue 44)
# still list it as unexpressed: under full checkpointing --compile moves no planned byte
# (the block's input alone is kept either way), so their ratios stand as they are
# The loss stays eager there: at 9dec370 (the paper's runs) train.py leaves it uncompiled
# ("TODO: compiling loss function causes CUDA errors, turning off for now"), and at 1daca4c
# (issue #1185's runs) components/loss.py still has `# compiled_cross_entropy_loss =
# torch.compile(cross_entropy_loss)` commented out: --compile-components model (the stack's
# default, model,loss, is torchtitan's since bbb1b61, 2025-04-02)
_COMPILED = ("--compile", "--compile-components", "model")
# torchtune's recipes' loss: CEWithChunkedOutputLoss, 8 chunks (recipes/configs/llama3_1/*:
# loss._component_: torchtune.modules.loss.CEWithChunkedOutputLoss), planned with --loss chunked
TUNE_LOSS = ("--loss", "chunked")


@dataclass(frozen=True)
class Run:
    name: str  # the row, as the source labels it
    source: str
    flags: tuple[str, ...]  # `plan MODEL …` flags expressing the run
    measured_gib: Fraction | None  # the peak per GPU the source measured (None: not published)
    metric: str  # which figure: RESERVED (torchtitan), ACTIVE (torchtune), RAN (llm-foundry)
    card: str  # the card it ran on, in words
    unexpressed: tuple[str, ...] = ()  # settings of the run the flags leave out
    model: str = "meta-llama/Llama-3.1-8B"  # the preset the flags start from
    # a "max context" row (MAX_CTX): the longest context the source ran on the card (the
    # flags' --ctx); the plan's own longest context is set beside it
    max_ctx: int | None = None

    @property
    def stack(self) -> str:
        # Unsloth's table's Hugging Face + FA2 column: transformers' stack (MAX_CTX, OOM: below)
        return "transformers" if self.metric in (MAX_CTX, OOM) else self.source.split()[0]


RUNS: dict[str, Run] = {}
_register = registrar(RUNS, "published run")


def _titan(table: str, row: str, gib: str, flags: tuple[str, ...], *unexpressed: str) -> None:
    _register(Run(f"torchtitan {table}: {row}", TORCHTITAN_2412, TITAN + flags,
                  Fraction(gib), RESERVED, "H100 96 GB", unexpressed))


_8B_T1 = ("--gpus", "8", "--fsdp", "--batch", "16", "--micro-batch", "2", "--ctx", "8192",
          "--recompute", "selective")
_titan("Table 1 (8B, 8 GPUs)", "FSDP", "82.4", _8B_T1)
_titan("Table 1 (8B, 8 GPUs)", "FSDP + torch.compile", "77.0", _8B_T1 + _COMPILED)
_titan("Table 1 (8B, 8 GPUs)", "FSDP + torch.compile + Float8", "76.8",
       _8B_T1 + ("--precision", "fp8-torchao") + _COMPILED)
for _fsdp, _cp, _seq, _gib in ((8, 1, 32768, "83.9"), (4, 2, 65536, "84.2"),
                               (2, 4, 131072, "84.0"), (1, 8, 262144, "84.5")):
    _titan("Table 2 (8B, 8 GPUs, FSDP + CP + torch.compile + Float8)",
           f"FSDP {_fsdp}, CP {_cp}, T {_seq:,}", _gib,
           ("--gpus", "8", "--cp", str(_cp), "--attention", "sdpa", "--batch", str(_fsdp),
            "--ctx", str(_seq), "--recompute", "full", "--precision", "fp8-torchao")
           + (("--fsdp",) if _fsdp > 1 else ("--zero", "3")) + _COMPILED)
_8B_T3 = ("--gpus", "128", "--fsdp", "--batch", "256", "--micro-batch", "2", "--ctx", "8192",
          "--recompute", "selective")
_titan("Table 3 (8B, 128 GPUs)", "FSDP", "67.0", _8B_T3)
_titan("Table 3 (8B, 128 GPUs)", "FSDP + torch.compile", "62.0", _8B_T3 + _COMPILED)
_titan("Table 3 (8B, 128 GPUs)", "FSDP + torch.compile + Float8", "61.8",
       _8B_T3 + ("--precision", "fp8-torchao") + _COMPILED)
_70B = L70B + ("--gpus", "256", "--tp", "8", "--sp", "--fsdp", "--batch", "512",
               "--micro-batch", "16", "--ctx", "8192", "--recompute", "full", "--precision",
               "fp8-torchao")
_titan("Table 4 (70B, 256 GPUs, FSDP 32 × TP 8, torch.compile + Float8)", "2D", "71.9", _70B,
       COMPILE)
_titan("Table 4 (70B, 256 GPUs, FSDP 32 × TP 8, torch.compile + Float8)", "2D + AsyncTP",
       "67.6", _70B + ("--async-tp",), COMPILE)
# Table 5's local batch of 32 sequences runs as 8 micro-batches of 4: torchtitan 9dec370
# splits it into job_config.experimental.pipeline_parallel_microbatches, whose default
# (None) is the pipeline degree (torchtitan/parallelisms/pipelining_utils.py
# build_pipeline_schedule: n_microbatches = pipeline_parallel_degree; config_manager.py:
# "The default value will be the number of pipeline stages"); the table names no other. Its
# TPS agrees: 128 / 100 for interleaved over 1F1B is the bubbles' (1 − 7/23) / (1 − 7/15)
# = 1.31 at m = 8, not 1.10 at m = 32 (tests/test_published_runs.py). Table 6's local batch
# of 8 is 8 micro-batches of 1 by the same default.
_405B = L405B + ("--gpus", "512", "--tp", "8", "--sp", "--pp", "8", "--fsdp", "--batch", "256",
                 "--micro-batch", "4", "--ctx", "8192", "--recompute", "full", "--precision",
                 "fp8-torchao", "--async-tp")
_titan("Table 5 (405B, 512 GPUs, FSDP 8 × TP 8 × PP 8, torch.compile + Float8 + AsyncTP)",
       "1F1B", "82.5", _405B, COMPILE)
_titan("Table 5 (405B, 512 GPUs, FSDP 8 × TP 8 × PP 8, torch.compile + Float8 + AsyncTP)",
       "Interleaved 1F1B", "72.7", _405B + ("--virtual-stages", "2"), COMPILE)
for _fsdp, _cp, _seq, _gib in ((8, 1, 32768, "75.3"), (4, 2, 65536, "75.9"),
                               (2, 4, 131072, "77.1"), (1, 8, 262144, "84.9")):
    _titan("Table 6 (405B, 512 GPUs, TP 8 × PP 8 + CP, torch.compile + Float8 + AsyncTP, 1F1B)",
           f"FSDP {_fsdp}, CP {_cp}, T {_seq:,}", _gib,
           L405B + ("--gpus", "512", "--tp", "8", "--sp", "--pp", "8", "--cp", str(_cp),
                    "--attention", "sdpa", "--batch", str(8 * _fsdp), "--micro-batch", "1",
                    "--ctx", str(_seq), "--recompute", "full", "--precision", "fp8-torchao",
                    "--async-tp")
           + (("--fsdp",) if _fsdp > 1 else ("--zero", "3")), COMPILE)

# torchtitan issue #1185 (docstring): the same model and TP degree as Table 4, on half the
# GPUs (FSDP 16), three months later; compile is named as Table 4's rows name it
TITAN_1185 = ("torchtitan issue #1185, danielvegamyhre's comment of 2025-05-20 "
              "(pytorch/torchtitan#1185; data of 2025-03-25)")
_1185_UNSTATED = ("torch.compile", "local batch 16 (asyncTP_llama3_h100_2025-06's; "
                  "llama3_70b.toml then said 8)", "H100 96 GB (Grand Teton, as that page's)",
                  "the LM head in bf16 (float8.py skips 'output'; planned in fp8)")
_70B_1185 = L70B + ("--gpus", "128", "--tp", "8", "--sp", "--fsdp", "--batch", "256",
                    "--micro-batch", "16", "--ctx", "8192", "--recompute", "full")
for _row, _gib, _more in (
        ("bf16, vanilla TP", "71.51", ("--precision", "bf16-mixed")),
        ("bf16, async TP", "71.08", ("--precision", "bf16-mixed", "--async-tp")),
        ("float8 tensorwise, vanilla TP", "55.26", ("--precision", "fp8-torchao"))):
    _register(Run(f"torchtitan issue #1185 (70B, 128 GPUs, FSDP 16 × TP 8, full AC): {_row}",
                  TITAN_1185, TITAN + _70B_1185 + _more, Fraction(_gib), RESERVED, "H100 96 GB",
                  _1185_UNSTATED if "float8" in _row else _1185_UNSTATED[:-1]))
# Trainy on WhiteFiber (docstring): the timing table's TT_H200 runs (accounting/published.py).
# force_recompute_fp8_weight_in_bwd is what the plan counts already: Float8Linear saves the
# weight parameter, no fp8 copy of the gathered weight (titan_tp.py, planning/fp8.py)
TITAN_TRAINY = ("torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md "
                "(pytorch/torchtitan@cbccb38; runs at e7c0cae)")
for _gpus, _gib in ((32, "47.96"), (64, "46.97")):
    _register(Run(f"torchtitan Trainy H200 (8B, FSDP, torch.compile + Float8): {_gpus} GPUs",
                  TITAN_TRAINY,
                  ("--stack", TORCHTITAN, "--gpu", "H200", "--gpus", str(_gpus), "--fsdp",
                   "--batch", str(2 * _gpus), "--micro-batch", "2", "--ctx", "8192",
                   "--recompute", "selective", "--precision", "fp8-torchao-fsdp", "--compile"),
                  Fraction(_gib), RESERVED, "H200 141 GB",
                  # the loss compiled as e7c0cae's training.compile does (components/loss.py
                  # build_cross_entropy_loss): the torchtitan stack's default components
                  ("the LM head in bf16 (filter_fqns ['output']; planned in fp8)",)))


def _tune(row: str, gib: str, card: str, flags: tuple[str, ...], *unexpressed: str) -> None:
    # --implementation torchtune: its LoRA adapters in bf16 and its QLoRA base in torchao's
    # NF4Tensor; its Llama's ops are planned as transformers' (recipes.py). torch.compile:
    # --compile (each layer, and the chunked loss as the recipes' compile_loss compiles it;
    # with LoRA under full checkpointing each block keeps its input alone: plan.py)
    _register(Run(f"torchtune: Llama 3.1 8B, {row}, 1x {card}", TORCHTUNE_README,
                  ("--ctx", "2048", "--batch", "2", "--recompute", "full",
                   "--implementation", TORCHTUNE) + TUNE_LOSS + flags + ("--compile",),
                  Fraction(gib), ACTIVE, card, unexpressed))


# recipes/configs/llama3_1/8B_lora_single_device.yaml @30b8519e8: lora_attn_modules
# ['q_proj', 'v_proj'], apply_lora_to_mlp False, r 8, alpha 16; 8B_qlora_single_device.yaml:
# ['q_proj', 'v_proj', 'k_proj', 'output_proj'] and the MLP, r 8, alpha 16; both
# torch.optim.AdamW(fused=True). (Before: both planned q, v, o and the MLP, foreach AdamW.)
_LORA = ("--lora-rank", "8", "--lora-alpha", "16", "--optimizer", ADAMW_FUSED.name,
         "--lora-targets", "q_proj,v_proj")
_QLORA = ("--lora-rank", "8", "--lora-alpha", "16", "--optimizer", ADAMW_FUSED.name,
          "--lora-targets", "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
_FULL = ("--precision", BF16, "--optimizer", PAGED_ADAMW8BIT.name, "--optimizer-in-backward")
_tune("full fine-tune", "18.9", "RTX-4090", ("--gpu", "RTX-4090") + _FULL)
_A6000 = "its config (the README names none: planned as the RTX 4090 row's)"
_tune("full fine-tune", "37.4", "A6000", ("--gpu-mem", "48GB") + _FULL, _A6000)
_tune("LoRA", "16.2", "RTX-4090", ("--gpu", "RTX-4090") + _LORA)
_tune("LoRA", "30.3", "A6000", ("--gpu-mem", "48GB") + _LORA, _A6000)
_tune("QLoRA", "7.4", "RTX-4090", ("--gpu", "RTX-4090", "--base-weights", "nf4") + _QLORA)

# torchtune README.md's second measured table, "Optimization flags" (added by 1814feb,
# 2024-11-18; see the docstring): Llama 3.2 3B on one A100, each technique on top of the
# previous one. Its shape is torchtune's llama3_2_3b (torchtune/models/llama3_2/
# _model_builders.py @1814feb: 28 layers, embed_dim 3,072, 24 heads, 8 KV heads,
# intermediate_dim 8,192, vocab 128,256, tied embedding: TiedEmbeddingTransformerDecoder),
# flags over the 1B preset (whose config.json sets head_dim 64; 3B's is 3,072 / 24 = 128)
L3B = ("--num-layers", "28", "--d-model", "3072", "--num-heads", "24", "--num-kv-heads", "8",
       "--d-ff", "8192", "--head-dim", "128")
# "Hardware: A100": the 80 GB card (the "+ Packed Dataset" row's 60.0 GiB exceeds 40 GB)
_TUNE3B = L3B + ("--ctx", "4096", "--batch", "2", "--implementation", TORCHTUNE, "--gpu", "A100")


def _tune3b(row: str, gib: str, flags: tuple[str, ...], *unexpressed: str) -> None:
    _register(Run(f"torchtune: Llama 3.2 3B, {row}, 1x A100", TORCHTUNE_FLAGS, _TUNE3B + flags,
                  Fraction(gib), ACTIVE, "A100 80GB", unexpressed,
                  model="meta-llama/Llama-3.2-1B"))


# full_finetune_single_device, 3B_full_single_device.yaml: dtype bf16 (no autocast); before
# "+ 8-bit AdamW" the optimizer is torch.optim.AdamW (the config's PagedAdamW8bit
# overridden, no `fused` key: foreach), before "+ Chunked Cross Entropy" the loss is
# torch.nn.CrossEntropyLoss on the decoder's whole logits, float32 (TiedEmbedding-
# TransformerDecoder: F.linear(h, tok_embeddings.weight).float(); planning/cuda_peak.py)
_PACKED = ("--precision", BF16, "--optimizer", ADAMW.name, "--loss", "standard",
           "--recompute", "none")
_tune3b("+ Packed Dataset", "60.0", _PACKED)
# compile=True: training.compile_model compiles each layer, and compile_loss the chunked
# loss's cross-entropy (--compile plans both: planning/loss_memory.py). For the standard
# loss compile_loss returns a compiled nn.CrossEntropyLoss that the recipe drops (the
# call's result is not assigned, full_finetune_single_device.py @1814feb): it runs eagerly
_C = _PACKED[:-4] + ("--compile",)
_tune3b("+ Compile", "51.0", _C + ("--loss", "standard", "--recompute", "none"))
_tune3b("+ Chunked Cross Entropy", "42.9", _C + TUNE_LOSS + ("--recompute", "none"))
_AC = _C + TUNE_LOSS + ("--recompute", "full")
_tune3b("+ Activation Checkpointing", "24.9", _AC)
_tune3b("+ Fuse optimizer step into backward", "23.1", _AC + ("--optimizer-in-backward",))
_OFF = _AC + ("--optimizer-in-backward", "--offload", "activations")
_tune3b("+ Activation Offloading", "21.8", _OFF)
# "AdamW8bit" (the README's words; its link, docs/source/tutorials/memory_optimizations.rst
# @1814feb "Lower Precision Optimizers", shows `optimizer=torchao.prototype.low_bit_optim.
# AdamW8bit` first): torchao's; bitsandbytes' unpaged AdamW8bit plans within 0.01 GiB of
# it. Not the config's PagedAdamW8bit: its moments are cudaMallocManaged pages outside
# torch's allocator, so active memory would drop by the whole bf16 moments (11.97 GiB),
# where the table measured 21.8 → 17.6. torchao's compiled step of the tied embedding,
# stepped in the backward pass, holds its new moments in float32 (planning/optimizers.py)
_tune3b("+ 8-bit AdamW", "17.6", _OFF + ("--optimizer", ADAMW8BIT_TORCHAO.name))
# lora_finetune_single_device, 3B_lora_single_device.yaml / 3B_qlora_single_device.yaml @
# 1814feb: LoRA r 64, alpha 128 on q_proj, v_proj, output_proj and the MLP (not the tied
# output), torch.optim.AdamW(fused=True), bf16; the README's QLoRA command: packed, compile,
# chunked CE, checkpointing, offloading, optimizer_in_bwd=False, batch 2, 4,096 tokens
_LORA64 = ("--lora-rank", "64", "--lora-alpha", "128", "--lora-targets",
           "q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", "--optimizer", ADAMW_FUSED.name,
           "--recompute", "full", "--offload", "activations", "--compile") + TUNE_LOSS
_tune3b("LoRA", "8.5", _LORA64)
_tune3b("QLoRA", "4.6", _LORA64 + ("--base-weights", "nf4"))

# The same table's 8-GPU LoRA rows (lora_finetune_distributed: FSDP2 over the 8 GPUs). Their
# figures were set by pytorch/torchtune@30b8519e8 ("Readme Updates (#1664)", 2024-09-24:
# `git log -S "27.6 GiB"` / `-S "44.8 GB"` on README.md), so they ran the configs at that
# commit (unchanged in what they plan up to 0031bfb but for a `compile` key):
#  * recipes/configs/llama3_1/70B_lora.yaml @30b8519e8: lora_attn_modules ['q_proj',
#    'k_proj', 'v_proj'], apply_lora_to_mlp False, apply_lora_to_output False, r 16,
#    alpha 32, dropout 0; torch.optim.AdamW(fused=True); loss CEWithChunkedOutputLoss;
#    dtype bf16; enable_activation_checkpointing True
#  * recipes/configs/llama3_1/405B_qlora.yaml @30b8519e8: qlora_llama3_1_405b,
#    lora_attn_modules ['q_proj', 'v_proj', 'k_proj', 'output_proj'], apply_lora_to_mlp
#    True, apply_lora_to_output False, r 16, alpha 32; torch.optim.AdamW(fused=True); loss
#    torch.nn.CrossEntropyLoss (not the chunked loss: the decoder returns
#    self.output(h).float(), torchtune/modules/transformer.py @30b8519e8, and the recipe
#    flattens it into the loss: --loss standard; training.compile_loss returns a compiled
#    CrossEntropyLoss the recipe does not assign, lora_finetune_distributed.py @30b8519e8
#    _setup: it runs eagerly); dtype bf16; enable_activation_checkpointing True. Its
#    batch_size 1 and gradient_accumulation_steps 16 are the table's note's to override
#    ("batch size 2 (without gradient accumulation)")
# at the table's batch of 2 sequences of 2,048 tokens per GPU. torch.compile (the table's
# note; the recipe's cfg.get("compile", False)): --compile, each layer (compile_model's
# per-layer compile on torch >= 2.5) under full checkpointing (plan.py). The 405B row is
# published in GB (44.8 GB = 41.7 GiB); "8x A100": the 80 GB card (405B in NF4 is 203 GB)
_DIST = ("--gpus", "8", "--fsdp", "--ctx", "2048", "--batch", "16", "--micro-batch", "2",
         "--recompute", "full", "--implementation", TORCHTUNE, "--optimizer", ADAMW_FUSED.name,
         "--gpu", "A100", "--compile", "--lora-rank", "16", "--lora-alpha", "32")
_register(Run("torchtune: Llama 3.1 70B, LoRA, 8x A100", TORCHTUNE_README,
              L70B + _DIST + ("--lora-targets", "q_proj,k_proj,v_proj") + TUNE_LOSS,
              Fraction("27.6"), ACTIVE, "A100 80GB"))
_register(Run("torchtune: Llama 3.1 405B, QLoRA, 8x A100", TORCHTUNE_README,
              L405B + _DIST + ("--lora-targets",
                               "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
                               "--loss", "standard", "--base-weights", "nf4"),
              Fraction(448 * 10**8, 2**30), ACTIVE, "A100 80GB"))


# MPT sizes (llm-foundry scripts/train/yamls/pretrain/mpt-{1b,3b,7b,13b,30b}.yaml):
# (d_model, n_layers, n_heads)
_MPT = {"1b": (2048, 24, 16), "3b": (2560, 32, 20), "7b": (4096, 32, 32),
        "13b": (5120, 40, 40), "30b": (7168, 48, 64)}


# NumParams of each row, as the README prints it (the test compares the plan's count)
FOUNDRY_PARAMS: dict[str, int] = {}


def _foundry(size: str, seq: int, micro: int, accum: int, ckpt: bool, params: int) -> None:
    d, n, h = _MPT[size]
    shape = ("--vocab-size", "50368", "--num-layers", str(n), "--d-model", str(d),
             "--num-heads", str(h), "--d-ff", str(4 * d), "--mlp", "gelu", "--norm",
             "layernorm", "--positions", "learned", "--tie-embeddings", "--qkv-bias",
             "--out-bias", "--mlp-bias",
             "--attention", "sdpa", "--context-length", str(seq))
    name = (f"llm-foundry MPT-{size}, T {seq:,}, 8 GPUs, micro-batch {micro}, "
            f"grad accum {accum}" + (", activation checkpointing" if ckpt else ""))
    FOUNDRY_PARAMS[name] = params
    _register(Run(name,
                  FOUNDRY, shape + ("--gpus", "8", "--fsdp", "--ctx", str(seq), "--batch",
                                    str(8 * micro * accum), "--micro-batch", str(micro),
                                    "--precision", "bf16-mixed", "--gpu", "H100",
                                    "--recompute", "full" if ckpt else "none",
                                    "--implementation", LLMFOUNDRY),
                  None, RAN, "H100 80GB",
                  ("Composer's FSDP1 FULL_SHARD (planned as FSDP2's)",),
                  model="gpt2-small"))


for _row in (("7b", 2048, 6, 1, False, 6_658_859_008), ("7b", 4096, 16, 2, True, 6_667_247_616),
             ("7b", 8192, 8, 2, True, 6_684_024_832), ("7b", 32768, 2, 2, True, 6_784_688_128),
             ("13b", 4096, 10, 3, True, 12_864_440_320),
             ("13b", 2048, 2, 1, False, 12_853_954_560),
             ("3b", 8192, 3, 6, False, 2_667_566_080), ("1b", 8192, 3, 4, False, 1_328_533_504),
             ("30b", 2048, 3, 21, True, 29_975_214_080)):
    _foundry(*_row)


# ---- Hugging Face + FlashAttention-2 QLoRA (Unsloth's max-context tables) ------------------
# unsloth.ai/blog/llama3-3 (2024-12) and unslothai/unsloth README.md at e3162dc5bf (2025-01-14),
# "Context length benchmarks": the longest context each column's stack ran on a card of that
# VRAM, for "Llama 3.1 (8B) Instruct" and "Llama 3.3 (70B) Instruct", "4bit QLoRA on all
# linear layers (Q, K, V, O, gate, up and down) with rank = 32 with a batch size of 1. We
# padded all sequences to a certain maximum sequence length" (70B "on a 80GB A100"). The
# Hugging Face + FA2 column is the run here: transformers' Llama with
# attn_implementation="flash_attention_2" (planned as SDPA's fused kernel: both save Q, K, V,
# the output and the log-sum-exp, no T × T tensor), PEFT's LoRA, bitsandbytes' NF4.
# A "max context" row ran at N_max on its card (so the plan must fit it); the next size tried
# did not, and which size that was is not given. No peak memory is published. The blog states
# nothing else of the HF side: the settings it leaves out are planned as the libraries'
# defaults at the date (transformers 4.47, PEFT 0.14.0, bitsandbytes 0.45.0, all 2024-12):
# BitsAndBytesConfig with NF4, double quantization and bf16 compute (the QLoRA recipe;
# --base-weights nf4's defaults), bf16 autocast (Trainer's bf16=True), the 4-bit model
# prepared by PEFT's prepare_model_for_kbit_training (--prepare-kbit-training: the QLoRA
# recipe's step, which TRL's SFTTrainer takes for a 4-bit model; its non-4-bit parameters in
# fp32, so the residual stream is fp32: planning/finetune.py), gradient checkpointing on (that
# function's use_gradient_checkpointing=True default), PEFT's lora_alpha default and Trainer's
# default optimizer (adamw_torch; Unsloth's own notebooks use adamw_8bit: 0.5 GB less at r 32
# on 8B). Each row says so in `unexpressed`. The VRAM is planned in GiB: Unsloth writes GiB
# as "GB" (unsloth/models/llama.py at e3162dc prints "Max memory: {total_memory / 1024**3}
# GB"; an "80GB A100" holds 80 GiB), and nothing is held back for the CUDA context.
# The HF + FA2 column is linear in the VRAM to the token: 932 + 404.75 · (VRAM − 12) for every
# row (a fit through measurements or an extrapolation of them: which rows were run on a card
# of that size is not said); tests/test_published_hf.py checks that algebra.
UNSLOTH = ("Unsloth README.md, Context length benchmarks, Hugging Face + FA2 "
           "(unslothai/unsloth@e3162dc; unsloth.ai/blog/llama3-3)")
MAX_CTX = "longest context that ran (no memory published)"
OOM = "out of memory (no context given)"
_HF_UNSTATED = ("prepare_model_for_kbit_training, gradient checkpointing, optimizer, lora_alpha "
                "(not stated: planned as PEFT's, TRL's and Trainer's defaults: prepared, "
                "checkpointing on, AdamW)", "FlashAttention-2 (planned as SDPA's fused kernel)")
_HF = ("--batch", "1", "--precision", "bf16-mixed", "--attention", "sdpa", "--recompute",
       "full", "--lora-rank", "32", "--lora-targets", "all-linear", "--base-weights", "nf4",
       "--prepare-kbit-training")


def _hf(model: str, shape: tuple[str, ...], vram: int, ctx: int | None,
        smallest: int) -> None:
    """One cell of the HF + FA2 column: ctx (N_max) on a card of `vram` GB, or OOM (None),
    planned at `smallest`, the least context the model's column lists."""
    card = f"{vram} GB"
    flags = shape + _HF + ("--gpu-mem", f"{vram}GiB", "--ctx", str(ctx or smallest))
    _register(Run(f"HF + FA2 QLoRA: {model}, {'OOM' if ctx is None else f'T {ctx:,}'}, "
                  f"1x {card}", UNSLOTH, flags, None, OOM if ctx is None else MAX_CTX, card,
                  _HF_UNSTATED, max_ctx=ctx))


for _vram, _ctx in ((8, None), (12, 932), (16, 2551), (24, 5789), (40, 12264), (48, 15502),
                    (80, 28454)):
    _hf("Llama 3.1 8B Instruct", (), _vram, _ctx, 932)
for _vram, _ctx in ((48, None), (80, 6916)):  # Llama 3.3 70B has Llama 3.1 70B's shape
    _hf("Llama 3.3 70B Instruct", L70B, _vram, _ctx, 6916)
