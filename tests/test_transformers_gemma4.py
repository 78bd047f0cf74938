"""The transformers implementation's ledger for Gemma 4's text model (Gemma4ForCausalLM;
accounting/ledger/builder/hf_gemma4.py) against transformers' own model on the CPU, as
tests/test_transformers_saves.py does for the other SDPA families.

transformers 5.23's models/gemma4/modeling_gemma4.py: Gemma4PreTrainedModel._supports_sdpa
= True (no attention soft-cap), so AutoModelForCausalLM runs it with SDPA; a tiny config
built with attn_implementation="sdpa", one training step's forward and loss under
saved-tensor hooks, every storage autograd saves (parameters and buffers excluded, each
storage once) compared, by size and dtype, with the ledger's saved records for
implementation "transformers": in fp32, under the CPU's bf16 autocast and with bf16
parameters, on both sides of the sliding window (T = W: masked, T = W − 1: not). What the
model saves there beside the Llama families' tensors, read off the hooks and the modeling
file: Gemma4RMSNorm's fp32 input, its B×T mean square + eps (torch.pow(·, −0.5) saves its
input) and the pow's output, the normalized x the gain multiplies (no 1 + w); v_norm's
(weightless) the same but the gain; the per-layer inputs (one (B, T, L, d_ple) storage,
each layer's slice saved by its product with the gate), GELUTanh's input; the router's
normalized input × scale, its float32 softmax, top-k indices and renormalised weights ×
per_expert_scale[top_k_index]; grouped_mm's sorted slots, offsets and gate_up output. The
buffers: embed_scale (and embed_tokens_per_layer's), layer_scalar per layer (in the
parameters' dtype), inv_freq and original_inv_freq per layer type (of d_k and d_kG).
"""
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from accounting.architecture.hf_config import translate
from accounting.planning.recipes import resolve, transformers_gap
from test_transformers_saves import DTYPE, MODES, assert_two_moments, expected, measured
from test_hf_gemma4 import DATA as MOE
from test_hf_gemma4_small import DATA as SMALL

# E2B/E4B's layout: per-layer embeddings (the table as wide as the vocabulary, as published:
# vocab_size_per_layer_input = vocab_size), KV sharing (layers 4–6 reuse 3's and 2's K and
# V), the double-wide MLP on the sharing layers; GQA 4/2; and one KV head (repeat_kv a view)
SMALL = {**SMALL, "vocab_size_per_layer_input": SMALL["vocab_size"]}
CONFIGS = {"gemma4 (PLE, KV sharing)": SMALL,
           "gemma4 (PLE, KV sharing, MQA)": {**SMALL, "num_key_value_heads": 1},
           # 26B-A4B's layout: 4 experts (top 2) beside the dense MLP in every layer, the full
           # layer's own head shape (d_kG 16, one KV head) with K = V
           "gemma4 (MoE, K = V)": MOE}


def build(name, param_dtype, attention="sdpa"):
    """transformers' Gemma4ForCausalLM from the config, with SDPA (or eager), in
    param_dtype."""
    from transformers import AutoModelForCausalLM
    from accounting.crosscheck.hf_counter import transformers_config
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(transformers_config(CONFIGS[name]),
                                             attn_implementation=attention,
                                             dtype=DTYPE[param_dtype])
    assert type(model).__name__ == "Gemma4ForCausalLM"
    return model.train()


def planned(name):
    """The config as the recipe plans a Hugging Face config by default."""
    return resolve(translate(CONFIGS[name], "test", name).config, from_hf=True)


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_saved_tensors_equal_the_gemma4_transformers_ledger(name, mode):
    recipe, config = planned(name)
    # transformers' ops with its SDPA (Gemma 4 has no attention soft-cap), not the course's
    assert (recipe.implementation, recipe.kernel) == ("transformers", "sdpa")
    assert transformers_gap(config) is None
    autocast, param_dtype = MODES[mode]
    model = build(name, param_dtype)
    W, B = config.sliding_window, 2
    for T in (W, W - 1):  # transformers masks the sliding layers from T = W on
        want, buffers = expected(config, B, T, autocast, param_dtype)
        assert measured(model, B, T, autocast) == want, T
    assert sum(b.numel() * b.element_size() for b in model.buffers()) == buffers


@pytest.mark.parametrize("mode", ["autocast", "bf16"])  # (fp32: the SDPA test's modules)
@pytest.mark.parametrize("name", ["gemma4 (PLE, KV sharing)", "gemma4 (MoE, K = V)"])
def test_eager_attention_as_transformers_runs_it(name, mode):
    """attn_implementation="eager" against the ledger with attention "naive" under
    transformers' ops (builder/hf_eager.py; the CLI plans it only for the models
    transformers refuses SDPA for, the ledger API takes it for any): QKᵀ · scaling (1.0,
    an op all the same), the additive mask, the
    float32 softmax saved, cast back; the full layers' own head shape (MoE: one KV head,
    repeat_kv a view that the matmuls copy to h heads)."""
    _, config = planned(name)
    config = replace(config, attention="naive")
    autocast, param_dtype = MODES[mode]
    T, B = config.sliding_window, 2
    want, _ = expected(config, B, T, autocast, param_dtype)
    assert measured(build(name, param_dtype, "eager"), B, T, autocast) == want


LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.mark.parametrize("mode", ["autocast", "bf16"])  # a bf16 base, as QLoRA/LoRA plans
@pytest.mark.parametrize("name", ["gemma4 (PLE, KV sharing)", "gemma4 (MoE, K = V)"])
def test_peft_lora_on_gemma4_saves_what_the_lora_ledger_says(name, mode):
    """PEFT's LoRA (r 4 on the attention and dense MLP projections; adapters in float32)
    on transformers' Gemma4ForCausalLM with enable_input_require_grads(), as
    tests/test_finetune_transformers.py runs it for the Llama layouts: the saved storages
    equal the LoRA ledger's (the embeddings' leaf, held by its AccumulateGrad node and
    unseen by the hooks, left out on both sides); PEFT's trainable count the plan's."""
    peft = pytest.importorskip("peft")
    from collections import Counter
    from accounting.ledger.builder.lora import LEAF
    from accounting.ledger.ledger import ledger
    from accounting.planning.finetune import LoRA, resolve as finetune
    from test_transformers_saves import SIZE
    autocast, base = {"fp32": (None, "fp32"), "autocast": ("cpu", "bf16"),
                      "bf16": (None, "bf16")}[mode]
    h = translate(CONFIGS[name], "test", name)
    config = replace(h.config, attention="sdpa")
    ft = finetune(config, LoRA(rank=4, targets=LORA_TARGETS), h.type.module_names(h.data),
                  autocast, None, True, "transformers")
    model = build(name, base)
    model.enable_input_require_grads()
    pm = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=list(LORA_TARGETS)))
    assert sum(p.numel() for p in pm.parameters() if p.requires_grad) == ft.adapter_count()
    T, B = config.sliding_window, 2
    lg = ledger(config, autocast, "none", "transformers", base, ft.adapters)
    v = lg.values(T, B)
    want = Counter()
    for a in lg.activations:
        if a.saved and a.name != LEAF and a.elements.evaluate(v):
            want[(SIZE[a.dtype] * a.elements.evaluate(v) // a.copies,
                  str(DTYPE[a.dtype]).removeprefix("torch."))] += a.copies * a.count(v)
    assert measured(pm, B, T, autocast) == want


@pytest.mark.slow  # two real steps under a live-storage tracker
@pytest.mark.parametrize("mode", ["fp32", "autocast"])
@pytest.mark.parametrize("name", ["gemma4 (PLE, KV sharing)", "gemma4 (MoE, K = V)"])
def test_the_two_moments_equal_a_real_step_of_gemma4(name, mode):
    """The planner's two moments (the first log_softmax backward, AdamW's _foreach_sqrt)
    against the live bytes of a real CPU step of transformers' Gemma4ForCausalLM
    (test_transformers_saves.assert_two_moments)."""
    _, config = planned(name)
    assert_two_moments(build(name, MODES[mode][1]), replace(config, attention="sdpa"),
                       mode)


PUBLISHED = Path(__file__).resolve().parents[2] / "shared" / "frontier" / "gemma-4-26B-A4B.json"


@pytest.mark.skipif(not PUBLISHED.exists(), reason="the published config.json is not here")
def test_the_published_26b_a4b_is_planned_with_transformers_ops():
    """gemma-4-26B-A4B's config.json as published (its text_config): every field it sets is
    one the tiny configs above measure, so the default recipe is transformers' ops with SDPA
    and no note (before: "norm_placement, mlp, embedding_multiplier …" and model/'s ops)."""
    from accounting.architecture.loaders import read_config
    config = read_config(str(PUBLISHED))[0]
    assert transformers_gap(config) is None
    recipe, _ = resolve(config, from_hf=True)
    assert (recipe.implementation, recipe.kernel, recipe.note) == ("transformers", "sdpa", "")


@pytest.mark.slow  # two real steps under a live-storage tracker
@pytest.mark.parametrize("mode", ["fp32", "autocast"])
@pytest.mark.parametrize("name", ["gemma4 (PLE, KV sharing)", "gemma4 (MoE, K = V)"])
def test_full_recomputation_equals_gradient_checkpointing(name, mode):
    """--recompute full against transformers' gradient_checkpointing_enable() on a real CPU
    step (test_peak.py's tracker, as assert_two_moments): besides each layer's input and
    cos/sin, its checkpoint keeps the full layers' cos/sin, the per-layer inputs and, in a
    KV-sharing layer, the store layer's K and V (the shared_kv_states dict it is passed:
    builder/hf_gemma4.py checkpoint_kept). One thing more is live, not planned: the
    (1, T) int64 position_ids every layer is passed, 8·T bytes (hand algebra). Without
    checkpoint_kept the plan was short by 6,720 bytes on the PLE config (the dict's K and
    V 3,840, the per-layer inputs 2,240, the full layers' cos/sin 640) and 640 on the
    MoE one."""
    from test_peak import MARKS, LiveBytes
    from accounting.planning.memory import MemoryModel, get_precision
    autocast, param_dtype = MODES[mode]
    _, config = planned(name)
    model = build(name, param_dtype)
    model.gradient_checkpointing_enable()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, foreach=True)
    B, T = 2, 5
    g = torch.Generator().manual_seed(1)
    ids, targets = (torch.randint(0, config.vocab_size, (B, T), generator=g) for _ in range(2))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast is not None):
            loss = model(ids, labels=targets, use_cache=False).loss  # its own loss
        loss.backward()
        opt.step()
    step()
    steps = sum(s["step"].untyped_storage().nbytes() for s in opt.state.values())
    state = [t for s in opt.state.values() for t in s.values()]
    tracker = LiveBytes([*model.parameters(), *model.buffers(), ids, targets, *state])
    with tracker:
        step()
    precision = get_precision("fp32" if mode == "fp32" else "bf16-mixed")
    if autocast:
        precision = replace(precision, autocast="cpu")
    m = MemoryModel(config, precision, implementation="transformers", device="cpu",
                    recompute="full")
    v = m.ledger.values(T, B)
    boundary, update = (ph.bytes.evaluate(v) for ph in m.peak_terms)
    assert tracker.marks[MARKS[0]] - steps == boundary + 8 * T
    assert tracker.marks[MARKS[1]] - steps == update
