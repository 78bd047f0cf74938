"""transformers' Gemma 4 text model (Gemma4ForCausalLM, models/gemma4/modeling_gemma4.py,
transformers 5.23.0), where its modules differ from the Llama ones the builder runs for the
other families; each save measured with saved-tensor hooks on transformers' own model on
the CPU (tests/test_transformers_gemma4.py). Read from the modeling file:

- Gemma4PreTrainedModel._supports_sdpa = True: transformers picks SDPA (no attention
  soft-cap; Gemma4TextAttention.scaling = 1.0, the QK-norm carries the scale), the sliding
  layers' mask from T = W on (Attention.hf_masked), the full layers unmasked.
- Gemma4RMSNorm: x.float(); mean(x²) + eps; x · pow(·, −0.5) (torch.pow, not rsqrt: the
  pow saves its input, the B×T mean square, and the product saves the pow's output too);
  with_scale: · weight.float() (a plain gain, no 1 + w); type_as(x). v_norm and the
  router's norm are with_scale=False.
- Gemma4TextScaledWordEmbedding: the lookup × embed_scale.to(weight.dtype), a 0-dim buffer
  (persistent=False) the product saves; embed_tokens_per_layer is one too (× √d_ple).
- Gemma4TextRouter: norm(x) · scale · d^-½ (router_input), proj, softmax in float32 (saves
  its output), top-k (saves its indices), /= their sum (in place): the softmax routers' own
  sequence (builder/router.py softmax_top_k); then · per_expert_scale[top_k_index].
- Gemma4TextExperts (@use_experts_implementation): grouped_mm by default in training
  (builder/hf_moe.py), GELUTanh on the gate half.
"""
from __future__ import annotations

from accounting.units import FP32
from accounting.ledger.trace import Sym
from accounting.ledger.builder.common import ROUTER


def rms_norm(t, x: Sym, width: tuple[str, ...], component: str, m: str, out_label: str,
             weight: Sym | None = None, course: str = "") -> Sym:
    """Gemma4RMSNorm.forward on x over `width` (weight None: with_scale=False)."""
    in_dtype = x.dtype
    x = t.cast(x, FP32, f"{m} input (fp32 copy)")  # hidden_states.float()
    sq = t.unary("aten.pow", x, "x²", component, saves="input")
    ms = t.reduce("aten.mean", sq, width, f"mean over {'·'.join(width)}", component)
    e = t.binary("aten.add", ms, None, "+ eps", component, out=f"{m} mean(x²) + eps")
    r = t.unary("aten.pow", e, "pow(·, −0.5)", component, saves="input",
                out=f"{m} pow(mean(x²) + eps, −0.5)")
    y = t.binary("aten.mul", x, r, "x · pow(…)", component, out=f"{m} x / rms")
    if weight is not None:  # normed_output * self.weight.float()
        y = t.binary("aten.mul", y, t.cast(weight, FP32), "· gain", component)
    return t.name(t.cast(y, in_dtype), out_label, course)


def router_input(self, x: Sym) -> Sym:
    """Gemma4TextRouter.forward before its proj (the rest: builder/router.py softmax_top_k):
    norm(x) (with_scale=False) · scale · d^-½ on the residual stream (B·T, d)."""
    t, comp = self.t, ROUTER
    scale, _ = self.gains
    with t.scope("router"):
        h = rms_norm(t, x, ("d_model",), comp, f"{t.module}.norm", "router input normed")
        h = t.binary("aten.mul", h, scale, "· scale", comp, out="router input · scale")
        return t.name(t.binary("aten.mul", h, None, "· d^-½", comp), "router input (scaled)")


def per_expert_scale(self, weights: Sym, chosen: Sym) -> Sym:
    """Gemma4TextRouter.forward after the renormalisation: top_k_weights ·
    per_expert_scale[top_k_index], the float32 (B·T·k) weights grouped_mm_experts_forward
    reads. The index of the (E,) parameter saves the indices (topk's own storage), then
    the product saves both operands."""
    t, comp = self.t, ROUTER
    _, per_expert = self.gains
    gains = t.name(t.index(per_expert, chosen, ("B", "T", "k"), "per-expert scale"),
                   "per-expert scale of the chosen")
    return t.binary("aten.mul", weights, gains, "· per_expert_scale", comp,
                    out="router weights (scaled)")


def checkpoint_kept(t, a, kind) -> tuple[Sym, ...]:
    """What a Gemma4TextDecoderLayer under gradient checkpointing (--recompute full) keeps
    beyond its input and the sliding layers' cos/sin (transformer.Block): the full layers'
    cos/sin, the per-layer inputs its slice is a view of (one storage for every layer),
    and in a KV-sharing layer the store layer's K and V, which the shared_kv_states dict
    it is passed holds (one pair per layer type for the model, not one per layer).
    Measured against the live bytes of a real CPU step of Gemma4ForCausalLM with
    gradient_checkpointing_enable() (tests/test_transformers_gemma4.py)."""
    kept = list(getattr(a, "global_tables", None) or ())
    if a.ple is not None:
        kept.append(a.ple)
    if kind is not None and kind.shared:
        if kind.local not in a.held_kv:
            a.held_kv[kind.local] = tuple(
                _once(t, x, f"{what} of the store layer (held by shared_kv_states)")
                for x, what in zip(a.shared_kv[kind.local], ("K", "V")))
        kept.extend(a.held_kv[kind.local])
    return tuple(kept)


def _once(t, x: Sym, label: str) -> Sym:
    """A tensor named once for the model (not once per layer of the kind naming it)."""
    outer, t.repeat = t.repeat, None
    try:
        return t.name(Sym(x.shape, x.dtype, x.grad, x.contiguous), label)
    finally:
        t.repeat = outer


__all__ = ["checkpoint_kept", "per_expert_scale", "rms_norm", "router_input"]
