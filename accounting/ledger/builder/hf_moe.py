"""transformers' sparse MoE blocks with its default experts kernel for training
(integrations/moe.py grouped_mm_experts_forward, transformers 5.23), where model/
dispatches by its own index ops (builder/moe.py MoE: `self` below); each save measured
with saved-tensor hooks on transformers' own models on the CPU (tests/
test_transformers_saves.py, test_transformers_eager.py, test_transformers_deepseek.py)."""
from __future__ import annotations

from accounting.ledger import autocast as AC, records as R
from accounting.units import FP32
from accounting.ledger.trace import Sym
from accounting.ledger.builder.common import ROUTER, BIAS
from accounting.ledger.builder import hf_gemma4
from accounting.ledger.builder.router import renormalised, softmax_top_k
from accounting.ledger.builder.layers import activation, clamped_swiglu


def forward(self, x: Sym, router_x: Sym | None = None) -> Sym:
    """Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock (GptOssMLP, DeepseekV3MoE: their
    routers below, DeepSeek's shared experts after) with transformers' default experts
    kernel for training (integrations/moe.py grouped_mm_experts_forward), where model/
    dispatches by its own index ops: the router's F.linear, softmax in float32 (saves its
    output), top-k (saves the indices), the renormalisation in place (Mixtral, or
    norm_topk_prob); then the S = B·T·k slots sorted by expert: the tokens gathered by
    perm // k and the weights by perm (each index saved), one grouped matmul with the
    stacked gate_up_proj (E, 2·d_e, d) that saves its input and the int32 offsets, SiLU
    on the gate half and the product with the up half (both halves one storage), the
    grouped down_proj, the routing weights' product (saves both), the slots put back by
    inv_perm (saved) and summed over k. router_x: Gemma 4's router input (the residual
    stream; the experts run on its pre_feedforward_layernorm_2, x)."""
    t, c, comp = self.t, self.c, ROUTER
    slots = ("B", "T", "k")
    if c.router_scales_input:  # Llama4TextMoe: every expert runs every token
        return llama4(self, x)
    if self.gains is not None:  # Gemma4TextRouter: its input and weights (builder/hf_gemma4.py)
        logits, weights = softmax_top_k(self, x if router_x is None else router_x,
                                        pre=hf_gemma4.router_input,
                                        renormalise="renormalise (in place)",
                                        post=hf_gemma4.per_expert_scale)
    elif c.router == "sigmoid":  # DeepseekV3TopkRouter
        logits, weights = deepseek_router(self, x)
    elif c.mla:  # DeepseekV2TopkRouter
        logits, weights = deepseek_v2_router(self, x)
    elif t.hf_oss:  # GptOssTopKRouter: F.linear (+ bias), the top k logits, then softmax
        # over the k in their own dtype (softmax(…, dtype=router_top_value.dtype))
        logits = self.router(x, "router scores")
        values, _ = t.topk(logits, ("E",), ("k",), "top-k logits", comp,
                           out="chosen experts", values=True)
        weights = t.unary("aten.softmax", values, "softmax over the k", comp,
                          saves="output", out="router weights")
    else:  # Qwen3MoeTopKRouter, MixtralTopKRouter: router_top_value /= …sum(-1)
        logits, weights = softmax_top_k(self, x, renormalise="renormalise"
                                        if c.norm_topk_prob else None)
    if c.norm_topk_prob and (c.router == "sigmoid" or t.hf_oss) and not c.mla \
            and self.gains is None:  # (the routers above that do not renormalise)
        weights = renormalised(t, weights)
    if c.mlp not in ("swiglu", "swiglu_clamped") and not (c.mlp == "geglu" and t.hf_gemma4):
        raise AssertionError("transformers' MoE: (clamped) SwiGLU or Gemma 4's GeGLU experts")
    if c.qk_norm == "head" and self.gains is None:  # Qwen3-MoE: router_top_value.to(
        # router_logits.dtype); Mixtral (no QK-norm) and Gemma 4 keep the float32 weights
        weights = t.cast(weights, logits.dtype, "router weights (cast)")
    perm = t.name(t.fresh(slots, R.INT64), "slot order (by expert)")
    token = t.name(t.fresh(slots, R.INT64), "token of each slot (perm // k)")
    w = t.name(t.index(weights, perm, slots, "weights in slot order"), "slot weights")
    routed = t.name(t.index(x, token, slots + ("d_model",), "the slots' tokens"),
                    "routed tokens")
    offsets = t.name(t.fresh(("E",), R.INT32), "grouped_mm offsets (int32)")
    # gpt-oss (has_bias): gate_up_proj_bias[expert_ids_g] and down_proj_bias[…], each
    # an index by the sorted expert ids (saved, one storage), added in place (add_)
    ids = t.name(t.fresh(slots, R.INT64), "sorted expert ids") if self.b else None
    with t.scope("experts"):
        self._lora_fold()
        note = "grouped_mm over the routed slots"

        def grouped(a, weight, name, n, p):
            # grouped_mm is not autocast-enabled: transformers casts the input to the
            # weight's dtype (_grouped_mm: input.to(weight.dtype)), so under bf16
            # autocast over fp32 weights the experts run in fp32
            a = t.cast(a, weight.dtype, "")
            dtype = t.matmul(a, weight, R.Matmul(name, R.FFN, t.module, t.repeat,
                                                 R.FORWARD, (), slots, n, p,
                                                 grads=("dX", "dW"), note=note),
                             op="grouped_mm")
            t._saves(offsets, "grouped_mm")
            return dtype

        def bias(y, n, width):  # out.add_(bias[expert_ids_g]): the index saves the ids
            if ids is None:
                return y
            t.index(self.b[n], ids, slots + width, "expert bias")
            return t.binary("aten.add", y, self.b[n], "+ expert bias", BIAS)
        d, f = ("d_model",), ("d_e",)
        dtype = grouped(routed, self.w1, "expert W1", d, f)
        grouped(routed, self.w3, "expert W3", d, f)
        gate_up = t.name(Sym(slots + ("2", "d_e"), dtype, True), "expert gate_up output")
        if ids is not None:  # gate_up_proj_bias (E, 2·d_e): the gate's and the up's
            for n in ("1", "3"):
                bias(t.view(gate_up, slots + f, contiguous=False), n, f)
        # gpt-oss interleaves them (gate_up[..., ::2], [..., 1::2]), the others
        # concatenate (chunk(2)): either way two views of one storage
        gate = t.view(gate_up, slots + f, contiguous=False)
        up = t.view(gate_up, slots + f, contiguous=False)
        if c.mlp == "swiglu_clamped":  # GptOssExperts._apply_gate
            g = clamped_swiglu(t, gate, up, self.component, "expert gated product")
        elif c.mlp == "geglu":  # Gemma4TextExperts' act_fn: GELUTanh, one op (saves its input)
            act = activation(t, "gelu_tanh", gate, self.component, "")
            g = t.binary("aten.mul", act, up, "expert gate", self.component,
                         out="expert gated product")
        else:
            act = t.unary("aten.silu", gate, "SiLU", self.component, saves="input",
                          out="SiLU output")
            g = t.binary("aten.mul", act, up, "expert gate", self.component,
                         out="expert gated product")
        out = bias(Sym(slots + d, grouped(g, self.w2, "expert W2", f, d), True), "2", d)
        out = t.name(out, "expert outputs")
    out = t.binary("aten.mul", out, t.view(w, slots + ("1",)), "× router weight", comp,
                   out="weighted expert outputs")
    back = t.name(t.fresh(slots, R.INT64), "inverse slot order")
    out = t.index(out, back, slots + d, "back to token order")
    y = t.reduce("aten.sum", t.view(out, ("B", "T", "d_model", "k"), contiguous=False),
                 ("k",), "sum over the k slots", comp)
    y = t.cast(y, x.dtype)
    if self.shared is not None:  # DeepseekV3MoE: + shared_experts(residuals), a dense MLP
        sh = shared_mlp(self, x)
        if self.shared_gate is not None:  # Qwen3NextSparseMoeBlock: F.sigmoid(
            # shared_expert_gate(x)) * shared_expert_output, both saved by the product
            z = self.shared_gate(x, "shared expert gate logit")
            s = t.unary("aten.sigmoid", z, "sigmoid(gate)", comp, saves="output",
                        out="shared expert gate")
            sh = t.binary("aten.mul", sh, s, "shared · gate", comp, out="gated shared output")
        y = t.binary("aten.add", y, sh, "routed + shared", comp)
    return y


