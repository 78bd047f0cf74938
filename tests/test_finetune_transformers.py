"""LoRA under implementation "transformers" (the default for a Hugging Face input) against
PEFT on transformers' own model, on the CPU.

transformers' model is built from a tiny config.json (tests/hf_examples.py) with
attn_implementation="sdpa", wrapped by peft.get_peft_model(LoraConfig(r, "all-linear"))
(adapters float32: autocast_adapter_dtype=True) with enable_input_require_grads(), and one
step's forward and loss run under saved_tensors_hooks (tests/test_architectures.py
saved_tensors: every storage autograd saves, parameters excluded, each once). The storages,
by size and dtype, equal the saved records of the ledger built with implementation
"transformers" and the plan's adapters (builder/lora.py on the builder's Linear), the base
in fp32 or bf16, with or without the CPU's autocast. PEFT's trainable count equals the
optimizer's trained tensors (planning/training_state.py), and the memory model's trained
tensors are exactly the adapters.
"""
from collections import Counter
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")
pytest.importorskip("transformers")

from accounting.ledger.builder.lora import LEAF  # noqa: E402
from accounting.ledger.ledger import ledger  # noqa: E402
from accounting.planning import training_state as TS  # noqa: E402
from accounting.planning.finetune import LoRA, resolve  # noqa: E402
from accounting.architecture.hf_config import translate  # noqa: E402
from test_transformers_saves import CONFIGS, DTYPE, SIZE, build, measured  # noqa: E402

# (ledger autocast, base dtype): fp32; the plan's bf16-mixed LoRA (base in bf16, autocast);
# a bf16 base without autocast
MODES = {"fp32": (None, "fp32"), "autocast": ("cpu", "bf16"), "bf16": (None, "bf16")}


def expected(config, ft, B, T, autocast, base):
    lg = ledger(config, autocast, "none", "transformers", base, ft.adapters)
    v = lg.values(T, B)
    out = Counter()
    for a in lg.activations:
        # the embedding's leaf is held by its AccumulateGrad node: hooks do not see it
        if a.saved and a.name != LEAF:
            out[(SIZE[a.dtype] * a.elements.evaluate(v) // a.copies,
                 str(DTYPE[a.dtype]).removeprefix("torch."))] += a.copies * a.count(v)
    return out


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("name", ("llama", "mistral", "qwen2", "qwen3"))
def test_peft_on_transformers_model_saves_what_the_lora_ledger_says(name, mode):
    autocast, base = MODES[mode]
    h = translate(CONFIGS[name], "test", name)
    config = replace(h.config, attention="sdpa")
    ft = resolve(config, LoRA(rank=4), h.type.module_names(h.data), autocast, None, True,
                 "transformers")
    model = build(name, base)
    model.enable_input_require_grads()
    pm = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules="all-linear"))
    trained = [p for p in pm.parameters() if p.requires_grad]
    assert {p.dtype for p in trained} == {torch.float32}  # autocast_adapter_dtype
    B, T = 2, 5
    assert measured(pm, B, T, autocast) == expected(config, ft, B, T, autocast, base)
    # one trainable set: PEFT's count = the optimizer's trained tensors = the adapters
    ts = TS.tensors(config, TS.unfrozen, ft.ledger())
    assert TS.counts(ts)[1] == sum(p.numel() for p in trained) == ft.adapter_count()
    assert sum(t.copies for t in ts if t.trained) == len(trained)
