"""The transformers implementation's ledger for GPT-2 (accounting/ledger/builder/hf_gpt2.py)
against transformers' own GPT2LMHeadModel on the CPU, as tests/test_transformers_saves.py
does for the Llama-like families: one training step's forward and loss under saved-tensor
hooks, every storage autograd saves (parameters and buffers excluded, each storage once)
compared by size and dtype with the ledger's saved records, in fp32, under the CPU's bf16
autocast and with bf16 parameters.

What the model saves, read off the hooks and transformers 5.23's modeling_gpt2.py: the token
and position ids; per nn.LayerNorm (F.layer_norm) its input and the mean and 1/σ per token,
its output saved by the next Conv1D (addmm); c_attn's one output (B, T, 3·d_model): Q, K and
V are views of its split, and SDPA saves that one storage (under autocast one bf16 copy of
c_attn's input and of its weight, not three); SDPA's output and log-sum-exp; gelu_new's
(NewGELUActivation's) pow input, tanh output, 0.5·x and 1 + tanh, and its output saved by
c_proj; the loss's log-softmax.

The dropouts are set to 0 here (GPT-2's configs train with 0.1: the ledger counts CUDA's
dropout, native_dropout's 1-byte masks, measured in tests/test_gpt2_dropout.py with F.dropout
routed to native_dropout; the CPU's own dropout is the last test below). With bf16 parameters the CPU's
layer_norm keeps its mean and 1/σ in bf16 (aten/src/ATen/native/layer_norm.cpp
layer_norm_cpu: param_scalar_type(input) is the input's dtype unless it mixes dtypes with
the weight), where CUDA's keeps float32 (cuda/layer_norm_kernel.cu layer_norm_cuda:
toAccumulateType(input, is_cuda=true)), the ledger's rule: the test converts those rows.
"""
from collections import Counter
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from accounting.architecture.hf_config import translate
from accounting.ledger.ledger import ledger
from accounting.planning.recipes import resolve, transformers_gap
from hf_examples import CONFIGS as DENSE
from test_transformers_saves import DTYPE, MODES, SIZE, labels_view, measured

NO_DROPOUT = {"attn_pdrop": 0.0, "embd_pdrop": 0.0, "resid_pdrop": 0.0}
CONFIGS = {"gpt2": {**DENSE["gpt2"], **NO_DROPOUT},  # gelu_new, tied, n_inner null
           # the exact GELU (one op: saves its input), an untied head, n_inner given
           "gpt2 (gelu, untied)": {**DENSE["gpt2"], **NO_DROPOUT, "activation_function": "gelu",
                                   "tie_word_embeddings": False, "n_inner": 100}}
STAT = "(fp32, one per token)"  # builder/megatron.py fused_norm's statistics' labels


def build(name, param_dtype):
    from transformers import AutoModelForCausalLM
    from accounting.crosscheck.hf_counter import transformers_config
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(transformers_config(CONFIGS[name]),
                                             attn_implementation="sdpa",
                                             dtype=DTYPE[param_dtype])
    return model.train()


def expected_on_cpu(config, B, T, autocast, param_dtype):
    lg = ledger(config, autocast, "none", "transformers", param_dtype)
    v = lg.values(T, B)
    out = Counter()
    for a in lg.activations:
        if not a.saved:
            continue
        dtype = a.dtype
        if param_dtype == "bf16" and a.name.endswith(STAT):  # layer_norm_cpu's bf16 stats
            dtype = "bf16"
        out[(SIZE[dtype] * a.elements.evaluate(v) // a.copies,
             str(DTYPE[dtype]).removeprefix("torch."))] += a.copies * a.count(v)
    return labels_view(out, B, T), sum(b.expr().evaluate(v) for b in lg.buffers)


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_saved_tensors_equal_gpt2s_transformers_ledger(name, mode):
    autocast, param_dtype = MODES[mode]
    config = translate(CONFIGS[name], "test", name).config
    recipe, config = resolve(config, from_hf=True)
    assert (recipe.implementation, recipe.kernel) == ("transformers", "sdpa")
    assert transformers_gap(config) is None
    model = build(name, param_dtype)
    for B, T in ((2, 5), (1, 7)):
        want, buffers = expected_on_cpu(config, B, T, autocast, param_dtype)
        assert measured(model, B, T, autocast) == want, (B, T)
    # GPT-2 registers no buffer in transformers 5.23 (its causal mask is made per call)
    assert sum(b.numel() * b.element_size() for b in model.buffers()) == buffers == 0


def test_c_attn_is_one_saved_storage_by_hand():
    """Hand algebra for one block in fp32 (B = 2, T = 5, d_model = 48, h = 4): the fused
    c_attn output SDPA saves is 2·5·3·48·4 = 5,760 bytes, once; each LayerNorm keeps its
    input (2·5·48·4 = 1,920 bytes) and two statistics of 2·5·4 = 40 bytes."""
    config = replace(translate(CONFIGS["gpt2"], "test", "gpt2").config, attention="sdpa")
    lg = ledger(config, None, "none", "transformers", "fp32")
    v = lg.values(5, 2)
    rows = {a.name: a.elements.evaluate(v) * SIZE[a.dtype] for a in lg.activations if a.saved}
    assert rows["c_attn output (Q, K, V)"] == 5760
    assert not any(n.startswith(("Q projection", "K projection", "V projection")) for n in rows)
    stats = [n for n in rows if n.endswith(STAT) and n.startswith("ln1")]
    assert sorted(rows[n] for n in stats) == [40, 40]


