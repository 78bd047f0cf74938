"""Speculative decoding at serving time (issue 40): the model's own multi-token-prediction
heads (DeepSeek-V3 §2.2's MTP modules, vLLM's and SGLang's "mtp"/EAGLE-style drafting) or a
separate draft model propose k tokens a step; the target verifies them in one forward pass.

With a per-token acceptance rate α (an input: it depends on the data and the drafter), the
expected tokens a step emits are (Leviathan, Kalman and Matias 2023, "Fast Inference from
Transformers via Speculative Decoding", eq. 1, i.i.d. acceptance):
    E = (1 − α^(k+1)) / (1 − α)          (k + 1 when α = 1)
and a step costs
    verify  = the target's decode step of B sequences with k + 1 query tokens each: every
              linear layer's GEMMs at M = B·(k+1), one decode-attention kernel per layer for
              the B sequences at the step's key length (the KV read, which bounds the kernel,
              is once per sequence whatever its query count), the TP all-reduces of B·(k+1)
              rows: timing/step.py's decode at T = k + 1, the same measured tables as serve's
    draft   = k decode steps of the drafter at batch B: an MTP head is one more decoder block
              of the last layer's kind with the shared LM head (analysis/mtp.py), timed as a
              one-block model of the same config (its W_eh projection, 2·d² a token, left
              out); a draft model is its own config's decode step
    TPOT    = (verify + draft) / E,   tokens/s = B · E / (verify + draft)
Not modelled: the drafter's weights and KV in the pool (one block for an MTP head, the whole
draft model otherwise), rejection sampling's own kernels.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from accounting.runtime.errors import UsageError

MTP = "mtp"


@dataclass(frozen=True)
class Speculation:
    method: str  # "mtp" or the draft model's name
    tokens: int  # k drafted a step
    acceptance: Fraction  # α per drafted token
    verify_seconds: Fraction
    draft_seconds: Fraction  # all k drafter steps

    @property
    def expected_tokens(self) -> Fraction:
        a, k = self.acceptance, self.tokens
        return Fraction(k + 1) if a == 1 else (1 - a ** (k + 1)) / (1 - a)

    @property
    def step_seconds(self) -> Fraction:
        return self.verify_seconds + self.draft_seconds

    @property
    def tpot_seconds(self) -> Fraction:
        return self.step_seconds / self.expected_tokens


def mtp_block(config):
    """One decoder block of the last layer's kind: the config cut to one layer of that kind
    (DeepSeek-V3's MTP module: transformers' MtpModel builds type(layers[-1]))."""
    last = config.num_layers - 1
    over = {"num_layers": 1, "dense_layers": (0,) if last in config.dense_layers else ()}
    if config.layer_types:
        over["layer_types"] = (config.layer_types[last],)
    return config.with_overrides(**over)


def _decode_seconds(config, card, kernel_tables: str, scheme_kind: str, tp: int, batch: int,
                    position: int, kv_dtype: str, queries: int) -> Fraction:
    """The decode step of `batch` sequences with `queries` tokens each, from the measured
    kernels (timing/serve.py's ledger, machine and all-reduce rule) of the engine's tables
    (its record's kernel_tables)."""
    return _decode(config, card, kernel_tables, scheme_kind, tp, batch, position, kv_dtype,
                   queries)[0]


def _decode(config, card, kernel_tables: str, scheme_kind: str, tp: int, batch: int,
            position: int, kv_dtype: str, queries: int) -> tuple[Fraction, Fraction]:
    """(_decode_seconds, the routed-expert GEMMs' seconds in it)."""
    from accounting.serving.dp_attention import EXPERT_OPS
    from accounting.timing import step as S
    from accounting.timing.serve import _comm, machine, serving_ledger
    lg = serving_ledger(config)
    m = machine(card, kernel_tables, scheme_kind)
    dec = S.decode(lg, lg.values(queries, batch), position, m, tp,
                   "fp8" if kv_dtype.startswith("fp8") else "bfloat16")
    comm = _comm(m, config, batch * queries, tp, config.num_layers)
    experts = sum((o.seconds for o in dec.ops if o.name in EXPERT_OPS), Fraction(0))
    return dec.seconds + (comm.seconds if comm is not None else 0), experts


def speculate(config, plan, method: str, tokens: int, acceptance, draft_config=None,
              batch: int | None = None, position: int | None = None) -> Speculation:
    """The speculative step of a ServePlan's decode (its GPU, engine, TP, weights, KV dtype;
    its batch and key length unless given)."""
    from accounting.planning.gpus import get_gpu
    if tokens < 1:
        raise UsageError("--num-speculative-tokens must be at least 1")
    a = Fraction(acceptance)
    if not 0 <= a <= 1:
        raise UsageError(f"--acceptance must be in [0, 1], got {float(a)}")
    card = get_gpu(plan.gpu)
    b = batch or plan.time.batch
    t = position or plan.time.position
    kind = plan.scheme.kind
    tabs = plan.record.kernel_tables  # the engine's measured kernels
    verify = _decode_seconds(config, card, tabs, kind, plan.tp, b, t, plan.kv_dtype, tokens + 1)
    if method == MTP:
        if not config.mtp_layers:
            raise UsageError("--speculative mtp needs the model's MTP heads "
                             "(num_nextn_predict_layers, --mtp-layers): this one has none; "
                             "give a draft model instead (--speculative PRESET)")
        drafter = mtp_block(config)
    elif draft_config is not None:
        drafter = draft_config
    else:
        raise UsageError("--speculative needs 'mtp' or a draft model (--draft-model NAME)")
    one = _decode_seconds(drafter, card, tabs, kind, plan.tp, b, t, plan.kv_dtype, 1)
    return Speculation(method, tokens, a, verify, tokens * one)



def speculate_dp(config, plan, dpw, method: str, tokens: int, acceptance,
                 draft_config=None) -> Speculation | None:
    """The speculative step of a DP-attention + EP worker (dp_attention.py; vLLM and SGLang
    run MTP with DP attention: SGLang's DeepSeek recipe combines --enable-dp-attention with
    --speculative-algorithm NEXTN). One rank's step is speculate's at its TP and batch b,
    plus what dp_worker adds to a decode step, at the rows this step routes: per MoE layer
    two all-to-alls (dispatch, combine) of b·(k+1)·top_k rows for the verify, of b·top_k
    for each step of an MTP head (an MoE block of the same expert-parallel group), and the
    busiest GPU's (f − 1) share of the routed-expert GEMMs of each. (A separate draft model
    runs on each rank as planned by speculate, without expert parallelism.) None where no
    all-to-all table exists for the worker."""
    from accounting.planning.gpus import get_gpu
    from accounting.serving.dp_attention import _alltoall
    s = speculate(config, plan, method, tokens, acceptance, draft_config)
    card, b, e = get_gpu(plan.gpu), plan.time.batch, dpw.gpus
    tabs, kind, t = plan.record.kernel_tables, plan.scheme.kind, plan.time.position
    f = dpw.imbalance
    rows = config.experts_per_token * config.d_model  # elements a token sends, per MoE layer
    moe = config.num_layers - len(config.dense_layers)
    verify_a2a = _alltoall(card, e, b * (tokens + 1) * rows)
    if verify_a2a is None:
        return None
    _, verify_experts = _decode(config, card, tabs, kind, plan.tp, b, t, plan.kv_dtype,
                                tokens + 1)
    verify = s.verify_seconds + 2 * moe * verify_a2a + (f - 1) * verify_experts
    draft = s.draft_seconds
    if method == MTP:
        head = mtp_block(config)
        head_moe = head.num_layers - len(head.dense_layers) if head.num_experts else 0
        if head_moe:
            step_a2a = _alltoall(card, e, b * rows)
            if step_a2a is None:
                return None
            _, head_experts = _decode(head, card, tabs, kind, plan.tp, b, t, plan.kv_dtype, 1)
            draft += tokens * (2 * head_moe * step_a2a + (f - 1) * head_experts)
    return Speculation(s.method, tokens, s.acceptance, verify, draft)
