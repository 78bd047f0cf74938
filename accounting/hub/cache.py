"""The local Hugging Face cache, as huggingface_hub lays it out, read without it.

Layout (huggingface_hub's file_download.py, `hf_hub_download` and `try_to_load_from_cache`;
docs: https://huggingface.co/docs/huggingface_hub/guides/manage-cache):

    <cache>/models--<org>--<name>/refs/<revision>          the commit hash a branch points at
    <cache>/models--<org>--<name>/snapshots/<commit>/<file> the file (a link into blobs/)

<cache> is HF_HUB_CACHE, else HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
~/.cache/huggingface/hub (huggingface_hub's constants.py, the same order).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

# A hub repo id: 'org/name', each part of letters, digits, '-', '_', '.' (huggingface_hub's
# utils/_validators.py REPO_ID_REGEX: at most 96 characters, no '--' or '..').
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.\-]{0,95}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
DEFAULT_REVISION = "main"


def is_repo_id(name: str) -> bool:
    """Whether `name` has the form of a hub repo id ('org/name'), as huggingface_hub
    validates it (no '--', no '..', not ending in '.git')."""
    return (isinstance(name, str) and bool(_REPO_ID.match(name)) and "--" not in name
            and ".." not in name and not name.endswith((".git", ".")))


def cache_dir() -> Path:
    """Where huggingface_hub keeps its cache (its constants.py's order)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.path.expanduser(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        return Path(os.path.expanduser(os.environ["HF_HOME"])) / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(os.path.expanduser(xdg)) / "huggingface" / "hub"


def repo_folder(repo_id: str, cache: Path | None = None) -> Path:
    """models--org--name (huggingface_hub's repo_folder_name: '/' becomes '--')."""
    return (cache or cache_dir()) / ("models--" + repo_id.replace("/", "--"))


def snapshot(repo_id: str, revision: str = DEFAULT_REVISION, cache: Path | None = None) -> Path | None:
    """The cached snapshot folder of `repo_id` at `revision` (a branch through refs/, or a
    commit hash), None where the cache holds none."""
    folder = repo_folder(repo_id, cache)
    commit = revision
    if not _COMMIT.match(revision):
        ref = folder / "refs" / revision
        try:
            commit = ref.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        if not _COMMIT.match(commit):
            return None
    path = folder / "snapshots" / commit
    return path if path.is_dir() else None


def cached_file(repo_id: str, filename: str, revision: str = DEFAULT_REVISION,
                cache: Path | None = None) -> Path | None:
    """A file of the cached snapshot, None where it is not cached (a dangling link, as a
    partly deleted cache leaves, counts as absent)."""
    snap = snapshot(repo_id, revision, cache)
    if snap is None:
        return None
    path = snap / filename
    return path if path.is_file() else None
