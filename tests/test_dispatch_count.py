"""The op counter (accounting/crosscheck/dispatch.py) on small hand-made modules.

Expected values are hand counts from the convention in accounting/elementwise.py
(1 per output element for arithmetic, 1 per input element for a reduction, 1 per
element for where, 0 for copies/casts/views/indexing and integer/bool results) and the
2mnp rule for matmuls, written out in each test.
"""
import pytest
import torch
from torch import nn

from accounting.crosscheck.dispatch import (BACKWARD, EINSUM_PRODUCT, ELEMENTWISE, FORWARD,
                                            INT_BOOL, MATMUL, OUTSIDE, REDUCTION, SELECT,
                                            UNKNOWN, ZERO, OpCounter)


def counts(counter, phase=FORWARD):
    out = {}
    for r in counter.counts():
        if r.phase == phase:
            key = (r.module, r.op, r.kind)
            out[key] = out.get(key, 0) + r.flops
    return out


class Softmaxish(nn.Module):
    def forward(self, x):  # x: (2, 3, 4) float
        m = x.amax(dim=-1, keepdim=True)      # reduction over 24 inputs
        e = torch.exp(x - m)                  # sub: 24 out, exp: 24 out
        mask = torch.ones(4, 4, dtype=torch.bool).tril()[:3]  # bool: 0
        e = torch.where(mask, e, 0.0)         # select: 24
        y = e / e.sum(-1, keepdim=True)       # sum: 24 inputs, div: 24 out
        return y.to(torch.float64).view(-1)   # cast and view: 0


def test_convention_on_a_softmax():
    mod = Softmaxish()
    with OpCounter(mod) as c:
        mod(torch.randn(2, 3, 4))
    got = counts(c)
    assert got[("", "aten.amax", REDUCTION)] == 24
    assert got[("", "aten.sub", ELEMENTWISE)] == 24
    assert got[("", "aten.exp", ELEMENTWISE)] == 24
    assert got[("", "aten.where", SELECT)] == 24
    assert got[("", "aten.sum", REDUCTION)] == 24
    assert got[("", "aten.div", ELEMENTWISE)] == 24
    assert got[("", "aten._to_copy", ZERO)] == 0
    assert got[("", "aten.tril", INT_BOOL)] == 0
    flops = sum(v for (_, _, kind), v in got.items() if kind not in (MATMUL,))
    assert flops == 6 * 24  # hand: six counted ops of 24 elements each


def test_unknown_floating_op_is_reported_not_dropped():
    class Lgamma(nn.Module):  # an op no model here runs, so outside the convention's lists
        def forward(self, x):
            return torch.lgamma(x)
    mod, x = Lgamma(), torch.randn(5)
    with OpCounter(mod) as c:
        mod(x)
    unknown = [r for r in c.counts() if r.kind == UNKNOWN]
    assert [(r.op, r.elements, r.flops) for r in unknown] == [("aten.lgamma", 5, 0)]


class TwoHeads(nn.Module):
    """Two Linear siblings reading the same input, like q_proj and k_proj."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 3, bias=False)
        self.b = nn.Linear(4, 5, bias=False)

    def forward(self, x):
        return self.a(x).sum() + self.b(x).sum()


def test_modules_and_backward_attribution_by_autograd_node():
    mod = TwoHeads()
    x = torch.randn(2, 4, requires_grad=True)
    with OpCounter(mod) as c:
        mod(x).backward()
    fwd, bwd = counts(c, FORWARD), counts(c, BACKWARD)
    mm = lambda d: {k[0]: v for k, v in d.items() if k[2] == MATMUL}
    # forward: x (2×4) @ Wᵀ (4×out): 2·2·4·out FLOPs (2mnp)
    assert mm(fwd) == {"a": 2 * 2 * 4 * 3, "b": 2 * 2 * 4 * 5}
    # backward: dX and dW, each the forward's size, in the module that ran the forward,
    # though both share x (FlopCounterMode's ModuleTracker would credit one with both).
    assert mm(bwd) == {"a": 2 * 2 * 2 * 4 * 3, "b": 2 * 2 * 2 * 4 * 5}


def test_einsum_over_a_size_one_label_counts_as_products():
    # weights (1 query × 1 key) · V (1 key × 4): torch.einsum runs this as aten.mul, not
    # a bmm; products formed = 2·1·1·4 = 8 (hand), i.e. 16 FLOPs at 2 per product.
    class OneKey(nn.Module):
        def forward(self, w, v):
            return torch.einsum("...ab,...bc->...ac", w, v)
    mod = OneKey()
    w = torch.randn(2, 1, 1, requires_grad=True)
    v = torch.randn(2, 1, 4, requires_grad=True)
    with OpCounter(mod) as c:
        mod(w, v).sum().backward()
    fwd, bwd = counts(c, FORWARD), counts(c, BACKWARD)
    assert fwd[("", "aten.mul", EINSUM_PRODUCT)] == 16
    assert not any(k[2] in (ELEMENTWISE, MATMUL) for k in fwd)  # neither elementwise nor bmm
    # backward: d(w) and d(v) each form 8 products again (the 2mnp rule with n = 1)
    assert bwd[("", "aten.mul", EINSUM_PRODUCT)] == 2 * 16


def test_ops_outside_any_module():
    mod = nn.Identity()
    with OpCounter(mod) as c:
        torch.randn(3) + 1
    assert counts(c)[(OUTSIDE, "aten.add", ELEMENTWISE)] == 3


def test_phases_can_be_narrowed():
    mod = TwoHeads()
    x = torch.randn(2, 4)
    with OpCounter(mod) as c:
        out = mod(x)
        c.phases = {BACKWARD}
        out.backward()
    # backward() seeds the gradient (aten.ones_like) outside any graph task: not recorded
    assert not any(r.phase == FORWARD and r.module == OUTSIDE for r in c.counts())
    assert any(r.phase == BACKWARD and r.kind == MATMUL for r in c.counts())


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
def test_integer_and_bool_ops_are_zero(dtype):
    mod = nn.Identity()
    with OpCounter(mod) as c:
        t = torch.ones(4, dtype=dtype)
        t & t if dtype == torch.bool else t * 3
    assert all(r.flops == 0 and r.kind in (INT_BOOL,) for r in c.counts())


def test_counting_calls_the_modes_directly_and_puts_torchs_wrappers_back():
    """counting() bypasses torch._disable_dynamo's per-op wrapper only while it counts
    (dispatch._no_dynamo_hop): inside, the cached `__dynamo_disable` of each mode's
    __torch_dispatch__ is the function itself; after, torch's lazy wrapper state is as it
    was (absent, or what it cached). The counts are FlopCounterMode's own: 2·m·n·p for a
    (3×4)@(4×5) matmul = 120, counted by hand."""
    from torch.utils.flop_counter import _FlopCounterMode

    from accounting.crosscheck.dispatch import _Shared, counting
    raws = [m.__dict__["__torch_dispatch__"].__wrapped__ for m in (_Shared, _FlopCounterMode)]
    before = [getattr(r, "__dynamo_disable", None) for r in raws]
    mod = nn.Linear(4, 5, bias=False)
    with counting(mod) as (flops, counter):
        assert all(getattr(r, "__dynamo_disable") is r for r in raws)
        mod(torch.randn(3, 4))
    assert [getattr(r, "__dynamo_disable", None) for r in raws] == before
    assert flops.get_total_flops() == 2 * 3 * 4 * 5
    assert counts(counter)[("", "aten.mm", MATMUL)] == 120
