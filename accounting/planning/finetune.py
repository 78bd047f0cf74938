"""Fine-tuning plans: LoRA and QLoRA on a frozen base (PEFT 0.21.2, bitsandbytes 0.50.2).

    lora = LoRA(rank=16, alpha=32, dropout=0.05, targets=("all-linear",))
    ft = resolve(config, lora, names, precision)       # names: transformers' module names, or None
    ft.trainable, ft.adapters                           # adapter parameters; the ledger's spec

Targets are PEFT's module names: the last part of a module's path in the model being
planned (transformers': q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj,
GPT-2's c_attn, c_proj, c_fc; the course model's q_proj, output_proj, w1, w2, w3). A name
targets every linear layer whose path ends in it (peft/tuners/tuners_utils.py
check_target_module_exists: a suffix match on ".NAME"). "all-linear" is every linear layer
but the output layer (peft/tuners/tuners_utils.py _maybe_include_all_linear_layers: the
model's get_output_embeddings() is left out). A PEFT layer adds lora_A (r × d_in) and
lora_B (d_out × r), float32 (autocast_adapter_dtype); a fused layer (GPT-2's c_attn: Q, K
and V) is one PEFT layer. PEFT's own reading of the names on transformers 5's models is
planning/lora_targets.py: on the MoE families transformers converts, gate_proj/up_proj/
down_proj name the routed experts' stacked parameters (PEFT's ParamWrapper; the ledger's
builder/lora.py experts), the fused pair together only; Mamba's out_proj and conv1d are
refused. Routers are not planned.

The base: every parameter frozen (requires_grad False: no gradient, no optimizer state),
stored in the compute dtype (bf16 under bf16-mixed, fp32 under fp32: a frozen weight needs
no fp32 master copy), or, with base_weights "nf4" (QLoRA; transformers'
BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
bnb_4bit_compute_dtype=bfloat16)), every linear layer but the output layer in
bitsandbytes' NF4 layout (accounting/formats/bnb.py: with or without double quantization),
the rest (embeddings, norms, the LM head, biases) in bf16.

kbit_upcast (--prepare-kbit-training): QLoRA after PEFT's prepare_model_for_kbit_training
(peft/utils/other.py; the same in PEFT 0.14.0, 2024-12, and 0.21.2): "cast all non INT8
parameters to fp32" (every bf16/fp16 parameter that is not a Params4bit: the embeddings,
norms and LM head), so the embedding's output, and with it the residual stream and every
block's input, is fp32; an NF4 layer casts its input to bf16 and its output back to fp32
(bitsandbytes' Linear4bit.forward: out.to(inp_dtype)). The ledger is built with the base in
fp32 and the NF4 linears computing in bf16 (builder/layers.py Linear, Adapters.nf4_compute).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from accounting.formats.bnb import bnb_4bit_bytes
from accounting.formats.torchao_nf4 import torchao_nf4_bytes
from accounting.ledger.builder.common import TORCHTUNE
from accounting.ledger.builder.lora import Adapters
from accounting.planning import lora_targets as LT
from accounting.ledger.ledger import ledger
from accounting.ledger import records as R
from accounting.runtime.errors import UsageError
from accounting.architecture.config import ModelConfig
from accounting.ledger.symbols import Expr
from accounting.planning.optimizers import DEFAULT_OPTIMIZER
from accounting.units import BF16, DTYPE_BYTES, FP32

ALL_LINEAR = "all-linear"  # PEFT's shorthand (peft/utils/constants.py INCLUDE_LINEAR_LAYERS_SHORTHAND)
NF4 = "nf4"
# whose NF4 layout a QLoRA base is stored in: bitsandbytes' (transformers + PEFT:
# formats/bnb.py) or torchao's NF4Tensor (torchtune's QLoRA: formats/torchao_nf4.py)
NF4_BNB, NF4_TORCHAO = "bitsandbytes", "torchao"
BASE_WEIGHTS = (NF4,)  # --base-weights: the base's storage other than the compute dtype
# PEFT's LoraConfig defaults (peft/tuners/lora/config.py): r=8, lora_alpha=8, lora_dropout=0.0
DEFAULT_RANK, DEFAULT_ALPHA = 8, 8
MAX_RANK = 10**6


@dataclass(frozen=True)
class LoRA:
    """PEFT's LoraConfig, the parts a plan needs: r, lora_alpha, lora_dropout, target_modules."""
    rank: int = DEFAULT_RANK
    alpha: Fraction = Fraction(DEFAULT_ALPHA)
    dropout: Fraction = Fraction(0)
    targets: tuple[str, ...] = (ALL_LINEAR,)

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or not 0 < self.rank <= MAX_RANK:
            raise UsageError(f"--lora-rank must be a positive integer up to {MAX_RANK:,}, "
                             f"got {self.rank!r}")
        if not 0 <= self.dropout < 1:
            raise UsageError(f"--lora-dropout must be in [0, 1), got {self.dropout}")
        if self.alpha <= 0:
            raise UsageError(f"--lora-alpha must be positive, got {self.alpha}")
        if not self.targets or any(not t for t in self.targets):
            raise UsageError("--lora-targets needs module names (e.g. q_proj,v_proj) or all-linear")

    @property
    def scaling(self) -> Fraction:
        """lora_alpha / r (use_rslora False): the factor on lora_B's output."""
        return Fraction(self.alpha) / self.rank


