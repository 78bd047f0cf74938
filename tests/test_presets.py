"""Every preset's parameter count, by hand algebra here, against the published figure.

Sources of the published counts (cited per row below):
  * GPT-2 (OpenAI, as released): keras-team/keras-hub, keras_hub/src/models/gpt2/
    gpt2_presets.py, "params": 124439808 / 354823168 / 774030080 / 1557611200 — the
    checkpoints OpenAI's openai/gpt-2 download_model.py names 124M, 355M, 774M and 1558M.
    (The Hugging Face model page of openai-community/gpt2 says "137M": its safetensors
    file also stores each layer's 1,024×1,024 causal-mask buffer `attn.bias`, 12·1,024² =
    12,582,912 elements that are not parameters; 124,439,808 + 12,582,912 = 137,022,720.)
  * meta-llama/Llama-3.2-1B: 1,235,814,400, the Hugging Face Hub's safetensors total
    ("1.24B params"), also LLAMA_3_2_1B_PARAMETER_COUNT in ModelCloud/GPTQModel's
    tests/test_parameter_count.py.
  * meta-llama/Llama-3.1-8B: 8,030,261,248, the Hugging Face Hub's safetensors total
    ("8.03B params"), and "general.parameter_count": 8030261248 in the GGUF metadata
    ollama prints for llama3.1:8b.
  * mistralai/Mistral-7B-v0.3: 7,248,023,552, keras-team/keras-hub's mistral presets
    ("mistral_0.3_7b_en": "params": 7248023552), also the Hub's safetensors total and
    llama.cpp's n_params for its GGUF.
  * Qwen/Qwen2.5-0.5B: 494,032,768, llama.cpp's model_n_params / n_params for the GGUF
    conversions (several public llama-bench and server logs), the Hub's "0.49B" model card.
  * Qwen/Qwen2.5-7B: 7,615,616,512, the GGUF metadata "general.parameter_count" (ollama)
    and the Hub's safetensors total.
  * Qwen/Qwen3-0.6B: 596,049,920 = sum(p.numel() for p in model.parameters()) of
    transformers' model (quoted in public code), and the model card's "0.44B non-embedding".
    The Hub's safetensors total, 751,632,384, stores the tied table twice: 596,049,920 +
    151,936·1,024 (embed_tokens and lm_head both in the file) = 751,632,384, checked below.
  * Qwen/Qwen3-8B: 8,190,735,360, the Hub's safetensors total ("safetensors": {"total":
    8190735360}) and llama.cpp's n_params.
  * allenai/OLMo-2-1124-7B: 7,298,617,344, the Hub's safetensors total ({"F32":
    7298617344}; the checkpoint is float32).
  * mistralai/Mistral-7B-v0.1: 7,241,732,096, "general.parameter_count" in the GGUF
    metadata ollama prints for mistral:7b (several public copies); "7.24B".
  * mistralai/Mixtral-8x7B-v0.1: 46,702,792,704, keras-team/keras-hub's mixtral presets
    ("mixtral_8_7b_en": "params": 46702792704), also the Hub's safetensors total quoted in
    public code; Mistral AI's announcement (mistral.ai/news/mixtral-of-experts): "46.7B total
    parameters but only uses 12.9B parameters per token".
  * Qwen/Qwen3-30B-A3B: 30,532,122,624, llama.cpp's n_params / the GGUF
    "general.parameter_count" (many public llama-bench logs) and a checkpoint-shard sum
    asserted in public code; the model card: "Number of Parameters: 30.5B in total and 3.3B
    activated; Number of Parameters (Non-Embedding): 29.9B".
  * deepseek-ai/DeepSeek-V3: "671B total parameters, of which 37B are activated for each
    token" (the paper's abstract and the model card). The exact 671,026,419,200 of public
    recounts of the config counts the 58 MoE layers' e_score_correction_bias (256 each) as
    parameters, as DeepSeek's own code (nn.Parameter) does; transformers 5.23 and the tool
    hold it as a buffer: 671,026,404,352 parameters. The Hub's safetensors total, 684,531,386,000
    ("685B"), adds the multi-token-prediction module and the fp8 block scales: reconciled to
    the element below.
  * The CS336 presets have no published count: the hand algebra of the course's model
    (tests/test_model.py::test_gpt2_xl_parameter_count, by hand) is the reference.
"""
import pytest

