"""Count every aten operator the model runs, by pass and module (a TorchDispatchMode).

Non-matmul FLOPs follow accounting/ledger/records.py's CONVENTION: 1 per output element
for elementwise arithmetic (exp, sigmoid, sqrt included), 1 per input element for a
reduction (top-k included: a comparison per input element), 1 per element for torch.where
and masked_fill, 1 per added element for index_add, 0 for copies, casts, views, indexing,
factories and ops without a floating-point result. A floating-point op outside these
lists is recorded as "unknown", never dropped. Matmul operators are counted with
torch.utils.flop_counter's own formulas, the ones FlopCounterMode uses.

Where an op ran:
  * forward: the innermost module whose forward is running (global module hooks);
  * backward: the module whose forward created the autograd node being executed. The
    module's forward hook tags every autograd node between its outputs and its inputs,
    children first. (FlopCounterMode's ModuleTracker instead keeps a module "entered"
    until the gradient of its input is complete, so siblings that share an input,
    q/k/v_proj or ffn.w1/w3, are each credited with the others' backward FLOPs.)
torch.einsum runs a contraction over a size-1 label (T = 1: one key; d_ff = 1) as an
elementwise aten.mul instead of a bmm. Ops inside an einsum call, or inside autograd
nodes it created, are marked: such a mul is "einsum product" (matmul work, counted
FLOPS_PER_MAC per product like every matmul), a sum there is "einsum sum" (the
contraction's adds, already in the 2 per product).
"""
from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode, _FlopCounterMode, flop_registry
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

from accounting.ledger.records import BACKWARD, FORWARD
from accounting.units import FLOPS_PER_MAC

OUTSIDE = "(outside the model)"  # e.g. the loss, or autograd nodes no module created

MATMUL = "matmul"
EINSUM_PRODUCT = "einsum product"
EINSUM_SUM = "einsum sum"
ELEMENTWISE = "elementwise"
REDUCTION = "reduction"
SELECT = "select"
ZERO = "copy/cast/view/index"
INT_BOOL = "integer/bool"
UNKNOWN = "unknown"
COUNTED = (ELEMENTWISE, REDUCTION, SELECT)  # the kinds with non-matmul FLOPs

# 1 FLOP per output element (in-place variants "aten.mul_" are normalized to "aten.mul").
ELEMENTWISE_OPS = frozenset(f"aten.{n}" for n in (
    "add", "sub", "rsub", "mul", "div", "pow", "neg", "reciprocal", "abs", "exp", "exp2",
    "expm1", "log", "log2", "log1p", "sqrt", "rsqrt", "sigmoid", "tanh", "erf", "silu", "gelu",
    "sin", "cos", "maximum", "minimum", "square",
    "clamp",  # a min and/or max against scalars (gpt-oss's clamped SwiGLU), one per element
    # the gated delta rule (model/delta.py): softplus, one per element like sigmoid; cumsum,
    # a running sum, one add per element
    "softplus", "cumsum",
    "relu",  # max(x, 0): DeepSeek-V3.2's indexer scores, one per element
    # dropout in training (builder/dropout.py): CUDA's fused x·mask/(1 − p), and its
    # backward grad·mask/(1 − p), one kernel each (the output counted, not the bool mask)
    "native_dropout", "native_dropout_backward"))
# 1 FLOP per input element.
REDUCTION_OPS = frozenset(f"aten.{n}" for n in ("sum", "mean", "amax", "amin", "max", "min",
                                                 "topk"))
