"""The transformers implementation's ledger against transformers' own model on the CPU.

For each model type the planner models under implementation "transformers"
(accounting/planning/recipes.py), a tiny config.json (tests/hf_examples.py) is built with
AutoModelForCausalLM.from_config(attn_implementation="sdpa"), one training step's forward
and loss run under torch.autograd.graph.saved_tensors_hooks — the model's own loss, as
Trainer runs it: model(ids, labels=labels).loss (ForCausalLMLoss: the logits upcast to
float32, the labels shifted; accounting/ledger/builder/hf_loss.py) — and every storage autograd
saves (parameters excluded, each storage once: tests/test_architectures.py saved_tensors)
is compared, by size and dtype, with the ledger's saved records built with
implementation="transformers" — in fp32, under torch.autocast("cpu", bfloat16) and with
bf16 parameters. The model's buffers are compared with the ledger's buffers.
"""
from collections import Counter
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from accounting.ledger.ledger import ledger
from accounting.planning.recipes import transformers_gap
from accounting.architecture.hf_config import translate
from hf_examples import CONFIGS as DENSE
from hf_moe_examples import CONFIGS as MOE
from test_hf_gemma import CONFIGS as GEMMA
from test_hf_cohere import CONFIGS as COHERE
from test_hf_cohere2 import CONFIGS as COHERE2

from test_hf_frontier_dense import CONFIGS as FRONTIER

# Mixtral without its example's window (Mixtral-8x7B's config.json has none), and with it
CONFIGS = {**DENSE, "qwen3_moe": MOE["qwen3_moe"],
           "mixtral": {**MOE["mixtral"], "sliding_window": None},
           # sliding windows: every layer (Mistral 5, MQA; Mixtral 6), Qwen2's from
           # max_window_layers (window 4), Qwen3's layer_types (5), OLMo-3's (its RoPE per
           # layer type, like Gemma 3's)
           "mistral_window": MOE["mistral"], "mixtral_window": MOE["mixtral"],
           "qwen2_window": MOE["qwen2"], "qwen3_window": MOE["qwen3"],
           "olmo3": FRONTIER["olmo3"],
           # Gemma 3's text model: windows 5 and 3 (T = 5 reaches both: masked), one KV head
           # (repeat_kv a view), a final soft-cap untied; and GQA 4/2 (repeat_kv copies K
           # and V), every layer global (no mask, the full_attention RoPE buffers only)
           "gemma3": GEMMA["gemma3_text"], "gemma3_t5": GEMMA["gemma3_text (transformers 5)"],
           "gemma3_gqa": {**GEMMA["gemma3_text (transformers 5)"], "num_attention_heads": 4,
                          "num_key_value_heads": 2, "head_dim": 8},
           "gemma3_global": {**GEMMA["gemma3_text (transformers 5)"],
                             "layer_types": ["full_attention", "full_attention"]},
           # Cohere: MHA, GQA with per-head QK-norm, MQA with biases; Cohere 2 (window 6:
           # three sliding layers with RoPE, a NoPE global one; GQA 4/2)
           "cohere": COHERE["command-r"], "cohere_plus": COHERE["command-r-plus"],
           "cohere_mqa": COHERE["cohere (biased, untied, head_dim)"],
           "cohere2": COHERE2["command-r7b"],
           # GPT-2 with its dropouts at 0 (its saved tensors: tests/test_transformers_gpt2.py)
           "gpt2": {**DENSE["gpt2"], "attn_pdrop": 0.0, "embd_pdrop": 0.0, "resid_pdrop": 0.0}}
from test_architectures import saved_tensors

DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "bool": torch.bool, "int64": torch.int64,
         "complex64": torch.complex64,
         "int32": torch.int32}
SIZE = {"fp32": 4, "bf16": 2, "bool": 1, "int64": 8, "int32": 4, "complex64": 8}
# qwen3_moe: a dense and two sparse blocks, transformers' grouped_mm experts (the default
# experts implementation): the sorted slots' indices, the int32 offsets, the stacked
# gate_up output, all in fp32 under autocast (grouped_mm is not autocast-enabled)
# olmo2: post-norms and full-width QK-norm; Olmo2RMSNorm multiplies by the gain in fp32
# before its cast, and its rotary cos/sin stay fp32 (q_embed cast back)
# gemma3*: Gemma3RMSNorm saves the fp32 (1 + w) it multiplies by, GELUTanh its input, the
# scaled embedding its 0-dim embed_scale buffer; a sliding layer's sdpa saves the mask
# torch made additive in the query's dtype, and K/V as repeat_kv left them; the buffers are
# embed_scale and inv_freq/original_inv_freq per layer type present
FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "mixtral", "olmo2", "gemma3",
            "gemma3_t5", "gemma3_gqa", "gemma3_global", "cohere", "cohere_plus", "cohere_mqa",
            "cohere2", "mistral_window", "mixtral_window", "qwen2_window", "qwen3_window", "olmo3")