from accounting import analyze, get_preset
from accounting.architecture.presets import PRESETS


def gpt2_params(L, d, V=50257, n_ctx=1024):
    """OpenAI GPT-2: wte V·d + wpe n_ctx·d; per block ln_1 (2d), c_attn (3d² + 3d), attn
    c_proj (d² + d), ln_2 (2d), c_fc (4d² + 4d), mlp c_proj (4d² + d) = 12d² + 13d; ln_f 2d;
    the LM head is tied to wte (no parameters of its own)."""
    return V * d + n_ctx * d + L * (12 * d * d + 13 * d) + 2 * d


def llama_params(L, d, h, kv, head_dim, f, V, tied):
    """Llama: embed V·d; per block q (d·h·hd), k and v (d·kv·hd each), o (h·hd·d),
    gate/up/down (3·d·f), two RMSNorm gains (2d); final norm d; lm_head V·d unless tied."""
    block = d * h * head_dim + 2 * d * kv * head_dim + h * head_dim * d + 3 * d * f + 2 * d
    return V * d + L * block + d + (0 if tied else V * d)


def qwen2_params(L, d, h, kv, head_dim, f, V, tied):
    """Qwen2: Llama's count plus biases on Q (h·hd), K and V (kv·hd each), none on O or
    the MLP (modeling_qwen2.py: bias=True on q/k/v_proj only)."""
    return llama_params(L, d, h, kv, head_dim, f, V, tied) + L * (h + 2 * kv) * head_dim


def qwen3_params(L, d, h, kv, head_dim, f, V, tied):
    """Qwen3: Llama's count plus two RMSNorm gains of head_dim per block (q_norm, k_norm
    act on each head: one shared weight of head_dim each)."""
    return llama_params(L, d, h, kv, head_dim, f, V, tied) + L * 2 * head_dim


def olmo2_params(L, d, h, kv, head_dim, f, V, tied):
    """OLMo-2: Llama's count (its two block norms sit after the sublayers, same size)
    plus QK-norm over the full projections: q_norm h·hd and k_norm kv·hd per block."""
    return llama_params(L, d, h, kv, head_dim, f, V, tied) + L * (h + kv) * head_dim


def mixtral_params(L, d, h, kv, hd, f, V, E, k, active=False):
    """Mixtral: Mistral's attention and norms; per block a router (E·d, no bias) and E
    experts of 3·d·f (gate_up_proj 2·f·d + down_proj d·f each); untied head. Active: the
    router and k experts per block (the embedding and head included, as Mistral's 12.9B)."""
    attn = d * h * hd + 2 * d * kv * hd + h * hd * d
    block = attn + 2 * d + E * d + (k if active else E) * 3 * d * f
    return 2 * V * d + L * block + d


def qwen3_moe_params(L, d, h, kv, hd, f_e, V, E, k, active=False):
    """Qwen3-MoE: Qwen3's attention (per-head q_norm and k_norm of hd each); every block MoE
    (decoder_sparse_step 1, no mlp_only_layers): router E·d, E experts of 3·d·f_e, no
    shared expert; untied head."""
    attn = d * h * hd + 2 * d * kv * hd + h * hd * d + 2 * hd
    block = attn + 2 * d + E * d + (k if active else E) * 3 * d * f_e
    return 2 * V * d + L * block + d


def deepseek_v3_params(L, dense, d, h, r_q, r_kv, nope, rope, v, f, f_e, E, k, shared, V,
                       active=False, bias=False):
    """DeepSeek-V3: per block multi-head latent attention — q_a_proj d·r_q, q_a_layernorm r_q,
    q_b_proj r_q·h·(nope + rope), kv_a_proj_with_mqa d·(r_kv + rope), kv_a_layernorm r_kv,
    kv_b_proj r_kv·h·(nope + v), o_proj h·v·d — and two norms (2d); the first `dense` blocks a
    dense MLP 3·d·f, the others a router E·d, E experts and `shared` shared ones of 3·d·f_e
    (the shared ones one MLP of shared·f_e); untied head. `bias`: the router's
    e_score_correction_bias (E per MoE layer) counted as parameters, as DeepSeek's code does."""
    attn = d * r_q + r_q + r_q * h * (nope + rope) + d * (r_kv + rope) + r_kv + \
        r_kv * h * (nope + v) + h * v * d
    moe = E * d + ((k if active else E) + shared) * 3 * d * f_e + (E if bias else 0)
    return 2 * V * d + L * (attn + 2 * d) + dense * 3 * d * f + (L - dense) * moe + d