def fp32_linear(self, x: Sym) -> Sym:
    """DeepSeek's routers: F.linear(hidden_states.type(torch.float32),
    self.weight.type(torch.float32)): copies where the dtypes differ (bf16 parameters),
    autocast's bf16 copies under autocast."""
    t = self.t
    with t.scope(self.router.name):
        xf = t.cast(x, FP32, "router input (fp32 copy)")
        wf = t.cast(self.router.weight, FP32)
        dtype = t.matmul(xf, wf, R.Matmul("router", R.FFN, t.module, t.repeat, R.FORWARD, (),
                                          ("B", "T"), ("d_model",), ("E",),
                                          grads=("dX", "dW")), linear=True)
    return t.name(Sym(("B", "T", "E"), dtype, True), "router scores")


def deepseek_v2_router(self, x: Sym) -> tuple[Sym, Sym]:
    """DeepseekV2TopkRouter.forward (modeling_deepseek_v2.py, 5.23): the float32 linear,
    softmax in float32 (saves its output); group_limited_greedy: each group's best score
    and the top groups off the gradient path, the other groups' scores zeroed by
    masked_fill (saves its bool mask); the top k (saves the indices) are the weights, times
    routed_scaling_factor (norm_topk_prob is not read)."""
    t, c, comp = self.t, self.c, ROUTER
    tokens = ("B", "T")
    logits = fp32_linear(self, x)
    probs = t.unary("aten.softmax", t.cast(logits, FP32), "softmax (float32)", comp,
                    saves="output", out="router probabilities")
    if c.router_groups > 1:
        grouped = t.view(t.off_gradient_path(probs), tokens + ("G", "E/G"))
        best = t.reduce("aten.max", grouped, ("E/G",), "group score (its best)", comp)
        t.topk(best, ("G",), ("k_G",), "top groups", comp, out="router top groups")
        keep = t.name(t.fresh(tokens + ("E",), R.BOOL), "router group mask")
        probs = t.masked_fill(probs, keep, "zero the other groups", comp)
    values, _ = t.topk(probs, ("E",), ("k",), "top-k experts", comp, out="chosen experts",
                       values=True)
    weights = t.name(values, "router top-k weights")
    if c.routed_scaling_factor != 1.0:
        weights = t.binary("aten.mul", weights, None, "× routed_scaling_factor", comp)
    return logits, weights


