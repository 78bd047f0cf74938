"""The transformers cross-check's notes on mixtures of experts (crosscheck/hf_compare.py): the
experts' CPU check as checks and a note (crosscheck/hf_experts.py runs it), how each
family's router runs, Llama 4's experts. Text only: no counting here."""
from __future__ import annotations

from accounting.crosscheck.result import Check
from accounting.units import grouped


def experts_checks(x) -> list[Check]:
    """transformers' expert implementations at a shrunk size (hf_experts.py), each against
    the shrunk config's ledger: eager and batched_mm equal to it whatever the routing;
    grouped_mm short of it by exactly the experts' matmuls, which FlopCounterMode cannot see."""
    if isinstance(x, str):
        return [Check("transformers' expert implementations run on CPU at a shrunk size", x,
                      False)]
    fwd, bwd = x.ledger
    ef, eb = x.experts
    out = []
    for r in x.runs:
        got = f"forward {grouped(r.forward)}, backward {grouped(r.backward)}"
        if r.implementation == "grouped_mm":
            out.append(Check(
                "shrunk, CPU: transformers' default experts (grouped_mm): FlopCounterMode counts "
                "the ledger's matmul FLOPs less exactly the routed experts' (it has no formula "
                "for aten._grouped_mm)",
                f"{got}; ledger {grouped(fwd)} and {grouped(bwd)}, experts {grouped(ef)} and "
                f"{grouped(eb)}", (r.forward, r.backward) == (fwd - ef, bwd - eb)))
        else:
            what = ("eager experts (its loop over the experts that got tokens)"
                    if r.implementation == "eager" else
                    "batched_mm experts (as in the meta-device count)")
            out.append(Check(f"shrunk, CPU: transformers' {what}, {r.routing}: matmul FLOPs = "
                             f"the shrunk config's ledger", f"{got}; ledger {grouped(fwd)} and "
                             f"{grouped(bwd)}", (r.forward, r.backward) == (fwd, bwd)))
    return out


def experts_note(x) -> str:
    if isinstance(x, str):
        return f"transformers' other expert implementations could not run on CPU: {x}."
    return (f"Shrunk (the consistency table's \"shrunk, CPU\" rows): meta cannot run "
            f"transformers' eager or grouped_mm experts, so the same model_type, shrunk to "
            f"{x.shrunk}, was built on the CPU in float32 with each implementation and run "
            f"forward and backward (T = {x.seq}, B = {x.batch}, random weights and tokens) "
            f"under FlopCounterMode, and compared with that shrunk config's ledger: dropless, "
            f"the same expert rows whatever the routing ({x.seconds:.1f} s).")


def router_note(c) -> str:
    """How transformers' router runs, per routing the spec has."""
    if c.router_topk_first:  # gpt-oss (a bias: addmm, its add non-matmul), Granite 4.0-H
        return ("Router (GptOssTopKRouter, GraniteMoeHybridTopKRouter): F.linear"
                + (" with its bias (addmm)" if c.router_linear_bias else "") + ", top-k of the "
                "logits, softmax over the k chosen: as the tool's model; the routing ops are "
                "non-matmul FLOPs, compared on the tool's model/ only.")
    name = "mlp.router" if c.router == "sparsemixer" else "router.proj" if c.mlp_beside_moe \
        else "mlp.gate"  # (Phi-3.5-MoE's; Gemma 4's, whose input is normed, × scale, × d^-½)
    if c.router == "sparsemixer":  # its inference form: the max, not Gumbel samples
        router = "sparsemixer: two rounds of max, abs, clamp, −, ÷, masked_fill(−inf), softmax"
    elif c.router == "sigmoid":
        router = ("F.linear in float32, sigmoid, + e_score_correction_bias (a buffer, in "
                  "neither parameter count), the best groups' experts kept by masked_fill(−inf)")
    elif c.router_groups > 1:  # DeepSeek-V2's group_limited_greedy
        router = ("F.linear and softmax in float32, each group's best score (max(dim).values; "
                  "V3's router sums each group's two best), the other groups masked_fill(0), "
                  "top-k of the masked scores, × routed_scaling_factor")
    else:
        router = "softmax in float32"
    return (f"Router ({name}): {router}, top-k: casts and selects, no matmul difference; the "
            "routing ops are non-matmul FLOPs, compared on the tool's model/ only.")


def llama4_moe_notes() -> list[str]:
    """Llama4TextMoe (modeling_llama4.py) as transformers runs it, and why the counts agree."""
    return [
        "Experts (Llama4TextMoe): transformers repeats every token E times "
        "(hidden_states.repeat), scales each copy by its router score (0 for the unchosen: "
        "sigmoid(−inf)), and runs every expert on every token: one bmm per matrix over E·B·T "
        "rows (Llama4TextExperts), then sums the E outputs. That executed count is the "
        "ledger's (E·B·T expert rows, as the tool's model runs them); the dropless useful "
        "count, B·T·k rows, is E/k times smaller and is the useful column. "
        "experts.gate_up_proj holds W1 and W3 (E × d_model × 2·d_e): one matmul where the "
        "ledger has two, the same multiply-adds; compared as their sum.",
        "Router (feed_forward.router, an nn.Linear): topk of the raw scores, then a sigmoid "
        "over all E scores after scattering the top k into −inf (the tool's model takes the "
        "sigmoid of the k chosen only): non-matmul work, compared on the tool's model/ only."]