SELECT_OPS = frozenset({"aten.where", "aten.masked_fill"})
# 1 FLOP per source element: the values it adds in (MoE: expert outputs back to their tokens).
ADD_INTO_OPS = frozenset({"aten.index_add"})
ZERO_OPS = frozenset(f"aten.{n}" for n in (
    "view", "_unsafe_view", "reshape", "permute", "transpose", "t", "expand", "unsqueeze",
    "squeeze", "select", "slice", "split", "split_with_sizes", "unbind", "alias", "as_strided",
    "detach", "clone", "contiguous", "copy", "_to_copy", "to", "index", "index_select",
    "embedding", "stack", "cat", "empty", "empty_like", "empty_strided", "zeros", "zeros_like",
    "ones", "ones_like", "full", "full_like", "fill", "scalar_tensor", "arange", "lift_fresh",
    "lift_fresh_copy", "new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full",
    "_local_scalar_dense", "randn", "rand", "randint", "normal", "uniform", "gather",
    "bernoulli",  # the CPU dropout's noise (at::dropout's composite): random draws
    "index_copy", "constant_pad_nd", "scatter", "index_fill",
    "unfold"))  # a view: the recurrent layers' conv windows (model/recurrent.py)
# Not here: index_put with accumulate (the embedding's backward scatter-add) adds values;
# it shows up as "unknown", which only matters in the forward pass (none runs there).


def op_name(func) -> str:
    """'aten.mul' for aten.mul.Tensor and for the in-place aten.mul_.Tensor."""
    name = str(func.overloadpacket)
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


@dataclass(frozen=True)
class OpCount:
    phase: str
    module: str  # '' is the model itself; OUTSIDE for ops no module ran
    op: str
    kind: str
    calls: int
    elements: int  # elements the convention counts (output, or input for a reduction)
    flops: int


def _tensors(obj) -> list[torch.Tensor]:
    return [t for t in tree_flatten(obj)[0] if isinstance(t, torch.Tensor)]


def _grad_fns(obj) -> dict:
    return {id(t.grad_fn): t.grad_fn for t in _tensors(obj) if t.grad_fn is not None}


def _tag(outputs, frontier: dict, table: dict, value) -> None:
    """table[id(node)] = (node, value) for every autograd node between `outputs` and the
    `frontier` (the inputs' nodes), unless already tagged (children tag first)."""
    todo = list(_grad_fns(outputs).values())
    seen: set[int] = set()
    while todo:
        node = todo.pop()
        key = id(node)
        if node is None or key in seen or key in frontier:
            continue
        seen.add(key)
        table.setdefault(key, (node, value))  # holding the node keeps its id unique
        todo.extend(n for n, _ in node.next_functions)


class _Scope:
    """Which module is running: a stack in forward, autograd-node tags for backward."""

    def __init__(self, root: torch.nn.Module):
        self.names = {id(m): n for n, m in root.named_modules()}
        self.stack: list[str] = []
        self.frontiers: list[dict] = []
        self.node_module: dict[int, tuple] = {}
        self.einsum_nodes: dict[int, tuple] = {}

    def pre(self, module, args) -> None:
        name = self.names.get(id(module))
        if name is not None:
            self.stack.append(name)
            self.frontiers.append(_grad_fns(args) if torch.is_grad_enabled() else {})

    def post(self, module, args, output) -> None:
        name = self.names.get(id(module))
        if name is not None:
            self.stack.pop()
            frontier = self.frontiers.pop()
            if torch.is_grad_enabled():
                _tag(output, frontier, self.node_module, name)

    def forward_module(self) -> str:
        return self.stack[-1] if self.stack else OUTSIDE

    def backward_module(self, node) -> tuple[str, bool]:
        if node is None:
            return OUTSIDE, False
        entry = self.node_module.get(id(node))
        return (entry[1] if entry else OUTSIDE), id(node) in self.einsum_nodes


class _EinsumMarker(TorchFunctionMode):
    """Marks the ops torch.einsum runs (and the autograd nodes it creates)."""

    def __init__(self, counter: "OpCounter"):
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not torch.functional.einsum:
            return func(*args, **kwargs)
        frontier = _grad_fns(args) if torch.is_grad_enabled() else {}
        self.counter.einsum_depth += 1
        try:
            out = func(*args, **kwargs)
        finally:
            self.counter.einsum_depth -= 1
        if torch.is_grad_enabled():
            _tag(out, frontier, self.counter.scope.einsum_nodes, True)
        return out


