"""A config.json that transformers itself cannot build is refused, never answered under
--no-verify (issue 32): a null head_dim on the types whose config class keeps the null
(qwen2, olmo2, cohere, granite), a null num_key_value_heads where the class types it int
(mistral, mixtral, gemma2, gemma3_text, llama4_text; llama4_text's head_dim too),
DeepSeek-V3's head_dim other than qk_rope_head_dim. The expected
verdicts come from transformers 5.23.0 itself: each test builds its model and runs one
forward (CPU, tiny), and the tool must refuse exactly where transformers fails.
"""
import pytest

from cli_run import refused_in_one_line, run
from hf_examples import CONFIGS as DENSE, DELETE, write_config
from hf_moe_examples import CONFIGS as MOE
from test_hf_cohere import CONFIGS as COHERE
from test_hf_gemma import CONFIGS as GEMMA
from test_hf_llama4 import TEXT as LLAMA4_TEXT

BASE = {"qwen2": DENSE["qwen2"], "olmo2": DENSE["olmo2"], "cohere": COHERE["command-r"],
        "granite": GEMMA["granite"], "mistral": DENSE["mistral"], "mixtral": MOE["mixtral"],
        "llama": DENSE["llama"], "deepseek_v3": MOE["deepseek_v3"], "gemma2": GEMMA["gemma2"],
        "gemma3_text": GEMMA["gemma3_text"], "llama4_text": LLAMA4_TEXT}


def transformers_runs(data: dict) -> bool:
    """Whether transformers builds this config.json and runs one forward on the CPU."""
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    d = dict(data)
    try:
        cfg = tf.AutoConfig.for_model(d.pop("model_type"), **d)
        model = tf.AutoModelForCausalLM.from_config(cfg).eval()
        with torch.no_grad():
            model(torch.zeros(1, 3, dtype=torch.long))
        return True
    except Exception:  # noqa: BLE001 - any failure is transformers refusing the config
        return False


REFUSED = [("qwen2", {"head_dim": None}, "head_dim must be"),
           ("olmo2", {"head_dim": None}, "head_dim must be"),
           ("cohere", {"head_dim": None}, "head_dim must be"),
           ("granite", {"head_dim": None}, "head_dim must be"),
           ("mistral", {"num_key_value_heads": None}, "num_key_value_heads must be"),
           ("mixtral", {"num_key_value_heads": None}, "num_key_value_heads must be"),
           ("gemma2", {"num_key_value_heads": None}, "num_key_value_heads must be"),
           ("gemma3_text", {"num_key_value_heads": None}, "num_key_value_heads must be"),
           ("llama4_text", {"num_key_value_heads": None}, "num_key_value_heads must be"),
           ("llama4_text", {"head_dim": None}, "head_dim must be"),
           ("deepseek_v3", {"head_dim": None}, "head_dim = None"),
           ("deepseek_v3", {"head_dim": 2 * MOE["deepseek_v3"]["qk_rope_head_dim"]},
            "qk_rope_head_dim")]


@pytest.mark.parametrize("mt,changes,expected", REFUSED, ids=[f"{m}-{list(c)[0]}-{c[list(c)[0]]}"
                                                             for m, c, _ in REFUSED])
def test_what_transformers_cannot_build_is_refused(capsys, tmp_path, mt, changes, expected):
    data = {**BASE[mt], **changes}
    assert not transformers_runs(data)
    capsys.readouterr()  # the libraries' import warnings are not the CLI's output
    path = write_config(tmp_path, BASE[mt], changes)
    refused_in_one_line(capsys, "--config", str(path), "--no-verify", "--brief",
                        expected=expected)


ACCEPTED = [("llama", {"head_dim": None}), ("mistral", {"head_dim": None}),
            ("qwen2", {"head_dim": DELETE}), ("olmo2", {"head_dim": DELETE}),
            ("deepseek_v3", {"head_dim": MOE["deepseek_v3"]["qk_rope_head_dim"]})]


@pytest.mark.parametrize("mt,changes", ACCEPTED, ids=[f"{m}-{list(c)[0]}" for m, c in ACCEPTED])
def test_what_transformers_builds_is_still_answered(capsys, tmp_path, mt, changes):
    data = {k: v for k, v in {**BASE[mt], **changes}.items() if v is not DELETE}
    assert transformers_runs(data)
    capsys.readouterr()
    code, out, err = run(capsys, "--config", str(write_config(tmp_path, BASE[mt], changes)),
                         "--no-verify", "--brief")
    assert code == 0, err
