"""The multi-token-prediction modules in the plan's training memory (issue 31;
accounting/planning/mtp_memory.py). DeepSeek-V3 §2.2 (arXiv 2412.19437, eq. 21-25): module k
projects [RMSNorm(Emb(t_{i+k})); RMSNorm(h^{k-1}_i)] by M_k (d × 2d) into one Transformer
block TRM_k, whose output the shared output head turns into the k-th prediction's logits;
the embedding and the head are shared with the main model.

Checked two ways:
  * the saved activations against torch autograd on the CPU: the module built here of the
    project's own model/ layers, exactly as the paper lays it out, run after the main model
    with the sum of both losses; the bytes of the storages it saves beyond the main model's
    (saved-tensor hooks) equal the plan's "activations: MTP modules" line;
  * the parameters, gradients and AdamW state by hand: one block (4d² + 3·d·d_ff + 2d), M_k
    (2d²) and three norms (3d), 16 bytes each in fp32 (parameter, gradient, m, v)."""
from dataclasses import replace
import json

import pytest

from accounting.planning.memory import MemoryModel, get_precision
from accounting.architecture.config import ModelConfig
from cli_run import run

V, CTX, L, D, H, DFF = 50, 16, 2, 16, 2, 24
BASE = ModelConfig(vocab_size=V, context_length=CTX, num_layers=L, d_model=D, num_heads=H,
                   d_ff=DFF)
MTP_PARAMS = (4 * D * D + 3 * D * DFF + 2 * D) + 2 * D * D + 3 * D  # block, M_k, three norms


def _item(m, B, T, name):
    return next(i.bytes for i in m.at(B, T).items if i.name == name)


def _measured_mtp_bytes(config: ModelConfig, modules: int, B: int, T: int) -> int:
    """Bytes of the storages autograd saves for the MTP modules (all saves of a step with
    them, less those of the same step without), parameters excluded."""
    torch = pytest.importorskip("torch")
    from model.layers import Linear, RMSNorm
    from model.transformer import TransformerLM
    torch.manual_seed(0)
    main = TransformerLM.from_config(config)
    extra = TransformerLM.from_config(replace(config, num_layers=modules))  # the TRM_k
    eh = [Linear(2 * D, D) for _ in range(modules)]
    norms = [(RMSNorm(D), RMSNorm(D), RMSNorm(D)) for _ in range(modules)]
    params = {p.untyped_storage().data_ptr() for m in (main, extra, *eh, *(n for ns in norms for n in ns))
              for p in m.parameters()}
    F = torch.nn.functional
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, V, (B, T + modules), generator=g)

    def step(with_mtp: bool) -> int:
        packed = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
            x = main.token_embeddings(ids[:, :T])
            for layer in main.layers:
                x = layer(x)
            logits = main.lm_head(main.ln_final(x))
            loss = F.cross_entropy(logits.reshape(-1, V), ids[:, 1:T + 1].reshape(-1))
            h = x
            for k in range(modules if with_mtp else 0):  # DeepSeek-V3 eq. 21-23
                shifted = ids[:, k + 1:T + k + 1].clone()  # the tokens k + 1 ahead
                n_e, n_h, n_out = norms[k]
                u = torch.cat([n_e(main.token_embeddings(shifted)), n_h(h)], dim=-1)
                h = extra.layers[k](eh[k](u))
                logits_k = main.lm_head(n_out(h))  # the shared head
                target = torch.cat([ids[:, k + 2:], ids[:, :1]], dim=1)[:, :T].clone()
                loss = loss + F.cross_entropy(logits_k.reshape(-1, V), target.reshape(-1))
        seen = {}
        for t in packed:
            s = t.untyped_storage()
            if s.data_ptr() not in params:
                seen[s.data_ptr()] = s.nbytes()
        loss.backward()
        return sum(seen.values())
    return step(True) - step(False)


