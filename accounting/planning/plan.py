"""One call that answers every planning question for a workload: training memory, what
fits, FLOPs per step, time to train, inference. Returns data; views.py renders it."""
from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from accounting.analysis import arguments as A
from accounting.analysis.workload import MAX_WORKLOAD, check_workload
from accounting.architecture.config import ModelConfig
from accounting.runtime import names
from accounting.runtime.errors import UsageError
from accounting.planning.compute import (
    StepFlops,
    TrainingTime,
    check_mfu,
    exact,
    step_flops,
    training_time,
)
from accounting.planning.fit import (
    BatchFit,
    Budget,
    ContextFit,
    largest_batch,
    longest_context,
)
from accounting.planning import finetune
from accounting.planning import fp8 as F8
from accounting.units import BF16, FP8, TERA, MiB
from accounting.planning.gpus import Hardware, get_gpu
from accounting.planning.inference import Inference, inference
from accounting.planning import recipes
from accounting.planning import loss_memory as LM
from accounting.planning.memory import (
    FP32,
    MODEL,
    FULL_RECOMPUTE,
    NO_RECOMPUTE,
    PRECISIONS,
    RECOMPUTE,
    SCOPES,
    MemoryModel,
    Precision,
    TrainingMemory,
    get_precision,
)


@dataclass(frozen=True)
class Plan:
    config: ModelConfig
    seq: int
    batch: int
    precision: Precision
    scope: str
    recompute: str
    hardware: Hardware | None
    mfu: Fraction
    margin: Fraction
    memory: TrainingMemory
    batch_fit: BatchFit | None  # None without a memory size
    context_fit: ContextFit | None
    flops: StepFlops
    time: TrainingTime | None  # None without a peak or without --steps/--tokens
    inference: Inference
    finetune: object = None  # issue 28: a planning.finetune.FineTune (LoRA/QLoRA), or None
    recipe: recipes.Recipe | None = None
    fp8_flops: int = 0  # of flops.total, the fp8 GEMMs of the linear layers (an fp8 precision)
    # issue 39: without --mfu, one step timed op by op from measured kernels (or the
    # roofline, labelled): a kernel_time.StepPrediction; None with --mfu or no GPU numbers
    prediction: object = None
    # issue 41: a vision-language config's tower (planning/vision_train.py), frozen or
    # trained, held beside the language model's peak in the fit; None: no tower
    tower: object = None


DEFAULT_MFU = "0.5"  # without --mfu and without a GPU's bandwidth (nothing to time ops by)
MAX_MEMORY_BYTES = 10**18  # an exabyte: far past any GPU, and every fit stays quick


def hardware(gpu: str | None = None, memory_bytes: int | None = None,
             peak_tflops=None, bandwidth_tbs=None, compute: str = FP32) -> Hardware | None:
    """A table GPU, or the user's own numbers (any of them may be left out), or None."""
    custom = (memory_bytes, peak_tflops, bandwidth_tbs)
    if gpu is None and all(x is None for x in custom):
        return None
    if gpu is not None and (peak_tflops is not None or bandwidth_tbs is not None):
        raise UsageError(f"give either {names.arg('gpu')} or "
                         f"{'/'.join(map(names.arg, ('peak_tflops', 'bandwidth_tbs')))}, not both "
                         f"(a named card takes {names.arg('memory_bytes')} to change its memory)")
    if memory_bytes is not None and (isinstance(memory_bytes, bool) or not isinstance(memory_bytes, int)
                                     or memory_bytes <= 0):
        raise UsageError(f"{names.arg('memory_bytes')} must be a positive size, got "
                         f"{memory_bytes!r}")
    peak = None if peak_tflops is None else exact(peak_tflops, names.arg("peak_tflops"))
    bw = None if bandwidth_tbs is None else exact(bandwidth_tbs, names.arg("bandwidth_tbs"))
    for flag, x in ((names.arg("peak_tflops"), peak), (names.arg("bandwidth_tbs"), bw)):
        if x is not None and x <= 0:
            raise UsageError(f"{flag} must be positive, got {x}")
    if gpu is None:
        return Hardware.custom(memory_bytes, peak, bw)
    # a named card with its memory given (a 96 GiB part, a card whose driver reports less, a
    # MIG slice): the card's record with that memory, said so in its source (issue 45)
    hw = Hardware.from_gpu(get_gpu(gpu), compute)
    if memory_bytes is None:
        return hw
    return replace(hw, memory_bytes=memory_bytes,
                   source=f"{hw.source}; memory {memory_bytes // MiB:,} MiB given "
                          f"({names.arg('memory_bytes')})")


