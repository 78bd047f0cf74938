"""What torch's context parallelism allocates inside one block's attention backward (issue
44): the ring attention of torch.distributed.tensor.experimental.context_parallel, as the
torch stack and torchtitan run it (Stack.ring_attention), read from torch 2.13's
torch/distributed/tensor/experimental/_context_parallel/_attention.py (torchtitan's
context_parallel_rotate_method default "allgather"; _ContextParallelOptions defaults
convert_to_f32=True, enable_load_balance=True, rotate_method=ALL_GATHER).

_templated_ring_attention_backward, for each rank's local Q (b·h/tp heads × T/cp tokens)
and local K, V (b·h_sdpa/tp heads × T/cp: the heads SDPA is given, h after torchtitan's
repeat_kv, else h_kv), holds through its loop over the cp ring steps:

  * the K and V of the whole sequence: kv_rotater is an _AllGatherRotater, whose one
    all_gather_single of torch.cat([key.flatten(), value.flatten()]) keeps cp·2·K elements
    in the activations' dtype (_aggregated_buffer) while the loop reads one chunk a step;
  * the gradients, accumulated in float32 (accum_dtype = torch.float32 under
    convert_to_f32): grad_query (Q elements) and grad_key, grad_value (2·K);
  * the dK/dV ring (dkv_rotater, ALL_TO_ALL): each step's next_grad_kv = torch.cat of the
    fp32 grad_key and grad_value (2·K) sent on, and the buffer received (2·K).

The ring's forward (run again under full recomputation) gathers the same K and V, and
frees them when it returns; its merger's fp32 output is smaller than the backward's set.
The per-step outputs of the SDPA backward kernel are what one GPU's attention backward
makes too (not modelled, as on one GPU: peak.py).

The same buffers hold for the ring torchtitan's 2024-12 benchmarks ran (torch 1963fc8, not
stored; its generation of torch/distributed/tensor/experimental/_attention.py read in
paolodedios/pytorch at 0126578: the DeviceMesh-based module with set_rotate_method,
pytorch #142093): it reached the ring through DTensor's custom SDPA handlers instead of
2.13's function mode, and its _templated_ring_attention_backward allocates statement for
statement what 2.13's does (the _AllGatherRotater's one gather, the fp32 zeros_like
gradients, the ALL_TO_ALL dK/dV ring); no per-step output is kept, nothing per layer.
"""
from __future__ import annotations

from accounting.planning.parallel.activations import Linear
from accounting.planning.parallel.layout import Layout
from accounting.units import DTYPE_BYTES, FP32

F32 = DTYPE_BYTES[FP32]


def backward_buffers(layout: Layout, seq: int, heads: int, sdpa_kv_heads: int, d_k: int,
                     element_bytes: int) -> Linear:
    """The ring attention backward's buffers on one rank, as a·b (none without CP):
    2·cp·K·e (the gathered K and V) + 4·(Q + 2·K) (fp32 gradients) + 4·4·K (the fp32 dK/dV
    ring's two buffers), with Q = (T/cp)·⌈h/tp⌉·d_k and K = (T/cp)·⌈h_sdpa/tp⌉·d_k per
    sequence (`seq`: the whole sequence T)."""
    cp = layout.cp
    if cp == 1:
        return Linear()
    local = seq // cp
    q = local * -(-heads // layout.tp) * d_k
    k = local * -(-sdpa_kv_heads // layout.tp) * d_k
    return Linear(2 * cp * k * element_bytes + F32 * (q + 2 * k) + F32 * 4 * k, 0)
