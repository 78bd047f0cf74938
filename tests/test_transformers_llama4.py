"""The transformers implementation's ledger for Llama 4's text model (Llama4ForCausalLM,
transformers 5.23's models/llama4/modeling_llama4.py), against transformers' own model on the
CPU, as tests/test_transformers_saves.py does for the Llama family.

Tiny configs (tests/test_hf_llama4.py) built with AutoModelForCausalLM.from_config(
attn_implementation="sdpa"), one training step's forward and loss under saved-tensor hooks;
every storage autograd saves (parameters and buffers excluded, each storage once) compared,
by size and dtype, with the ledger's saved records for implementation "transformers", in
fp32, under the CPU's bf16 autocast and with bf16 parameters, on both sides of the chunk.
What the model saves, read off the hooks and the modeling file: the complex64 freqs_cis
(T × d_k/2) its complex RoPE products save; Llama4TextL2Norm's fp32 input and rsqrt on the
RoPE layers; a NoPE layer's temperature per position; on a chunked layer from T = C_a on
(masking_utils: kv_length >= the chunk) SDPA's additive (B, 1, T, T) mask and the repeat_kv
copies of K and V, below it and on the global layers the h_kv heads (enable_gqa); the
router's input and top-k indices and its sigmoid's output; the tokens repeated over the E
experts and the expert-major copy of the scores (the product saves both); the experts'
stacked gate_up bmm input (under autocast one bf16 copy of it and of the stacked weight),
its output (SiLU's input), SiLU's output, the down bmm's input; the shared expert's MLP.
"""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from accounting.architecture.hf_config import translate
from accounting.planning.recipes import resolve, transformers_gap
from test_hf_llama4 import CONFIGS as LLAMA4
from test_transformers_saves import MODES, DTYPE, expected, measured

# text: chunks of 4 on layers 0-2, layer 3 NoPE and global with temperature tuning, L2
# QK-norm, MoE on layers 1 and 3 (top-1 of 4), GQA 4/2; lists: layer_types given (one
# chunked, two global), NoPE on layer 1, no QK-norm, no temperature tuning, top-2 of 3, tied
CONFIGS = {"text": LLAMA4["text"], "lists": LLAMA4["lists"]}


def build(name, param_dtype):
    from transformers import AutoModelForCausalLM
    from accounting.crosscheck.hf_counter import transformers_config
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(transformers_config(CONFIGS[name]),
                                             attn_implementation="sdpa",
                                             dtype=DTYPE[param_dtype])
    return model.train()


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_saved_tensors_equal_the_llama4_transformers_ledger(name, mode):
    autocast, param_dtype = MODES[mode]
    recipe, config = resolve(translate(CONFIGS[name], "test", name).config, from_hf=True)
    assert (recipe.implementation, recipe.kernel) == ("transformers", "sdpa")
    model = build(name, param_dtype)
    C = config.attention_chunk
    B = 2
    for T in (C + 2, C, C - 1):  # the chunked layers' mask from T = C_a on
        want, buffers = expected(config, B, T, autocast, param_dtype)
        assert measured(model, B, T, autocast) == want, T
    # Llama4TextRotaryEmbedding's inv_freq and original_inv_freq, d_k/2 float32 each
    assert sum(b.numel() * b.element_size() for b in model.buffers()) == buffers


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_forward_matmul_flops_equal_flopcountermode(name):
    """The ledger's forward matmul FLOPs for implementation transformers (every expert on
    every token: E·B·T rows, executed) equal FlopCounterMode's on transformers' model
    (accounting/crosscheck/hf_counter.py, the meta device)."""
    from accounting.crosscheck.hf_counter import measure
    from accounting.ledger.ledger import ledger
    config = resolve(translate(CONFIGS[name], "test", name).config, from_hf=True)[1]
    B, T = 2, 6
    lg = ledger(config, None, "none", "transformers")
    v = lg.values(T, B)
    mine = sum(r.expr().evaluate(v) for r in lg.matmuls("forward"))
    theirs = measure(CONFIGS[name], T, B).torch_flops["forward"]
    assert mine == max(theirs.values())


def test_the_recipe_plans_transformers_ops_for_llama4():
    """Before: Llama 4 fell back to the course's ops with a note (its chunked layers, NoPE
    layers and MoE); now transformers' own ops, the multimodal file's language model too."""
    for data in (LLAMA4["text"], LLAMA4["lists"], LLAMA4["multimodal"]):
        config = translate(data, "test", "llama4").config
        assert transformers_gap(config) is None
        recipe, _ = resolve(config, from_hf=True)
        assert recipe.implementation == "transformers" and recipe.note == ""


@pytest.mark.slow  # two real steps each under a live-storage tracker
@pytest.mark.parametrize("mode", ["fp32", "autocast"])
def test_the_two_moments_equal_a_real_step_of_llama4(mode):
    """The step's two moments on Llama4ForCausalLM (tests/test_transformers_eager.py
    assert_two_moments), at T = 5 past the chunk."""
    from test_transformers_saves import assert_two_moments
    config = resolve(translate(CONFIGS["text"], "test", "text").config, from_hf=True)[1]
    assert_two_moments(build("text", MODES[mode][1]), config, mode)


def test_a_lora_plan_of_llama4_runs_under_bf16_mixed(capsys, tmp_path):
    """Regression: with LoRA the frozen experts are held in the compute dtype, so autocast
    makes no copy of the stacked gate_up_proj (the builder once looked one up and failed
    with an internal error); the plan answers (exit 0) and names the recipe."""
    import json
    from cli_run import run
    path = tmp_path / "llama4.json"
    path.write_text(json.dumps(CONFIGS["text"]))
    code, out, err = run(capsys, "plan", "--config", str(path), "--ctx", "64", "--lora-rank",
                         "8", "--lora-targets", "q_proj,o_proj", "--gpu", "H100")
    assert code == 0, err
    assert "transformers implementation" in out.split("\n\n")[0]
