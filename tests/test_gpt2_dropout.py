"""Dropout and the tanh GELU as transformers runs them (issue 41, Must 4): the spec's
embedding_dropout, attention_dropout, residual_dropout (GPT-2's embd_pdrop, attn_pdrop,
resid_pdrop) and fused_gelu (ACT2FN's gelu_pytorch_tanh), against transformers' own
GPT2LMHeadModel on the CPU.

CUDA's dropout is aten.native_dropout (aten/src/ATen/native/Dropout.cpp
is_fused_kernel_acceptable: input.is_cuda()), which saves a bool mask; the CPU's F.dropout is
the composite input·noise. torch.native_dropout has a CPU kernel too, so the tests run
transformers' model with F.dropout routed to it: the step CUDA runs, on the CPU, measured with
saved-tensor hooks (tests/test_architectures.py saved_tensors) and the op counter
(crosscheck/dispatch.py). The attention's dropout is SDPA's own (dropout_p): on the CPU it
takes the math composite, on CUDA the flash or memory-efficient kernel (no mask kept), so
those tests set attn_pdrop to 0 and the ledger's rule for it is checked by hand."""
from collections import Counter
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from accounting.architecture.hf_config import translate
from accounting.architecture.presets import get_preset
from accounting.ledger.ledger import ledger
from accounting.planning.recipes import resolve, transformers_gap
from accounting.runtime.errors import UsageError
from hf_examples import CONFIGS as DENSE
from test_transformers_gpt2 import expected_on_cpu
from test_transformers_saves import DTYPE, MODES, measured

HIDDEN = {**DENSE["gpt2"], "attn_pdrop": 0.0}  # embd_pdrop, resid_pdrop 0.1 (as given)
MASK = "dropout mask (1 byte)"


def cuda_dropout(input, p=0.5, training=True, inplace=False):
    """F.dropout as CUDA runs it: aten.native_dropout (output, bool mask)."""
    if not training or p == 0:
        return input
    return torch.native_dropout(input, p, True)[0]


def build(cfg, param_dtype="fp32"):
    from transformers import AutoModelForCausalLM
    from accounting.crosscheck.hf_counter import transformers_config
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(transformers_config(cfg), attn_implementation="sdpa",
                                            dtype=DTYPE[param_dtype]).train()


@pytest.mark.parametrize("mode", sorted(MODES))
def test_cuda_dropout_saves_the_masks_the_ledger_counts(mode, monkeypatch):
    """GPT-2 with its hidden dropouts (0.1), F.dropout as native_dropout: every storage
    autograd saves equals the transformers ledger's saved records by size and dtype, the
    2L + 1 bool masks among them (the ledger without them would miss 2L + 1 rows)."""
    autocast, param_dtype = MODES[mode]
    monkeypatch.setattr(torch.nn.functional, "dropout", cuda_dropout)
    recipe, config = resolve(translate(HIDDEN, "test", "gpt2").config, from_hf=True)
    assert recipe.implementation == "transformers" and transformers_gap(config) is None
    model = build(HIDDEN, param_dtype)
    L = config.num_layers
    for B, T in ((2, 5), (1, 7)):
        want, _ = expected_on_cpu(config, B, T, autocast, param_dtype)
        got = measured(model, B, T, autocast)
        assert got == want, (B, T)
        # by hand: 2L + 1 bool masks of B·T·d_model elements
        assert got[(B * T * config.d_model, "bool")] == 2 * L + 1


def test_mask_bytes_and_flops_by_hand():
    """openai-community/gpt2 (L = 12, d_model = 768, dropouts 0.1), B = 1, T = 1,024,
    under CUDA autocast: (2L + 1)·B·T·d_model = 25·786,432 = 19,660,800 mask bytes, one
    per element of the embeddings and of each sublayer's output (the previous note's
    estimate), and as many dropout FLOPs (1 per element, one op each); the attention's
    dropout, inside SDPA's flash kernel, adds neither."""
    c = get_preset("openai-community/gpt2")
    lg = ledger(c, "cuda", "none", "transformers", "fp32")
    v = lg.values(1024, 1)
    masks = [a for a in lg.activations if a.name.endswith(MASK)]
    assert sum(a.elements.evaluate(v) * a.count(v) for a in masks) == 19_660_800
    assert {a.dtype for a in masks} == {"bool"}
    drops = [e for e in lg.elementwise if e.component == "dropout"]
    assert sum(e.flops(v) * e.count(v) for e in drops) == 19_660_800
    no_attn = ledger(replace(c, attention_dropout=0.0), "cuda", "none", "transformers", "fp32")
    assert no_attn.activations == lg.activations and no_attn.elementwise == lg.elementwise


