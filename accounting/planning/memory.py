"""Training memory with AdamW: parameters, gradients, optimizer state and activations.

Activations are the ledger's records (accounting/builder.py emits them as it runs the
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

from accounting import records as R
from accounting.config import ModelConfig
from accounting.errors import UsageError
from accounting.ledger import ledger
from accounting.symbols import Expr, grouped

COURSE, MODEL = "course", "model"
SCOPES = {
    COURSE: "the course's accounting (CS336 a1 adamwAccounting): parameters, gradients, AdamW m "
            "and v, and the activations the problem lists",
    MODEL: "what a training step of model.TransformerLM holds: the tensors autograd saves "
           "(checked on the CPU by tests/test_planning_reality.py and tests/test_architectures.py), "
           "the model's buffers (RoPE tables), AdamW step counters",
}
NO_RECOMPUTE, FULL_RECOMPUTE = "none", "full"
RECOMPUTE = {
    NO_RECOMPUTE: "every block's activations are kept from the forward to the backward pass",
    FULL_RECOMPUTE: "full activation recomputation (checkpoint each block): keep only each "
                    "block's input; during the backward pass one block's activations exist "
                    "at a time; costs one more forward pass of the blocks",
}

# ---- precision ----------------------------------------------------------------------
FP32, BF16_MIXED = "fp32", "bf16-mixed"


@dataclass(frozen=True)
class Precision:
    name: str
    master_bytes: int  # per parameter
    working_copy_bytes: int  # per matmul weight (0: no low-precision copy)
    grad_bytes: int
    moment_bytes: int  # each of AdamW's m and v
    activation_bytes: int  # per floating-point activation element
    compute: str  # which datasheet peak applies: "fp32" or "bf16"
    inference_bytes: int  # weights and KV cache at inference
    assumptions: str


PRECISIONS: dict[str, Precision] = {
    FP32: Precision(FP32, 4, 0, 4, 4, 4, "fp32", 4,
                    "all-fp32 (the course's assumption): weights, gradients, AdamW m and v, and "
                    "activations are 4 bytes each; FP32 peak"),
    BF16_MIXED: Precision(BF16_MIXED, 4, 2, 4, 4, 2, "bf16", 2,
                          "bf16 mixed precision, PyTorch AMP convention: fp32 master weights "
                          "(4 B), a bf16 working copy of each matmul weight (2 B; autocast's "
                          "cast cache keeps it from the forward to the backward pass), fp32 "
                          "gradients (4 B; autocast leaves gradients in the parameters' dtype), "
                          "fp32 AdamW m and v (4 B each), every floating-point activation in "
                          "bf16 (2 B); bf16 Tensor Core peak; inference in bf16. A convention: "
                          "real autocast keeps some activations of this model in fp32 (the "
                          "residual stream, RMSNorm's float32 internals, exp and sum in the "
                          "softmax, the cross-entropy's log-softmax) and casts a matmul input "
                          "once per matmul that reads it; the CPU reality check covers fp32 only"),
}


def get_precision(name: str) -> Precision:
    try:
        return PRECISIONS[name]
    except KeyError:
        raise UsageError(f"unknown precision {name!r}; choose {' or '.join(PRECISIONS)}") from None


# ---- activations, parameters and buffers: the ledger's -----------------------------------
Activation = R.Activation
FLOAT, BOOL, INT64 = R.FLOAT, R.BOOL, R.INT64
_FIXED_BYTES = {BOOL: 1, INT64: 8}
STEP_BYTES = 4  # torch.optim.AdamW: state["step"] = torch.tensor(0.0), float32, on the CPU
#                 unless fused=True or capturable=True


def bytes_per_element(a: R.Activation, precision: Precision) -> int:
    return _FIXED_BYTES.get(a.kind, precision.activation_bytes)


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

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise UsageError(f"unknown scope {self.scope!r}; choose {' or '.join(SCOPES)}")
        if self.recompute not in RECOMPUTE:
            raise UsageError(f"unknown recompute mode {self.recompute!r}; choose "
                             f"{' or '.join(RECOMPUTE)}")

    # -- activations --
    def activations(self) -> tuple[Activation, ...]:
        return tuple(r for r in ledger(self.config).activations if in_scope(r, self.scope))

    def _by_size(self, records) -> list[tuple[int, Expr]]:
        groups: dict[int, Expr] = {}
        for r in records:
            size = bytes_per_element(r, self.precision)
            groups[size] = groups.get(size, Expr()) + r.elements
        return sorted(groups.items(), key=lambda kv: -kv[0])

    def _bytes(self, groups, times: tuple[str, ...] = ()) -> Expr:
        return sum((e.scale(size).times(*times) for size, e in groups), Expr())

    @cached_property
    def terms(self) -> tuple[Term, ...]:
        p, c = self.precision, self.config
        n, params, tensors = "N", parameter_count(c), tensor_count(c)
        out = [Term("parameters (fp32 master copy)" if p.working_copy_bytes else "parameters (fp32)",
                    f"{p.master_bytes}·{n}", params.scale(p.master_bytes))]
        if p.working_copy_bytes:
            out.append(Term("bf16 working copy of the matmul weights",
                            f"{p.working_copy_bytes}·N_matmul",
                            matmul_weight_count(c).scale(p.working_copy_bytes),
                            note="autocast's cast cache, alive from the forward to the backward "
                                 "pass"))
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
            buffers = buffer_bytes(c)
            if buffers:
                out.append(Term("RoPE cos/sin tables (fp32 buffers)", str(buffers), buffers,
                                note="T_max = max(T, context_length): the model's table length"))
        acts = self.activations()
        block = [r for r in acts if r.per_layer]
        outside = [r for r in acts if not r.per_layer]
        if self.recompute == NO_RECOMPUTE:
            g = self._by_size(block)
            out.append(Term("activations: all L blocks", grouped(g, "L·"), self._bytes(g, ("L",))))
        else:
            # the block's input is kept for its recomputation, saved by the block or not
            kept = self._by_size([r for r in ledger(self.config).activations if r.block_input])
            one = self._by_size([r for r in block if not r.block_input])
            out.append(Term("activations: kept block inputs", grouped(kept, "L·"),
                            self._bytes(kept, ("L",)),
                            note="each block's input, kept for its recomputation"))
            out.append(Term("activations: one block, recomputed", grouped(one),
                            self._bytes(one),
                            note="the block being differentiated (its input is the kept one)"))
        g = self._by_size(outside)
        out.append(Term("activations: outside the blocks", grouped(g), self._bytes(g)))
        return tuple(out)

    def total_expr(self) -> Expr:
        return sum((t.bytes for t in self.terms if t.on_gpu), Expr())

    def total(self, batch: int, seq: int) -> int:
        """Bytes on the GPU for one training step at (batch, seq): exact."""
        return self.total_expr().evaluate(values(self.config, seq, batch))

    def linear(self, seq: int) -> tuple[int, int]:
        """(a, b) with total(batch, seq) = a·batch + b for every batch."""
        with_b, without_b = self.total_expr().split("B")
        assert all(f.count("B") == 1 for f in with_b.terms), "memory must be linear in B"
        v = values(self.config, seq, 1)
        return with_b.evaluate(v), without_b.evaluate(v)

    def at(self, batch: int, seq: int) -> TrainingMemory:
        v = values(self.config, seq, batch)
        v1 = values(self.config, seq, 1)
        items = []
        for t in self.terms:
            with_b, without_b = t.bytes.split("B")
            items.append(MemoryItem(t.name, t.formula, str(t.bytes), t.bytes.evaluate(v),
                                    with_b.evaluate(v1), without_b.evaluate(v1), t.on_gpu, t.note))
        a, b = self.linear(seq)
        rows = tuple(ActivationRow(r, r.elements.evaluate(v) * r.count(v),
                                   bytes_per_element(r, self.precision))
                     for r in ledger(self.config).activations)
        return TrainingMemory(self, batch, seq, tuple(items), a, b, rows,
                              parameter_count(self.config).evaluate(v),
                              matmul_weight_count(self.config).evaluate(v))


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

    @property
    def total(self) -> int:
        return sum(i.bytes for i in self.items if i.on_gpu)

    @property
    def activation_bytes(self) -> int:
        return sum(i.bytes for i in self.items if i.name.startswith("activations"))

    def scope_bytes(self, scope: str) -> int:
        """Activation bytes of either list at this workload (without recomputation)."""
        return sum(r.bytes for r in self.activation_rows if in_scope(r.record, scope))
