"""Apertus (model_type apertus; issue 41): the llama layout with RMSNorm of each head's Q and
K and a plain MLP whose activation is xIELU with two learned scalars per layer. Counted
against transformers 5.23.0's own ApertusForCausalLM (meta device: parameters by name;
--verify: FlopCounterMode over it) and hand algebra written here from modeling_apertus.py
and activations.py (XIELUActivation._xielu_python, read there):

  alpha_p = softplus(self.alpha_p); alpha_n = beta + softplus(self.alpha_n)
  where(x > 0, alpha_p·x·x + beta·x, (expm1(min(x, eps)) − x)·alpha_n + beta·x)

per element of the MLP's hidden x: 4 ops on the positive branch (×, ×, ×, +), 6 on the
other (min, expm1, −, ×, β·x again, +), the select: 11 FLOPs (x > 0 is a bool op, 0 by the
convention); per layer 3 more on the scalars (two softplus, one add).
"""
import json

import pytest

from accounting import analyze
from accounting.architecture.hf_config import translate
from cli_run import agreeing_check, run
from hf_examples import write_config

V, D, F, L, H, KV = 96, 32, 48, 2, 4, 2
HD = D // H
DATA = {"architectures": ["ApertusForCausalLM"], "model_type": "apertus", "vocab_size": V,
        "hidden_size": D, "intermediate_size": F, "num_hidden_layers": L,
        "num_attention_heads": H, "num_key_value_heads": KV, "max_position_embeddings": 512,
        "hidden_act": "xielu", "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "llama3", "rope_theta": 12000000.0, "factor": 8.0,
                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192},
        "torch_dtype": "float32"}


def _model(data=DATA):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(**{k: v for k, v in data.items()
                                               if k not in ("architectures", "torch_dtype")})
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(cfg)


def hand_params() -> int:
    attn = D * H * HD + 2 * D * KV * HD + H * HD * D + 2 * HD  # q, k, v, o, q/k_norm
    mlp = 2 * D * F + 2  # up, down; xIELU's alpha_p and alpha_n
    return 2 * V * D + D + L * (attn + mlp + 2 * D)  # untied head, final norm, two norms


def test_parameters_equal_hand_algebra_and_transformers_by_name():
    model = _model()
    theirs = dict(model.named_parameters())
    assert sum(p.numel() for p in theirs.values()) == hand_params()
    assert theirs["model.layers.0.mlp.act_fn.alpha_p"].numel() == 1
    assert analyze(translate(DATA, "c", "ap").config).param_count == hand_params()


@pytest.mark.parametrize("T,B", [(8, 1), (20, 2)])
def test_xielu_flops_by_its_formula(T, B):
    """The ledger's xIELU rows: 11 FLOPs per element of the B·T·F hidden, and 3 per layer on
    the scalars."""
    a = analyze(translate(DATA, "c", "ap").config, T, B, "forward")
    xielu = sum(r.flops for r in a.elementwise_rows if r.record.component == "xIELU")
    assert xielu == L * (11 * B * T * F + 3)


def test_verify_agrees_with_transformers(tmp_path, capsys):
    """--verify: fvcore, FlopCounterMode over model/ and over transformers' ApertusForCausalLM
    (meta), the op counter's elementwise FLOPs (xIELU's included), parameters by name."""
    x = agreeing_check(capsys, "--config", str(write_config(tmp_path, DATA)), "--ctx", "24")
    assert x["transformers"]["agrees"]


def test_training_plan_runs(tmp_path, capsys):
    code, out, err = run(capsys, "plan", "--config", str(write_config(tmp_path, DATA)), "--ctx",
                         "64", "--format", "json")
    assert code == 0, err
    assert json.loads(out)