@pytest.mark.parametrize("modules,B,T", [(1, 2, 8), (2, 1, 5)])
def test_mtp_activations_equal_autograd(modules, B, T):
    c = replace(BASE, mtp_layers=modules)
    m = MemoryModel(c, get_precision("fp32"))
    assert _item(m, B, T, "activations: MTP modules") == _measured_mtp_bytes(c, modules, B, T)


def test_mtp_states_by_hand():
    c = replace(BASE, mtp_layers=2)
    m = MemoryModel(c, get_precision("fp32"))
    n = 2 * MTP_PARAMS
    assert _item(m, 2, 8, "MTP modules: parameters (fp32)") == 4 * n
    assert _item(m, 2, 8, "gradients of the MTP modules (fp32)") == 4 * n
    assert _item(m, 2, 8, "MTP modules: AdamW first moment m") == 4 * n
    assert _item(m, 2, 8, "MTP modules: AdamW second moment v") == 4 * n
    # the total grows by those, the activations' line and the block's RoPE tables (fp32
    # cos and sin, context_length × d_k/2 each, per module: model/'s blocks hold their own)
    base = MemoryModel(BASE, get_precision("fp32"))
    acts = _item(m, 2, 8, "activations: MTP modules")
    rope = 2 * 2 * CTX * (D // H // 2) * 4
    assert m.total(2, 8) - base.total(2, 8) == 16 * n + acts + rope


def test_plan_says_the_mtp_memory_is_in(tmp_path, capsys):
    """The plan's JSON has the MTP lines, and its peak grows by them."""
    path = tmp_path / "m.json"
    path.write_text(json.dumps({**{f: getattr(BASE, f) for f in (
        "vocab_size", "context_length", "num_layers", "d_model", "num_heads", "d_ff")},
        "mtp_layers": 1}))
    code, out, err = run(capsys, "plan", "--config", str(path), "--ctx", "8", "--batch", "2",
                         "--precision", "fp32", "--format", "json")
    assert code == 0, err
    items = {i["name"]: i["bytes"] for i in json.loads(out)["training_memory"]["items"]}
    assert items["MTP modules: parameters (fp32)"] == 4 * MTP_PARAMS
    assert items["activations: MTP modules"] == _measured_mtp_bytes(
        replace(BASE, mtp_layers=1), 1, 2, 8)


@pytest.mark.parametrize("tp", [1, 2])
def test_parallel_plan_puts_the_mtp_modules_on_the_last_stage(tp):
    """--gpus: two pipeline stages. The first holds nothing more; the last holds every MTP
    module's tensors (Megatron-LM's multi_token_prediction.py places them after the last
    layer) and, the head untied, the embedding table too (V·d); its micro-batch's saved
    bytes grow by the single-GPU plan's MTP activations (tp = 1; measured against autograd
    above). Parameter elements by hand: with tp = 2 the block's Q, K, V, W1, W3 rows, the
    output projection's and W2's columns and W_eh's d output rows halve, the norms do not."""
    from accounting.planning.parallel.layout import Layout
    from accounting.planning.parallel.plan import parallel_plan
    c = replace(BASE, mtp_layers=1)
    layout = Layout(gpus=2 * tp, tp=tp, pp=2, micro_batch=2, global_batch=2)
    p = get_precision("fp32")
    with_mtp = parallel_plan(c, layout, 8, precision=p).stages
    without = parallel_plan(BASE, layout, 8, precision=p).stages
    assert with_mtp[0].states.params == without[0].states.params
    assert with_mtp[0].activations.total == without[0].activations.total
    block = (4 * D * D + 3 * D * DFF) // tp + 2 * D
    assert with_mtp[1].states.params - without[1].states.params == \
        block + 2 * D * D // tp + 3 * D + V * D // tp
    if tp == 1:
        acts = _item(MemoryModel(c, p), 2, 8, "activations: MTP modules")
        grown = with_mtp[1].activations.per_micro_batch.at(2) - \
            without[1].activations.per_micro_batch.at(2)
        assert grown == acts


def test_no_mtp_line_without_modules():
    names = [i.name for i in MemoryModel(BASE, get_precision("fp32")).at(2, 8).items]
    assert not [n for n in names if "MTP" in n]
