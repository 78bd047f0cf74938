"""The exact aten::einsum handle (accounting/crosscheck/fvcore_einsum.py).

Independent references, none of them the code under test:
  * brute force: a nested-loop evaluation of the equation over every index combination,
    counting the multiplications it performs (its result is checked against torch.einsum,
    so the loop really evaluates the equation);
  * numpy.einsum_path(optimize=False): its printed "Naive FLOP count" is exact for small
    shapes (4 significant digits) and, for two operands sharing a label, is 2 × products;
  * torch's FlopCounterMode on meta tensors (2 FLOPs per multiply-add of the bmm that
    torch.einsum runs), which needs no memory even at 16k tokens;
  * hand algebra, written in the test.
"""
import itertools
import math

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from accounting.crosscheck.fvcore_einsum import einsum_macs, operand_bytes, parse


def _brute_pair(a_labels, a, b_labels, b, keep, sizes):
    """Evaluate sum over the other labels of a[...]*b[...] into labels `keep` by nested
    loops; returns (result as dict, multiplications performed)."""
    labels = list(dict.fromkeys(a_labels + b_labels))
    out, mults = {}, 0
    for values in itertools.product(*(range(sizes[x]) for x in labels)):
        v = dict(zip(labels, values))
        ai = tuple(v[x] if a.shape[k] > 1 else 0 for k, x in enumerate(a_labels))  # size-1 broadcast
        bi = tuple(v[x] if b.shape[k] > 1 else 0 for k, x in enumerate(b_labels))
        key = tuple(v[x] for x in keep)
        out[key] = out.get(key, 0.0) + float(a[ai]) * float(b[bi])
        mults += 1
    arr = np.zeros([sizes[x] for x in keep])
    for key, val in out.items():
        arr[key] = val
    return arr, mults


def brute_force(equation: str, arrays):
    """Letters only, explicit output. Pairwise left to right; an intermediate keeps the
    labels that the output or a later operand needs. Diagonals: a repeated label in one
    operand is handled by taking the diagonal first (no multiplications)."""
    lhs, rhs = equation.replace(" ", "").split("->")
    terms = lhs.split(",")
    sizes = {}
    ops = []
    for term, arr in zip(terms, arrays):
        arr = np.asarray(arr, dtype=float)
        for x, n in zip(term, arr.shape):
            sizes[x] = max(sizes.get(x, 1), n)
        while len(set(term)) < len(term):  # take a diagonal: "ii" -> "i"
            x = next(c for c in term if term.count(c) > 1)
            i, j = term.index(x), term.index(x, term.index(x) + 1)
            arr = np.moveaxis(np.diagonal(arr, axis1=i, axis2=j), -1, i)
            term = term[:j] + term[j + 1:]
        ops.append((term, arr))
    if len(ops) == 1:
        return None, 0
    total = 0
    cur_labels, cur = ops[0]
    for k in range(1, len(ops)):
        nxt_labels, nxt = ops[k]
        later = set(rhs).union(*(set(t) for t, _ in ops[k + 1:]))
        keep = [x for x in dict.fromkeys(cur_labels + nxt_labels) if x in later]
        cur, mults = _brute_pair(cur_labels, cur, nxt_labels, nxt, keep, sizes)
        cur_labels = "".join(keep)
        total += mults
    # cur is over cur_labels; reorder to the output
    result = np.einsum(f"{cur_labels}->{rhs}", cur) if cur_labels else cur
    return result, total


BRUTE_CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),             # matmul
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),     # batch dim
    ("ij,kj->ik", [(3, 4), (2, 4)]),              # x Wᵀ (the model's Linear)
    ("i,j->ij", [(3,), (4,)]),                    # outer product: no summed label
    ("ij,ij->ij", [(2, 3), (2, 3)]),              # Hadamard
    ("ij,ij->", [(2, 3), (2, 3)]),                # full contraction
    ("ij,jk->k", [(2, 3), (3, 4)]),               # a label summed in one operand only
    ("ij,jk->ik", [(2, 1), (3, 4)]),              # size-1 labeled dim broadcast (j)
    ("bij,bjk->bik", [(1, 2, 3), (3, 3, 2)]),     # size-1 batch broadcast
    ("iij,jk->ik", [(3, 3, 2), (2, 4)]),          # diagonal in an operand
    ("ij,jk,kl->il", [(2, 3), (3, 2), (2, 4)]),   # three operands
    ("ij,jk,kl,lm->im", [(2, 2), (2, 3), (3, 2), (2, 2)]),
    ("ij,kl,jl->ik", [(2, 3), (2, 4), (3, 4)]),   # three operands, the order matters
    ("ab,bc->ab", [(1, 2), (2, 1)]),              # T = 1 style: size-1 everywhere
]


@pytest.mark.parametrize("equation,shapes", BRUTE_CASES)
def test_matches_brute_force_count(equation, shapes):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s) for s in shapes]
    result, mults = brute_force(equation, arrays)
    expected = torch.einsum(equation, *map(torch.tensor, arrays)).numpy()
    np.testing.assert_allclose(result, expected, rtol=1e-10, atol=1e-10)  # the loop is right
    assert einsum_macs(equation, shapes) == mults


def test_one_operand_forms_no_products():
    # A transpose, a trace and a sum multiply nothing (hand: 0 products).
    assert einsum_macs("ij->ji", [(3, 4)]) == 0
    assert einsum_macs("ii->", [(3, 3)]) == 0
    assert einsum_macs("...ij->", [(2, 3, 4)]) == 0


