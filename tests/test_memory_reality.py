"""Training memory as real training uses it, measured on the CPU against the ledger.

  * bf16 autocast: under torch.autocast("cpu", dtype=torch.bfloat16) the dtype and bytes of
    every tensor autograd saves (saved_tensors_hooks, module by module) equal the ledger's
    records for autocast "cpu" — the casts included (each matmul's bf16 copies of its input
    and of its weight), and what autocast keeps in fp32 (the norms, which the model computes
    in float32, and the loss's log-softmax);
  * the fused attention kernel (attention="sdpa"): what it saves (Q, K, V, the output and the
    per-row log-sum-exp), in fp32 and in bf16;
  * activation recomputation (torch.utils.checkpoint, full and selective): the storages alive
    at the end of the forward pass equal what the ledger keeps, and FlopCounterMode's
    backward count is twice the forward plus the recomputed matmuls;
  * parameter, gradient and AdamW state bytes under autocast: fp32, as the plan says.
The expected values are the running model's; the ledger is built without torch.
"""
import weakref
from collections import Counter, defaultdict
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from accounting.crosscheck.fused import register_flop_formulas  # noqa: E402
from accounting.ledger.ledger import ledger  # noqa: E402
from accounting.planning import PRECISIONS, MemoryModel, step_flops  # noqa: E402
from model import TransformerLM  # noqa: E402
from test_architectures import DTYPE, VARIANTS, relative, variant  # noqa: E402

B, T = 2, 5
# (the MoE variants under CPU autocast: tests/test_moe_autocast.py)
AUTOCAST_VARIANTS = ("cs336", "gqa", "gpt2", "gelu_erf", "qwen3", "olmo2", "no_positions",
                     "sinks_mha", "clamped_dense_bias", "gemma2", "gemma3", "granite",
                     "neox", "falcon7b", "alibi", "falcon_alibi",
                     "llama4", "llama4_sdpa_top2",
                     "cohere_plus", "gated_attention",
                     "gated_attention_sdpa")  # Llama 4: its router's bf16 gate


def batch(c):
    g = torch.Generator().manual_seed(1)
    return (torch.randint(0, c.vocab_size, (B, T), generator=g),
            torch.randint(0, c.vocab_size, (B, T), generator=g))


def saved_by_module(model, ids, targets, autocast: bool):
    """module -> Counter of (bytes, dtype) of the storages autograd saves (parameters out)."""
    names = {m: n for n, m in model.named_modules()}
    stack, seen = [], {}
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def enter(module, args):
        stack.append(names[module])

    def leave(module, args, output):
        stack.pop()
    handles = [m.register_forward_pre_hook(enter) for m in model.modules()]
    handles += [m.register_forward_hook(leave) for m in model.modules()]

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in params and s.data_ptr() not in seen:
            seen[s.data_ptr()] = (stack[-1] if stack else "loss", s.nbytes(), t.dtype)
        return t
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                logits = model(ids)
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    finally:
        for h in handles:
            h.remove()
    loss.backward()
    out = defaultdict(Counter)
    for module, n, dtype in seen.values():
        out[relative(module)][(n, dtype)] += 1
    return dict(out)


