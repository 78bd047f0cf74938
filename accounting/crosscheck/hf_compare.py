"""transformers' counts mapped onto the ledger's components; the rows joined to a CrossCheck.

The module map is derived, not written: for every module the ledger names (the modules
that hold a parameter or run a matmul, with their components), transformers' module is
looked up in the model_type's name table (accounting/architecture/hf_config.py, names only). So the
attention projections are whatever the ledger says they are, and a fused module of
transformers' (GPT-2's c_attn for Q, K and V) is compared with the sum of the ledger's
modules it stands for. Works on an HFMeasurement's plain numbers; runs nothing.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from accounting.ledger import records as R
from accounting.analysis.workload import Analysis
from accounting.crosscheck.mapping import Split, analytic_flops, layer_check, own
from accounting.crosscheck.hf_recurrent import (in_one_kind, less_surplus, recurrent_states,
                                                 surpluses)
from accounting.crosscheck.result import (ELSEWHERE, TOTAL, Check, HFCheck, LayerCheck,
                                          ParamRow)
from accounting.crosscheck.dispatch import BACKWARD, FORWARD, MATMUL
from accounting.crosscheck import hf_moe_notes as MN
from accounting.crosscheck.measure import GLOBAL
from accounting.architecture.hf_config import TRANSFORMERS_VERSION, HFConfig, ModuleNames
from accounting.ledger.ledger import Ledger
from accounting.ledger.records import BLOCK_COMPONENTS, COMPONENTS, PHASES
from accounting.units import grouped

COUNTER = "transformers"


# ---------------------------------------------------------------- the derived module map
@dataclass(frozen=True)
class ModuleMap:
    """transformers' module paths -> the ledger's components and modules."""
    names: ModuleNames
    layers: int
    block: dict  # their path inside a block -> (component, the ledger's modules) for matmuls
    top: dict  # their path outside the blocks -> (component, ledger modules) for matmuls
    params: dict  # their full module path -> component, for parameters
    # a path whose component depends on the block's kind (Nemotron-H's "mixer": attention
    # in one block, Mamba-2 in another; component None in `block`): (kind, path) -> component
    by_kind: dict = field(default_factory=dict)
    kinds: tuple = ()  # each block's kind symbol
    def path(self, layer: int | None, theirs: str) -> str:
        if layer is None:
            return theirs
        return f"{self.names.blocks}.{layer}" + (f".{theirs}" if theirs else "")

    def fused(self) -> list[tuple[str, tuple[str, ...]]]:
        """Their modules that stand for several of the ledger's (GPT-2's c_attn)."""
        return [(theirs, mods) for theirs, (_, mods) in {**self.block, **self.top}.items()
                if len(mods) > 1]

    def text(self) -> str:
        by: dict[str, list[str]] = defaultdict(list)
        for where, table in ((f"{self.names.blocks}.{{i}}.", self.block), ("", self.top)):
            for theirs, (comp, mods) in table.items():
                comp = comp or "its block's kind's component"
                own_ops = " (its own matmuls)" if R.ATTN_CORE == comp else ""
                fused = f" (= {' + '.join(mods)})" if len(mods) > 1 else ""
                by[comp].append(f"{where}{theirs}{own_ops}{fused}")
        return "; ".join(f"{', '.join(v)} -> {c}" for c, v in by.items())


def module_map(lg: Ledger, names: ModuleNames) -> ModuleMap:
    """The map for this ledger: every module the ledger names must be in the name table
    (an AssertionError names the missing one: the table is incomplete, a developer error)."""
    def theirs(per_layer: bool, module: str) -> str:
        table = names.block if per_layer else names.top
        if module not in table:
            raise AssertionError(f"the name table for {names.blocks} lacks the ledger's module "
                                 f"{module!r} ({'in a block' if per_layer else 'top level'})")
        return table[module]

    block: dict[str, list] = {}
    top: dict[str, list] = {}
    for (per_layer, module), comp in lg.matmul_modules().items():
        table = block if per_layer else top
        entry = table.setdefault(theirs(per_layer, module), [comp, []])
        if entry[0] != comp:  # by the block's kind (by_kind), or a developer error
            if not per_layer:
                raise AssertionError(f"{theirs(per_layer, module)} would hold two components")
            entry[0] = None
        entry[1].append(module)
    by_kind = {(r.repeat, theirs(True, r.module)): r.component for r in lg.forward
               if r.per_layer and block[theirs(True, r.module)][0] is None}
    for (kind, path), comp in by_kind.items():
        if any(k == kind and p == path and c != comp for (k, p), c in by_kind.items()):
            raise AssertionError(f"{path} would hold two components in blocks {kind}")
    params: dict[str, str] = {}
    modules = {(p.per_layer, p.module): p.component for p in lg.params}
    modules.update(lg.matmul_modules())
    for (per_layer, module), comp in modules.items():
        for i in (range(lg.config.num_layers) if per_layer else (None,)):
            path = f"{names.blocks}.{i}.{theirs(True, module)}" if per_layer \
                else theirs(False, module)
            params.setdefault(path, comp)
    return ModuleMap(names, lg.config.num_layers,
                     {k: (c, tuple(m)) for k, (c, m) in block.items()},
                     {k: (c, tuple(m)) for k, (c, m) in top.items()}, params, by_kind,
                     tuple(lg.group_of(i) for i in range(lg.config.num_layers)))


def split(counts: dict[str, int], mm: ModuleMap, total: int) -> Split:
    """Each of their modules' own counts -> components (as mapping.split does for ours)."""
    layers = []
    for i in range(mm.layers):
        comp = {c: 0 for c in BLOCK_COMPONENTS}
        for theirs, (c, _) in mm.block.items():
            c = c or mm.by_kind.get((mm.kinds[i], theirs))
            if c is not None:  # (else no ledger matmul there in this kind: elsewhere)
                comp[c] += counts.get(mm.path(i, theirs), 0)
        layers.append(comp)
    top: dict[str, int] = defaultdict(int)
    for theirs, (c, _) in mm.top.items():
        top[c] += counts.get(theirs, 0)
    s = Split(tuple(layers), dict(top), 0)
    return Split(s.layers, s.top, total - sum(s.components().values()))


