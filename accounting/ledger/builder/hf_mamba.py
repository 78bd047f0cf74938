"""Nemotron-H's Mamba-2 mixer as transformers runs it (NemotronHMamba2Mixer.forward,
transformers 5.23 models/nemotron_h/modeling_nemotron_h.py), where it differs from
model/mamba.py's ops (builder/mamba.py), each save measured with saved-tensor hooks on
transformers' own model on the CPU (tests/test_transformers_hybrid.py).

The path planned is the torch one: in training without a cache the mixer first calls
mamba2_split_conv1d_scan_combined, a hub kernel (mamba_ssm's fused
mamba_split_conv1d_scan_combined) whose torch fallback returns None, so without mamba_ssm
(the CPU; a GPU without it) the forward goes on in torch ops:

    zxbcdt = in_proj(x); A = -exp(A_log.float())
    gate, xBC, dt = zxbcdt.split(...)                  # views of in_proj's output
    causal_conv1d_fn: F.conv1d(xBC.T.to(w.dtype), w, b, padding=K-1)[..., :T]
                                                       # saves its input (in_proj's output,
                                                       # a view) and computes T + K − 1
                                                       # positions; F.silu saves them all
    mamba2_chunk_scan: dt + dt_bias.to(dt.dtype); softplus; clamp
                       x.float(), B.float(), C.float() # the scan in float32 (copies under
                       x · dt[..., None].float()       # bf16), dt cast twice: two copies
                       A.to(x.dtype) · dt.float()
                       … model/mamba.py's chunked SSD, in float32
    NemotronHRMSNormGated: y · F.silu(gate.to(float32)) (silu saves its fp32 input), the
                       grouped rsqrt, weight · y (float32: y is the scan's fp32 output)
    out_proj(y.to(x.dtype))

With mamba_ssm installed (a CUDA GPU) the fused kernel's autograd function runs instead;
its saves are not modelled here (docs/planning.md).
"""
from __future__ import annotations

from accounting.ledger import records as R
from accounting.ledger.trace import Sym
from accounting.ledger.builder.common import SSD
from accounting.units import FP32

ROW = ("B", "T")
CONV_OUT = "T+K-1"  # F.conv1d with padding K − 1: T + K − 1 positions (ledger.values)


def torch_forward(m, x: Sym, out_label: str, out_course: str) -> Sym:
    """NemotronHMamba2Mixer.forward's torch path on the block's normed input x."""
    t, k = m.t, SSD
    with t.scope("mixer"):
        z = m.in_proj(x, "in_proj output (z, x·B·C, dt)")
        ea = t.unary("aten.exp", t.cast(m.A_log, FP32), "exp(A_log)", k, saves="output",
                     out="exp(A_log)")
        A = t.name(t.unary("aten.neg", ea, "A = −exp(A_log)", k), "A")
        gate = t.view(z, ROW + ("h_m", "p_m"), contiguous=False)
        xbc = t.view(z, ("B", "d_xbc", "T"), contiguous=False)  # .transpose(1, 2)
        dt = t.view(z, ROW + ("h_m",), contiguous=False)
        xbc = conv_silu(t, m.conv1d, xbc, "d_xbc", "Mamba-2")
        h = t.view(xbc, ROW + ("h_m", "p_m"), contiguous=False)
        y = m.scan(h, dt, A, xbc, hf=True)
        t.state("conv state", ("d_xbc", "K"))
        t.state("SSM state", ("h_m", "p_m", "n_s"), fp32=True)
        y = m.gated_norm(y, gate, hf=True)
        y = t.cast(y, x.dtype, "gated norm output (cast to the mixer input's dtype)")
        return m.out_proj(y, out_label, out_course)


def conv_silu(t, conv, xbc: Sym, channels: str, label: str, component: str = SSD) -> Sym:
    """causal_conv1d_fn's torch fallback: F.conv1d(x.to(w.dtype), w, b, padding=K − 1,
    groups=C)[..., :T], then ACT2FN["silu"] (F.silu, which saves its input: the conv's
    T + K − 1 positions, the kept T a view of them). conv1d reads its strided input in place
    and saves it (the view of in_proj's output; under autocast its bf16 copy); the bias is
    inside the op (nothing saved for it). The FLOPs recorded are the T kept outputs', as the
    course's conv (builder/recurrent.py). Qwen3-Next's and Qwen3.5's gated DeltaNet run the
    same causal_conv1d_fn (modeling_qwen3_next.py)."""
    w = conv.weight
    inp = t.view(t.cast(t.name(xbc, f"{label} conv1d input"), w.dtype,
                        f"{label} conv1d input (cast to the weight's dtype)"), contiguous=True)
    record = R.Matmul(f"{label} conv1d", R.RECURRENT, t.module, t.repeat, R.FORWARD,
                      (channels,), ("B", "T"), ("K",), (), grads=("dX", "dW"),
                      note="depthwise causal conv1d (F.conv1d, padding K − 1)")
    dtype = t.matmul(inp, w, record, op="conv1d")
    out = t.name(Sym(("B", channels, CONV_OUT), dtype, inp.grad or w.grad),
                 f"{label} conv1d output (T + K − 1 positions)")
    kept = t.view(out, ("B", channels, "T"), contiguous=False)
    act = t.unary("aten.silu", kept, "SiLU(conv)", component, saves="input",
                  out=f"SiLU({label} conv)")
    return t.view(t.cast(act, xbc.dtype), ROW + (channels,), contiguous=False)
