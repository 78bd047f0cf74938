"""Shape symbols and the one algebra of closed forms.

A record's shape is a tuple of symbol names; evaluating it against a config gives ints.
An `Expr` is a sum of monomials in those symbols with exact rational coefficients: the
same object is a memory formula written in model sizes (``4·B·T·d_model + 2·B·h·T²``)
and, once the sizes are filled in (`partial`), a closed form in the workload variables
B and T (``307,200·B·T² + 4,092,982,400·B·T``).
"""
from __future__ import annotations

from collections import Counter
from fractions import Fraction

SYMBOLS: dict[str, str] = {
    "B": "batch size (model code: batch)",
    "T": "sequence length analysed (model code: seq, queries, keys)",
    "P": "causal query-key pairs a causal kernel needs, T·(T+1)/2",
    "t": "decode position: the token attends to t keys",
    "L": "num_layers",
    "V": "vocab_size (model code: vocab)",
    "d_model": "model width",
    "d_ff": "MLP inner width",
    "h": "num_heads, query heads (model code: heads)",
    "h_kv": "num_kv_heads, key/value heads (h_kv = h: multi-head; 1: multi-query)",
    "g": "query heads per key/value head, h/h_kv",
    "d_k": "head dimension; d_v = d_k",
    "d_k/2": "RoPE rotation pairs per head",
    "d_kG": "global_head_dim: a global layer's head dimension (Gemma 4)",
    "d_kG/2": "RoPE rotation pairs per global head",
    "h_kvG": "global_kv_heads: a global layer's key/value heads (Gemma 4)",
    "g_G": "query heads per global key/value head, h/h_kvG",
    "T_max": "RoPE table length the model is built with, max(T, context_length)",
    "T_pos": "learned position table length (context_length)",
    "W": "sliding_window: a local layer's query attends its last W keys (itself included)",
    "P_W": "query-key pairs a causal sliding window keeps, Σᵢ min(i+1, W) = W·T − W(W−1)/2 for T ≥ W",
    "C_a": "attention_chunk: a chunked layer's query attends the keys of its own chunk of C_a tokens",
    "P_C": "query-key pairs causal chunks keep, Σᵢ ((i mod C_a) + 1) = (C_a+1)·T/2 + r(r−C_a)/2, r = T mod C_a",
    "E": "num_experts, routed experts per MoE layer",
    "k": "experts_per_token (top-k)",
    "d_e": "moe_d_ff, each expert's inner width",
    "d_s": "the shared experts' inner width, num_shared_experts·d_e (or shared_d_ff)",
    "d_l": "moe_latent_size: the routed experts' input and output width (Nemotron-H)",
    "G": "router_groups (DeepSeek's n_group)",
    "E/G": "experts per router group",
    "2": "the two best scores that rank a router group",
    "1": "the one output of the shared experts' gate (Qwen2-MoE)",
    "k_G": "router_topk_groups, groups kept before top-k",
    "C": "expert capacity in rows, ⌈c·B·T·k/E⌉ (capacity factor c)",
    "E·C+1": "dispatch buffer rows: E experts × C, and one trash row for dropped slots",
    "d_rot": "rotary_dim: the dims of each head RoPE rotates (partial rotary)",
    "d_rot/2": "RoPE rotation pairs of the rotary part",
    "d_pass": "d_k − rotary_dim: the dims of each head passed through without RoPE",
    "r": "LoRA rank (PEFT's r): lora_A is r × d_in, lora_B d_out × r",
    "r_q": "q_lora_rank (latent attention's query latent)",
    "r_kv": "kv_lora_rank (latent attention's key/value latent)",
    "d_nope": "qk_nope_head_dim (the part of a head's query/key without RoPE)",
    "d_rope": "qk_rope_head_dim (the RoPE part; one key shared by all heads)",
    "d_rope/2": "RoPE rotation pairs of the RoPE part",
    "d_v": "v_head_dim (latent attention's value head dimension)",
    "d_kv_a": "kv_lora_rank + qk_rope_head_dim: kv_a_proj's width, the cache per token",
    "d_kv_b": "qk_nope_head_dim + v_head_dim: kv_b_proj's width per head",
    "h_I": "index_heads: the sparse-attention indexer's heads (DeepSeek-V3.2)",
    "d_I": "index_head_dim: the indexer's head dimension (one key per token)",
    "d_I_pass": "index_head_dim − qk_rope_head_dim: the indexer dims without RoPE",
    "k_I": "index_topk: the keys the indexer keeps per query",
    "P_K": "query-key pairs the indexer keeps, Σᵢ min(i+1, k_I) = k_I·T − k_I(k_I−1)/2 for T ≥ k_I",
    # the recurrent layers (issue 31)
    "K": "conv_kernel: the depthwise causal convolution's width",
    "T+K-1": "F.conv1d's output positions with padding K − 1 (transformers' causal conv fallback)",
    "3": ("three tensors side by side: the short convolution's in_proj outputs (B, C, x); "
          "GPT-2's c_attn output (Q, K, V)"),
    "1": "a size-one dim (broadcast)",
    "h_lk": "linear_key_heads: a gated DeltaNet layer's query/key heads",
    "h_lv": "linear_value_heads: its value heads (and recurrent states)",
    "d_lk": "linear_key_head_dim",
    "d_lv": "linear_value_head_dim",
    "d_conv": "the gated DeltaNet conv's channels, 2·h_lk·d_lk + h_lv·d_lv (Q, K, V)",
    "d_qkvz": "in_proj_qkvz's width, 2·h_lk·d_lk + 2·h_lv·d_lv",
    "C_l": "linear_chunk: the chunked delta rule's chunk",
    "N_c": "chunks, ⌈T/C_l⌉ (the sequence padded to N_c·C_l)",
    "N_c-1": "chunks less one: the state updates of a forward without a cache",
    "[N_c>1]": "1 with two chunks or more, else 0: what only the scan's later chunks save",
    "[C_l∣T,B·N_c>1]": ("1 when C_l divides T (no padding) and B > 1 or N_c > 1, else 0: "
                        "transformers' fp32 delta rule, whose intra-chunk torch.matmul copies "
                        "Q, K and K·β to fold (B, h_lv, N_c)"),
    "[C_l∣T,B>1]": ("1 when C_l divides T and B > 1, else 0: transformers' fp32 delta rule's "
                    "scan, whose torch.matmul copies each chunk's decayed Q and K slice"),
    "[N_c>1,¬(C_l∣T,B>1)]": ("[N_c>1] less [C_l∣T,B>1]'s case: the scan's matmuls read the "
                             "whole decayed Q and K in place"),
    "[T≥W]": "1 once T reaches the window W, else 0: transformers' sliding-layer mask and repeat_kv",
    "[T≥C_a]": "1 once T reaches the chunk C_a, else 0: transformers' chunked-layer mask and repeat_kv",
    "[T<C_a]": "1 below the chunk C_a, else 0: SDPA reads the K/V heads as they are (enable_gqa)",
    "(T+1)": "keys and the head's sink: a row of gpt-oss's eager softmax (transformers)",
    "[T<W]": "1 below the window W, else 0: SDPA reads the K/V heads as they are (enable_gqa)",
    "[N_m>1]": "1 with two SSD chunks or more, else 0",
    "[N_m=1]": "1 with one SSD chunk, else 0",
    "P_L": "a chunk's strictly lower pairs, C_l(C_l − 1)/2 (a unit triangular solve's multiply-adds per column)",
    "h_m": "mamba_heads: a Mamba-2 layer's heads",
    "p_m": "mamba_head_dim",
    "n_s": "ssm_state: the state per head and channel",
    "G_m": "mamba_groups: groups sharing B and C",
    "p_g": "a group's width in the gated norm, h_m·p_m/G_m",
    "d_xbc": "the Mamba-2 conv's channels, h_m·p_m + 2·G_m·n_s (x, B, C)",
    "d_zxbcdt": "Mamba-2 in_proj's width, 2·h_m·p_m + 2·G_m·n_s + h_m",
    "C_m": "mamba_chunk: the SSD scan's chunk",
    "N_m": "the SSD scan's chunks, ⌈T/C_m⌉",
    "N_m+1": "chunk states with the initial one (exchanged by an (N_m+1)² decay matrix)",
    "d_i": "mamba_inner: a Mamba-1 layer's inner width (its channels, each with a state)",
    "2d_i": "Mamba-1 in_proj's width, 2·d_i (x and the gate z)",
    "r_dt": "mamba_dt_rank: the rank of Mamba-1's dt (x_proj's first part, dt_proj's input)",
    "d_rbc": "Mamba-1 x_proj's width, r_dt + 2·n_s (dt, B, C)",
    # the loss recipes (planning/loss_memory.py, issue 44)
    "T_c": "--loss chunked: tokens of the largest chunk, ⌈T/n⌉ (torch.chunk)",
    "[B>1]": "1 when B > 1 (and more than one chunk), else 0: a chunk of the labels is copied",
    "C_fl": "--loss fused-linear: Liger's chunk rows, min(next_power_of_2(⌈B·T/⌈V/d_model⌉⌉), B·T)",
    # Gemma 4's per-layer embeddings and double-wide MLP (accounting/architecture/derived.py)
    "d_ple": "per_layer_input: each block's per-layer embedding width (hidden_size_per_layer_input)",
    "L·d_ple": "the per-layer embeddings of all blocks packed, num_layers·per_layer_input",
    "V_ple": "per_layer_vocab: the per-layer embedding table's rows",
    "2d_ff": "a KV-sharing layer's MLP width with double_wide_mlp, 2·d_ff",
    "[block 0's input]": "0: a top-level tensor that is the first block's input, counted "
                         "there (Gemma 4's per-layer projection saves the scaled embeddings)",
}
SAVED_AS_BLOCK_INPUT = "[block 0's input]"

