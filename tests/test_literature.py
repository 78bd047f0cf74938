"""The literature comparison (accounting/literature/compare.py): formula + Σ terms = exact, and each
term is the exact integer of the cause it names, derived here by hand algebra.

Expected values are written out from the configs (the 2mnp rule per matmul, parameter
counts by hand), never taken from the ledger under test; the identity itself is asserted by
summing the terms here, for every preset and 300 random architectures.
"""
import csv
import io
import json
import random
from fractions import Fraction

import pytest

from accounting.literature import formulas as F
from cli_run import run
from accounting.architecture.config import MLPS, NORM_PLACEMENTS, NORMS, POSITIONS, QK_NORMS, ModelConfig
from accounting.architecture.presets import PRESETS
from accounting.literature.compare import compare
from accounting.literature.estimates import FORMULAS
from accounting.literature.terms import UNEXPLAINED


def closes(cmp) -> None:
    x = cmp.exact
    for e in cmp.estimates:
        assert not [t for t in e.terms if t.kind == UNEXPLAINED], (e.key, e.terms)
        assert e.forward + sum(t.forward for t in e.terms) == x.forward, e.key
        assert e.training + sum(t.training for t in e.terms) == x.training, e.key


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_formula_closes_for_every_preset(name):
    c = PRESETS[name]
    for seq in sorted({1, 100, min(c.context_length, 4096)}):
        for batch in (1, 3):
            closes(compare(c, seq, batch))


def random_configs(n: int, seed: int = 13):
    """Small configs with every spec field drawn at random (seeded)."""
    rng = random.Random(seed)
    for _ in range(n):
        kv, group = rng.choice([1, 2, 3]), rng.choice([1, 2])
        heads, head_dim = kv * group, 2 * rng.randint(1, 4)
        explicit = rng.random() < 0.4
        positions = rng.choice(list(POSITIONS))
        if positions != "rope" and rng.random() < 0.3:
            head_dim += 1
        c = ModelConfig(
            vocab_size=rng.randint(3, 40), context_length=rng.randint(1, 9),
            num_layers=rng.randint(1, 3), d_model=rng.randint(2, 20) if explicit else heads * head_dim,
            num_heads=heads, d_ff=rng.randint(1, 24), num_kv_heads=kv,
            head_dim=head_dim if explicit else None, norm=rng.choice(list(NORMS)),
            norm_placement=rng.choice(list(NORM_PLACEMENTS)), mlp=rng.choice(list(MLPS)),
            positions=positions, tie_embeddings=rng.random() < 0.5, qkv_bias=rng.random() < 0.5,
            out_bias=rng.random() < 0.5, mlp_bias=rng.random() < 0.5,
            qk_norm=rng.choice([q for q in QK_NORMS if q != "l2" or positions == "rope"]),
            # ALiBi runs in the naive core only (the draw kept, so the other configs stay)
            attention=(lambda a: "naive" if positions == "alibi" else a)(
                rng.choice(["naive", "sdpa"])),
            name="random")
        T = rng.randint(1, c.context_length if positions == "learned" else c.context_length + 3)
        yield c, T, rng.randint(1, 3)


def test_every_formula_closes_for_random_architectures():
    for c, T, B in random_configs(300):
        closes(compare(c, T, B))


def test_registry_holds_each_paper_once():
    assert [f.key for f in FORMULAS] == ["6N", "6N-nonembed", "kaplan", "chinchilla", "megatron",
                                         "korthikanti-model", "korthikanti-hardware", "palm",
                                         "nanogpt"]


# ---- hand algebra: GPT-2 XL on the CS336 architecture (SwiGLU, RoPE, untied) --------------

V, L, d, h, dk, ff = 50257, 48, 1600, 25, 64, 6400


def cs336_xl_exact(T, B=1):
    """Forward matmul FLOPs by component (2mnp): Q, K, V, O 4·2·B·T·d² per layer; QKᵀ and
    scores·V 2·2·B·h·T²·d_k; SwiGLU W1, W3, W2 3·2·B·T·d·d_ff; LM head 2·B·T·d·V."""
    return {"proj": L * 8 * B * T * d * d, "core": L * 4 * B * h * T * T * dk,
            "ffn": L * 6 * B * T * d * ff, "head": 2 * B * T * d * V}


