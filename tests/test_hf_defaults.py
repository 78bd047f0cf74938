"""Two rules of transformers' configs that no other test exercised (issue 23: a one-line
change to each went unnoticed), each checked against a hand reading of transformers 5.23's
own source and, where transformers is installed, against transformers itself:

- LlamaConfig.__post_init__ (configuration_llama.py): `if self.num_key_value_heads is None:
  self.num_key_value_heads = self.num_attention_heads`, so an absent (or null)
  num_key_value_heads is multi-head attention, one K/V head per query head.
- Qwen3MoeDecoderLayer.__init__ (modeling_qwen3_moe.py): layer i gets Qwen3MoeSparseMoeBlock
  iff `layer_idx not in mlp_only_layers and num_experts > 0 and (layer_idx + 1) %
  decoder_sparse_step == 0`, else Qwen3MoeMLP(intermediate_size).

The expected values are written out by hand below, not computed by the rule under test.
"""
import pytest

from accounting import analyze
from accounting.architecture.loaders import config_from_json
from hf_examples import CONFIGS, DELETE, write_config
from hf_moe_examples import CONFIGS as MOE_CONFIGS


# ---- llama: num_key_value_heads absent -------------------------------------------------------

def _llama_params_by_hand(kv: int) -> int:
    """tests/hf_examples.py's llama (V 101, d 64, L 2, h 4, head_dim 24, d_ff 96, biases on
    q/k/v/o and the MLP, untied) with kv K/V heads: embedding and head 2·V·d; per block
    q d·h·hd + h·hd, k and v d·kv·hd + kv·hd each, o h·hd·d + d, MLP 3·d·f + 2·f + d,
    two RMSNorm gains 2·d; the final gain d."""
    V, d, L, h, hd, f = 101, 64, 2, 4, 24, 96
    block = (d * h * hd + h * hd) + 2 * (d * kv * hd + kv * hd) + (h * hd * d + d) \
        + (3 * d * f + 2 * f + d) + 2 * d
    return 2 * V * d + L * block + d


def test_hand_llama_params_match_the_shared_example():
    # the example as shipped (kv 2) by this module's algebra and by hf_examples' own
    from hf_examples import params_by_hand
    assert _llama_params_by_hand(2) == params_by_hand("llama")


@pytest.mark.parametrize("kv_value", [DELETE, None], ids=["absent", "null"])
def test_llama_without_num_key_value_heads_is_multi_head(tmp_path, kv_value):
    p = write_config(tmp_path, CONFIGS["llama"], {"num_key_value_heads": kv_value})
    c = config_from_json(p)
    assert CONFIGS["llama"]["num_attention_heads"] == 4
    assert c.kv_heads == 4  # one K/V head per query head (LlamaConfig.__post_init__)
    # per block 6,240 (q) + 2·6,240 (k, v) + 6,208 (o) + 18,688 (MLP) + 128 = 43,744;
    # 2·101·64 + 2·43,744 + 64 = 100,480 (kv 2: 88,000, the test above)
    assert analyze(c).param_count == _llama_params_by_hand(4) == 100_480


def test_transformers_reads_an_absent_num_key_value_heads_the_same_way(tmp_path):
    transformers = pytest.importorskip("transformers")
    data = {k: v for k, v in CONFIGS["llama"].items() if k != "num_key_value_heads"}
    assert transformers.LlamaConfig(**data).num_key_value_heads == 4
    c = config_from_json(write_config(tmp_path, data))
    assert c.kv_heads == 4


# ---- qwen3_moe: decoder_sparse_step ≥ 2 ------------------------------------------------------

# (num_hidden_layers, decoder_sparse_step, mlp_only_layers) -> the MoE layers, by hand from
# (i + 1) % step == 0 and i not in mlp_only_layers:
SPARSE_STEPS = [
    (6, 2, [], (1, 3, 5)),        # i + 1 in {2, 4, 6}
    (6, 2, [3], (1, 5)),          # as above, layer 3 kept dense by mlp_only_layers
    (6, 3, [], (2, 5)),           # i + 1 in {3, 6}
    (7, 4, [], (3,)),             # i + 1 = 4 only (8 > 7)
    (5, 6, [], ()),               # step beyond the depth: no MoE layer at all
    (4, 1, [0, 2], (1, 3)),       # step 1: every layer but mlp_only_layers
]


def _qwen3_moe(L: int, step: int, only: list[int]) -> dict:
    return dict(MOE_CONFIGS["qwen3_moe"], num_hidden_layers=L, decoder_sparse_step=step,
                mlp_only_layers=only)


def _qwen3_moe_params_by_hand(L: int, moe_layers: tuple[int, ...]) -> int:
    """tests/hf_moe_examples.py's qwen3_moe (V 71, d 32, h 4, kv 2, head_dim 12, d_ff 56,
    8 experts of width 16, no biases, untied): embedding and head 2·V·d; per block q
    d·h·hd, k and v d·kv·hd each, o h·hd·d, per-head QK-norm 2·hd, two gains 2·d; a dense
    layer's MLP 3·d·56, an MoE layer's router d·8 and 8 experts of 3·d·16 each; final d."""
    V, d, h, kv, hd, f, E, f_e = 71, 32, 4, 2, 12, 56, 8, 16
    attention = d * h * hd + 2 * d * kv * hd + h * hd * d + 2 * hd + 2 * d
    dense, moe = 3 * d * f, d * E + E * 3 * d * f_e
    n_moe = len(moe_layers)
    return 2 * V * d + L * attention + (L - n_moe) * dense + n_moe * moe + d


@pytest.mark.parametrize("L,step,only,moe_layers", SPARSE_STEPS,
                         ids=[f"L{a}-step{b}-only{c}" for a, b, c, _ in SPARSE_STEPS])
def test_qwen3_moe_decoder_sparse_step_picks_the_moe_layers(tmp_path, L, step, only, moe_layers):
    c = config_from_json(write_config(tmp_path, _qwen3_moe(L, step, only)))
    assert tuple(i for i, k in enumerate(c.layer_kinds) if k.moe) == moe_layers
    assert analyze(c).param_count == _qwen3_moe_params_by_hand(L, moe_layers)


def test_transformers_builds_the_same_moe_layers(tmp_path):
    """transformers' own Qwen3MoeForCausalLM on the meta device: which layers hold a
    Qwen3MoeSparseMoeBlock, and its parameter count, for each case above."""
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import torch
    for L, step, only, moe_layers in SPARSE_STEPS:
        data = _qwen3_moe(L, step, only)
        cfg = transformers.Qwen3MoeConfig(**{k: v for k, v in data.items()
                                             if k not in ("architectures", "transformers_version",
                                                          "model_type", "torch_dtype")})
        with torch.device("meta"):
            model = transformers.Qwen3MoeForCausalLM(cfg)
        built = tuple(i for i, layer in enumerate(model.model.layers)
                      if type(layer.mlp).__name__ == "Qwen3MoeSparseMoeBlock")
        assert built == moe_layers, (L, step, only)
        assert sum(p.numel() for p in model.parameters()) == _qwen3_moe_params_by_hand(L, moe_layers)
