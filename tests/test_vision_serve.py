"""`serve` with a vision-language model's tower (issue 41, Must 3): its weights per GPU, and
vLLM's multimodal profile run (the encoder on the largest image the processor allows, its
outputs held as the encoder cache while the language model's dummy run goes). Expected
values: transformers' model on the meta device (the tower's parameters), hand algebra on the
small Qwen2.5-VL config of tests/test_vision.py (the sharding, the largest item by vLLM's
rule, the budget, the encoder's peak and cache), written out below.
"""
import json
import sys
from pathlib import Path

import pytest

from cli_run import refused_in_one_line, run
from hf_examples import write_config

sys.path.insert(0, str(Path(__file__).parent))
from test_vision import CONFIGS, TOWER, _model  # noqa: E402

QWEN = CONFIGS["qwen2_5_vl"]  # tower: d_v 32, f_v 48 (gated), 2 heads, depth 4, patch 14,
# temporal 2, merge 2, C 3, out 64: k_v = 3·2·14·14 = 1,176

# Hand algebra of the tower's parameters: patch_embed 32·1,176 = 37,632 (replicated); a
# block's matrices qkv 96·32 + proj 32·32 + gate, up 48·32 + down 32·48 = 8,704, its norms and
# biases 32 + 32 + 96 + 32 + 48 + 48 + 32 = 320; the merger's matrices 128·128 + 64·128 =
# 24,576, its ln_q and biases 32 + 128 + 64 = 224. Four blocks: matrices 4·8,704 + 24,576 =
# 59,392, the rest 37,632 + 4·320 + 224 = 39,136; 98,528 in all.
MATRICES, REST = 59_392, 39_136
# vLLM's largest item (qwen2_vl.py get_image_size_with_most_features): smart_resize of a
# 9,999,999² image within max_pixels 12,845,056 = 3,584²: 3,584 a side, (3,584/14)² = 65,536
# patches, 65,536/4 = 16,384 tokens. On an H100 vLLM's defaults are 8,192 batched tokens and
# 1,024 sequences: encoder budget max(8,192, 16,384) = 16,384, one item.
# Its peak (serving/vision.py's estimate, worked by hand): pixels 65,536·1,176·(4 + 2) =
# 462,422,016 bytes; 2 bytes × (3·65,536·32 = 6,291,456 (residual, input, norm) + the MLP's
# 3·65,536·48 = 9,437,184 (above the attention's 4·65,536·32 = 8,388,608) + the output
# 16,384·64 = 1,048,576) = 33,554,432; 495,976,448 in all. Cache: 16,384·64·2 = 2,097,152.
ENCODER_PEAK, CACHE = 495_976_448, 2_097_152


def _serve(capsys, tmp_path, *args, data=QWEN):
    code, out, err = run(capsys, "serve", "--config", str(write_config(tmp_path, data)),
                         "--ctx", "64", "--format", "json", *args)
    assert code == 0, err
    return json.loads(out)