# Order in which symbols are written in a monomial: workload first, then model sizes;
# symbols not listed (t, T_max, T_pos) come last, in alphabetical order.
_ORDER = {s: i for i, s in enumerate(("B", "h_kv", "h_kvG", "g", "g_G", "h", "T", "P", "P_W", "W", "P_C", "C_a", "C", "E·C+1",
                                      "L", "E", "k", "G", "E/G", "k_G", "d_model", "d_k", "d_k/2", "d_kG", "d_kG/2",
                                      "d_rot", "d_rot/2", "d_pass",
                                      "r_q", "r_kv", "d_kv_a", "d_kv_b", "d_nope", "d_rope",
                                      "d_rope/2", "d_v", "h_I", "d_I", "d_I_pass", "k_I", "P_K",
                                      "d_ff", "d_e", "d_s", "d_l", "V"))}
_SUPERSCRIPT = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def product(factors: tuple[str, ...], values: dict[str, int]) -> int:
    out = 1
    for f in factors:
        out *= values[f]
    return out


def _coefficient_text(c: int | Fraction) -> str:
    if isinstance(c, Fraction) and c.denominator != 1:
        return f"({c.numerator:,}/{c.denominator:,})"
    return f"{int(c):,}"


def monomial(coefficient: int | Fraction, factors: tuple[str, ...]) -> str:
    """(2, ('B','T','d_model','d_model')) -> '2·B·T·d_model²'."""
    powers = Counter(factors)
    parts = [] if coefficient == 1 and powers else [_coefficient_text(coefficient)]
    for s in sorted(powers, key=lambda s: (_ORDER.get(s, len(_ORDER)), s)):
        parts.append(s + (str(powers[s]).translate(_SUPERSCRIPT) if powers[s] > 1 else ""))
    return "·".join(parts)