@dataclass(frozen=True)
class Target:
    """One PEFT LoRA layer: its name, where it is, and the ledger linears it covers."""
    name: str  # PEFT's module name (the path's last part)
    path: str  # the module's path in a block (or in the model)
    per_layer: bool
    members: tuple[str, ...]  # the ledger's modules (one, or a fused layer's several)
    d_in: tuple[str, ...]
    d_out: tuple[tuple[str, ...], ...]  # per member


@dataclass(frozen=True)
class FineTune:
    """A resolved fine-tuning plan: the LoRA layers and what the base holds."""
    config: ModelConfig
    lora: LoRA
    targets: tuple[Target, ...]
    base_weights: str | None  # None: the compute dtype; "nf4": QLoRA
    double_quant: bool
    base_dtype: str  # the frozen parameters' dtype (the non-quantized ones under QLoRA)
    adapters: Adapters
    implementation: str = "course"  # the recipe's (planning/recipes.py): whose ops the ledger runs
    nf4_layout: str = NF4_BNB  # the QLoRA base's 4-bit layout (NF4_BNB or NF4_TORCHAO)
    kbit_upcast: bool = False  # PEFT's prepare_model_for_kbit_training: the rest in fp32

    def ledger(self, autocast: str | None = None, recompute: str = "none"):
        """The ledger of the LoRA step: adapters on a base frozen in base_dtype."""
        return ledger(self.config, autocast, recompute, self.implementation, self.base_dtype,
                      self.adapters)

    def weight_terms(self, model, copies) -> list:
        return weight_terms(self, model, copies)

    def adapter_expr(self) -> Expr:
        """N_LoRA: the adapters' elements as a closed form in r and the widths."""
        return _count([p for p in self.ledger().params if not p.frozen])

    @property
    def qlora(self) -> bool:
        return self.base_weights == NF4

    def adapter_count(self) -> int:
        """lora_A and lora_B elements over the whole model (PEFT's trainable parameters)."""
        lg = self.ledger()
        v = lg.values(1, 1)
        return sum(p.numel(v) * p.count(v) for p in lg.params if not p.frozen)

    def quantized(self) -> tuple[R.Param, ...]:
        """The base weights bitsandbytes stores in NF4 (every linear layer but the LM head)."""
        if not self.qlora:
            return ()
        lin = {(per, m) for per, m, _, _ in _linears(self.config)}
        return tuple(p for p in ledger(self.config).params
                     if p.name.endswith(".weight") and (p.per_layer, p.module) in lin
                     and p.module != "lm_head")

    def nf4_bytes_torchao(self) -> dict[str, int] | None:
        """The same weights in torchao's NF4Tensor layout (formats/torchao_nf4.py), for
        comparison; None where a weight's size is not a multiple of 64·256 (to_nf4 refuses)."""
        lg = ledger(self.config)
        v = lg.values(1, 1)
        shapes = {(per, m): (din, dout) for per, m, din, dout in _linears(self.config)}
        out: dict[str, int] = {}
        for p in self.quantized():
            din, dout = shapes[(p.per_layer, p.module)]
            try:
                parts = torchao_nf4_bytes(R.product(dout, v), R.product(din, v), dtype=BF16)
            except ValueError:
                return None
            for k, b in parts.items():
                out[k] = out.get(k, 0) + b * p.count(v)
        return out

    def base_nf4_bytes(self) -> dict[str, int]:
        """The NF4 base in the plan's layout: torchao's NF4Tensor for torchtune (where to_nf4
        takes every weight's size), else bitsandbytes'."""
        if self.nf4_layout == NF4_TORCHAO:
            ao = self.nf4_bytes_torchao()
            if ao is not None:
                return ao
        return self.nf4_bytes()

    def nf4_bytes(self) -> dict[str, int]:
        """Component -> bytes of the NF4 base weights, all layers (bitsandbytes' layout)."""
        lg = ledger(self.config)
        v = lg.values(1, 1)
        shapes = {(per, m): (din, dout) for per, m, din, dout in _linears(self.config)}
        out: dict[str, int] = {}
        for p in self.quantized():
            din, dout = shapes[(p.per_layer, p.module)]
            n_in, n_out = R.product(din, v), R.product(dout, v)
            for k, b in bnb_4bit_bytes(n_out, n_in, double_quant=self.double_quant).items():
                out[k] = out.get(k, 0) + b * p.count(v)
        return out


