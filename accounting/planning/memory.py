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

from dataclasses import dataclass
from functools import cached_property

from accounting.ledger import records as R
from accounting.spec.config import ModelConfig
from accounting.runtime.errors import UsageError
from accounting.ledger.ledger import ledger
from accounting.ledger.symbols import Expr, grouped
from accounting.units import BF16, DTYPE_BYTES, FP32, INT64

COURSE, MODEL = "course", "model"
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

# ---- precision ----------------------------------------------------------------------
BF16_MIXED = "bf16-mixed"  # the other precision is FP32 (all-fp32), named by its dtype
_B32, _B16 = DTYPE_BYTES[FP32], DTYPE_BYTES[BF16]


@dataclass(frozen=True)
class Precision:
    name: str
    master_bytes: int  # per parameter
    grad_bytes: int
    moment_bytes: int  # each of AdamW's m and v
    autocast: str | None  # the device whose torch.autocast policies the activations follow
    compute: str  # which datasheet peak applies: FP32 or BF16 (a dtype name)
    inference_bytes: int  # weights and KV cache at inference
    assumptions: str


PRECISIONS: dict[str, Precision] = {
    FP32: Precision(FP32, _B32, _B32, _B32, None, FP32, _B32,
                    "all-fp32 (the course's assumption): weights, gradients, AdamW m and v, and "
                    "activations are 4 bytes each; FP32 peak"),
    BF16_MIXED: Precision(BF16_MIXED, _B32, _B32, _B32, "cuda", BF16, _B16,
                          "bf16 mixed precision, torch.autocast('cuda', dtype=torch.bfloat16): "
                          "fp32 master weights, gradients and AdamW m and v (4 B each); each "
                          "activation in the dtype autocast gives it (accounting/ledger/autocast.py: "
                          "matmuls in bf16 with their inputs cast to bf16 copies, which they "
                          "save, the weights' bf16 copies included; exp, pow, sum and the loss in "
                          "fp32; norms in fp32 as the model computes them); bf16 Tensor Core "
                          "peak; inference in bf16. The CPU's autocast policies are checked on a "
                          "real step (tests/test_memory_reality.py); CUDA's are PyTorch's "
                          "documented ones, not measured here"),
}


def get_precision(name: str) -> Precision:
    try:
        return PRECISIONS[name]
    except KeyError:
        raise UsageError(f"unknown precision {name!r}; choose {' or '.join(PRECISIONS)}") from None


# ---- activations, parameters and buffers: the ledger's -----------------------------------
Activation = R.Activation
STEP_BYTES = DTYPE_BYTES[FP32]  # torch.optim.AdamW: state["step"] = torch.tensor(0.0), float32, on the CPU
#                 unless fused=True or capturable=True


def bytes_per_element(a: R.Activation, precision: Precision | None = None) -> int:
    return a.bytes_per_element


def in_scope(a: R.Activation, scope: str) -> bool:
    return bool(a.course) if scope == COURSE else a.saved


def _param_expr(params) -> Expr:
    return sum((Expr.of(1, p.shape).times(*((p.repeat,) if p.repeat else ())) for p in params), Expr())


def parameter_count(config: ModelConfig) -> Expr:
    """N: every parameter tensor of the ledger (L copies of a per-layer one; a tied one once)."""
    return _param_expr(ledger(config).params)


def matmul_weight_count(config: ModelConfig) -> Expr:
    """N_matmul: the weights a matmul reads (not a table only looked up, not the norms or biases)."""
    return _param_expr(p for p in ledger(config).params if p.matmul_weight)


