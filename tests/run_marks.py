"""What a test session starts, marked, so that the next session can clear it when this one
was killed before its finalizers ran.

A SIGKILLed pytest runs no teardown: its Ray clusters (`ray start` in sessions of their own),
`ado` operations and accelerate launchers keep running, and its temporary directories stay.
So every session owns ROOT/run-<pid>/ (a pytest-xdist worker: run-<controller pid>-gw<N>/,
owned by the controller, which is what gets killed), holding
- `owner`: the owner's pid and start time (a pid alone could be reused);
- `<pid>.pid`: a process a helper recorded (same format);
- `paths`: directories outside pytest's temporary directory to delete, one a line;
and every process the session starts, however deep, inherits MARK_ENV=<that directory> from
the session's environment. At its start a session clears every run whose owner is gone: it
kills what carries that run's mark or was recorded (SIGKILL: it ends stopped processes too)
and deletes the run's paths and directory. Runs whose owner is alive (another session of the
same user, now) are left alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path

import psutil

ROOTS_ENV = "ADO_SFTTRAINER_TEST_RUNS"  # another ROOT: tests of this module run sessions there
# fixed and per user (not tempfile's: the sessions point TMPDIR into pytest's directory)
ROOT = Path(os.environ.get(ROOTS_ENV) or f"/tmp/ado-sfttrainer-tests-{os.getuid()}")
MARK_ENV = "ADO_SFTTRAINER_TEST_RUN"


def _identity(pid: int) -> dict:
    return {"pid": pid, "started": psutil.Process(pid).create_time()}


def _running(record: dict | None) -> psutil.Process | None:
    """The process `record` names, if it still runs (not another that reused its pid)."""
    if not record:
        return None
    try:
        proc = psutil.Process(record["pid"])
        if proc.create_time() != record["started"] or proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except (psutil.Error, KeyError, TypeError):
        return None


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@dataclasses.dataclass(frozen=True)
class Run:
    directory: Path

    @classmethod
    def start(cls, root: Path = ROOT, owner: int | None = None, label: str | None = None) -> Run:
        """The run of `owner` (this process unless a test says otherwise); `label` tells apart
        the runs of one owner (pytest-xdist's workers)."""
        owner = os.getpid() if owner is None else owner
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        run = cls(root / f"run-{owner}{f'-{label}' if label else ''}")
        # The directory appears with its owner already in it: a session starting beside this
        # one (pytest-xdist's other worker) must never see a run without one and clear it.
        partial = Path(tempfile.mkdtemp(prefix=f".run-{owner}-", dir=root))
        (partial / "owner").write_text(json.dumps(_identity(owner)))
        shutil.rmtree(run.directory, ignore_errors=True)  # a pid reused since a killed run
        partial.rename(run.directory)
        return run

    def owner_alive(self) -> bool:
        return _running(_read(self.directory / "owner")) is not None

    def record_process(self, pid: int) -> None:
        (self.directory / f"{pid}.pid").write_text(json.dumps(_identity(pid)))

    def record_path(self, path: Path) -> None:
        with (self.directory / "paths").open("a") as paths:
            paths.write(f"{path}\n")

    def finish(self) -> None:
        """The session ended normally: its fixtures stopped and deleted what they started."""
        shutil.rmtree(self.directory, ignore_errors=True)


def current() -> Run | None:
    """The run of the session this process belongs to, for helpers that start things."""
    directory = os.environ.get(MARK_ENV)
    return Run(Path(directory)) if directory else None


def _marked(marks: set[str]) -> dict[int, psutil.Process]:
    """This user's processes whose environment carries one of `marks`."""
    found = {}
    for proc in psutil.process_iter(["uids"]):
        try:
            if proc.info["uids"].real != os.getuid():
                continue
            if proc.environ().get(MARK_ENV) in marks:
                found[proc.pid] = proc
        except (psutil.Error, AttributeError):  # gone, or not ours to read
            pass
    return found


def clear_leftovers(root: Path = ROOT, keep: Path | None = None) -> list[str]:
    """Kills what runs whose owner is gone left running and deletes their directories;
    returns one line per process killed or path deleted."""
    dead = [d for d in sorted(root.glob("run-*")) if d != keep and not _running(_read(d / "owner"))]
    if not dead:
        return []
    victims = _marked({str(d) for d in dead})
    for directory in dead:
        for pid_file in directory.glob("*.pid"):
            if proc := _running(_read(pid_file)):
                victims[proc.pid] = proc
    # never this process or its ancestors (a shell that kept a dead run's mark)
    me = psutil.Process()
    for pid in [me.pid, *(p.pid for p in me.parents())]:
        victims.pop(pid, None)
    cleared = []
    for proc in victims.values():
        try:
            line = " ".join(proc.cmdline())[:120]
            proc.kill()
            cleared.append(f"killed {proc.pid}: {line}")
        except psutil.Error:  # ended meanwhile
            pass
    psutil.wait_procs(list(victims.values()), timeout=10)
    for directory in dead:
        with contextlib.suppress(OSError):
            for line in (directory / "paths").read_text().splitlines():
                if Path(line).is_absolute():
                    shutil.rmtree(line, ignore_errors=True)
                    cleared.append(f"deleted {line}")
        shutil.rmtree(directory, ignore_errors=True)
        cleared.append(f"deleted {directory}")
    return cleared
