"""Is a Hugging Face hub model fully in a local hub cache? No network, no transformers.

Training processes run with `HF_HOME=<hf_home>`; transformers then reads the hub cache at
`<hf_home>/hub` (huggingface_hub's HF_HUB_CACHE default, unless HF_HUB_CACHE,
HUGGINGFACE_HUB_CACHE or TRANSFORMERS_CACHE override it in that process).

`snapshot_download(local_files_only=True)` is not a completeness test: it returns
`snapshots/<commit>/` as soon as that folder exists, i.e. after the first file of an
interrupted download. So completeness is decided here:

1. `sfttrainer_download_hf_weights` writes `<repo folder>/sfttrainer-download.json` saying
   "incomplete" *before* it downloads a model and "complete" with the file list after every
   file is in the snapshot. A marker for the current commit decides: incomplete -> not cached
   (an interrupted download is never mistaken for a complete one), complete -> cached when
   every listed file still resolves.
2. Without a marker for the current commit (cache filled by transformers or `hf download`):
   cached when the snapshot has config.json and all weights (every shard of a
   `*.safetensors.index.json` / `pytorch_model.bin.index.json`, else a single weights file)
   and no `.incomplete` blob is left in the repo's blobs folder.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from pathlib import Path
from typing import NamedTuple

from ado_actuators.sfttrainer.host.atomic import write_atomically

MARKER_NAME = "sfttrainer-download.json"
DEFAULT_REVISION = "main"
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHARD = re.compile(r"-\d{5}-of-\d{5}\.(safetensors|bin)$")
_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
_SINGLE_WEIGHTS = ("model.safetensors", "pytorch_model.bin")

# Files transformers never reads when loading for PyTorch training: other frameworks' weights,
# exported formats, and the original (non-transformers) checkpoints some repos also carry.
IGNORE_PATTERNS = (
    "*.msgpack",
    "*.h5",
    "*.ot",
    "*.onnx",
    "*.onnx_data",
    "*.tflite",
    "*.gguf",
    "*.mlmodel",
    "tf_model*",
    "flax_model*",
    "rust_model*",
    "onnx/*",
    "openvino/*",
    "coreml/*",
    "original/*",
    "*.mlpackage/*",
    ".gitattributes",
)
# Ignored too when the repo has transformers-format safetensors weights (transformers prefers them).
DUPLICATE_WEIGHT_PATTERNS = ("pytorch_model*.bin", "*.pt", "*.pth", "consolidated*")


def hub_cache_dir(hf_home: str | os.PathLike | None) -> Path:
    """The hub cache a process with HF_HOME=hf_home uses (hf_home None: this process's)."""
    if hf_home is not None:
        return Path(hf_home) / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def is_local_location(location: str) -> bool:
    """Same rule as the actuator: an explicit path, or an existing directory, is local."""
    return location.startswith(("/", ".", "~")) or Path(location).is_dir()


def repo_folder(repo_id: str, hub_dir: Path) -> Path:
    return hub_dir / ("models--" + repo_id.replace("/", "--"))


def training_files(filenames: list[str]) -> list[str]:
    """The files of a repo that loading it with transformers (PyTorch) can need."""
    keep = [f for f in filenames if not any(fnmatch.fnmatch(f, p) for p in IGNORE_PATTERNS)]
    top = {f for f in keep if "/" not in f}
    if "model.safetensors" in top or "model.safetensors.index.json" in top:
        duplicates = DUPLICATE_WEIGHT_PATTERNS
        keep = [f for f in keep if not any(fnmatch.fnmatch(f, p) for p in duplicates)]
    return keep


class CacheState(NamedTuple):
    complete: bool
    reason: str
    recorded: bool = False
    """True when a finished download recorded the file list (rule 1), not inferred (rule 2)."""


def cache_state(
    repo_id: str, hf_home: str | os.PathLike | None, revision: str = DEFAULT_REVISION
) -> CacheState:
    """Whether `repo_id` is complete in the hub cache of `hf_home`, and why; disk only."""
    repo_dir = repo_folder(repo_id, hub_cache_dir(hf_home))
    commit = resolve_commit(repo_dir, revision)
    if commit is None:
        return CacheState(False, f"not in the cache {repo_dir.parent}")
    snapshot = repo_dir / "snapshots" / commit
    if not snapshot.is_dir():
        return CacheState(False, f"refs/{revision} is {commit[:12]}, a snapshot not in the cache")
    marker = read_marker(repo_dir)
    if marker is not None and marker.get("commit") == commit:
        if marker.get("state") != "complete":
            return CacheState(False, "an earlier download did not finish; run the download again")
        missing = [f for f in marker.get("files", []) if not (snapshot / f).is_file()]
        if missing:
            return CacheState(False, f"{len(missing)} downloaded file(s) gone, e.g. {missing[0]}")
        count = len(marker.get("files", []))
        return CacheState(True, f"complete ({count} files, {commit[:12]})", recorded=True)
    problem = _structural_problem(repo_dir, snapshot)
    if problem:
        return CacheState(False, problem)
    return CacheState(True, f"config and weights present ({commit[:12]})")


def is_cached(
    repo_id: str, hf_home: str | os.PathLike | None, revision: str = DEFAULT_REVISION
) -> bool:
    """True when a training process with HF_HOME=hf_home can load repo_id offline."""
    return cache_state(repo_id, hf_home, revision).complete


def resolve_commit(repo_dir: Path, revision: str) -> str | None:
    if _COMMIT.match(revision):
        return revision
    try:
        commit = (repo_dir / "refs" / revision).read_text().strip()
    except OSError:
        return None
    return commit if _COMMIT.match(commit) else None


def _structural_problem(repo_dir: Path, snapshot: Path) -> str | None:
    if not (snapshot / "config.json").is_file():
        return "no config.json in the cached snapshot"
    for index in _INDEXES:
        if (snapshot / index).is_file():
            try:
                shards = set(json.loads((snapshot / index).read_text())["weight_map"].values())
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
                return f"unreadable {index}: {error}"
            missing = sorted(s for s in shards if not (snapshot / s).is_file())
            if missing:
                return f"{len(missing)} of {len(shards)} weight shards missing, e.g. {missing[0]}"
            break
    else:
        present = [p.name for p in snapshot.glob("*.safetensors") if p.is_file()]
        single = any((snapshot / name).is_file() for name in _SINGLE_WEIGHTS)
        if not single and not [n for n in present if not _SHARD.search(n)]:
            return "no weights file (model.safetensors, an index, ...) in the cached snapshot"
    if any((repo_dir / "blobs").glob("*.incomplete")):
        return "a download of this model is unfinished (.incomplete blobs)"
    return None


def read_marker(repo_dir: Path) -> dict | None:
    try:
        data = json.loads((repo_dir / MARKER_NAME).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_marker(
    repo_dir: Path, *, commit: str, revision: str, state: str, files: list[str]
) -> None:
    """Atomically record a download's state (see the module docstring)."""
    repo_dir.mkdir(parents=True, exist_ok=True)
    payload = {"revision": revision, "commit": commit, "state": state, "files": sorted(files)}
    write_atomically(repo_dir / MARKER_NAME, json.dumps(payload, indent=1))
