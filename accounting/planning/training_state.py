"""What a training step holds per parameter tensor: the parameter itself (in its storage
dtype), its gradient and the optimizer's state when it is trained, an fp32 master copy when
the precision keeps one. Built tensor by tensor from the ledger's parameters, so that frozen
tensors (no gradient, no state) and adapters (trained, beside frozen base weights) fit in.

trainable: a predicate on the ledger's R.Param (None: every parameter is trained).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from accounting.ledger import records as R
from accounting.ledger.ledger import ledger
from accounting.ledger.symbols import Expr
from accounting.planning.optimizers import HIDDEN_MATRIX, Optimizer, State
from accounting.planning.precisions import Precision
from accounting.architecture.config import ModelConfig
from accounting.units import DTYPE_BYTES, FP32

Trainable = Callable[[R.Param], bool] | None


def role(p: R.Param, sizes: tuple[int, ...]) -> str:
    """HIDDEN_MATRIX for a 2-D weight that is no embedding table and not the LM head."""
    if len(sizes) == 2 and not p.lookup and p.component not in (R.LM_HEAD, R.POSITION_EMBEDDING):
        return HIDDEN_MATRIX
    return ""


@dataclass(frozen=True)
class Tensor:
    param: R.Param
    sizes: tuple[int, ...]
    copies: int  # blocks holding one (1 outside the blocks)
    trained: bool
    role: str

    @property
    def numel(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n


def unfrozen(p: R.Param) -> bool:
    """The trainable predicate of a ledger with LoRA adapters: requires_grad (the adapters)."""
    return not p.frozen


def tensors(config: ModelConfig, trainable: Trainable = None, lg=None) -> tuple[Tensor, ...]:
    """The parameter tensors of `lg` (default: config's ledger), each trained or not."""
    lg = lg or ledger(config)
    v = lg.values(config.context_length, 1)
    out = []
    for p in lg.params:
        sizes = p.sizes(v)
        trained = not p.frozen and (trainable is None or bool(trainable(p)))
        out.append(Tensor(p, sizes, p.count(v), trained,
                          role(p, sizes)))
    return tuple(out)


@dataclass(frozen=True)
class StateItem:
    """One memory item of optimizer state: bytes, and how many elements of which dtype."""
    name: str
    bytes: int
    numel: int
    dtype: str


def optimizer_items(opt: Optimizer, precision: Precision, ts: tuple[Tensor, ...]) -> list[StateItem]:
    """The optimizer's state, summed per item over the trained tensors (in registry order)."""
    items: dict[str, list[int]] = {}
    dtypes: dict[str, str] = {}

    def add(s: State, copies: int) -> None:
        acc = items.setdefault(s.item, [0, 0])
        acc[0] += s.bytes * copies
        acc[1] += s.numel * copies
        dtypes[s.item] = s.dtype
    for t in ts:
        if t.trained:
            for s in opt.state(t.sizes, precision.state_dtype, t.role):
                add(s, t.copies)
    if any(t.trained for t in ts):
        for s in opt.shared([t.sizes for t in ts if t.trained]):
            add(s, 1)
    return [StateItem(k, b, n, dtypes[k]) for k, (b, n) in items.items()]


def step_counters(opt: Optimizer, ts: tuple[Tensor, ...]) -> int:
    """How many 0-dim float32 step tensors the optimizer keeps (Muon's matrices keep none)."""
    if opt.step_counter is None:
        return 0
    return sum(t.copies for t in ts if t.trained and t.role != opt.counterless_role)


def update_flops(opt: Optimizer, ts: tuple[Tensor, ...]) -> int:
    return sum(t.copies * opt.update_flops(t.sizes, t.role) for t in ts if t.trained)


def counts(ts: tuple[Tensor, ...]) -> tuple[int, int]:
    """(all parameters, trained parameters)."""
    return (sum(t.copies * t.numel for t in ts),
            sum(t.copies * t.numel for t in ts if t.trained))


def as_expr(numel: int, bytes_per: int, n_all: int, n_expr: Expr, n_name: str,
            whole: int | None = None) -> tuple[Expr, str]:
    """bytes as k·N when numel is a multiple of N (the formula the tables print), else the
    integer itself."""
    total = numel * bytes_per if whole is None else whole
    if n_all and numel % n_all == 0 and whole is None:
        k = numel // n_all * bytes_per
        return n_expr.scale(k), f"{k}·{n_name}"
    return Expr.of(total), f"{total:,}"


STEP_BYTES = DTYPE_BYTES[FP32]  # a 0-dim float32 tensor (torch.optim's state['step'])
