"""Run one command line to completion under a watchdog; never leave it running."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import psutil

from ado_actuators.sfttrainer.host.pdeathsig import EXECUTOR_PID_ENV, die_with

TERMINATE_GRACE_SECONDS = 15.0

# Lines that never explain a failure: debug logging (file locks, tokenizer reprs), progress bars.
_CHATTER = re.compile(
    r"\[DEBUG\]|\bDEBUG\b[:\]]|^\s*\d+: AddedToken\(|\d+%\||examples/s\]|it/s\]|"
    r"You are resizing the embedding layer"
)
_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = ("The above exception was the direct cause", "During handling of the above exception")


def explaining_lines(text: str, lines: int = 40) -> list[str]:
    """The log lines that explain an ending: from the start of the last (chained) traceback
    when there is one, else the last `lines`; chatter dropped either way."""
    kept = [line for line in text.splitlines() if line.strip() and not _CHATTER.search(line)]
    starts = [i for i, line in enumerate(kept) if line.startswith(_TRACEBACK)]
    if not starts:
        return kept[-lines:]
    first = starts[-1]
    for earlier in reversed(starts[:-1]):
        between = kept[earlier:first]
        if not any(line.startswith(_CHAINED) for line in between):
            break
        first = earlier
    return kept[first:][-lines:]


@dataclasses.dataclass(frozen=True)
class ProcessResult:
    returncode: int
    stopped_by_watchdog: str | None  # why the watchdog ended it, if it did
    log_path: Path
    seconds: float

    @property
    def signal_name(self) -> str | None:
        if self.returncode < 0:
            return signal.Signals(-self.returncode).name
        # accelerate/torchrun report a child killed by signal N as exit code 128+N or as -N
        if self.returncode > 128 and self.returncode - 128 in signal.Signals._value2member_map_:
            return signal.Signals(self.returncode - 128).name
        return None

    def log_tail(self, lines: int = 25) -> str:
        return log_tail(self.log_path, lines)


def log_tail(log_path: Path, lines: int = 25) -> str:
    """The end of a log, reduced to what explains how the process ended."""
    try:
        with log_path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64_000))
            text = handle.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(explaining_lines(text, lines))


def _last_activity(paths: list[Path]) -> float:
    """Latest modification among `paths` and, for directories, the files directly in them."""
    times = []
    for path in paths:
        try:
            candidates = [path, *path.iterdir()] if path.is_dir() else [path]
        except OSError:
            continue
        for candidate in candidates:
            try:
                times.append(candidate.stat().st_mtime)
            except OSError:
                pass
    return max(times, default=0.0)


def _signal_group(process: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _descendants(process: subprocess.Popen) -> list[psutil.Process]:
    """The launcher's process tree now. torchrun starts each rank in a session of its own,
    so signalling the launcher's process group does not reach the ranks."""
    try:
        return psutil.Process(process.pid).children(recursive=True)
    except psutil.Error:
        return []


def _signal_all(processes: list[psutil.Process], sig: signal.Signals) -> None:
    for proc in processes:
        try:
            proc.send_signal(sig)
        except psutil.Error:
            pass


def _stop_group(process: subprocess.Popen) -> None:
    """SIGTERM the launcher's group and every rank (each writes its report), SIGKILL all of
    them after a grace."""
    tree = _descendants(process)
    _signal_group(process, signal.SIGTERM)
    _signal_all(tree, signal.SIGTERM)
    try:
        process.wait(timeout=TERMINATE_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        pass
    psutil.wait_procs(tree, timeout=max(1.0, TERMINATE_GRACE_SECONDS / 3))
    # Even when the launcher exited, ranks of its tree may linger.
    _signal_group(process, signal.SIGKILL)
    _signal_all(tree + _descendants(process), signal.SIGKILL)
    process.wait()


def run_process(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: Path,
    log_path: Path,
    stall_timeout: float,
    activity_paths: tuple[Path, ...] = (),
    poll_seconds: float = 0.5,
) -> ProcessResult:
    """Run `argv` (never through a shell), logging stdout+stderr to `log_path`.

    The watchdog stops the process group when neither the log nor any of `activity_paths`
    changed for `stall_timeout` seconds: a rank stuck in a collective or a hung loader
    must not hold an operation forever.
    """
    started = time.monotonic()
    executor = os.getpid()
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            env={**env, EXECUTOR_PID_ENV: str(executor)},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # If the worker running this is SIGKILLed, the launcher dies with it (each rank
            # does the same towards the launcher: trainer/__main__.py).
            preexec_fn=functools.partial(die_with, executor),
        )
    watched = [log_path, *activity_paths]
    stopped_by = None
    try:
        last_seen = time.time()
        while process.poll() is None:
            # returns as soon as the process exits: no measurement waits out a poll interval
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=poll_seconds)
            last_seen = max(last_seen, _last_activity(watched))
            idle = time.time() - last_seen
            if idle > stall_timeout:
                stopped_by = (
                    f"no output or progress for {idle:.0f} s (stall timeout {stall_timeout:.0f} s)"
                )
                _stop_group(process)
                break
    finally:
        if process.poll() is None:
            _stop_group(process)
        # Nothing of the launcher's group outlives it; ranks that torchrun put in sessions of
        # their own die with the launcher (their parent-death signal).
        _signal_group(process, signal.SIGKILL)
    return ProcessResult(
        returncode=process.wait(),
        stopped_by_watchdog=stopped_by,
        log_path=log_path,
        seconds=time.monotonic() - started,
    )
