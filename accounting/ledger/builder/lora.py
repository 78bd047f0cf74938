"""LoRA adapters on the ledger's linear layers (PEFT's lora.Linear, peft 0.21.2,
peft/tuners/lora/layer.py Linear.forward), as facts, and the frozen base they sit on.

For a targeted linear layer y = base(x), PEFT runs

    result = base_layer(x)                      # the frozen weight: saves nothing of x
    x = x.to(lora_A.weight.dtype)               # _cast_input_dtype: a copy when x is bf16
    result = result + lora_B(lora_A(dropout(x))) * scaling
    result = result.to(torch_result_dtype)

with lora_A: r × d_in and lora_B: d_out × r, trainable, in float32 (get_peft_model's
autocast_adapter_dtype=True upcasts bf16/fp16 adapters to float32: tuners_utils.py
cast_adapter_dtype), and dropout nn.Identity for lora_dropout = 0 (else nn.Dropout, whose
native_dropout saves its bool mask). Autograd then saves lora_A's input (the dropout's
output, or the cast copy) and lora_B's input (lora_A's output, B·T·r); under autocast
each matmul casts (and saves) bf16 copies instead. The scaling (alpha/r, a Python float)
and the add save nothing.

Several ledger linears can be one PEFT layer (GPT-2's fused c_attn is the ledger's Q, K
and V projections): the first member runs the dropout and lora_A, every member a slice of
lora_B (d_out_i × r each, which adds up to PEFT's one lora_B), so that the parameter count
and FLOPs are PEFT's.

Frozen base (the ledger's param_dtype): every parameter that is not an adapter has
requires_grad False and is stored in param_dtype; the residual stream is in that dtype too
(the frozen embedding's output). A frozen weight's matmul saves nothing of its input for a
weight gradient, and a frozen gain's multiply nothing of the normalized input (trace.py's
rules follow requires_grad). The blocks' inputs require a gradient: transformers'
enable_input_require_grads (which gradient checkpointing and PEFT's
prepare_model_for_kbit_training call) makes the embedding's output require one, so that
the first block saves what the others save.
"""
from __future__ import annotations

from dataclasses import dataclass

from accounting.ledger import records as R
from accounting.ledger.trace import Sym, Trace
from accounting.units import FP32

LORA_COMPONENT_NOTE = "LoRA"
DROPOUT = "LoRA dropout"


@dataclass(frozen=True)
class Adapters:
    """Where the adapters go: (per block?, ledger module) of each targeted linear; the
    members of a fused PEFT layer after its first share its lora_A (`followers`)."""
    rank: int
    modules: frozenset  # of (per_layer: bool, module: str)
    followers: frozenset = frozenset()
    dropout: bool = False  # lora_dropout > 0
    adapter_dtype: str = FP32
    # the routed experts' stacked weights PEFT's ParamWrapper adapts (planning/lora_targets.py),
    # each a tuple of the ledger's expert weights it holds: ("w1", "w3") for gate_up_proj
    # (rank 2·r), ("w2",) for down_proj
    experts: tuple = ()
    # QLoRA after PEFT's prepare_model_for_kbit_training (planning/finetune.py): the frozen
    # base is fp32 (the ledger's param_dtype) but for bitsandbytes' NF4 linears, which
    # compute in this dtype; None: no such layers, or their base is param_dtype anyway
    nf4_compute: str | None = None

    def targets(self, per_layer: bool, module: str) -> bool:
        return (per_layer, module) in self.modules


def apply(t: Trace, linear, x: Sym, y: Sym) -> Sym:
    """y + lora_B(lora_A(dropout(x.to(adapter dtype)))) · scaling, the result cast back to
    y's dtype; run in the linear's scope. A fused PEFT layer's followers reuse lora_A's
    output (kept on the trace by the input it was computed from)."""
    ad: Adapters = t.adapters
    key = (t.per_block, t.module)
    first = t.lora_outputs
    fused = id(x.storage)
    if True:
        if key not in ad.followers:
            with t.scope("lora_A"):
                a_w = t.param("weight", ("r",) + linear.d_in, linear.component, trainable=True,
                              dims=(1, len(linear.d_in)))  # a 2-D nn.Linear weight
            xa = t.cast(x, ad.adapter_dtype, f"{linear.record}: LoRA input ({ad.adapter_dtype} copy)")
            rows = x.shape[:-len(linear.d_in)]
            if ad.dropout:
                with t.scope("lora_dropout"):
                    xa = dropout(t, xa, f"{linear.record}: LoRA dropout output",
                                 linear.component)
            with t.scope("lora_A"):
                dtype = t.matmul(xa, a_w, R.Matmul(f"{linear.record} LoRA A", linear.component,
                                                   t.module, t.repeat, R.FORWARD, (), rows,
                                                   linear.d_in, ("r",), grads=("dX", "dW")))
            a = t.name(Sym(rows + ("r",), dtype), f"{linear.record}: LoRA A output")
            first[fused] = a
        else:
            a = first[fused]
            rows = a.shape[:-1]
        with t.scope("lora_B"):
            b_w = t.param("weight", linear.d_out + ("r",), linear.component, trainable=True,
                          dims=(len(linear.d_out), 1))
            dtype = t.matmul(a, b_w, R.Matmul(f"{linear.record} LoRA B", linear.component,
                                              t.module, t.repeat, R.FORWARD, (), rows, ("r",),
                                              linear.d_out, grads=("dX", "dW")))
        b = Sym(rows + linear.d_out, dtype)
        s = t.binary("aten.mul", b, None, "LoRA · scaling", linear.component)
        out = t.binary("aten.add", y, s, "result + LoRA", linear.component)
        return t.cast(out, y.dtype)


