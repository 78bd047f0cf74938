"""Frozen tensors in many-GPU plans (issue 44): DeepSeek-V3.2's lightning indexer under
--implementation transformers gets no gradient (DeepseekV32Indexer.forward is
@torch.no_grad(), transformers 5.23 modeling_deepseek_v32.py), so no gradient buffer and no
AdamW state, on one GPU and, since this change, on every many-GPU layout (DDP, ZeRO-1,
FSDP2, pipelining; parallel/states.py FROZEN). Before, `plan … --gpus N` counted a gradient
and two moments for the indexer's 2 × 2,848 parameters.

Expected values: hand algebra of the tiny config's parameters (tests/test_hf_deepseek_v32.py
params_by_hand and indexer_params, written from modeling_deepseek_v32.py), and transformers'
own model run on the CPU (which parameters a real backward pass gives a .grad, which ones
AdamW keeps state for).
"""
import pytest

from accounting.architecture.hf_config import translate
from accounting.planning.parallel.layout import Layout
from accounting.planning.parallel.plan import parallel_plan
from accounting.planning.precisions import get_precision
from accounting.planning.recipes import resolve
from test_hf_deepseek_v32 import (DATA, D, E, F, L, V, d_e, dv, h, indexer_params, nope,
                                  params_by_hand, r_kv, r_q, rope)

N, N_I = params_by_hand(), indexer_params()  # 80,336 and 2,848 per layer
ATTN = (D * r_q + r_q + r_q * h * (nope + rope) + D * (r_kv + rope) + r_kv
        + r_kv * h * (nope + dv) + h * dv * D)  # one layer's MLA (test_hf_deepseek_v32)
# pipeline stages of 2 GPUs: the embedding and layer 0 (dense MLP 3·D·F), then layer 1 (the
# router E·D, E experts and the shared one 3·D·d_e each), the final norm and the head
STAGE = (V * D + ATTN + N_I + 2 * D + 3 * D * F,
         ATTN + N_I + 2 * D + E * D + (E + 1) * 3 * D * d_e + D + V * D)
# every size of this config is even: FSDP2's shards over 2 ranks are exact halves


def _config():
    recipe, config = resolve(translate(DATA, "test", "v32").config, from_hf=True)
    assert recipe.implementation == "transformers"
    return config


def _items(layout, dp_rank=None):
    plan = parallel_plan(_config(), layout, 16, precision=get_precision("fp32"),
                         implementation="transformers", dp_rank=dp_rank)
    return [{i.name: i.bytes.at(layout.micro_batch) for i in s.items} for s in plan.stages]


def _grads(items):
    return next(b for n, b in items.items() if n.startswith("gradients"))


def _moment(items):
    return next(b for n, b in items.items() if n.startswith("AdamW moments: first"))


def test_the_sizes_add_up():
    assert sum(STAGE) == N and N_I == 2848


@pytest.mark.parametrize("zero", [0, 2, 3])
def test_data_parallel_states_leave_the_indexer_out(zero):
    """DDP: every rank 4·(N − L·N_I) of gradients and of each moment, 4·N of parameters;
    FSDP2 over 2 ranks: half of each."""
    [s] = _items(Layout(2, dp=2, zero=zero, global_batch=2))
    k = 1 if zero == 0 else 2
    assert next(b for n, b in s.items() if n.startswith("parameters")) == 4 * N // k
    assert _grads(s) == 4 * (N - L * N_I) // k
    assert _moment(s) == 4 * (N - L * N_I) // k
    if zero == 0:  # DDP's buckets hold every parameter that requires grad (the indexer's)
        assert s["DDP grad buckets"] == 4 * N


def test_zero1_ranks_share_the_trained_moments_only():
    """ZeroRedundancyOptimizer partitions every parameter; the two ranks' moments add up to
    the trained parameters', 4·(N − L·N_I)."""
    lo = Layout(2, dp=2, zero=1, global_batch=2)
    assert sum(_moment(_items(lo, r)[0]) for r in (0, 1)) == 4 * (N - L * N_I)


@pytest.mark.parametrize("zero", [0, 3])
def test_pipeline_stages_leave_their_indexer_out(zero):
    """Two stages (with FSDP2 over 2 ranks each at zero 3): each stage's gradients and
    moments are its blocks' and root's trained parameters, 4·(stage − N_I) (halved over 2
    FSDP ranks); FSDP2's unsharded gradients accumulated over the micro-batches likewise
    (4·(stage − N_I), whole). Before, a stage of a DeepSeek config whose first block is
    dense also failed (`generator raised StopIteration`: peak.py's CUDA adjustments looked
    for an attention kind the stage does not hold)."""
    dp = 2 if zero else 1
    lo = Layout(2 * dp, dp=dp, pp=2, zero=zero, micro_batch=1, global_batch=4 * dp)
    stages = _items(lo)
    assert len(stages) == 2
    for s, n in zip(stages, STAGE):
        assert _grads(s) == 4 * (n - N_I) // dp
        assert _moment(s) == 4 * (n - N_I) // dp
        if zero:
            acc = next(b for k, b in s.items() if k.startswith("FSDP2 unsharded grads"))
            assert acc == 4 * (n - N_I)


@pytest.fixture(scope="module")
def real_step():
    """transformers' DeepseekV32ForCausalLM (fp32, CPU), one forward, loss and backward, one
    AdamW step: which parameters got a gradient and which got AdamW state."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import AutoModelForCausalLM
    from accounting.crosscheck.hf_counter import transformers_config
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(transformers_config(DATA),
                                             attn_implementation="sdpa").train()
    ids = torch.randint(0, V, (2, 6))
    model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    opt = torch.optim.AdamW(model.parameters())
    opt.step()
    params = dict(model.named_parameters())
    return params, {n for n, p in params.items() if p.grad is None}, \
        {n for n, p in params.items() if p in opt.state}


def test_transformers_gives_the_indexer_no_gradient(real_step):
    params, no_grad, stepped = real_step
    assert no_grad and all(".self_attn.indexer." in n for n in no_grad)
    assert sum(params[n].numel() for n in no_grad) == L * N_I  # hand algebra
    assert all(params[n].requires_grad for n in no_grad)  # no_grad, not requires_grad=False
    assert stepped == set(params) - no_grad  # AdamW: state for the stepped ones only


# the ledger holds the routed experts' W1 and W3 as two tensors where transformers 5.23's
# DeepseekV3NaiveMoe fuses them in one gate_up_proj: one tensor more per MoE layer (one
# 4-byte step counter; not fixed here, builder/hf_moe.py)
GATE_UP_SPLIT = 1


def test_the_step_counters_are_the_stepped_tensors(real_step):
    """One fp32 step counter per tensor AdamW steps (none for the indexer's 10), on one GPU
    of DDP and of FSDP2."""
    params, no_grad, stepped = real_step
    assert len(no_grad) == 5 * L  # wq_b, wk, k_norm's weight and bias, weights_proj
    for zero in (0, 3):
        [s] = _items(Layout(2, dp=2, zero=zero, global_batch=2))
        assert s["AdamW step counters (fp32 scalars)"] == 4 * (len(stepped) + GATE_UP_SPLIT)