def dims(factors: tuple[str, ...]) -> str:
    """('B','T') -> 'B·T' (one flattened dimension)."""
    return "·".join(factors) if factors else "1"


def _exact(c) -> int | Fraction:
    """Coefficients are ints where integral, Fractions otherwise."""
    c = Fraction(c)
    return c.numerator if c.denominator == 1 else c


class Expr:
    """Σ coefficient·Π factors, factors being symbol names; exact rational coefficients."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict[tuple[str, ...], int | Fraction] | None = None):
        merged: dict[tuple[str, ...], Fraction] = {}
        for factors, c in (terms or {}).items():
            key = tuple(sorted(factors))
            merged[key] = merged.get(key, 0) + Fraction(c)
        self.terms = {k: _exact(v) for k, v in merged.items() if v}

    @classmethod
    def of(cls, coefficient: int | Fraction, factors: tuple[str, ...] = ()) -> Expr:
        return cls({tuple(factors): coefficient})

    # ---- arithmetic -------------------------------------------------------------------
    def __add__(self, other: Expr) -> Expr:
        terms = dict(self.terms)
        for k, v in other.terms.items():
            terms[k] = terms.get(k, 0) + v
        return Expr(terms)

    def __neg__(self) -> Expr:
        return self.scale(-1)

    def __sub__(self, other: Expr) -> Expr:
        return self + (-other)

    def __mul__(self, other: Expr) -> Expr:
        terms: dict[tuple[str, ...], Fraction] = {}
        for f1, c1 in self.terms.items():
            for f2, c2 in other.terms.items():
                k = tuple(sorted(f1 + f2))
                terms[k] = terms.get(k, 0) + Fraction(c1) * c2
        return Expr(terms)

    def scale(self, k: int | Fraction) -> Expr:
        return Expr({f: c * k for f, c in self.terms.items()})

    def times(self, *factors: str) -> Expr:
        """Every term multiplied by the given symbols (e.g. times("L") for all layers)."""
        return Expr({f + factors: c for f, c in self.terms.items()})

    # ---- rewriting ----------------------------------------------------------------------
    def substitute(self, symbol: str, replacement: Expr | tuple[str, ...]) -> Expr:
        """Each occurrence of `symbol` replaced by an Expr, or by a product of symbols."""
        if not isinstance(replacement, Expr):
            replacement = Expr.of(1, tuple(replacement))
        out = Expr()
        for f, c in self.terms.items():
            k = f.count(symbol)
            term = Expr.of(c, tuple(s for s in f if s != symbol))
            for _ in range(k):
                term = term * replacement
            out = out + term
        return out

    def split(self, symbol: str) -> tuple[Expr, Expr]:
        """(terms containing `symbol`, terms without it)."""
        return (Expr({f: c for f, c in self.terms.items() if symbol in f}),
                Expr({f: c for f, c in self.terms.items() if symbol not in f}))

    def partial(self, values: dict[str, int], keep: tuple[str, ...] = ("B", "T")) -> Expr:
        """Every symbol not in `keep` replaced by its value: a closed form in B and T.
        P (the causal pairs) is written out as T(T+1)/2 when T is kept."""
        e = self
        if "T" in keep and "P" not in keep:
            e = e.substitute("P", Expr({("T", "T"): Fraction(1, 2), ("T",): Fraction(1, 2)}))
        if "T" in keep and "P_W" in e.symbols():  # the branch the analysed T is on
            e = e.substitute("P_W", window_pairs_expr(values["W"], values["T"]))
        if "T" in keep and "P_K" in e.symbols():  # the indexer's top-k: a window's count
            e = e.substitute("P_K", window_pairs_expr(values["k_I"], values["T"]))
        if "T" in keep and "P_C" in e.symbols():  # the branch (T mod C_a) the analysed T is on
            e = e.substitute("P_C", chunk_pairs_expr(values["C_a"], values["T"]))
        if "T" in keep and {"N_c", "N_c-1", "[N_c>1]"} & e.symbols():  # ⌈T/C_l⌉ on T's branch mod C_l
            chunks = chunks_expr(values["C_l"], values["T"])
            e = e.substitute("N_c", chunks).substitute("N_c-1", chunks + Expr({(): -1}))
            e = e.substitute("[N_c>1]", Expr({(): values["[N_c>1]"]}))  # constant on the branch
        for flag in DELTA_FLAGS:  # constant on T's branch mod C_l (and B's: 1 or more)
            if {"T", "B"} & set(keep) and flag in e.symbols():
                e = e.substitute(flag, Expr({(): values[flag]}))
        if "T" in keep and "(T+1)" in e.symbols():  # gpt-oss's sink column
            e = e.substitute("(T+1)", Expr({("T",): 1, (): 1}))
        if "T" in keep and "T+K-1" in e.symbols():  # F.conv1d's padded output (hf_mamba.py)
            e = e.substitute("T+K-1", Expr({("T",): 1, (): values["K"] - 1}))
        for flag in ("[T≥W]", "[T<W]", "[T≥C_a]", "[T<C_a]"):  # constant on T's branch
            if "T" in keep and flag in e.symbols():
                e = e.substitute(flag, Expr({(): values[flag]}))
        if "T" in keep and {"N_m", "N_m+1", "[N_m>1]", "[N_m=1]"} & e.symbols():  # Mamba-2's
            chunks = chunks_expr(values["C_m"], values["T"])
            e = e.substitute("N_m", chunks).substitute("N_m+1", chunks + Expr({(): 1}))
            for flag in ("[N_m>1]", "[N_m=1]"):  # constant on the branch
                e = e.substitute(flag, Expr({(): values[flag]}))
        if "T" in keep:  # an expert's capacity rows stay symbolic: C = ⌈c·B·T·k/E⌉
            keep = tuple(keep) + ("C", "E·C+1")
        out: dict[tuple[str, ...], Fraction] = {}
        for f, c in e.terms.items():
            coeff = Fraction(c)
            kept = []
            for s in f:
                if s in keep:
                    kept.append(s)
                else:
                    coeff *= values[s]
            k = tuple(sorted(kept))
            out[k] = out.get(k, 0) + coeff
        return Expr(out)

    # ---- values -------------------------------------------------------------------------
    def value(self, values: dict[str, int | Fraction]) -> Fraction:
        """Exact value at a point (the point may be fractional, e.g. a crossover T)."""
        total = Fraction(0)
        for f, c in self.terms.items():
            term = Fraction(c)
            for s in f:
                term *= values[s]
            total += term
        return total

    def evaluate(self, values: dict[str, int]) -> int:
        """Exact integer value; refuses a non-integer (it would mean a wrong formula)."""
        if all(isinstance(c, int) for c in self.terms.values()):
            return sum(c * product(f, values) for f, c in self.terms.items())
        v = self.value(values)
        if v.denominator != 1:
            raise ArithmeticError(f"{self} is not integral at {values}")
        return v.numerator

    def at(self, **values: int | Fraction) -> int | Fraction:
        """The exact value at B=…, T=… (an int where integral): `poly.at(B=1, T=1024)`."""
        return _exact(self.value(values))

    def coefficient(self, **powers: int) -> int | Fraction:
        """The coefficient of a monomial given by its powers, e.g. coefficient(B=1, T=2)."""
        key = tuple(sorted(s for s, p in powers.items() for _ in range(p)))
        return self.terms.get(key, 0)

    def symbols(self) -> set[str]:
        return {s for f in self.terms for s in f}

    # ---- comparison and printing ------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        return isinstance(other, Expr) and self.terms == other.terms

    def __hash__(self) -> int:
        return hash(frozenset(self.terms.items()))

    def __bool__(self) -> bool:
        return bool(self.terms)

    def __repr__(self) -> str:
        return f"Expr({self})"

    def __str__(self) -> str:
        if not self.terms:
            return "0"

        def key(item):
            f, _ = item
            return (-f.count("B"), -(f.count("T") + f.count("t") + 2 * f.count("P")), -len(f),
                    monomial(1, f))
        text = " + ".join(monomial(c, f) for f, c in sorted(self.terms.items(), key=key))
        return text.replace("+ -", "− ")


def fold_layers(e: Expr, kinds: tuple[str, ...]) -> Expr:
    """For display: a term that appears alike in every kind of block (L_dense and L_moe,
    say, with the same coefficient) written once with L = their sum; the value is unchanged."""
    if len(kinds) < 2:
        return e
    rest: dict[tuple[str, ...], dict[str, int | Fraction]] = {}
    for f, c in e.terms.items():
        hits = [s for s in f if s in kinds]
        if len(hits) == 1:
            others = list(f)
            others.remove(hits[0])
            rest.setdefault(tuple(others), {})[hits[0]] = c
    out = dict(e.terms)
    for others, by in rest.items():
        if set(by) == set(kinds) and len(set(by.values())) == 1:
            for k in kinds:
                del out[tuple(sorted(others + (k,)))]
            out[tuple(sorted(others + ("L",)))] = next(iter(by.values()))
    return Expr(out)


def window_pairs_expr(window: int, seq: int) -> Expr:
    """P_W in T on the branch holding `seq`: W·T − W(W−1)/2 for T ≥ W, else T(T+1)/2."""
    if seq >= window:
        return Expr({("T",): window, (): -Fraction(window * (window - 1), 2)})
    return Expr({("T", "T"): Fraction(1, 2), ("T",): Fraction(1, 2)})


def chunk_pairs_expr(chunk: int, seq: int) -> Expr:
    """P_C in T on the branch holding `seq`: T(T+1)/2 for T ≤ C_a; beyond, with r = T mod
    C_a fixed, ⌊T/C_a⌋ whole chunks of C_a(C_a+1)/2 pairs and r(r+1)/2 in the last, which is
    (C_a+1)·T/2 + r(r−C_a)/2."""
    if seq <= chunk:
        return Expr({("T", "T"): Fraction(1, 2), ("T",): Fraction(1, 2)})
    r = seq % chunk
    return Expr({("T",): Fraction(chunk + 1, 2), (): Fraction(r * (r - chunk), 2)})


# transformers' fp32 delta rule with T a multiple of C_l (builder/delta.py): what its
# torch.matmul copies depends on B = 1 or not as well as on T's branch
FOLD, SLICE, VIEWED = "[C_l∣T,B·N_c>1]", "[C_l∣T,B>1]", "[N_c>1,¬(C_l∣T,B>1)]"
DELTA_FLAGS = (FOLD, SLICE, VIEWED)


def chunks_expr(chunk: int, seq: int) -> Expr:
    """N_c = ⌈T/C_l⌉ in T on the branch holding `seq`: (T + p)/C_l with p = (C_l − T mod
    C_l) mod C_l, the padding (linear in T)."""
    pad = (chunk - seq % chunk) % chunk
    return Expr({("T",): Fraction(1, chunk), (): Fraction(pad, chunk)})


def validity(e: Expr, values: dict[str, int]) -> str:
    """The condition a closed form in B and T holds under: '' or e.g. 'T ≥ W = 4,096'."""
    parts = []
    if "P_W" in e.symbols():
        w = values["W"]
        parts.append(f"T ≥ W = {w:,}" if values["T"] >= w else f"T ≤ W = {w:,}")
    if {"[T≥W]", "[T<W]"} & e.symbols() and "P_W" not in e.symbols():
        w = values["W"]
        parts.append(f"T ≥ W = {w:,}" if values["T"] >= w else f"T < W = {w:,}")
    if {"[T≥C_a]", "[T<C_a]"} & e.symbols() and "P_C" not in e.symbols():
        c = values["C_a"]
        parts.append(f"T ≥ C_a = {c:,}" if values["T"] >= c else f"T < C_a = {c:,}")
    if "P_K" in e.symbols():
        k = values["k_I"]
        parts.append(f"T ≥ k_I = {k:,}" if values["T"] >= k else f"T ≤ k_I = {k:,}")
    if "P_C" in e.symbols():
        c, seq = values["C_a"], values["T"]
        parts.append(f"T ≤ C_a = {c:,}" if seq <= c else f"T ≥ C_a = {c:,}, T mod C_a = {seq % c:,}")
    if {"N_c", "N_c-1", "[N_c>1]"} & e.symbols():
        c, seq = values["C_l"], values["T"]
        parts.append(f"T mod C_l = {seq % c:,} (C_l = {c:,}: chunks of the delta rule)")
    if "[N_c>1]" in e.symbols():
        c = values["C_l"]
        parts.append(f"T > C_l = {c:,}" if values["T"] > c else f"T ≤ C_l = {c:,}")
    if set(DELTA_FLAGS) & e.symbols():
        parts.append("B = 1" if values["B"] == 1 else "B > 1")
    if {"N_m", "N_m+1", "[N_m>1]", "[N_m=1]"} & e.symbols():
        c, seq = values["C_m"], values["T"]
        parts.append(f"T mod C_m = {seq % c:,} (C_m = {c:,}: chunks of the SSD scan)")
    if {"[N_m>1]", "[N_m=1]"} & e.symbols():
        c = values["C_m"]
        parts.append(f"T > C_m = {c:,}" if values["T"] > c else f"T ≤ C_m = {c:,}")
    if "C" in e.symbols() or "E·C+1" in e.symbols():
        parts.append("C = ⌈c·B·T·k/E⌉ (expert capacity)")
    return "; ".join(parts)


def grouped(parts: list[tuple[int, Expr]], prefix: str = "") -> str:
    """'4·(…) + 8·B·T' from (bytes per element, element count) pairs; `prefix` (e.g. 'L·')
    multiplies each group."""
    out = []
    for size, e in parts:
        if not e:
            continue
        bare = len(e.terms) == 1 and set(e.terms.values()) == {1}  # one monomial, no coefficient
        body = f"{prefix}{e}" if bare else f"{prefix}({e})" if prefix or size != 1 else str(e)
        out.append(body if size == 1 else f"{size}·{body}")
    return " + ".join(out) if out else "0"
