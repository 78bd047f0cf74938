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
"""
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from accounting.architecture.hf_config import translate
from accounting.ledger.ledger import ledger
from accounting.planning.recipes import resolve, transformers_gap
from test_hf_nemotron_h import DATA as NEMOTRON_H, FRONTIER
from test_transformers_saves import DTYPE, MODES, SIZE, assert_two_moments, expected, measured

CONFIGS = {
    # M*-M: two Mamba-2 blocks (4 heads in 2 groups, chunk 16), attention (GQA 4/2), an MLP
    "nemotron_h": NEMOTRON_H,
    # a group per head, in_proj/out_proj biases, no conv bias, a tied head
    "nemotron_h (groups per head, biases)": {**NEMOTRON_H, "n_groups": 4, "use_bias": True,
                                             "use_conv_bias": False,
                                             "tie_word_embeddings": True,
                                             "hybrid_override_pattern": "M-*M"},
}
# (B, T): one padded chunk, exactly one chunk (T = C = 16), three chunks with a partial one,
# and B = 1 (F.conv1d reads its input in place whatever the batch)
SHAPES = ((2, 3), (2, 16), (2, 33), (1, 20))


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
def test_saved_tensors_equal_nemotron_hs_transformers_ledger(name, mode):
    autocast, param_dtype = MODES[mode]
    config = spec(name)
    model = build(name, param_dtype)
    for B, T in SHAPES:
        want, buffers = expected(config, B, T, autocast, param_dtype)
        assert measured(model, B, T, autocast) == want, (B, T)
    assert sum(b.numel() * b.element_size() for b in model.buffers()) == buffers == 0


@pytest.mark.slow  # two real steps under a live-storage tracker
@pytest.mark.parametrize("mode", ["fp32", "autocast"])
def test_the_two_moments_equal_a_real_step_of_nemotron_h(mode):
    _, param_dtype = MODES[mode]
    assert_two_moments(build("nemotron_h", param_dtype), spec("nemotron_h"), mode)


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
