"""The mixture-of-experts layer: model/moe.py's ops, as facts."""
from __future__ import annotations

import math
from fractions import Fraction

from accounting.ledger import records as R
from accounting.architecture.config import ModelConfig
from accounting.ledger.trace import Sym, Trace
from accounting.ledger.builder.common import ROUTER, ACTIVATION_COMPONENT, BIAS
from accounting.ledger.builder import hf_moe, lora
from accounting.ledger.builder.router import renormalised
from accounting.ledger.builder.layers import Linear, activation, clamped_swiglu, l2_norm


def expert_capacity(capacity_factor: float, slots: int, num_experts: int) -> int:
    """Rows each expert runs under a capacity factor: ⌈c·slots/E⌉, exact (GShard, Switch).
    The ledger's formula; model/moe.py computes its own (the cross-check compares the two)."""
    return math.ceil(Fraction(capacity_factor) * slots / num_experts)


class MoE:
    """Router (a linear map to E scores, biased for gpt-oss; softmax, or a sigmoid with
    DeepSeek-V3's bias; group-limited choice by a group's two best scores (V3) or its best
    (V2); or gpt-oss's top-k of the logits before the softmax over the k), top-k, the routed token slots gathered, run through E stacked
    experts (gated, or two matrices for relu2), weighted and added back; shared experts beside. Dropless: B·T·k slots,
    whatever the routing (on meta the model deals them in turn); with a capacity factor,
    E·C slots (C = ⌈c·B·T·k/E⌉), of which B·T·k at most are useful."""

    def __init__(self, t: Trace, c: ModelConfig, scope: str = "ffn"):
        self.t, self.c, self.kind, self.scope = t, c, c.mlp_kind, scope
        d, f, E = ("d_model",), ("d_e",), ("E",)
        # the routed experts' width: d_model, or Nemotron-H's latent d_l between fc1 and fc2
        self.dm = d if c.moe_latent_size is None else ("d_l",)
        dm = self.dm
        self.component = ACTIVATION_COMPONENT[c.mlp]
        with t.scope(scope):
            # a module's own buffers come before its children's keys in the state dict
            # (transformers' e_score_correction_bias is made in the default dtype: bf16 in
            # a model built with dtype=torch.bfloat16; DeepseekV32TopkRouter makes it with
            # dtype=torch.float32: modeling_deepseek_v32.py, 5.23, measured in bf16)
            fp32 = not t.hf or c.index_topk is not None
            self.bias = (t.buffer("router_bias", E, 4 if fp32 else R.DTYPE_BYTES[t.param_dtype],
                                  persistent=True)
                         if c.router_bias and not c.router_bias_param else None)
            # Gemma4TextRouter: a gain on its normalized input (scale) and one per expert
            # on the chosen weights (per_expert_scale): the module's own, before its children
            self.gains = ((t.param("router_scale", d, R.FFN), t.param("expert_scale", E, R.FFN))
                          if c.mlp_beside_moe else None)
            self.router = Linear(t, "router", d, E, R.FFN, "router", c.router_linear_bias)
            if c.router_bias_param:  # ERNIE 4.5: a frozen parameter (model/moe.py RouterStatics)
                with t.scope("router_statics"):
                    self.bias = t.param("bias", E, R.FFN, requires_grad=False)
            with t.scope("experts"):
                self.w1 = t.param("w1", E + f + dm, R.FFN, dims=(1, len(f), len(dm)))
                self.w2 = t.param("w2", E + dm + f, R.FFN, dims=(1, len(dm), len(f)))
                # two matrices where the MLP is not gated (Nemotron-H's squared-ReLU experts)
                self.w3 = (t.param("w3", E + f + dm, R.FFN, dims=(1, len(f), len(dm)))
                           if self.kind.gated else None)
                self.b = {}
                if c.expert_bias:  # gpt-oss: (E, width) each, after w1, w2, w3
                    for n, width in (("1", f), ("2", dm), ("3", f))[:3 if self.kind.gated else 2]:
                        self.b[n] = t.param("b" + n, E + width, R.FFN, dims=(1, len(width)))
            self.shared = None
            if c.num_shared_experts:
                sf = ("d_s",)
                with t.scope("shared"):
                    self.shared = (Linear(t, "w1", d, sf, R.FFN, "shared expert W1"),
                                   Linear(t, "w2", sf, d, R.FFN, "shared expert W2"),
                                   Linear(t, "w3", d, sf, R.FFN, "shared expert W3")
                                   if self.kind.gated else None)
            # Qwen2-MoE: sigmoid(x·w) scales the shared output (model/moe.py shared_gate)
            self.shared_gate = (Linear(t, "shared_gate", d, ("1",), R.FFN, "shared expert gate")
                                if c.shared_expert_gate else None)
            # Nemotron-H (moe_latent_size): the routed tokens projected to d_l, the experts'
            # sum back to d_model (NemotronHMoE's fc1_latent_proj, fc2_latent_proj)
            self.latent = None if c.moe_latent_size is None else (
                Linear(t, "fc1_latent", d, dm, R.FFN, "latent projection (in)"),
                Linear(t, "fc2_latent", dm, d, R.FFN, "latent projection (out)"))

    def __call__(self, x: Sym, out_course: str, router_x: Sym | None = None) -> Sym:
        """router_x: the router's input where it is not the experts' (Gemma 4 routes the
        residual stream and runs the experts on pre_feedforward_layernorm_2 of it)."""
        t, c, comp = self.t, self.c, ROUTER
        if t.hf:  # transformers' sparse MoE block (accounting/planning/recipes.py: which)
            with t.scope(self.scope):
                y = hf_moe.forward(self, x, router_x)
            return t.name(y, "W2 output", out_course)
        with t.scope(self.scope):
            weights = self.route(x if router_x is None else router_x)
            if c.router_scales_input:
                y = self._all_experts(x, weights)
            elif self.latent is not None:
                fc1, fc2 = self.latent
                y = t.name(self._dispatched(fc1(x, "latent experts' input"), weights),
                           "latent experts' sum (fc2_latent input)")
                y = fc2(y, "latent experts' output")
            else:
                y = self._dispatched(x, weights)
            if self.shared is not None:
                w1, w2, w3 = self.shared
                with t.scope("shared"):
                    a = w1(x, "shared W1 output")
                    if self.kind.activation == "silu_clamped":  # as GatedMLP: both halves
                        g = clamped_swiglu(t, a, w3(x, "shared W3 output"), self.component,
                                           "shared gated product")
                    else:
                        g = activation(t, self.kind.activation, a, self.component, "")
                        if w3 is not None:
                            b = w3(x, "shared W3 output")
                            g = t.binary("aten.mul", g, b, "shared gate", self.component,
                                         out="shared gated product")
                    sh = w2(g, "shared W2 output")
                if self.shared_gate is not None:  # sigmoid(gate(x)) · shared: (B, T, 1) broadcast
                    z = self.shared_gate(x, "shared expert gate logit")
                    s = t.unary("aten.sigmoid", z, "sigmoid(gate)", comp, saves="output",
                                out="shared expert gate")
                    sh = t.binary("aten.mul", sh, s, "shared · gate", comp,
                                  out="gated shared output")
                y = t.binary("aten.add", y, sh, "routed + shared", comp)
        return t.name(y, "W2 output", out_course)

    def _all_experts(self, x: Sym, weights: Sym) -> Sym:
        """Llama 4 (MoE._all_experts): each token's chosen weights scattered into an E-wide
        gate (zero elsewhere), every expert's input the tokens scaled by its gate, all E
        experts run on all B·T tokens (E·B·T rows executed, the B·T·k chosen useful), and the
        expert outputs summed over the experts."""
        t, comp = self.t, ROUTER
        tokens = ("B", "T")
        gate = t.name(t.scatter(tokens + ("E",), self.chosen, weights, "router gate"),
                      "router gate (zero but the chosen experts)")
        xs = t.view(x, ("E",) + tokens + ("d_model",))  # broadcast over the experts
        routed = t.binary("aten.mul", xs, t.view(gate, ("E",) + tokens, contiguous=False),
                          "expert input × router weight", comp,
                          out="expert inputs (scaled by the router)")
        out = self._experts(routed, ("E",) + tokens)
        # out.sum(dim=0): one add per expert output element (a reduction over the leading E)
        return t.reduce("aten.sum", t.view(out, tokens + ("d_model", "E"), contiguous=False),
                        ("E",), "sum over the experts", comp)

    def _dispatched(self, x: Sym, weights: Sym) -> Sym:
        """The routed token slots gathered, run through their experts, weighted, added back."""
        t, c, comp = self.t, self.c, ROUTER
        tokens, slots = ("B", "T"), ("B", "T", "k")
        # the slots (token-major), ordered by expert: int ops, no FLOPs
        order = t.name(t.fresh(slots, R.INT64), "slot order (by expert)")
        token = t.name(t.fresh(slots, R.INT64), "token of each slot")
        slot_w = t.name(t.index(weights, order, slots, "weights in slot order"), "slot weights")
        routed = t.name(t.index(x, token, slots + self.dm, "the slots' tokens"),
                        "routed tokens")
        if c.moe_capacity_factor is None:  # dropless
            out = self._experts(routed, slots)
        else:  # E·C rows (a slot beyond C goes to a trash row), then back to the slots
            dest = t.name(t.fresh(slots, R.INT64), "dispatch row of each slot")
            rows = t.name(t.index_copy(("E·C+1",) + self.dm, dest, routed, "dispatch"),
                          "dispatched rows (E·C + a trash row)")
            ran = self._experts(t.view(rows, ("E", "C") + self.dm), ("E", "C"))
            padded = t.cat((ran,), ("E·C+1",) + self.dm)
            out = t.name(t.index(padded, dest, slots + self.dm, "back to the slots"),
                         "expert outputs, back in slot order")
        out = t.binary("aten.mul", out, slot_w, "× router weight", comp,
                       out="weighted expert outputs")
        out = t.cast(out, x.dtype, "weighted expert outputs (cast to the tokens' dtype)")
        return t.index_add(tokens + self.dm, token, out, "add back to the tokens", comp)

    def _lora_fold(self) -> None:
        """PEFT's ParamWrapper on the stacked expert weights a LoRA plan targets
        (builder/lora.py experts): the matmuls below read the folded weights."""
        ad = self.t.adapters
        if ad is None or not ad.experts:
            return
        f = ("d_e",)
        # the stored weights, not a previous call's folded ones (a recomputed forward)
        w1, w2, w3 = self.__dict__.setdefault("_unfolded", (self.w1, self.w2, self.w3))
        folded = lora.experts(self.t, {"w1": (w1, f, self.dm), "w3": (w3, f, self.dm),
                                       "w2": (w2, self.dm, f)})
        for n, w in folded.items():
            setattr(self, n, w)

    def route(self, x: Sym) -> Sym:
        """MoE.route: the router's scores, the chosen experts and their weights (B, T, k)."""
        t, c, comp = self.t, self.c, ROUTER
        tokens = ("B", "T")
        if self.gains is not None:  # Gemma4TextRouter: norm(x) · scale · d_model^-½
            x = l2_norm(t, x, "d_model", "router input, normalized", comp)
            x = t.binary("aten.mul", x, self.gains[0], "× router scale", comp)
            x = t.binary("aten.mul", x, None, "× d_model^-½", comp, out="router input")
        logits = self.router(x, "router scores")
        if c.router == "sparsemixer":  # Phi-3.5-MoE
            return self._sparsemixer(logits)
        if c.router_topk_first:  # gpt-oss: the k best logits, then softmax (or sigmoid) over k
            # (Llama 4's sigmoid of the chosen k: its experts' indices kept for the gate)
            values, self.chosen = t.topk(logits, ("E",), ("k",), "top-k logits", comp,
                                         out="chosen experts", values=True)
            values = t.name(values, "router top-k logits")
            return t.name(self._scaled(self._score(values, ("k",), "the k")), "router weights")
        scores = self._score(logits, ("E",), "experts")
        # Only the chosen indices leave the choice: its ops are off the gradient path.
        choice = t.off_gradient_path(scores)
        if self.bias is not None:
            choice = t.binary("aten.add", choice, self.bias, "+ correction bias", comp)
        if c.router_groups > 1:  # keep the best topk_groups groups, by their score
            grouped = t.view(choice, tokens + ("G", "E/G"))
            if c.router_group_score == "max":  # DeepSeek-V2: each group's best score
                group_score = t.reduce("aten.max", grouped, ("E/G",), "group score (its best)",
                                       comp)  # max(dim).values: saves its int64 indices only
            else:  # DeepSeek-V3: the sum of each group's two best
                best2, _ = t.topk(grouped, ("E/G",), ("2",), "top-2 in each group", comp,
                                  out="router top-2 per group", values=True)
                group_score = t.reduce("aten.sum", best2, ("2",), "group score", comp)
            t.topk(group_score, ("G",), ("k_G",), "top groups", comp, out="router top groups")
            keep = t.name(t.fresh(tokens + ("E",), R.BOOL), "router group mask")
            choice = t.masked_fill(choice, keep, "zero the other groups", comp)
        experts = t.topk(choice, ("E",), ("k",), "top-k experts", comp, out="chosen experts")
        weights = t.name(t.gather(scores, experts, "chosen scores"), "chosen experts' scores")
        weights = self._scaled(weights)
        if self.gains is not None:  # × per_expert_scale[top_k_index]
            s = t.name(t.index(self.gains[1], experts, tokens + ("k",), "per_expert_scale"),
                       "the chosen experts' scales")
            weights = t.binary("aten.mul", weights, s, "× per-expert scale", comp,
                               out="router weights (per-expert scaled)")
        return t.name(weights, "router weights")

    def _sparsemixer(self, logits: Sym) -> Sym:
        """model/moe.py's sparsemixer (modeling_phimoe.py's inference form), two rounds:
        under no_grad the best score m of `src` (the scores; then the scores with the first
        choice at −inf), |scores| clamped from below by m, (m − scores)/that, compared with
        2·eps (a bool); src masked where it is beyond, a softmax, the best's weight."""
        t, comp = self.t, ROUTER
        rows, E = ("B", "T"), ("E",)
        src, weights, chosen = logits, [], None
        for r in ("first", "second"):
            ng = t.off_gradient_path(logits)
            m = t.reduce("aten.max", t.off_gradient_path(src), E, f"{r}: max over experts",
                         comp)
            factor = t.binary("aten.clamp", t.unary("aten.abs", ng, f"{r}: |scores|", comp),
                              m, f"{r}: clamp(min=max)", comp)
            # (m − scores: the (B, T, E) operand first, for the output's shape)
            gap = t.binary("aten.div", t.binary("aten.sub", ng, m, f"{r}: max − scores", comp),
                           factor, f"{r}: ÷ factor", comp)
            mask = t.name(t.fresh(rows + E, R.BOOL), f"{r} SparseMixer mask (gap > 2·eps)")
            del gap  # (the comparison: a bool, 0 FLOPs)
            masked = t.name(t.masked_fill(src, mask, f"{r}: masked_fill −inf", comp),
                            f"{r} SparseMixer masked scores")
            probs = self._softmax(masked, E, "experts", f"{r} SparseMixer")
            idx = t.name(t.fresh(rows + ("1",), R.INT64), f"{r} expert (max index)")
            weights.append(t.name(t.gather(probs, idx, f"{r} weight"), f"{r} expert's weight"))
            if chosen is None:  # scatter(scores, −1, first, −inf): a copy, 0 FLOPs
                chosen = idx
                src = t.name(t.scatter(rows + E, idx, logits, "the first expert masked out"),
                             "scores without the first expert")
        self.chosen = t.name(t.fresh(rows + ("k",), R.INT64), "chosen experts")
        return t.name(t.cat(tuple(weights), rows + ("k",)), "router weights")

    def _softmax(self, x: Sym, over: tuple[str, ...], what: str, name: str = "router") -> Sym:
        """model/attention.py's softmax over `over`."""
        t, comp = self.t, ROUTER
        mx = t.reduce("aten.amax", x, over, f"max over {what}", comp, saves=True,
                      out=f"{name} max")
        e = t.unary("aten.exp", t.binary("aten.sub", x, mx, "x − max", comp), "exp", comp,
                    saves="output", out=f"{name} exp")
        total = t.reduce("aten.sum", e, over, f"sum over {what}", comp, out=f"{name} sum")
        return t.binary("aten.div", e, total, "exp / sum", comp, out=f"{name} probabilities")

    def _score(self, logits: Sym, over: tuple[str, ...], what: str) -> Sym:
        """The router's softmax (model/attention.py's) or sigmoid over `over`."""
        t, comp = self.t, ROUTER
        if self.c.router == "softmax":
            return self._softmax(logits, over, what)
        return t.unary("aten.sigmoid", logits, "sigmoid", comp, saves="output",
                       out="router probabilities")

    def _scaled(self, weights: Sym) -> Sym:
        """MoE._scaled: renormalised (norm_topk_prob) and scaled (routed_scaling_factor)."""
        t, c, comp = self.t, self.c, ROUTER
        if c.norm_topk_prob:
            weights = renormalised(t, weights)
        if c.routed_scaling_factor != 1.0:
            weights = t.binary("aten.mul", weights, None, "× routed_scaling_factor", comp)
        return weights

    def _experts(self, xs: Sym, rows: tuple[str, ...]) -> Sym:
        """Experts.forward on the routed rows: einsums with w1, w3 (activation, gate), w2.
        Under a capacity factor the E·C rows run; the B·T·k routed slots are the useful work."""
        t = self.t
        note = "routed token slots" if rows == ("B", "T", "k") else \
            "capacity: E·C rows run (padding included), B·T·k useful" if "C" in rows else \
            "every expert runs every token (the unchosen at weight 0): E·B·T rows, B·T·k useful"
        with t.scope("experts"):
            self._lora_fold()

            def mm(x, w, name, n, p):
                useful = None if rows == ("B", "T", "k") else ("B", "T", "k") + n + p
                return t.matmul(x, w, R.Matmul(name, R.FFN, t.module, t.repeat, R.FORWARD, (), rows,
                                               n, p, grads=("dX", "dW"), useful=useful, note=note))
            def linear(x, n, name, d_in, d_out, label, course):
                y = t.name(Sym(rows + d_out, mm(x, getattr(self, "w" + n), name, d_in, d_out)),
                           label, course)
                if n in self.b:  # (E, width): broadcast over each expert's rows
                    y = t.name(t.binary("aten.add", y, self.b[n], "+ expert bias", BIAS),
                               label + " + bias")
                return y
            d, f = self.dm, ("d_e",)
            a = linear(xs, "1", "expert W1", d, f, "expert W1 output", "W1")
            if self.kind.activation == "silu_clamped":  # gpt-oss: reads both halves
                b = linear(xs, "3", "expert W3", d, f, "expert W3 output", "W3")
                g = clamped_swiglu(t, a, b, self.component, "expert gated product")
            else:
                g = activation(t, self.kind.activation, a, self.component, "")
                if self.w3 is not None:
                    b = linear(xs, "3", "expert W3", d, f, "expert W3 output", "W3")
                    g = t.binary("aten.mul", g, b, "expert gate", self.component,
                                 out="expert gated product")
            return linear(g, "2", "expert W2", f, d, "expert outputs", "W2")