def experts(t: Trace, weights: dict) -> dict:
    """PEFT's lora.ParamWrapper on the routed experts' stacked weights (peft 0.21.2,
    peft/tuners/lora/layer.py ParamWrapper.update_layer, get_delta_factors, _activate_lora
    and _LoraFactorsProxy), run in the experts' scope: lora_A (E·r', d_in) and lora_B
    (d_out, E·r') trainable in the adapters' dtype (r' = 2·r for the fused gate_up_proj:
    rank_pattern), and on every forward the folded weight W' = baddbmm(W, B_e, A_e,
    alpha=scaling) with autocast off, in W's dtype: the factors cast to it (copies, which
    baddbmm saves), E·d_out·r'·d_in multiply-adds and E·d_out·d_in adds, and W' (the size
    of the whole expert stack) is what the experts' matmuls then read and save.
    `weights`: ledger name -> (W, d_out, d_in); returns the folded weights by name."""
    ad: Adapters = t.adapters
    out = {}
    for group in ad.experts:
        w, d_out, d_in = weights[group[0]]
        E = w.shape[:1]
        fused = ((str(len(group)),) if len(group) > 1 else ())
        rank = fused + ("r",)
        outs = fused + d_out  # gate_up_proj: 2·d_e rows
        # in the experts' own module (its matmuls now need dW: W' requires grad)
        a_w = t.param(f"{group[0]}.lora_A", E + rank + d_in, R.FFN, trainable=True,
                      dims=(len(E) + len(rank), len(d_in)))
        b_w = t.param(f"{group[0]}.lora_B", outs + E + rank, R.FFN, trainable=True,
                      dims=(len(outs), len(E) + len(rank)))
        label = "+".join(group)
        # B_e is lora_B's permuted view, which bmm reads as it is (no copy: measured, CPU)
        lhs = t.cast(t.view(b_w, E + outs + rank, contiguous=True), w.dtype,
                     f"expert {label} LoRA B ({w.dtype} copy)")
        rhs = t.cast(t.view(a_w, E + rank + d_in), w.dtype, f"expert {label} LoRA A ({w.dtype} copy)")
        t.matmul(lhs, rhs, R.Matmul(f"expert {label} LoRA fold (baddbmm)", R.FFN, t.module,
                                    t.repeat, R.FORWARD, E, outs, rank, d_in,
                                    note="PEFT ParamWrapper: W + scaling·B_e·A_e per expert"),
                 op="grouped_mm")  # autocast off (_LoraFactorsProxy): W's dtype
        t._record("aten.add", f"expert {label} + LoRA (baddbmm)", R.FFN, E + outs + d_in)
        folded = t.name(Sym(E + outs + d_in, w.dtype, grad=True),
                        f"expert {label} weights with LoRA folded in (W', the whole stack)")
        for n in group:  # gate and up halves of one storage
            out[n] = t.view(folded, E + d_out + d_in, contiguous=True)
    return out


def dropout(t: Trace, x: Sym, out: str, component: str) -> Sym:
    """nn.Dropout in training (aten.native_dropout): the output and a bool mask; saves the
    mask when x needs a gradient. 1 FLOP per element (the masked scale)."""
    desc = t._record("aten.native_dropout", "dropout", component, x.shape)
    t._reads(desc, x)
    y = t.name(Sym(x.shape, x.dtype, x.grad), out)
    mask = t.name(Sym(x.shape, R.BOOL, grad=False), f"{out.split(':')[0]}: LoRA dropout mask")
    if x.grad:
        t._saves(mask, desc, after=True)
    return y


LEAF = "token embeddings: a leaf that requires grad (enable_input_require_grads)"


def input_leaf(t: Trace, x: Sym) -> Sym:
    """The frozen embedding's output made to require a gradient (transformers'
    enable_input_require_grads: output.requires_grad_(True)), so that every block saves
    what the first one saves."""
    return Sym(x.shape, x.dtype, grad=True)


def keep_leaf(t: Trace, leaf: Sym, transformed: bool) -> None:
    """The leaf stays alive until the backward pass: its AccumulateGrad node holds it (not
    a saved tensor: saved_tensors_hooks do not see it). It is the first block's input
    unless the embedding is scaled or has positions added (`transformed`); then it costs
    nothing more when the first block keeps its input anyway (saved by its first norm in
    fp32, or by full recomputation's checkpoint)."""
    if not transformed:
        first = next(symbol for symbol, layers in t.groups if 0 in layers)
        if any(n.block_input and n.repeat == first and n.savers for n in t.named.values()):
            return
    with t.scope("token_embeddings"):
        t.name(leaf, LEAF)
        t._saves(leaf, "AccumulateGrad (holds the leaf until the backward pass)")
