"""The transformers implementation's ledger for the hybrid families against transformers'
own models on the CPU, as tests/test_transformers_saves.py does for the attention
families: one training step's forward and loss under saved-tensor hooks, every storage
autograd saves (parameters and buffers excluded, each storage once) compared by size and
dtype with the ledger's saved records built with implementation "transformers", in fp32,
under the CPU's bf16 autocast and with bf16 parameters; and the step's two moments
(tests/test_transformers_saves.py assert_two_moments).

Nemotron-H (NemotronHForCausalLM, transformers 5.23 modeling_nemotron_h.py): its Mamba-2
mixer's torch path (mamba_ssm absent: mamba2_split_conv1d_scan_combined's fallback returns
None, causal_conv1d_fn is F.conv1d with padding K − 1, mamba2_chunk_scan runs in float32;
accounting/ledger/builder/hf_mamba.py), NemotronHRMSNorm (weight.to(float32) · x),
attention without RoPE, the squared-ReLU MLP, logits .float().

Qwen3-Next and Qwen3.5 (Qwen3NextForCausalLM, Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM,
modeling_qwen3_next.py, modeling_qwen3_5*.py): Qwen3NextRMSNorm's (1 + w) in float32, one
q_proj giving the query and the output gate, partial rotary (cos/sin and inv_freq of d_rot;
Qwen3.5's M-RoPE cos/sin per sequence), the gated DeltaNet on transformers' torch path
(flash-linear-attention absent: causal_conv1d_fn's F.conv1d, torch_chunk_gated_delta_rule
in float32 with its per-chunk loop, whose matmuls under autocast cast each chunk's slices;
Qwen3NextRMSNormGated), the sparse block's sigmoid-gated shared expert.
"""
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from accounting.architecture.hf_config import translate
from accounting.ledger.ledger import ledger
from accounting.planning.recipes import resolve, transformers_gap
from test_hf_nemotron_h import DATA as NEMOTRON_H, FRONTIER
from test_hf_qwen3_next import DATA as QWEN3_NEXT
from test_hf_qwen3_5 import MOE_TEXT as QWEN3_5_MOE, TEXT as QWEN3_5
from collections import Counter

from test_transformers_saves import (DTYPE, MODES, SIZE, assert_two_moments, labels_view,
                                     measured)

CONFIGS = {
    # M*-M: two Mamba-2 blocks (4 heads in 2 groups, chunk 16), attention (GQA 4/2), an MLP
    "nemotron_h": NEMOTRON_H,
    # a group per head, in_proj/out_proj biases, no conv bias, a tied head
    "nemotron_h (groups per head, biases)": {**NEMOTRON_H, "n_groups": 4, "use_bias": True,
                                             "use_conv_bias": False,
                                             "tie_word_embeddings": True,
                                             "hybrid_override_pattern": "M-*M"},
    # Qwen3-Next: 3 gated DeltaNet layers (2 key heads, 4 value heads: grouped), one gated
    # attention layer (GQA 4/2, partial rotary 2 of 8 dims), the sparse block with its gated
    # shared expert in every layer; Qwen3.5's text models: the split projections, M-RoPE
    # (cos/sin per sequence), the dense MLP, and its MoE
    "qwen3_next": QWEN3_NEXT, "qwen3_5_text": QWEN3_5, "qwen3_5_moe_text": QWEN3_5_MOE,
}
# (B, T): Nemotron-H (chunk 16): one padded chunk, exactly one chunk, three chunks with a
# partial one, and B = 1 (F.conv1d reads its input in place whatever the batch); the delta
# rule (chunk 64): one padded chunk, exactly one, two, and B = 1
SHAPES = {"nemotron": ((2, 3), (2, 16), (2, 33), (1, 20)),
          "qwen": ((2, 5), (2, 70), (1, 70))}


def expected(config, B, T, autocast, param_dtype):
    """tests/test_transformers_saves.py's expected(), with a record of `storages` equal
    tensors (the delta rule's per-chunk states and casts) counted as that many storages."""
    lg = ledger(config, autocast, "none", "transformers", param_dtype)
    v = lg.values(T, B)
    out = Counter()
    for a in lg.activations:
        if a.saved and a.elements.evaluate(v):
            n = v[a.storages] if a.storages else 1
            out[(SIZE[a.dtype] * a.elements.evaluate(v) // a.copies // n,
                 str(DTYPE[a.dtype]).removeprefix("torch."))] += a.copies * a.count(v) * n
    return labels_view(out, B, T), sum(b.expr().evaluate(v) for b in lg.buffers)


def build(name, param_dtype):
    from transformers import AutoModelForCausalLM
    from accounting.crosscheck.hf_counter import transformers_config
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(transformers_config(CONFIGS[name]),
                                             attn_implementation="sdpa",
                                             dtype=DTYPE[param_dtype])
    return model.train()