def test_the_op_counter_sees_the_dropouts_the_ledger_counts(monkeypatch):
    """The forward pass's aten.native_dropout calls on transformers' model in train():
    their elements (the op counter's convention: 1 FLOP per output element) equal the
    ledger's dropout FLOPs; in eval() no dropout op runs at all."""
    from accounting.crosscheck.dispatch import OpCounter
    from accounting.ledger.records import FORWARD
    monkeypatch.setattr(torch.nn.functional, "dropout", cuda_dropout)
    config = translate(HIDDEN, "test", "gpt2").config
    model = build(HIDDEN)
    B, T = 2, 5
    ids = torch.zeros((B, T), dtype=torch.long)
    with OpCounter(model) as counter:
        model(input_ids=ids, use_cache=False).logits.sum().backward()
    fwd = [r for r in counter.counts() if r.phase == FORWARD and r.op == "aten.native_dropout"]
    lg = ledger(config, None, "none", "transformers", "fp32")
    v = lg.values(T, B)
    want = sum(e.flops(v) * e.count(v) for e in lg.elementwise if e.component == "dropout")
    assert sum(r.flops for r in fwd) == want == (2 * config.num_layers + 1) * B * T * 48
    model.eval()
    with torch.no_grad(), OpCounter(model) as counter:
        model(input_ids=ids, use_cache=False)
    assert not [r for r in counter.counts()
                if r.op in ("aten.native_dropout", "aten.bernoulli", "aten.dropout")]


def test_inference_and_the_course_model_are_unchanged_by_dropout():
    """What serving, inference and the forward FLOPs read (the course ledger: model/ has
    no dropout) is the same with GPT-2's dropouts as without; a plan of the course's model
    says that the config's dropout is not counted."""
    c = get_preset("openai-community/gpt2")
    zero = replace(c, embedding_dropout=0.0, attention_dropout=0.0, residual_dropout=0.0)
    a, b = ledger(c), ledger(zero)
    assert (a.forward, a.elementwise, a.activations, a.params, a.cache, a.buffers) \
        == (b.forward, b.elementwise, b.activations, b.params, b.cache, b.buffers)
    recipe, _ = resolve(c, from_hf=True, implementation="course")
    assert "no dropout" in recipe.note
    assert "no dropout" not in resolve(zero, from_hf=True, implementation="course")[0].note


def test_dropout_probabilities_are_bounded():
    """nn.Dropout's p: a config.json value outside [0, 1) or null is refused in one line
    (transformers' GPT2Config types it float | int; p = 1 zeroes the tensor), and so is
    the spec's field."""
    for bad in (1.0, -0.1, None, "0.1"):
        with pytest.raises(UsageError, match="resid_pdrop"):
            translate({**DENSE["gpt2"], "resid_pdrop": bad}, "test", "gpt2")
    c = get_preset("openai-community/gpt2")
    with pytest.raises(UsageError, match="embedding_dropout"):
        replace(c, embedding_dropout=1)
    absent = {k: v for k, v in DENSE["gpt2"].items() if not k.endswith("pdrop")}
    # GPT2Config's defaults: 0.1 each (configuration_gpt2.py)
    got = translate(absent, "test", "gpt2").config
    assert (got.embedding_dropout, got.attention_dropout, got.residual_dropout) == (0.1,) * 3


# ---- the tanh GELU: gelu_new's eight ops, or gelu_pytorch_tanh's one ---------------------

def test_act2fn_names_read_as_they_run():
    """activation_function gelu_new is NewGELUActivation (explicit ops), gelu_pytorch_tanh
    GELUTanh (one F.gelu): fused_gelu; the same spec otherwise. A fused GELU without a tanh
    GELU MLP is refused."""
    from transformers.activations import ACT2FN, GELUTanh, NewGELUActivation
    assert isinstance(ACT2FN["gelu_new"], NewGELUActivation)
    assert isinstance(ACT2FN["gelu_pytorch_tanh"], GELUTanh)
    new = translate(DENSE["gpt2"], "test", "gpt2").config
    fused = translate({**DENSE["gpt2"], "activation_function": "gelu_pytorch_tanh"}, "test",
                      "gpt2").config
    assert (new.fused_gelu, fused.fused_gelu) == (False, True)
    assert replace(fused, fused_gelu=False) == replace(new, name=fused.name)
    with pytest.raises(UsageError, match="fused_gelu"):
        replace(new, mlp="swiglu", fused_gelu=True)


