"""The step's peak memory against a live-storage tracker over a real CPU training step.

The tracker counts every storage alive (parameters, buffers, AdamW's state, the batch,
and everything the step creates, freed by weakref finalizers) and notes the total at the
backward pass's first op (log_softmax's backward) and at AdamW's torch._foreach_sqrt. The
planner's two moments (MemoryModel.peak_terms) must equal those totals to the byte, and the
step's true peak must equal the larger of the two whenever no gradient temporary inside a
block's backward pass exceeds them (the fused attention kernel; logits- or
optimizer-dominated steps). Where one does (the naive softmax's backward at long
contexts, a wide MLP), the gap is itemised: every extra byte at the true peak is a tensor
the backward pass created inside the last block. The same holds under activation
recomputation (full and selective), measured; and bf16-mixed's moments are a measured
torch.autocast("cpu") step plus the one documented difference of CUDA's autocast policy
for this model (its softmax's exp and sum in float32).
"""
import weakref
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402

from accounting.architecture.config import ModelConfig  # noqa: E402
from accounting.planning import PRECISIONS, MemoryModel  # noqa: E402
from model import TransformerLM  # noqa: E402

MARKS = ("aten._log_softmax_backward_data.default", "aten._foreach_sqrt.default")


class LiveBytes(TorchDispatchMode):
    """Total bytes of live storages; the total right after the first call of each op in
    MARKS; the peak, when it happened, and what the backward pass had created then."""

    def __init__(self, existing):
        super().__init__()
        self.sizes: dict[int, int] = {}
        self.origin: dict[int, tuple] = {}
        self.total = self.peak = 0
        self.phase, self.marks, self.at_peak = "", {}, None
        for t in existing:
            self._add(t, ("existing", ""))

    def _add(self, t, origin):
        s = t.untyped_storage()
        key = s.data_ptr()
        if key and key not in self.sizes:
            self.sizes[key], self.origin[key] = s.nbytes(), origin
            self.total += s.nbytes()
            weakref.finalize(s, self._gone, key)

    def _gone(self, key):
        self.total -= self.sizes.pop(key)
        self.origin.pop(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._add(t, (self.phase, str(func)))
        self.marks.setdefault(str(func), self.total)
        if self.total > self.peak:
            self.peak = self.total
            self.at_peak = [(self.sizes[k], o) for k, o in self.origin.items() if o[0] == "backward"]
        return out


def second_step_marks(model, opt, step, *held):
    """`step()` once (the optimizer's state made), then again under LiveBytes with the
    parameters, buffers, the optimizer's state and `held` (the batch) counted as existing:
    its marks, less the step counters' bytes (host scalars on the CPU)."""
    step()
    state = [t for s in opt.state.values() for t in s.values()]
    steps = sum(s["step"].untyped_storage().nbytes() for s in opt.state.values())
    tracker = LiveBytes([*model.parameters(), *model.buffers(), *held, *state])
    with tracker:
        step()
    return {k: v - steps for k, v in tracker.marks.items()}

def measure(c: ModelConfig, B: int, T: int, recompute: str = "none", autocast: bool = False):
    """A real CPU training step (the second, with AdamW's state): its live-bytes tracker
    and the bytes of AdamW's step counters (CPU tensors on a GPU too). `autocast`: the
    forward pass under torch.autocast("cpu", dtype=torch.bfloat16)."""
    torch.manual_seed(0)
    model = TransformerLM.from_config(c).set_recompute(recompute)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, foreach=True)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, c.vocab_size, (B, T), generator=g)
    targets = torch.randint(0, c.vocab_size, (B, T), generator=g)

    def step(tracker=None):
        opt.zero_grad(set_to_none=True)
        if tracker:
            tracker.phase = "forward"
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = F.cross_entropy(model(ids).reshape(-1, c.vocab_size), targets.reshape(-1))
        if tracker:
            tracker.phase = "backward"
        loss.backward()
        if tracker:
            tracker.phase = "optimizer"
        opt.step()
    step()  # AdamW's state exists from the second step on, as in a long run
    state = [t for s in opt.state.values() for t in s.values()]
    steps = sum(s["step"].untyped_storage().nbytes() for s in opt.state.values())
    tracker = LiveBytes([*model.parameters(), *model.buffers(), ids, targets, *state])
    with tracker:
        step(tracker)
    # AdamW's step counters are CPU tensors on a GPU too: out of the GPU's peak
    return tracker, steps


SMALL = dict(num_layers=3, d_model=16, d_ff=24)


