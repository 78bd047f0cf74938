"""The hub, through huggingface_hub (installed with transformers; imported here only, when a
hub id that is not a preset or cached is looked up).

Only small files are downloaded (config.json, model.safetensors.index.json), into the
user's cache as huggingface_hub does it; a checkpoint's safetensors headers are read by
ranged GETs (huggingface_hub's HfApi.get_safetensors_metadata and
parse_safetensors_file_metadata: 'range: bytes=0-100000', then the rest of the header if
longer; hf_api.py, huggingface_hub 2.4.0), never the weights. HF_ENDPOINT names the hub
(a mirror, or the tests' stand-in on 127.0.0.1); the user's token (HF_TOKEN or
`hf auth login`) opens gated repositories.
"""
from __future__ import annotations

import os

from accounting.hub.cache import cache_dir
from accounting.runtime.errors import UsageError

HUB = "https://huggingface.co"


def endpoint() -> str:
    """The hub's address: HF_ENDPOINT (huggingface_hub's constants.ENDPOINT reads it at its
    import; read here per call, so that the tests' stand-in is used whatever was imported)."""
    return (os.environ.get("HF_ENDPOINT") or HUB).rstrip("/")


def offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) set true, as huggingface_hub reads it
    (constants.py: '1', 'ON', 'YES', 'TRUE')."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.upper() in {"1", "ON", "YES", "TRUE"}


def _hub():
    try:
        import huggingface_hub
    except ImportError:
        raise UsageError("looking a model up on the hub needs huggingface_hub, not importable "
                         "here; install the hf extra (pip install -e '.[hf]') or give "
                         "--config FILE") from None
    return huggingface_hub


def _failure(repo_id: str, e: BaseException, what: str) -> UsageError:
    """huggingface_hub's and the network's exceptions as one line naming the fix."""
    from huggingface_hub import errors as E
    page = f"{endpoint()}/{repo_id}"
    if isinstance(e, E.GatedRepoError):
        if _hub().get_token() is None:
            return UsageError(f"{repo_id} is gated on the hub: accept its terms at {page}, then "
                              f"log in (hf auth login, or set HF_TOKEN) and run again")
        return UsageError(f"{repo_id} is gated and your token has no access: accept its terms "
                          f"at {page} with the account of your token (HF_TOKEN or hf auth login)")
    if isinstance(e, E.RepositoryNotFoundError):
        return UsageError(f"no model {repo_id} on the hub ({endpoint()}), nor a preset (see "
                          f"--list); check the id, or log in if it is private (hf auth login)")
    if isinstance(e, E.RemoteEntryNotFoundError):
        return UsageError(f"{repo_id} has no {what} on the hub; it is not a Transformers "
                          f"checkpoint the tool can read (give --config FILE)")
    if isinstance(e, E.RevisionNotFoundError):
        return UsageError(f"{repo_id}: the revision is not on the hub; check it")
    if isinstance(e, E.NotASafetensorsRepoError):
        return UsageError(f"{repo_id} has no safetensors files on the hub (model.safetensors "
                          f"or its index); --checkpoint reads safetensors headers only")
    if isinstance(e, E.SafetensorsParsingError):
        return UsageError(f"{repo_id}: a safetensors header on the hub cannot be read "
                          f"({str(e).splitlines()[0][:120]})")
    reason = (str(e).splitlines() or [type(e).__name__])[0][:160]
    return UsageError(f"cannot reach the hub at {endpoint()} for {repo_id} ({type(e).__name__}: "
                      f"{reason}) and the cache at {cache_dir()} holds no copy; connect, or "
                      f"download it once (hf download {repo_id} {what}), or give --config FILE")


def _calling(repo_id: str, what: str, call):
    hub = _hub()
    try:
        return call(hub)
    except UsageError:
        raise
    except Exception as e:  # noqa: BLE001: every failure of the hub or the network, named
        if isinstance(e, MemoryError):
            raise
        raise _failure(repo_id, e, what) from None


def download(repo_id: str, filename: str, revision: str | None = None):
    """A small file of the repo (config.json, the safetensors index) into the user's cache,
    as huggingface_hub lays it out; its path."""
    from pathlib import Path

    def call(hub):
        # one HEAD without retries first: hf_hub_download retries an unreachable hub five
        # times with backoff (about 23 s, file_download.py: retry_on_errors=True), warning
        # on stderr each time; unreachable is answered at once, in one line
        url = hub.hf_hub_url(repo_id, filename, revision=revision, endpoint=endpoint())
        hub.get_hf_file_metadata(url, timeout=10)
        return hub.hf_hub_download(repo_id, filename, revision=revision,
                                   cache_dir=str(cache_dir()), endpoint=endpoint())
    return Path(_calling(repo_id, filename, call))


def safetensors_headers(repo_id: str, revision: str | None = None) -> dict[str, dict]:
    """Each safetensors file's header (file -> {tensor name -> {dtype, shape, data_offsets}}),
    by ranged reads (huggingface_hub's get_safetensors_metadata)."""
    def call(hub):
        meta = hub.HfApi(endpoint=endpoint()).get_safetensors_metadata(repo_id, revision=revision)
        return {f: {name: {"dtype": t.dtype, "shape": list(t.shape),
                           "data_offsets": list(t.data_offsets)}
                    for name, t in fm.tensors.items()}
                for f, fm in meta.files_metadata.items()}
    return _calling(repo_id, "model.safetensors", call)