def test_gpt2_is_no_longer_in_the_gap_with_its_dropouts():
    """The recipe plans transformers' ops for GPT-2 (the hub's gpt2 config too), its
    dropouts read into the spec (GPT2Config's 0.1 each)."""
    config = translate(DENSE["gpt2"], "test", "gpt2").config
    assert transformers_gap(config) is None
    assert (config.embedding_dropout, config.attention_dropout, config.residual_dropout) \
        == (0.1, 0.1, 0.1)



@pytest.mark.parametrize("fp8", [None, "torchao", "te"])
@pytest.mark.parametrize("autocast", [None, "cuda", "cpu"])
def test_c_attn_fusion_meets_every_kind_of_copy(autocast, fp8):
    """c_attn's fusion meets each precision's copies (autocast's bf16, an fp8 run's fp8 copy
    of the input): the ledger builds (regression: the first fusion asserted three copies of
    one kind, and TE's fp8 run makes three bf16 and three fp8 copies of the input) and
    names one c_attn output. By hand for openai-community/gpt2
    (d_model = 768), one block, B = 1, T = 1,024: one c_attn output of 3·768·1,024
    elements."""
    from accounting.architecture.presets import get_preset
    c = get_preset("openai-community/gpt2")
    lg = ledger(c, autocast, "none", "transformers", "fp32", fp8=fp8)
    v = lg.values(1024, 1)
    out = [a for a in lg.activations if a.name == "c_attn output (Q, K, V)"]
    assert len(out) == 1 and out[0].elements.evaluate(v) == 3 * 768 * 1024


def test_a_gpt2_like_config_transformers_cannot_build_stays_in_the_gap():
    """GPT-2's layout without its Conv1D biases, or with a sliding window, is no model
    transformers' GPT2LMHeadModel builds (its biases are fixed, its attention has no
    window): the recipe does not plan transformers' ops for it."""
    config = translate(CONFIGS["gpt2"], "test", "gpt2").config
    assert transformers_gap(replace(config, qkv_bias=False)) is not None
    assert transformers_gap(replace(config, sliding_window=4)) is not None


def test_the_cpu_with_dropout_keeps_what_the_docs_say():
    """GPT-2 as configured (dropouts 0.1), in fp32 on the CPU, where the ledger counts
    CUDA's dropout (a 1-byte mask per element, builder/dropout.py) and SDPA's fused kernel:
    what the CPU step keeps beyond the ledger, by hand from PyTorch's source
    (docs/planning.md). F.dropout on the CPU is not the fused native_dropout
    (aten/src/ATen/native/Dropout.cpp is_fused_kernel_acceptable needs input.is_cuda()):
    it returns input * noise and the product saves the noise, B·T·d_model in the input's
    dtype (4 bytes, 3 more than the mask), at the embedding and after each sublayer
    (2L + 1). SDPA with dropout_p > 0 runs
    the math composite on the CPU (attention.cpp _scaled_dot_product_attention_math): it
    saves q·s and kᵀ·s (2·B·T·d_model), the softmax, the dropout's noise and the dropped
    probabilities (3·B·h·T²) and V as its bmm reads it: for B > 1 a contiguous copy
    (B·T·d_model; V, a slice of c_attn's output, cannot be viewed as B·h matrices), and
    c_attn's output (3·B·T·d_model) is then no longer saved; for B = 1 the view, which keeps
    c_attn's output as the fused kernel did. The fused kernel's log-sum-exp (B·h·T) goes;
    the output is copied by the heads' merge and saved by the projection, as the fused
    kernel's is."""
    cfg = {**DENSE["gpt2"]}
    assert (cfg["embd_pdrop"], cfg["attn_pdrop"], cfg["resid_pdrop"]) == (0.1, 0.1, 0.1)
    from transformers import AutoModelForCausalLM
    from accounting.crosscheck.hf_counter import transformers_config
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(transformers_config(cfg),
                                             attn_implementation="sdpa").train()
    recipe, config = resolve(translate(cfg, "test", "gpt2").config, from_hf=True)
    assert recipe.kernel == "sdpa"
    L, d, h = config.num_layers, config.d_model, config.num_heads
    for B, T in ((2, 5), (1, 7), (3, 4)):
        ledger_bytes, _ = expected_on_cpu(config, B, T, None, "fp32")
        got = measured(model, B, T, None)
        v = B * T * d - 3 * B * T * d if B > 1 else 0  # V's copy, c_attn's output gone
        extra = (3 * B * T * d * (2 * L + 1)
                 + 4 * L * (2 * B * T * d + v + 3 * B * h * T * T - B * h * T))
        assert sum(n * c for (n, _), c in got.items()) \
            - sum(n * c for (n, _), c in ledger_bytes.items()) == extra, (B, T)