# ---------------------------------------------------------------- comparison
def compare_hf(a: Analysis, m, hf: HFConfig, experts=None, data=None) -> HFCheck:
    """`m`: an hf_counter.HFMeasurement for `a`'s workload; `experts`: an
    hf_experts.ExpertsCheck (transformers' expert implementations on CPU at a shrunk size),
    or why it could not run; `data`: the config.json transformers' model was built from
    (flags written back; default: hf's own)."""
    lg = a.ledger
    data = hf.data if data is None else data
    mm = module_map(lg, hf.type.module_names(data))
    _, block = analytic_flops(a)
    flops: dict[tuple[str, str], int] = {}
    layers: list[LayerCheck] = []
    checks: list[Check] = []
    for phase in PHASES[a.phase]:
        if phase == FORWARD:  # FlopCounterMode's own module hierarchy
            fcm = m.torch_flops[FORWARD]
            s = split(own(fcm), mm, fcm.get(GLOBAL, 0))
        else:  # by the module whose forward made each autograd node (the op counter)
            mine = defaultdict(int)
            for r in m.ops:
                if r.phase == BACKWARD and r.kind == MATMUL:
                    mine[r.module] += r.flops
            total = m.torch_flops[BACKWARD].get(GLOBAL, 0)
            s = split(dict(mine), mm, sum(mine.values()))
            checks.append(Check("transformers backward: the op counter's matmul FLOPs = "
                                "FlopCounterMode's", f"{grouped(sum(mine.values()))} and "
                                f"{grouped(total)}", sum(mine.values()) == total))
        for claim, what, surplus in surpluses(a, phase):  # transformers' torch paths' extra work
            s, check = less_surplus(s, surplus, claim, what)
            checks.append(check)
        comps = s.components()
        for c in a.components:  # (the recurrent mixing only for a model that has it)
            flops[(phase, c)] = comps[c]
        flops[(phase, ELSEWHERE)] = s.elsewhere
        flops[(phase, TOTAL)] = sum(comps.values()) + s.elsewhere
        layers.append(layer_check(phase, COUNTER, s, block, lg))

    params = _params(a, m, mm)
    kv_bytes, kv_detail = _kv(a, m, hf, data)
    checks.append(Check("transformers: the LM head reads the token embedding (tied) exactly "
                        "when the ledger's does", f"transformers {'tied' if m.tied else 'untied'}, "
                        f"ledger {'tied' if lg.tied else 'untied'}", m.tied == bool(lg.tied)))
    if experts is not None:
        checks += MN.experts_checks(experts)
    notes = _notes(a, m, mm, hf) + ([MN.experts_note(experts)] if experts is not None else [])
    return HFCheck(hf.model_type, m.transformers_class, m.version, _dtype_text(m, hf), flops,
                   tuple(layers), params, kv_bytes, kv_detail, tuple(checks), tuple(notes),
                   mm.text())


