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
