"""Mixture-of-experts layers under torch.autocast("cpu"): a measured CPU step for MoE bf16 plans.

model/moe.py added its weighted expert outputs into a float32 buffer with index_add; under
CPU autocast those are bfloat16 (the router's softmax runs in bf16 on the CPU, in float32 on
CUDA) and index_add refused them (issue 32). They are cast to the tokens' dtype now — a no-op
under CUDA autocast and in fp32 — and the ledger records the cast. Checked here on real CPU
steps:
  * every tensor autograd saves and holds at the backward pass, module by module, dtype and
    bytes, equals the ledger's records for autocast "cpu" (as tests/test_memory_reality.py
    does for the dense layers, with tests/test_architectures.py's collector, which leaves
    out what a router's off-gradient ops saved and freed);
  * the step's two moments (tests/test_peak.py's live-storage tracker) equal the planner's
    CPU-measured moments (MemoryModel(..., device="cpu")) once the saves that CUDA's
    autocast policies change are swapped for the CPU's: the ledger's "cuda" records for its
    "cpu" ones (the first bullet checks the "cpu" ones); the optimizer's moment exactly.
"""
from collections import Counter, defaultdict

import pytest

torch = pytest.importorskip("torch")

from accounting.ledger.ledger import ledger  # noqa: E402
from accounting.planning import PRECISIONS, MemoryModel  # noqa: E402
from model import TransformerLM  # noqa: E402
from model.moe import MoE  # noqa: E402
from test_architectures import relative, saved_tensors, variant  # noqa: E402
from test_memory_reality import B, T, batch, expected_by_module  # noqa: E402
from test_peak import MARKS, measure  # noqa: E402

MOE = ("moe", "moe_deepseek", "moe_capacity", "gpt_oss", "moe_geglu_erf")


def balanced(monkeypatch):
    """Every expert gets rows (slot s of token t to expert (t·k + s) mod E, as
    tests/test_moe.py's balanced routing): an expert no token chose casts no weight slice
    under autocast, which the ledger (every expert runs) does not model."""
    route = MoE.route

    def forced(self, x):
        weights, experts = route(self, x)  # every router op runs
        n, k = experts.shape
        return weights, (torch.arange(n)[:, None] * k + torch.arange(k)[None, :]) % self.E
    monkeypatch.setattr(MoE, "route", forced)


@pytest.mark.parametrize("name", MOE)
def test_moe_saved_tensors_under_cpu_autocast_equal_the_ledger(name, monkeypatch):
    c = variant(name)
    torch.manual_seed(0)
    balanced(monkeypatch)
    model = TransformerLM.from_config(c)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # what is held at the backward pass
        saved = saved_tensors(model, *batch(c))  # (a router's off-gradient saves freed)
    measured = defaultdict(Counter)
    for module, n, dtype in saved.values():
        measured[relative(module)][(n, dtype)] += 1
    measured = dict(measured)
    expected = expected_by_module(ledger(c, "cpu"), T, B)
    if c.moe_capacity_factor is None:
        # dropless experts on a real routing run expert by expert (each its rows and its
        # slice of the weights, cast): compared by total bytes per dtype, as
        # tests/test_architectures.py does
        for counts in (measured, expected):
            total = Counter()
            for (n, dtype), k in counts.pop("ffn.experts", Counter()).items():
                total[dtype] += n * k
            counts["ffn.experts"] = total
    assert measured == expected


def kept_bytes(lg, values):
    return sum(a.elements.evaluate(values) * a.bytes_per_element * a.count(values)
               for a in lg.activations if a.saved)


@pytest.mark.parametrize("name", ("moe", "moe_capacity"))
def test_moe_bf16_moments_are_a_cpu_autocast_step(name, monkeypatch):
    c = variant(name)
    balanced(monkeypatch)
    Bm, Tm = 3, 8
    tracker, steps = measure(c, Bm, Tm, autocast=True)
    m = MemoryModel(c, PRECISIONS["bf16-mixed"], "model", device="cpu")
    v = m.ledger.values(Tm, Bm)
    boundary, optimizer = (ph.bytes.evaluate(v) for ph in m.peak_terms)
    # the planner follows CUDA's autocast policies; the CPU step keeps the "cpu" ledger's
    cuda_minus_cpu = kept_bytes(ledger(c, "cuda"), v) - kept_bytes(ledger(c, "cpu"), v)
    assert tracker.marks[MARKS[0]] - steps == boundary - cuda_minus_cpu
    assert tracker.marks[MARKS[1]] - steps == optimizer
