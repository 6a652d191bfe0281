"""Survey and fetch for `sfttrainer_download_hf_weights`: which entries are local, cached or to
fetch (disk only), then fetch the rest one model at a time with progress on stderr."""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from pathlib import Path

from ado_actuators.sfttrainer.cli import hf_fetch
from ado_actuators.sfttrainer.host.hf_cache import cache_state, is_local_location

# huggingface_hub is imported inside functions only: the command sets HF_XET_CACHE first.
PLAIN_PROGRESS_EVERY_S = 30.0


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str
    fmt: str
    location: str


@dataclasses.dataclass
class Row:
    entry: Entry
    status: str  # local | cached | fetched | would fetch | missing | failed
    reason: str


def survey(entries: list[Entry], hf_home: Path):
    """Rows for local paths and recorded-complete hub ids; the other hub ids, to fetch."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    rows: list[Row | None] = []
    pending: dict = {}
    for entry in entries:
        if is_local_location(entry.location):
            path = Path(entry.location).expanduser()
            if (path / "config.json").is_file():
                rows.append(Row(entry, "local", "config.json present"))
            elif path.is_dir():
                rows.append(Row(entry, "missing", f"no config.json in {path}"))
            else:
                rows.append(Row(entry, "missing", f"no such directory {path.absolute()}"))
            continue
        try:
            validate_repo_id(entry.location)
        except HFValidationError as err:
            reason = str(err).splitlines()[0]
            rows.append(Row(entry, "failed", f"not a directory and not a hub id: {reason}"))
            continue
        state = cache_state(entry.location, hf_home)
        if state.complete and state.recorded:
            rows.append(Row(entry, "cached", state.reason))
        else:
            rows.append(None)
            pending.setdefault(entry.location, state)
    return rows, pending


def fetch_all(
    pending: dict, hf_home: Path, *, dry_run: bool, token: str | None, max_workers: int
) -> dict[str, tuple[str, str]]:
    results: dict[str, tuple[str, str]] = {}
    endpoint = os.environ.get("HF_ENDPOINT") or None
    offline = hf_fetch.offline_mode()
    hub_dir = hf_home / "hub"
    blocked = "HF_HUB_OFFLINE is set, no downloads" if offline else None
    with _Progress() as progress:
        for repo_id, state in pending.items():
            if dry_run or blocked:
                if state.complete:
                    results[repo_id] = ("cached", f"{state.reason}; not checked against the hub")
                elif dry_run:
                    results[repo_id] = ("would fetch", state.reason)
                else:
                    results[repo_id] = ("failed", f"{_not_cached(state)}; {blocked}")
                continue
            try:
                plan = hf_fetch.plan_fetch(repo_id, token=token, endpoint=endpoint)
                hub_dir.mkdir(parents=True, exist_ok=True)
                started = time.monotonic()
                files, size = progress.run(
                    repo_id,
                    plan,
                    hub_dir,
                    lambda p=plan: hf_fetch.download(
                        p, hub_dir, token=token, endpoint=endpoint, max_workers=max_workers
                    ),
                )
            except hf_fetch.FetchError as err:
                if err.unreachable:
                    blocked = f"hub unreachable (as for {repo_id})"
                now = cache_state(repo_id, hf_home)
                results[repo_id] = (
                    ("cached", f"{now.reason}; not checked against the hub: {err}")
                    if now.complete
                    else ("failed", str(err))
                )
                continue
            except OSError as err:
                results[repo_id] = ("failed", hf_fetch.describe_error(err, endpoint))
                continue
            if files:
                took = time.monotonic() - started
                results[repo_id] = (
                    "fetched",
                    f"{files} files, {hf_fetch.human_bytes(size)} in {took:.0f} s",
                )
            else:
                results[repo_id] = (
                    "cached",
                    f"complete, checked against the hub "
                    f"({len(plan.files)} files, {plan.commit[:12]})",
                )
    return results


def _not_cached(state) -> str:
    return "not cached" if state.reason.startswith("not in the cache") else state.reason


class _Progress:
    """A rich bar per model on a terminal's stderr; plain lines every 30 s otherwise."""

    def __init__(self):
        from rich.console import Console

        self.console = Console(stderr=True)
        self.bar = None

    def __enter__(self):
        if self.console.is_terminal:
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self.bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                console=self.console,
            )
            self.bar.start()
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()

    def run(self, repo_id, plan, hub_dir, work):
        human_bytes, present_bytes = hf_fetch.human_bytes, hf_fetch.present_bytes
        outcome: dict = {}

        def target():
            try:
                outcome["value"] = work()
            except BaseException as err:
                outcome["error"] = err

        total = plan.total_bytes
        task = None
        if self.bar is not None:
            task = self.bar.add_task(repo_id, total=total or None)
        else:
            print(f"{repo_id}: {len(plan.files)} files, {human_bytes(total)}", file=sys.stderr)
        # A daemon thread: Ctrl-C reaches this thread at once and the command exits (130).
        worker = threading.Thread(target=target, name=f"fetch {repo_id}", daemon=True)
        worker.start()
        last_line = time.monotonic()
        while worker.is_alive():
            worker.join(0.5)
            done = present_bytes(plan, hub_dir)
            if task is not None:
                self.bar.update(task, completed=done)
            elif time.monotonic() - last_line >= PLAIN_PROGRESS_EVERY_S and worker.is_alive():
                last_line = time.monotonic()
                print(f"{repo_id}: {human_bytes(done)} of {human_bytes(total)}", file=sys.stderr)
        if task is not None:
            self.bar.update(task, completed=present_bytes(plan, hub_dir))
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]