def _params(a: Analysis, m, mm: ModuleMap) -> tuple[ParamRow, ...]:
    theirs: dict[str, int] = defaultdict(int)
    for name, n in m.params:
        module = name.rpartition(".")[0]
        theirs[mm.params.get(module, ELSEWHERE)] += n
    ours = a.params_by_component()
    rows = [ParamRow(c, n, theirs.pop(c, 0)) for c, n in ours.items()]
    rows += [ParamRow(c, 0, n) for c, n in theirs.items()]  # components the ledger has none of
    rows.append(ParamRow(TOTAL, a.param_count, sum(n for _, n in m.params)))
    return tuple(rows)


def _kv(a: Analysis, m, hf: HFConfig, data) -> tuple[tuple[int, int], str]:
    """Bytes of the cache after the prefill: the ledger's cache entries (per token, per
    block, all blocks) × B·T × the model's element size, against past_key_values. A local
    (sliding-window) layer's entry counts min(T, W − 1) tokens: between steps transformers'
    DynamicSlidingWindowLayer keeps the last W − 1 (the next token's own K and V make the
    W it attends), where the tool's planning counts W (the cache while a step attends)."""
    v = a.values
    w, chunk = a.config.sliding_window, a.config.attention_chunk
    kept = {False: a.seq, True: min(a.seq, w - 1) if w else a.seq}
    # a chunked layer (Llama 4) is cached as a sliding window of C (cache_utils: "sliding
    # and chunked are the same in how they should behave, only the mask differs")
    chunk_kept = min(a.seq, chunk - 1) if chunk else a.seq
    itemsize = m.kv[0][2] if m.kv else 0
    analytic = sum(int(e.expr().value(v)) * (chunk_kept if e.chunk else kept[e.window])
                   for e in a.ledger.cache if not e.per_sequence) * a.batch * itemsize
    analytic_states, states_detail = recurrent_states(a, m, itemsize)
    broadcast = hf.type.kv_broadcast is not None and hf.type.kv_broadcast(data)
    if broadcast:  # compared as the ledger's h_kv heads × g, said in the detail
        analytic *= a.config.group_size
    measured = sum((_prod(k) + _prod(val)) * size for k, val, size in m.kv) \
        + sum(_prod(k) * size for k, size in getattr(m, "indexer_kv", ()) + m.states)
    analytic += analytic_states
    shapes = sorted({(k, val) for k, val, _ in m.kv})
    shown = "; ".join(f"K {list(k)}, V {list(val)}" for k, val in shapes)
    detail = f"{len(m.kv)} layers × ({shown}) × {itemsize} bytes ({m.dtype})"
    detail += states_detail
    if a.config.mla:
        detail += (f"; latent attention: transformers caches the latent (kv_a_layernorm's "
                   f"output, kv_lora_rank {a.config.kv_lora_rank}) as its 'K' and the rotated "
                   f"RoPE key (qk_rope_head_dim {a.config.qk_rope_head_dim}) as its 'V', the "
                   f"ledger's cache entry")
    if getattr(m, "indexer_kv", ()):
        detail += (f"; and the sparse-attention indexer's keys, {len(m.indexer_kv)} layers × "
                   f"{list(m.indexer_kv[0][0])} (DynamicIndexedLayer.indexer_keys)")
    if broadcast:
        detail += (f"; transformers' {hf.model_type} caches K and V broadcast to all "
                   f"{a.config.num_heads} query heads ({hf.type.transformers_class.removesuffix('ForCausalLM')}"
                   f"Attention._split_heads: torch.broadcast_to, then reshape to num_heads), "
                   f"g = {a.config.group_size} times the {a.config.kv_heads} K/V heads a cache "
                   f"needs: analytic here is the ledger's cache × g (the tool's tables count "
                   f"the h_kv heads)")
    if any(e.window for e in a.ledger.cache):
        detail += (f"; local layers keep min(T, W − 1) = {kept[True]:,} tokens after the "
                   f"prefill (transformers' DynamicSlidingWindowLayer: the next token's own K "
                   f"and V make the W = {w:,} it attends; the tool's inference tables count W, "
                   f"the cache while a step attends)")
    if any(e.chunk for e in a.ledger.cache):
        detail += (f"; chunked layers keep min(T, C − 1) = {chunk_kept:,} tokens after the "
                   f"prefill (transformers caches them as a DynamicSlidingWindowLayer of C = "
                   f"{chunk:,}; the tool's inference tables count min(T, C))")
    return (analytic, measured), detail


