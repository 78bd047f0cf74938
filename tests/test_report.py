"""`python -m accounting report`: reproducible, atomic, and every number checkable.

The whole report (cross-check included) is regenerated once into a temporary folder by a
module-scoped fixture and compared byte for byte with the committed reports/. Numbers are
then read back out of the committed Markdown and recomputed here by hand algebra from the
configs (the 2mnp rule applied to each matmul of the CS336 block, written out below), never
taken from the library under test.
"""
import itertools
import re
import shutil
from fractions import Fraction
from pathlib import Path

import pytest

from accounting.cli.main import main as accounting_main
from accounting.runtime.errors import UsageError
from accounting.cli import report as report_cli
from accounting.reporting import figures_index, style

# a long module-scoped build, started first; one worker runs the file (tests/conftest.py)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "reports"
REPORT = "gpt2_sizes.md"
MODELS = ("gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl")
REAL = tuple(f"openai-community/{m}" for m in ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"))
SHAPES = {"small": (12, 768, 12), "medium": (24, 1024, 16), "large": (36, 1280, 20),
          "xl": (48, 1600, 25)}  # (L, d_model, heads): GPT-2 (Radford et al. 2019)
CONTEXTS = (1024, 2048, 4096, 8192, 16384)
COMPONENTS = ("attention projections", "attention core", "feed-forward", "LM head")


# ---- hand algebra (independent of accounting/) -------------------------------------------

def hand_params(V, L, d, d_ff):
    """Embedding V·d, untied LM head V·d, per block Q/K/V/O 4·d², SwiGLU W1/W2/W3 3·d·d_ff
    and two RMSNorm gains 2·d; one final gain d. No biases (CS336 §3.4-3.6)."""
    return 2 * V * d + L * (4 * d * d + 3 * d * d_ff + 2 * d) + d


def hand_components(V, L, d, d_ff, T):
    """Forward matmul FLOPs (2mnp), B = 1, attention core over the full T×T scores:
    Q, K, V, O projections (T×d)(d×d): 4·2·T·d² per block; QKᵀ (per head T×d_k × d_k×T) and
    scores·V (T×T × T×d_k) over h heads: 2·2·T²·d per block; SwiGLU W1, W3 (T×d)(d×d_ff)
    and W2 (T×d_ff)(d_ff×d): 3·2·T·d·d_ff per block; LM head (T×d)(d×V) once."""
    return {"attention projections": L * 8 * T * d * d,
            "attention core": L * 4 * T * T * d,
            "feed-forward": L * 6 * T * d * d_ff,
            "LM head": 2 * T * d * V}


def test_hand_algebra_matches_the_course_numbers():
    # GPT-2 XL (V 50,257, L 48, d 1,600, d_ff 6,400) at T = 1,024: the values quoted in the
    # brief and the package docstring, re-derived here by hand.
    assert hand_params(50257, 48, 1600, 6400) == 2_127_057_600
    assert sum(hand_components(50257, 48, 1600, 6400, 1024).values()) == 4_513_336_524_800


# ---- reading the Markdown back -----------------------------------------------------------

def sections(md: str) -> dict[str, str]:
    """'## heading' -> body, for the level-2 sections."""
    out, name = {}, None
    for line in md.splitlines():
        if line.startswith("## "):
            name = line[3:].strip()
            out[name] = ""
        elif name is not None:
            out[name] += line + "\n"
    return out


def section(md: str, prefix: str) -> str:
    found = [body for name, body in sections(md).items() if name.startswith(prefix)]
    assert len(found) == 1, prefix
    return found[0]


def tables(text: str) -> list[list[dict[str, str]]]:
    """Every Markdown table in text, as rows keyed by header (bold markers stripped)."""
    out, block = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            block.append(line)
        elif block:
            cells = [[c.strip().strip("*") for c in re.split(r"(?<!\\)\|", row)[1:-1]] for row in block]
            header = cells[0]
            out.append([dict(zip(header, r)) for r in cells[2:]])
            block = []
    return out


def integer(cell: str) -> int:
    assert re.fullmatch(r"\d{1,3}(,\d{3})*", cell), cell
    return int(cell.replace(",", ""))


def pct(cell: str) -> Fraction:
    assert re.fullmatch(r"\d+\.\d\d%", cell), cell
    return Fraction(cell[:-1]) / 100


def two_places(x: Fraction) -> str:
    """A positive exact value rounded half-even to 2 decimals (Python's round on a Fraction)."""
    q = round(x * 100)
    return f"{q // 100}.{q % 100:02d}"


def close_share(shown: Fraction, exact: Fraction) -> bool:
    """A share shown at 2 decimals of a percent is the exact one rounded down or up."""
    return abs(shown - exact) < Fraction(1, 10_000)


# ---- the regenerated report (once per module) ----------------------------------------------

@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("fvcore")
    out = tmp_path_factory.mktemp("report")
    import contextlib
    import io
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = accounting_main(["report", "--out", str(out)])
    return out, code, err.getvalue()


@pytest.fixture(scope="module")
def committed_md():
    return (COMMITTED / REPORT).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def configs(committed_md):
    rows = tables(section(committed_md, "1."))[0]
    return {r["model"]: {"V": integer(r["vocab_size V"]), "L": integer(r["num_layers L"]),
                             "d": integer(r["d_model"]), "h": integer(r["num_heads h"]),
                             "d_ff": integer(r["d_ff"])} for r in rows}


def test_regenerated_markdown_is_byte_identical(regenerated):
    out, code, _ = regenerated
    assert code == 0
    new, old = (out / REPORT).read_text(encoding="utf-8"), (COMMITTED / REPORT).read_text(encoding="utf-8")
    if new != old:
        import difflib
        diff = "".join(list(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                                 "committed", "regenerated"))[:40])
        pytest.fail("reports/gpt2_sizes.md is stale: regenerate it with `python -m accounting "
                    "report` (or find what made the output change)\n" + diff)
    assert (out / REPORT).read_bytes() == (COMMITTED / REPORT).read_bytes()


