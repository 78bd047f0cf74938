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
  * The CS336 presets have no published count: the hand algebra of the course's model
    (tests/test_model.py::test_gpt2_xl_parameter_count, by hand) is the reference.
"""
import pytest

from accounting import analyze, get_preset
from accounting.config import PRESETS


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
    "mistralai/Mistral-7B-v0.3": (llama_params(32, 4096, 32, 8, 128, 14336, 32768, tied=False),
                                  7_248_023_552),
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


def test_every_preset_is_checked():
    assert set(PUBLISHED) == set(PRESETS)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_equals_the_published_figure(name):
    hand, published = PUBLISHED[name]
    assert hand == published  # the algebra above reproduces the published figure
    assert analyze(get_preset(name)).param_count == published  # and so does the ledger


def test_the_comment_beside_each_preset_row_is_its_count():
    # accounting/presets.py writes each row's size in a comment (nanoGPT style)
    import inspect

    from accounting import presets
    source = inspect.getsource(presets._table)
    for name, (_, published) in PUBLISHED.items():
        row = next(line for line in source.splitlines() if f'"{name}"' in line)
        assert f"{published:,}" in row, row


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
    from accounting.hf_config import PACKAGED, load
    from accounting.presets import HF_IDS, hf_source
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