def deepseek_router(self, x: Sym) -> tuple[Sym, Sym]:
    """DeepseekV3TopkRouter.forward: F.linear(x.float(), weight.float()) (under autocast
    the linear's bf16 copies), sigmoid (saves its output), the choice off the gradient
    path (+ e_score_correction_bias, each group's two best summed, the top groups, the
    others masked, the top k), the chosen scores gathered (saves the indices), divided by
    their sum + 1e-20 in place (saves the sum and a copy of the gathered scores) and
    scaled by routed_scaling_factor."""
    t, c, comp = self.t, self.c, ROUTER
    tokens = ("B", "T")
    logits = fp32_linear(self, x)
    scores = t.unary("aten.sigmoid", logits, "sigmoid", comp, saves="output",
                     out="router probabilities")
    choice = t.binary("aten.add", t.off_gradient_path(scores), self.bias,
                      "+ correction bias", comp)
    if c.router_groups > 1:
        grouped = t.view(choice, tokens + ("G", "E/G"))
        best2, _ = t.topk(grouped, ("E/G",), ("2",), "top-2 in each group", comp,
                          out="router top-2 per group", values=True)
        group_score = t.reduce("aten.sum", best2, ("2",), "group score", comp)
        t.topk(group_score, ("G",), ("k_G",), "top groups", comp, out="router top groups")
        keep = t.name(t.fresh(tokens + ("E",), R.BOOL), "router group mask")
        choice = t.masked_fill(choice, keep, "zero the other groups", comp)
    experts = t.topk(choice, ("E",), ("k",), "top-k experts", comp, out="chosen experts")
    weights = t.name(t.gather(scores, experts, "chosen scores"), "chosen experts' scores")
    if c.norm_topk_prob:
        weights = renormalised(t, weights, eps="+ 1e-20")
    if c.routed_scaling_factor != 1.0:
        weights = t.binary("aten.mul", weights, None, "× routed_scaling_factor", comp)
    return logits, weights