def describe(ft: FineTune) -> str:
    """The plan's fine-tuning assumptions in words (the settings table)."""
    lo = ft.lora
    names = ", ".join(dict.fromkeys(t.name for t in ft.targets))
    tune = ft.implementation == TORCHTUNE
    nf4 = ("torchao's NF4Tensor (block 64, scaler block 256)" if ft.nf4_layout == NF4_TORCHAO
           else f"bitsandbytes' NF4 ({'with' if ft.double_quant else 'without'} double "
                "quantization, blocksize 64)")
    base = (f"every linear layer but the LM head in {nf4}, the rest in {ft.base_dtype}, "
            "compute in bf16" if ft.qlora else f"stored in {ft.base_dtype}")
    return (f"{'QLoRA' if ft.qlora else 'LoRA'} ({'torchtune' if tune else 'PEFT'}): "
            f"r = {lo.rank}, alpha = {lo.alpha}, "
            f"dropout = {lo.dropout}, on {names} ({len(ft.targets)} layer kinds); the base "
            f"frozen (no gradient, no optimizer state), {base}; adapters in "
            f"{ft.adapters.adapter_dtype} ("
            f"{'LoRALinear: the model dtype' if tune else 'autocast_adapter_dtype'}), the "
            "trained tensors: their "
            f"{ft.adapters.adapter_dtype} gradients and the optimizer's state (--optimizer) only; "
            "the embedding's output requires grad (enable_input_require_grads); this overrides "
            "the precision's master weights, gradients and state dtype")


def _count(params) -> Expr:
    return sum((Expr.of(1, p.shape).times(*((p.repeat,) if p.repeat else ())) for p in params),
               Expr())


def _state(ft: FineTune, model) -> dict[str, Expr]:
    """The step's state as closed forms: frozen base (bf16 or fp32, and NF4), adapters."""
    lg = model.ledger
    quantized = {p.name for p in ft.quantized()}
    base = [p for p in lg.params if p.frozen and p.name not in quantized]
    adapters = [p for p in lg.params if not p.frozen]
    b = DTYPE_BYTES[ft.base_dtype]
    return {"base": _count(base).scale(b), "base_count": _count(base),
            "nf4": Expr.of(sum(ft.base_nf4_bytes().values()), ()) if quantized else Expr(),
            "adapters": _count(adapters), "adapter_tensors": sum((Expr.of(1, (p.repeat,) if p.repeat else ())
                                       for p in adapters), Expr())}


