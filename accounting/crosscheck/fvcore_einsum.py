"""An exact, allocation-free aten::einsum handle for fvcore, and a recorder of fvcore's stock one.

Why: fvcore's stock handle (fvcore/nn/jit_handles.py, einsum_flop_jit) runs
numpy.einsum_path on dense np.zeros of every operand shape and parses the FLOP count
numpy *prints* ("%.3e", four significant digits). Its counts are rounded (GPT-2 XL at
T = 1,024: 220,524,800 FLOPs short in total) and it allocates the operands in float64
(the 25×16,384×16,384 attention scores: 50 GiB, a MemoryError).

Rule for einsum_macs (multiply-adds, fvcore's unit; FLOPs = FLOPS_PER_MAC × MACs):
  * Labels are letters; whitespace is ignored; one "..." per operand. Each label's size
    is the broadcast of its occurrences (equal, or 1 against n), ellipsis dims are
    right-aligned and broadcast like numpy. A label repeated inside one operand (a
    diagonal, "ii->i") must have equal sizes there and counts once.
  * Output: the subscripts after "->", or (implicit form) "..." followed by the labels
    that occur exactly once, in alphabetical order (torch's and numpy's rule).
  * Two operands: the product of the sizes of all distinct labels, ellipsis dims
    included: the scalar products a direct evaluation forms, summed label or not.
  * One operand: 0 (a transpose, diagonal or sum forms no products).
  * More than two: contracted pairwise. Without a recorded path, left to right,
    ((A·B)·C)·D, as torch.einsum contracts when opt_einsum is absent or disabled; with
    a path (torch records opt_einsum's as a flat list of index pairs; the pair's result
    is appended to the operand list), in that order. Each step costs the product of
    the distinct labels of its two operands; the intermediate keeps the labels that
    the output or a remaining operand still needs.
torch itself may form fewer products than this rule in one case the model never
meets: it sums out a label found in only one of the two operands (and not needed
later) before multiplying.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from accounting.units import DTYPE_BYTES, FP64, GiB

# Above this, the stock handle is not run: its np.zeros would allocate the dense float64
# operands (numpy's calloc may succeed lazily, but a MemoryError or swap is the risk).
STOCK_CAP_BYTES = GiB
FLOAT64_BYTES = DTYPE_BYTES[FP64]

Label = object  # a letter, or ("...", k): the k-th ellipsis dim counted from the right


@dataclass(frozen=True)
class Einsum:
    """A parsed equation bound to shapes: operand labels, output labels, label sizes."""

    operands: tuple[tuple[Label, ...], ...]
    output: tuple[Label, ...]
    sizes: dict  # label -> size (broadcast over all its occurrences)

    def product(self, labels) -> int:
        return math.prod(self.sizes[x] for x in set(labels))


def parse(equation: str, shapes: Sequence[Sequence[int]]) -> Einsum:
    """Bind `equation` to operand `shapes`; ValueError naming the problem otherwise."""
    eq = "".join(equation.split())
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"einsum {equation!r}: {len(terms)} operand subscripts for "
                         f"{len(shapes)} operands")
    operands: list[tuple[Label, ...]] = []
    sizes: dict = {}
    span = 0  # ellipsis dims after broadcasting
    for term, shape in zip(terms, shapes):
        shape = [int(s) for s in shape]
        letters = _letters(term, equation)
        if "..." in term:
            before, after = term.split("...")
            n_ell = len(shape) - len(before) - len(after)
            if n_ell < 0:
                raise ValueError(f"einsum {equation!r}: operand {term!r} has {len(shape)} dims")
            labels = (list(before) + [("...", k) for k in range(n_ell - 1, -1, -1)]
                      + list(after))
            span = max(span, n_ell)
        else:
            if len(letters) != len(shape):
                raise ValueError(f"einsum {equation!r}: operand {term!r} has {len(shape)} dims, "
                                 f"not {len(letters)}")
            labels = list(letters)
        own: dict = {}
        for label, size in zip(labels, shape):
            if label in own and own[label] != size:  # a diagonal needs equal sizes
                raise ValueError(f"einsum {equation!r}: repeated label {label!r} in {term!r} "
                                 f"has sizes {own[label]} and {size}")
            own[label] = size
        for label, size in own.items():
            sizes[label] = _broadcast(sizes.get(label), size, label, equation)
        operands.append(tuple(dict.fromkeys(labels)))  # a diagonal keeps one copy
    ellipsis = tuple(("...", k) for k in range(span - 1, -1, -1))
    for label in ellipsis:
        sizes.setdefault(label, 1)
    if arrow:
        letters = _letters(rhs, equation)
        if len(set(letters)) != len(letters):
            raise ValueError(f"einsum {equation!r}: output repeats a label")
        unknown = set(letters) - set(sizes)
        if unknown:
            raise ValueError(f"einsum {equation!r}: output label(s) {''.join(sorted(unknown))} "
                             f"appear in no operand")
        if "..." in rhs:
            before, after = rhs.split("...")
            output = tuple(before) + ellipsis + tuple(after)
        else:
            output = tuple(letters)
    else:
        counts: dict = {}
        for term in terms:
            for c in _letters(term, equation):
                counts[c] = counts.get(c, 0) + 1
        output = ellipsis + tuple(sorted(c for c, n in counts.items() if n == 1))
    return Einsum(tuple(operands), output, sizes)


def _letters(term: str, equation: str) -> str:
    if term.count("...") > 1:
        raise ValueError(f"einsum {equation!r}: more than one '...' in {term!r}")
    letters = term.replace("...", "")
    bad = [c for c in letters if not c.isascii() or not c.isalpha()]
    if bad:
        raise ValueError(f"einsum {equation!r}: invalid subscript {bad[0]!r}")
    return letters


def _broadcast(seen: int | None, size: int, label, equation: str) -> int:
    if seen is None or seen == size or size == 1:
        return size if seen is None else seen
    if seen == 1:
        return size
    name = "an ellipsis dim" if isinstance(label, tuple) else f"label {label!r}"
    raise ValueError(f"einsum {equation!r}: {name} has sizes {seen} and {size}, "
                     f"which do not broadcast")


def einsum_macs(equation: str, shapes: Sequence[Sequence[int]],
                path: Sequence[int] | None = None) -> int:
    """Exact multiply-adds of einsum(equation, *operands of `shapes`) by the rule above."""
    e = parse(equation, shapes)
    ops = list(e.operands)
    if len(ops) == 1:
        return 0
    if path is None:
        pairs = [(0, 1)] * (len(ops) - 1)
        insert_first = True  # left to right: the running result stays at the front
    else:
        if len(path) != 2 * (len(ops) - 1):
            raise ValueError(f"einsum {equation!r}: contraction path {list(path)} is not "
                             f"{len(ops) - 1} pairs of operand indices")
        pairs = [(path[i], path[i + 1]) for i in range(0, len(path), 2)]
        insert_first = False  # opt_einsum order: the pair's result goes to the end
    macs = 0
    for i, j in pairs:
        if i == j or not (0 <= i < len(ops) and 0 <= j < len(ops)):
            raise ValueError(f"einsum {equation!r}: bad contraction pair ({i}, {j})")
        a, b = ops[i], ops[j]
        rest = [op for k, op in enumerate(ops) if k not in (i, j)]
        macs += e.product(a + b)
        needed = set(e.output).union(*rest) if rest else set(e.output)
        result = tuple(x for x in dict.fromkeys(a + b) if x in needed)
        ops = [result] + rest if insert_first else rest + [result]
    return macs


def operand_bytes(shapes: Sequence[Sequence[int]]) -> int:
    """What the stock handle's np.zeros(shape) (float64) allocates for these operands."""
    return sum(FLOAT64_BYTES * math.prod(s) for s in shapes)