def _prod(shape) -> int:
    out = 1
    for s in shape:
        out *= s
    return out


def _llama4_attention_notes(c) -> list[str]:
    """Llama4TextAttention's features as transformers computes them."""
    out = []
    if any(k.chunked for k in c.layer_kinds):
        out.append(f"Chunked attention C = {c.attention_chunk:,}: transformers applies it in "
                   f"the mask (create_chunked_causal_mask: query i sees key j iff j ≤ i and "
                   f"⌊j/C⌋ = ⌊i/C⌋, the tool's chunks) and eager attention computes all T×T "
                   f"scores, as the tool's model does (the executed count; useful: P_C).")
    if c.qk_norm == "l2":
        out.append("QK-norm (Llama4TextL2Norm, after RoPE, on RoPE layers): x·rsqrt(mean(x²) "
                   "+ eps), no weight; the tool's model divides by sqrt: the same value.")
    if c.temperature_floor is not None and c.nope_layers:
        out.append("Temperature tuning (NoPE layers): transformers computes log1p(floor((i + "
                   "1.0)/floor_scale))·attn_scale + 1 in float ops (floor is no FLOP in "
                   "either counter); the tool's model floors by integer division: the same "
                   "scale, non-matmul work compared on the tool's model/ only.")
    return out


def _dtype_text(m, hf: HFConfig) -> str:
    if hf.dtype is None:
        return f"{m.dtype} (config.json gives no torch_dtype)"
    if hf.dtype in ("float32", "bfloat16", "float16"):
        return f"{m.dtype} (config.json's torch_dtype)"
    return f"{m.dtype} (config.json's torch_dtype {hf.dtype} is not float32, bfloat16 or float16)"