def expected_by_module(lg, T, B):
    v = lg.values(T, B)
    out = defaultdict(Counter)
    for a in lg.activations:
        if a.saved:
            dtype, size = DTYPE[a.dtype]
            out[a.saved_in][(size * a.elements.evaluate(v) // a.copies, dtype)] += a.copies * a.count(v)
    return dict(out)


@pytest.mark.parametrize("name", AUTOCAST_VARIANTS)
def test_bf16_autocast_saved_tensors_equal_the_ledger(name):
    c = variant(name)
    torch.manual_seed(0)
    measured = saved_by_module(TransformerLM.from_config(c), *batch(c), autocast=True)
    assert measured == expected_by_module(ledger(c, "cpu"), T, B)
    # what autocast leaves in fp32 (a sample): the norms' internals, the loss's log-softmax
    fp32 = {(a.saved_in, a.name) for a in ledger(c, "cpu").activations if a.saved and a.dtype == "fp32"}
    assert ("loss", "log-softmax of the logits") in fp32
    assert any(m == "ln_final" for m, _ in fp32)


@pytest.mark.parametrize("name", ("cs336", "gqa", "gpt2", "qwen3", "olmo2", "neox", "falcon7b"))
@pytest.mark.parametrize("autocast", (False, True))
def test_fused_attention_saves_q_k_v_output_and_logsumexp(name, autocast):
    c = replace(variant(name), attention="sdpa")
    torch.manual_seed(0)
    measured = saved_by_module(TransformerLM.from_config(c), *batch(c), autocast=autocast)
    lg = ledger(c, "cpu" if autocast else None)
    assert measured == expected_by_module(lg, T, B)
    fused = {a.name for a in lg.activations if "fused attention kernel" in a.why}
    assert {"log-sum-exp per query row", "attention output (fused kernel)"} <= fused
    assert not any("mask" in a.name for a in lg.activations)  # is_causal: no mask tensor


class LiveStorages(TorchDispatchMode):
    """Bytes of the storages created inside and still alive (weakref finalizers); storages
    that existed before (parameters, buffers, the caller's inputs) are not counted."""

    def __init__(self, existing=()):
        super().__init__()
        self.live: dict[int, tuple[int, torch.dtype]] = {}
        self.existing = {t.untyped_storage().data_ptr() for t in existing}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                s = t.untyped_storage()
                key = s.data_ptr()
                if key and key not in self.live and key not in self.existing:
                    self.live[key] = (s.nbytes(), t.dtype)
                    weakref.finalize(s, self.live.pop, key, None)
        return out


@pytest.mark.parametrize("recompute", ("full", "selective"))
@pytest.mark.parametrize("name,attention,autocast", [
    ("cs336", "naive", False), ("gqa", "naive", True), ("gpt2", "naive", False),
    ("cs336", "sdpa", True), ("olmo2", "sdpa", False), ("gemma2", "naive", True),
    ("sandwich_layernorm_sdpa", "sdpa", False),
    ("falcon_alibi", "naive", True), ("neox", "sdpa", False),
    ("llama4", "naive", True), ("llama4_sdpa_top2", "sdpa", False), ("window_sdpa", "sdpa", True)])
def test_recomputation_keeps_what_the_ledger_keeps(recompute, name, attention, autocast):
    c = replace(variant(name), attention=attention)
    torch.manual_seed(0)
    model = TransformerLM.from_config(c).set_recompute(recompute)
    ids, targets = batch(c)
    register_flop_formulas()
    with FlopCounterMode(display=False) as fwd_count:
        existing = [*model.parameters(), *model.buffers(), ids, targets]
        with LiveStorages(existing) as live:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                logits = model(ids)
                loss = F.cross_entropy(logits.reshape(-1, c.vocab_size), targets.reshape(-1))
            del logits
            kept = Counter((n, dtype) for n, dtype in live.live.values())
    kept[(4, torch.float32)] -= 1  # the loss itself, held by this test
    lg = ledger(c, "cpu" if autocast else None, recompute)
    v = lg.values(T, B)
    expected = Counter()
    for a in lg.activations:  # token ids and targets: the caller's, not created in the step
        if a.saved and a.name not in ("token ids", "targets"):
            dtype, size = DTYPE[a.dtype]
            expected[(size * a.elements.evaluate(v) // a.copies, dtype)] += a.copies * a.count(v)
    assert +kept == +expected
    # FLOPs: the backward pass is twice the forward's matmuls plus the recomputed ones
    with FlopCounterMode(display=False) as bwd_count:
        loss.backward()
    s = step_flops(c, T, B, recompute)
    assert fwd_count.get_total_flops() == s.forward
    assert bwd_count.get_total_flops() == s.backward + s.recompute
    assert s.recompute > 0


def test_plan_bytes_of_a_recomputed_run():
    # The plan's kept activations are the ledger's: the same bytes measured above, summed
    c = variant("cs336")
    for recompute in ("none", "full", "selective"):
        m = MemoryModel(c, PRECISIONS["fp32"], "model", recompute).at(B, T)
        kept = sum(i.bytes for i in m.items if i.name.startswith("activations")
                   and "recomputed" not in i.name)
        lg = ledger(c, None, recompute)
        v = lg.values(T, B)
        assert kept == sum(a.bytes_per_element * a.elements.evaluate(v) * a.count(v)
                           for a in lg.activations if a.saved)


def test_autocast_leaves_parameters_gradients_and_adamw_state_in_fp32():
    c = variant("gqa")
    torch.manual_seed(0)
    model = TransformerLM.from_config(c)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids, targets = batch(c)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(ids).reshape(-1, c.vocab_size), targets.reshape(-1))
    loss.backward()
    opt.step()
    tm = MemoryModel(c, PRECISIONS["bf16-mixed"], "model").at(B, T)
    item = {i.name: i.bytes for i in tm.items}
    nbytes = lambda ts: sum(t.numel() * t.element_size() for t in ts)  # noqa: E731
    assert item["parameters (fp32 master copy)"] == nbytes(model.parameters())
    assert item["gradients (fp32)"] == nbytes(p.grad for p in model.parameters())
    state = list(opt.state.values())
    assert item["AdamW first moment m (fp32)"] == nbytes(s["exp_avg"] for s in state)
    assert item["AdamW second moment v (fp32)"] == nbytes(s["exp_avg_sq"] for s in state)
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())
