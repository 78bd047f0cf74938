"""Llama 4 (issue 24): llama4_text and the multimodal llama4 config.json read into the spec and
counted three ways — the ledger, the tool's model/ and transformers' own model — against hand
algebra written here from transformers 5.23.0's models/llama4/modeling_llama4.py, never from
the tool's tables; malformed configs refused in one line; Llama 4 Scout's text model at full
size against Meta's published 109B total and 17B active.
"""
import pytest

from accounting import analyze
from accounting.architecture.hf_config import translate
from cli_run import agreeing_check, refused_in_one_line, run
from hf_examples import DELETE, write_config

# Tiny configs as transformers writes them (Llama4TextConfig's keys).
# "text": 4 layers, MoE every 2nd (interleave_moe_layer_step 2: layers 1 and 3), NoPE every
# 4th (no_rope_layers absent: layer 3), chunks of 4 on the RoPE layers (layer_types absent),
# QK-norm and temperature tuning on (their defaults), top-1 of 4 experts, GQA 4/2, head_dim 8.
TEXT = {
    "architectures": ["Llama4ForCausalLM"], "attention_bias": False, "attention_chunk_size": 4,
    "attention_dropout": 0.0, "attn_scale": 0.1, "bos_token_id": 1, "eos_token_id": 2,
    "floor_scale": 2, "head_dim": 8, "hidden_act": "silu", "hidden_size": 32,
    "interleave_moe_layer_step": 2, "intermediate_size": 16, "intermediate_size_mlp": 48,
    "max_position_embeddings": 64, "model_type": "llama4_text", "num_attention_heads": 4,
    "num_experts_per_tok": 1, "num_hidden_layers": 4, "num_key_value_heads": 2,
    "num_local_experts": 4, "output_router_logits": False, "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0, "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_qk_norm": True, "vocab_size": 67}
# "lists": every per-layer key given: MoE on 0 and 2, NoPE layer 1 (full attention), layer 2
# full attention though it has RoPE, top-2 of 3 experts, no QK-norm, no temperature tuning,
# a tied head, float32.
LISTS = {**TEXT, "num_hidden_layers": 3, "moe_layers": [0, 2], "no_rope_layers": [1, 0, 1],
         "layer_types": ["chunked_attention", "full_attention", "full_attention"],
         "num_local_experts": 3, "num_experts_per_tok": 2, "use_qk_norm": False,
         "attn_temperature_tuning": False, "tie_word_embeddings": True, "torch_dtype": "float32"}
# The multimodal file: the language model under text_config (Llama4Config); a vision tower
# that is not counted.
MULTIMODAL = {"architectures": ["Llama4ForConditionalGeneration"], "boi_token_index": 60,
              "eoi_token_index": 61, "image_token_index": 62, "model_type": "llama4",
              "text_config": TEXT, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
              "transformers_version": "4.51.0",
              "vision_config": {"hidden_size": 16, "intermediate_size": 32,
                                "model_type": "llama4_vision_model", "num_attention_heads": 2,
                                "num_hidden_layers": 2, "vision_output_dim": 32}}
CONFIGS = {"text": TEXT, "lists": LISTS, "multimodal": MULTIMODAL}

# What each means, read by hand from Llama4TextConfig.__post_init__ and the modeling file:
# moe_layers = range(step − 1, L, step); no_rope_layers[i] = int((i + 1) % 4 != 0);
# layer_types "chunked_attention" where RoPE; Llama4TextL2Norm only where use_rope.
SHAPES = {
    "text": dict(L=4, V=67, d=32, h=4, kv=2, hd=8, f_mlp=48, f=16, E=4, k=1, C=4, tied=False,
                 moe=(1, 3), nope=(3,), chunked=(0, 1, 2), bytes=2),
    "lists": dict(L=3, V=67, d=32, h=4, kv=2, hd=8, f_mlp=48, f=16, E=3, k=2, C=4, tied=True,
                  moe=(0, 2), nope=(1,), chunked=(0,), bytes=4),
}
SHAPES["multimodal"] = SHAPES["text"]


def write(tmp_path, name, changes=None):
    return write_config(tmp_path, CONFIGS[name], changes)


def params_by_hand(s, active=False):
    """Llama4ForCausalLM's parameters: embed_tokens, per layer q/k/v/o_proj (no bias), two
    RMSNorm gains, a Llama4TextMLP of intermediate_size_mlp or a Llama4TextMoe (router d×E,
    experts gate_up_proj E×d×2f and down_proj E×f×d, shared_expert 3·d·f), the final norm,
    lm_head unless tied. Active: k of the E experts."""
    d = s["d"]
    attn = d * s["h"] * s["hd"] * 2 + 2 * d * s["kv"] * s["hd"] + 2 * d
    experts = s["k"] if active else s["E"]
    moe = d * s["E"] + experts * 3 * d * s["f"] + 3 * d * s["f"]
    layers = sum(attn + (moe if i in s["moe"] else 3 * d * s["f_mlp"]) for i in range(s["L"]))
    return s["V"] * d * (1 if s["tied"] else 2) + layers + d


def pairs(T, chunk=None):
    """Query-key pairs a causal (chunked) mask keeps, by brute force."""
    return sum(1 for i in range(T) for j in range(i + 1) if chunk is None or j // chunk == i // chunk)


def forward_flops_by_hand(s, T, B, useful=False):
    """2 FLOPs per multiply-add. Per token: Q, K, V, O; a dense MLP (3·d·f_mlp) or the MoE:
    the router (d·E), every expert on every token (Llama4TextExperts: bmm over E·B·T rows,
    3·d·f each; useful: k of them) and the shared expert; the LM head. The attention core:
    QKᵀ and scores·V over the full T×T (executed: eager attention masks computed scores), or
    over the pairs the causal or chunked mask keeps (useful)."""
    d, N = s["d"], B * T
    total = 0
    for i in range(s["L"]):
        total += N * (2 * d * s["h"] * s["hd"] + 2 * d * s["kv"] * s["hd"])
        if i in s["moe"]:
            total += N * (d * s["E"] + (s["k"] if useful else s["E"]) * 3 * d * s["f"]
                          + 3 * d * s["f"])
        else:
            total += N * 3 * d * s["f_mlp"]
        kept = pairs(T, s["C"] if i in s["chunked"] else None) if useful else T * T
        total += 2 * B * s["h"] * kept * s["hd"]
    return 2 * (total + N * d * s["V"])


def kv_bytes_by_hand(s, T, B):
    """After the prefill: K and V (h_kv·hd each) per token and layer; a chunked layer is a
    DynamicSlidingWindowLayer of C (cache_utils), which keeps its last C − 1 tokens."""
    kept = sum(min(T, s["C"] - 1) if i in s["chunked"] else T for i in range(s["L"]))
    return 2 * s["kv"] * s["hd"] * kept * B * s["bytes"]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_each_config_means_what_transformers_builds(name):
    c = translate(CONFIGS[name], "t", name).config
    s = SHAPES[name]
    kinds = c.layer_kinds
    assert tuple(i for i, k in enumerate(kinds) if k.moe) == s["moe"]
    assert tuple(i for i, k in enumerate(kinds) if k.nope) == s["nope"]
    assert tuple(i for i, k in enumerate(kinds) if k.chunked) == s["chunked"]
    assert c.attention_chunk == s["C"] and not any(k.local for k in kinds)
    assert (c.num_experts, c.experts_per_token, c.expert_d_ff, c.d_ff, c.num_shared_experts) == \
        (s["E"], s["k"], s["f"], s["f_mlp"], 1)
    assert (c.router, c.router_topk_first, c.router_scales_input, c.norm_topk_prob) == \
        ("sigmoid", True, True, False)
    assert c.qk_norm == ("l2" if name != "lists" else "none")
    assert (c.temperature_floor, c.temperature_scale) == ((2, 0.1) if name != "lists" else (None, 0.1))
    assert (c.num_kv_heads, c.head_dim, c.tie_embeddings) == (s["kv"], s["hd"], s["tied"])
    a = analyze(c)
    assert a.param_count == params_by_hand(s)
    assert a.active_param_count == params_by_hand(s, active=True)
    import torch  # noqa: F401  (model/ needs it)
    from model import TransformerLM
    m = TransformerLM.from_config(c, device="meta")
    assert sum(p.numel() for p in m.parameters()) == params_by_hand(s)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_transformers_builds_the_same_parameters(name):
    pytest.importorskip("transformers")
    from accounting.crosscheck.hf_counter import build
    model = build(CONFIGS[name])
    # the multimodal file too: AutoModelForCausalLM builds Llama4ForCausalLM of text_config
    assert type(model).__name__ == "Llama4ForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == params_by_hand(SHAPES[name])


@pytest.mark.parametrize("T", [3, 9])  # within one chunk of 4, and past two
def test_forward_matmul_flops_at_two_lengths(T):
    for name in ("text", "lists"):
        s = SHAPES[name]
        a = analyze(translate(CONFIGS[name], "t", name).config, T, 2)
        assert a.matmul_expr("executed").evaluate(a.values) == forward_flops_by_hand(s, T, 2)
        assert a.matmul_expr("useful").evaluate(a.values) == \
            forward_flops_by_hand(s, T, 2, useful=True)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_three_ways_each_config(capsys, tmp_path, name):
    pytest.importorskip("transformers")
    T, B = 9, 2  # past two chunks of 4: the chunked mask and cache bind
    x = agreeing_check(capsys, "--config", str(write(tmp_path, name)), "--ctx", str(T),
                       "--batch", str(B), "--pass", "train")
    s = SHAPES[name]
    tf = x["transformers"]
    params = {r["component"]: r["transformers"] for r in tf["parameters"]}
    assert params["total"] == params_by_hand(s)
    assert tf["kv_cache_bytes"]["transformers"] == kv_bytes_by_hand(s, T, B)
    flops = {(r["pass"], r["component"]): r["flops"] for r in tf["matmul_flops"]}
    forward = forward_flops_by_hand(s, T, B)
    assert flops[("forward", "total")] == forward and flops[("backward", "total")] == 2 * forward
    assert flops[("forward", "not in any component")] == 0
    blocks = [c for c in x["layers"] if c["counter"] == "transformers"]
    assert [c["agreeing"] for c in blocks] == [s["L"]] * 2
    assert any("every expert on every token" in n or "runs every expert on every token" in n
               for n in tf["notes"])


def test_the_multimodal_file_says_the_vision_tower_is_counted(capsys, tmp_path):
    # read and counted since issue 41 (tests/test_vision.py checks the count by name)
    code, out, _ = run(capsys, "--config", str(write(tmp_path, "multimodal")), "--no-verify")
    assert code == 0
    assert "vision tower and the multi-modal projector" in out and "are counted" in out
    assert "text_config.num_local_experts" in out  # the keys read, where they are


def test_flags_are_written_back_inside_text_config(capsys, tmp_path):
    pytest.importorskip("transformers")
    x = agreeing_check(capsys, "--config", str(write(tmp_path, "multimodal")), "--num-layers", "2",
                       "--ctx", "6", "--pass", "forward")
    params = {r["component"]: r["transformers"] for r in x["transformers"]["parameters"]}
    assert params["total"] == params_by_hand({**SHAPES["text"], "L": 2})


MALFORMED = [
    ("text", {"attention_chunk_size": None}, "attention_chunk_size must be a positive integer"),
    ("text", {"no_rope_layers": [1, 0]}, "no_rope_layers must give 1 (RoPE) or 0 (NoPE) for each"),
    ("text", {"layer_types": ["sliding_attention"] * 4}, "layer_types must give chunked_attention"),
    ("text", {"moe_layers": [7]}, "moe_layers must list layer indices in [0, 4)"),
    # transformers 5.23's strict Llama4TextConfig types it bool (Meta's files write 4)
    ("text", {"attn_temperature_tuning": 4}, "attn_temperature_tuning must be true or false"),
    ("text", {"intermediate_size_mlp": DELETE}, "missing intermediate_size_mlp"),
    ("text", {"rope_scaling": {"rope_type": "mystery"}}, "rope_scaling = {'rope_type': 'mystery'}"),
    ("multimodal", {"text_config": None}, "text_config must be an object"),
    ("multimodal", {"audio_config": {}}, "unknown key(s) 'audio_config'"),
    ("multimodal", {"text_config": {**TEXT, "model_type": "llama"}},
     "text_config.model_type must be llama4_text"),
]


@pytest.mark.parametrize("name,changes,expected", MALFORMED,
                         ids=[f"{n}-{'-'.join(c)}" for n, c, _ in MALFORMED])
def test_malformed_configs_are_refused_in_one_line(capsys, tmp_path, name, changes, expected):
    refused_in_one_line(capsys, "--config", str(write(tmp_path, name, changes)), "--no-verify",
                        expected=expected)


# Llama 4 Scout (meta-llama/Llama-4-Scout-17B-16E): its text_config's counting keys as
# transformers 4.51 prints the Hub's config (a "Llama4Config {…}" repr in a public Markdown
# note, "# Llama 4 / ## Llama 4 Scout", that the search index holds without naming its
# repository; its moe_layers are abbreviated "0..47", so it is not the file verbatim, and the
# Hub's config.json itself could not be found: nothing is shipped as a preset). Meta's figures:
# "17B active parameters, 16 experts, 109B total" (Hugging Face's launch post, "Welcome Llama 4
# Maverick & Scout on Hugging Face": Llama 4 Scout (~109B), 17B active).
SCOUT = {"model_type": "llama4_text", "attention_chunk_size": 8192, "head_dim": 128,
         "hidden_act": "silu", "hidden_size": 5120, "interleave_moe_layer_step": 1,
         "intermediate_size": 8192, "intermediate_size_mlp": 16384,
         "max_position_embeddings": 262144, "num_attention_heads": 40, "num_experts_per_tok": 1,
         "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 16,
         "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False,
         "use_qk_norm": True, "vocab_size": 202048,
         "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                          "original_max_position_embeddings": 8192, "rope_type": "llama3"}}


def test_scout_has_metas_published_parameters():
    # By hand: embed_tokens and lm_head 202,048 × 5,120 = 1,034,485,760 each; per layer
    # q, o 5,120² = 26,214,400, k, v 5,120 × 1,024 = 5,242,880 (62,914,560), two gains 10,240,
    # router 5,120 × 16 = 81,920, experts 16 × 3 × 5,120 × 8,192 = 2,013,265,920, the shared
    # expert 125,829,120: 2,202,101,760 a layer, 105,700,884,480 for 48; the final norm 5,120.
    total = 2 * 1_034_485_760 + 48 * 2_202_101_760 + 5_120
    assert total == 107_769_861_120
    # active: one routed expert (125,829,120) of 16: 314,664,960 a layer
    active = 2 * 1_034_485_760 + 48 * 314_664_960 + 5_120
    assert active == 17_172_894_720  # Meta: "17B active parameters"
    # Meta's 109B is the multimodal checkpoint: this text model and a vision tower and
    # projector of 1,906,418,176 (the same notes' total, 109,676,279,296)
    assert 109_676_279_296 - total == 1_906_418_176
    a = analyze(translate(SCOUT, "t", "scout").config)
    assert (a.param_count, a.active_param_count) == (total, active)
    pytest.importorskip("transformers")
    from accounting.crosscheck.hf_counter import build
    model = build({**SCOUT, "torch_dtype": "bfloat16"})
    assert sum(p.numel() for p in model.parameters()) == total


def test_decode_and_cache_on_chunked_layers():
    # A chunked layer's cache holds at most C tokens (transformers keeps C − 1 between steps,
    # and the step's own token makes C); a decode step at position t attends them, masked to
    # its own chunk: min(t, C) keys executed, as the rolling cache runs it. Every expert
    # runs the token (Llama 4's form), so all E experts' weights are read.
    from accounting.planning import PRECISIONS, inference
    s = SHAPES["text"]
    c = translate(TEXT, "t", "text").config
    d, per = s["d"], 2 * s["kv"] * s["hd"]
    for t in (3, 9):
        i = inference(c, 1, t, PRECISIONS["fp32"])
        keys = [min(t, s["C"]) if layer in s["chunked"] else t for layer in range(s["L"])]
        assert i.kv_bytes == sum(keys) * per * 4
        proj = 2 * (2 * d * s["h"] * s["hd"] + 2 * d * s["kv"] * s["hd"])
        moe = 2 * (d * s["E"] + s["E"] * 3 * d * s["f"] + 3 * d * s["f"])
        flops = sum(proj + 2 * 2 * s["h"] * s["hd"] * keys[layer]
                    + (moe if layer in s["moe"] else 2 * 3 * d * s["f_mlp"])
                    for layer in range(s["L"])) + 2 * d * s["V"]
        assert i.decode_flops == flops
        assert i.experts_read[0] == s["E"]
