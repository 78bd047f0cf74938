"""The MoE routers' shared op sequence, written once: a softmax in float32 over the E experts'
scores, the top k of the probabilities, and the k weights renormalised to sum to 1. The
families differ only around it (their router's input, a transform of the chosen weights),
which they pass in; builder/hf_moe.py and builder/hf_gemma4.py use it, builder/moe.py (model/'s
own router) the renormalisation."""
from __future__ import annotations

from collections.abc import Callable

from accounting.units import FP32
from accounting.ledger.trace import Sym
from accounting.ledger.builder.common import ROUTER


def renormalised(t, weights: Sym, note: str = "renormalise", eps: str = "") -> Sym:
    """weights / weights.sum(-1, keepdim=True) over the k chosen experts (model/moe.py's
    norm_topk_prob; transformers' `router_top_value /= router_top_value.sum(dim=-1,
    keepdim=True)`, Qwen3MoeTopKRouter, MixtralTopKRouter, Gemma4TextRouter): the sum, then
    the division, which saves both operands (`note` names the op: in place or not); `eps`,
    a scalar added to the sum first (DeepseekV3TopkRouter's "+ 1e-20"), its op's label."""
    total = t.reduce("aten.sum", weights, ("k",), "sum of the k weights", ROUTER,
                     out="" if eps else "router weight sum")
    if eps:
        total = t.binary("aten.add", total, None, eps, ROUTER, out="router weight sum")
    return t.binary("aten.div", weights, total, note, ROUTER, out="router weights")


def softmax_top_k(self, x: Sym, pre: Callable | None = None, renormalise: str | None = None,
                  post: Callable | None = None) -> tuple[Sym, Sym]:
    """transformers' softmax routers on `x` (self: builder/moe.py's MoE): pre(self, x), the
    family's router input (Gemma4TextRouter: its norm and scales); the router's F.linear
    (the logits); softmax(…, dtype=torch.float32), which saves its output; torch.topk of the
    probabilities (saves the indices); with `renormalise` (the op's note) the k weights
    renormalised (renormalised above); post(self, weights, chosen), the family's transform
    of the chosen weights (Gemma4TextRouter's per_expert_scale[top_k_index]). Returns the
    logits and the weights. Read in transformers 5.23: models/qwen3_moe/modeling_qwen3_moe.py
    Qwen3MoeTopKRouter.forward, models/mixtral/modeling_mixtral.py MixtralTopKRouter.forward,
    models/gemma4/modeling_gemma4.py Gemma4TextRouter.forward."""
    t, comp = self.t, ROUTER
    logits = self.router(x if pre is None else pre(self, x), "router scores")
    probs = t.unary("aten.softmax", t.cast(logits, FP32), "softmax (float32)", comp,
                    saves="output", out="router probabilities")
    values, chosen = t.topk(probs, ("E",), ("k",), "top-k experts", comp,
                            out="chosen experts", values=True)
    weights = t.name(values, "router top-k weights")
    if renormalise is not None:
        weights = renormalised(t, weights, renormalise)
    if post is not None:
        weights = post(self, weights, chosen)
    return logits, weights


__all__ = ["renormalised", "softmax_top_k"]