def shared_mlp(self, x: Sym) -> Sym:
    """The shared expert(s): a dense gated MLP on the block's input (Llama4TextMLP,
    DeepseekV3MLP), F.silu saving its input."""
    t = self.t
    w1, w2, w3 = self.shared
    with t.scope("shared"):
        g = activation(t, self.kind.activation, w1(x, "shared W1 output"), self.component, "")
        g = t.binary("aten.mul", g, w3(x, "shared W3 output"), "shared gate", self.component,
                     out="shared gated product")
        return w2(g, "shared W2 output")


def llama4(self, x: Sym) -> Sym:
    """Llama4TextMoe.forward (models/llama4/modeling_llama4.py, 5.23): Llama4Router (an
    nn.Linear; top-k of the logits, saving the indices; scatter_ into −inf, which saves
    them too; sigmoid of its float() copy, saving its output, cast back), the tokens
    repeated E times (a new tensor) times the scores laid out expert-major (a copy): the
    product saves both; Llama4TextExperts: one bmm with the stacked gate_up_proj (E, d,
    2·d_e) over E·B·T rows (saves its input), SiLU of the gate half (saves the stacked
    output) times the up half (saves SiLU's output), the down bmm (saves the product); the
    shared expert's output plus the expert outputs summed over E (in place)."""
    t, c, comp = self.t, self.c, ROUTER
    tokens, E = ("B", "T"), ("E",)
    logits = self.router(x, "router scores")
    values, chosen = t.topk(logits, E, ("k",), "top-k logits", comp, out="chosen experts",
                            values=True)
    scores = t.scatter(tokens + E, chosen, values, "router scores (−inf but the top k)")
    probs = t.unary("aten.sigmoid", t.cast(scores, FP32), "sigmoid (float32)", comp,
                    saves="output", out="router probabilities")
    probs = t.cast(probs, logits.dtype, "router probabilities (cast back)")
    rows = E + tokens
    rep = t.name(t.copy(x, rows + ("d_model",)), "tokens repeated over the experts")
    gate = t.name(t.copy(probs, rows + ("1",)), "router scores, expert-major (copy)")
    routed = t.binary("aten.mul", rep, gate, "tokens × router score", comp,
                      out="expert inputs (scaled by the router)")
    note = "every expert runs every token (the unchosen at weight 0): E·B·T rows, B·T·k useful"
    d, f = ("d_model",), ("d_e",)
    with t.scope("experts"):
        self._lora_fold()

        def bmm(a, w, name, n, p):
            return t.matmul(a, w, R.Matmul(name, R.FFN, t.module, t.repeat, R.FORWARD, (), rows,
                                           n, p, grads=("dX", "dW"), note=note,
                                           useful=("B", "T", "k") + n + p))
        w1, w3, a = self.w1, self.w3, routed
        if AC.policy(t.autocast, "bmm") == AC.LOWER:  # one bmm, one cast of each operand:
            # the input's and the stacked gate_up_proj's (both halves one bf16 storage)
            a = t.cast(routed, AC.LOW_DTYPE, "expert inputs (bf16 copy)")
            w1 = t.cast(self.w1, AC.LOW_DTYPE)
            if w1 is not self.w1:  # (bf16 weights, a frozen LoRA base: no copy)
                n = t.named[w1.storage]
                n.label = "bf16 copy of the stacked gate_up_proj"
                n.shape = ("E", "2", "d_e", "d_model")
                w3 = t.view(w1)
                t.mark_matmul_weight(self.w1, self.w3)
        dtype = bmm(a, w1, "expert W1", d, f)
        bmm(a, w3, "expert W3", d, f)
        gate_up = t.name(Sym(rows + ("2", "d_e"), dtype, True), "expert gate_up output")
        act = t.unary("aten.silu", t.view(gate_up, rows + f, contiguous=False), "SiLU",
                      self.component, saves="input", out="SiLU output")
        g = t.binary("aten.mul", t.view(gate_up, rows + f, contiguous=False), act,
                     "up · SiLU(gate)", self.component, out="expert gated product")
        out = t.name(Sym(rows + d, bmm(g, self.w2, "expert W2", f, d), True), "expert outputs")
    routed_out = t.reduce("aten.sum", t.view(out, tokens + d + E, contiguous=False), E,
                          "sum over the experts", comp)
    return t.binary("aten.add", shared_mlp(self, x), routed_out, "shared + experts (add_)",
                    comp)