def spec(name):
    recipe, config = resolve(translate(CONFIGS[name], "test", name).config, from_hf=True)
    assert (recipe.implementation, recipe.kernel) == ("transformers", "sdpa")
    return config


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_saved_tensors_equal_the_hybrids_transformers_ledger(name, mode):
    autocast, param_dtype = MODES[mode]
    config = spec(name)
    model = build(name, param_dtype)
    shapes = SHAPES["nemotron" if name.startswith("nemotron") else "qwen"]
    if name.startswith("qwen") and mode != "fp32":  # exactly one chunk (fp32: the xfail below)
        shapes = shapes + ((2, 64),)
    for B, T in shapes:
        want, buffers = expected(config, B, T, autocast, param_dtype)
        assert measured(model, B, T, autocast) == want, (B, T)
    # Nemotron-H: no buffer; Qwen: inv_freq and original_inv_freq of d_rot/2, float32
    assert sum(b.numel() * b.element_size() for b in model.buffers()) == buffers


# Qwen3-Next's and Qwen3.5's step: the planned boundary moment once exceeded the measured
# one by 5,976 (qwen3_next) and 6,240 (qwen3_5_text) bytes at B = 2, T = 5: per DeltaNet
# layer exp(cum_last − cum) and exp(cum_last), which only the state updates read, saved by
# the plan. With one chunk the only update is the last, dropped without a cache, and
# autograd frees what it saved; the saves test kept them alive through its own hook
# (test_the_hook_cycle). The tracker was right
@pytest.mark.slow  # two real steps under a live-storage tracker
@pytest.mark.parametrize("mode", ["fp32", "autocast"])
@pytest.mark.parametrize("name", ["nemotron_h", "qwen3_next", "qwen3_5_text"])
def test_the_two_moments_equal_a_real_step_of_the_hybrids(name, mode):
    _, param_dtype = MODES[mode]
    assert_two_moments(build(name, param_dtype), spec(name), mode)


# fp32, C_l dividing T: x.transpose(1, 2).to(torch.float32, memory_format=
# torch.contiguous_format) aliases a float32 input, F.pad with nothing to pad keeps that
# transposed layout, and torch.matmul copies the operands whose batch dims do not fold:
# four (B, h_lv, T, d_lk) copies in the intra-chunk products unless B = N_c = 1, and, for
# B > 1, each later chunk's decayed Q and K slice in the scan instead of the whole tensors
# (builder/delta.py ALIASED). Before the rule: 12 more 8,192-byte storages at B = 2,
# T = 64; 6 of 16,384 and 6 of 8,192 bytes at T = 128 (three DeltaNet layers). B = 1: the
# scan's slices fold; T = 64 then folds everything; T = 100 pads (real copies)
@pytest.mark.parametrize("name", ["qwen3_next", "qwen3_5_text"])
def test_qwen_saves_when_the_chunk_divides_t(name):
    autocast, param_dtype = MODES["fp32"]
    config, model = spec(name), build(name, param_dtype)
    for B, T in ((2, 64), (2, 128), (2, 192), (1, 64), (1, 128), (2, 100)):
        want, _ = expected(config, B, T, autocast, param_dtype)
        assert measured(model, B, T, autocast) == want, (B, T)


def test_the_unpadded_copies_by_hand():
    """Hand algebra for the fp32 rule above (qwen3_next: h_lv = 4, d_lk = 4, C_l = 64, three
    DeltaNet layers): at B = 2, T = 128 the intra-chunk copies are 4 · 2·4·128·4 · 4 bytes =
    4 · 16,384 per layer, the scan's slices 2 · (N_c − 1) · 2·4·64·4 · 4 = 2 · 8,192, less
    the whole decayed Q and K (2 · 16,384) no longer saved: 2 · 16,384 + 2 · 8,192 = 49,152
    bytes per layer, 147,456 in all; at B = 1, T = 64 nothing (everything folds)."""
    lg = ledger(spec("qwen3_next"), None, "none", "transformers", "fp32")

    def saved(B, T):
        v = lg.values(T, B)
        return {a.name: SIZE[a.dtype] * a.elements.evaluate(v) * a.count(v)
                for a in lg.activations if a.saved}
    rows = saved(2, 128)
    assert sum(b for n, b in rows.items() if "torch.matmul's" in n) == 3 * (4 * 16384 + 2 * 8192)
    assert rows["decayed Q"] == rows["decayed K"] == 0
    assert sum(b for n, b in saved(1, 64).items() if "torch.matmul's" in n) == 0
    # the padded branch keeps the whole decayed Q and K (T = 100: N_c = 2), no copies
    rows = saved(2, 100)
    assert rows["decayed Q"] == rows["decayed K"] == 3 * 2 * 4 * 128 * 4 * 4
    assert not any(b for n, b in rows.items() if "torch.matmul's" in n)