def test_cs336_xl_exact_and_each_formula_by_hand():
    T = 2048
    cmp = compare(PRESETS["gpt2-xl"], T, 2)
    e = cs336_xl_exact(T, 2)
    tokens = 2 * T
    assert cmp.exact.forward == sum(e.values()) and cmp.exact.training == 3 * sum(e.values())
    # causal count: the core over T(T+1)/2 pairs
    assert cmp.exact.forward_useful == sum(e.values()) - e["core"] + L * 4 * 2 * h * dk * T * (T + 1) // 2
    n = 2 * V * d + L * (4 * d * d + 3 * d * ff + 2 * d) + d  # 2,127,057,600 (test_presets.py)
    # PaLM: (6N + 12·L·H·Q·T) per token
    palm = cmp.estimate("palm")
    assert palm.training == (6 * n + 12 * L * h * dk * T) * tokens
    terms = {t.label: t for t in palm.terms}
    assert terms["token embedding table counted as a matmul"].training == -6 * V * d * tokens
    assert terms["norm parameters counted as matmul weights"].training == -6 * (2 * L * d + d) * tokens
    # Kaplan: 2N_K + 2·L·T·d per token; N_K = 2·d·L·(2d + d_ff); terms by cause
    kap = cmp.estimate("kaplan")
    assert kap.forward == (2 * 2 * d * L * (2 * d + ff) + 2 * L * T * d) * tokens
    k = {t.label.split(":")[0]: t.forward for t in kap.terms}
    assert k["feed-forward"] == L * 2 * tokens * d * ff  # SwiGLU's third matrix
    assert k["LM head (forward and backward)"] == e["head"]
    assert k["attention core"] == 2 * 2 * L * d * T  # the diagonal: T(T+1)/2 vs T²/2 pairs
    assert k["causal masking"] == 2 * 2 * L * d * T * (T - 1)  # the masked half
    # Chinchilla: embeddings as a one-hot matmul and softmax 3·h·T² are added
    ch = {t.label: t.forward for t in cmp.estimate("chinchilla").terms}
    assert ch["embeddings as a one-hot matmul"] == -2 * 2 * T * V * d
    assert ch["softmax as 3·heads·T² FLOPs"] == -2 * L * 3 * h * T * T
    # Megatron eq. (3): recomputation adds one forward of the layers, 24Bslh² + 4Bs²lh, and
    # its h→4h→h MLP (16Bsh²) misses SwiGLU's 6·B·s·h·d_ff = 24Bsh² by 8Bsh² per layer
    meg = cmp.estimate("megatron")
    assert meg.training == 96 * 2 * T * L * d**2 + 16 * 2 * T**2 * L * d + 6 * 2 * T * d * V
    m = {t.label.split(":")[0]: t for t in meg.terms}
    assert m["activation recomputation (one more forward of every layer)"].training == \
        -(24 * 2 * T * L * d**2 + 4 * 2 * T**2 * L * d)
    assert m["feed-forward"].forward == 8 * 2 * T * L * d**2
    # Korthikanti hardware: 72Bslh²(1 + s/3h + V/12lh) = model + 12·B·s²·l·h
    kh = cmp.estimate("korthikanti-hardware")
    assert kh.training - cmp.estimate("korthikanti-model").training == 12 * 2 * T**2 * L * d


