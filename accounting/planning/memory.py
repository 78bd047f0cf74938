"""Training memory with AdamW: parameters, gradients, optimizer state and activations.

Activations are the ledger's records (accounting/ledger/builder/ emits them as it runs the
model symbolically): one per tensor, with a symbolic shape, whether the course's list
counts it, and whether autograd saves it (and in which module). Every total below is
derived from them.

Two scopes:
  course — CS336 assignment 1, problem adamwAccounting: parameters, gradients, AdamW's
           two moments, and the activations the problem lists (all fp32 in the course).
  model  — what a training step of model.TransformerLM with F.cross_entropy and
           torch.optim.AdamW holds: the tensors autograd saves (measured on the CPU by
           tests/test_planning_reality.py), the RoPE tables (buffers), and AdamW's step
           counters (on the CPU by default, so not in the GPU total).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from accounting.ledger import records as R
from accounting.architecture.checks import DROPOUTS
from accounting.architecture.config import ModelConfig
from accounting.runtime.errors import UsageError
from accounting.ledger.ledger import ledger
from accounting.ledger.symbols import Expr, grouped
from accounting.units import DTYPE_BYTES, FP32, INT64
from accounting.ledger.builder.common import COURSE as COURSE_IMPL
from accounting.planning import cuda_peak as CP, fp8 as F8, training_state as TS
from accounting.planning import mtp_memory as MT
from accounting.planning import param_counts as PC
from accounting.planning.peak_moments import PeakPhase  # noqa: F401 (named here too)
from accounting.planning import activation_offload as AO, loss_memory as LM
# the scopes' names, in_scope and the evaluated result (memory_result.py), re-exported
from accounting.planning.memory_result import (COURSE, MODEL, ActivationRow,  # noqa: F401
                                               TrainingMemory, in_scope)
from accounting.planning.optimizers import DEFAULT_OPTIMIZER, get_optimizer, is_default, is_paged
from accounting.planning.precisions import (BF16_MIXED, PRECISIONS, Precision,  # noqa: F401
                                            get_precision)

SCOPES = {
    COURSE: "the course's accounting (CS336 a1 adamwAccounting): parameters, gradients, AdamW m "
            "and v, and the activations the problem lists",
    MODEL: "what a training step of model.TransformerLM holds: the tensors autograd saves "
           "(checked on the CPU by tests/test_planning_reality.py and tests/test_architectures.py), "
           "the model's buffers (RoPE tables), AdamW step counters",
}
NO_RECOMPUTE, FULL_RECOMPUTE, SELECTIVE_RECOMPUTE = "none", "full", "selective"
RECOMPUTE = {
    NO_RECOMPUTE: "every block's activations are kept from the forward to the backward pass",
    FULL_RECOMPUTE: "full activation recomputation (torch.utils.checkpoint on each block): keep "
                    "only each block's input; during the backward pass one block's activations "
                    "exist at a time; costs one more forward pass of the blocks",
    SELECTIVE_RECOMPUTE: "selective recomputation (Korthikanti et al. 2022: torch.utils."
                         "checkpoint on each attention core): keep the core's inputs (Q, K, V, "
                         "the mask), not its T×T tensors; costs the cores' forward again",
}

# ---- activations, parameters and buffers: the ledger's -----------------------------------
Activation = R.Activation
STEP_BYTES = TS.STEP_BYTES  # AdamW's state["step"], float32, on the CPU unless fused/capturable


def bytes_per_element(a: R.Activation, precision: Precision | None = None) -> int:
    return a.bytes_per_element


# the parameter counts (param_counts.py; named here too, where callers have read them)
_param_expr, parameter_count = PC.param_expr, PC.parameter_count
matmul_weight_count, tensor_count = PC.matmul_weight_count, PC.tensor_count


def buffer_bytes(config: ModelConfig) -> Expr:
    """The model's buffers (RoPE's cos/sin tables: float32, T_max·d_k/2 each, per block)."""
    return sum((b.expr() for b in ledger(config).buffers), Expr())


def values(config: ModelConfig, seq: int, batch: int) -> dict[str, int]:
    """Symbol values for one workload (T_max = max(T, context_length): the RoPE table length)."""
    return ledger(config).values(seq, batch)


# ---- the memory model -----------------------------------------------------------------
@dataclass(frozen=True)
class Term:
    """One line of the memory total: a byte count as a closed form."""
    name: str
    formula: str  # bytes, with the element count in symbols (e.g. "4·N")
    bytes: Expr  # the same, expanded in the shape symbols
    on_gpu: bool = True
    note: str = ""


@dataclass(frozen=True)
class MemoryItem:
    """A Term evaluated for one workload."""
    name: str
    formula: str
    expression: str
    bytes: int
    per_sequence: int  # bytes for each sequence in the batch (the a of a·B + b)
    fixed: int  # bytes independent of the batch size (the b)
    on_gpu: bool
    note: str


@dataclass(frozen=True)
class MemoryModel:
    """Training memory as a function of (batch, seq) for one config, precision, scope,
    recomputation, implementation (accounting/planning/recipes.py) and optimizer
    (accounting/planning/optimizers.py); trainable: a predicate on the ledger's parameters
    (None: all are trained; a frozen one has no gradient and no optimizer state); device:
    whose kernels the step's peak follows (accounting/planning/cuda_peak.py: "cuda", the
    plan's default, or "cpu", what the tests measure on a CPU step)."""
    config: ModelConfig
    precision: Precision
    scope: str = MODEL
    recompute: str = NO_RECOMPUTE
    implementation: str = COURSE_IMPL
    optimizer: str = DEFAULT_OPTIMIZER
    trainable: TS.Trainable = None
    # fine-tuning (issue 28): a planning.finetune.FineTune (LoRA/QLoRA): its adapters are the
    # trained tensors (trainable is theirs), the base frozen in its dtype or NF4
    finetune: object = None
    device: str = CP.CUDA
    arch: str | None = None  # the GPU's (GPU.arch): sizes the cuBLAS workspaces; None: unknown
    # the optimizer stepped tensor by tensor in the backward pass (torchtune's
    # register_optim_in_bwd_hooks: each parameter's post-accumulate-grad hook steps its own
    # optimizer and sets its gradient to None): no moment holds every gradient
    optimizer_in_backward: bool = False
    # the loss recipe (loss_memory.py: standard, chunked with loss_chunks, fused-linear)
    # and torchtune's activation offloading (activation_offload.py), issue 44
    loss: str = LM.STANDARD
    loss_chunks: int = LM.DEFAULT_CHUNKS
    offload_activations: bool = False
    compile: bool = False  # each block under torch.compile (compile_memory.py)
    # with compile: the chunked loss's cross-entropy compiled too (torchtune's compile_loss;
    # --compile-components model leaves it eager: compile_components.py)
    compile_loss: bool = True
    # issue 41: a trained vision tower's saved activations (planning/vision_train.py), bytes
    # (per sequence, once per step), kept from its forward to the end of the backward pass
    vision_saved: tuple[int, int] = (0, 0)
    # and its forward-wide saves at B sequences (Pixtral's block mask, S² at S = B·Σ N:
    # vision_train.TowerActivations.forward), the symbol V_fwd; None: none
    vision_forward: object = None

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise UsageError(f"unknown scope {self.scope!r}; choose {' or '.join(SCOPES)}")
        if self.recompute not in RECOMPUTE:
            raise UsageError(f"unknown recompute mode {self.recompute!r}; choose "
                             f"{' or '.join(RECOMPUTE)}")
        if self.scope == COURSE and self.recompute == SELECTIVE_RECOMPUTE:
            raise UsageError("the course's activation list has no attention-core split: "
                             "--recompute selective needs --scope model")
        get_optimizer(self.optimizer)
        if self.loss not in LM.LOSSES:
            raise UsageError(f"unknown loss {self.loss!r}; choose {' or '.join(LM.LOSSES)}")
        if isinstance(self.loss_chunks, bool) or not isinstance(self.loss_chunks, int) \
                or not 1 <= self.loss_chunks <= LM.MAX_CHUNKS:
            raise UsageError(f"loss_chunks must be an integer in 1 … {LM.MAX_CHUNKS:,}, got "
                             f"{self.loss_chunks!r}")
        if self.device not in CP.DEVICES:
            raise UsageError(f"unknown device {self.device!r}; choose {' or '.join(CP.DEVICES)}")
        if self.device == CP.CPU and self.implementation != COURSE_IMPL and any(
                getattr(self.config, f) for f in DROPOUTS):  # builder/dropout.py: CUDA's
            raise UsageError("device 'cpu' with dropout: the CPU's F.dropout saves a noise "
                             "tensor in the input's dtype, not CUDA's 1-byte mask, and SDPA "
                             "with dropout runs its math composite; neither is modelled: "
                             "set the dropouts to 0 or plan for 'cuda'")

    # -- activations --
    def _ledger(self, recompute: str):
        p = self.precision
        if self.finetune is not None:  # the adapters on a base frozen in the compute dtype
            return self.finetune.ledger(p.autocast, recompute)
        return ledger(self.config, p.autocast, recompute, self.implementation, p.param_dtype,
                      fp8=p.fp8)

    @property
    def ledger(self):
        """The ledger of this run: the precision's autocast and parameter dtype, this
        recomputation, this implementation."""
        return self._ledger(self.recompute)

    def values(self, seq: int, batch: int) -> dict[str, int]:
        v = self.ledger.values(seq, batch)  # with LoRA: the rank r too
        v = LM.add_values(v, self.loss, self.loss_chunks)
        if self.vision_forward is not None:  # not linear in B: fit.py bisects on the bytes
            v["V_fwd"] = self.vision_forward.bytes(batch)
        return AO.add_values(v, self.ledger.activations) if self.offload_activations else v

    @cached_property
    def loss_region(self) -> LM.LossRegion:
        """What the loss recipe holds against the ledger's F.cross_entropy (loss_memory.py)."""
        # Liger's grad_weight is zeros_like(weight): none for a frozen head (LoRA)
        return LM.region(self.ledger.activations, self.loss,
                         0 if self.finetune is not None else self.precision.master_bytes,
                         self.compile and self.compile_loss)

    def activations(self) -> tuple[Activation, ...]:
        return tuple(r for r in self.ledger.activations
                     if in_scope(r, self.scope) and not r.weight_copy)

    def _by_size(self, records) -> list[tuple[int, Expr]]:
        groups: dict[int, Expr] = {}
        for r in records:
            size = bytes_per_element(r)
            groups[size] = groups.get(size, Expr()) + r.elements
        return sorted(groups.items(), key=lambda kv: -kv[0])

    def _bytes(self, groups, times: tuple[str, ...] = ()) -> Expr:
        return sum((e.scale(size).times(*times) for size, e in groups), Expr())

    def _weight_copies(self) -> Term | None:
        copies = [r for r in self.ledger.activations if r.weight_copy]
        if not copies:
            return None
        e = sum((r.elements.scale(r.bytes_per_element).times(*((r.repeat,) if r.repeat else ()))
                 for r in copies), Expr())
        formula = "2·N_matmul" if e == matmul_weight_count(self.config).scale(2) else str(e)
        return Term("bf16 copies of the matmul weights", formula, e,
                    note="autocast casts each weight for its matmul (the einsum's transposed "
                         "view is not cached), and the matmul saves the copy until the backward pass")

    # -- parameters, gradients, optimizer state --
    @cached_property
    def tensors(self) -> tuple[TS.Tensor, ...]:
        if self.finetune is not None:  # LoRA: the adapters are the trained tensors
            return TS.tensors(self.config, TS.unfrozen, self.finetune.ledger())
        # an implementation whose parameters some get no gradient (transformers' DeepSeek-V3.2
        # indexer, under @torch.no_grad): this run's ledger says which
        lg = self.ledger if any(p.frozen for p in self.ledger.params) else None
        return TS.tensors(self.config, self.trainable, lg)

    @property
    def state_precision(self) -> Precision:
        """The dtypes of the trained tensors: the precision's, or (LoRA) the adapters' own
        for the weights, gradients and optimizer state, without a master copy."""
        if self.finetune is None:
            return self.precision
        a = self.finetune.adapters.adapter_dtype
        return replace(self.precision, param_dtype=a, grad_dtype=a, state_dtype=a, master=False)

    @cached_property
    def state_terms(self) -> tuple[Term, ...]:
        """Parameters, weight copies, gradients, the master copy, the optimizer's state and
        its step counters: one term each, tensor by tensor (frozen tensors: none but the
        parameter itself)."""
        p, c, ts = self.state_precision, self.config, self.tensors
        opt = get_optimizer(self.optimizer)
        n_all, n_trained = TS.counts(ts)
        params = parameter_count(c)
        trained = params if n_trained == n_all else Expr.of(n_trained)
        n_name = "N" if n_trained == n_all else "N_trainable"
        copies, whose = self._weight_copies(), ""
        if self.finetune is not None:  # LoRA/QLoRA: the base frozen, the adapters trained
            out = list(self.finetune.weight_terms(self, copies))
            trained, n_name, whose = self.finetune.adapter_expr(), "N_LoRA", " of the adapters"
        else:
            pb = p.master_bytes
            what = (f"{p.param_dtype} master copy" if copies else p.param_dtype)
            out = [Term(f"parameters ({what})", f"{pb}·N", params.scale(pb))]
            if copies:
                out.append(copies)
            te = F8.te_state(self.ledger, self._v1, p.delayed_scaling) if p.fp8 == F8.TE else []
            out += [Term(*t[:3], note=t[3]) for t in te]  # TE's fp8 copies and scaling state
        if n_trained:
            out.append(Term(f"gradients{whose} ({p.grad_dtype})", f"{p.grad_bytes}·{n_name}",
                            trained.scale(p.grad_bytes)))
        if p.master and n_trained:
            out.append(Term("fp32 master copy of the parameters (optimizer)", f"4·{n_name}",
                            trained.scale(4),
                            note="held by the optimizer (Megatron-LM, DeepSpeed); it updates "
                                 "this copy and casts it back to the bf16 parameters"))
        for item in TS.optimizer_items(opt, p, ts):
            per = DTYPE_BYTES.get(item.dtype, 1)
            e, formula = TS.as_expr(item.numel, per, n_trained, trained, n_name)
            if item.bytes != item.numel * per:  # mixed dtypes in one item: the integer
                e, formula = Expr.of(item.bytes), f"{item.bytes:,}"
            out.append(Term(f"{item.name}{whose}" + (f" ({item.dtype})" if item.dtype not in item.name
                                                        else ""), formula, e,
                            on_gpu=not is_paged(item.name), note=f"{opt.title} ({opt.source})"))
        steps = TS.step_counters(opt, ts)
        if self.scope == MODEL and steps:
            on_gpu = opt.step_counter == "device"
            out.append(Term(f"{opt.counter_label} step counters (fp32 scalars)", f"{STEP_BYTES}·({steps})"
                            if n_trained != n_all or steps != tensor_count(c).evaluate(self._v1)
                            else f"{STEP_BYTES}·({tensor_count(c)})",
                            Expr.of(STEP_BYTES * steps), on_gpu=on_gpu,
                            note="one per parameter tensor; " + (
                                "on the GPU (fused or capturable)" if on_gpu else
                                "torch keeps them on the CPU unless fused=True or "
                                "capturable=True, so not in the GPU total")))
        return tuple(out) + tuple(Term(t.name, t.formula, t.bytes, t.on_gpu, t.note)
                                  for t in self._mtp(MT.state_terms(c, self.ledger, p, self.optimizer)))

    def _mtp(self, terms):
        """The MTP modules' lines (mtp_memory.py): in the model scope of a full training."""
        return terms if self.scope == MODEL and self.finetune is None else []

    @property
    def _v1(self) -> dict[str, int]:
        return values(self.config, self.config.context_length, 1)

    @cached_property
    def terms(self) -> tuple[Term, ...]:
        c = self.config
        out = list(self.state_terms)
        if self.scope == MODEL:
            buffers = sum((b.expr() for b in self.ledger.buffers), Expr())
            if buffers:
                name = ("RoPE inverse frequencies (fp32 buffers inv_freq, original_inv_freq)"
                        if self.implementation != COURSE_IMPL else
                        "RoPE cos/sin tables (fp32 buffers)")
                out.append(Term(name, str(buffers), buffers,
                                note="" if self.implementation != COURSE_IMPL else
                                "T_max = max(T, context_length): the model's table length"))
        acts = self.activations()
        outside = [r for r in acts if not r.per_layer]
        kinds = [g for g, _ in self.ledger.groups]
        for kind in kinds:  # "L" when every block is alike; else one term per kind of block
            block = [r for r in acts if r.repeat == kind]
            blocks = "all L blocks" if kind == "L" else f"the {kind} blocks"
            prefix = f"{kind}·"
            if self.recompute == NO_RECOMPUTE:
                g = self._by_size(block)
                out.append(Term(f"activations: {blocks}", grouped(g, prefix), self._bytes(g, (kind,))))
                continue
            kept, again = self._recompute_split(block, kind)
            one = "block" if self.recompute == FULL_RECOMPUTE else "attention core"
            out.append(Term("activations: kept for recomputation" + ("" if kind == "L" else f" ({kind})"),
                            grouped(kept, prefix), self._bytes(kept, (kind,)),
                            note="what each block keeps (its input, or its attention core's inputs)"))
            out.append(Term(f"activations: one {one}" + ("" if kind == "L" else f" of {kind}")
                            + ", recomputed", grouped(again), self._bytes(again),
                            note="alive while that block is differentiated"))
        g = self._by_size(outside)
        out.append(Term("activations: outside the blocks", grouped(g), self._bytes(g)))
        for e in self._mtp([MT.activation_bytes(c, self.ledger)] if c.mtp_layers else []):
            out.append(Term("activations: MTP modules", str(e), e, note=MT.ACTIVATIONS))
        return out

    def _recompute_split(self, block, kind: str) -> tuple[list, list]:
        """(kept per block, recomputed for the one block being differentiated), by size,
        for the blocks of one kind."""
        if self.scope == COURSE:  # the course's list: each block keeps its input
            kept = [r for r in self._ledger(NO_RECOMPUTE).activations
                    if r.block_input and r.repeat == kind]
            return self._by_size(kept), self._by_size([r for r in block if not r.block_input])
        # what a block saves without recomputation, less what it keeps with it (weight
        # copies included: the recomputed matmuls cast their weights again)
        full = [r for r in self._ledger(NO_RECOMPUTE).activations
                if r.repeat == kind and in_scope(r, MODEL)]
        kept_all = [r for r in self.ledger.activations if r.repeat == kind and in_scope(r, MODEL)]
        diff: dict[int, Expr] = {}
        for size, e in self._by_size(full):
            diff[size] = diff.get(size, Expr()) + e
        for size, e in self._by_size(kept_all):
            diff[size] = diff.get(size, Expr()) - e
        kept = self._by_size(block)
        again = sorted(((size, e) for size, e in diff.items() if e), key=lambda kv: -kv[0])
        if any(v < 0 for _, e in again for v in e.terms.values()):
            # A dtype can change hands: under autocast a biased Q/K/V is float32 (the fp32
            # bias promotes it); without recomputation the core saves its bf16 copies, with
            # it the checkpoint keeps the float32 inputs. The difference holds in bytes.
            # (A coefficient may then be negative: the fp32 inputs kept cost more than the
            # bf16 copies they replace; the attention core's T² terms outweigh them.)
            again = [(1, sum((e.scale(size) for size, e in again), Expr()))]
        return kept, again

    def total_expr(self) -> Expr:
        return sum((t.bytes for t in self.terms if t.on_gpu), Expr())

    # -- the step's peak (model scope) --
    @cached_property
    def peak_terms(self) -> tuple[PeakPhase, ...]:
        """The moments of a training step that decide its peak, each with the bytes live at
        it (accounting/planning/peak_moments.py, where the rules are written out)."""
        from accounting.planning.peak_moments import peak_terms
        return peak_terms(self)

    @property
    def peak_rules(self) -> tuple[CP.Adjustment, ...]:
        """The CUDA rules in the peak: the backward pass's start adjustments and the cuBLAS
        workspaces (live at both moments); none for device="cpu"."""
        return self.cuda_adjustments + ((CP.workspace(self.arch),) if self.device == CP.CUDA else ())

    @cached_property
    def cuda_adjustments(self) -> tuple[CP.Adjustment, ...]:
        """What a CUDA step keeps at the start of its backward pass beyond (or short of)
        the CPU step's: the SDPA backend's saves and the loss under CUDA autocast (none for
        device="cpu")."""
        if self.device != CP.CUDA:
            return ()
        acts = self.ledger.activations
        return tuple(CP.attention(acts, self._v1) + (
            CP.loss(acts, self.precision.autocast, self.implementation,
                    self.ledger.logits_dtype)
            if self.loss_region.cuda_loss else []))

    def peak(self, batch: int, seq: int) -> int:
        """Bytes at the step's modelled peak: the larger of the two moments."""
        v = self.values(seq, batch)
        return max(ph.bytes.evaluate(v) for ph in self.peak_terms)

    def fit_bytes(self, batch: int, seq: int) -> int:
        """What must fit in the GPU: the step's peak (model scope), or the course's sum."""
        return self.peak(batch, seq) if self.scope == MODEL else self.total(batch, seq)

    def fit_lines(self, seq: int) -> list[tuple[int, int]]:
        """fit_bytes(batch, seq) = max over these (a, b) of a·batch + b, for every batch."""
        exprs = [ph.bytes for ph in self.peak_terms] if self.scope == MODEL else [self.total_expr()]
        v = self.values(seq, 1)
        out = []
        for e in exprs:
            with_b, without_b = e.split("B")
            assert all(f.count("B") == 1 for f in with_b.terms), "memory must be linear in B"
            out.append((with_b.evaluate(v), without_b.evaluate(v)))
        return out

    def total(self, batch: int, seq: int) -> int:
        """Bytes on the GPU for one training step at (batch, seq): exact."""
        return self.total_expr().evaluate(self.values(seq, batch))

    def linear(self, seq: int) -> tuple[int, int]:
        """(a, b) with total(batch, seq) = a·batch + b for every batch."""
        with_b, without_b = self.total_expr().split("B")
        assert all(f.count("B") == 1 for f in with_b.terms), "memory must be linear in B"
        v = self.values(seq, 1)
        return with_b.evaluate(v), without_b.evaluate(v)

    def at(self, batch: int, seq: int) -> TrainingMemory:
        v = self.values(seq, batch)
        v1 = self.values(seq, 1)
        items = []
        for t in self.terms:
            with_b, without_b = t.bytes.split("B")
            items.append(MemoryItem(t.name, t.formula, str(t.bytes), t.bytes.evaluate(v),
                                    with_b.evaluate(v1), without_b.evaluate(v1), t.on_gpu, t.note))
        a, b = self.linear(seq)
        rows = tuple(ActivationRow(r, r.elements.evaluate(v) * r.count(v), bytes_per_element(r))
                     for r in self.ledger.activations)
        return TrainingMemory(self, batch, seq, tuple(items), a, b, rows,
                              parameter_count(self.config).evaluate(v),
                              matmul_weight_count(self.config).evaluate(v),
                              TS.counts(self.tensors)[1])