class _Dispatch(TorchDispatchMode):
    def __init__(self, counter: "OpCounter"):
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.counter.record(func, args, kwargs, out)
        return out


class _Shared(_FlopCounterMode):
    """FlopCounterMode's own dispatch mode, whose one hop per op also feeds the op counter.

    FlopCounterMode counts as it always does (its flop_registry, its ModuleTracker); the op
    counter is handed each op FlopCounterMode was handed, with its output, after it ran,
    which is what it saw as a mode of its own stacked above FlopCounterMode. Ops that
    FlopCounterMode runs inside its own handling (func.decompose re-enters the mode) are
    FlopCounterMode's business only, as they were with two modes: depth > 0."""

    def __init__(self, flops: FlopCounterMode, counter: "OpCounter"):
        super().__init__(flops)
        self.op_counter, self.depth = counter, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.depth += 1
        self.counter.last_flops = None
        try:
            out = super().__torch_dispatch__(func, types, args, kwargs)
        finally:
            self.depth -= 1
        if self.depth == 0 and out is not NotImplemented and \
                not isinstance(func, torch._ops.HigherOrderOperator):
            self.op_counter.record(func, args, kwargs, out, self.counter.last_flops)
        return out


class SharedFlopCounterMode(FlopCounterMode):
    """torch's FlopCounterMode entered with _Shared as its mode (FlopCounterMode.__enter__,
    torch 2.13, with the one class swapped)."""

    def __init__(self, counter: "OpCounter"):
        super().__init__(display=False)
        self.op_counter = counter
        self.last_flops = None
        # Each formula FlopCounterMode calls (its own registry copy, torch's formulas) also
        # leaves its value here: the op counter takes a matmul's FLOPs from the very call
        # FlopCounterMode made, instead of calling the same formula a second time.
        self.flop_registry = {k: self._remembering(f) for k, f in self.flop_registry.items()}

    def _remembering(self, formula):
        def remembered(*args, **kwargs):
            self.last_flops = formula(*args, **kwargs)
            return self.last_flops
        return remembered

    def __enter__(self):
        self.flop_counts.clear()
        self.mod_tracker.__enter__()
        self.mode = _Shared(self, self.op_counter)
        self.mode.__enter__()
        return self


@contextmanager
def counting(root: torch.nn.Module):
    """FlopCounterMode and the op counter over `root`, on one dispatch hop per op:
    `with counting(model) as (flops, counter): ...`. Equal to entering
    FlopCounterMode(display=False) and then OpCounter(root) (tests/test_dispatch_count.py
    checks it), one Python dispatch call per op cheaper."""
    counter = OpCounter(root, dispatch=False)
    with _no_dynamo_hop(_Shared, _FlopCounterMode), SharedFlopCounterMode(counter) as flops, \
            counter:
        yield flops, counter


_UNSET = object()


@contextmanager
def _no_dynamo_hop(*modes: type):
    """The modes' __torch_dispatch__ called directly while counting, not through
    torch._dynamo.disable. torch 2.13 wraps every TorchDispatchMode subclass's
    __torch_dispatch__ in torch._disable_dynamo (utils/_python_dispatch.py,
    __init_subclass__), which on each call looks up the function's cached
    `__dynamo_disable` and runs it through dynamo's eval-frame wrapper: two wrapper frames
    per op here (_Shared calls FlopCounterMode's), about 0.4 s of CPU for GPT-2 XL's 8,612
    forward ops. Nothing is compiled while counting, so disabling dynamo is a no-op; the
    cached attribute is pointed at the function itself for the duration, and put back."""
    saved = []
    for mode in modes:
        raw = getattr(mode.__dict__.get("__torch_dispatch__"), "__wrapped__", None)
        if raw is not None:
            saved.append((raw, getattr(raw, "__dynamo_disable", _UNSET)))
            raw.__dynamo_disable = raw
    try:
        yield
    finally:
        for raw, before in saved:
            if before is _UNSET:
                del raw.__dynamo_disable
            else:
                raw.__dynamo_disable = before