def test_the_tower_weights_equal_transformers_count():
    """At TP 1 the tower is whole on the GPU: 2 bytes × transformers' tower and projector."""
    from accounting.architecture.hf_config import translate
    from accounting.serving.vision import weights_per_gpu
    model = _model(QWEN)
    hf_tower = sum(p.numel() for n, p in model.named_parameters() if n.startswith(TOWER))
    assert hf_tower == MATRICES + REST  # the hand count above, checked against transformers
    spec = translate(QWEN, "c", "q").vision
    assert weights_per_gpu(spec, 1) == 2 * hf_tower
    # TP 2: the matrices halved (vLLM's parallel linears), the rest whole
    assert weights_per_gpu(spec, 2) == 2 * (MATRICES // 2 + REST)


def test_serve_counts_the_tower_and_vllms_profile_run(capsys, tmp_path):
    d = _serve(capsys, tmp_path, "--gpu", "H100")
    v = d["vision"]
    assert v["weights_bytes_per_gpu"] == 2 * (MATRICES + REST)
    assert v["profile_item_size"] == [3584, 3584] and v["profile_item_patches"] == 65_536
    assert v["profile_item_tokens"] == 16_384 and v["encoder_budget_tokens"] == 16_384
    assert v["profile_items"] == 1
    assert v["encoder_peak_bytes"] == ENCODER_PEAK and v["encoder_cache_bytes"] == CACHE
    stage = d["stages"][0]
    # the language model's dummy run is far smaller than the encoder's at this size
    assert stage["activation_peak_bytes"] == ENCODER_PEAK
    # the weights the pool rule takes off: the language model's as stored + the tower's
    assert stage["weights_bytes"] == stage["weights_stored_bytes"] + 2 * (MATRICES + REST)
    code, out, _ = run(capsys, "serve", "--config", str(write_config(tmp_path, QWEN)),
                       "--gpu", "H100", "--ctx", "64")
    first = out.split("\n\n")[0]
    assert code == 0 and "vision tower:    counted:" in first and "3584×3584" in first


def test_max_pixels_bounds_the_profiled_item(capsys, tmp_path):
    """--max-pixels 1,048,576 = 1,024² (vLLM's mm_processor_kwargs): smart_resize of the
    9,999,999² probe: beta = 9,999,999/1,024, floor(1,024/28) = 36, 1,008 a side, 72² =
    5,184 patches, 1,296 tokens; items = 8,192 // 1,296 = 6. Peak: pixels 6·5,184·1,176·6 =
    219,469,824; 2 × (3·31,104·32 + 3·31,104·48 + 7,776·64 = 7,962,624) = 15,925,248;
    235,395,072 in all. Cache 7,776·64·2 = 995,328."""
    v = _serve(capsys, tmp_path, "--gpu", "H100", "--max-pixels", "1048576")["vision"]
    assert v["profile_item_size"] == [1008, 1008] and v["profile_item_tokens"] == 1296
    assert v["profile_items"] == 6
    assert v["encoder_peak_bytes"] == 235_395_072 and v["encoder_cache_bytes"] == 995_328


def test_sglang_counts_the_weights_not_a_profile(capsys, tmp_path):
    d = _serve(capsys, tmp_path, "--gpu", "H100", "--engine", "sglang")
    assert d["vision"]["profiled"] is False
    assert d["stages"][0]["activation_peak_bytes"] == 0  # SGLang: in its reserve
    assert d["stages"][0]["weights_bytes"] == (d["stages"][0]["weights_stored_bytes"]
                                               + 2 * (MATRICES + REST))


def test_a_quantized_checkpoint_that_skips_the_tower(capsys, tmp_path):
    """Qwen2.5-VL-72B-Instruct-AWQ's quantization_config leaves "visual" unquantized
    (modules_to_not_convert; its group 128 is 32 here, to divide the small widths);
    compressed-tensors spells it in `ignore` ("re:visual.*")."""
    from accounting.serving.vision import unquantized_by
    awq = {"bits": 4, "group_size": 32, "modules_to_not_convert": ["visual"],
           "quant_method": "awq", "version": "gemm", "zero_point": True}
    assert unquantized_by(awq) == "modules_to_not_convert: 'visual'"
    assert unquantized_by({"ignore": ["lm_head", "re:visual.*"]}) == "ignore: 're:visual.*'"
    assert unquantized_by({"ignore": ["lm_head"]}) is None
    v = _serve(capsys, tmp_path, "--gpu", "H100",
               data={**QWEN, "quantization_config": awq})["vision"]
    assert "modules_to_not_convert" in v["weights"]


@pytest.mark.parametrize("argv, expected", [
    (("gpt2-small", "--max-pixels", "1000000"), "need a vision-language config.json"),
    (("--max-pixels", "100", "--min-pixels", "200"), "is above --max-pixels")])
def test_pixel_bounds_refused_in_one_line(capsys, tmp_path, argv, expected):
    if argv[0] != "gpt2-small":
        argv = ("--config", str(write_config(tmp_path, QWEN))) + argv
    refused_in_one_line(capsys, "serve", *argv, "--gpu", "H100", "--ctx", "64",
                        expected=expected)


# ---- plan: a one-GPU fine-tune with the tower frozen (LLaMA-Factory's default) or trained --
def _plan(capsys, tmp_path, *args):
    code, out, err = run(capsys, "plan", "--config", str(write_config(tmp_path, QWEN)),
                         "--gpu", "H100", "--ctx", "64", "--format", "json", *args)
    assert code == 0, err
    return json.loads(out)


def test_plan_holds_a_frozen_tower_beside_the_step(capsys, tmp_path):
    """Frozen under bf16-mixed (fp32 parameters): 4 bytes × the tower's 98,528 parameters
    (transformers' count, test_the_tower_weights_equal_transformers_count), nothing else;
    the usable memory of the fit is the card's less them."""
    d = _plan(capsys, tmp_path)
    n = MATRICES + REST
    v = d["vision"]
    assert v["trained"] is False and v["parameters"] == n
    assert v["weights_bytes"] == 4 * n and v["total_bytes"] == 4 * n
    fit = d["fit"]
    assert fit["usable_bytes"] == fit["capacity_bytes"] - fit["reserved_bytes"] - 4 * n


def test_plan_trains_the_tower_with_adamw(capsys, tmp_path):
    """--train-vision, AdamW (torch/optim/adamw.py: exp_avg and exp_avg_sq zeros_like(p), the
    step counter a CPU tensor): under bf16 (bf16 parameters, gradients and moments) 2 + 2 +
    2·2 = 8 bytes a parameter; under bf16-mixed (fp32 everything, no master copy) 4 + 4 +
    2·4 = 16."""
    n = MATRICES + REST
    v = _plan(capsys, tmp_path, "--train-vision", "--precision", "bf16")["vision"]
    assert (v["weights_bytes"], v["gradient_bytes"], v["optimizer_state_bytes"],
            v["master_bytes"]) == (2 * n, 2 * n, 4 * n, 0)
    v = _plan(capsys, tmp_path, "--train-vision")["vision"]
    assert v["total_bytes"] == 16 * n and v["activations_counted"] is False
    code, out, _ = run(capsys, "plan", "--config", str(write_config(tmp_path, QWEN)), "--gpu",
                       "H100", "--ctx", "64", "--train-vision")
    first = out.split("\n\n")[0]
    assert code == 0 and "vision tower:  counted, trained" in first and \
        "no image in the workload" in first  # saves at images: tests/test_vision_train.py


@pytest.mark.parametrize("argv, expected", [
    (("gpt2-small", "--train-vision"), "needs a vision-language config.json"),
    (("--train-vision", "--gpus", "2", "--search"), "not with --search"),
    (("--train-vision", "--lora-rank", "8"), "beside LoRA adapters")])
def test_train_vision_refusals(capsys, tmp_path, argv, expected):
    if argv[0] != "gpt2-small":
        argv = ("--config", str(write_config(tmp_path, QWEN))) + argv
    refused_in_one_line(capsys, "plan", *argv, "--gpu", "H100", "--ctx", "64",
                        expected=expected)


def test_sglang_scales_a_vlms_default_fraction(capsys, tmp_path):
    """SGLang's adjust_mem_fraction_for_vlm (server_args.py): getattr(vision_config,
    "num_hidden_layers", 24) = 24 here (Qwen's tower says "depth"), hidden_size 32: ratio
    24·32² / (24·1,024²) = 1/1,024, 1 − 0.1·(1/1,024 − 1) = 1.0999… clamped to 1.05, times
    0.95 = 0.9975 = 399/400 of the default a language model gets on the same card."""
    from fractions import Fraction

    def fraction(d):
        u = d["assumptions"]["gpu_memory_utilization"]
        return Fraction(u["numerator"], u["denominator"])
    vlm = fraction(_serve(capsys, tmp_path, "--gpu", "H100", "--engine", "sglang"))
    code, out, err = run(capsys, "serve", "gpt2-small", "--gpu", "H100", "--engine", "sglang",
                         "--ctx", "64", "--format", "json")
    assert code == 0, err
    assert vlm == fraction(json.loads(out)) * Fraction(399, 400)
    # a given --gpu-memory-utilization is SGLang's mem_fraction_static as given: not scaled
    given = _serve(capsys, tmp_path, "--gpu", "H100", "--engine", "sglang",
                   "--gpu-memory-utilization", "0.8")
    assert fraction(given) == Fraction(4, 5)


def test_the_profile_rule_against_vllms_log(capsys):
    """vLLM 0.8.2 on an H100 with Qwen2.5-VL-7B-Instruct (QwenLM/Qwen3-VL issue #1057)
    printed "Encoder cache will be initialized with a budget of 16384 tokens, and profiled
    with 1 image items of the maximum feature size" (the LLM class: 16,384 batched tokens,
    1,024 sequences)."""
    root = Path(__file__).resolve().parents[1]
    code, out, err = run(capsys, "serve", "--config",
                         str(root / "tests/data/serving/Qwen2.5-VL-7B-Instruct.json"),
                         "--gpu", "H100", "--ctx", "128000", "--max-num-batched-tokens", "16384",
                         "--max-num-seqs", "1024", "--format", "json")
    assert code == 0, err
    v = json.loads(out)["vision"]
    assert (v["encoder_budget_tokens"], v["profile_items"]) == (16384, 1)


def test_a_many_gpu_plan_says_where_the_tower_is(capsys, tmp_path):
    """A layout's plan counts the tower (tests/test_vision_train.py checks its bytes): its
    answer says so with the tower's count (transformers', test_the_tower_weights_equal_
    transformers_count); --search sizes the language model alone and says the tower is
    left out."""
    path = str(write_config(tmp_path, QWEN))
    code, out, err = run(capsys, "plan", "--config", path, "--gpu", "H100", "--gpus", "2",
                         "--ctx", "64")
    assert code == 0, err
    first = out.split("\n\n")[0]
    assert "vision tower:  counted on the first pipeline stage" in first
    assert f"{MATRICES + REST:,} parameters" in first
    code, out, err = run(capsys, "plan", "--config", path, "--gpu", "H100", "--gpus", "2",
                         "--ctx", "64", "--search")
    assert code == 0, err
    first = out.split("\n\n")[0]
    assert "vision tower:  NOT in this many-GPU plan (--search" in first
    assert f"{MATRICES + REST:,} parameters" in first


def test_a_checkpoint_counts_the_tower_once(capsys, tmp_path):
    """--checkpoint of a vision-language model (header-only safetensors of transformers' own
    state dict, tests/checkpoint_files.py; before the fix the tower was counted twice, its
    tensors as stored and its term): the tower's tensors are set aside from the
    language model's match and from the stored bytes (the tower's term adds them), so the
    weights per GPU at TP 1 are the whole checkpoint's bytes, once, and the language model's
    match agrees."""
    from math import prod
    from checkpoint_files import write
    # named as the published Qwen2.5-VL checkpoints store them (visual.*, model.layers.*,
    # lm_head.*), transformers 5's model.visual.* and model.language_model.* renamed back
    sd = [(k.replace("model.language_model.", "model.").replace("model.visual.", "visual."),
           tuple(v.shape)) for k, v in _model(QWEN).state_dict().items()]
    folder = write(tmp_path / "ck", sd)
    code, out, err = run(capsys, "serve", "--config", str(write_config(tmp_path, QWEN)),
                         "--checkpoint", str(folder), "--gpu", "H100", "--ctx", "64",
                         "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert d["checkpoint"]["agrees"] is True
    assert d["weights_bytes_per_gpu"] == 2 * sum(prod(s) for _, s in sd)
    tower = sum(prod(s) for k, s in sd if k.startswith("visual."))
    assert tower == MATRICES + REST and d["vision"]["weights_bytes_per_gpu"] == 2 * tower


def test_a_gqa_bias_matches_its_checkpoint(capsys, tmp_path):
    """Regression (found here): Qwen2's K and V biases, (h_kv, d_k) in the ledger, are one
    dimension of h_kv·d_k = 2·16 = 32 in nn.Linear's state dict; the match reported "32 in the
    checkpoint, 2×16 in the ledger" and exit 1 for every Qwen2 checkpoint with GQA."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from checkpoint_files import write
    from test_vision import TEXT
    data = {"model_type": "qwen2", **TEXT, "tie_word_embeddings": False}
    cfg = transformers.AutoConfig.for_model(**data)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    sd = [(k, tuple(v.shape)) for k, v in model.state_dict().items()]
    assert ("model.layers.0.self_attn.k_proj.bias", (32,)) in sd
    folder = write(tmp_path / "ck", sd)
    code, out, err = run(capsys, "serve", "--config", str(write_config(tmp_path, data)),
                         "--checkpoint", str(folder), "--gpu", "H100", "--ctx", "64",
                         "--format", "json")
    assert code == 0, err
    assert json.loads(out)["checkpoint"]["agrees"] is True


def test_limit_mm_per_prompt(capsys, tmp_path):
    """vLLM's --limit-mm-per-prompt: N images bound the profiled items by max_num_seqs·N
    (profile_run: min(budget // item tokens, max_num_reqs · limit)); 0 turns the encoder
    off (compute_encoder_budget returns 0: no profile) and, in vLLM 0.21's record, the
    tower is not built (_mark_tower_model). Hand algebra with --max-pixels 1,048,576 (1,296
    tokens an item, 6 items by the budget, test_max_pixels_bounds_the_profiled_item):
    --max-num-seqs 2 and 1 image a prompt leave min(6, 2·1) = 2."""
    v = _serve(capsys, tmp_path, "--gpu", "H100", "--max-pixels", "1048576", "--max-num-seqs",
               "2", "--limit-mm-per-prompt", "1")["vision"]
    assert v["profile_items"] == 2 and v["encoder_cache_bytes"] == 2 * 1296 * 64 * 2
    d = _serve(capsys, tmp_path, "--gpu", "H100", "--limit-mm-per-prompt", "0")
    v = d["vision"]
    assert (v["profile_items"], v["encoder_budget_tokens"], v["encoder_peak_bytes"],
            v["encoder_cache_bytes"], v["weights_bytes_per_gpu"]) == (0, 0, 0, 0, 0)
    assert d["weights_bytes_per_gpu"] == d["weights_stored_bytes_per_gpu"]
    v = _serve(capsys, tmp_path, "--gpu", "H100", "--limit-mm-per-prompt", "0",
               "--engine-version", "0.10")["vision"]
    assert v["weights_bytes_per_gpu"] == 2 * (MATRICES + REST) and v["profile_items"] == 0
    refused_in_one_line(capsys, "serve", "--config", str(write_config(tmp_path, QWEN)),
                        "--gpu", "H100", "--engine", "sglang", "--limit-mm-per-prompt", "1",
                        expected="--limit-mm-per-prompt is vLLM's")