def test_qwen_partial_rotary_buffers_by_hand():
    """Hand algebra from Qwen3NextRotaryEmbedding: inv_freq and original_inv_freq hold
    d_rot/2 float32 values, d_rot = head_dim · partial_rotary_factor = 8 · 0.25 = 2: 2 · 1 · 4
    = 8 bytes (the course's buffers would be of d_k/2 = 4 each, 32 bytes)."""
    lg = ledger(spec("qwen3_next"), None, "none", "transformers", "fp32")
    assert sum(b.expr().evaluate(lg.values(5, 1)) for b in lg.buffers) == 8


def test_qwen_is_planned_with_transformers_ops():
    """The published Qwen3.5 and Qwen3-Next config.json files (../shared/frontier/, when
    present; each with grouped DeltaNet heads, 16 key heads for 32 or 48 value heads) and
    the tiny ones: no gap. Ungrouped heads (h_lk = h_lv: no repeat_interleave, the fp32
    unpadded copies of another layout, measured different and not modelled) stay in it."""
    from accounting.architecture.loaders import read_config
    for n in ("Qwen3.5-27B", "Qwen3.5-35B-A3B", "Qwen3-Next-80B-A3B-Thinking"):
        path = FRONTIER / f"{n}.json"
        if not path.exists():
            continue
        config = read_config(str(path))[0]
        assert transformers_gap(config) is None, n
        recipe, _ = resolve(config, from_hf=True)
        assert recipe.implementation == "transformers", n
    for name in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"):
        assert transformers_gap(spec(name)) is None, name
    config = translate({**QWEN3_NEXT, "linear_num_key_heads": 4}, "test", "q").config
    gap = transformers_gap(config)
    assert gap is not None and "Qwen3-Next and Qwen3.5 layouts" in gap


def test_the_conv_saves_t_plus_k_minus_1_positions_by_hand():
    """Hand algebra from modeling_nemotron_h.py's causal_conv1d_fn: F.conv1d with padding
    K − 1 = 3 computes T + K − 1 positions per channel, and F.silu (ACT2FN["silu"]) saves
    its input, the whole conv output: B·d_xbc·(T + K − 1) fp32 elements, with d_xbc =
    h·p + 2·G·n = 4·4 + 2·2·3 = 28; at B = 2, T = 20: 2·28·23·4 = 5,152 bytes per Mamba-2
    layer. The course's conv (an unfold and a bmm) saves its T·K windows instead."""
    lg = ledger(spec("nemotron_h"), None, "none", "transformers", "fp32")
    v = lg.values(20, 2)
    label = "Mamba-2 conv1d output (T + K − 1 positions)"
    rows = [a for a in lg.activations if a.saved and a.name == label]
    assert [a.elements.evaluate(v) * 4 for a in rows] == [5152]
    course = ledger(spec("nemotron_h"), None, "none", "course", "fp32")
    assert not any(a.name == label for a in course.activations)


def test_nemotron_h_is_planned_with_transformers_ops():
    """The published config.json (../shared/frontier/, when present) and the tiny one: no
    gap; a Nemotron-H with experts (NemotronHMoE, not measured) stays in it."""
    assert transformers_gap(spec("nemotron_h")) is None
    path = FRONTIER / "Nemotron-H-56B-Base-8K.json"
    if path.exists():
        from accounting.architecture.loaders import read_config
        assert transformers_gap(read_config(str(path))[0]) is None
    config = translate(NEMOTRON_H, "test", "nemotron_h").config
    assert transformers_gap(replace(config, num_experts=4, experts_per_token=2,
                                    moe_d_ff=8)) is not None


def test_the_hook_cycle():
    """Why the saves test's pack hook returns a detached alias: transformers' delta rule
    with one chunk (T = 5 < C_l = 64) makes exp(cum_last) and exp(cum_last − cum) only for
    its last state update, dropped without a cache. With no hook, weakrefs to every exp
    output's storage see those two freed once the rule returns; a pack hook returning the
    tensor itself keeps them (a saved output and its grad_fn in a cycle), a detached alias
    does not. Expected: the shapes of modeling_qwen3_next.py's exps, read there."""
    import contextlib
    import weakref
    from torch.utils._python_dispatch import TorchDispatchMode
    from transformers.models.qwen3_next.modeling_qwen3_next import torch_chunk_gated_delta_rule

    def alive(hooks):
        outs = []

        class Exps(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if func is torch.ops.aten.exp.default:
                    outs.append((weakref.ref(out.untyped_storage()), tuple(out.shape)))
                return out
        torch.manual_seed(0)
        q, k, v = (torch.randn(2, 5, 4, 4, requires_grad=True) for _ in range(3))
        g, beta = (-torch.rand(2, 5, 4)).requires_grad_(), torch.rand(2, 5, 4, requires_grad=True)
        ctx = (contextlib.nullcontext() if hooks is None else
               torch.autograd.graph.saved_tensors_hooks(hooks, lambda t: t))
        with Exps(), ctx:
            out, _ = torch_chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=64,
                                                  use_qk_l2norm_in_kernel=True)
        return Counter(s for r, s in outs if r() is not None)
    plain, same, detached = alive(None), alive(lambda t: t), alive(lambda t: t.detach())
    # the pairwise decay (2, 4, 1, 64, 64), exp(cum) twice (2, 4, 1, 64), ...; with the
    # cycle, exp(cum_last − cum) (2, 4, 1, 64) and exp(cum_last) (2, 4, 1) too
    assert same - plain == Counter({(2, 4, 1, 64): 1, (2, 4, 1): 1})
    assert detached == plain and plain[(2, 4, 1, 64)] == 2


