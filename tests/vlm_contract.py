"""Issue 41's contract on a VLM config.json, checked the same way for each family's tests:
`--config FILE --image 448x448 --no-verify --format json` gives .parameters.total the whole
model (transformers' count, from the family's model on the meta device), .parameters.vision
the tower and projector (its parameters named under `tower`), and a "vision encoder" among
the executed components. Returns the JSON, for the family's own .workload.image_tokens."""
from __future__ import annotations

import json

from cli_run import run
from hf_examples import write_config


def contract_json(capsys, tmp_path, data: dict, model, tower: str, image: str = "448x448") -> dict:
    code, out, err = run(capsys, "--config", str(write_config(tmp_path, data)), "--image", image,
                         "--no-verify", "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert d["parameters"]["total"] == sum(p.numel() for p in model.parameters())
    assert d["parameters"]["vision"] == sum(p.numel() for n, p in model.named_parameters()
                                            if n.startswith(tower))
    assert any("vision encoder" in str(c) for c in d["components"]["executed"])
    return d