def weight_terms(ft: FineTune, model, copies) -> list:
    """The weights of a fine-tuning step: the frozen base (its dtype, or NF4 and the rest)
    and the adapters; the memory model adds the adapters' gradients and optimizer state
    (training_state.py: the adapters are its trained tensors)."""
    from accounting.planning.memory import Term  # the memory model's type
    st = _state(ft, model)
    a = DTYPE_BYTES[ft.adapters.adapter_dtype]
    n = st["adapters"]
    what = f"rank r = {ft.lora.rank} on {', '.join(dict.fromkeys(t.name for t in ft.targets))}"
    out = []
    if ft.qlora:
        dq = "with" if ft.double_quant else "without"
        if ft.nf4_layout == NF4_TORCHAO and ft.nf4_bytes_torchao() is not None:
            out.append(Term("base weights (frozen, nf4: torchao's NF4Tensor)",
                            "4-bit codes + int8 scalers + their factors", st["nf4"],
                            note="every linear layer but the LM head (accounting/formats/"
                                 "torchao_nf4.py, block 64, scaler block 256)"))
        else:
            out.append(Term(f"base weights (frozen, nf4: bitsandbytes, {dq} double quantization)",
                            "packed 4-bit weights + absmax + quant maps", st["nf4"],
                            note="every linear layer but the LM head (accounting/formats/bnb.py, "
                                 "blocksize 64); dequantized to bf16 one layer at a time"))
        out.append(Term(f"base parameters not quantized (frozen, {ft.base_dtype})",
                        f"{DTYPE_BYTES[ft.base_dtype]}·({st['base_count']})", st["base"],
                        note="embeddings, norms, the LM head and biases"))
    else:
        out.append(Term(f"base parameters (frozen, {ft.base_dtype})",
                        f"{DTYPE_BYTES[ft.base_dtype]}·N", st["base"],
                        note="requires_grad False: no gradient, no optimizer state"))
    out.append(Term(f"LoRA adapters ({ft.adapters.adapter_dtype}, trainable)", f"{a}·N_LoRA",
                    n.scale(a), note=f"{what}; N_LoRA = {n}"))
    if copies and ft.kbit_upcast:  # the fp32 LM head's copy too (prepare_model_for_kbit_training)
        out.append(Term("bf16 copies of the fp32 weights (LM head, adapters)", str(copies.bytes),
                        copies.bytes, note="autocast casts each fp32 weight for its matmul, "
                                           "which saves the copy"))
    elif copies:
        out.append(Term("bf16 copies of the adapters' weights", str(copies.bytes), copies.bytes,
                        note="autocast casts lora_A and lora_B for their matmuls, which save the copies"))
    return out


def flops_exprs(ft: FineTune, recompute: str = "none") -> tuple[Expr, Expr, Expr]:
    """(forward, backward, recomputed) matmul FLOPs of one LoRA step as closed forms: the
    forward's matmuls with the adapters'; in the backward pass each matmul's input
    gradient, and a weight gradient only for a trained weight (a frozen linear's dW is never
    computed: autograd skips an input that needs no gradient)."""
    lg = ft.ledger(None, recompute)
    trained = {(p.per_layer, p.module) for p in lg.params if not p.frozen}
    fwd = sum((m.expr() for m in lg.forward), Expr())
    bwd = Expr()
    for m in lg.forward:
        frozen = m.grads == ("dX", "dW") and (m.per_layer, m.module) not in trained
        bwd = sum((g.expr() for g in m.gradients()
                   if not (frozen and g.name.endswith(" dW"))), bwd)
    again = sum((r.expr() for r in lg.recomputed), Expr())
    return fwd, bwd, again


def adamw_exprs(ft: FineTune) -> tuple[Expr, Expr]:
    """(N_LoRA, trained tensors): what AdamW updates (14 FLOPs per element, 1 per tensor)."""
    lg = ft.ledger()
    adapters = [p for p in lg.params if not p.frozen]
    return _count(adapters), sum((Expr.of(1, (p.repeat,) if p.repeat else ()) for p in adapters),
                                 Expr())


