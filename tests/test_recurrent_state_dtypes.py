"""The recurrent layers' cached state, bytes and dtype, against transformers' own cache after
a CPU forward of a bf16 model (issue 45: Mamba-1, Mamba-2 and gated DeltaNet states were
checked only in an fp32 model, where every tensor is 4 bytes and a state kept in the model
dtype instead of float32 is not seen). transformers 5.23 keeps, in a bf16 model, K/V and the
conv windows in bf16 and the SSM / delta-rule state in float32 (its LinearAttentionLayer's
recurrent_states): plan's inference cache bytes must be those tensors' bytes, and per
sequence the state by dtype. Tiny configs of the families' own tests: Jamba (Mamba-1),
Nemotron-H (Mamba-2), Qwen3-Next (gated DeltaNet)."""
from __future__ import annotations

import json

import pytest
from cli_run import run
from hf_examples import write_config

import test_hf_jamba as JAMBA
import test_hf_nemotron_h as NEMOTRON_H
import test_hf_qwen3_next as QWEN3_NEXT


def _cache(data: dict, B: int, T: int):
    """transformers' cache after a forward of B × T tokens in bf16: bytes by (kind, dtype)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(**{k: v for k, v in data.items()
                                               if k not in ("architectures", "torch_dtype")})
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).eval()
    with torch.no_grad():
        cache = model(torch.zeros(B, T, dtype=torch.long), use_cache=True).past_key_values
    held: dict[tuple[str, str], int] = {}
    for layer in cache.layers:
        for attr in ("keys", "values", "conv_states", "recurrent_states"):
            x = getattr(layer, attr, None)
            items = x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else [x]
            for t in items:
                if isinstance(t, torch.Tensor):
                    key = (attr, str(t.dtype).removeprefix("torch."))
                    held[key] = held.get(key, 0) + t.numel() * t.element_size()
    return held


@pytest.mark.parametrize("family", [JAMBA, NEMOTRON_H, QWEN3_NEXT],
                         ids=["mamba1-jamba", "mamba2-nemotron_h", "gated-deltanet-qwen3_next"])
def test_state_bytes_and_dtype_are_transformers_own(tmp_path, capsys, family):
    B, T = 2, 9
    held = _cache(family.DATA, B, T)
    # the dtypes transformers keeps (the rule the plan states): states float32, the rest bf16
    assert {d for (a, d) in held if a == "recurrent_states"} == {"float32"}
    assert {d for (a, d) in held if a != "recurrent_states"} == {"bfloat16"}
    code, out, err = run(capsys, "plan", "--config", str(write_config(tmp_path, family.DATA)),
                         "--ctx", str(T), "--batch", str(B), "--precision", "bf16-mixed",
                         "--format", "json")
    assert code == 0, err
    inf = json.loads(out)["inference"]
    assert inf["kv_cache_bytes"] == sum(held.values())
    # (a state counted in the cache's bf16 would fall short by half this part)
    assert held[("recurrent_states", "float32")] > 0
