"""The text output's matmul table, component table and answer block, parsed back and
checked against hand algebra (issue 23: these columns had only README snapshots, which
`--update` rewrites).

Each model's sizes are its shipped config.json's (accounting/hf_configs/), written out
below; every FLOP count is the 2mnp rule per matmul (A m×n @ B n×p: 2·m·n·p FLOPs, batch
dims multiplied in), the attention core's useful count over the causal query-key pairs
P = Σᵢ min(i + 1, W) (T(T+1)/2 without a window), summed here by brute force. The shares
are the exact fractions rounded to 0.01% by the largest-remainder rule the tables state
("rounded so that each column adds to 100.00%"), implemented here on its own.
"""
import re
from dataclasses import dataclass
from fractions import Fraction

import pytest

from cli_run import run


@dataclass(frozen=True)
class Sizes:
    name: str
    V: int
    L: int
    d: int
    h: int
    kv: int
    dk: int
    f: int
    gated: bool
    W: int | None  # sliding window (every layer)


# accounting/hf_configs/<id>.json: vocab_size, num_hidden_layers, hidden_size,
# num_attention_heads, num_key_value_heads, head_dim (or hidden/heads), intermediate_size
MISTRAL = Sizes("mistralai/Mistral-7B-v0.1", 32000, 32, 4096, 32, 8, 128, 14336, True, 4096)
GPT2 = Sizes("openai-community/gpt2", 50257, 12, 768, 12, 12, 64, 3072, False, None)
LLAMA = Sizes("meta-llama/Llama-3.2-1B", 128256, 16, 2048, 32, 8, 64, 8192, True, None)

CASES = [(MISTRAL, 1024, 1), (MISTRAL, 5000, 2), (GPT2, 512, 1), (LLAMA, 300, 3)]
IDS = [f"{s.name.split('/')[1]}-T{T}-B{B}" for s, T, B in CASES]


def pairs(T: int, W: int | None) -> int:
    """Causal query-key pairs: query i sees keys max(0, i − W + 1) .. i."""
    return sum(min(i + 1, W) if W else i + 1 for i in range(T))


def matmul_rows(s: Sizes, T: int, B: int) -> dict[str, tuple[str, int, int]]:
    """name -> (count, FLOPs over all layers, useful FLOPs over all layers)."""
    L, tok = s.L, B * T
    every = f"L = {L}"
    core = 2 * B * s.h * T * T * s.dk  # [B·h, T, d_k] @ [B·h, d_k, T], and scores @ V
    core_useful = 2 * B * s.h * pairs(T, s.W) * s.dk
    rows = {"Q projection": 2 * tok * s.d * s.h * s.dk,
            "K projection": 2 * tok * s.d * s.kv * s.dk,
            "V projection": 2 * tok * s.d * s.kv * s.dk,
            "output projection": 2 * tok * s.h * s.dk * s.d}
    out = {k: (every, L * v, L * v) for k, v in rows.items()}
    out["QKᵀ scores"] = out["scores·V"] = (every, L * core, L * core_useful)
    mlp = ("SwiGLU W1", "SwiGLU W3", "SwiGLU W2") if s.gated else ("MLP W1", "MLP W2")
    for m in mlp:
        out[m] = (every, L * 2 * tok * s.d * s.f, L * 2 * tok * s.d * s.f)
    out["LM head"] = ("1", 2 * tok * s.d * s.V, 2 * tok * s.d * s.V)
    return out


def components(s: Sizes, T: int, B: int) -> dict[str, dict[str, int]]:
    """counting -> component -> FLOPs, summed from the rows above by hand."""
    rows = matmul_rows(s, T, B)
    groups = {"attention projections": ("Q projection", "K projection", "V projection",
                                        "output projection"),
              "attention core": ("QKᵀ scores", "scores·V"),
              "feed-forward": tuple(k for k in rows if "W" in k),
              "LM head": ("LM head",)}
    return {counting: {c: sum(rows[k][i] for k in names) for c, names in groups.items()}
            for counting, i in (("executed", 1), ("useful", 2))}


def largest_remainder(values: dict[str, int]) -> dict[str, str]:
    """Shares in hundredths of a percent, floors first, the missing units to the largest
    remainders (ties: the earlier row)."""
    total = sum(values.values())
    exact = {k: Fraction(v * 10_000, total) for k, v in values.items()}
    units = {k: int(x) for k, x in exact.items()}
    for k in sorted(exact, key=lambda k: -(exact[k] - units[k]))[:10_000 - sum(units.values())]:
        units[k] += 1
    return {k: f"{u // 100}.{u % 100:02d}%" for k, u in units.items()}


# ---- reading the text output -----------------------------------------------------------

