"""Fetch one hub model into a hub cache, for `sfttrainer_download_hf_weights`.

huggingface_hub writes each file to `blobs/<etag>.incomplete`, renames it when whole and only
then links it into `snapshots/<commit>/`, so a file in a snapshot is always whole; the
snapshot *as a set* is not, which is why the download is bracketed by the
"incomplete"/"complete" marker of `hf_cache`.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import glob
import os
import re
import shutil
from pathlib import Path

from ado_actuators.sfttrainer.host.hf_cache import (
    DEFAULT_REVISION,
    repo_folder,
    training_files,
    write_marker,
)

API_TIMEOUT_S = 20.0


class FetchError(Exception):
    """A model could not be fetched; str() is the reason for the summary table."""

    def __init__(self, reason: str, *, unreachable: bool = False):
        super().__init__(reason)
        self.unreachable = unreachable


@dataclasses.dataclass
class FetchPlan:
    repo_id: str
    commit: str
    files: list[str]
    sizes: dict[str, int]

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes.get(f, 0) for f in self.files)


def offline_mode() -> bool:
    """HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE, read now (huggingface_hub reads them at import)."""
    from huggingface_hub import constants

    values = (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"))
    return constants.HF_HUB_OFFLINE or any(
        (v or "").strip().upper() in ("1", "ON", "YES", "TRUE") for v in values
    )


def plan_fetch(repo_id: str, *, token: str | None, endpoint: str | None) -> FetchPlan:
    """Ask the hub for the current commit and file list (one API call)."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint, token=token)
    try:
        info = api.model_info(
            repo_id, revision=DEFAULT_REVISION, files_metadata=True, timeout=API_TIMEOUT_S
        )
        siblings = info.siblings or []
        names = [s.rfilename for s in siblings]
        if not names:
            names = api.list_repo_files(repo_id, revision=info.sha)
    except Exception as error:
        raise FetchError(describe_error(error, endpoint), unreachable=_unreachable(error)) from None
    files = training_files(names)
    if "config.json" not in files:
        raise FetchError("the repository has no config.json: not a transformers model")
    if info.sha is None:  # the snapshot's directory is named by the commit: none, no download
        raise FetchError("the hub named no commit of the repository; run the download again")
    sizes = {s.rfilename: int(s.size or 0) for s in siblings}
    return FetchPlan(repo_id=repo_id, commit=info.sha, files=files, sizes=sizes)


def present_bytes(plan: FetchPlan, hub_dir: Path) -> int:
    """Bytes of the plan already on disk, counting partly downloaded blobs (for progress)."""
    repo_dir = repo_folder(plan.repo_id, hub_dir)
    snapshot = repo_dir / "snapshots" / plan.commit
    done = sum(plan.sizes.get(f, 0) for f in plan.files if (snapshot / f).is_file())
    for partial in (repo_dir / "blobs").glob("*.incomplete"):
        try:
            done += partial.stat().st_size
        except OSError:
            pass
    return min(done, plan.total_bytes)