def step_flops(ft: FineTune, seq: int, batch: int, recompute: str = "none",
               optimizer: str = DEFAULT_OPTIMIZER):
    """FLOPs of one LoRA step (compute.StepFlops), the optimizer (optimizers.py's
    registry) over the adapters only: they are training_state's trained tensors."""
    from accounting.planning import compute, training_state as TS  # StepFlops; the state
    from accounting.planning.optimizers import get_optimizer
    lg = ft.ledger(None, recompute)
    v = lg.values(seq, batch)
    fwd, bwd, again = flops_exprs(ft, recompute)
    update = TS.update_flops(get_optimizer(optimizer), TS.tensors(ft.config, TS.unfrozen, ft.ledger()))
    non_matmul = sum(e.count(v) * e.flops(v) for e in lg.elementwise)
    return compute.StepFlops(ft.config, seq, batch, fwd.evaluate(v), bwd.evaluate(v),
                             again.evaluate(v), update, non_matmul,
                             str(fwd.partial(v)), str(bwd.partial(v)))


def adamw_flops(ft: FineTune) -> Expr:
    """AdamW's update FLOPs over the adapters (compute.ADAMW_OPS, per element and per tensor),
    whichever optimizer the plan runs (the FLOPs table's reference)."""
    from accounting.planning import compute  # compute.py's AdamW ops
    n, tensors = adamw_exprs(ft)
    return (n.scale(sum(o.flops_per_element for o in compute.ADAMW_OPS if o.per == compute.PARAMETER))
            + tensors.scale(sum(o.flops_per_element for o in compute.ADAMW_OPS
                                if o.per == compute.TENSOR)))


def adamw_formula(ft: FineTune) -> str:
    """'14·N_LoRA + (14·L)': AdamW over the adapters."""
    _, tensors = adamw_exprs(ft)
    return f"14·N_LoRA + ({tensors})"


def _linears(config: ModelConfig) -> list[tuple[bool, str, tuple, tuple]]:
    """(per block?, module, d_in, d_out) of every linear layer of the ledger, in order:
    the modules a Linear's matmul runs in (routed experts excluded: stacked weights)."""
    lg = ledger(config)
    experts = {(p.per_layer, p.module) for p in lg.params if p.routed_expert}
    # a matmul run in a module that holds parameters but no weight of its own is not a
    # Linear's (Jamba's dt_proj weight, read by the Mamba mixer: PEFT's "mamba" is the mixer)
    owners = {(p.per_layer, p.module) for p in lg.params}
    weights = {(p.per_layer, p.module) for p in lg.params if p.name.endswith(p.module + ".weight")}
    out, seen = [], set()
    for m in lg.forward:
        key = (m.per_layer, m.module)
        if m.grads != ("dX", "dW") or key in experts or key in seen or m.batch or \
                (key in owners and key not in weights):
            continue
        seen.add(key)
        out.append((m.per_layer, m.module, m.n, m.p))
    return out


def module_path(names, per_layer: bool, module: str) -> str:
    """The module's path in the implementation planned: transformers' (names: its
    ModuleNames) or the course model's (names None)."""
    if names is None:
        return module
    table = names.block if per_layer else names.top
    return table.get(module, module)


