"""--offload activations (issue 44): torchtune 0.6.1's OffloadActivations, run on the CPU.

The hooks' pack_tensor runs as on a GPU (use_streams=False: torchtune's single-stream path;
torch.cuda.default_stream, which a CPU build lacks, stood in for by None, so
`torch.cuda.stream(None)` is a no-op); each saved tensor it is given is either copied to a
CPU tensor (tracker entry "modified") or kept. The backward pass would copy them to "cuda",
so only the forward runs: which tensors the library moves is what the plan's rule says
(accounting/planning/activation_offload.py). The model is transformers' Llama (the tiny
config of tests/hf_examples.py), its LM head under torchtune's NoOpManager exactly as
get_act_offloading_ctx_manager hooks a torchtune model's `output`, the loss outside the
context as the recipes compute it. Expected values: the ledger's saved records
(tests/test_transformers_saves.py holds them to this model's saves) split by the rule."""
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from accounting.architecture.hf_config import translate  # noqa: E402
from accounting.planning import PRECISIONS, MemoryModel  # noqa: E402
from accounting.planning import activation_offload as AO  # noqa: E402
from hf_examples import CONFIGS  # noqa: E402
from test_transformers_saves import build  # noqa: E402
from torchtune_files import load  # noqa: E402


def _offloaded(model, ids, targets, monkeypatch, autocast):
    tt = load("training/_activation_offloading.py")
    monkeypatch.setattr(torch.cuda, "default_stream", lambda *a, **k: None)
    ctx = tt.OffloadActivations(use_pin_memory=False, use_streams=False)
    noop = tt.NoOpManager()  # get_act_offloading_ctx_manager's hook pair, on lm_head
    model.lm_head.register_forward_pre_hook(lambda *a: noop.__enter__())
    model.lm_head.register_forward_hook(lambda *a: noop.__exit__(), always_call=True)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    moved, kept, alive = {}, {}, []
    pack = ctx.pack_hook

    def watch(t):
        tid = pack(t)
        alive.append(t)  # an offloaded tensor is freed: its address must not be reused here
        s = t.untyped_storage()
        if s.data_ptr() not in params:  # the parameters (and views of them) are not activations
            (moved if ctx.tracker[tid][1] else kept)[s.data_ptr()] = s.nbytes()
        return tid
    ctx.pack_hook = watch
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        with ctx:
            logits = model(ids, use_cache=False).logits
        torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                          targets.reshape(-1))
    return moved, kept, ids.untyped_storage().data_ptr()


@pytest.mark.parametrize("autocast", [False, True])
def test_what_offload_activations_moves_is_the_rule(monkeypatch, autocast):
    config = replace(translate(CONFIGS["llama"], "test", "llama").config, attention="sdpa")
    model = build("llama", "fp32")
    B, T = 2, 64
    g = torch.Generator().manual_seed(1)
    ids, targets = (torch.randint(0, config.vocab_size, (B, T), generator=g) for _ in range(2))
    moved, kept, ids_ptr = _offloaded(model, ids, targets, monkeypatch, autocast)
    # the token ids are offloaded too, but the training loop's batch holds them: the device
    # keeps them (the rule lists them as kept, activation_offload.INPUTS)
    assert moved.pop(ids_ptr) == 8 * B * T
    m = MemoryModel(config, PRECISIONS["bf16-mixed" if autocast else "fp32"], "model",
                    implementation="transformers", device="cpu", offload_activations=True)
    v = m.values(T, B)
    acts = m.ledger.activations
    every, flight = AO.offloaded(acts)
    assert sum(moved.values()) == every.evaluate(v)
    # what the hooks keep: the tensors under 1 KiB (the LM head's saves stay too, packed
    # by the NoOpManager inside it, so not seen here)
    model_saves = sum(r.elements.evaluate(v) * r.bytes_per_element * r.count(v)
                      for r in acts if r.saved and r.module not in ("loss", "lm_head"))
    assert sum(kept.values()) + 8 * B * T == model_saves - every.evaluate(v)
    assert min(moved.values()) >= AO.MIN_OFFLOAD_SIZE
    # one block in flight: a block's share of what moves (2 alike blocks)
    assert flight.evaluate(v) * 2 <= every.evaluate(v)


def test_offloading_lowers_the_plan_by_the_moved_tensors():
    from accounting.planning.plan import plan
    on = plan("meta-llama/Llama-3.2-1B", 4096, 2, offload_activations=True).memory.model
    off = plan("meta-llama/Llama-3.2-1B", 4096, 2).memory.model
    v = on.values(4096, 2)
    every, flight = AO.offloaded(on.ledger.activations)
    assert off.peak_terms[0].bytes.evaluate(v) - on.peak_terms[0].bytes.evaluate(v) == \
        every.evaluate(v) - flight.evaluate(v)
    assert on.peak_terms[1].bytes.evaluate(v) == off.peak_terms[1].bytes.evaluate(v)  # update


