"""Multi-token prediction (MTP) modules (DeepSeek-V3 §2.2, GLM-4.5; issue 31): read from
num_nextn_predict_layers, counted beside the model's total (transformers' causal LM does not
build them), in the training step's FLOPs and AdamW update, left out at inference.

Independent sources: transformers' own MtpModel (modeling_layers.py) built on the meta device
from the main model, whose parameters not shared with it are each module's; hand algebra of
the module's forward (DeepSeek-V3 §2.2 eq. 21-23: two norms, W_eh on [emb; h], one block, the
shared head); DeepSeek-V3's checkpoint, derived element by element in
tests/test_presets.py::test_deepseek_v3_hub_total_element_by_element (13,463,426,048 for its
MTP layer, the embedding and head copies included).
"""
import json

import pytest

from accounting.analysis.mtp import mtp
from accounting.architecture.hf_config import translate
from accounting.architecture.presets import get_preset
from cli_run import run
from hf_examples import write_config
from test_hf_frontier_moe import CONFIGS, SHAPES, D, V

GLM = CONFIGS["glm4_moe"]  # 3 layers, the last an MoE layer; num_nextn_predict_layers 1


def block_params_by_hand() -> int:
    """One glm4_moe MoE block (tests/test_hf_frontier_moe.py's shapes): q/k/v/o_proj with
    Q/K/V biases, per-head QK-norm, two norms, router E·D, E experts 3·D·d_e, shared 3·D·d_s."""
    s = SHAPES["glm4_moe"]
    h, kv, dk = s["h"], s["kv"], s["dk"]
    attn = D * (h + 2 * kv) * dk + h * dk * D + (h + 2 * kv) * dk + s["qk"]
    return attn + 2 * D + s["E"] * D + s["E"] * 3 * D * s["de"] + 3 * D * s["ds"]


def mtp_forward_by_hand(T: int, B: int) -> int:
    """2·m·n·p per matmul of one module: the block's (Q, K, V, QKᵀ and scores·V over T×T,
    o_proj, router, B·T·k expert rows, the shared MLP), W_eh (B·T × 2D × D), the head."""
    s = SHAPES["glm4_moe"]
    h, kv, dk, n = s["h"], s["kv"], s["dk"], B * T
    block = (2 * n * D * (h + 2 * kv) * dk + 4 * B * h * T * T * dk + 2 * n * h * dk * D
             + 2 * n * D * s["E"] + 2 * n * s["k"] * 3 * D * s["de"] + 2 * n * 3 * D * s["ds"])
    return block + 2 * n * 2 * D * D + 2 * n * D * V


def test_each_module_holds_what_transformers_mtp_model_builds():
    c = translate(GLM, "t", "g").config
    m = mtp(c)
    assert (c.mtp_layers, m.modules) == (1, 1)
    # W_eh (2D → D) and enorm, hnorm, post_norm (D each)
    assert (m.block_params, m.glue_params) == (block_params_by_hand(), 2 * D * D + 3 * D)
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_layers import MtpModel
    data = {k: v for k, v in GLM.items() if k != "architectures"}
    with torch.device("meta"):
        main = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**data))
        module = MtpModel(main, 1)
    shared = {id(p) for p in main.parameters()}  # the embedding and head: tied to the main model
    own = sum(p.numel() for p in module.parameters() if id(p) not in shared)
    assert own == m.params_each
    # and the main model, which transformers builds without them, is the tool's total
    from accounting import analyze
    assert analyze(c).param_count == sum(p.numel() for p in main.parameters())


@pytest.mark.parametrize("T, B", [(8, 1), (24, 2)])
def test_training_flops_at_two_lengths(T, B):
    m = mtp(translate(GLM, "t", "g").config, T, B)
    assert m.forward_flops == mtp_forward_by_hand(T, B)
    assert m.backward_flops == 2 * mtp_forward_by_hand(T, B)  # dX and dW of every matmul


def test_deepseek_v3_checkpoint_layer_61():
    """DeepSeek-V3's MTP layer (layer 61 of the checkpoint): 13,463,426,048 elements with its
    copies of the embedding and the head (test_presets' element-by-element derivation of the
    Hub's 684,531,386,000), 11,610,067,968 without them."""
    c = get_preset("deepseek-ai/DeepSeek-V3")
    m = mtp(c)
    V3, d = 129_280, 7168
    assert m.params == 13_463_426_048 - 2 * V3 * d == 11_610_067_968
    assert m.params + m.checkpoint_copies == 13_463_426_048


def test_the_outputs_say_both_counts_and_the_plan_trains_them(capsys, tmp_path):
    path = str(write_config(tmp_path, GLM))
    code, out, _ = run(capsys, "--config", path, "--no-verify", "--ctx", "8", "--format", "json")
    p = json.loads(out)["parameters"]
    each = block_params_by_hand() + 2 * D * D + 3 * D
    assert code == 0 and p["mtp"]["params"] == each
    assert p["mtp"]["total_with_mtp"] == p["total"] + each
    assert p["mtp"]["checkpoint_total_with_copies"] == p["total"] + each + 2 * V * D
    # --attention naive: the hand algebra's attention core (an HF config's recipe plans SDPA,
    # whose backward recomputes the scores)
    code, out, _ = run(capsys, "plan", "--config", path, "--ctx", "8", "--attention", "naive",
                       "--format", "json")
    plan = json.loads(out)
    f = plan["flops_per_step"]
    assert f["mtp"] == 3 * mtp_forward_by_hand(8, 1)
    # AdamW: 14 FLOPs per MTP parameter, one per tensor: the block's 18 (q/k/v_proj and
    # their biases 6, o_proj, q_norm, k_norm, the router, the experts' w1, w2, w3, the shared
    # w1, w2, w3, two norms), W_eh, three norms
    assert f["mtp_adamw"] == 14 * each + 18 + 1 + 3
    assert f["total"] == f["forward"] + f["backward"] + f["recompute"] + f["adamw"] + f["mtp"] \
        + f["mtp_adamw"]
    # inference leaves them out: the same cache and decode as without them
    code, out0, _ = run(capsys, "plan", "--config",
                        str(write_config(tmp_path, {**GLM, "num_nextn_predict_layers": 0}, folder="no-mtp")),
                        "--ctx", "8", "--format", "json")
    plain = json.loads(out0)
    assert plan["inference"] == plain["inference"]
    assert plain["flops_per_step"]["mtp"] == plain["flops_per_step"]["mtp_adamw"] == 0
    code, text, _ = run(capsys, "--config", path, "--no-verify", "--ctx", "8")
    assert "MTP modules:   1 module of" in text


def test_the_flag_and_its_bounds(capsys):
    code, out, _ = run(capsys, "--d-model", "64", "--num-heads", "4", "--num-layers", "2",
                       "--vocab-size", "96", "--context-length", "16", "--mtp-layers", "2",
                       "--no-verify", "--ctx", "8", "--format", "json")
    m = json.loads(out)["parameters"]["mtp"]
    # a course block: 4·64² attention, SwiGLU 3·64·192 (d_ff 192), two norms; W_eh, 3 norms
    assert code == 0 and m["params_each"] == 4 * 64 * 64 + 3 * 64 * 192 + 2 * 64 + 2 * 64 * 64 + 3 * 64
    assert m["modules"] == 2
    code, out, err = run(capsys, "--mtp-layers", "-1", "--no-verify")
    assert code == 2 and "mtp" in err
