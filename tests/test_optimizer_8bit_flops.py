"""bitsandbytes' AdamW8bit update FLOPs (issue 45: unguarded). A tensor under
min_8bit_size = 4,096 elements keeps float32 moments, and Optimizer2State.update_step
(bitsandbytes/optim/optimizer.py) then runs optimizer_update_32bit: AdamW's update with no
(de)quantization. Counted here op by op on bitsandbytes' own CPU implementation of that op
(backends/cpu/ops.py _optimizer_update_32bit_cpu), under the project's convention, and by
hand: g·gnorm_scale 1, m.mul_.add_(α) 3, v.mul_.addcmul_ 4, the decay 1, √v + ε and m/· 3,
p.add_(·, α) 2 = 14 per element (before the fix: 20, the 8-bit kernel's). A tensor of 4,096
or more keeps uint8 moments: the blockwise kernel's 20 per element (dequantize m and v,
AdamW's 14, quantize both with a block max)."""
from __future__ import annotations

import pytest

from accounting.planning.optimizers import get_optimizer


@pytest.mark.parametrize("shape", [(48,), (6, 8), (63, 65)])
def test_small_tensors_take_the_32bit_update(shape):
    torch = pytest.importorskip("torch")
    bnb = pytest.importorskip("bitsandbytes")
    from bitsandbytes.backends.cpu.ops import _optimizer_update_32bit_cpu
    from test_optimizers_reality import OpFlops
    p = torch.nn.Parameter(torch.randn(*shape))
    opt = bnb.optim.AdamW8bit([p], lr=1e-3, weight_decay=0.01)
    p.grad = torch.randn_like(p)
    opt.step()
    state = opt.state[p]
    assert state["state1"].dtype == torch.float32  # under 4,096 elements: fp32 moments
    g = torch.randn_like(p)
    counter = OpFlops()
    with counter.mode:  # the op's own body, as update_step calls it (step 2, decay > 0)
        _optimizer_update_32bit_cpu("adam", g, p, state["state1"], state["state2"], None, 0.0,
                                    0.0, 0.9, 0.999, 0.0, 0.0, 1e-8, 0.01, 2, 1e-3, 1.0)
    n = p.numel()
    assert counter.flops == 14 * n  # by hand, above
    assert get_optimizer("adamw8bit").update_flops(shape) == counter.flops


def test_large_tensors_take_the_8bit_kernel():
    # 64 × 64 = 4,096: uint8 moments, the blockwise kernel's 2 + 14 + 4 per element
    assert get_optimizer("adamw8bit").update_flops((64, 64)) == 20 * 4096