def _committed_png_matplotlib():
    from PIL import Image
    png = next((COMMITTED / "figures").glob("*.png"))
    return Image.open(png).info.get("Software", "")


def test_regenerated_figures_are_identical(regenerated):
    out, _, _ = regenerated
    new, old = out / "figures", COMMITTED / "figures"
    names = sorted(p.name for p in old.iterdir())
    assert sorted(p.name for p in new.iterdir()) == names
    expected = {f for info in figures_index.FIGURES.values() for f in info.files()}
    assert expected | {figures_index.SWEEP_CSV, figures_index.FORMULA_CSV} == set(names)
    # The data behind the plots: always byte-identical.
    for csv_name in (figures_index.SWEEP_CSV, figures_index.FORMULA_CSV):
        assert (new / csv_name).read_bytes() == (old / csv_name).read_bytes(), csv_name
    # The images: identical bytes for the same matplotlib (the PNG records which one drew it).
    import matplotlib
    drawn_with = _committed_png_matplotlib()
    if matplotlib.__version__ not in drawn_with:
        pytest.skip(f"committed figures drawn with {drawn_with!r}, this is matplotlib "
                    f"{matplotlib.__version__}: image bytes may differ (data compared above)")
    for name in names:
        assert (new / name).read_bytes() == (old / name).read_bytes(), name


_DRAW_AND_COMPARE = """
import pathlib, sys
from numpy._core._multiarray_umath import __cpu_features__
off = sys.argv[2].split()
assert off and not any(__cpu_features__[f] for f in off), off  # numpy honoured the variable
from accounting.reporting import data, figures
d = data.assemble(False, checks=False)
out = pathlib.Path(sys.argv[1])
for name in figures.FIGURES:
    figures.save(name, d, out)
"""