def _notes(a: Analysis, m, mm: ModuleMap, hf: HFConfig) -> list[str]:
    """Where transformers' model computes differently from the tool's, for this config, and
    why the compared counts are still equal (or what is compared on the tool's model only)."""
    c = a.config
    classes = set(m.module_classes.values())
    out = []
    if m.version != TRANSFORMERS_VERSION:
        out.append(f"transformers {m.version} is installed; the tool's tables are read from "
                   f"{TRANSFORMERS_VERSION} (pip install -e '.[hf]' installs it), so a difference "
                   f"may be a change in transformers.")
    for theirs, mods in mm.fused():
        if not in_one_kind(a.ledger, mods):  # (Kimi Linear's self_attn: KDA or MLA by kind)
            continue
        out.append(f"{theirs} is one fused matmul for the ledger's {', '.join(mods)} "
                   f"({m.module_classes.get(mm.path(0, theirs), '?')}): compared as their sum "
                   f"(the same multiply-adds, one wider matmul).")
    if "Conv1D" in classes or c.qkv_bias or c.out_bias or c.mlp_bias:
        out.append("Biased layers (" + ("Conv1D" if "Conv1D" in classes else "nn.Linear")
                   + ") run aten.addmm(bias, x, W): FlopCounterMode counts its product only, "
                   "as the ledger's matmul rows do; the bias add is non-matmul work, counted "
                   "and compared on the tool's model/.")
    if c.num_experts is not None and c.router_scales_input:
        out += MN.llama4_moe_notes()
    elif c.num_experts is not None:
        out.append("Experts: transformers' model runs its experts here as "
                   "experts_implementation=\"batched_mm\": each (token, expert) slot's "
                   "gate_up_proj and down_proj slices gathered and one bmm per matrix, B·T·k "
                   "expert rows, the ledger's dropless count. Its default, grouped_mm, runs the "
                   "same rows, but torch's FlopCounterMode has no formula for "
                   "aten._grouped_mm (it would count the experts as 0 FLOPs) and its meta "
                   "kernel takes bfloat16 only; its \"eager\" loop runs only the experts that "
                   "got tokens, found with nonzero() (data-dependent: meta cannot run it). Both "
                   "are run on CPU at a shrunk size (below).")
        if c.expert_bias:  # gpt-oss: GptOssExperts (is_transposed, interleaved, biased)
            out.append("mlp.experts.gate_up_proj holds each expert's W1 and W3 as interleaved "
                       "columns (E × d_model × 2·d_e: gate = [..., ::2], up = [..., 1::2]), "
                       "with gate_up_proj_bias (E × 2·d_e) and down_proj_bias: one matmul where "
                       "the ledger has two, the same multiply-adds, compared as their sum (the "
                       "experts module); the bias adds and the clamped SwiGLU (clamp, α·gate, "
                       "sigmoid, products, up + 1) are non-matmul work, compared on the tool's "
                       "model/ only; batched_mm adds the k weighted rows of a token with "
                       "view(…).sum where the tool's model runs index_add.")
        else:
            out.append(f"{'' if c.mlp_beside_moe else 'mlp.'}experts.gate_up_proj holds each expert's W1 and W3 stacked (E × "
                       "2·d_e × d_model): one matmul where the ledger has two, the same "
                       "multiply-adds; compared as their sum (the experts module).")
        out.append(MN.router_note(c))
    if c.mla:
        rotate = ("rotates pairs as complex numbers (view_as_complex times torch.polar's "
                  "freqs_cis, DeepseekV2's apply_rotary_emb)" if m.model_type == "deepseek_v2"
                  else "rotates in DeepSeek's interleaved layout (rope_interleave)")
        out.append("Latent attention: transformers builds each head's K with new_empty + "
                   f"copy_ of the no-RoPE part and the shared RoPE key (copies, no FLOPs), "
                   f"{rotate}, and folds yarn's mscale² into the score scale (a value): the "
                   f"same matmuls.")
    if c.attention_sinks:
        out.append("Attention sinks (self_attn.sinks, h per layer: the ledger's attention-core "
                   "parameters): transformers concatenates the sink logit to each row of the "
                   "scores (cat, a copy), subtracts the row max, runs the fused softmax over "
                   "the T + 1 columns and slices the sink column off; the tool's model computes "
                   "the same weights without the extra column (softmax_with_sink: max(row max, "
                   "sink), exp(x − m) / (Σ exp(x − m) + exp(sink − m))). No matmul differs; "
                   "the softmax's non-matmul FLOPs are compared on the tool's model/ only.")
    out += _llama4_attention_notes(c)
    if any(k.local for k in c.layer_kinds):
        out.append(f"Sliding window W = {c.sliding_window:,}: transformers applies it in the "
                   f"mask (create_sliding_window_causal_mask: query i sees key j iff i − W < j "
                   f"≤ i, the tool's window) and eager attention computes all T×T scores, as "
                   f"the tool's model does (the executed count).")
    if c.block != "sequential":
        out.append("Parallel block: attention and MLP both read the block input (through "
                   + ("one shared norm" if c.block == "parallel_shared_norm" else "a norm each")
                   + ") and both are added to it, in transformers' model as in the tool's "
                   "(the order of the two residual adds differs: the same FLOPs).")
    if c.positions == "alibi":
        out.append("ALiBi: transformers' FalconModel builds the bias once per forward "
                   "(build_alibi_tensor: slope · key position, rounded to bfloat16) where the "
                   "tool's model builds it per block in float32; its eager attention adds it to "
                   "the scores before the scale and also folds alibi/√d_k into the causal mask "
                   "(masked_fill), so eager scores carry it twice (its sdpa path, Falcon's "
                   "original code and the tool's model once). No matmul; the non-matmul ops "
                   "are compared on the tool's model/.")
    if c.rotary_dim is not None:
        out.append(f"Partial rotary: transformers rotates q[..., :{c.rotary_dim}] and "
                   f"k[..., :{c.rotary_dim}] with rotate_half and concatenates the rest "
                   f"(apply_rotary_pos_emb), as the tool's model slices, rotates and "
                   f"concatenates: no matmul; the non-matmul ops are compared on the tool's "
                   f"model/.")
    if c.kv_heads != c.num_heads and hf.type.kv_broadcast is not None:
        out.append(f"{hf.type.transformers_class}: K and V reach the {c.num_heads} query heads "
                   f"by broadcasting (the new decoder architecture copies them in _split_heads "
                   f"before the cache; multi_query lets the score matmul broadcast its one K/V "
                   f"head); the tool's model broadcasts. The matmul FLOPs are the same "
                   f"(h·T²·d_k per sequence).")
    elif c.kv_heads != c.num_heads:
        out.append(f"Grouped-query attention: transformers copies K and V to all {c.num_heads} "
                   f"query heads (repeat_kv: expand + reshape) before the score matmul; the "
                   f"tool's model broadcasts them. The matmul FLOPs are the same (h·T²·d_k per "
                   f"sequence); the copy moves memory, it adds no FLOPs.")
    how = ["eager attention multiplies the scores by 1/√d_k (the tool's model divides) and "
           "adds a float causal mask (B×1×T×T, built by create_causal_mask) where the tool's "
           "model selects with torch.where", "softmax is one fused aten._softmax"]
    # issue 24: Gemma 2/3 and Granite run the spec's scalars in other places or other forms
    if c.norm_offset or c.attn_softcap is not None or c.residual_multiplier is not None:
        how[0] += (" (Gemma's scale is query_pre_attn_scalar**-0.5, Granite's "
                   "attention_multiplier: another value, the same one op per score)")
    if c.attn_softcap is not None:
        how.append("the score soft-cap is the same three ops (÷ cap, tanh, × cap) before the "
                   "mask")
    if c.norm_offset:
        how.append("the RMSNorm gain (1 + w) is added in float32 once per call on the gain "
                   "vector, as in the tool's model (Gemma2RMSNorm/Gemma3RMSNorm)")
    if c.embedding_multiplier is not None:
        how.append("the embedding multiply runs inside embed_tokens for Gemma (× embed_scale, "
                   "a buffer of √hidden_size) and in the model's forward for Granite: one "
                   "multiply per element, as the tool's model")
    if c.logit_scale is not None and hf.type.model_type in ("cohere", "cohere2"):
        how.append("CohereForCausalLM multiplies the logits by logit_scale, as the tool's model")
    elif c.logit_scale is not None:
        how.append("Granite divides the logits by logits_scaling where the tool's model "
                   "multiplies by logit_scale = 1/logits_scaling: one op per logit either way")
    how.append("RMSNorm multiplies by rsqrt (the tool's divides by sqrt)" if c.norm == "rmsnorm"
               else "LayerNorm is one fused aten.native_layer_norm" if c.norm == "layernorm"
               # modeling_cohere.py: CohereLayerNorm.forward
               else "CohereLayerNorm writes its ops out: mean, x − mean twice (for the variance "
                    "and for the result), square, mean, + eps, rsqrt, multiply, × weight (one "
                    "subtract more per element than the tool's model, which divides by sqrt)")
    if c.qk_norm == "per_head":
        how.append("the per-head QK-norm is CohereLayerNorm on (B, T, heads, d_k) with a "
                   "(heads, d_k) weight before the transpose, as the tool's model")
    if c.positions == "rope" and hf.type.model_type in ("cohere", "cohere2"):
        how.append("RoPE rotates interleaved pairs (x[2k], x[2k+1]) as the tool's model does, "
                   "but in another form: cos/sin once per forward, repeat_interleave'd to d_k, "
                   "then q·cos + rotate_half(q)·sin in float32 (rotate_half: stack(−x[1::2], "
                   "x[::2]), a negation and a copy), where the tool's model runs 4 multiplies, "
                   "a subtract and an add per pair; no matmul either way")
    if c.positions == "rope" and c.router_scales_input:  # Llama 4
        how.append("RoPE's rotation is computed once per forward (freqs_cis, torch.polar) and "
                   "applied as a complex multiplication (view_as_complex: one complex multiply "
                   "per pair, where the tool's model writes 4 multiplies and 2 adds)")
    elif c.positions == "rope":
        how.append("RoPE's cos/sin are computed once per forward in the model (not per block) "
                   "and applied with rotate_half")
    if c.mlp_kind.activation == "gelu":  # hidden_act / activation_function "gelu"
        how.append("the exact GELU is one aten.gelu (GELUActivation, activations.py) where the "
                   "tool's model writes 0.5·x·(1 + erf(x/√2)), 5 ops per element")
    out.append("Non-matmul work differs in form: " + "; ".join(how) + ". The non-matmul FLOPs "
               "are compared on the tool's model/ only (their table below).")
    if R.BACKWARD in PHASES[a.phase]:
        out.append("Backward: F.cross_entropy on the logits, as for the tool's model "
                   "(transformers' own loss, which upcasts the logits to float32, is not used).")
    out.append("model.eval(): no dropout, as in the tool's model.")
    return out