def tensor_count(config: ModelConfig) -> Expr:
    """Parameter tensors (AdamW keeps one step counter per tensor)."""
    return sum((Expr.of(1, (p.repeat,) if p.repeat else ()) for p in ledger(config).params), Expr())


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
class PeakPhase:
    """One moment of a training step and the bytes live at it, as a closed form."""
    name: str
    bytes: Expr
    what: str


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
    """Training memory as a function of (batch, seq) for one config, precision, scope."""
    config: ModelConfig
    precision: Precision
    scope: str = MODEL
    recompute: str = NO_RECOMPUTE
    # fine-tuning (issue 28): a planning.finetune.FineTune (LoRA/QLoRA on a frozen base),
    # which supplies the state terms; None: every parameter trained
    finetune: object = None

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise UsageError(f"unknown scope {self.scope!r}; choose {' or '.join(SCOPES)}")
        if self.recompute not in RECOMPUTE:
            raise UsageError(f"unknown recompute mode {self.recompute!r}; choose "
                             f"{' or '.join(RECOMPUTE)}")
        if self.scope == COURSE and self.recompute == SELECTIVE_RECOMPUTE:
            raise UsageError("the course's activation list has no attention-core split: "
                             "--recompute selective needs --scope model")

    # -- activations --
    @property
    def ledger(self):
        """The ledger of this run: the precision's autocast, this recomputation."""
        return self._ledger(self.recompute)

    def _ledger(self, recompute: str = NO_RECOMPUTE):
        adapters = self.finetune.adapters if self.finetune is not None else None
        return ledger(self.config, self.precision.autocast, recompute, adapters)

    def values(self, seq: int, batch: int) -> dict[str, int]:
        return self.ledger.values(seq, batch)

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

    @cached_property
    def terms(self) -> tuple[Term, ...]:
        p, c = self.precision, self.config
        n, params, tensors = "N", parameter_count(c), tensor_count(c)
        copies = self._weight_copies()
        if self.finetune is not None:  # LoRA/QLoRA: frozen base, trained adapters
            out = list(self.finetune.state_terms(self, copies))
        else:
            out = self._full_state_terms(p, n, params, tensors, copies)
        if self.scope == MODEL:
            buffers = buffer_bytes(c)
            if buffers:
                out.append(Term("RoPE cos/sin tables (fp32 buffers)", str(buffers), buffers,
                                note="T_max = max(T, context_length): the model's table length"))
        out += self._activation_terms()
        return tuple(out)

    def _full_state_terms(self, p, n, params, tensors, copies) -> list[Term]:
        out = [Term("parameters (fp32 master copy)" if copies else "parameters (fp32)",
                    f"{p.master_bytes}·{n}", params.scale(p.master_bytes))]
        if copies:
            out.append(copies)
        out += [Term("gradients (fp32)", f"{p.grad_bytes}·{n}", params.scale(p.grad_bytes)),
                Term("AdamW first moment m (fp32)", f"{p.moment_bytes}·{n}",
                     params.scale(p.moment_bytes)),
                Term("AdamW second moment v (fp32)", f"{p.moment_bytes}·{n}",
                     params.scale(p.moment_bytes))]
        if self.scope == MODEL:
            out.append(Term("AdamW step counters (fp32 scalars)", f"{STEP_BYTES}·({tensors})",
                            tensors.scale(STEP_BYTES), on_gpu=False,
                            note="one per parameter tensor; torch keeps them on the CPU unless "
                                 "fused=True or capturable=True, so not in the GPU total"))
        return out

    def _activation_terms(self) -> list[Term]:
        out: list[Term] = []
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
        return out

    def _recompute_split(self, block, kind: str) -> tuple[list, list]:
        """(kept per block, recomputed for the one block being differentiated), by size,
        for the blocks of one kind."""
        if self.scope == COURSE:  # the course's list: each block keeps its input
            kept = [r for r in self._ledger().activations
                    if r.block_input and r.repeat == kind]
            return self._by_size(kept), self._by_size([r for r in block if not r.block_input])
        # what a block saves without recomputation, less what it keeps with it (weight
        # copies included: the recomputed matmuls cast their weights again)
        full = [r for r in self._ledger().activations
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
        """The live bytes at the two moments of a training step that decide its peak (with
        optimizer.zero_grad(set_to_none=True), PyTorch's default, so no gradient exists in
        the forward pass), each exact (tests/test_peak.py measures them):
          * the backward pass's first op, log_softmax's backward: the parameters, AdamW's
            m and v, the buffers, every kept activation, the loss, and two tensors of B·T·V
            float32 — the gradient of the log-softmax (nll_loss's backward) and of the
            logits (the log-softmax's backward);
          * AdamW's update (foreach, the default on CUDA): parameters, gradients, m, v, and
            one more float32 tensor per parameter (torch._foreach_sqrt of v), the buffers,
            the loss, the token ids and targets.
        Gradient temporaries inside one block's backward pass can exceed both (the naive
        softmax's backward makes five tensors of B·h·T²): not modelled, measured in
        tests/test_peak.py."""
        c, p = self.config, self.precision
        params = parameter_count(c)
        buffers = buffer_bytes(c)
        kept = sum((r.elements.scale(r.bytes_per_element).times(*((r.repeat,) if r.repeat else ()))
                    for r in self.ledger.activations if r.saved), Expr())
        f32, i64 = DTYPE_BYTES[FP32], DTYPE_BYTES[INT64]
        loss = Expr.of(f32)  # the 0-dim float32 loss the training loop holds
        logits_grads = Expr.of(2 * f32, ("B", "T", "V"))
        inputs = Expr.of(2 * i64, ("B", "T"))  # token ids and targets, int64
        weights, grads, moments, sqrt = (
            self.finetune.state_bytes(self) if self.finetune is not None else  # LoRA/QLoRA
            (params.scale(p.master_bytes), params.scale(p.grad_bytes),
             params.scale(2 * p.moment_bytes), params.scale(f32)))
        boundary = weights + moments + buffers + kept + loss + logits_grads
        optimizer = weights + grads + moments + sqrt + buffers + loss + inputs
        return (PeakPhase("start of the backward pass (log-softmax backward)", boundary,
                          "parameters, m, v, buffers, the kept activations, the loss, and the "
                          f"gradients of the log-softmax and of the logits (2 × {f32}·B·T·V)"),
                PeakPhase("AdamW update (foreach)", optimizer,
                          f"parameters, gradients, m, v, and √v for every parameter ({f32}·N), "
                          "buffers, the loss, token ids and targets"))

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
                              None if self.finetune is None else self.finetune.adapter_count())


@dataclass(frozen=True)
class ActivationRow:
    record: Activation
    elements: int  # all copies, all layers
    bytes_per_element: int

    @property
    def bytes(self) -> int:
        return self.elements * self.bytes_per_element


@dataclass(frozen=True)
class TrainingMemory:
    model: MemoryModel
    batch: int
    seq: int
    items: tuple[MemoryItem, ...]
    per_sequence: int  # a
    fixed: int  # b
    activation_rows: tuple[ActivationRow, ...]  # every record, in or out of scope
    parameters: int  # N
    matmul_weights: int  # N_matmul
    trainable: int | None = None  # parameters trained (LoRA: the adapters); None: all of them

    @property
    def total(self) -> int:
        return sum(i.bytes for i in self.items if i.on_gpu)

    @property
    def activation_bytes(self) -> int:
        return sum(i.bytes for i in self.items if i.name.startswith("activations"))

    def scope_bytes(self, scope: str) -> int:
        """Activation bytes of either list at this workload (without recomputation)."""
        return sum(r.bytes for r in self.activation_rows if in_scope(r.record, scope))
