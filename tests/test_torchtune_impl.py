"""--implementation torchtune (planning/recipes.py, planning/finetune.py) against torchtune's
own model, built on the CPU: torchtune 0.6.1's lora_llama3_1 (models/llama3_1/
_component_builders.py) at a tiny size, cast to bf16 as its recipes build it. Its LoRA
adapters are the model's dtype and count; its QLoRA base (quantize_base=True) is torchao's
NF4Tensor, every linear layer but the output. Skipped (with the reason) where torchtune
0.6.1 is not installed (the `recipes` extra).

torchtune's package __init__ imports its data and tokenizer stack (datasets, omegaconf,
sentencepiece, tiktoken) and torchao.dtypes.nf4tensor, which torchao 0.18 moved to
torchao.quantization.quantize_.workflows.nf4.nf4_tensor: the model code imports none of the
former, so the package is entered without its __init__ and those names are given empty
stand-ins; nf4tensor is torchao's own module under its new name."""
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import subprocess
import sys
import types

import pytest

from accounting.architecture.config import ModelConfig
from accounting.ledger.builder.common import TORCHTUNE
from accounting.planning.finetune import NF4_TORCHAO, LoRA, resolve

torch = pytest.importorskip("torch")

TARGETS = ("q_proj", "v_proj", "output_proj", "w1", "w2", "w3")  # torchtune's names too


class _Empty(types.ModuleType):
    __path__: list = []

    def __getattr__(self, k):
        if k.startswith("__"):
            raise AttributeError(k)
        return type(k, (), {})


class _Stand(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    ROOTS = ("datasets", "omegaconf", "sentencepiece", "tiktoken")

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.ROOTS:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _Empty(spec.name)

    def exec_module(self, module):
        pass


@pytest.fixture(scope="module")
def builders():
    spec = importlib.util.find_spec("torchtune")
    if spec is None:
        pytest.skip("torchtune is not installed (pip install -e '.[recipes]')")
    from importlib.metadata import version
    if version("torchtune") != "0.6.1":
        pytest.skip(f"read from torchtune 0.6.1, not {version('torchtune')}")
    saved = {k: v for k, v in sys.modules.items() if k.split(".")[0] in
             ("torchtune", *_Stand.ROOTS) or k == "torchao.dtypes.nf4tensor"}
    finder = _Stand()
    sys.meta_path.insert(0, finder)
    sys.modules["torchao.dtypes.nf4tensor"] = importlib.import_module(
        "torchao.quantization.quantize_.workflows.nf4.nf4_tensor")
    pkg = types.ModuleType("torchtune")
    pkg.__path__ = list(spec.submodule_search_locations)
    sys.modules["torchtune"] = pkg
    try:
        yield importlib.import_module("torchtune.models.llama3_1._component_builders")
    finally:
        sys.meta_path.remove(finder)
        for k in [k for k in sys.modules if k.split(".")[0] in ("torchtune", *_Stand.ROOTS)
                  or k == "torchao.dtypes.nf4tensor"]:
            del sys.modules[k]
        sys.modules.update(saved)


def _sizes(d, h, kv, f):
    return dict(vocab_size=128, num_layers=2, num_heads=h, num_kv_heads=kv, embed_dim=d,
                max_seq_len=64, intermediate_dim=f)


def _config(d, h, kv, f):
    return ModelConfig(vocab_size=128, context_length=64, num_layers=2, d_model=d,
                       num_heads=h, num_kv_heads=kv, d_ff=f, name="tune-tiny")


def test_lora_adapters_are_the_model_dtype_and_count(builders):
    lm = builders.lora_llama3_1(lora_attn_modules=["q_proj", "v_proj", "output_proj"],
                                apply_lora_to_mlp=True, lora_rank=8, lora_alpha=16,
                                **_sizes(64, 4, 2, 96)).to(torch.bfloat16)
    adapters = [p for n, p in lm.named_parameters() if ".lora_" in n]
    ft = resolve(_config(64, 4, 2, 96), LoRA(rank=8, targets=TARGETS), None, "cuda",
                 implementation=TORCHTUNE)
    assert ft.adapter_count() == sum(p.numel() for p in adapters)
    assert {p.dtype for p in adapters} == {torch.bfloat16}
    assert ft.adapters.adapter_dtype == "bf16"
    # PEFT's (the transformers implementation) stays float32 (autocast_adapter_dtype)
    assert resolve(_config(64, 4, 2, 96), LoRA(rank=8, targets=TARGETS), None,
                   "cuda").adapters.adapter_dtype == "fp32"


def test_qlora_base_is_torchao_nf4_byte_for_byte(builders):
    # every quantized weight a multiple of 64·256 elements (to_nf4's requirement)
    # built under bf16, as its recipes build it (training.set_default_dtype(bf16)): to_nf4's
    # factors, scaler mean and code table take the weight's dtype
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        lm = builders.lora_llama3_1(lora_attn_modules=["q_proj", "v_proj", "output_proj"],
                                    apply_lora_to_mlp=True, lora_rank=8, lora_alpha=16,
                                    quantize_base=True, **_sizes(128, 4, 4, 256))
    finally:
        torch.set_default_dtype(old)
    nf4 = importlib.import_module("torchao.quantization.quantize_.workflows.nf4.nf4_tensor")
    measured = 0
    for p in lm.parameters():
        if isinstance(p, nf4.NF4Tensor):
            measured += sum(t.numel() * t.element_size() for t in (
                p.quantized_data, p.quantized_scalers, p.quantization_factor, p.scaler_mean,
                p.nf4))
    assert measured > 0
    ft = resolve(_config(128, 4, 4, 256), LoRA(rank=8, targets=TARGETS), None, "cuda", "nf4",
                 implementation=TORCHTUNE)
    assert ft.nf4_layout == NF4_TORCHAO
    assert sum(ft.base_nf4_bytes().values()) == measured
    assert sum(ft.base_nf4_bytes().values()) != sum(ft.nf4_bytes().values())  # not bnb's


def test_cli_refuses_a_model_torchtune_does_not_build_in_one_line():
    run = subprocess.run([sys.executable, "-m", "accounting", "plan", "gpt2-small",
                          "--implementation", TORCHTUNE, "--precision", "bf16-mixed", "--mlp", "gelu"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and TORCHTUNE in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
