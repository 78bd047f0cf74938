"""Mixture-of-experts FLOPs do not depend on the routing: real CPU runs, several routings.

Which expert a token goes to depends on the data; the meta device has none (there
model/moe.py deals the slots to the experts in turn, see test_architectures.py's meta
cross-checks). Here the model runs on real CPU tensors, forward and backward, with the
router's choice replaced after it ran (so every router op still runs) by: every token to
the same experts, perfectly balanced, and random. Expected: FlopCounterMode's matmul
FLOPs and the op counter's forward non-matmul FLOPs are the same for every routing, and
equal the ledger's executed count (dropless: B·T·k expert rows; with a capacity factor:
E·C rows, whatever is dropped or padded).
"""
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from accounting import analyze  # noqa: E402
from accounting.architecture.config import ModelConfig  # noqa: E402
from accounting.crosscheck.dispatch import COUNTED, FORWARD, OpCounter  # noqa: E402
from model import TransformerLM  # noqa: E402
from model.moe import MoE  # noqa: E402

BASE = dict(vocab_size=29, context_length=16, num_layers=2, d_model=16, num_heads=2, d_ff=24,
            moe_d_ff=8)
CONFIGS = {
    "top1": dict(num_experts=4, experts_per_token=1),
    "top2_shared_grouped": dict(num_experts=8, experts_per_token=2, num_shared_experts=1,
                                router="sigmoid", router_bias=True, router_groups=4,
                                router_topk_groups=2, dense_layers=(0,)),
    "capacity": dict(num_experts=4, experts_per_token=2, moe_capacity_factor=1.25),
    # gpt-oss's (top-k before the softmax, biased router and experts, the clamped SwiGLU)
    # and DeepSeek-V2's (groups ranked by their best score)
    "gpt_oss": dict(num_experts=4, experts_per_token=2, router_topk_first=True,
                    router_linear_bias=True, expert_bias=True, mlp="swiglu_clamped",
                    norm_topk_prob=False),
    "deepseek_v2_grouped": dict(num_experts=8, experts_per_token=2, num_shared_experts=2,
                                router_groups=4, router_topk_groups=2, router_group_score="max",
                                norm_topk_prob=False, routed_scaling_factor=16.0),
}
B, T = 2, 6


def routing(kind: str, n: int, k: int, E: int) -> torch.Tensor:
    """(n, k) expert indices, each token's k experts distinct."""
    if kind == "all to the same experts":
        return torch.arange(k).repeat(n, 1)
    if kind == "balanced":  # slot s of token t -> expert (t·k + s) mod E: counts differ by ≤ 1
        return (torch.arange(n)[:, None] * k + torch.arange(k)[None, :]) % E
    g = torch.Generator().manual_seed(n * 7 + k)
    return torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(n)])


def run(c: ModelConfig, kind: str, monkeypatch):
    route = MoE.route

    def forced(self, x):
        weights, experts = route(self, x)  # every router op runs
        return weights, routing(kind, *experts.shape, self.E)
    monkeypatch.setattr(MoE, "route", forced)
    torch.manual_seed(0)
    lm = TransformerLM.from_config(c)
    ids = torch.randint(0, c.vocab_size, (B, T))
    with FlopCounterMode(display=False) as fcm, OpCounter(lm) as ops:
        logits = lm(ids)
        forward = fcm.get_total_flops()
        ops.phases = set()  # the loss and the backward's non-matmul ops are not compared
        F.cross_entropy(logits.reshape(-1, c.vocab_size), ids.reshape(-1)).backward()
    non_matmul = sum(r.flops for r in ops.counts() if r.phase == FORWARD and r.kind in COUNTED)
    counts = [torch.bincount(routing(kind, B * T, c.experts_per_token, c.num_experts).reshape(-1),
                             minlength=c.num_experts).tolist()]
    return forward, fcm.get_total_flops() - forward, non_matmul, counts[0]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_flops_are_the_same_for_every_routing(name, monkeypatch):
    c = ModelConfig(**BASE, **CONFIGS[name], name=name)
    a = analyze(c, T, B, "train")
    expected = (a.matmul_flops(phase="forward"), a.matmul_flops(phase="backward"),
                a.elementwise_flops)
    seen = {}
    for kind in ("all to the same experts", "balanced", "random"):
        *flops, counts = run(c, kind, monkeypatch)
        seen[kind] = tuple(flops)
        if kind == "all to the same experts":
            assert max(counts) == B * T  # the routings really differ
        if kind == "balanced":
            assert max(counts) - min(counts) <= 1
    assert set(seen.values()) == {expected}, seen


def test_capacity_executes_E_times_C_rows_and_says_what_is_useful():
    c = ModelConfig(**BASE, **CONFIGS["capacity"], name="capacity")
    a = analyze(c, T, B)
    E, k, d, f = 4, 2, 16, 8
    C = -(-5 * B * T * k // (4 * E))  # ⌈1.25·B·T·k/E⌉ = ⌈30/4⌉ = 8
    assert C == 8
    experts = [r for r in a.matmul_rows if r.record.name.startswith("expert W")]
    # hand algebra: three matrices per expert, 2·rows·d·f FLOPs each, in both MoE layers
    assert sum(r.flops for r in experts) == 2 * 3 * 2 * (E * C) * d * f
    assert sum(r.useful_flops for r in experts) == 2 * 3 * 2 * (B * T * k) * d * f


def test_the_model_computes_its_own_expert_capacity():
    # model/ reads only the spec (issue 22): its capacity is its own code, not the ledger's
    # formula, so that the cross-check compares two derivations. Hand values of ⌈c·slots/E⌉:
    # 1.25·16/4 = 5; 1.0·10/4 = 2.5 -> 3; 2·7/7 = 2; the float 1.1 is 1.1000000000000000888…,
    # so 1.1·10/1 is just above 11 -> 12, where float arithmetic (1.1 * 10 == 11.0, as
    # DeepSpeed's ceil(tokens / E * c) computes it) rounds to 11: the spec's convention is
    # the exact value of the float given
    import ast
    import inspect
    import math

    import model.moe as mm
    from accounting.ledger.builder.moe import expert_capacity as ledger_capacity
    for c, slots, E, rows in ((1.25, 16, 4, 5), (1.0, 10, 4, 3), (2, 7, 7, 2), (1.1, 10, 1, 12)):
        assert mm.expert_capacity(c, slots, E) == ledger_capacity(c, slots, E) == rows
        if c != 1.1:
            assert math.ceil(c * slots / E) == rows  # plain floats agree at these sizes
    assert math.ceil(1.1 * 10 / 1) == 11
    imported = {n.module for n in ast.walk(ast.parse(inspect.getsource(mm)))
                if isinstance(n, ast.ImportFrom) and n.module}
    assert not any(m.startswith("accounting") for m in imported)


def test_the_models_options_default_to_the_spec():
    # TransformerLM restates no default: every keyword option is a spec field, and an
    # unknown one is refused rather than ignored
    from dataclasses import fields

    import pytest as _pytest

    from accounting.architecture.config import ModelConfig
    from model.transformer import OPTIONS, TransformerLM
    spec = {f.name: f.default for f in fields(ModelConfig)}
    assert OPTIONS and all(spec[k] == v for k, v in OPTIONS.items())
    assert set(OPTIONS) | {"vocab_size", "context_length", "d_model", "num_layers", "num_heads",
                           "d_ff", "rope_theta", "name"} == set(spec)
    with _pytest.raises(TypeError, match="num_expert"):
        TransformerLM(10, 8, 16, 1, 2, 32, device="meta", num_expert=4)
