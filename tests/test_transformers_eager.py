"""The transformers implementation's ledger for the models transformers runs with its eager
attention only (gpt-oss, Gemma 2) (accounting/ledger/builder/hf_eager.py), against transformers' own model on
the CPU, as tests/test_transformers_saves.py does for the SDPA families.

gpt-oss (GptOssPreTrainedModel._supports_sdpa = False): a tiny config (tests/hf_h3_examples.py)
built with AutoModelForCausalLM.from_config(attn_implementation="eager"), one training
step's forward and loss under saved-tensor hooks; every storage autograd saves (parameters
and buffers excluded, each storage once) compared, by size and dtype, with the ledger's
saved records for implementation "transformers" — in fp32, under the CPU's bf16 autocast and
with bf16 parameters, on both sides of the sliding window. What the model saves there, read
off the hooks and transformers 5.23's modeling_gpt_oss.py: the RoPE cos/sin (T × d_k/2),
the roped Q and the repeat_kv copies of K and V, the int64 indices of the row max, the
softmax output T + 1 keys wide (the sink's column), under autocast the bf16 copy of the
probabilities; the router's input, top-k indices and k-wide softmax; grouped_mm's sorted
slots, offsets, the sorted expert ids the biases are indexed by, the stacked gate_up
output the two clamps save, the clamped SwiGLU's products. Gemma 2
(Gemma2PreTrainedModel._supports_sdpa = False: its attention soft-cap): Gemma 3's modules
(tests/test_transformers_saves.py) without QK-norm, one RoPE for every layer, and in the
eager core the soft-cap's tanh output and the float32 softmax output (cast back to the
query's dtype: a copy with bf16 parameters).
"""
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from accounting.architecture.hf_config import translate
from accounting.planning.recipes import eager_only, resolve, transformers_gap
from hf_h3_examples import CONFIGS as H3
from test_hf_gemma import CONFIGS as GEMMA
from hf_examples import CONFIGS as DENSE
from test_transformers_saves import MODES, DTYPE, assert_two_moments, expected, measured

G2 = GEMMA["gemma2"]  # window 4 on layers 0 and 2, GQA 4/2, both soft-caps, tied
CONFIGS = {"gpt_oss": H3["gpt_oss"], "gpt_oss (defaults)": H3["gpt_oss (defaults)"],
           "gemma2": G2,
           # one KV head: repeat_kv's expand is a view (stride 0 over the heads), which the
           # QKᵀ matmul copies to h heads, as it does the seq-major Q
           "gemma2 (MQA)": {**G2, "num_key_value_heads": 1},
           # multi-head, untied, no final soft-cap
           "gemma2 (MHA, untied)": {**G2, "num_key_value_heads": 4, "tie_word_embeddings": False,
                                    "final_logit_softcapping": None}}
# (the gpt-oss defaults' d_model 24 in bf16 is not 16-byte aligned: grouped_mm refuses it on
# the CPU)
CASES = [(n, m) for n in CONFIGS for m in sorted(MODES)
         if (n, m) != ("gpt_oss (defaults)", "bf16")]


def build(name, param_dtype):
    from transformers import AutoModelForCausalLM
    from accounting.crosscheck.hf_counter import transformers_config
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(transformers_config(CONFIGS[name]),
                                             attn_implementation="eager",
                                             dtype=DTYPE[param_dtype])
    return model.train()


def planned(name):
    """The config as the recipe plans it by default for a Hugging Face config."""
    config = translate(CONFIGS[name], "test", name).config
    recipe, config = resolve(config, from_hf=True)
    return recipe, config


@pytest.mark.parametrize("name,mode", CASES)
def test_saved_tensors_equal_the_eager_transformers_ledger(name, mode):
    autocast, param_dtype = MODES[mode]
    recipe, config = planned(name)
    assert (recipe.implementation, recipe.kernel) == ("transformers", "eager")
    model = build(name, param_dtype)
    W = config.sliding_window
    B = 2
    for T in (max(5, W + 1), W - 1):  # the sliding layers' mask reaches back, and does not
        want, buffers = expected(config, B, T, autocast, param_dtype)
        assert measured(model, B, T, autocast) == want, T
    # the buffers: GptOssRotaryEmbedding's inv_freq and original_inv_freq (YaRN's, d_k/2 each)
    assert sum(b.numel() * b.element_size() for b in model.buffers()) == buffers


@pytest.mark.parametrize("name", ["gpt_oss", "gpt_oss (defaults)", "gemma2"])
def test_forward_matmul_flops_equal_flopcountermode_on_the_eager_model(name):
    """The ledger's forward matmul FLOPs (implementation transformers: the eager core's two
    bmms over all T×T pairs, the experts' B·T·k rows) equal FlopCounterMode's on
    transformers' eager model (accounting/crosscheck/hf_counter.py: the meta device,
    batched_mm experts)."""
    from accounting.crosscheck.hf_counter import measure
    from accounting.ledger.ledger import ledger
    _, config = planned(name)
    B, T = 2, 6
    lg = ledger(config, None, "none", "transformers")
    v = lg.values(T, B)
    mine = sum(r.expr().evaluate(v) for r in lg.matmuls("forward"))
    theirs = measure(CONFIGS[name], T, B).torch_flops["forward"]
    assert mine == max(theirs.values())  # the model's root: the whole forward


@pytest.mark.parametrize("name,why", [("gpt_oss", "sinks"), ("gemma2", "soft-cap")])
def test_the_recipe_plans_transformers_eager_attention(name, why):
    """Before: gpt-oss and Gemma 2 fell back to the course's ops with a note; transformers
    refuses SDPA for them (checked on its own from_config), so the recipe plans its eager
    attention; torchtune (F.sdpa, no sinks, no soft-cap) stays refused."""
    from transformers import AutoModelForCausalLM
    from accounting.crosscheck.hf_counter import transformers_config
    from accounting.runtime.errors import UsageError
    data = CONFIGS[name]
    with pytest.raises(ValueError, match="scaled_dot_product_attention"):
        AutoModelForCausalLM.from_config(transformers_config(data), attn_implementation="sdpa")
    config = translate(data, "test", name).config
    assert transformers_gap(config) is None and why in eager_only(config)
    recipe, planned_config = resolve(config, from_hf=True)
    assert recipe.note == "" and planned_config.attention == "naive"
    assert recipe.lines()["attention"].startswith("eager (transformers' eager_attention_forward")
    with pytest.raises(UsageError):  # the spec refuses SDPA with sinks or a soft-cap
        replace(config, attention="sdpa")
    with pytest.raises(UsageError, match="torchtune"):
        resolve(config, from_hf=True, implementation="torchtune")
    # a Llama is still torchtune's
    llama = translate(DENSE["llama"], "test", "llama").config
    assert resolve(llama, from_hf=True, implementation="torchtune")[0].implementation == \
        "torchtune"


@pytest.mark.slow  # two real steps each under a live-storage tracker
@pytest.mark.parametrize("mode", ["fp32", "autocast"])
@pytest.mark.parametrize("name", ["gpt_oss", "gemma2"])
def test_the_two_moments_equal_a_real_step_of_the_eager_model(name, mode):
    """The step's two moments on gpt-oss's and Gemma 2's eager models (assert_two_moments)."""
    assert_two_moments(build(name, MODES[mode][1]), planned(name)[1], mode)
