"""A mixture-of-experts feed-forward layer (Mixtral, Qwen3-MoE, DeepSeek-V2/V3, gpt-oss), from
scratch.

Each token is routed to k of E experts (gated MLPs of width moe_d_ff, stacked as three
(E, ...) parameters) by a router: a linear map to E scores, a softmax (Mixtral, Qwen3) or
a sigmoid per expert (DeepSeek-V3, whose choice adds a bias, and is limited to the best
groups of experts first: by a group's two best scores, V3, or its best, V2); the chosen
experts' weights are renormalised and scaled. gpt-oss's router has a bias and takes the
top-k of its logits before a softmax over the k; its experts have biases and the clamped
SwiGLU (model/layers.py clamped_swiglu). Dropless
by default: every token runs its k experts, however the router spreads them, so the
matmul FLOPs are B·T·k expert passes whatever the routing. With a capacity factor c ≥ 1 every
expert runs exactly C = ⌈c·B·T·k/E⌉ rows: its first C slots, zero rows as padding; a slot
beyond C is dropped (its output is 0; the residual carries the token on).
Shared experts (DeepSeek) are one gated MLP of n_shared·moe_d_ff every token runs; Qwen2-MoE
scales their output by sigmoid(x·w), a gate of d_model weights (shared_expert_gate).
Llama 4 (router sigmoid with topk_first, scales_input): top-k of the raw scores, a sigmoid of the
chosen k, and the weight scales the expert's INPUT; as Meta's reference and transformers'
Llama4TextMoe run it, every expert runs every token (the unchosen at weight 0, so its output
is 0: no biases, act(0)·0 = 0) and the outputs are summed: E·n expert rows, n·k useful.

Which expert a token goes to depends on the data. On the meta device there is none: there
the token slots are dealt to the experts in turn (balanced), which changes no FLOP of a
dropless layer (tests/test_moe.py runs real routings on the CPU: all to one expert,
balanced, random).
"""

import math

import torch
from einops import einsum
from torch import nn

from .attention import softmax
from .layers import ACTIVATIONS, GatedMLP, Linear, check_positive_int, clamped_swiglu


def expert_capacity(capacity_factor: float, slots: int, num_experts: int) -> int:
    """C = ⌈c·slots/E⌉ rows per expert (GShard, Lepikhin et al. 2020, §2.2; Switch Transformer,
    Fedus et al. 2021, eq. 4), in exact arithmetic: the float c is the fraction it stores,
    so that no rounding of c·slots/E moves C across an integer. Written here, not imported
    from accounting/: the cross-check compares the model's rows with the ledger's."""
    numerator, denominator = float(capacity_factor).as_integer_ratio()
    return -(-numerator * slots // (denominator * num_experts))


class Experts(nn.Module):
    """E gated MLPs, stacked: w1, w3 (E, d_ff, d_model) and w2 (E, d_model, d_ff); with
    bias=True (gpt-oss) b1, b3 (E, d_ff) and b2 (E, d_model), added after each matmul."""

    def __init__(self, num_experts, d_model, d_ff, device=None, dtype=None, *, activation="silu",
                 bias=False):
        super().__init__()
        self.num_experts, self.act = num_experts, ACTIVATIONS.get(activation)  # None: clamped
        std = math.sqrt(2.0 / (d_model + d_ff))  # as Linear's init (section 3.4.1)
        shapes = {"w1": (d_ff, d_model), "w2": (d_model, d_ff), "w3": (d_ff, d_model)}
        for name, shape in shapes.items():
            w = nn.Parameter(torch.empty(num_experts, *shape, device=device, dtype=dtype))
            nn.init.trunc_normal_(w, mean=0.0, std=std, a=-3 * std, b=3 * std)
            setattr(self, name, w)
        if bias:  # zeros, as Linear's bias
            for name, width in (("b1", d_ff), ("b2", d_model), ("b3", d_ff)):
                setattr(self, name, nn.Parameter(torch.zeros(num_experts, width, device=device,
                                                             dtype=dtype)))

    def forward(self, x: torch.Tensor, counts: list[int]) -> torch.Tensor:
        # x: (slots d_model), grouped by expert, counts[e] slots for expert e
        if len(set(counts)) == 1:  # every expert alike: one batched matmul per matrix
            return self.batched(x.reshape(self.num_experts, counts[0], -1), None).reshape(x.shape)
        outs, start = [], 0
        for e, n in enumerate(counts):
            if n:
                outs.append(self.batched(x[start:start + n].unsqueeze(0), slice(e, e + 1)).squeeze(0))
            start += n
        return torch.cat(outs) if outs else x.new_zeros(x.shape)

    def _linear(self, x, n: str, experts: slice | None, equation="e s d, e f d -> e s f"):
        w, b = getattr(self, "w" + n), getattr(self, "b" + n, None)
        if experts is not None:
            w, b = w[experts], (None if b is None else b[experts])
        y = einsum(x, w, equation)
        return y if b is None else y + b.unsqueeze(-2)  # (e 1 width): over each expert's rows

    def batched(self, x, experts: slice | None):
        # x: (experts slots d_model) -> (experts slots d_model), for the experts sliced (None: all)
        a = self._linear(x, "1", experts)
        if self.act is None:  # gpt-oss's clamped SwiGLU reads both halves
            h = clamped_swiglu(a, self._linear(x, "3", experts))
        else:
            h = self.act(a) * self._linear(x, "3", experts)
        return self._linear(h, "2", experts, "e s f, e d f -> e s d")


class RouterStatics(nn.Module):
    """ERNIE 4.5's e_score_correction_bias (transformers' Ernie4_5_MoeStatics): a parameter
    that is never trained by the loss (requires_grad=False), added to the router's scores
    for the choice only."""

    def __init__(self, num_experts, device=None, dtype=None):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(num_experts, device=device, dtype=dtype),
                                 requires_grad=False)