def fp8_hardware(hw: Hardware, gpu, f8: int, total_flops: int) -> Hardware:
    """A table GPU under fp8 training: one peak at which the step's FLOPs take as long as
    its fp8 GEMMs (f8 of them) at the fp8 peak plus the rest at the bf16 peak
    (planning/fp8.py)."""
    p8, p16 = gpu.peak_tflops[FP8] * TERA, gpu.peak_tflops[BF16] * TERA
    peak = F8.effective_peak(total_flops, f8, p8, p16)
    share = Fraction(f8, total_flops) if total_flops else Fraction(0)
    return replace(hw, peak_flops=peak, source=(
        f"{hw.source}; the fp8 linear GEMMs ({float(share):.1%} of the step's FLOPs) at the "
        f"fp8 peak, the rest at the bf16 peak {gpu.peak_tflops[BF16]} TFLOP/s: "
        f"{float(peak / TERA):,.1f} TFLOP/s for the step as a whole"))


def plan(config: ModelConfig | str, seq: int | None = None, batch: int = 1, *,
         precision: str | None = None, scope: str = MODEL, recompute: str = NO_RECOMPUTE,
         gpu: str | None = None, memory_bytes: int | None = None, peak_tflops=None,
         bandwidth_tbs=None, mfu=None, margin="0", steps: int | None = None,
         tokens: int | None = None, position: int | None = None,
         implementation: str | None = None, optimizer: str | None = None,
         from_hf: bool | None = None, attention_given: bool = False,
         trainable=None, lora=None, base_weights: str | None = None, double_quant: bool = True,
         module_names=None, optimizer_in_backward: bool = False, tower=None,
         train_vision: bool = False, images=None, loss: str = "standard",
         loss_chunks: int | None = None, offload_activations: bool = False,
         compile: bool = False, kbit_upcast: bool = False,
         compile_components: frozenset | None = None) -> Plan:
    """Every answer for one workload. Numbers given as strings or Fractions stay exact.
    config: a ModelConfig or a preset name; gpu a name of accounting.planning.gpus.GPUS (or
    memory_bytes, peak_tflops, bandwidth_tbs of your own); precision, scope, recompute,
    implementation and optimizer one of their names (a wrong type is a TypeError, an
    unknown name a UsageError). The recipe's defaults follow the input
    (accounting/planning/recipes.py): from_hf (default: config is the name of a Hugging
    Face preset) plans transformers' implementation in bf16-mixed, else model/ in fp32.
    trainable: a predicate on the ledger's parameters (None: all trained).
    lora: a planning.finetune.LoRA (fine-tune adapters on a frozen base: the adapters are
    the trained tensors, the optimizer's state theirs), base_weights "nf4" for QLoRA
    (double_quant: bitsandbytes' double quantization), module_names: transformers'
    ModuleNames for PEFT's target names (None: the course model's). optimizer_in_backward:
    each tensor stepped by its own optimizer in the backward pass (torchtune's
    register_optim_in_bwd_hooks): no moment holds every gradient. loss: "standard",
    "chunked" (torchtune's, loss_chunks chunks, 8 by default) or "fused-linear" (Liger's);
    offload_activations: torchtune's OffloadActivations (accounting/planning/loss_memory.py,
    activation_offload.py); compile: each block under torch.compile (compile_memory.py),
    and the chunked loss unless compile_components (compile_components.py; None: the torch
    stack's default, Stack.compile_components) leaves the loss out.
    tower: a vision-language config's VisionSpec (held frozen, or trained with
    train_vision: True the tower and projector, "projector" the projector alone); images:
    the images of each sequence (analysis/images.py's VisionWorkload), whose saves a
    trained tower keeps (planning/vision_train.py)."""
    if from_hf is None:
        from accounting.architecture.presets import HF_IDS
        from_hf = isinstance(config, str) and config in HF_IDS
    config = A.config(config)
    seq = A.count(seq, "seq", "the config's context_length")
    batch = A.count(batch, "batch")
    precision = A.choice(precision, "precision", PRECISIONS, "the input's default")
    implementation = A.choice(implementation, "implementation", recipes.IMPLEMENTATIONS,
                              "the input's default")
    optimizer = A.choice(optimizer, "optimizer", recipes.OPTIMIZERS, recipes.DEFAULT_OPTIMIZER)
    scope = A.choice(scope, "scope", SCOPES)
    recompute = A.choice(recompute, "recompute", RECOMPUTE)
    gpu = A.optional_name(gpu, "gpu", "a GPU name such as 'H100'")
    # the command line's bounds (cli/args.py positive_int, cli/plan.py parse_size)
    memory_bytes, steps, tokens, position = (
        A.count(v, name, "not given", maximum=bound) for v, name, bound in (
            (memory_bytes, "memory_bytes", (MAX_MEMORY_BYTES, "10^18 bytes")),
            (steps, "steps", (MAX_WORKLOAD, "10^15")), (tokens, "tokens", (MAX_WORKLOAD, "10^15")),
            (position, "position", (MAX_WORKLOAD, "10^15"))))
    seq = config.context_length if seq is None else seq
    check_workload(seq, batch, config)
    if position is not None and (isinstance(position, bool) or not isinstance(position, int)
                                 or position <= 0):
        raise UsageError(f"{names.arg('position')} must be a positive integer, got {position!r}")
    if position is not None and config.positions == "learned" and position > config.context_length:
        # the token at position t attends to t keys; a learned table has no row past its end
        raise UsageError(f"{names.arg('position')} {position:,} is past {config.name}'s learned "
                         f"position table ({config.context_length:,} positions); give "
                         f"{names.arg('position')} up to "
                         f"{config.context_length:,} (RoPE models decode at any position)")
    if steps is not None and tokens is not None:
        raise UsageError(f"give either {names.arg('steps')} or {names.arg('tokens')}, not both")
    recipe, config = recipes.resolve(config, from_hf, implementation, precision, optimizer,
                                     recompute, attention_given, scope)
    p = get_precision(recipe.precision)
    if p.fsdp_fp8_gather:
        raise UsageError(f"--precision {p.name} all-gathers fp8 weights under FSDP2, a "
                         f"many-GPU plan: give --gpus N --zero 3, or --precision fp8-torchao")
    hw = hardware(gpu, memory_bytes, peak_tflops, bandwidth_tbs, p.compute)
    u = check_mfu(DEFAULT_MFU if mfu is None else mfu)
    m = exact(margin, names.arg("margin"))
    loss = A.choice(loss, "loss", LM.LOSSES, LM.STANDARD) or LM.STANDARD
    if loss_chunks is not None:
        loss_chunks = A.count(loss_chunks, "loss_chunks")
    chunks = LM.check(loss, loss_chunks, config)
    from accounting.planning import compile_components as CC
    from accounting.planning.parallel.stacks import DEFAULT_STACK, STACKS
    compile_loss = CC.LOSS in CC.resolve(bool(compile), compile_components,
                                         STACKS[DEFAULT_STACK].compile_components)
    if compile:
        from accounting.planning.compile_memory import check as check_compile
        check_compile(config)
        # under full checkpointing each compiled block keeps its input alone, whatever its
        # partition (torchtune: the eager checkpoint wrapper outside the compiled layer), so
        # LoRA is planned there: the loss compiled, the blocks as eager (the one block
        # recomputed at a time: eager's saves, an upper bound)
        if lora is not None and recompute != FULL_RECOMPUTE:
            raise UsageError("--compile with LoRA is planned under --recompute full (a LoRA "
                             "block's own partition is not measured): give --recompute full, "
                             "or leave --compile or --lora-rank out")
    if (loss != LM.STANDARD or offload_activations) and scope != MODEL:
        raise UsageError("--loss and --offload activations change what a step holds: give "
                         "--scope model (the default) with them")
    ft = _finetune(config, p, scope, lora, base_weights, double_quant, module_names,
                   recipe.implementation, trainable, kbit_upcast)  # issue 28
    tw = None
    if tower is not None:  # issue 41: the tower's weights (and, trained, its state and saves)
        from accounting.planning.vision_train import flag, tower_activations, tower_training
        if train_vision and ft is not None:
            raise UsageError(f"{flag(train_vision)} trains the vision model's tensors in full "
                             f"beside LoRA adapters, which the tool does not plan; drop one "
                             f"of them")
        tw = replace(tower_training(tower, p, recipe.optimizer, train_vision),
                     activations=tower_activations(tower, images, p, recompute, train_vision,
                                                   seq))
    elif train_vision or images is not None:
        from accounting.planning.vision_train import flag
        raise UsageError(f"{flag(train_vision) if train_vision else '--image/--images'} needs a "
                         f"vision-language config.json whose tower the tool reads; drop it for "
                         f"a language model")
    model = MemoryModel(config, p, scope, recompute, recipe.implementation, recipe.optimizer,
                        trainable, ft, arch=hw.arch if hw else None,
                        optimizer_in_backward=bool(optimizer_in_backward),
                        loss=loss, loss_chunks=chunks,
                        offload_activations=bool(offload_activations),
                        compile=bool(compile), compile_loss=compile_loss,
                        vision_saved=tw.activations.saved if tw else (0, 0),
                        vision_forward=tw.activations.forward if tw else None)
    budget = (Budget(hw.memory_bytes, m, tw.total if tw else 0) if hw and hw.memory_bytes
              else None)
    if budget is None and not 0 <= m < 1:
        raise UsageError(f"{names.arg('margin')} must be in [0, 1) (a share of the memory), "
                         f"got {margin}")
    flops = (step_flops(config, seq, batch, recompute, recipe.optimizer, trainable) if ft is None
             else finetune.step_flops(ft, seq, batch, recompute, recipe.optimizer))
    if tw is not None:  # issue 41: the tower's FLOPs over the step's images
        from accounting.planning.vision_flops import tower_flops
        flops = replace(flops, vision=tower_flops(tower, images, batch, train_vision,
                                                  recompute, recipe.optimizer))
    f8 = 0 if p.fp8 is None else F8.matmul_flops(model.ledger, model.values(seq, batch))
    if p.fp8 is not None and gpu is not None:  # the linear GEMMs at the fp8 peak, the rest bf16
        hw = fp8_hardware(hw, get_gpu(gpu), f8, flops.total)
    prediction = None
    if mfu is None and hw is not None and hw.peak_flops and hw.bandwidth:
        from accounting.planning.kernel_time import machine, predict_step
        mach = machine(hw, gpu, compute=p.compute)
        extra = ()
        if tw is not None:  # the tower's matmuls timed as the model's (vision_flops.py)
            from accounting.planning.optimizers import get_optimizer
            from accounting.planning.vision_flops import tower_ops
            extra = tuple(tower_ops(tower, images, batch, train_vision, recompute, mach,
                                    get_optimizer(recipe.optimizer).update_bytes(p)))
        prediction = predict_step(model, seq, batch, mach, flops, recipe.optimizer,
                                  extra_ops=extra)
    time = None
    if prediction is not None and (steps is not None or tokens is not None):
        time = training_time(flops, hw.peak_flops, 1, steps, tokens)  # validates; then the
        # utilization the predicted step implies: steps · FLOPs/step / (peak · u) = steps · step
        time = replace(time, mfu=Fraction(flops.total) / (prediction.step_seconds * hw.peak_flops))
    elif hw and hw.peak_flops and (steps is not None or tokens is not None):
        time = training_time(flops, hw.peak_flops, u, steps, tokens)
    elif steps is not None or tokens is not None:
        training_time(flops, 1, u, steps, tokens)  # validates the counts
    return Plan(config, seq, batch, p, scope, recompute, hw, u, m, model.at(batch, seq),
                largest_batch(model, seq, budget) if budget else None,
                longest_context(model, batch, budget) if budget else None,
                flops, time,
                inference(config, batch, seq, p, position,
                          hw.peak_flops if hw else None, hw.bandwidth if hw else None),
                ft, recipe, f8, prediction, tw)