def resolve(config: ModelConfig, lora: LoRA, names=None, precision_autocast: str | None = None,
            base_weights: str | None = None, double_quant: bool = True,
            implementation: str = "course", kbit_upcast: bool = False) -> FineTune:
    """The LoRA layers `lora.targets` name in `config`'s model (names: transformers'
    ModuleNames, or None for the course model), on a frozen base. Bad input: UsageError."""
    if base_weights is not None and base_weights not in BASE_WEIGHTS:
        raise UsageError(f"unknown --base-weights {base_weights!r}; choose {' or '.join(BASE_WEIGHTS)}")
    lins = _linears(config)
    lm = [(per, m) for per, m, _, _ in lins if m == "lm_head"]
    if base_weights == NF4 and not [x for x in lins if (x[0], x[1]) not in lm]:
        raise UsageError(f"--base-weights nf4 (QLoRA) quantizes linear layers, and {config.name} "
                         "has none but its LM head; leave --base-weights out")
    if kbit_upcast and base_weights != NF4:
        raise UsageError("--prepare-kbit-training is PEFT's preparation of a k-bit (QLoRA) "
                         "base: give --base-weights nf4 with it")
    if kbit_upcast and implementation == TORCHTUNE:
        raise UsageError("--prepare-kbit-training is PEFT's; torchtune's QLoRA (--implementation "
                         "torchtune) keeps its base in bf16: leave one of them out")
    if base_weights == NF4 and precision_autocast is None:
        raise UsageError("--base-weights nf4 (QLoRA) computes in bf16: give --precision bf16-mixed")
    moe = config.num_experts is not None
    # PEFT's name -> the ledger linears it names, grouped by module path (a fused layer once)
    # (a fused layer is one module path under one ledger parent: GPT-2's c_attn is attn's Q,
    # K and V; Kimi Linear's KDA and latent attention both have a self_attn.o_proj, in
    # different layers, two PEFT layers)
    groups: dict[tuple[bool, str, str], list] = {}
    for per, m, din, dout in lins:
        groups.setdefault((per, module_path(names, per, m), m.rpartition(".")[0]),
                          []).append((m, din, dout))
    by_name: dict[str, list] = {}
    for (per, path, _), members in groups.items():
        by_name.setdefault(path.rsplit(".", 1)[-1], []).append((per, path, members))
    routed = {module_path(names, p.per_layer, p.module).rsplit(".", 1)[-1]
              for p in ledger(config).params if p.routed_expert}
    routers = {module_path(names, per, m).rsplit(".", 1)[-1] for per, m, _, _ in lins
               if m.endswith("router")}
    model_type = getattr(names, "model_type", None)
    chosen: list = []
    expert_groups: tuple = ()
    if lora.targets == (ALL_LINEAR,):
        if moe:
            raise UsageError(f"--lora-targets all-linear on a mixture of experts ({config.name}): "
                             "PEFT also wraps the routed experts' stacked weights and the router, "
                             "which are not planned; name the layers instead, e.g. "
                             "--lora-targets " + ",".join(n for n in by_name if n not in routers)[:80])
        chosen = [g for n, gs in by_name.items() if n != "lm_head" for g in gs
                  if not (not g[0] and g[1] == module_path(names, False, "lm_head"))]
    else:
        if ALL_LINEAR in lora.targets:
            raise UsageError("--lora-targets all-linear stands alone (no other names with it)")
        valid = [n for n in by_name if n not in routers]
        # PEFT's MoE conversion (planning/lora_targets.py): some names become the routed
        # experts' stacked parameters and no longer name any linear layer
        try:
            left, params = LT.converted(model_type, lora.targets)
        except ValueError as e:
            raise UsageError(f"--lora-targets {','.join(lora.targets)} on {model_type}: PEFT "
                             f"0.21.2 refuses it: {e}") from None
        if LT.ROUTER_WEIGHT in params:
            raise UsageError(f"--lora-targets {','.join(params[LT.ROUTER_WEIGHT])}: PEFT wraps the "
                             "router's weight (gate.weight), which is not planned; "
                             f"valid names: {', '.join(valid)}")
        if params:
            stacked = {p.name.rsplit(".", 1)[-1] for p in ledger(config).params if p.routed_expert}
            if not stacked >= {"w1", "w2", "w3"}:
                raise UsageError(f"--lora-targets {','.join(lora.targets)}: {config.name} has no "
                                 "gated routed experts for PEFT's target_parameters to wrap")
            if lora.dropout:
                raise UsageError("--lora-dropout must be 0 with LoRA on routed experts: PEFT's "
                                 "ParamWrapper does not work with lora_dropout != 0")
            expert_groups = tuple(LT.LEDGER_EXPERTS[k] for k in ("gate_up_proj", "down_proj")
                                  if k in params)
        embeddings = {module_path(names, False, m).rsplit(".", 1)[-1]
                      for m in ("token_embeddings", "position_embeddings")}
        # every module that holds parameters, by each part of its path: a name that is one
        # of them but no linear layer is one PEFT matches and then wraps (an embedding, a
        # Conv1d) or refuses ("Target module ... is not supported": a norm, an MLP block)
        modules = {part for p in ledger(config).params
                   for part in module_path(names, p.per_layer, p.module).split(".")} \
            | set((names.blocks if names is not None else "layers").split("."))
        for name in left:
            if name in by_name or name in routed or name in routers:
                continue
            why = LT.UNUSED_ADAPTERS.get(model_type or "", {}).get(name)
            if why:
                raise UsageError(f"--lora-targets {name} on {model_type} is not planned: PEFT wraps "
                                 f"it, but {why}; leave it out")
            if name in embeddings:
                raise UsageError(f"--lora-targets {name}: PEFT wraps the embedding "
                                 "(lora.Embedding), which is not planned; name linear layers, "
                                 f"e.g. {', '.join(valid[:4])}")
            if name == "conv1d" and name in modules:
                if LT.mamba_refused(model_type, [name]):
                    raise UsageError(f"--lora-targets: PEFT 0.21.2 refuses LoRA on conv1d of a "
                                     f"Mamba-based model ({model_type}); leave it out")
                raise UsageError("--lora-targets conv1d: PEFT wraps the convolution "
                                 "(lora.Conv1d), which is not planned; leave it out")
            if name in modules or name.isdigit():
                raise UsageError(f"--lora-targets {name}: PEFT 0.21.2 refuses it: it names a "
                                 "module that is no layer type LoRA wraps (only linear layers, "
                                 f"embeddings and convolutions); valid names: {', '.join(valid)}")
        for name in left:
            if name in routed or name in routers:
                raise UsageError(f"--lora-targets {name}: a mixture of experts' routed experts and "
                                 "router are not planned (PEFT wraps no linear layer by this name "
                                 f"on {model_type or config.name}); valid names: {', '.join(valid)}")
            chosen += [g for g in by_name.get(name, ()) if g not in chosen]
        # PEFT refuses only when no name matches anything ("Target modules ... not found in
        # the base model", tuners_utils.py inject_adapter); a name that matches nothing
        # beside others that do is passed over, and the plan's line lists what is wrapped
        unknown = [n for n in left if n not in by_name]
        if unknown and not chosen and not expert_groups:
            raise UsageError(f"--lora-target {unknown[0]!r} names no linear layer of {config.name}; "
                             f"valid names: {', '.join(valid)} (or all-linear)")
    bad = LT.mamba_refused(model_type, [g[1].rsplit(".", 1)[-1] for g in chosen])
    if bad:
        raise UsageError(f"--lora-targets: PEFT 0.21.2 refuses LoRA on {bad} of a Mamba-based "
                         f"model ({model_type}: out_proj and conv1d are incompatible); "
                         "leave it out")
    targets, modules, followers = [], set(), set()
    order = {(per, m): i for i, (per, m, _, _) in enumerate(lins)}
    for per, path, members in sorted(chosen, key=lambda g: order[(g[0], g[2][0][0])]):
        targets.append(Target(path.rsplit(".", 1)[-1], path, per, tuple(m for m, _, _ in members),
                              members[0][1], tuple(d for _, _, d in members)))
        modules |= {(per, m) for m, _, _ in members}
        followers |= {(per, m) for m, _, _ in members[1:]}
    for group in expert_groups:  # PEFT's ParamWrapper on the stacked experts
        name = "gate_up_proj" if len(group) > 1 else "down_proj"
        path = module_path(names, True, "ffn.experts")
        targets.append(Target(name, f"{path}.{name}", True, tuple(f"ffn.experts.{w}" for w in group),
                              (), ()))
    compute = BF16 if precision_autocast is not None else FP32
    # torchtune's LoRALinear holds lora_a and lora_b in the model's dtype (its recipes build
    # the model under training.set_default_dtype(bf16)), no float32 upcast as PEFT's
    # autocast_adapter_dtype; its QLoRA base is torchao's NF4Tensor (to_nf4 in LoRALinear
    # and FrozenNF4Linear: torchtune/modules/peft/lora.py, modules/low_precision)
    tune = implementation == TORCHTUNE
    adapters = Adapters(lora.rank, frozenset(modules), frozenset(followers), lora.dropout > 0,
                        compute if tune else FP32, expert_groups,
                        nf4_compute=compute if kbit_upcast else None)
    return FineTune(config, lora, tuple(targets), base_weights, double_quant,
                    FP32 if kbit_upcast else compute, adapters, implementation,
                    NF4_TORCHAO if tune else NF4_BNB, kbit_upcast)
