"""The caching allocator model (accounting/planning/allocator.py, issue 44).

Expected values: torch.cuda.memory_reserved() measured on an H200 (tests/data/
allocator_h200.json, benchmarks/gpu_allocator.py: tensors of the listed sizes allocated in a
fresh process, with and without expandable_segments), hand algebra from
c10/cuda/CUDACachingAllocator.cpp's constants, and the reserved figures of the measured
training steps in ../shared/gpu/README.md (the "allocator reserved" column)."""
import json
from pathlib import Path

import pytest

from accounting.planning import allocator as AL
from accounting.planning.memory import PRECISIONS, MemoryModel
from accounting.planning.reserved import one_gpu

MiB = 1 << 20
MEASURED = json.loads((Path(__file__).parent / "data" / "allocator_h200.json").read_text())


@pytest.mark.parametrize("case", sorted(MEASURED["cases"]))
def test_reserved_is_what_the_h200_reserved(case):
    m = MEASURED["cases"][case]
    groups = [tuple(g) for g in m["groups"]]
    assert AL.reserved(groups, m["expandable"]) == m["reserved"], case


def test_segment_sizes_by_hand():
    # kSmallBuffer 2 MiB for up to 1 MiB; kLargeBuffer 20 MiB below 10 MiB; else 2 MiB steps
    assert AL.allocation_size(1) == 2 * MiB and AL.allocation_size(MiB) == 2 * MiB
    assert AL.allocation_size(MiB + 512) == 20 * MiB
    assert AL.allocation_size(10 * MiB) == 10 * MiB
    assert AL.allocation_size(10 * MiB + 512) == 12 * MiB
    assert AL.round_size(1) == 512 and AL.round_size(513) == 1024


# ../shared/gpu/README.md "Step peak (bytes)": (config, T, B, precision, recompute,
# max_memory_allocated, max_memory_reserved), torch 2.11 on an H200
STEPS = [
    ("gpt2-small", 1024, 16, "bf16-mixed", "none", 22_537_195_520, 26_040_336_384),
    ("meta-llama/Llama-3.2-1B", 4096, 4, "bf16-mixed", "none", 78_499_653_120, 89_785_368_576),
    ("meta-llama/Llama-3.2-1B", 8192, 4, "bf16-mixed", "full", 62_952_728_064, 81_971_380_224),
]


@pytest.mark.parametrize("name,T,B,precision,recompute,allocated,reserved", STEPS)
def test_reserved_peak_is_a_lower_bound_of_the_measured(name, T, B, precision, recompute,
                                                        allocated, reserved):
    from dataclasses import replace
    import accounting
    readme = Path("/work/shared/gpu/README.md")
    if readme.exists():  # the figures are typed from it
        assert f"{reserved:,}" in readme.read_text()
    c = accounting.get_preset(name)
    c = replace(c, attention="sdpa", context_length=max(T, c.context_length))
    model = MemoryModel(c, PRECISIONS[precision], "model", recompute)
    res, moment = one_gpu(model, B, T)
    peak = model.peak(B, T)
    # the blocks and segments of the moment's tensors: above the allocated peak, below what
    # the step reserved (its history's fragmentation is not modelled)
    assert peak < res <= reserved, (res, reserved)
    assert moment.startswith(("start of the backward", "AdamW"))