def text_table(out: str, title: str) -> list[list[str]]:
    """The rows (cells, stripped) of the table titled `title`, sliced by its dashed rule,
    up to its `total` row (the notes follow it)."""
    lines = out.splitlines()
    i = lines.index(title)
    assert set(lines[i + 1]) == {"="}, title
    spans = [m.span() for m in re.finditer(r"-+", lines[i + 3])]
    rows = []
    for line in lines[i + 4:]:
        rows.append([line[a:b].strip() for a, b in spans])
        if rows[-1][0] == "total":
            return rows
    raise AssertionError(f"{title}: no total row")


def integer(cell: str) -> int:
    assert re.fullmatch(r"\d{1,3}(,\d{3})*", cell), cell
    return int(cell.replace(",", ""))


def answer_largest(out: str) -> tuple[str, str, str]:
    m = re.search(r"^largest: +(.+), (\d+\.\d\d%) of the matmul FLOPs \((\w+) attention count\)$",
                  out, re.M)
    assert m, out[:400]
    return m.group(1), m.group(2), m.group(3)


def cli(capsys, s: Sizes, T: int, B: int, *extra: str) -> str:
    code, out, err = run(capsys, s.name, "--ctx", str(T), "--batch", str(B), "--no-verify", *extra)
    assert code == 0, err
    return out


# ---- the tests -----------------------------------------------------------------------------

@pytest.mark.parametrize("s,T,B", CASES, ids=IDS)
def test_matmul_table_rows_and_useful_column(capsys, s, T, B):
    rows = text_table(cli(capsys, s, T, B), "Matmuls (forward pass)")
    expected = matmul_rows(s, T, B)
    body = {r[0]: r for r in rows if r[0] != "total"}
    assert set(body) == set(expected) and len(body) == len(rows) - 1  # each matmul once
    for name, (count, flops, useful) in expected.items():
        r = body[name]
        assert (r[2], integer(r[5]), integer(r[6])) == (count, flops, useful), name
    total = next(r for r in rows if r[0] == "total")
    assert integer(total[5]) == sum(v[1] for v in expected.values())
    assert integer(total[6]) == sum(v[2] for v in expected.values())


@pytest.mark.parametrize("s,T,B", CASES, ids=IDS)
def test_component_table_flops_and_shares(capsys, s, T, B):
    rows = text_table(cli(capsys, s, T, B), "Matmul FLOPs by component (forward pass)")
    comp = components(s, T, B)
    shares = {k: largest_remainder(v) for k, v in comp.items()}
    body = {r[0]: r for r in rows}
    for c in comp["executed"]:
        r = body[c]
        assert integer(r[1]) == comp["executed"][c] and integer(r[4]) == comp["useful"][c], c
        assert (r[3], r[5]) == (shares["executed"][c], shares["useful"][c]), c
        # each shown share is its exact share rounded down or up to 0.01%
        for cell, counting in ((r[3], "executed"), (r[5], "useful")):
            exact = Fraction(comp[counting][c] * 100, sum(comp[counting].values()))
            assert abs(Fraction(cell[:-1]) - exact) < Fraction(1, 100), (c, counting)
    for col in (3, 5):  # each column adds to 100.00%
        assert sum(Fraction(body[c][col][:-1]) for c in comp["executed"]) == 100
    assert (integer(body["total"][1]), integer(body["total"][4])) == \
        (sum(comp["executed"].values()), sum(comp["useful"].values()))


@pytest.mark.parametrize("counting", ["executed", "useful"])
@pytest.mark.parametrize("s,T,B", CASES, ids=IDS)
def test_answer_share_is_the_component_tables(capsys, s, T, B, counting):
    out = cli(capsys, s, T, B, "--count", counting)
    comp = components(s, T, B)[counting]
    top = max(comp, key=comp.get)
    name, share, said = answer_largest(out)
    assert (name, said) == (top, counting)
    assert share == largest_remainder(comp)[top]
    table = {r[0]: r for r in text_table(out, "Matmul FLOPs by component (forward pass)")}
    assert share == table[top][3 if counting == "executed" else 5]


def test_mistral_7b_at_1024_prints_one_share(capsys):
    """Issue 23's example: the feed-forward's exact share is 76.3962%; plain rounding would
    show 76.40%, the table's largest-remainder column 76.39% (the extra hundredth goes to
    a larger remainder): the answer block must print the table's 76.39%."""
    comp = components(MISTRAL, 1024, 1)["executed"]
    exact = Fraction(comp["feed-forward"] * 100, sum(comp.values()))
    assert round(exact, 2) == Fraction("76.40") and largest_remainder(comp)["feed-forward"] == "76.39%"
    out = cli(capsys, MISTRAL, 1024, 1)
    assert answer_largest(out) == ("feed-forward", "76.39%", "executed")
    table = {r[0]: r for r in text_table(out, "Matmul FLOPs by component (forward pass)")}
    assert table["feed-forward"][3] == "76.39%"