DEEPSEEK_V3 = dict(L=61, dense=3, d=7168, h=128, r_q=1536, r_kv=512, nope=128, rope=64, v=128,
                   f=18432, f_e=2048, E=256, k=8, shared=1, V=129280)
MIXTRAL = dict(L=32, d=4096, h=32, kv=8, hd=128, f=14336, V=32000, E=8, k=2)
QWEN3_30B = dict(L=48, d=2048, h=32, kv=4, hd=128, f_e=768, V=151936, E=128, k=8)


def cs336_params(L, d, V=50257):
    """CS336: embedding V·d; per block 2 gains (2d), 4 attention matrices (4d²), SwiGLU
    (3·d·4d); final gain d; untied head V·d."""
    return 2 * V * d + L * (2 * d + 4 * d * d + 12 * d * d) + d


PUBLISHED = {
    # name: (hand algebra, published figure)
    "openai-community/gpt2": (gpt2_params(12, 768), 124_439_808),
    "openai-community/gpt2-medium": (gpt2_params(24, 1024), 354_823_168),
    "openai-community/gpt2-large": (gpt2_params(36, 1280), 774_030_080),
    "openai-community/gpt2-xl": (gpt2_params(48, 1600), 1_557_611_200),
    "meta-llama/Llama-3.2-1B": (llama_params(16, 2048, 32, 8, 64, 8192, 128256, tied=True),
                                1_235_814_400),
    "meta-llama/Llama-3.1-8B": (llama_params(32, 4096, 32, 8, 128, 14336, 128256, tied=False),
                                8_030_261_248),
    "mistralai/Mistral-7B-v0.1": (llama_params(32, 4096, 32, 8, 128, 14336, 32000, tied=False),
                                  7_241_732_096),
    "mistralai/Mistral-7B-v0.3": (llama_params(32, 4096, 32, 8, 128, 14336, 32768, tied=False),
                                  7_248_023_552),
    "mistralai/Mixtral-8x7B-v0.1": (mixtral_params(**MIXTRAL), 46_702_792_704),
    "Qwen/Qwen3-30B-A3B": (qwen3_moe_params(**QWEN3_30B), 30_532_122_624),
    "deepseek-ai/DeepSeek-V3": (deepseek_v3_params(**DEEPSEEK_V3, bias=True), 671_026_419_200),
    "Qwen/Qwen2.5-0.5B": (qwen2_params(24, 896, 14, 2, 64, 4864, 151936, tied=True), 494_032_768),
    "Qwen/Qwen2.5-7B": (qwen2_params(28, 3584, 28, 4, 128, 18944, 152064, tied=False),
                        7_615_616_512),
    "Qwen/Qwen3-0.6B": (qwen3_params(28, 1024, 16, 8, 128, 3072, 151936, tied=True), 596_049_920),
    "Qwen/Qwen3-8B": (qwen3_params(36, 4096, 32, 8, 128, 12288, 151936, tied=False),
                      8_190_735_360),
    "allenai/OLMo-2-1124-7B": (olmo2_params(32, 4096, 32, 32, 128, 11008, 100352, tied=False),
                               7_298_617_344),
    "gpt2-small": (cs336_params(12, 768), 190_460_160),
    "gpt2-medium": (cs336_params(24, 1024), 505_629_696),
    "gpt2-large": (cs336_params(36, 1280), 1_072_469_760),
    "gpt2-xl": (cs336_params(48, 1600), 2_127_057_600),
}


# What a published count includes that transformers (and the tool) hold as buffers, not
# parameters: DeepSeek-V3's router bias, e_score_correction_bias, 256 in each of 58 MoE layers.
BUFFERS_COUNTED = {"deepseek-ai/DeepSeek-V3": 58 * 256}


def test_every_preset_is_checked():
    assert set(PUBLISHED) == set(PRESETS)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_equals_the_published_figure(name):
    hand, published = PUBLISHED[name]
    assert hand == published  # the algebra above reproduces the published figure
    # and so does the ledger (less what the publisher counted that is a buffer)
    assert analyze(get_preset(name)).param_count == published - BUFFERS_COUNTED.get(name, 0)


