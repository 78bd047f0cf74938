"""A model argument that is a hub id and not a preset: its config.json, from the local cache
(cache.py) first, then from the hub (remote.py) unless offline; otherwise one line, exit 2."""
from __future__ import annotations

from pathlib import Path

from accounting.hub import cache, remote
from accounting.runtime.errors import UsageError

CONFIG = "config.json"


def config_file(repo_id: str) -> tuple[Path, str]:
    """(config.json's path, where it came from: 'the cache at …' or 'the hub at …')."""
    found = cache.cached_file(repo_id, CONFIG)
    if found is not None:
        return found, f"cached in {cache.cache_dir()}"
    if remote.offline():
        raise UsageError(f"{repo_id} is not a preset and the cache at {cache.cache_dir()} holds "
                         f"no config.json of it, and HF_HUB_OFFLINE is set: download it once "
                         f"online (hf download {repo_id} config.json), or give --config FILE")
    return remote.download(repo_id, CONFIG), f"from the hub at {remote.endpoint()}"


def read(repo_id: str, judge=None, drop: tuple[str, ...] = ()):
    """(the spec, its HFConfig, config.json's path) of a hub id (loaders.read_config's
    reading, the config named by its hub id)."""
    from accounting.architecture import hf_config
    from accounting.architecture.own_format import read_json
    path, where = config_file(repo_id)
    data, _ = read_json(path)
    if not isinstance(data, dict) or "model_type" not in data:
        raise UsageError(f"{repo_id}'s config.json ({where}) names no model_type: not a "
                         f"Transformers config the tool can read; give --config FILE")
    if drop:
        data = {k: v for k, v in data.items() if k not in drop}
    hf = hf_config.from_file(path, data, f"{repo_id} config.json ({where})", name=repo_id,
                             judge=judge)
    return hf.config, hf, path