NUMPY_CASES = [  # two operands sharing a label: numpy's naive count is 2 × products
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (5, 6)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 6)]),  # ellipsis broadcasting
    ("...a,ba->...b", [(2, 7, 5), (9, 5)]),            # the model's Linear, einops letters
    ("...ab,...cb->...ac", [(2, 3, 7, 4), (2, 3, 7, 4)]),  # QKᵀ
    ("...ab,...bc->...ac", [(2, 3, 7, 7), (2, 3, 7, 4)]),  # scores·V
    ("ij,jk", [(3, 4), (4, 5)]),                       # implicit output
    ("ba,ac", [(3, 4), (4, 5)]),
]


@pytest.mark.parametrize("equation,shapes", NUMPY_CASES)
def test_matches_numpy_naive_count(equation, shapes):
    arrays = [np.zeros(s) for s in shapes]
    text = np.einsum_path(equation, *arrays, optimize=False)[1]
    naive = [line for line in text.splitlines() if "Naive FLOP count" in line][0]
    flops = float(naive.split(":")[1])
    assert flops < 10_000  # four significant digits: the printed count is exact
    assert einsum_macs(equation, shapes) == int(flops) // 2


def test_ellipsis_equals_spelled_out_labels():
    # Hand translation: the ellipsis dims become labels x, y (right-aligned, broadcast).
    assert (einsum_macs("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 6)])
            == einsum_macs("xyij,yjk->xyik", [(2, 1, 3, 4), (5, 4, 6)])
            == 2 * 5 * 3 * 4 * 6)
    # Ellipsis absent from an explicit output: summed, still formed as products.
    assert einsum_macs("...ij,jk->ik", [(7, 2, 3), (3, 4)]) == 7 * 2 * 3 * 4


def test_three_operands_left_to_right_rule():
    # (A·B) first: ij,jk -> ik costs i·j·k; then ik,kl -> il costs i·k·l.
    i, j, k, l = 2, 30, 3, 40
    assert einsum_macs("ij,jk,kl->il", [(i, j), (j, k), (k, l)]) == i * j * k + i * k * l
    # An opt_einsum-style path contracting (B, C) first: j·k·l, then i·j·l.
    assert einsum_macs("ij,jk,kl->il", [(i, j), (j, k), (k, l)], path=[1, 2, 0, 1]) == \
        j * k * l + i * j * l


@pytest.mark.parametrize("equation,shapes", [
    ("...a,ba->...b", [(4, 16384, 1600), (6400, 1600)]),
    ("...a,ba->...b", [(1, 16384, 1600), (50257, 1600)]),
    ("...ab,...cb->...ac", [(4, 25, 16384, 64), (4, 25, 16384, 64)]),
    ("...ab,...bc->...ac", [(4, 25, 16384, 16384), (4, 25, 16384, 64)]),
])
def test_exact_at_gpt2_xl_16k_against_flop_counter_mode(equation, shapes):
    # FlopCounterMode on meta tensors: torch's bmm count (2 per multiply-add), no memory.
    tensors = [torch.empty(s, device="meta") for s in shapes]
    with FlopCounterMode(display=False) as fcm:
        torch.einsum(equation, *tensors)
    assert 2 * einsum_macs(equation, shapes) == fcm.get_total_flops()
    # and by hand: the first operand's elements times the one label it lacks
    by_hand = {
        "...a,ba->...b": lambda: math.prod(shapes[0]) * shapes[1][0],
        "...ab,...cb->...ac": lambda: math.prod(shapes[0]) * shapes[1][-2],
        "...ab,...bc->...ac": lambda: math.prod(shapes[0]) * shapes[1][-1],
    }[equation]()
    assert einsum_macs(equation, shapes) == by_hand


def test_no_allocation_even_for_50_gib_operands():
    # What the stock handle would np.zeros: 25·16384² float64 scores = 50.0 GiB (hand).
    shapes = [(1, 25, 16384, 16384), (1, 25, 16384, 64)]
    assert operand_bytes(shapes[:1]) == 8 * 25 * 16384**2 == 50 * 2**30
    assert einsum_macs("...ab,...bc->...ac", shapes) == 25 * 16384 * 16384 * 64


@pytest.mark.parametrize("equation,shapes,message", [
    ("ij,jk->ik", [(2, 3)], "2 operand subscripts for 1 operands"),
    ("ij,jk->ik", [(2, 3), (4, 5)], "do not broadcast"),
    ("ii->i", [(2, 3)], "repeated label"),
    ("ij->iz", [(2, 3)], "appear in no operand"),
    ("ij->ii", [(2, 3)], "repeats a label"),
    ("ijk->i", [(2, 3)], "has 2 dims"),
    ("i.j->i", [(2, 3)], "invalid subscript"),
    ("......->", [(2,)], "more than one"),
])
def test_bad_equations_are_refused_clearly(equation, shapes, message):
    with pytest.raises(ValueError, match=message):
        einsum_macs(equation, shapes)


def test_refuses_a_malformed_path():
    with pytest.raises(ValueError, match="pairs of operand indices"):
        einsum_macs("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], path=[0, 1])


def test_implicit_output_is_alphabetical_single_labels():
    e = parse("ba,ac", [(3, 4), (4, 5)])
    assert e.output == ("b", "c")
