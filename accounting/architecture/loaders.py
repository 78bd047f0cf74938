"""A config file, whichever its format: the tool's own JSON (own_format.py) or a Hugging Face
config.json (it names its model_type; hf_config.py translates it)."""
from __future__ import annotations

from pathlib import Path

from accounting.runtime.errors import escape
from accounting.architecture import hf_config
from accounting.architecture.config import MAX_NAME, ModelConfig
from accounting.architecture.own_format import config_from_dict, read_json


def config_from_json(path: str | Path) -> ModelConfig:
    """A config from a JSON file with ModelConfig's field names (d_ff may be omitted), or
    a Hugging Face config.json (it names its model_type: accounting/architecture/hf_config.py)."""
    return read_config(path)[0]


def read_config(path: str | Path, judge: hf_config.Judge | None = None,
                drop: tuple[str, ...] = ()) -> tuple[ModelConfig, hf_config.HFConfig | None]:
    """The config of a JSON file, and its HFConfig when it is a Hugging Face config.json
    (`judge`: of its keys in no list, hf_config.translate; none refuses them; `drop`: keys of
    a config.json read elsewhere, e.g. quantization_config by `serve`)."""
    data, source = read_json(path)
    if "model_type" in data:
        if drop:
            data = {k: v for k, v in data.items() if k not in drop}
        hf = hf_config.from_file(path, data, source, judge=judge)
        return hf.config, hf
    data.setdefault("name", escape(Path(path).stem)[:MAX_NAME])
    return config_from_dict(data, source), None
