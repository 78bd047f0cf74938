"""Training memory with AdamW: parameters, gradients, optimizer state and activations.

Activations are records, like the matmuls in accounting/matmuls.py: one per tensor,
with a symbolic shape, whether the course's list counts it, and whether autograd saves it
in model.TransformerLM (and in which module). Every total below is derived from them.

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

from accounting import params
from accounting.config import ModelConfig
from accounting.errors import UsageError
from accounting.planning.expr import Expr, grouped
from accounting.symbols import sizes

COURSE, MODEL = "course", "model"
SCOPES = {
    COURSE: "the course's accounting (CS336 a1 adamwAccounting): parameters, gradients, AdamW m "
            "and v, and the activations the problem lists",
    MODEL: "what a training step of model.TransformerLM holds: the tensors autograd saves "
           "(checked on the CPU by tests/test_planning_reality.py), RoPE buffers, AdamW step "
           "counters",
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


# ---- activation records ---------------------------------------------------------------
FLOAT, BOOL, INT64 = "float", "bool", "int64"  # FLOAT: the activation dtype of the precision
_FIXED_BYTES = {BOOL: 1, INT64: 8}


@dataclass(frozen=True)
class Activation:
    name: str
    shape: tuple[str, ...]
    per_layer: bool
    course: str  # the course's list item this is; "" when the course does not count it
    saved_in: str  # module whose op saves it (relative to a block, or to the model; "loss"
    #                for F.cross_entropy); "" when autograd does not save it
    why: str  # the op(s) that save it, or why nothing does
    kind: str = FLOAT
    copies: int = 1
    block_input: bool = False  # the block's input: what full recomputation keeps

    @property
    def saved(self) -> bool:
        return bool(self.saved_in)

    def in_scope(self, scope: str) -> bool:
        return bool(self.course) if scope == COURSE else self.saved

    def bytes_per_element(self, precision: Precision) -> int:
        return _FIXED_BYTES.get(self.kind, precision.activation_bytes)

    def elements(self) -> Expr:
        """Elements of all copies in one block (per_layer) or in the whole model; a
        per-head shape (B, h, T, d_k) is written B·T·d_model (h·d_k = d_model)."""
        shape = list(self.shape)
        if "h" in shape and "d_k" in shape:
            shape.remove("h")
            shape[shape.index("d_k")] = "d_model"
        return Expr.of(self.copies, tuple(shape))


ROW = ("B", "T", "d_model")
HEADS = ("B", "h", "T", "d_k")
SCORES = ("B", "h", "T", "T")
HIDDEN = ("B", "T", "d_ff")
LOGITS = ("B", "T", "V")
NOT_SAVED_RESIDUAL = "not saved: the residual add that reads it saves nothing"


def _rmsnorm(module: str, course: str, block_input: bool, per_layer: bool,
             reader: str, reader_name: str) -> tuple[Activation, ...]:
    # model.RMSNorm: rms = sqrt(mean(x²) + eps); out = x / rms * g (float32).
    return (
        Activation(f"{module} input", ROW, per_layer, course, module,
                   "x.pow(2) and x / rms save it", block_input=block_input),
        Activation(f"{module} rms", ("B", "T"), per_layer, "", module,
                   "sqrt saves its output; x / rms saves its divisor"),
        Activation(f"{module} x / rms", ROW, per_layer, "", module,
                   "(x / rms) · gain saves it (the gain needs a gradient)"),
        Activation(f"{module} output", ROW, per_layer, "", reader,
                   f"saved as the input of {reader_name}"),
    )


ACTIVATIONS: tuple[Activation, ...] = (
    # ---- one Transformer block, in execution order --------------------------------
    *_rmsnorm("ln1", "RMSNorm inputs", True, True, "attn.q_proj",
              "the Q, K and V projections (one tensor read by all three)"),
    Activation("Q projection output", ROW, True, "Q/K/V projections", "",
               "not saved: RoPE's multiplies save cos/sin, not Q"),
    Activation("K projection output", ROW, True, "Q/K/V projections", "",
               "not saved: RoPE's multiplies save cos/sin, not K"),
    Activation("V (heads layout)", ROW, True, "Q/K/V projections", "attn",
               "scores·V saves it, as the contiguous copy einsum makes to batch the heads"),
    Activation("RoPE cos and sin at the positions", ("T", "d_k/2"), True, "", "attn",
               "RoPE's multiplies (x·cos, x·sin) save them; gathered once per rotation, "
               "for Q and for K: 4 tensors, independent of B", copies=4),
    Activation("Q after RoPE", HEADS, True, "", "attn", "the QKᵀ einsum saves it"),
    Activation("K after RoPE", HEADS, True, "", "attn", "the QKᵀ einsum saves it"),
    Activation("QKᵀ scores", SCORES, True, "QKᵀ", "",
               "not saved: dividing by the constant √d_k and where() save nothing of it"),
    Activation("causal mask", ("T", "T"), True, "", "attn",
               "torch.where saves its condition (bool, built in each layer)", kind=BOOL),
    Activation("masked scores (softmax input)", SCORES, True, "", "attn",
               "amax saves its input (and output)"),
    Activation("softmax row max", ("B", "h", "T"), True, "", "attn", "amax saves its output"),
    Activation("exp(scores − max)", SCORES, True, "", "attn",
               "exp saves its output; exp / sum saves its numerator"),
    Activation("softmax row sum", ("B", "h", "T"), True, "", "attn",
               "exp / sum saves its divisor"),
    Activation("softmax output", SCORES, True, "softmax", "attn", "scores·V saves it"),
    Activation("attention-weighted values", ROW, True, "attention-weighted values",
               "attn.output_proj", "the output projection saves it, as the merged-heads copy "
                                   "rearrange makes"),
    Activation("output projection output", ROW, True, "output projection", "", NOT_SAVED_RESIDUAL),
    *_rmsnorm("ln2", "RMSNorm inputs", False, True, "ffn.w1",
              "W1 and W3 (one tensor read by both)"),
    Activation("W1 output", HIDDEN, True, "W1", "ffn", "SiLU's a·sigmoid(a) saves it"),
    Activation("sigmoid(W1 output)", HIDDEN, True, "", "ffn",
               "sigmoid saves its output; SiLU's multiply saves it"),
    Activation("SiLU output", HIDDEN, True, "SiLU", "ffn", "the gating multiply saves it"),
    Activation("W3 output", HIDDEN, True, "W3 (SwiGLU)", "ffn", "the gating multiply saves it"),
    Activation("gated product (W2 input)", HIDDEN, True, "", "ffn.w2", "W2 saves it"),
    Activation("W2 output", ROW, True, "W2", "", NOT_SAVED_RESIDUAL),
    # ---- outside the blocks ---------------------------------------------------------
    Activation("token ids", ("B", "T"), False, "", "token_embeddings",
               "the embedding lookup (index) saves the indices", kind=INT64),
    *_rmsnorm("ln_final", "final RMSNorm", False, False, "lm_head", "the LM head"),
    Activation("logits (output embedding)", LOGITS, False, "output embedding", "",
               "not saved: log_softmax saves its output, not its input"),
    Activation("log-softmax of the logits", LOGITS, False, "cross-entropy", "loss",
               "F.cross_entropy's log_softmax saves its output; nll_loss reads it"),
    Activation("targets", ("B", "T"), False, "", "loss", "nll_loss saves them", kind=INT64),
    Activation("nll_loss total weight", (), False, "", "loss",
               "nll_loss saves a 0-dim tensor (the number of targets)"),
)


def _check(records):
    seen = set()
    for r in records:
        if r.name in seen:
            raise ValueError(f"duplicate activation record {r.name!r}")
        seen.add(r.name)
    inputs = [r for r in records if r.block_input]
    assert len(inputs) == 1 and inputs[0].per_layer and inputs[0].course and inputs[0].saved
    return records


_check(ACTIVATIONS)

# ---- buffers and optimizer state that are not parameters -------------------------------
# model.RotaryPositionalEmbedding: cos and sin tables (max_seq_len, d_k/2), float32, in
# every layer; the model is built with max_seq_len = max(T, context_length) = T_max.
ROPE_TABLES = Expr.of(2, ("T_max", "d_k/2")).times("L")
ROPE_BYTES = 4  # registered as float32 whatever the model's dtype
STEP_BYTES = 4  # torch.optim.AdamW: state["step"] = torch.tensor(0.0), float32, on the CPU
#                 unless fused=True or capturable=True

MATMUL_WEIGHTS = (params.ATTN_PROJ, params.FFN, params.LM_HEAD)


def parameter_count() -> Expr:
    """N: every parameter tensor of params.PARAMS (L copies of a per-layer one)."""
    total = Expr()
    for p in params.PARAMS:
        e = Expr.of(1, p.shape)
        total = total + (e.times("L") if p.per_layer else e)
    return total


def matmul_weight_count() -> Expr:
    """N_matmul: the weights a matmul reads (not the embedding table, not the norm gains)."""
    total = Expr()
    for p in params.PARAMS:
        if p.component in MATMUL_WEIGHTS:
            e = Expr.of(1, p.shape)
            total = total + (e.times("L") if p.per_layer else e)
    return total


def tensor_count() -> Expr:
    """Parameter tensors (AdamW keeps one step counter per tensor)."""
    return sum((Expr.of(1, ("L",) if p.per_layer else ()) for p in params.PARAMS), Expr())


def values(config: ModelConfig, seq: int, batch: int) -> dict[str, int]:
    """Symbol values: those of symbols.sizes plus T_max (the RoPE table length)."""
    v = sizes(config, seq, batch)
    v["T_max"] = max(seq, config.context_length)
    return v


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
        return tuple(r for r in ACTIVATIONS if r.in_scope(self.scope))

    def _by_size(self, records) -> list[tuple[int, Expr]]:
        groups: dict[int, Expr] = {}
        for r in records:
            size = r.bytes_per_element(self.precision)
            groups[size] = groups.get(size, Expr()) + r.elements()
        return sorted(groups.items(), key=lambda kv: -kv[0])

    def _bytes(self, groups, times: tuple[str, ...] = ()) -> Expr:
        return sum((e.scale(size).times(*times) for size, e in groups), Expr())

    @cached_property
    def terms(self) -> tuple[Term, ...]:
        p = self.precision
        n = "N"
        out = [Term("parameters (fp32 master copy)" if p.working_copy_bytes else "parameters (fp32)",
                    f"{p.master_bytes}·{n}", parameter_count().scale(p.master_bytes))]
        if p.working_copy_bytes:
            out.append(Term("bf16 working copy of the matmul weights",
                            f"{p.working_copy_bytes}·N_matmul",
                            matmul_weight_count().scale(p.working_copy_bytes),
                            note="autocast's cast cache, alive from the forward to the backward "
                                 "pass"))
        out += [Term("gradients (fp32)", f"{p.grad_bytes}·{n}", parameter_count().scale(p.grad_bytes)),
                Term("AdamW first moment m (fp32)", f"{p.moment_bytes}·{n}",
                     parameter_count().scale(p.moment_bytes)),
                Term("AdamW second moment v (fp32)", f"{p.moment_bytes}·{n}",
                     parameter_count().scale(p.moment_bytes))]
        if self.scope == MODEL:
            out.append(Term("AdamW step counters (fp32 scalars)", f"{STEP_BYTES}·({tensor_count()})",
                            tensor_count().scale(STEP_BYTES), on_gpu=False,
                            note="one per parameter tensor; torch keeps them on the CPU unless "
                                 "fused=True or capturable=True, so not in the GPU total"))
            out.append(Term("RoPE cos/sin tables (fp32 buffers)", str(ROPE_TABLES.scale(ROPE_BYTES)),
                            ROPE_TABLES.scale(ROPE_BYTES),
                            note="T_max = max(T, context_length): the model's table length"))
        acts = self.activations()
        block = [r for r in acts if r.per_layer]
        outside = [r for r in acts if not r.per_layer]
        if self.recompute == NO_RECOMPUTE:
            g = self._by_size(block)
            out.append(Term("activations: all L blocks", grouped(g, "L·"), self._bytes(g, ("L",))))
        else:
            kept = self._by_size([r for r in block if r.block_input])
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
        rows = tuple(ActivationRow(r, r.elements().evaluate(v) * (v["L"] if r.per_layer else 1),
                                   r.bytes_per_element(self.precision)) for r in ACTIVATIONS)
        return TrainingMemory(self, batch, seq, tuple(items), a, b, rows,
                              parameter_count().evaluate(v), matmul_weight_count().evaluate(v))


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
        return sum(r.bytes for r in self.activation_rows if r.record.in_scope(scope))