@pytest.mark.parametrize("act, per_element", [("gelu_new", 8), ("gelu_pytorch_tanh", 1)])
def test_the_gelu_ops_equal_transformers_counted_and_saved(act, per_element):
    """Each name's GELU on transformers' model (fp32, train(), no dropout): the op counter's
    forward FLOPs in mlp.act equal the ledger's GELU records, by hand 8·B·T·d_ff for
    NewGELUActivation (pow, 0.044715·, +, √(2/π)·, tanh, 1 +, 0.5·x, the product) and
    1·B·T·d_ff for F.gelu(approximate='tanh'); the saved tensors equal the ledger's (GELUTanh
    saves only its input: three fewer storages per layer than gelu_new's four)."""
    from accounting.crosscheck.dispatch import ELEMENTWISE, OpCounter
    from accounting.ledger.records import FORWARD
    cfg = {**DENSE["gpt2"], "attn_pdrop": 0.0, "embd_pdrop": 0.0, "resid_pdrop": 0.0,
           "activation_function": act}
    config = resolve(translate(cfg, "test", "gpt2").config, from_hf=True)[1]  # SDPA
    model = build(cfg)
    B, T = 2, 5
    with OpCounter(model) as counter:
        model(input_ids=torch.zeros((B, T), dtype=torch.long), use_cache=False)
    act_flops = sum(r.flops for r in counter.counts() if r.phase == FORWARD
                    and r.module.endswith("mlp.act") and r.kind == ELEMENTWISE)
    lg = ledger(config, None, "none", "transformers", "fp32")
    v = lg.values(T, B)
    gelu = sum(e.flops(v) * e.count(v) for e in lg.elementwise if e.component == "GELU (tanh)")
    assert act_flops == gelu == per_element * B * T * config.d_ff * config.num_layers
    want, _ = expected_on_cpu(config, B, T, None, "fp32")
    assert measured(model, B, T, None) == want


def test_a_cpu_peak_with_dropout_is_refused_not_wrong():
    """The CPU's step keeps other tensors for dropout than CUDA's (the noise in the input's
    dtype, SDPA's math composite: tests/test_transformers_gpt2.py), which the ledger does
    not follow: a device='cpu' plan of transformers' GPT-2 with its dropouts is refused
    (exit 2 on the user's path), with them at 0 it is answered, as is CUDA's."""
    from accounting.planning.memory import MemoryModel
    from accounting.planning.precisions import PRECISIONS
    c = get_preset("openai-community/gpt2")
    zero = replace(c, embedding_dropout=0.0, attention_dropout=0.0, residual_dropout=0.0)
    p = PRECISIONS["bf16-mixed"]
    with pytest.raises(UsageError, match="dropout"):
        MemoryModel(c, p, "model", implementation="transformers", device="cpu")
    cuda = MemoryModel(c, p, "model", implementation="transformers").peak(1, 1024)
    cpu0 = MemoryModel(zero, p, "model", implementation="transformers", device="cpu").peak(1, 1024)
    cuda0 = MemoryModel(zero, p, "model", implementation="transformers").peak(1, 1024)
    # by hand: the CUDA plan's masks, (2L + 1)·B·T·d_model = 25·786,432 bytes, both moments
    # of the peak holding them (they are freed in the backward pass, after its start)
    assert cuda - cuda0 == 19_660_800 and cpu0 > 0


@pytest.mark.parametrize("act", ["gelu_pytorch_tanh", "gelu_new"])
def test_gemma3s_gelu_follows_its_name(act):
    """Gemma 3 (Gemma3ForCausalLM, fp32, train()) with hidden_activation gelu_pytorch_tanh
    runs GELUTanh (saves its input), with gelu_new NewGELUActivation's ops (saves four
    tensors): the saved storages equal the ledger's either way (regression: the ledger ran
    one F.gelu for every Gemma 3, whatever its hidden_activation)."""
    from transformers import AutoModelForCausalLM
    from accounting.crosscheck.hf_counter import transformers_config
    from test_hf_gemma import CONFIGS as GEMMA
    from test_transformers_saves import expected
    cfg = {**GEMMA["gemma3_text (transformers 5)"], "hidden_activation": act}
    config = replace(translate(cfg, "test", "gemma3").config, attention="sdpa")
    assert config.fused_gelu == (act == "gelu_pytorch_tanh")
    assert transformers_gap(config) is None
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(transformers_config(cfg),
                                             attn_implementation="sdpa").train()
    B, T = 2, 5
    want, _ = expected(config, B, T, None, "fp32")
    assert measured(model, B, T, None) == want