def test_real_gpt2_xl_palm_nanogpt_and_6n_by_hand():
    # openai-community/gpt2-xl: 1,557,611,200 parameters (test_presets.py), 1,024 learned
    # positions, tied head, biases on every linear, LayerNorm with bias.
    c = PRESETS["openai-community/gpt2-xl"]
    n = 1_557_611_200
    T = 512
    cmp = compare(c, T, 1)
    biases = L * (3 * d + d + 4 * d + d)  # QKV, output projection, W1 (4d), W2
    norms = (2 * L + 1) * 2 * d
    pos = 1024 * d
    # exact: the matmul weights once per token (2 FLOPs each) + the attention core
    weights = L * (4 * d * d + 2 * d * 4 * d) + V * d  # tied table = LM head weight
    assert weights + biases + norms + pos == n
    assert cmp.exact.forward == 2 * weights * T + L * 4 * h * T * T * dk
    six = {t.label: t.forward for t in cmp.estimate("6N").terms}
    assert six == {"position table counted as a matmul": -2 * pos * T,
                   "biases counted as matmul weights": -2 * biases * T,
                   "norm parameters counted as matmul weights": -2 * norms * T,
                   "attention core (QKᵀ, scores·V)": L * 4 * h * T * T * dk}
    # nanoGPT: N without the position table; T = block_size = 1,024 although the batch is 512
    nano = cmp.estimate("nanogpt")
    assert nano.training == (6 * (n - pos) + 12 * L * h * (d // h) * 1024) * T
    t = {x.label: x.forward for x in nano.terms}
    assert t["T is block_size = 1,024, not the analysed 512"] == 4 * L * h * dk * (512 - 1024) * T
    # Megatron's assumptions fit GPT-2: its model FLOPs are the exact count
    assert cmp.estimate("korthikanti-model").training == cmp.exact.training
    assert cmp.estimate("korthikanti-model").misfits == ()


def test_gqa_and_head_dim_misfits_are_named():
    llama = compare(PRESETS["meta-llama/Llama-3.1-8B"], 4096)
    kap = llama.estimate("kaplan")
    assert "GQA" in kap.misfits and "gated MLP" in kap.misfits
    proj = next(t for t in kap.terms if t.label.startswith("attention projections"))
    # K and V project to 8·128 = 1,024, not 4,096: Kaplan overcounts 2·2·B·T·L·d·(4096 − 1024)
    assert proj.forward == -2 * 2 * 4096 * 32 * 4096 * (4096 - 1024)
    qwen_like = ModelConfig(vocab_size=100, context_length=64, num_layers=2, d_model=64,
                            num_heads=4, d_ff=128, head_dim=32, name="wide heads")
    nano = compare(qwen_like, 64).estimate("nanogpt")
    q = next(t for t in nano.terms if t.label.startswith("Q = n_embd"))
    assert q.forward == 4 * 2 * 4 * (32 - 16) * 64 * 64  # 4·L·H·(head_dim − d/h)·T·(B·T)


def test_conventions_hardware_recomputation_by_hand():
    cmp = compare(PRESETS["gpt2-xl"], 1024)
    e = cs336_xl_exact(1024)
    conv = {c.name: c.flops for c in cmp.conventions()}
    model = 3 * sum(e.values())
    assert conv["exact, executed attention (what FLOP counters measure)"] == model
    # full recomputation: every block's forward again (the LM head's input is kept)
    assert conv["exact + full recomputation (every block's forward again)"] == \
        model + e["proj"] + e["core"] + e["ffn"]
    assert conv["exact + selective recomputation (QKᵀ, scores·V again)"] == model + e["core"]


def test_non_matmul_is_listed_beside_not_inside():
    cmp = compare(PRESETS["gpt2-xl"], 1024)
    # gpt2-xl at 1,024: 11,016,800,256 non-matmul FLOPs (reports/gpt2_sizes.md, checked by
    # the op counter); softmax there is 5·h·T²·L (max, subtract, exp, sum, divide)
    assert sum(cmp.exact.non_matmul.values()) == 11_016_800_256
    assert cmp.exact.non_matmul["softmax"] == 5 * h * 1024 * 1024 * L


# ---- the CLI --------------------------------------------------------------------------------

def test_cli_first_screen_is_the_table(capsys):
    code, out, err = run(capsys, "openai-community/gpt2-xl", "--compare-formulas")
    assert code == 0 and err == ""
    first = out.splitlines()[:16]
    assert first[0].startswith("openai-community/gpt2-xl: the literature's FLOP formulas")
    for name in ("PaLM 2022, Appendix B", "Kaplan et al. 2020, Table 1", "nanoGPT estimate_mfu",
                 "Megatron-LM 2021, eq. (3)", "Chinchilla 2022, Appendix F", "6N (all parameters)"):
        assert any(line.startswith(name) for line in first), name
    assert "term by term" in out and "MFU conventions" in out and "Non-matmul FLOPs" in out


def test_cli_json_is_exact_and_closes(capsys):
    code, out, _ = run(capsys, "gpt2-small", "--compare-formulas", "--ctx", "4096", "--batch", "2",
                       "--format", "json")
    data = json.loads(out)
    assert code == 0
    T, B, Ls, ds, Vs, ffs = 4096, 2, 12, 768, 50257, 3072
    exact = 3 * B * (Ls * (8 * T * ds * ds + 4 * T * T * ds + 6 * T * ds * ffs) + 2 * T * ds * Vs)
    assert data["exact"]["training"] == exact
    for f in data["formulas"]:
        assert f["training"] + sum(t["training"] for t in f["terms"]) == exact, f["key"]
        r = f["training_over_exact"]
        assert Fraction(r["numerator"], r["denominator"]) == Fraction(f["training"], exact)


def test_cli_csv_long_form_closes(capsys):
    code, out, _ = run(capsys, "meta-llama/Llama-3.2-1B", "--compare-formulas", "--ctx", "2048",
                       "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0
    for key in {r["formula"] for r in rows}:
        mine = [r for r in rows if r["formula"] == key]
        exact = next(r for r in mine if r["kind"] == "exact")
        assert sum(int(r["training_flops"]) for r in mine if r["kind"] != "exact") == \
            int(exact["training_flops"])


def test_cli_verify_runs_the_cross_check_of_the_training_pass(capsys):
    pytest.importorskip("torch")
    pytest.importorskip("fvcore")
    code, out, _ = run(capsys, "--vocab-size", "50", "--context-length", "16", "--num-layers", "1",
                       "--d-model", "16", "--num-heads", "2", "--compare-formulas", "--verify",
                       "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["cross_check"]["agrees"] is True
    assert data["cross_check"]["workload"]["pass"] == "train"


def test_cli_bad_workload_is_exit_2(capsys):
    code, out, err = run(capsys, "openai-community/gpt2", "--compare-formulas", "--ctx", "2048")
    assert code == 2 and out == "" and "learned position table" in err


def test_frames_formulas_frame():
    pd = pytest.importorskip("pandas")
    from accounting import formula_terms_frame, formulas_frame
    df = formulas_frame(["gpt2-small", "openai-community/gpt2"], [256, 1024])
    assert len(df) == 2 * 2 * len(FORMULAS)
    row = df[(df.model == "gpt2-small") & (df.seq == 1024) & (df.formula == "6N")].iloc[0]
    assert isinstance(row["training"], int) and row["training"] == 6 * 190_460_160 * 1024
    assert row["ratio"] == pytest.approx(row["training"] / row["exact_training"])
    terms = formula_terms_frame("gpt2-small")
    assert isinstance(terms, pd.DataFrame)
    six = terms[terms.formula == "6N"].set_index("term")["training"]
    assert six["token embedding table counted as a matmul"] == -6 * 50257 * 768 * 1024


def test_formulas_module_has_no_config_dependency():
    # formulas.py is pure: paper symbols in, numbers out (the mapping is literature.py's)
    import accounting.literature.formulas as mod
    src = open(mod.__file__, encoding="utf-8").read()
    assert "from accounting" not in src and "ModelConfig" not in src.split('"""', 2)[2]
    assert F.exact(Fraction(4, 2)) == 2 and isinstance(F.exact(Fraction(4, 2)), int)


ISSUE15 = {  # the new families, small: every formula must still close with named terms
    "moe": dict(num_experts=8, experts_per_token=2, moe_d_ff=12),
    "moe_capacity": dict(num_experts=4, experts_per_token=2, moe_d_ff=12, moe_capacity_factor=1.5),
    "deepseek_like": dict(num_experts=8, experts_per_token=2, moe_d_ff=12, num_shared_experts=1,
                          router="sigmoid", router_bias=True, router_groups=4, router_topk_groups=2,
                          dense_layers=(0,), kv_lora_rank=8, q_lora_rank=10, qk_nope_head_dim=4,
                          qk_rope_head_dim=4, v_head_dim=6),
    "window": dict(sliding_window=5),
    "window_alternating": dict(sliding_window=5, layer_types=("local", "global", "local")),
    "mla_sdpa": dict(kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=6,
                     attention="sdpa"),
}


@pytest.mark.parametrize("name", sorted(ISSUE15))
def test_every_formula_closes_for_moe_window_and_latent_attention(name):
    c = ModelConfig(vocab_size=50, context_length=32, num_layers=3, d_model=32, num_heads=4,
                    d_ff=40, name=name, **ISSUE15[name])
    for seq, batch in ((1, 1), (7, 2), (32, 3)):
        cmp = compare(c, seq, batch)
        closes(cmp)
        if c.num_experts is not None:  # N-based formulas say that N counts every expert
            assert "MoE: N counts every expert" in cmp.estimate("6N").misfits


def test_every_formula_closes_for_gpt_oss_and_deepseek_v2():
    # gpt-oss: the routed experts' biases (only k of E run; the rest are inactive experts,
    # not biases too) and the sink logits (in N, read by no matmul) each have their term
    from test_architectures import variant
    for name in ("gpt_oss", "deepseek_v2", "sinks_mha"):
        for seq, batch in ((1, 1), (7, 2)):
            cmp = compare(variant(name), seq, batch)
            closes(cmp)
            labels = {t.label for e in cmp.estimates for t in e.terms}
            assert ("attention sinks counted as matmul weights" in labels) == (name != "deepseek_v2")
