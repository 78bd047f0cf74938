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
    from accounting.timing import step as S
    from accounting.timing.serve import _comm, machine, serving_ledger
    lg = serving_ledger(config)
    m = machine(card, kernel_tables, scheme_kind)
    dec = S.decode(lg, lg.values(queries, batch), position, m, tp,
                   "fp8" if kv_dtype.startswith("fp8") else "bfloat16")
    comm = _comm(m, config, batch * queries, tp, config.num_layers)
    return dec.seconds + (comm.seconds if comm is not None else 0)


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