def test_the_comment_beside_each_preset_row_is_its_count():
    # accounting/architecture/presets.py writes each row's size in a comment (nanoGPT style)
    import inspect

    from accounting.architecture import presets
    source = inspect.getsource(presets._table)
    for name, (_, published) in PUBLISHED.items():
        row = next(line for line in source.splitlines() if f'"{name}"' in line)
        assert f"{published - BUFFERS_COUNTED.get(name, 0):,}" in row, row


# ---- mixtures of experts: active parameters, and the figures' own conventions --------------

ACTIVE = {
    # name: (active per token by hand: the embedding and head included, a token's top-k
    # routed experts, the shared ones, the router; the published figure, in billions)
    "mistralai/Mixtral-8x7B-v0.1": (mixtral_params(**MIXTRAL, active=True), "12.9"),  # Mistral AI
    "Qwen/Qwen3-30B-A3B": (qwen3_moe_params(**QWEN3_30B, active=True), "3.3"),  # model card
    "deepseek-ai/DeepSeek-V3": (deepseek_v3_params(**DEEPSEEK_V3, active=True), "37"),  # paper
}


def _within_last_digit(exact: int, figure: str) -> bool:
    """The figure (billions) is the exact count to its last digit, rounded or cut off: the
    publishers differ (Mixtral's 12.88 is "12.9", Qwen3's 3.35 "3.3", DeepSeek's 37.55 "37")."""
    from fractions import Fraction
    unit = Fraction(1, 10 ** len(figure.partition(".")[2]))
    return abs(Fraction(exact, 10**9) - Fraction(figure)) < unit


@pytest.mark.parametrize("name", sorted(ACTIVE))
def test_active_parameters_by_hand_and_the_published_figures(name):
    hand, published = ACTIVE[name]
    a = analyze(get_preset(name))
    assert a.active_param_count == hand
    assert _within_last_digit(hand, published)
    # the embedding table is in the published one-decimal figures: without it they miss
    # (Mixtral 12.75B, Qwen3 3.04B)
    embedding = a.params_by_component()["token embedding"]
    if "." in published:
        assert not _within_last_digit(hand - embedding, published)


def test_mixtral_and_qwen3_moe_published_totals():
    # Mixtral: "46.7B total, 12.9B active"; Qwen3-30B-A3B: "30.5B in total, 3.3B activated,
    # 29.9B non-embedding" (non-embedding: without the embedding table and the LM head)
    assert (f"{PUBLISHED['mistralai/Mixtral-8x7B-v0.1'][1] / 1e9:.1f}",
            f"{ACTIVE['mistralai/Mixtral-8x7B-v0.1'][0] / 1e9:.1f}") == ("46.7", "12.9")
    total = PUBLISHED["Qwen/Qwen3-30B-A3B"][0]
    assert (total, ACTIVE["Qwen/Qwen3-30B-A3B"][0]) == (30_532_122_624, 3_353_032_704)
    assert f"{(total - 2 * 151_936 * 2048) / 1e9:.1f}" == "29.9"


def test_deepseek_v3_671b_and_37b():
    # "671B total parameters, of which 37B are activated for each token" (DeepSeek-V3
    # technical report, abstract). Total: the 61 layers transformers builds, no MTP module.
    total = analyze(get_preset("deepseek-ai/DeepSeek-V3")).param_count
    assert total == deepseek_v3_params(**DEEPSEEK_V3) == 671_026_404_352
    assert round(total / 1e9) == 671
    # Active: with the embedding table (the convention that gives Mixtral's 12.9B and Qwen3's
    # 3.3B) 37,552,282,624 = 37.6B; DeepSeek's 37B is met by rounding only without the input
    # embedding, of which a token reads one row: 36,625,603,584. (DeepSeek's README_WEIGHTS.md
    # says 36.7B "including 0.9B for Embedding and 0.9B for the output Head"; we could not
    # reproduce that figure: it is our count less 851,443,712 = 58·7,168·2,048, one expert
    # matrix per MoE layer.)
    active = ACTIVE["deepseek-ai/DeepSeek-V3"][0]
    assert active == 37_552_282_624
    assert round((active - 129_280 * 7168) / 1e9) == 37 and round(active / 1e9) == 38
    assert active - 58 * 7168 * 2048 == 36_700_838_912