# cohere*: CohereLayerNorm computes x − mean twice (two saved storages), saves its rsqrt,
# and (bf16 parameters) the fp32 copy of its weight it multiplies by
# (ledger autocast, parameter dtype): fp32, bf16-mixed on the CPU's autocast, pure bf16
MODES = {"fp32": (None, "fp32"), "autocast": ("cpu", "fp32"), "bf16": (None, "bf16")}


def build(name, param_dtype):
    from transformers import AutoModelForCausalLM
    from accounting.crosscheck.hf_counter import transformers_config
    torch.manual_seed(0)
    # dtype= as from_pretrained(dtype=torch.bfloat16) does: the parameters in bf16, the
    # rotary inverse frequencies still float32 (computed with dtype=torch.float)
    model = AutoModelForCausalLM.from_config(transformers_config(CONFIGS[name]),
                                             attn_implementation="sdpa",
                                             dtype=DTYPE[param_dtype])
    assert {p.dtype for p in model.parameters()} == {DTYPE[param_dtype]}
    return model.train()


def measured(model, B, T, autocast):
    g = torch.Generator().manual_seed(1)
    V = model.config.vocab_size
    ids, targets = (torch.randint(0, V, (B, T), generator=g) for _ in range(2))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast is not None):
        seen = saved_tensors(model, ids, targets, use_cache=False, labels=True)
    # a buffer an op saves (Gemma 3's embed_scale) is held anyway: compared with the buffers
    buffers = {b.untyped_storage().data_ptr() for b in model.buffers()}
    return Counter((n, str(dtype).removeprefix("torch.")) for ptr, (_, n, dtype) in seen.items()
                   if ptr not in buffers)


def labels_view(out: Counter, B: int, T: int) -> Counter:
    """The ledger's saved storages as transformers' loss saves them: at B = 1 the shifted
    labels nll_loss saves are labels[..., 1:] of the (1, T + 1) padded labels, contiguous
    already, so a view whose storage is T + 1 int64 where the ledger counts the tensor's T
    (hand algebra; accounting/ledger/builder/hf_loss.py)."""
    if B == 1:
        out[(8 * T, "int64")] -= 1
        out[(8 * (T + 1), "int64")] += 1
    return +out


def expected(config, B, T, autocast, param_dtype):
    lg = ledger(config, autocast, "none", "transformers", param_dtype)
    v = lg.values(T, B)
    out = Counter()
    for a in lg.activations:
        if a.saved and a.elements.evaluate(v):  # (0: a [T≥W] or [T<W] branch not taken)
            out[(SIZE[a.dtype] * a.elements.evaluate(v) // a.copies,
                 str(DTYPE[a.dtype]).removeprefix("torch."))] += a.copies * a.count(v)
    return labels_view(out, B, T), sum(b.expr().evaluate(v) for b in lg.buffers)


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("name", FAMILIES)
def test_saved_tensors_equal_the_transformers_ledger(name, mode):
    autocast, param_dtype = MODES[mode]
    config = replace(translate(CONFIGS[name], "test", name).config, attention="sdpa")
    model = build(name, param_dtype)
    # transformers masks a sliding layer only from T = W on: both sides of the window
    W = config.sliding_window
    B, lengths = 2, (5,) if W is None else (max(5, W), W - 1)
    for T in lengths:
        want, buffers = expected(config, B, T, autocast, param_dtype)
        assert measured(model, B, T, autocast) == want, T
    assert transformers_gap(config) is None  # the recipe plans transformers' ops for it
    # the buffers: inv_freq and original_inv_freq, d_k/2 float32 each (Gemma 3: per layer
    # type, and embed_scale)
    assert sum(b.numel() * b.element_size() for b in model.buffers()) == buffers


# ---- the step's two moments on transformers' model ------------------------------------------

