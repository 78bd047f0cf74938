"""The ledger of one architecture: every fact the builder emitted, collected once.

    from accounting.ledger.ledger import ledger
    lg = ledger(config)          # cached per config
    lg.params, lg.matmuls("train"), lg.elementwise, lg.activations, lg.buffers, lg.cache

Analysis, planning, the cross-check's module mapping, the views and the report reduce
this; none of them restates the architecture.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

from accounting.ledger import builder
from accounting.ledger import records as R
from accounting.ledger.builder.moe import expert_capacity
from accounting.architecture.config import ModelConfig
from accounting.runtime.errors import UsageError
from accounting.ledger.symbols import FOLD, SAVED_AS_BLOCK_INPUT, SLICE, VIEWED, Expr


@dataclass(frozen=True)
class Ledger:
    config: ModelConfig
    params: tuple[R.Param, ...]  # unique parameters, in state-dict order
    tied: tuple[tuple[str, str], ...]  # (second state-dict key, the parameter it names)
    forward: tuple[R.Matmul, ...]  # in execution order
    elementwise: tuple[R.Elementwise, ...]  # one record per op call, in execution order
    activations: tuple[R.Activation, ...]
    buffers: tuple[R.Buffer, ...]
    cache: tuple[R.CacheEntry, ...]
    registered: tuple[tuple[str, str | None], ...]  # (state-dict key, block kind) in order
    recomputed: tuple[R.Matmul, ...] = ()  # forward matmuls run again in the backward pass
    groups: tuple[tuple[str, tuple[int, ...]], ...] = (("L", ()),)  # kind symbol -> its blocks
    persistent: tuple[str, ...] = ()  # state-dict keys of persistent buffers (not parameters)
    adapters: object = None  # LoRA (builder/lora.py Adapters): its rank is the symbol r
    # the dtype of the logits the model's forward returns, what a loop holding its output
    # keeps (the head's output dtype; transformers' NemotronHForCausalLM: float32, its
    # `self.lm_head(hidden_states).float()`); None where no builder set it
    logits_dtype: str | None = None

    def group_of(self, layer: int) -> str:
        """The symbol of block `layer`'s kind ("L" when every block is alike)."""
        try:
            return self._group_index[layer]
        except KeyError:
            raise IndexError(layer) from None

    @cached_property
    def _group_index(self) -> dict[int, str]:
        """block -> its kind's symbol, built once (group_of is called per block: a scan of
        the groups per call was quadratic in the layer count, issue 32)."""
        return {layer: symbol for symbol, layers in reversed(self.groups) for layer in layers}

    # ---- matmuls --------------------------------------------------------------------------
    @property
    def backward(self) -> tuple[R.Matmul, ...]:
        """One gradient matmul per operand of each forward matmul (the embedding's backward
        is a scatter-add, not a matmul, and token ids need no gradient)."""
        return tuple(g for f in self.forward for g in f.gradients())

    def matmuls(self, phase: str = R.FORWARD) -> list[R.Matmul]:
        """Records of a pass ('forward', 'backward' or 'train'), forward first."""
        passes = R.PHASES[phase]
        return ([*self.forward] if R.FORWARD in passes else []) + \
            ([*self.backward] if R.BACKWARD in passes else [])

    def matmul_modules(self) -> dict[tuple[bool, str], str]:
        """(per block?, innermost module) -> component, for every module that runs a matmul."""
        return {(r.per_layer, r.module): r.component for r in self.forward}

    # ---- components present, in table order ---------------------------------------------
    @property
    def param_components(self) -> tuple[str, ...]:
        # the attention core holds parameters only with attention sinks (gpt-oss)
        order = (R.EMBEDDING, R.POSITION_EMBEDDING, R.ATTN_PROJ, R.ATTN_CORE, R.RECURRENT, R.FFN,
                 *builder.NORM_PARAMS.values(), R.LM_HEAD)
        present = {p.component for p in self.params} | {R.LM_HEAD}
        return tuple(c for c in order if c in present)

    @property
    def elementwise_components(self) -> tuple[str, ...]:
        present = {e.component for e in self.elementwise}
        return tuple(c for c in builder.ELEMENTWISE_ORDER if c in present)

    # ---- names ----------------------------------------------------------------------------
    def state_dict_keys(self) -> list[str]:
        """The model's state-dict keys in order (a tied weight under both of its names)."""
        out: list[str] = []
        first = next((name, group) for name, group in self.registered if group)
        for name, group in self.registered:
            if not group:
                out.append(name)
            elif (name, group) == first:  # the blocks' keys, block by block, where block 0 starts
                for i in range(self.config.num_layers):
                    g = self.group_of(i)
                    out += [n.format(i=i) for n, kind in self.registered if kind == g]
        return out

    def parameter_names(self) -> list[str]:
        """named_parameters() order: each parameter once (a tied one under its first name)."""
        buffers = {n.format(i=i) for n in self.persistent for i in range(self.config.num_layers)}
        return [k for k in self.state_dict_keys() if k not in dict(self.tied) and k not in buffers]

    # ---- values -------------------------------------------------------------------------
    def values(self, seq: int, batch: int) -> dict[str, int]:
        """Integer value of every symbol for one workload."""
        c = self.config
        out = {
            "B": batch, "T": seq, "P": seq * (seq + 1) // 2, "L": c.num_layers,
            "V": c.vocab_size, "d_model": c.d_model, "d_ff": c.d_ff, "h": c.num_heads,
            "h_kv": c.kv_heads, "g": c.group_size, "d_k": c.d_k, "d_k/2": c.d_k // 2,
            "T_max": max(seq, c.context_length), "T_pos": c.context_length, "1": 1, "2": 2,
            "3": 3,
        }
        if c.global_shape:  # Gemma 4's global layers: their own head shape
            out.update({"d_kG": c.global_d_k, "d_kG/2": c.global_d_k // 2,
                        "h_kvG": c.global_kv, "g_G": c.num_heads // c.global_kv})
        if c.per_layer_input is not None:  # Gemma 4's per-layer embeddings
            out.update({"d_ple": c.per_layer_input, "V_ple": c.ple_vocab,
                        "L·d_ple": c.num_layers * c.per_layer_input, SAVED_AS_BLOCK_INPUT: 0})
        if c.double_wide_mlp:
            out["2d_ff"] = 2 * c.d_ff
        if self.adapters is not None:
            out["r"] = self.adapters.rank
        for symbol, layers in self.groups:
            out[symbol] = len(layers)
        if c.sliding_window is not None:  # local layers: query i attends min(i + 1, W) keys
            w = c.sliding_window
            out["W"] = w
            out["P_W"] = window_pairs(seq, w)
            out["[T≥W]"], out["[T<W]"] = int(seq >= w), int(seq < w)  # transformers' mask
        if c.attention_sinks:  # gpt-oss's eager softmax: the keys and the sink (hf_eager.py)
            out["(T+1)"] = seq + 1
        if c.attention_chunk is not None:  # chunked layers: query i attends (i mod C) + 1 keys
            out["C_a"] = c.attention_chunk
            out["P_C"] = chunk_pairs(seq, c.attention_chunk)
            # transformers' chunked mask (Llama 4's), made from kv_length >= C_a on
            out["[T≥C_a]"], out["[T<C_a]"] = int(seq >= c.attention_chunk), \
                int(seq < c.attention_chunk)
        if c.conv_kernel is not None:  # the recurrent layers' depthwise conv (width K)
            out.update({"K": c.conv_kernel, "3": 3, "T+K-1": seq + c.conv_kernel - 1})
        if c.linear_key_heads is not None:  # gated DeltaNet layers (builder/delta.py)
            hk, hv = c.linear_key_heads, c.linear_value_heads
            dk, dv, chunk = c.linear_key_head_dim, c.linear_value_head_dim, c.linear_chunk
            out.update({"h_lk": hk, "h_lv": hv, "d_lk": dk, "d_lv": dv,
                        "d_conv": 2 * hk * dk + hv * dv, "d_qkvz": 2 * hk * dk + 2 * hv * dv,
                        "C_l": chunk, "N_c": -(-seq // chunk), "N_c-1": -(-seq // chunk) - 1,
                        "[N_c>1]": int(seq > chunk),
                        "P_L": chunk * (chunk - 1) // 2})
            # transformers' fp32 delta rule without padding (builder/delta.py ALIASED): its
            # torch.matmul copies what it cannot fold into one batch dim
            whole = seq % chunk == 0
            out.update({FOLD: int(whole and (batch > 1 or seq > chunk)),
                        SLICE: int(whole and batch > 1),
                        VIEWED: int(seq > chunk and not (whole and batch > 1))})
        if c.mamba_heads is not None:  # Mamba-2 layers (builder/mamba.py)
            h, p, n, g, chunk = (c.mamba_heads, c.mamba_head_dim, c.ssm_state, c.mamba_groups,
                                 c.mamba_chunk)
            out.update({"h_m": h, "p_m": p, "n_s": n, "G_m": g, "p_g": h * p // g,
                        "d_xbc": h * p + 2 * g * n, "d_zxbcdt": 2 * h * p + 2 * g * n + h,
                        "C_m": chunk, "N_m": -(-seq // chunk), "N_m+1": -(-seq // chunk) + 1,
                        "[N_m>1]": int(seq > chunk), "[N_m=1]": int(seq <= chunk)})
        if c.mamba_inner is not None:  # Mamba-1 layers (builder/mamba1.py)
            di, r, n = c.mamba_inner, c.mamba_dt_rank, c.ssm_state
            out.update({"d_i": di, "2d_i": 2 * di, "r_dt": r, "n_s": n, "d_rbc": r + 2 * n})
        if c.num_experts is not None:
            out.update({"E": c.num_experts, "k": c.experts_per_token, "d_e": c.expert_d_ff,
                        "d_s": c.shared_expert_d_ff, "G": c.router_groups,
                        "E/G": c.num_experts // c.router_groups, "2": 2, "1": 1,
                        "k_G": c.router_topk_groups})
            if c.moe_latent_size is not None:
                out["d_l"] = c.moe_latent_size
            if c.moe_capacity_factor is not None:
                cap = expert_capacity(c.moe_capacity_factor, batch * seq * c.experts_per_token,
                                      c.num_experts)
                out["C"], out["E·C+1"] = cap, c.num_experts * cap + 1
        if c.rotary_dim is not None:  # partial rotary: RoPE on d_rot of each head's d_k
            out.update({"d_rot": c.rotary_dim, "d_rot/2": c.rotary_dim // 2,
                        "d_pass": c.d_k - c.rotary_dim})
        if c.mla:
            out.update({"r_kv": c.kv_lora_rank, "d_nope": c.qk_nope_head_dim,
                        "d_rope": c.qk_rope_head_dim, "d_rope/2": c.qk_rope_head_dim // 2,
                        "d_v": c.v_head_dim, "d_kv_a": c.kv_lora_rank + c.qk_rope_head_dim,
                        "d_kv_b": c.qk_nope_head_dim + c.v_head_dim})
            if c.q_lora_rank is not None:
                out["r_q"] = c.q_lora_rank
            if c.index_topk is not None:  # DeepSeek-V3.2's indexer: query i keeps min(i+1, k)
                out.update({"h_I": c.index_heads, "d_I": c.index_head_dim,
                            "d_I_pass": c.index_head_dim - c.qk_rope_head_dim,
                            "k_I": c.index_topk, "P_K": window_pairs(seq, c.index_topk)})
        return out


def window_pairs(seq: int, window: int) -> int:
    """Σ_{i<T} min(i + 1, W): the (query, key) pairs a causal sliding window of W keeps;
    W·T − W(W−1)/2 once T ≥ W (T(T+1)/2 before)."""
    if seq <= window:
        return seq * (seq + 1) // 2
    return window * seq - window * (window - 1) // 2


def chunk_pairs(seq: int, chunk: int) -> int:
    """Σ_{i<T} ((i mod C) + 1): the (query, key) pairs causal chunks of C keep (Llama 4's
    chunked attention: query i sees key j iff j ≤ i and ⌊j/C⌋ = ⌊i/C⌋)."""
    q, r = divmod(seq, chunk)
    return q * chunk * (chunk + 1) // 2 + r * (r + 1) // 2


def coalesce(records) -> list[R.Elementwise]:
    """Records of the same operation (op, label, shape, component) in sibling modules or in
    several calls, as one row: modules joined ("ln1, ln2"), copies summed. For tables."""
    rows: dict[tuple, R.Elementwise] = {}
    for e in records:
        key = (e.repeat, e.component, e.op, e.elements, e.name, e.per_element, e.reduction)
        if key not in rows:
            rows[key] = e
            continue
        r = rows[key]
        modules = r.module.split(", ")
        module = r.module if e.module in modules else f"{r.module}, {e.module}"
        rows[key] = R.Elementwise(r.name, r.component, module, r.repeat, r.op, r.elements,
                                  r.per_element, r.copies + e.copies, r.reduction)
    return list(rows.values())


def _fold(e: Expr) -> Expr:
    """h·d_k written d_model in every term (the course's way, when h·d_k = d_model)."""
    terms = {}
    for f, c in e.terms.items():
        f = list(f)
        while "h" in f and "d_k" in f:
            f.remove("h")
            f[f.index("d_k")] = "d_model"
        terms[tuple(f)] = terms.get(tuple(f), 0) + c
    return Expr(terms)


def _activations(t, fold: bool) -> tuple[R.Activation, ...]:
    rows: dict[tuple, list] = {}
    for n in t.named.values():
        saved = bool(n.savers)
        if not saved and not n.course and not n.block_input:
            continue
        if saved:
            why = "saved by " + ", ".join(n.savers)
        elif n.readers:
            why = f"not saved: read by {', '.join(n.readers)}, which keep nothing of it"
        else:
            why = "not saved: no operation with a backward formula reads it"
        key = (n.label, n.saved_in if saved else "", n.shape, n.dtype, n.course, n.repeat,
               n.block_input, n.weight_copy, n.storages)
        if key in rows:
            rows[key][1] += 1
        else:
            rows[key] = [why, 1]
    out = []
    for (label, saved_in, shape, dtype, course, repeat, block_input, weight_copy, storages), \
            (why, copies) in rows.items():
        e = Expr.of(copies, shape)
        out.append(R.Activation(label, course, saved_in, repeat, shape, _fold(e) if fold else e,
                                why, dtype, copies, block_input, weight_copy, storages))
    # blocks first (execution order), then the rest
    return tuple([a for a in out if a.per_layer] + [a for a in out if not a.per_layer])


@lru_cache(maxsize=64)
def ledger(config: ModelConfig, autocast: str | None = None, recompute: str = "none",
           implementation: str = "course", param_dtype: str = "fp32", adapters=None,
           fp8: str | None = None) -> Ledger:
    """The ledger of `config`: in float32 (autocast None) or under torch.autocast on the
    device named ("cpu", "cuda"), with recomputation "none", "full" or "selective"; as
    model/ runs it (implementation "course") or as transformers' modeling code does
    ("transformers"); with parameters in param_dtype ("bf16": model.to(torch.bfloat16));
    with LoRA adapters (builder/lora.py Adapters) on a base frozen in param_dtype, or without;
    with the linear layers in fp8 (fp8: "torchao" or "te", planning/precisions.py) or not."""
    return _build(config, autocast, recompute,
                  fold=config.num_heads * config.d_k == config.d_model,
                  implementation=implementation, param_dtype=param_dtype, adapters=adapters,
                  fp8=fp8)


@lru_cache(maxsize=64)
def unfolded_ledger(config: ModelConfig, autocast: str | None = None,
                    recompute: str = "none", implementation: str = "course",
                    param_dtype: str = "fp32", dropout: bool = False,
                    fp8: str | None = None, adapters=None) -> Ledger:
    """The same facts with h·d_k never written d_model, so that every tensor and weight with
    a heads dimension shows it (the parallel planner splits exactly those over TP ranks);
    `dropout`: Megatron's dropouts on (implementation "megatron"); `adapters`: LoRA's
    (builder/lora.py), on a base frozen in param_dtype."""
    return _build(config, autocast, recompute, fold=False, implementation=implementation,
                  param_dtype=param_dtype, adapters=adapters, dropout=dropout, fp8=fp8)


def _build(config: ModelConfig, autocast: str | None, recompute: str, fold: bool,
           implementation: str = "course", param_dtype: str = "fp32", adapters=None,
           dropout: bool = False, fp8: str | None = None) -> Ledger:
    t = builder.walk(config, autocast, recompute, fold, implementation, param_dtype, adapters,
                     dropout, fp8)
    acts = _activations(t, fold)
    inputs = [a for a in acts if a.block_input]
    if len(inputs) != len(t.groups) or not all(a.per_layer for a in inputs):
        raise AssertionError(f"builder: expected one block input per kind of block, got {inputs}")
    return Ledger(config, tuple(t.params), tuple(t.tied.items()), tuple(t.matmuls),
                  tuple(t.elementwise), acts, tuple(t.buffers), tuple(t.cache),
                  tuple(t.registered), tuple(t.recomputed), tuple(t.groups),
                  tuple(t.persistent), adapters, t.logits_dtype)


def check_seq(config: ModelConfig, seq: int) -> None:
    """A learned position table limits the context; RoPE (and no positions) do not."""
    if config.positions == "learned" and seq > config.context_length:
        raise UsageError(f"--ctx {seq:,} is longer than {config.name}'s learned position table "
                         f"({config.context_length:,} positions); give --ctx up to "
                         f"{config.context_length:,} (RoPE models accept any length)")