# ---- fvcore glue (the handles receive torch._C.Value objects of the traced graph) ----

def _jit_args(inputs) -> tuple[str, list[list[int]], list[int] | None]:
    equation = inputs[0].toIValue()
    shapes = []
    for v in inputs[1].node().inputs():
        if not v.isCompleteTensor():
            raise ValueError(f"einsum {equation!r}: an operand's shape is unknown in the trace")
        shapes.append(list(v.type().sizes()))
    path = inputs[2].toIValue() if len(inputs) > 2 else None
    return equation, shapes, (list(path) if path is not None else None)


def exact_einsum_handle(inputs, outputs) -> int:
    """fvcore op handle for "aten::einsum": exact multiply-adds, nothing allocated."""
    equation, shapes, path = _jit_args(inputs)
    return einsum_macs(equation, shapes, path)


@dataclass(frozen=True)
class EinsumCall:
    """One traced einsum: where it ran, exact and stock multiply-adds."""

    module: str  # innermost module (fvcore scope name; '' is the model itself)
    equation: str
    shapes: tuple[tuple[int, ...], ...]
    macs: int
    stock_macs: int | None  # fvcore's einsum_flop_jit; None when skipped
    stock_bytes: int  # dense float64 operands the stock handle allocates


_STOCK_CACHE: dict = {}


class RecordingEinsumHandle:
    """The exact handle, also recording each call and fvcore's stock figure for it.

    The stock handle is the real fvcore function, run only while its dense operands
    stay within `cap_bytes`; results are cached per (equation, shapes).
    """

    def __init__(self, cap_bytes: int = STOCK_CAP_BYTES, stock: bool = True):
        self.cap_bytes, self.stock = cap_bytes, stock
        self.calls: list[EinsumCall] = []

    def __call__(self, inputs, outputs) -> int:
        equation, shapes, path = _jit_args(inputs)
        macs = einsum_macs(equation, shapes, path)
        key = (equation, tuple(map(tuple, shapes)), tuple(path or ()))
        n_bytes = operand_bytes(shapes)
        stock_macs = None
        if self.stock and n_bytes <= self.cap_bytes:
            if key not in _STOCK_CACHE:
                from fvcore.nn.jit_handles import einsum_flop_jit
                _STOCK_CACHE[key] = int(einsum_flop_jit(inputs, outputs))
            stock_macs = _STOCK_CACHE[key]
        module = outputs[0].node().scopeName().split("/")[-1]
        self.calls.append(EinsumCall(module, equation, key[1], macs, stock_macs, n_bytes))
        return macs
