"""Build a Hugging Face hub cache entry from local files, laid out as huggingface_hub
writes it (blobs/<sha256>, snapshots/<commit>/<file> -> blob, refs/main), for tests."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ado_actuators.sfttrainer.host.hf_cache import repo_folder

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def write_cached_model(
    hub: Path, repo_id: str, files: dict[str, bytes], commit: str = COMMIT
) -> Path:
    repo = repo_folder(repo_id, hub)
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = repo / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return repo