def assert_two_moments(model, config, mode, B=2):
    """tests/test_peak.py's live-storage tracker over a real CPU step of transformers' model
    (its own loss, model(ids, labels=targets).loss, the output dropped as Trainer's
    compute_loss drops it; AdamW foreach, the second step): the live bytes at the first
    log_softmax backward and at AdamW's _foreach_sqrt equal the planner's two moments for
    implementation "transformers"; `mode` "bf16": the parameters in bf16, no autocast."""
    from test_peak import MARKS, second_step_marks
    from accounting.planning.memory import MemoryModel, get_precision
    autocast, _ = MODES[mode]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, foreach=True)
    T = 5
    g = torch.Generator().manual_seed(1)
    ids, targets = (torch.randint(0, config.vocab_size, (B, T), generator=g) for _ in range(2))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast is not None):
            loss = model(ids, labels=targets, use_cache=False).loss
        loss.backward()
        opt.step()
    marks = second_step_marks(model, opt, step, ids, targets)
    precision = get_precision({"fp32": "fp32", "bf16": "bf16"}.get(mode, "bf16-mixed"))
    if autocast:
        precision = replace(precision, autocast="cpu")
    m = MemoryModel(config, precision, implementation="transformers", device="cpu")
    v = m.ledger.values(T, B)
    boundary, update = (ph.bytes.evaluate(v) for ph in m.peak_terms)
    assert marks[MARKS[0]] == boundary
    assert marks[MARKS[1]] == update


@pytest.mark.slow  # two real steps each under a live-storage tracker (scheduled first)
@pytest.mark.parametrize("mode", ["fp32", "autocast"])
@pytest.mark.parametrize("name", ["llama", "qwen3_moe", "gemma3", "cohere_plus", "gpt2"])
def test_the_two_moments_equal_a_real_step_of_transformers_model(name, mode):
    """tests/test_peak.py's live-storage tracker over a real CPU step of transformers' model
    (its own loss via labels=, AdamW foreach, the second step): the live bytes at the
    first log_softmax backward and at AdamW's _foreach_sqrt equal the planner's two moments
    for implementation "transformers" (its parameters, buffers, AdamW state, what the
    model saves); bf16-mixed with the CPU's autocast policies (the CUDA table is
    documented, not measured)."""
    autocast, param_dtype = MODES[mode]
    config = replace(translate(CONFIGS[name], "test", name).config, attention="sdpa")
    assert_two_moments(build(name, param_dtype), config, mode)


def test_pure_bf16_loss_is_float32_as_transformers_runs_it():
    """Regression (a wrong number with exit 0): under pure bf16 the plan had F.cross_entropy
    on the model's bf16 logits, a bf16 log-softmax and two bf16 gradients at the backward
    pass's start, where transformers' ForCausalLMLoss upcasts the logits first
    (`logits = logits.float()`, loss/loss_utils.py): the live bytes measured at the first
    log_softmax backward of a real step with bf16 parameters, model(ids, labels=…).loss,
    are the plan's (the measurement is the independent side), and the log-softmax the
    ledger keeps is float32. B = 1 as well: there nll_loss saves a view of the padded
    labels (T + 1), released before that moment, where the loop's labels (T) are live."""
    from accounting.planning.memory import MemoryModel, get_precision
    config = replace(translate(CONFIGS["llama"], "test", "llama").config, attention="sdpa")
    model = build("llama", "bf16")
    for B in (2, 1):
        assert_two_moments(model, config, "bf16", B)
    m = MemoryModel(config, get_precision("bf16"), implementation="transformers", device="cpu")
    lsm = next(r for r in m.ledger.activations if r.name == "log-softmax of the logits")
    assert lsm.dtype == "fp32"


def test_the_docs_figure_for_llama_3_1_8b():
    """docs/planning.md's figure: under pure bf16 transformers' loss keeps a float32
    log-softmax and makes two float32 gradients, 3 × 4 bytes a logit, where F.cross_entropy on
    bf16 logits keeps 3 × 2: 6·B·T·V more (hand algebra), V = 128,256 (Llama-3.1-8B's
    config.json), T = 8,192, B = 1: 6,304,038,912 bytes, "6.3 GB"."""
    from pathlib import Path
    from accounting import get_preset
    from accounting.planning.memory import MemoryModel, get_precision
    V, T, B = 128_256, 8192, 1
    m = MemoryModel(get_preset("meta-llama/Llama-3.1-8B"), get_precision("bf16"),
                    implementation="transformers", device="cpu")
    v = m.ledger.values(T, B)
    assert v["V"] == V
    lsm = next(r for r in m.ledger.activations if r.name == "log-softmax of the logits")
    region = lsm.elements.evaluate(v) * lsm.bytes_per_element + m.loss_region.backward.evaluate(v)
    assert region == 3 * 4 * B * T * V
    more = region - 3 * 2 * B * T * V
    assert more == 6_304_038_912
    docs = (Path(__file__).resolve().parents[1] / "docs" / "planning.md").read_text()
    assert f"{more / 1e9:.1f} GB for Llama-3.1-8B at 8,192 tokens" in docs