def test_figures_do_not_depend_on_the_cpus_simd(tmp_path):
    """Issue 23: two fresh clones regenerated a different flops_vs_context.png. The cause:
    matplotlib's log scale took np.log10 of every point, and numpy picks its SIMD code for
    log10 by the CPU at run time (with AVX-512, SVML kernels that differ in the last bit),
    so the same versions drew different pixels on another CPU. Here the figures are drawn
    with every SIMD extension numpy dispatches to switched off (NPY_DISABLE_CPU_FEATURES,
    numpy's documented switch), as a CPU without them would, and must still be the
    committed bytes. Before the fix (figures.py's decimal log scale) flops_vs_context.png
    differed in 61 pixels on an AVX-512 machine."""
    pytest.importorskip("matplotlib")
    np_umath = pytest.importorskip("numpy._core._multiarray_umath")
    import matplotlib
    import os
    import subprocess
    import sys
    drawn_with = _committed_png_matplotlib()
    if matplotlib.__version__ not in drawn_with:
        pytest.skip(f"committed figures drawn with {drawn_with!r}, this is matplotlib "
                    f"{matplotlib.__version__}")
    off = [f for f in np_umath.__cpu_dispatch__ if np_umath.__cpu_features__.get(f)]
    if not off:
        pytest.skip("numpy dispatches to no SIMD extension on this CPU: nothing to switch off")
    env = dict(os.environ, NPY_DISABLE_CPU_FEATURES=" ".join(off), PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-c", _DRAW_AND_COMPARE, str(tmp_path), " ".join(off)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(f for info in figures_index.FIGURES.values() for f in info.files())
    for name in names:
        assert (tmp_path / name).read_bytes() == (COMMITTED / "figures" / name).read_bytes(), name


def test_progress_on_stderr(regenerated):
    _, _, err = regenerated
    lines = err.splitlines()
    n = len([x for x in lines if x.startswith("[")])
    # sweeps and formula sweeps per course preset, the formula table, the cross-checks
    # (course presets at 5 contexts, the real GPT-2 at its 1,024), figures, the Markdown
    checks = len(MODELS) * len(CONTEXTS) + len(REAL)
    assert n == 2 * len(MODELS) + 1 + checks + len(figures_index.FIGURES) + 1
    runs = [(m, T) for m in MODELS for T in CONTEXTS] + [(m, 1024) for m in REAL]
    for model, T in runs:
        assert any(re.fullmatch(rf"\[\d+/{n}\] cross-check {re.escape(model)} T={T} \.\.\. "
                                r"agrees \(\d+\.\d s\)", x) for x in lines), (model, T)
    assert lines[-1].startswith("report: wrote ")


# ---- the committed numbers, recomputed -------------------------------------------------------

def test_configs_are_gpt2(configs):
    # GPT-2 shapes (Radford et al. 2019): layers, width, heads; d_ff = 4·d_model; vocab 50,257.
    shapes = {"gpt2-small": (12, 768, 12), "gpt2-medium": (24, 1024, 16),
              "gpt2-large": (36, 1280, 20), "gpt2-xl": (48, 1600, 25)}
    assert list(configs) == list(MODELS)
    for m, (L, d, h) in shapes.items():
        assert configs[m] == {"V": 50257, "L": L, "d": d, "h": h, "d_ff": 4 * d}


def test_parameters_and_memory(committed_md, configs):
    body = section(committed_md, "2.")
    per_component, memory = tables(body)
    totals = {m: integer(v) for m, v in next(r for r in per_component if r["component"] == "total").items()
              if m in MODELS}
    for m, c in configs.items():
        n = hand_params(c["V"], c["L"], c["d"], c["d_ff"])
        assert totals[m] == n
        row = next(r for r in memory if r["model"] == m)
        assert integer(row["parameters"]) == n
        assert integer(row["fp32 bytes"]) == 4 * n
        # GB = 10⁹ bytes and GiB = 2³⁰ bytes, each rounded to 2 decimals.
        assert row["GB (10⁹ bytes)"] == f"{two_places(Fraction(4 * n, 10**9))} GB"
        assert row["GiB (2³⁰ bytes)"] == f"{two_places(Fraction(4 * n, 2**30))} GiB"
    assert totals["gpt2-xl"] == 2_127_057_600
    xl = next(r for r in memory if r["model"] == "gpt2-xl")
    assert (xl["GB (10⁹ bytes)"], xl["GiB (2³⁰ bytes)"]) == ("8.51 GB", "7.92 GiB")


def test_every_matmul_and_component_at_1024(committed_md, configs):
    body = committed_md.split("## 3.")[1].split("\n## ")[0]
    for m, c in configs.items():
        sub = body.split(f"### {m}\n")[1].split("\n### ")[0]
        matmul_rows, component_rows = tables(sub)
        comp = hand_components(c["V"], c["L"], c["d"], c["d_ff"], 1024)
        total = sum(comp.values())
        # Ten matmuls: per block Q, K, V, QKᵀ, scores·V, O, W1, W3, W2; the LM head once.
        rows = [r for r in matmul_rows if r["matmul"] != "total"]
        assert len(rows) == 10
        for k in COMPONENTS:
            assert sum(integer(r["FLOPs (all)"]) for r in rows if r["component"] == k) == comp[k]
        assert integer(next(r for r in matmul_rows if r["matmul"] == "total")["FLOPs (all)"]) == total
        by_name = {r["matmul"]: r for r in rows}
        assert by_name["LM head"]["FLOPs each (formula)"] == "2·B·T·d_model·V"
        assert integer(by_name["LM head"]["FLOPs each"]) == 2 * 1024 * c["d"] * c["V"]
        assert integer(by_name["SwiGLU W2"]["FLOPs each"]) == 2 * 1024 * c["d_ff"] * c["d"]
        for r in rows:
            assert close_share(pct(r["share"]), Fraction(integer(r["FLOPs (all)"]), total))
        for r in component_rows:
            if r["component"] == "total":
                continue
            assert integer(r["FLOPs"]) == comp[r["component"]]
            assert close_share(pct(r["share of forward"]), Fraction(comp[r["component"]], total))
        largest = max(comp, key=comp.get)
        assert f"Largest component of {m} at T = 1,024: **{largest}**" in sub
    assert "4,513,336,524,800" in body


def test_shares_against_model_size_and_the_sentence(committed_md, configs):
    body = section(committed_md, "4.")
    rows = {r["component"]: r for r in tables(body)[0]}
    exact = {}
    for m, c in configs.items():
        comp = hand_components(c["V"], c["L"], c["d"], c["d_ff"], 1024)
        total = sum(comp.values())
        exact[m] = {k: Fraction(v, total) for k, v in comp.items()}
        for k in COMPONENTS:
            assert close_share(pct(rows[k][m]), exact[m][k]), (m, k)
        assert sum(pct(rows[k][m]) for k in COMPONENTS) == 1  # columns add to 100.00%
        assert rows["largest component"][m] == max(comp, key=comp.get)
    # The generated sentence: its numbers are the table's small and XL shares, and its
    # verbs match the direction of the exact change.
    sentence = next(p for p in body.split("\n\n") if p.startswith("From gpt2-small to gpt2-xl"))
    for k in COMPONENTS:
        possessive = k + ("'" if k.endswith("s") else "'s")
        hit = re.search(rf"the {re.escape(possessive)} (?:share (?:steadily )?(grows|falls) )?"
                        rf"from (\d+\.\d\d%) to (\d+\.\d\d%)", sentence)
        assert hit, k
        assert (hit.group(2), hit.group(3)) == (rows[k]["gpt2-small"], rows[k]["gpt2-xl"])
        up = exact["gpt2-xl"][k] > exact["gpt2-small"][k]
        clause = sentence.split("while")[0 if up else 1]
        assert possessive in clause, (k, up)
    assert "feed-forward's share steadily grows" in sentence  # 49.75% -> 66.91%, every step up
    assert "LM head's share steadily falls" in sentence


def test_xl_at_16384(committed_md, configs):
    body = section(committed_md, "5.")
    rows = {r["component"]: r for r in tables(body)[0]}
    c = configs["gpt2-xl"]
    short = hand_components(c["V"], c["L"], c["d"], c["d_ff"], 1024)
    long = hand_components(c["V"], c["L"], c["d"], c["d_ff"], 16384)
    for k in COMPONENTS:
        assert integer(rows[k]["FLOPs at T = 1,024"]) == short[k]
        assert integer(rows[k]["FLOPs at T = 16,384"]) == long[k]
    t1, t2 = sum(short.values()), sum(long.values())
    assert t2 == 149_522_795_724_800
    ratio = Fraction(t2, t1)
    assert rows["total"]["growth"] == f"{two_places(ratio)}×" == "33.13×"
    # Shares before and after, each column recomputed (two 'share' headers: parse by index).
    table_lines = [x for x in body.splitlines() if x.startswith("| ")][1:]
    for line in table_lines:
        cells = [x.strip().strip("*") for x in line.split("|")[1:-1]]
        if cells[0] in COMPONENTS:
            assert close_share(pct(cells[2]), Fraction(short[cells[0]], t1))
            assert close_share(pct(cells[4]), Fraction(long[cells[0]], t2))
    # The attention core grows with T² (×256), the rest with T (×16).
    assert rows["attention core"]["growth"] == "256.00×"
    assert f"by {two_places(ratio)}×" in body
    assert "changes from the feed-forward to the attention core" in body


def test_crossover_contexts(committed_md, configs):
    body = section(committed_md, "6.")
    crossover = {r["model"]: r for r in tables(body)[0]}
    for m, c in configs.items():
        # Attention core 4·T²·d = feed-forward 6·T·d·d_ff  <=>  T = 3·d_ff/2 (per block).
        equal = Fraction(3 * c["d_ff"], 2)
        assert integer(crossover[m]["core = FFN at T"]) == equal
        assert integer(crossover[m]["core > FFN from T"]) == equal + 1
        comp = hand_components(c["V"], c["L"], c["d"], c["d_ff"], int(equal))
        assert comp["attention core"] == comp["feed-forward"]
        # Useful count: 4·d·T(T+1)/2 = 6·T·d·d_ff  <=>  T = 3·d_ff - 1.
        assert integer(crossover[m]["useful count: core = FFN at T"]) == 3 * c["d_ff"] - 1
    powers = tables(body)[1]
    assert len(powers) == len(MODELS) * len(CONTEXTS)
    for r in powers:
        c = configs[r["model"]]
        comp = hand_components(c["V"], c["L"], c["d"], c["d_ff"], integer(r["T"]))
        assert integer(r["forward matmul FLOPs"]) == sum(comp.values())
        for k in COMPONENTS:
            assert close_share(pct(r[k]), Fraction(comp[k], sum(comp.values())))


def test_sweep_csv(configs):
    import csv
    rows = list(csv.DictReader((COMMITTED / "figures" / figures_index.SWEEP_CSV).open(encoding="utf-8")))
    seqs = sorted({int(r["seq"]) for r in rows})
    assert seqs[0] == 1024 and seqs[-1] == 16384 and set(CONTEXTS) <= set(seqs)
    assert max(b - a for a, b in itertools.pairwise(seqs)) <= 512
    for r in rows[::37]:  # a spread of rows, recomputed
        c = configs[r["model"]]
        comp = hand_components(c["V"], c["L"], c["d"], c["d_ff"], int(r["seq"]))
        assert int(r["flops"]) == comp[r["component"]]
        assert int(r["total_flops"]) == sum(comp.values())


def test_one_colour_per_component_in_every_figure():
    colours = list(style.COMPONENT_COLOURS.values())
    assert list(style.COMPONENT_COLOURS) == list(COMPONENTS)
    assert len(set(colours)) == len(colours)
    # Each component figure's SVG draws with the palette (matplotlib writes lower-case hex).
    for info in figures_index.FIGURES.values():
        if info.name == "formula_error_vs_context":  # formulas, not components: next test
            continue
        svg = (COMMITTED / "figures" / f"{info.name}.svg").read_text(encoding="utf-8").lower()
        used = [k for k, hexcode in style.COMPONENT_COLOURS.items() if hexcode.lower() in svg]
        assert "attention core" in used and "feed-forward" in used, info.name


def test_report_has_no_absolute_paths_or_dates(committed_md):
    assert str(ROOT) not in committed_md and "/tmp/" not in committed_md
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", committed_md)
    assert "DRAFT" not in committed_md  # the committed copy is cross-checked


# ---- the real GPT-2 and the literature's formulas (sections 7 and 8), recomputed -----------

def hand_params_gpt2(V, L, d, positions=1024):
    """OpenAI GPT-2: token table V·d (tied: also the LM head), positions 1,024·d, per block
    Q/K/V/O 4·d² + their biases 4·d, MLP 2·4·d² + biases 4·d + d, two LayerNorms 4·d; final
    LayerNorm 2·d."""
    return V * d + positions * d + L * (12 * d * d + 13 * d) + 2 * d


def hand_components_gpt2(V, L, d, T):
    """Forward matmul FLOPs (2mnp), B = 1: projections 4·2·T·d², attention core 2·2·T²·d,
    MLP W1 (T×d)(d×4d) and W2: 2·2·T·d·4d, LM head 2·T·d·V (tied, still a matmul)."""
    return {"attention projections": L * 8 * T * d * d, "attention core": L * 4 * T * T * d,
            "feed-forward": L * 16 * T * d * d, "LM head": 2 * T * d * V}


def four_places(x: Fraction) -> str:
    q = round(x * 10**4)
    return f"{q // 10**4}.{q % 10**4:04d}"


def hand_formulas(V, L, d, h, d_ff, T, real):
    """Each formula's training FLOPs at B = 1, written out from its paper (not from
    accounting.literature.formulas), and the exact training matmul FLOPs (3 × forward)."""
    comp = hand_components_gpt2(V, L, d, T) if real else hand_components(V, L, d, d_ff, T)
    exact = 3 * sum(comp.values())
    n = hand_params_gpt2(V, L, d) if real else hand_params(V, L, d, d_ff)
    tables = V * d + (1024 * d if real else 0) + (0 if real else V * d)  # vocab + position matrices
    dk = d // h
    return exact, {
        # causal pairs only: the core over T(T+1)/2 pairs instead of T²
        "exact, causal pairs only": 3 * (sum(comp.values()) - comp["attention core"]
                                         + L * 4 * d * T * (T + 1) // 2),
        "6N (all parameters)": 6 * n * T,
        "6N (non-embedding N)": 6 * (n - tables) * T,
        # Kaplan Table 1: 3 × (2·N_K + 2·n_layer·n_ctx·d_attn) per token, N_K = 2dL(2d + d_ff)
        "Kaplan et al. 2020, Table 1": 3 * (2 * 2 * d * L * (2 * d + d_ff) + 2 * L * T * d) * T,
        # Chinchilla App. F: embeddings + L·(KQV, K@Q, softmax, ·V, final linear, dense) + logits
        "Chinchilla 2022, Appendix F": 3 * (2 * T * V * d + L * (6 * T * d * d + 2 * T * T * d
                                                              + 3 * h * T * T + 2 * T * T * d
                                                              + 2 * T * d * d + 4 * T * d * d_ff)
                                            + 2 * T * d * V),
        "Megatron-LM 2021, eq. (3)": 96 * T * L * d * d + 16 * T * T * L * d + 6 * T * d * V,
        "Korthikanti 2022, model FLOPs": 72 * T * L * d * d + 12 * T * T * L * d + 6 * T * d * V,
        "Korthikanti 2022, hardware FLOPs": 72 * T * L * d * d + 24 * T * T * L * d + 6 * T * d * V,
        "PaLM 2022, Appendix B": (6 * n + 12 * L * h * dk * T) * T,
        # nanoGPT: N less the position table; T = block_size (1,024 for GPT-2; T for RoPE)
        "nanoGPT estimate_mfu": (6 * (n - (1024 * d if real else 0)) + 12 * L * h * (d // h)
                                 * (1024 if real else T)) * T,
    }


def test_real_gpt2_parameters_memory_and_flops(committed_md):
    body = section(committed_md, "7.")
    sizes, per_component, flops = tables(body)
    published = {"openai-community/gpt2": 124_439_808, "openai-community/gpt2-medium": 354_823_168,
                 "openai-community/gpt2-large": 774_030_080, "openai-community/gpt2-xl": 1_557_611_200}
    for row, (size, (L, d, h)) in zip(sizes, SHAPES.items()):
        n_real, n_course = hand_params_gpt2(50257, L, d), hand_params(50257, L, d, 4 * d)
        assert integer(row["real parameters"]) == n_real == published[row["real GPT-2"]]
        assert integer(row["course parameters"]) == n_course
        change = Fraction(n_real - n_course, n_course) * 100
        assert row["real vs course"] == ("−" if change < 0 else "+") + two_places(abs(change)) + "%"
        assert row["real fp32"] == f"{two_places(Fraction(4 * n_real, 10**9))} GB"
        assert row["course fp32"] == f"{two_places(Fraction(4 * n_course, 10**9))} GB"
    totals = next(r for r in per_component if r["component"] == "total")
    for m, n in published.items():
        assert integer(totals[m]) == n
    by_model = {r["model"]: r for r in flops}
    for size, (L, d, h) in SHAPES.items():
        for name, comp in ((REAL[list(SHAPES).index(size)], hand_components_gpt2(50257, L, d, 1024)),
                           (MODELS[list(SHAPES).index(size)], hand_components(50257, L, d, 4 * d, 1024))):
            row = by_model[name]
            total = sum(comp.values())
            assert integer(row["forward matmul FLOPs"]) == total
            for k in COMPONENTS:
                assert close_share(pct(row[k]), Fraction(comp[k], total)), (name, k)
            assert sum(pct(row[k]) for k in COMPONENTS) == 1
    assert "cannot run T = 16,384" in body  # the learned table holds 1,024 positions


def test_non_matmul_flops_agree_with_the_op_counter(committed_md):
    # Section 7's non-matmul FLOPs (analytic) against the op counter run on the real model at
    # T = 1,024 (section 9's table: "analytic / op counter").
    flops = {r["model"]: r for r in tables(section(committed_md, "7."))[2]}
    checks = {(r["model"], r["T"]): r for r in tables(section(committed_md, "9."))[0]}
    for name in MODELS + REAL:
        analytic, counted = checks[(name, "1,024")]["non-matmul: analytic / op counter"].split(" / ")
        assert integer(flops[name]["non-matmul FLOPs"]) == integer(counted) == integer(analytic)


def test_literature_tables_by_hand(committed_md):
    body = section(committed_md, "8.")
    course, real = tables(body)[:2]
    for table, names, is_real in ((course, MODELS, False), (real, REAL, True)):
        rows = {r["formula (training FLOPs ÷ exact)"]: r for r in table}
        for name, (L, d, h) in zip(names, SHAPES.values()):
            exact, formulas = hand_formulas(50257, L, d, h, 4 * d, 1024, is_real)
            for formula, flops in formulas.items():
                assert rows[formula][name] == four_places(Fraction(flops, exact)), (name, formula)
        assert set(rows) == {"exact training matmul FLOPs", *hand_formulas(1, 1, 1, 1, 1, 1, False)[1]}
    # GPT-2 fits Megatron's assumptions: the model-FLOPs form is exact for the real family
    assert all(v == "1.0000" for k, v in {r["formula (training FLOPs ÷ exact)"]: r for r in real}[
        "Korthikanti 2022, model FLOPs"].items() if k in REAL)


def test_literature_terms_add_up_to_the_exact_count(committed_md):
    body = section(committed_md, "8.")
    for name, is_real, table in (("gpt2-xl", False, tables(body)[2]),
                                 ("openai-community/gpt2-xl", True, tables(body)[3])):
        L, d, h = SHAPES["xl"]
        exact, formulas = hand_formulas(50257, L, d, h, 4 * d, 1024, is_real)
        assert integer(table[-1]["training FLOPs"]) == exact
        current, total, seen = None, 0, []
        for r in table[:-1] + [{"formula": "end", "term": "formula", "training FLOPs": "0"}]:
            if r["term"] == "formula":
                if current is not None:
                    assert total == exact, (name, current)  # formula + Σ terms = exact
                    seen.append(current)
                current = r["formula"]
                if current != "end":
                    total = integer(r["training FLOPs"])
                    assert total == formulas[current], (name, current)
            else:
                cell = r["training FLOPs"]
                total += (-1 if cell.startswith("−") else 1) * integer(cell[1:])
        assert set(seen) == set(formulas) - {"exact, causal pairs only"}


def test_key_results_and_sentences_of_sections_7_and_8(committed_md):
    key = section(committed_md, "Key results")
    L, d, h = SHAPES["xl"]
    n = hand_params_gpt2(50257, L, d)
    real = sum(hand_components_gpt2(50257, L, d, 1024).values())
    course = sum(hand_components(50257, L, d, 4 * d, 1024).values())
    assert (f"has {n:,} parameters ({two_places(Fraction(4 * n, 10**9))} GB in fp32) and costs "
            f"3.507 TFLOPs per forward pass at T = 1,024, {two_places(Fraction(real, course))}× "
            "the course gpt2-xl's") in key
    assert real == 3_506_703_564_800
    # Closest and furthest model-FLOPs formulas per family: worst |ratio − 1| over its models
    for label, names, is_real in (("for OpenAI's GPT-2", REAL, True),
                                  ("for the course presets", MODELS, False)):
        worst = {}
        for name, (L_, d_, h_) in zip(names, SHAPES.values()):
            exact, formulas = hand_formulas(50257, L_, d_, h_, 4 * d_, 1024, is_real)
            for f, flops in formulas.items():
                if f in ("exact, causal pairs only", "Megatron-LM 2021, eq. (3)",
                         "Korthikanti 2022, hardware FLOPs"):
                    continue
                worst[f] = max(worst.get(f, Fraction(0)), abs(Fraction(flops, exact) - 1))
        order = sorted(worst, key=lambda k: (worst[k], k))
        within = ["exact" if worst[k] == 0 else f"within {two_places(worst[k] * 100)}%"
                  for k in order[:2]]
        assert (f"{label} the closest model-FLOPs formulas are {order[0]} ({within[0]}) and "
                f"{order[1]} ({within[1]}), the furthest {order[-1]} (off by up to "
                f"{two_places(worst[order[-1]] * 100)}%)") in key
    # Section 7's closing sentence
    body7 = section(committed_md, "7.")
    change = Fraction(real - course, course) * 100
    assert (f"costs 3.507 TFLOPs against 4.513 TFLOPs for gpt2-xl (−{two_places(-change)}%), with "
            "the same LM head FLOPs") in body7
    # Section 8's sentence on the long context: each 'NAME from A to B' by hand at 1,024 and 16,384
    body8 = section(committed_md, "8.")
    sentence = next(p for p in body8.split("\n\n") if p.startswith("As the context grows"))
    at = {T: hand_formulas(50257, L, d, h, 4 * d, T, False) for T in (1024, 16384)}
    moves = [(name, *m.groups()) for name in at[1024][1]
             for m in [re.search(re.escape(name) + r" from (\d\.\d{4}) to (\d\.\d{4})", sentence)] if m]
    assert len(moves) == 3
    for name, a, b in moves:
        assert a == four_places(Fraction(at[1024][1][name], at[1024][0]))
        assert b == four_places(Fraction(at[16384][1][name], at[16384][0]))
    move = {k: abs(Fraction(at[16384][1][k], at[16384][0]) - Fraction(at[1024][1][k], at[1024][0]))
            for k in at[1024][1] if k != "exact, causal pairs only"}
    assert {m[0] for m in moves} == set(sorted(move, key=move.get)[-3:])  # the three largest moves
    useful = four_places(Fraction(at[16384][1]["exact, causal pairs only"], at[16384][0]))
    assert f"(the causal count falls to {useful} of it)" in sentence


def test_formula_csv_rows_by_hand(configs):
    import csv
    rows = list(csv.DictReader((COMMITTED / "figures" / figures_index.FORMULA_CSV).open(encoding="utf-8")))
    names = {"palm": "PaLM 2022, Appendix B", "kaplan": "Kaplan et al. 2020, Table 1",
             "6N": "6N (all parameters)", "chinchilla": "Chinchilla 2022, Appendix F",
             "megatron": "Megatron-LM 2021, eq. (3)", "nanogpt": "nanoGPT estimate_mfu"}
    checked = 0
    for r in rows[::29]:
        c = configs[r["model"]]
        h = dict(zip(MODELS, (s[2] for s in SHAPES.values())))[r["model"]]
        exact, formulas = hand_formulas(c["V"], c["L"], c["d"], h, c["d_ff"], int(r["seq"]), False)
        assert int(r["exact_training_flops"]) == exact
        if r["formula"] in names:
            assert int(r["training_flops"]) == formulas[names[r["formula"]]], r
            checked += 1
    assert checked > 20


def test_formula_figure_draws_every_formula():
    svg = (COMMITTED / "figures" / "formula_error_vs_context.svg").read_text(encoding="utf-8").lower()
    for key, (colour, _) in style.FORMULA_STYLES.items():
        assert colour.lower() in svg, key


def test_real_gpt2_cross_checked_at_1024(committed_md):
    rows = tables(section(committed_md, "9."))[0]
    for name, (L, d, h) in zip(REAL, SHAPES.values()):
        row = next(r for r in rows if r["model"] == name)
        total = sum(hand_components_gpt2(50257, L, d, 1024).values())
        assert row["T"] == "1,024" and row["verdict"] == "agrees"
        assert integer(row["analytic matmul FLOPs"]) == integer(row["FlopCounterMode"]) == total
    assert not [r for r in rows if r["model"] in REAL and r["T"] != "1,024"]


# ---- drafts, bad input, atomicity ---------------------------------------------------------

def _drawn_in(before: Path):
    """A figures.save that, for a figure whose drawing function is unchanged, writes the
    files an earlier run in this module drew into before/figures (the same bytes: the
    figures are drawn from the sweeps alone, not from the cross-checks or the draft flag,
    and test_regenerated_figures_are_identical compares them with the committed ones)
    instead of drawing it again; a figure whose drawing a test replaces is drawn (and
    fails) as before."""
    from accounting.reporting import figures
    original, draw = figures.save, dict(figures.DRAW)

    def save(name, data, folder):
        if figures.DRAW[name] is not draw[name]:
            return original(name, data, folder)
        for file in figures_index.FIGURES[name].files():
            shutil.copyfile(before / "figures" / file, folder / file)
        return figures_index.FIGURES[name].files()
    return save


@pytest.fixture(scope="module")
def drafted(tmp_path_factory, regenerated):
    """`report --no-verify` once: its folder, exit status and stderr. Its figures are the
    verified run's files (_drawn_in), not drawn a second time (about 3.5 s of matplotlib's
    CPU): figures.py draws from the sweeps, which the draft computes as the verified run
    does, and reads neither the cross-checks nor the draft flag; drawing them from the
    draft's numbers (data.assemble(False)) is compared with the committed files in
    test_figures_do_not_depend_on_the_cpus_simd."""
    from accounting.reporting import figures
    out = tmp_path_factory.mktemp("draft")
    import contextlib
    import io
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(err):
        patch.setattr(figures, "save", _drawn_in(regenerated[0]))
        code = accounting_main(["report", "--no-verify", "--out", str(out)])
    return out, code, err.getvalue()


@pytest.fixture
def drawn_before(drafted, monkeypatch):
    """figures.save of a figure the draft wrote writes the draft's files (_drawn_in): the
    failure tests below are about the staging and the swap, and paid about 3 s of
    matplotlib for each."""
    from accounting.reporting import figures
    monkeypatch.setattr(figures, "save", _drawn_in(drafted[0]))


def test_no_verify_draft_is_marked(drafted):
    tmp_path, code, err = drafted
    assert code == 0
    md = (tmp_path / REPORT).read_text(encoding="utf-8")
    assert "**DRAFT — not cross-checked.**" in md
    assert "cross-check" not in "".join(x for x in err.splitlines() if x.startswith("["))
    assert "draft: cross-check skipped" in err


def test_out_is_a_file(tmp_path, capsys):
    f = tmp_path / "file.md"
    f.write_text("x")
    assert accounting_main(["report", "--no-verify", "--out", str(f)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("accounting: error: --out")
    assert f.read_text() == "x"


def test_out_parent_missing(tmp_path, capsys):
    assert accounting_main(["report", "--no-verify", "--out", str(tmp_path / "a" / "b")]) == 2
    assert "does not exist" in capsys.readouterr().err


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def old_report(tmp_path):
    """A copy of the committed report, standing in for the previous run's output."""
    shutil.copy(COMMITTED / REPORT, tmp_path / REPORT)
    shutil.copytree(COMMITTED / "figures", tmp_path / "figures")
    return tmp_path, _snapshot(tmp_path)


def test_failure_midway_leaves_old_report(old_report, drawn_before, monkeypatch, capsys):
    out, before = old_report
    from accounting.reporting import figures

    def broken(data):
        raise RuntimeError("figure failed")

    # The third figure fails after two have been written into the staging folder.
    monkeypatch.setitem(figures.DRAW, "flops_vs_context", broken)
    with pytest.raises(RuntimeError, match="figure failed"):
        report_cli.main(["--no-verify", "--out", str(out)])
    assert _snapshot(out) == before  # old files untouched, no staging leftovers
    assert sorted(p.name for p in out.iterdir()) == ["figures", REPORT]
    assert "failed" in capsys.readouterr().err


def test_failure_while_swapping_rolls_back(old_report, drawn_before, monkeypatch):
    out, before = old_report
    real_replace = report_cli.os.replace

    def fail_replace(src, dst):
        if Path(dst).name == REPORT:
            raise OSError("disk full")
        return real_replace(src, dst)

    # Figures already swapped in when the Markdown's rename fails: both must roll back.
    monkeypatch.setattr(report_cli.os, "replace", fail_replace)
    with pytest.raises(UsageError, match="cannot write the report into .*disk full"):
        report_cli.main(["--no-verify", "--out", str(out)])
    assert _snapshot(out) == before
    assert sorted(p.name for p in out.iterdir()) == ["figures", REPORT]


def test_a_file_in_figures_the_report_does_not_write_is_kept_and_refused(old_report):
    # issue 32: the report replaces figures/ as a whole, and deleted such a file (exit 0);
    # the tool cannot tell a stale figure from the user's own, so it refuses before any work
    out, before = old_report
    (out / "figures" / "stale.png").write_bytes(b"old")
    with pytest.raises(UsageError, match="figures/ holds 'stale.png', which the report does "
                                         "not write"):
        report_cli.main(["--no-verify", "--out", str(out)])
    assert (out / "figures" / "stale.png").read_bytes() == b"old"
    assert _snapshot(out) == {**before, **{k: v for k, v in _snapshot(out).items()
                                           if k.endswith("stale.png")}}