@pytest.mark.parametrize("mode", ["autocast", "bf16"])
def test_nemotron_h_output_holds_float32_logits(mode):
    """Regression (a wrong number with exit 0): NemotronHForCausalLM returns
    `self.lm_head(hidden_states).float()` (transformers 5.23 modeling_nemotron_h.py), so a
    loop that holds its output (`out = model(ids, labels=…); out.loss.backward()`, what
    cuda_peak's TRANSFORMERS_LOSS plans) keeps float32 logits, 4·B·T·V bytes, the bf16 head
    output being freed; the plan added 2·B·T·V (the head's bf16). Measured: the live bytes at
    the first log_softmax backward of a real CPU step (tests/test_peak.py's tracker, AdamW
    foreach, the second step) with the output held are the plan's CPU moment (the output
    dropped, tests/test_transformers_saves.py assert_two_moments) plus 4·B·T·V, by hand; the
    CUDA plan's boundary is the CPU's plus 4·B·T·V and the two cuBLAS workspaces (bf16 SDPA,
    no mask, d 8: flash, no attention adjustment; tests/test_cuda_peak.py WORKSPACES)."""
    from test_peak import MARKS, second_step_marks
    from accounting.planning.memory import MemoryModel, get_precision
    autocast, param_dtype = MODES[mode]
    config, model = spec("nemotron_h"), build("nemotron_h", param_dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    B, T, V = 2, 5, NEMOTRON_H["vocab_size"]
    g = torch.Generator().manual_seed(1)
    ids, targets = (torch.randint(0, V, (B, T), generator=g) for _ in range(2))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast is not None):
            out = model(ids, labels=targets, use_cache=False)
        assert out.logits.dtype == torch.float32
        out.loss.backward()
        opt.step()
    marks = second_step_marks(model, opt, step, ids, targets)
    precision = get_precision("bf16-mixed" if autocast else "bf16")
    moments = {}
    for device in ("cpu", "cuda"):
        p = replace(precision, autocast=device) if autocast else precision
        m = MemoryModel(config, p, implementation="transformers", device=device)
        moments[device] = m.peak_terms[0].bytes.evaluate(m.ledger.values(T, B))
    assert marks[MARKS[0]] == moments["cpu"] + 4 * B * T * V
    assert moments["cuda"] - moments["cpu"] == 4 * B * T * V + 2 * 32 * 2**20


def test_the_many_gpu_ledger_returns_nemotron_h_logits_in_float32():
    """The many-GPU planner's loss rule (planning/parallel/peak.py _cuda) reads the dtype
    the forward returns from its own unfolded ledger: float32 for NemotronHForCausalLM
    (`self.lm_head(hidden_states).float()`, transformers 5.23), whatever the parameters' and
    autocast's dtypes; the head's bf16 for a model without the cast (the course's, under
    CUDA autocast: bf16-mixed's head matmul)."""
    from accounting.planning.parallel.shards import split
    from accounting.planning import cuda_peak as CP
    config = spec("nemotron_h")
    for autocast, param_dtype in (("cuda", "fp32"), (None, "bf16")):
        sp = split(config, autocast, "none", "transformers", param_dtype=param_dtype)
        assert sp.ledger.logits_dtype == "fp32"
        rules = CP.loss(sp.ledger.activations, autocast, "transformers",
                        sp.ledger.logits_dtype)
        assert [a.bytes.evaluate({"B": 2, "T": 5, "V": 96}) for a in rules] == [4 * 2 * 5 * 96]
    from accounting.architecture.config import ModelConfig
    course = split(ModelConfig(vocab_size=96, context_length=64, num_layers=2, d_model=32,
                               num_heads=4, d_ff=48), "cuda", "none", "course")
    assert course.ledger.logits_dtype == "bf16"
