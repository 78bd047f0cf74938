"""LoRA's optimizer state is the optimizer registry's over the adapters: for every registry
optimizer, a real CPU step of PEFT on the course model (frozen base in fp32, or in bf16
under the CPU's autocast; adapters float32) leaves exactly the state bytes and step
counters the LoRA plan's memory items say (planning/training_state.py with the trainable
predicate "requires_grad"; planning/finetune.py only supplies the weights). The real
optimizers are built over PEFT's trainable parameters, as a training loop does
(torch.optim / bitsandbytes / torchao, as tests/test_optimizers_reality.py builds them).
"""
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from accounting.planning import training_state as TS  # noqa: E402
from accounting.planning.memory import MemoryModel, get_precision  # noqa: E402
from accounting.planning.optimizers import OPTIMIZERS  # noqa: E402
from test_finetune import _peft_course_model  # noqa: E402
from test_optimizers_reality import SMALL, real_state  # noqa: E402


def make(name, trainable, hidden):
    """The registry entry's real optimizer(s) over the trainable parameters."""
    if name == "adamw":
        return [torch.optim.AdamW(trainable, foreach=True)]
    if name == "adamw-fused":
        return [torch.optim.AdamW(trainable, fused=True)]
    if name == "sgd":
        return [torch.optim.SGD(trainable, lr=0.1, momentum=0.9)]
    if name == "adafactor":
        return [torch.optim.Adafactor(trainable)]
    if name == "adamw8bit":
        return [pytest.importorskip("bitsandbytes").optim.AdamW8bit(trainable)]
    if name == "paged-adamw8bit":  # not paged on the CPU: the same bytes
        return [pytest.importorskip("bitsandbytes").optim.PagedAdamW8bit(trainable)]
    if name == "adamw8bit-torchao":
        return [pytest.importorskip("torchao.optim").AdamW8bit(trainable)]
    if name == "muon":  # Muon on the 2-D hidden matrices (every adapter), AdamW on the rest
        rest = [p for p in trainable if not any(p is h for h in hidden)]
        return [torch.optim.Muon(hidden)] + ([torch.optim.AdamW(rest)] if rest else [])
    raise AssertionError(name)


@pytest.mark.parametrize("base", ["fp32", "bf16"])
# torchao's first step compiles its kernels (10 s on one core): marked slow, not skipped
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if "torchao" in n
                                  else n for n in sorted(OPTIMIZERS)])
def test_lora_optimizer_state_equals_the_real_optimizer_over_the_adapters(name, base):
    autocast = base == "bf16"
    pm, ft = _peft_course_model(SMALL, 4, 0.0, torch.bfloat16 if autocast else torch.float32)
    trainable = [p for p in pm.parameters() if p.requires_grad]
    precision = get_precision("bf16-mixed" if autocast else "fp32")
    if autocast:
        precision = replace(precision, autocast="cpu")
    mm = MemoryModel(SMALL, precision, optimizer=name, finetune=ft)
    ts = mm.tensors
    assert sum(t.copies for t in ts if t.trained) == len(trainable)  # one per adapter tensor
    assert TS.counts(ts)[1] == sum(p.numel() for p in trainable)  # the adapters, no more
    hidden = [p for p in trainable if p.dim() == 2]
    opts = make(name, trainable, hidden)
    g = torch.Generator().manual_seed(1)
    ids, targets = (torch.randint(0, SMALL.vocab_size, (2, 5), generator=g) for _ in range(2))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = pm(ids)
    torch.nn.functional.cross_entropy(logits.reshape(-1, SMALL.vocab_size).float(),
                                      targets.reshape(-1)).backward()
    assert all(p.grad is None for p in pm.parameters() if not p.requires_grad)  # frozen base
    for o in opts:
        o.step()
    per, seen, counts, steps = real_state(opts, pm)
    v = mm.values(SMALL.context_length, 1)
    items = [t for t in mm.state_terms if "moment" in t.name or "optimizer state" in t.name]
    assert sum(t.bytes.evaluate(v) for t in items) == sum(seen.values()) > 0
    counters = [t for t in mm.state_terms if "step counters" in t.name]
    assert sum(t.bytes.evaluate(v) for t in counters) == 4 * len(steps)
    grads = [t for t in mm.state_terms if t.name.startswith("gradients")]
    assert sum(t.bytes.evaluate(v) for t in grads) == sum(
        p.grad.untyped_storage().nbytes() for p in trainable)