class OpCounter:
    """Context manager: every aten op run inside, by (pass, module, op, kind).

    dispatch=False: it enters no dispatch mode of its own; something else (counting())
    hands it each op through record()."""

    def __init__(self, root: torch.nn.Module, dispatch: bool = True):
        self.scope = _Scope(root)
        self.phases = {FORWARD, BACKWARD}  # the passes recorded (measure.py narrows it)
        self.einsum_depth = 0
        self._counts: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0])
        self._dispatch = _Dispatch(self) if dispatch else None
        self._marker = _EinsumMarker(self)
        self._hooks: list = []

    def __enter__(self) -> "OpCounter":
        self._hooks = [register_module_forward_pre_hook(self.scope.pre),
                       register_module_forward_hook(self.scope.post)]
        self._marker.__enter__()
        if self._dispatch is not None:
            self._dispatch.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._dispatch is not None:
            self._dispatch.__exit__(*exc)
        self._marker.__exit__(*exc)
        for h in self._hooks:
            h.remove()
        self.scope.node_module.clear()
        self.scope.einsum_nodes.clear()

    def record(self, func, args, kwargs, out, matmul_flops=None) -> None:
        """matmul_flops: the op's FLOPs by torch's formula, when FlopCounterMode has just
        computed them (counting()); else classify() calls the formula."""
        if torch._C._current_graph_task_id() != -1:
            phase = BACKWARD
            module, in_einsum = self.scope.backward_module(torch._C._current_autograd_node())
        else:
            phase, module, in_einsum = FORWARD, self.scope.forward_module(), self.einsum_depth > 0
        if phase not in self.phases:
            return
        name = op_name(func)
        if matmul_flops is not None and func.overloadpacket in flop_registry:
            kind, elements, flops = MATMUL, 0, int(matmul_flops)
        else:
            kind, elements, flops = classify(func, name, args, kwargs, out, in_einsum)
        c = self._counts[(phase, module, name, kind)]
        c[0] += 1
        c[1] += elements
        c[2] += flops

    def counts(self) -> tuple[OpCount, ...]:
        return tuple(OpCount(*key, *value) for key, value in self._counts.items())


def classify(func, name: str, args, kwargs, out, in_einsum: bool) -> tuple[str, int, int]:
    """(kind, elements, FLOPs) of one op call under the convention."""
    packet = func.overloadpacket
    if packet in flop_registry:
        return MATMUL, 0, int(flop_registry[packet](*args, **kwargs, out_val=out))
    outs = _tensors(out)
    if not any(t.is_floating_point() for t in outs):
        return INT_BOOL, 0, 0
    n_out = outs[0].numel()
    if in_einsum:
        if name == "aten.mul":
            return EINSUM_PRODUCT, n_out, FLOPS_PER_MAC * n_out
        if name == "aten.sum":
            return EINSUM_SUM, 0, 0
    if name in ZERO_OPS:
        return ZERO, 0, 0
    if name in SELECT_OPS:
        return SELECT, n_out, n_out
    if name in ADD_INTO_OPS:  # index_add(self, dim, index, source)
        n_src = _tensors(args)[2].numel()
        return ELEMENTWISE, n_src, n_src
    binary = func._overloadname in ("other", "out")  # aten.max.other is elementwise
    if name in ELEMENTWISE_OPS or (name in REDUCTION_OPS and binary):
        return ELEMENTWISE, n_out, n_out
    if name in REDUCTION_OPS:
        n_in = _tensors(args)[0].numel()
        return REDUCTION, n_in, n_in
    return UNKNOWN, n_out, 0
