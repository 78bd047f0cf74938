"""Single files of torchtune 0.6.1 (the `recipes` extra), loaded on their own: the package's
__init__ imports torchao.dtypes.nf4tensor, which the pinned torchao 0.18 no longer has, so
`import torchtune.modules` fails here. The two files the recipe tests run import only
torch (modules/loss/ce_chunked_output_loss.py) or torch, psutil, torchao's NF4Tensor (for
an isinstance check), torchtune.modules.TiedLinear and torchtune.utils.get_logger
(training/_activation_offloading.py); those names are given stand-ins that the code under
test only compares against. Skips (with the reason) where torchtune is not installed."""
import importlib.util
import logging
import sys
import types

import pytest


def _source(relative: str) -> str:
    spec = importlib.util.find_spec("torchtune")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torchtune is not installed (pip install -e '.[recipes]')")
    from importlib.metadata import version
    if version("torchtune") != "0.6.1":
        pytest.skip(f"the rules are read from torchtune 0.6.1, not {version('torchtune')}")
    return f"{spec.submodule_search_locations[0]}/{relative}"


def load(relative: str):
    """torchtune/<relative> as a module of its own."""
    path = _source(relative)
    stubs = {"torchtune.modules": types.SimpleNamespace(TiedLinear=type("TiedLinear", (), {})),
             "torchtune.utils": types.SimpleNamespace(get_logger=logging.getLogger),
             "torchao.dtypes.nf4tensor": types.SimpleNamespace(
                 NF4Tensor=type("NF4Tensor", (), {}))}
    saved = {k: sys.modules.get(k) for k in stubs}
    sys.modules.update(stubs)
    try:
        spec = importlib.util.spec_from_file_location(
            "torchtune_file_" + relative.replace("/", "_").removesuffix(".py"), path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return module
