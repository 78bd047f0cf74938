"""serve --search on a vision-language config.json plans every layout with the tower, as plain
`serve` does (issue 41, Must 3: the search had planned the language model alone, silently:
serve's plan_inputs notes were dropped by the search). Checked by the calls the search makes
(every serve() it runs is given the config's VisionSpec) and by the chosen worker's TTFT,
equal to plain `serve`'s for that layout, whose own tower terms tests/test_vision_serve.py
checks by hand algebra."""
import json
import sys
from pathlib import Path

from cli_run import run
from hf_examples import write_config

sys.path.insert(0, str(Path(__file__).parent))
from test_vision import CONFIGS  # noqa: E402

QWEN = CONFIGS["qwen2_5_vl"]
SEARCH = ("--gpu", "H100", "--search", "--max-gpus", "2", "--isl", "48", "--osl", "16",
          "--ttft", "5", "--tpot", "1")


def test_every_layout_is_planned_with_the_tower(capsys, tmp_path, monkeypatch):
    from accounting.serving import plan as P
    seen = []
    real = P.serve

    def spy(*args, **kwargs):
        seen.append(kwargs.get("tower"))
        return real(*args, **kwargs)
    monkeypatch.setattr(P, "serve", spy)
    path = str(write_config(tmp_path, QWEN))
    code, out, err = run(capsys, "serve", "--config", path, *SEARCH)
    assert code == 0, err
    assert seen and all(t is not None and t.family == "qwen2_5_vl" for t in seen), seen[:3]
    assert "vision tower: counted in every layout" in out.split("\n\n")[0]


def test_the_chosen_worker_is_plain_serves(capsys, tmp_path):
    path = str(write_config(tmp_path, QWEN))
    code, out, err = run(capsys, "serve", "--config", path, *SEARCH, "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert any("vision tower: counted" in n for n in d["notes"])
    best = d["layouts"][0]
    worker = best["decode"]
    argv = ["serve", "--config", path, "--gpu", "H100", "--tp", str(worker["tp"]),
            "--ctx", str(48 + 16), "--prompt", "48", "--concurrency", str(worker["batch"]),
            "--kv-dtype", worker["kv_dtype"], "--format", "json"]
    if worker["online_fp8"]:
        argv += ["--weights", "fp8"]
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    plain = json.loads(out)
    assert plain["vision"]["weights_bytes_per_gpu"] > 0  # the tower, counted by serve
    assert plain["ttft_seconds"] == worker["serve_ttft_seconds"]