def test_deepseek_v3_hub_total_element_by_element():
    # The Hub's safetensors totals for deepseek-ai/DeepSeek-V3 (its API, quoted in public
    # code): BF16 3,918,786,560, F8_E4M3 680,571,043,840, F32 41,555,600; total
    # 684,531,386,000 ("685B"). Derived here by hand from the shipped config.json's sizes:
    # the checkpoint also holds the multi-token-prediction (MTP) layer (layer 61: one MoE
    # decoder layer, eh_proj 2d→d, enorm, hnorm, shared_head.norm, and its own copies of the
    # embedding and the head), the router biases, and a float32 scale per 128×128 block of
    # each float8 matrix (weight_scale_inv). Which tensors are float8: every matrix of the
    # decoder layers (attention projections, dense MLPs, experts, shared experts); bfloat16:
    # the embeddings and heads, norms, routers and eh_proj; float32: biases and scales.
    s = DEEPSEEK_V3
    d, V, E, f, f_e = s["d"], s["V"], s["E"], s["f"], s["f_e"]
    layers, moe = 61 + 1, 58 + 1  # with the MTP layer (an MoE layer)
    attn = {"q_a": (s["r_q"], d), "q_b": (s["h"] * (s["nope"] + s["rope"]), s["r_q"]),
            "kv_a": (s["r_kv"] + s["rope"], d), "kv_b": (s["h"] * (s["nope"] + s["v"]), s["r_kv"]),
            "o": (d, s["h"] * s["v"])}
    dense_mlp = [(f, d), (f, d), (d, f)]
    expert = [(f_e, d), (f_e, d), (d, f_e)]
    fp8 = ([m for m in attn.values()] * layers + dense_mlp * 3 + expert * (E + 1) * moe)
    f8 = sum(o * i for o, i in fp8)
    norms = layers * (2 * d + s["r_q"] + s["r_kv"]) + d + 3 * d  # + final norm + MTP's three
    bf16 = 4 * V * d + norms + moe * E * d + 2 * d * d  # 2 embeddings, 2 heads; eh_proj
    blocks = lambda n: -(-n // 128)  # noqa: E731
    f32 = moe * E + sum(blocks(o) * blocks(i) for o, i in fp8)
    assert (bf16, f8, f32) == (3_918_786_560, 680_571_043_840, 41_555_600)
    # and what each part is: the model transformers builds, the MTP module, the router
    # biases (buffers in transformers), the block scales
    main = PUBLISHED["deepseek-ai/DeepSeek-V3"][1] - BUFFERS_COUNTED["deepseek-ai/DeepSeek-V3"]
    mtp_layer = (deepseek_v3_params(**{**s, "L": 1, "dense": 0}) - 2 * V * d - d)  # one MoE block
    mtp = mtp_layer + 2 * d * d + 3 * d + 2 * V * d
    assert (main, mtp) == (671_026_404_352, 13_463_426_048)
    assert main + mtp + moe * E + (f32 - moe * E) == bf16 + f8 + f32 == 684_531_386_000


@pytest.mark.parametrize("name", sorted(ACTIVE) + ["mistralai/Mistral-7B-v0.1"])
def test_the_models_built_from_the_presets_hold_those_parameters(name):
    # the tool's model/ on the meta device, built from the same spec (torch: a third way)
    torch = pytest.importorskip("torch")  # noqa: F841
    from model import TransformerLM
    m = TransformerLM.from_config(get_preset(name), device="meta")
    want = PUBLISHED[name][1] - BUFFERS_COUNTED.get(name, 0)
    assert sum(p.numel() for p in m.parameters()) == want
    if name == "deepseek-ai/DeepSeek-V3":  # the router bias: a persistent buffer, as in transformers
        biases = [b for n, b in m.named_buffers() if n.endswith("router_bias")]
        assert len(biases) == 58 and sum(b.numel() for b in biases) == BUFFERS_COUNTED[name]
        assert all(n in m.state_dict() for n, _ in m.named_buffers() if n.endswith("router_bias"))


def test_kv_cache_of_llama_3_1_8b_uses_its_kv_heads():
    # 2 (K and V) · L · n_kv_heads · head_dim = 2·32·8·128 = 65,536 elements per token,
    # a quarter of what multi-head attention with 32 heads would cache.
    from accounting.planning import plan
    p = plan(get_preset("meta-llama/Llama-3.1-8B"), 8192, precision="bf16-mixed")
    assert p.inference.kv_bytes_per_token == 2 * 65_536  # bf16


def test_llama_3_1_8b_forward_flops_by_hand():
    # The README's example: Llama-3.1-8B at T = 8,192, B = 1, forward, by the 2mnp rule.
    # Per block: Q and O 2·T·d² each; K and V 2·T·d·(h_kv·d_k) each with h_kv·d_k = 8·128
    # = 1,024; QKᵀ and scores·V 2·h·T²·d_k each; SwiGLU 3 × 2·T·d·d_ff; the LM head 2·T·d·V.
    T, L, d, kv, h, dk, f, V = 8192, 32, 4096, 1024, 32, 128, 14336, 128256
    proj = L * (4 * T * d * d + 4 * T * d * kv)
    core = L * 4 * h * T * T * dk
    ffn = L * 6 * T * d * f
    head = 2 * T * d * V
    a = analyze(get_preset("meta-llama/Llama-3.1-8B"), T)
    assert a.component_flops() == {"attention projections": proj, "attention core": core,
                                   "feed-forward": ffn, "LM head": head}
    assert proj == 21_990_232_555_520 and sum((proj, core, ffn, head)) == 158_140_695_838_720


def test_qwen3_0_6b_hub_total_stores_the_tied_table_twice():
    # The Hub's safetensors total for Qwen/Qwen3-0.6B is 751,632,384 (its API, "BF16":
    # 751632384): the file holds lm_head.weight as well as the tied embed_tokens.weight.
    assert PUBLISHED["Qwen/Qwen3-0.6B"][1] + 151_936 * 1_024 == 751_632_384


def test_every_shipped_config_is_a_preset_and_reads_back_to_it():
    # accounting/hf_configs/<org>/<name>.json is the one source of each real checkpoint
    from accounting.architecture.hf_config import PACKAGED, load
    from accounting.architecture.presets import HF_IDS, hf_source
    shipped = {str(p.relative_to(PACKAGED).with_suffix("")) for p in PACKAGED.rglob("*.json")}
    assert shipped == set(HF_IDS) and shipped <= set(PRESETS)
    for name in HF_IDS:
        c = load(PACKAGED / f"{name}.json").config
        assert c.num_layers == PRESETS[name].num_layers and hf_source(name).config == PRESETS[name]


@pytest.mark.parametrize("name", ["mistralai/Mistral-7B-v0.3", "Qwen/Qwen2.5-7B", "Qwen/Qwen3-8B",
                                  "allenai/OLMo-2-1124-7B"])
def test_shipped_architectures_by_their_published_descriptions(name):
    # Each model card's words: Qwen2.5 "RoPE, SwiGLU, RMSNorm, and Attention QKV bias";
    # Qwen3 "QK-Norm" per head; OLMo 2 "norm after attention/feedforward" and "norm on
    # queries and keys" (transformers' olmo2 doc); Mistral v0.3 no biases, GQA 32/8.
    c = PRESETS[name]
    want = {"mistralai/Mistral-7B-v0.3": ("pre", "none", False, 8),
            "Qwen/Qwen2.5-7B": ("pre", "none", True, 4),
            "Qwen/Qwen3-8B": ("pre", "head", False, 8),
            "allenai/OLMo-2-1124-7B": ("post", "full", False, 32)}[name]
    assert (c.norm_placement, c.qk_norm, c.qkv_bias, c.kv_heads) == want
    assert (c.mlp, c.norm, c.positions, c.out_bias, c.mlp_bias) == ("swiglu", "rmsnorm", "rope",
                                                                    False, False)


def test_a_modified_preset_is_called_modified_once(capsys):
    # issue 22: the plans' model row printed "X (modified) (modified from …)"
    from accounting.cli.main import main
    for argv in (["plan", "gpt2-xl", "--attention", "sdpa", "--gpu", "H100"],
                 ["plan", "mistralai/Mixtral-8x7B-v0.1", "--gpus", "8", "--ep", "8", "--zero", "3",
                  "--batch", "8", "--ctx", "4096", "--attention", "sdpa", "--gpu", "H100"]):
        assert main(argv) == 0
        row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("model "))
        assert row.count("modified") == 1 and "modified from " in row, row
