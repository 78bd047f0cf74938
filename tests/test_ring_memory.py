"""The ring attention backward's buffers (context parallelism), measured on torch's own
_templated_ring_attention_backward run on a gloo group (accounting/distcheck/ring.py: a
dispatch-mode tracker of the storages its ops create and keep, at their peak), against
the planner's rule (accounting/planning/parallel/ring_attention.py).

Expected values: the measurement. The rule counts the gathered K and V of the whole
sequence (an all-gather of cp shards, the part that grows with cp), the fp32 gradient
accumulators and the fp32 dK/dV ring's two buffers; what it leaves out is the SDPA
backward kernel's own outputs (as one GPU's attention backward, not modelled there
either), which do not grow with cp.
"""
import pytest

from accounting.planning.parallel.layout import Layout
from accounting.planning.parallel.ring_attention import backward_buffers

HEADS, D_K, LOCAL = 4, 16, 64  # heads, head dim, tokens per rank (T/cp)


@pytest.fixture(scope="module")
def measured():
    ring = pytest.importorskip("accounting.distcheck.ring")
    return {cp: max(r["backward_peak_bytes"] for r in ring.ring_case(
        cp, heads=HEADS, seq=LOCAL * cp, d_k=D_K, dtype="bfloat16")) for cp in (2, 4)}


def rule(cp: int) -> int:
    return backward_buffers(Layout(cp, cp=cp, global_batch=1), LOCAL * cp, HEADS, HEADS,
                            D_K, 2).at(1)


def test_the_part_that_grows_with_cp_is_the_gathered_kv(measured):
    # from cp 2 to 4 the worst rank's peak grows by the all-gathered K and V: 2 more
    # shards of cat(k, v), 2·(2·T/cp·h·d_k)·2 bytes, and the rule by the same
    assert measured[4] - measured[2] == rule(4) - rule(2) == 2 * 2 * LOCAL * HEADS * D_K * 2


def test_the_rule_is_a_lower_bound_short_by_the_kernels_outputs(measured):
    # the rest is the SDPA backward kernel's dq, dk, dv (bf16) of the current step and the
    # one before, and the slices it copies: at most 5·(Q + 2·K)·2 bytes, whatever cp
    q = k = LOCAL * HEADS * D_K
    for cp in (2, 4):
        assert 0 < measured[cp] - rule(cp) <= 5 * (q + 2 * k) * 2, (cp, measured[cp], rule(cp))
    assert measured[4] - rule(4) == measured[2] - rule(2)


def test_the_plan_holds_the_ring_in_a_blocks_backward():
    # Hand algebra, Llama 3.1 8B under torchtitan (repeat_kv: 32 heads into SDPA, d_k 128)
    # at T 8,192 on cp 2: per sequence Q = K = 4,096·32·128 = 16,777,216 elements;
    # 2·cp·K·2 + 4·(Q + 2·K) + 16·K = 134,217,728 + 201,326,592 + 268,435,456 bytes
    from accounting import get_preset
    from accounting.planning.parallel import plan as P
    from accounting.planning.parallel.stack_memory import StackRun
    from accounting.planning.parallel.stacks import TORCHTITAN, get_stack
    from accounting.planning.precisions import get_precision
    lo = Layout(4, cp=2, dp=2, zero=3, global_batch=4, micro_batch=2, recompute="full")
    plan = P.parallel_plan(get_preset("meta-llama/Llama-3.1-8B"), lo, 8192,
                           precision=get_precision("bf16"), stack=StackRun(get_stack(TORCHTITAN)))
    m = next(m for m in plan.stages[0].moments if m.name.startswith("a block's backward"))
    assert m.extra.a == 134_217_728 + 201_326_592 + 268_435_456
    assert "ring attention" in m.what