def test_compile_and_offload_together_count_each_tensor_once():
    # regression: with --compile and --offload activations both, the tensors a compiled
    # block no longer saves were subtracted twice (not saved, and offloaded), the start of
    # the backward pass fell by a negative a per sequence, and a plan whose batch 1 fits
    # reported "largest batch: none"
    from accounting.planning.plan import plan
    p = plan("meta-llama/Llama-3.2-1B", 4096, 1, loss="chunked", compile=True,
             offload_activations=True, gpu="H100")
    m = p.memory.model
    assert all(a > 0 for a, _ in m.fit_lines(4096))
    assert p.batch_fit.largest >= 1 and m.fit_bytes(p.batch_fit.largest, 4096) <= \
        p.batch_fit.budget.usable < m.fit_bytes(p.batch_fit.largest + 1, 4096)
    # compiled and offloaded: what moves is what a compiled block still saves
    compiled = plan("meta-llama/Llama-3.2-1B", 4096, 1, compile=True).memory.model
    both = plan("meta-llama/Llama-3.2-1B", 4096, 1, compile=True,
                offload_activations=True).memory.model
    offloaded = plan("meta-llama/Llama-3.2-1B", 4096, 1, offload_activations=True).memory.model
    eager = plan("meta-llama/Llama-3.2-1B", 4096, 1).memory.model
    v = both.values(4096, 1)
    start = [x.peak_terms[0].bytes.evaluate(v) for x in (eager, compiled, offloaded, both)]
    assert start[3] < min(start[1], start[2]) and start[3] > 0


def test_many_gpus_offload_the_blocks_but_one(capsys):
    # 8 GPUs, FSDP, micro-batch 1, T = 4,096: the rank holds all 16 blocks; offloaded, the
    # blocks' moved tensors (the one-GPU rule's, per block) leave but one block's
    import json
    from accounting.planning.plan import plan
    from cli_run import run
    T, L = 4096, 16
    m = plan("meta-llama/Llama-3.2-1B", T, 1, offload_activations=True).memory.model
    v = m.values(T, 1)
    names = set(AO.offloaded_names(m.ledger.activations, v))
    per_block = sum(r.elements.evaluate(v) * r.bytes_per_element
                    for r in m.ledger.activations if r.repeat and r.saved and r.name in names)
    out = {}
    for flags in ((), ("--offload", "activations")):
        code, text, err = run(capsys, "plan", "meta-llama/Llama-3.2-1B", "--ctx", str(T),
                              "--gpus", "8", "--fsdp", *flags, "--format", "json")
        assert code == 0, err
        d = json.loads(text)
        out[flags] = d["memory_per_gpu_bytes"]
        out[flags + ("reserved",)] = d["memory_per_gpu_reserved_bytes"]
    assert out[()] - out[("--offload", "activations")] == (L - 1) * per_block
    # the copies brought back on the offload stream sit in a pool of their own
    # (planning/reserved.py OFFLOAD_STREAM: no other stream's free block serves them), so
    # what the rank reserves beyond its allocated peak is at least one block's of them
    off = ("--offload", "activations")
    assert out[off + ("reserved",)] - out[off] >= per_block


def test_one_blocks_copies_are_what_the_offload_stream_holds(monkeypatch):
    # --offload activations' reserved figure packs one block's brought-back copies in the
    # offload stream's own pool (planning/reserved.py, AO.flight_groups): those tensors,
    # one by one, are the ones torchtune's pack_tensor moves inside one decoder layer
    config = replace(translate(CONFIGS["llama"], "test", "llama").config, attention="sdpa")
    model = build("llama", "fp32")
    B, T = 2, 64
    g = torch.Generator().manual_seed(1)
    ids, targets = (torch.randint(0, config.vocab_size, (B, T), generator=g) for _ in range(2))
    layer, inside, sizes = model.model.layers[1], [False], []
    layer.register_forward_pre_hook(lambda *a: inside.__setitem__(0, True))
    layer.register_forward_hook(lambda *a: inside.__setitem__(0, False))
    real = torch.Tensor.untyped_storage

    tt = load("training/_activation_offloading.py")
    monkeypatch.setattr(torch.cuda, "default_stream", lambda *a, **k: None)
    ctx = tt.OffloadActivations(use_pin_memory=False, use_streams=False)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    pack, alive, seen = ctx.pack_hook, [], set()

    def watch(t):
        tid = pack(t)
        alive.append(t)
        s = real(t)
        if inside[0] and ctx.tracker[tid][1] and s.data_ptr() not in params \
                and s.data_ptr() not in seen:
            seen.add(s.data_ptr())
            sizes.append(s.nbytes())
        return tid
    ctx.pack_hook = watch
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with ctx:
            model(ids, use_cache=False)
    m = MemoryModel(config, PRECISIONS["bf16-mixed"], "model", implementation="transformers",
                    device="cpu", offload_activations=True)
    v = m.values(T, B)
    planned = sorted(n for n, c in AO.flight_groups(m.ledger.activations, v) for _ in range(c))
    assert planned == sorted(sizes)