class MoE(nn.Module):
    # every option is given by TransformerLM from the spec's fields (no default restated here)
    def __init__(self, d_model, num_experts, experts_per_token, d_ff, device=None, dtype=None, *,
                 activation, num_shared_experts, router, router_groups, router_topk_groups,
                 router_bias, norm_topk_prob, routed_scaling_factor, capacity_factor,
                 router_group_score, router_topk_first, router_linear_bias, expert_bias,
                 scales_input=False, shared_expert_gate=False, router_bias_param=False,
                 shared_d_ff=None):
        super().__init__()
        for name, value in (("num_experts", num_experts), ("experts_per_token", experts_per_token),
                            ("d_ff", d_ff)):
            check_positive_int(name, value)
        if experts_per_token > num_experts:
            raise ValueError(f"experts_per_token {experts_per_token} > num_experts {num_experts}")
        if router not in ("softmax", "sigmoid"):
            raise ValueError(f"router must be softmax or sigmoid, got {router!r}")
        self.E, self.k, self.router_kind = num_experts, experts_per_token, router
        self.groups, self.topk_groups = router_groups, router_topk_groups
        self.norm_topk_prob, self.scale = norm_topk_prob, routed_scaling_factor
        self.capacity_factor, self.scales_input = capacity_factor, scales_input
        self.group_score, self.topk_first = router_group_score, router_topk_first
        self.router = Linear(d_model, num_experts, device=device, dtype=dtype, bias=router_linear_bias)
        # ERNIE 4.5 (Ernie4_5_MoeStatics): the correction bias as a frozen parameter
        self.router_statics = (RouterStatics(num_experts, device, dtype)
                               if router_bias and router_bias_param else None)
        if router_bias and not router_bias_param:  # DeepSeek-V3's e_score_correction_bias:
            # learned outside the gradient, a buffer
            self.register_buffer("router_bias", torch.zeros(num_experts, device=device, dtype=dtype))
        else:
            self.router_bias = None
        self.experts = Experts(num_experts, d_model, d_ff, device=device, dtype=dtype,
                               activation=activation, bias=expert_bias)
        # the shared experts as one MLP: n experts' width, or shared_d_ff (Qwen2-MoE's and
        # Qwen3-Next's shared_expert_intermediate_size, any width)
        shared = num_shared_experts * d_ff if shared_d_ff is None else shared_d_ff
        self.shared = (GatedMLP(d_model, shared, device=device, dtype=dtype,
                                activation=activation) if num_shared_experts else None)
        # Qwen2-MoE's shared_expert_gate: one output, no bias (Qwen2MoeSparseMoeBlock)
        self.shared_gate = (Linear(d_model, 1, device=device, dtype=dtype)
                            if shared_expert_gate else None)

    def shared_output(self, x: torch.Tensor) -> torch.Tensor:
        """The shared experts' output, × sigmoid(gate(x)) with Qwen2-MoE's gate."""
        y = self.shared(x)
        return y if self.shared_gate is None else y * torch.sigmoid(self.shared_gate(x))

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(weights, experts), each (tokens k): which experts each token runs, and how much
        each one's output counts."""
        logits = self.router(x)  # (tokens E)
        if self.topk_first:  # gpt-oss: the k best logits, then softmax over them; Llama 4: sigmoid
            values, experts = logits.topk(self.k, dim=-1)
            weights = softmax(values, dim=-1) if self.router_kind == "softmax" else torch.sigmoid(values)
            return self._scaled(weights), experts
        scores = softmax(logits, dim=-1) if self.router_kind == "softmax" else torch.sigmoid(logits)
        bias = self.router_bias if self.router_statics is None else self.router_statics.bias
        choice = scores if bias is None else scores + bias
        if self.groups > 1:  # keep the best topk_groups groups (by their two best scores, V3)
            grouped = choice.reshape(choice.shape[0], self.groups, -1)
            if self.group_score == "max":  # DeepSeek-V2: by the best score of each group,
                group_score = grouped.max(dim=-1).values  # as DeepseekV2TopkRouter writes it
            else:
                group_score = grouped.topk(2, dim=-1).values.sum(dim=-1)  # (tokens groups)
            keep = group_score.topk(self.topk_groups, dim=-1).indices
            # as transformers' DeepseekV3TopkRouter builds it (a float mask, then bool)
            mask = torch.zeros_like(group_score).scatter(1, keep, 1.0)
            mask = mask.unsqueeze(-1).expand(-1, -1, self.E // self.groups).reshape(-1, self.E)
            choice = choice.masked_fill(~mask.bool(), 0.0)
        experts = choice.topk(self.k, dim=-1).indices  # (tokens k)
        return self._scaled(scores.gather(1, experts)), experts

    def _scaled(self, weights: torch.Tensor) -> torch.Tensor:
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        if self.scale != 1.0:
            weights = weights * self.scale
        return weights

    def all_experts(self, x, weights, experts):
        """Every expert on every token, its input scaled by the token's weight for it (0
        unless chosen), the outputs summed over the experts (Llama 4's form)."""
        # (tokens E), in the weights' dtype (bf16 under autocast, where x stays fp32)
        gate = x.new_zeros(x.shape[0], self.E, dtype=weights.dtype).scatter(1, experts, weights)
        n, d = x.shape
        routed = x * gate.t().unsqueeze(-1)  # (E tokens d_model)
        out = self.experts(routed.reshape(self.E * n, d), [n] * self.E)  # every expert alike
        return out.reshape(self.E, n, d).sum(dim=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (... seq d_model) -> (... seq d_model)
        shape = x.shape
        x = x.reshape(-1, shape[-1])  # (tokens d_model)
        weights, experts = self.route(x)
        if self.scales_input:
            y = self.all_experts(x, weights, experts)
            return (y if self.shared is None else y + self.shared_output(x)).reshape(shape)
        n, k = (int(s) for s in experts.shape)  # ints under jit tracing too
        flat = experts.reshape(-1)  # the expert of each slot (token-major)
        if x.is_meta:  # no router values on meta: deal the slots to the experts in turn
            order = torch.cat([torch.arange(n * k, device=x.device)[e::self.E] for e in range(self.E)])
            counts = [len(range(e, n * k, self.E)) for e in range(self.E)]
        else:
            order = torch.argsort(flat, stable=True)  # slots grouped by expert
            counts = torch.bincount(flat, minlength=self.E).tolist()
        # the token of each slot, in expert order (slot s of token i is i*k + s)
        slot_token = torch.arange(n, device=x.device).repeat_interleave(k)[order]
        slot_weights = weights.reshape(-1)[order]
        routed = x[slot_token]  # (n*k d_model)
        if self.capacity_factor is None:  # dropless
            out = self.experts(routed, counts)
        else:  # every expert runs exactly `capacity` rows: its first slots, or zero padding
            capacity = expert_capacity(self.capacity_factor, n * k, self.E)
            trash = self.E * capacity  # the row where an overflowing (dropped) slot goes
            if x.is_meta:
                dest = order
            else:
                starts = torch.cumsum(torch.tensor(counts, device=x.device), 0) - torch.tensor(counts, device=x.device)
                sorted_experts = flat[order]
                rank = torch.arange(n * k, device=x.device) - starts[sorted_experts]
                dest = torch.where(rank < capacity, sorted_experts * capacity + rank, trash)
            dispatched = x.new_zeros(trash + 1, shape[-1]).index_copy(0, dest, routed)
            ran = self.experts(dispatched[:trash], [capacity] * self.E)
            out = torch.cat((ran, ran.new_zeros(1, shape[-1])))[dest]  # a dropped slot: 0
        # the weighted outputs in x's dtype: under CUDA autocast they are float32 already (the
        # router's exp runs in float32), under CPU autocast bf16, which index_add refuses
        # into a float32 buffer (issue 32); a no-op cast wherever the dtypes agree
        weighted = (out * slot_weights.unsqueeze(-1)).to(x.dtype)
        y = x.new_zeros(n, shape[-1]).index_add(0, slot_token, weighted)
        if self.shared is not None:
            y = y + self.shared_output(x)
        return y.reshape(shape)