@pytest.mark.parametrize("V,T,h,attention,d_ff", [
    (5000, 16, 2, "naive", 24),    # logits-dominated
    (37, 8, 2, "naive", 24),       # optimizer-dominated
    (37, 256, 4, "sdpa", 24),      # long context, fused attention
    (300, 64, 2, "sdpa", 24),
])
def test_the_two_moments_and_the_peak_are_exact(V, T, h, attention, d_ff):
    c = ModelConfig(vocab_size=V, context_length=T, num_heads=h, attention=attention,
                    **{**SMALL, "d_ff": d_ff})
    B = 4
    tracker, steps = measure(c, B, T)
    m = MemoryModel(c, PRECISIONS["fp32"], "model", device="cpu")
    v = m.ledger.values(T, B)
    boundary, optimizer = (ph.bytes.evaluate(v) for ph in m.peak_terms)
    assert tracker.marks[MARKS[0]] - steps == boundary
    assert tracker.marks[MARKS[1]] - steps == optimizer
    assert tracker.peak - steps == max(boundary, optimizer) == m.peak(B, T)


@pytest.mark.parametrize("V,T,h,attention,d_ff", [
    (37, 256, 4, "naive", 24),     # the naive softmax's backward at a long context
    (37, 16, 2, "sdpa", 512),      # a wide MLP
])
def test_where_a_block_backward_exceeds_both_the_gap_is_its_temporaries(V, T, h, attention, d_ff):
    c = ModelConfig(vocab_size=V, context_length=T, num_heads=h, attention=attention,
                    **{**SMALL, "d_ff": d_ff})
    B = 4
    tracker, steps = measure(c, B, T)
    m = MemoryModel(c, PRECISIONS["fp32"], "model", device="cpu")
    modelled = m.peak(B, T)
    assert tracker.peak - steps > modelled  # the model is a lower bound here, by:
    created = sum(n for n, _ in tracker.at_peak)
    ops = sorted({op.split(".")[1] for _, (_, op) in tracker.at_peak})
    print(f"gap {tracker.peak - steps - modelled:,} bytes; the backward pass had created "
          f"{created:,} bytes then, by {', '.join(ops)}")
    # every tensor alive at the true peak that the boundary did not have was created by the
    # backward pass (gradients and their temporaries), and they outweigh what it freed
    assert created > tracker.peak - steps - modelled > 0


@pytest.mark.parametrize("attention", ["naive", "sdpa"])
@pytest.mark.parametrize("recompute", ["full", "selective"])
def test_the_two_moments_under_recomputation_are_exact(recompute, attention):
    """With torch.utils.checkpoint (full: every block; selective: every attention core)
    the step keeps fewer activations: the two moments, measured on a real step, are the
    planner's to the byte, and so is the larger of them."""
    c = ModelConfig(vocab_size=300, context_length=64, num_heads=2, attention=attention, **SMALL)
    B, T = 4, 64
    tracker, steps = measure(c, B, T, recompute)
    m = MemoryModel(c, PRECISIONS["fp32"], "model", recompute, device="cpu")
    boundary, optimizer = (ph.bytes.evaluate(m.ledger.values(T, B)) for ph in m.peak_terms)
    measured = (tracker.marks[MARKS[0]] - steps, tracker.marks[MARKS[1]] - steps)
    assert (boundary, optimizer) == measured
    assert m.peak(B, T) == max(measured)
    # the recomputed block's tensors come on top during the backward pass: not a moment
    # the planner takes the peak at (its memory table lists them as a term of their own)
    assert tracker.peak - steps >= max(measured)


def test_bf16_moments_are_a_cpu_autocast_step_plus_cudas_float32_softmax():
    """bf16-mixed plans torch.autocast("cuda"); on the CPU, torch.autocast("cpu") runs
    the same step but for two ops of the model's own softmax, which CUDA autocast runs in
    float32 (its fp32 list: exp and sum; checked against PyTorch's AutocastCUDA kernels in
    tests/test_autocast_cuda_bytes.py) and the CPU in bf16: exp's saved result (B·h·T²)
    and the row sum the div saves (B·h·T) take 4 bytes instead of 2, in every block. So
    the planner's boundary moment is the measured CPU one plus 2·L·(B·h·T² + B·h·T), and
    its optimizer moment (no activations left) the measured one."""
    c = ModelConfig(vocab_size=300, context_length=64, num_heads=2, attention="naive", **SMALL)
    B, T, L, h = 4, 32, SMALL["num_layers"], 2
    tracker, steps = measure(c, B, T, autocast=True)
    m = MemoryModel(c, PRECISIONS["bf16-mixed"], "model", device="cpu")
    boundary, optimizer = (ph.bytes.evaluate(m.ledger.values(T, B)) for ph in m.peak_terms)
    assert boundary == tracker.marks[MARKS[0]] - steps + 2 * L * (B * h * T * T + B * h * T)
    assert optimizer == tracker.marks[MARKS[1]] - steps