def _finetune(config, p: Precision, scope: str, lora, base_weights, double_quant, names,
              implementation: str, trainable, kbit_upcast: bool = False):
    """The LoRA/QLoRA plan (planning/finetune.py), or None for full training."""
    if lora is None:
        if base_weights is not None:
            raise UsageError(f"--base-weights {base_weights} is QLoRA, which trains LoRA adapters: "
                             "give --lora-rank R (and --lora-targets) too")
        return None
    if not isinstance(lora, finetune.LoRA):
        raise TypeError(f"lora must be a planning.finetune.LoRA, not {type(lora).__name__}")
    if trainable is not None:
        raise UsageError("LoRA decides what is trained (its adapters): give lora or trainable, not both")
    if scope != MODEL:
        raise UsageError("LoRA plans count what autograd saves: give --scope model (the default)")
    if p.fp8 is not None:
        raise UsageError(f"LoRA is planned without fp8 linear layers (PEFT's LoRA layers "
                         f"wrap nn.Linear, which float8 conversion replaces); give --precision "
                         f"bf16-mixed, not {p.name}")
    if p.param_dtype != FP32:
        raise UsageError(f"LoRA is planned with --precision fp32 or bf16-mixed (the base frozen in "
                         f"the compute dtype), not {p.name}")
    return finetune.resolve(config, lora, names, p.autocast, base_weights, double_quant,
                            implementation, kbit_upcast)