def download(
    plan: FetchPlan, hub_dir: Path, *, token: str | None, endpoint: str | None, max_workers: int
) -> tuple[int, int]:
    """Download the plan's missing files; returns (files, bytes) fetched. Raises FetchError."""
    from huggingface_hub import snapshot_download

    repo_dir = repo_folder(plan.repo_id, hub_dir)
    snapshot = repo_dir / "snapshots" / plan.commit
    missing = [f for f in plan.files if not (snapshot / f).is_file()]
    needed = sum(plan.sizes.get(f, 0) for f in missing)
    free = _free_bytes(hub_dir)
    if free is not None and needed > free:
        raise FetchError(
            f"disk full: needs {human_bytes(needed)}, {human_bytes(free)} free in {hub_dir}"
        )
    marker = functools.partial(
        write_marker, repo_dir, commit=plan.commit, revision=DEFAULT_REVISION, files=plan.files
    )
    try:
        marker(state="incomplete")
        if missing:
            result = snapshot_download(
                plan.repo_id,
                revision=DEFAULT_REVISION,
                cache_dir=hub_dir,
                token=token,
                endpoint=endpoint,
                max_workers=max_workers,
                allow_patterns=[glob.escape(f) for f in plan.files],
            )
            if Path(result).name != plan.commit:
                raise FetchError(
                    f"the repository changed on the hub during the download "
                    f"({plan.commit[:12]} -> {Path(result).name[:12]}); run the download again"
                )
        still = [f for f in plan.files if not (snapshot / f).is_file()]
        if still:
            raise FetchError(f"download incomplete: {len(still)} file(s) missing, e.g. {still[0]}")
        marker(state="complete")
    except FetchError:
        raise
    except Exception as error:
        raise FetchError(describe_error(error, endpoint), unreachable=_unreachable(error)) from None
    return len(missing), needed


def _free_bytes(path: Path) -> int | None:
    for candidate in (path, *path.parents):
        if candidate.exists():
            try:
                return shutil.disk_usage(candidate).free
            except OSError:
                return None
    return None


def human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _unreachable(error: BaseException) -> bool:
    import requests
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    if isinstance(error, OfflineModeIsEnabled) or isinstance(error.__cause__, OfflineModeIsEnabled):
        return False
    network = (requests.ConnectionError, requests.Timeout, ConnectionError, TimeoutError)
    return isinstance(error, (*network, LocalEntryNotFoundError)) or isinstance(
        error.__cause__, network
    )


def describe_error(error: BaseException, endpoint: str | None) -> str:
    """One line for the summary table: what went wrong and what to do."""
    import requests
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        DisabledRepoError,
        GatedRepoError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = endpoint or constants.ENDPOINT
    if isinstance(error, OfflineModeIsEnabled) or isinstance(error.__cause__, OfflineModeIsEnabled):
        return "HF_HUB_OFFLINE is set: downloads are disabled"
    if _unreachable(error):
        return f"hub unreachable ({where}): {_network_cause(error)}"
    if isinstance(error, GatedRepoError):
        return "gated repository: accept its terms on the hub, then pass --token or set HF_TOKEN"
    if isinstance(error, RepositoryNotFoundError):
        return "repository not found on the hub (private? pass --token or set HF_TOKEN)"
    if isinstance(error, RevisionNotFoundError):
        return f"revision {DEFAULT_REVISION!r} not found on the hub"
    if isinstance(error, DisabledRepoError):
        return "repository disabled on the hub"
    if isinstance(error, HfHubHTTPError):
        status = getattr(error.response, "status_code", None)
        if status in (401, 403):
            return f"not authorised (HTTP {status}): check --token / HF_TOKEN"
        return f"hub error (HTTP {status}): {_first_line(error)}"
    if isinstance(error, requests.RequestException):
        text = str(error)
        dropped = "Connection broken" in text
        cause = "the connection dropped mid-file" if dropped else _first_line(error)
        return f"download interrupted: {cause}; run again to resume"
    if isinstance(error, OSError) and error.errno is not None:
        kind = "disk full" if error.errno in (errno.ENOSPC, errno.EDQUOT) else "disk error"
        where = f" ({error.filename})" if error.filename else ""
        return f"{kind}: {error.strerror or error}{where}"
    return f"{type(error).__name__}: {_first_line(error)}"


def _network_cause(error: BaseException) -> str:
    text = f"{error} {error.__cause__ or ''}"
    if re.search(r"NameResolution|Failed to resolve|Name or service not known|getaddrinfo", text):
        return "cannot resolve the host name (no network or no DNS?)"
    if "Connection refused" in text:
        return "connection refused"
    if re.search(r"[Tt]imed? ?out", text):
        return "connection timed out"
    return _first_line(error.__cause__ or error)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:200] if text else type(error).__name__
