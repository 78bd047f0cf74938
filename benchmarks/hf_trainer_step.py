"""Live bytes of one QLoRA step as Hugging Face's Trainer (bf16=True) runs it, on the CPU
(issue 44, the Hugging Face + FA2 rows of docs/parallel.md): a tiny Llama with a vocabulary
large beside d_model, saved in bf16 and loaded with BitsAndBytesConfig(nf4, double
quantization, bf16 compute), PEFT's prepare_model_for_kbit_training with its defaults
(use_gradient_checkpointing=True: reentrant checkpointing, transformers 4.47's default and
PEFT's), get_peft_model(LoraConfig(r=32, "all-linear")), then Trainer's training_step:
compute_loss (`outputs = model(**inputs)` with labels, `loss = outputs["loss"]`, the outputs
dropped; transformers 4.47.1 trainer.py Trainer.compute_loss) under the bf16 autocast that
accelerate's prepare_model wraps around forward (with convert_outputs_to_fp32), then
`accelerator.backward(loss)` (loss.backward() in bf16). The live storages are summed after
every op (a TorchDispatchMode, as tests/test_peak.py's LiveBytes); the step's peak over
what lived before it, at each T.

    python benchmarks/hf_trainer_step.py 256 512     # prints one JSON line

Run it with transformers 5.23 / PEFT 0.21 (the project's pins) and in a venv of December
2024's (transformers 4.47.1, PEFT 0.14.0, accelerate; torch 2.13.0 and bitsandbytes 0.50.2,
the first whose 4-bit layers run on the CPU: transformers 4.47 refuses bitsandbytes 0.50's
CPU backend in a check only, `_validate_bnb_multi_backend_availability` calling discard on a
frozenset, which this script skips there). tests/test_hf_trainer_step.py runs it with the pins."""
from __future__ import annotations

import json
import sys
import tempfile
import weakref

# Llama 3's shape, shrunk: V / d_model = 128 (8B's is 31), so the per-vocabulary terms of a
# token dominate the per-d_model ones
CONFIG = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=8192, max_position_embeddings=4096,
              tie_word_embeddings=False, rms_norm_eps=1e-5, rope_theta=500000.0,
              attention_bias=False, mlp_bias=False)
RANK = 32


def tracker():
    """A TorchDispatchMode summing the live storages after each op, with the peak."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Live(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.sizes: dict[int, int] = {}
            self.total = self.peak = 0
            self.peak_op = ""

        def add(self, t):
            s = t.untyped_storage()
            key = s.data_ptr()
            if key and key not in self.sizes:
                self.sizes[key] = s.nbytes()
                self.total += s.nbytes()
                weakref.finalize(s, self._gone, key)

        def _gone(self, key):
            self.total -= self.sizes.pop(key)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    self.add(t)
            if self.total > self.peak:
                self.peak, self.peak_op = self.total, str(func)
            return out

    return Live()


def prepared_model(config=CONFIG, rank=RANK):
    import peft
    import torch
    import transformers
    from transformers import (AutoModelForCausalLM, BitsAndBytesConfig, LlamaConfig,
                              LlamaForCausalLM)
    old = transformers.__version__.startswith("4.")
    if old:  # see the docstring: a validation only; the layers run bitsandbytes' CPU kernels
        import transformers.integrations as ti
        ti.validate_bnb_backend_availability = lambda raise_exception=False: True
    with tempfile.TemporaryDirectory() as d:
        torch.manual_seed(0)
        LlamaForCausalLM(LlamaConfig(**config)).to(torch.bfloat16).save_pretrained(d)
        q = AutoModelForCausalLM.from_pretrained(
            d, quantization_config=BitsAndBytesConfig(
                load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                bnb_4bit_compute_dtype=torch.bfloat16),
            device_map={"": "cpu"}, attn_implementation="sdpa",
            **{"torch_dtype" if old else "dtype": torch.bfloat16})
    q = peft.prepare_model_for_kbit_training(q)  # use_gradient_checkpointing=True
    pm = peft.get_peft_model(q, peft.LoraConfig(r=rank, target_modules="all-linear",
                                                task_type="CAUSAL_LM"))
    return pm.train()


def step(pm, T: int, live=None) -> None:
    """Trainer.training_step's forward and backward (no optimizer step: its state is the
    adapters', the same at every T)."""
    import torch
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, pm.config.vocab_size, (1, T), generator=g)
    inputs = dict(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids.clone())
    with live if live is not None else _Null():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            outputs = pm(**inputs)
        # accelerate's convert_outputs_to_fp32 (outside the autocast it wraps): a float32
        # copy of the logits, dropped with the outputs
        outputs["logits"] = outputs["logits"].float()
        loss = outputs["loss"]
        del outputs  # compute_loss(return_outputs=False)
        loss.backward()


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def peak_over_start(pm, T: int) -> tuple[int, str]:
    """The step's peak live bytes over those live before it (parameters, buffers), and the
    op at the peak. A first step before the measured one: bitsandbytes' first CPU call
    allocates and frees buffers of its own."""
    step(pm, T)
    pm.zero_grad(set_to_none=True)
    live = tracker()
    for t in list(pm.parameters()) + list(pm.buffers()):
        live.add(t)
    start = live.total
    step(pm, T, live)
    pm.zero_grad(set_to_none=True)
    return live.peak - start, live.peak_op


def main(argv: list[str]) -> None:
    import peft
    import torch
    import transformers
    pm = prepared_model()
    out = {"torch": torch.__version__, "transformers": transformers.__version__,
           "peft": peft.__version__, "config": CONFIG, "rank": RANK, "peak_over_start": {}}
    for T in map(int, argv):
        out["peak_over_start"][T] = peak_over_start(pm, T)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
