"""QLoRA after PEFT's prepare_model_for_kbit_training (--prepare-kbit-training) against a real
step on the CPU: transformers' tiny Llama (tests/hf_examples.py, via test_transformers_saves)
saved and loaded with BitsAndBytesConfig(load_in_4bit, nf4, double quantization, bf16
compute), bitsandbytes' Linear4bit on the CPU, then peft.prepare_model_for_kbit_training and
get_peft_model(LoraConfig(r=8, "all-linear")), one forward and loss under the CPU's bf16
autocast with saved_tensors_hooks (tests/test_architectures.py saved_tensors).

Expected values: what that run saves, storage by storage (size and dtype), and the dtypes
PEFT leaves on the parameters; the ledger built by the plan's fine-tune must equal them."""
import tempfile
from collections import Counter
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")
pytest.importorskip("transformers")
pytest.importorskip("bitsandbytes")

from accounting.architecture.hf_config import translate  # noqa: E402
from accounting.ledger.builder.lora import LEAF  # noqa: E402
from accounting.ledger.ledger import ledger  # noqa: E402
from accounting.planning.finetune import LoRA, resolve  # noqa: E402
from test_transformers_saves import CONFIGS, DTYPE, SIZE, build, measured  # noqa: E402

B, T, RANK = 2, 5, 8


def _prepared_model():
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig
    with tempfile.TemporaryDirectory() as d:
        build("llama", "bf16").save_pretrained(d)
        q = AutoModelForCausalLM.from_pretrained(d, quantization_config=BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16), dtype=torch.bfloat16, device_map="cpu",
            attn_implementation="sdpa")
    q = peft.prepare_model_for_kbit_training(q, use_gradient_checkpointing=False)
    # PEFT casts every bf16 parameter that is not a Params4bit to fp32: embeddings, norms,
    # LM head and the attention biases of this config; the NF4 weights stay uint8
    # (Linear4bit's first forward then casts its bias to the compute dtype: the published
    # Llamas have none)
    rest = {n: p.dtype for n, p in q.named_parameters() if type(p).__name__ != "Params4bit"}
    assert rest and set(rest.values()) == {torch.float32}, rest
    q.enable_input_require_grads()
    pm = peft.get_peft_model(q, peft.LoraConfig(r=RANK, target_modules="all-linear")).train()
    # a first forward before the measured one: saved_tensors excludes the parameters by their
    # storage's address, taken before the forward, and an address bitsandbytes' CPU path
    # frees in its first call could be handed to a saved tensor, which was then left out
    # (1–3 of the 14 bf16 lora_A outputs, differently from run to run)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        pm(torch.zeros(B, T, dtype=torch.long), use_cache=False)
    return q, pm


def _ledger_saves(config, ft):
    lg = ledger(config, "cpu", "none", "transformers", ft.base_dtype, ft.adapters)
    v = lg.values(T, B)
    out = Counter()
    for a in lg.activations:
        if a.saved and a.name != LEAF:  # the embedding's leaf: held by AccumulateGrad
            out[(SIZE[a.dtype] * a.elements.evaluate(v) // a.copies,
                 str(DTYPE[a.dtype]).removeprefix("torch."))] += a.copies * a.count(v)
    return out


def test_prepare_model_for_kbit_training_saves_what_the_ledger_says():
    q, pm = _prepared_model()
    got = measured(pm, B, T, "cpu")
    h = translate(CONFIGS["llama"], "test", "llama")
    config = replace(h.config, attention="sdpa")
    names = h.type.module_names(h.data)
    prepared = resolve(config, LoRA(rank=RANK), names, "cpu", "nf4", True, "transformers",
                       kbit_upcast=True)
    assert prepared.base_dtype == "fp32" and got == _ledger_saves(config, prepared)
    # the plan before --prepare-kbit-training (the base in bf16) does not describe this run:
    # its residual stream and block inputs are bf16 where PEFT's are fp32
    plain = resolve(config, LoRA(rank=RANK), names, "cpu", "nf4", True, "transformers")
    assert got != _ledger_saves(config, plain)


@pytest.mark.parametrize("argv,expected", [
    (("--prepare-kbit-training",), "--base-weights nf4 --lora-rank"),
    (("--lora-rank", "8", "--prepare-kbit-training"), "--base-weights nf4"),
    (("--lora-rank", "8", "--base-weights", "nf4", "--prepare-kbit-training",
      "--implementation", "torchtune"), "torchtune"),
    (("--lora-rank", "8", "--base-weights", "nf4", "--prepare-kbit-training", "--gpus", "8",
      "--fsdp"), "one GPU"),
])
def test_the_flag_outside_one_gpu_qlora_is_one_line(capsys, argv, expected):
    from cli_run import refused_in_one_line
    refused_in_one_line(capsys, "plan", "meta-llama/Llama-3.1-8B", *argv, expected=expected)
