"""Tie a process's life to its parent's (Linux): a launcher or rank must not outlive the task
that started it, even when that task's worker is SIGKILLed and can run no clean-up."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

import psutil

_PR_SET_PDEATHSIG = 1

# The pid of the process that started the launcher (execute/process.py sets it): a rank checks
# that it still descends from it.
EXECUTOR_PID_ENV = "SFTTRAINER_EXECUTOR_PID"


def die_with_parent(sig: signal.Signals = signal.SIGKILL) -> bool:
    """Ask the kernel to send `sig` to this process when its parent thread exits.

    Returns False where unsupported (not Linux, no libc): the caller's own clean-up then
    remains the only safeguard."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with(parent_pid: int) -> None:
    """die_with_parent, from a child of `parent_pid` right after the fork: exit at once if that
    parent is already gone (it died between fork and the request; no signal would come).
    Only getppid and prctl: safe between fork and exec."""
    if die_with_parent() and os.getppid() != parent_pid:
        os._exit(1)


def die_with_executor() -> None:
    """die_with_parent, then exit at once if the executor named in the environment is no
    longer among this process's ancestors.

    The kernel only signals a death that happens after the request. A launcher SIGKILLed
    while its rank was still starting (seconds of imports on busy cores) leaves the rank
    re-parented, with no signal to come, waiting on a rendezvous store that died with the
    launcher: seen in the overnight test as two ranks outliving ado's re-run."""
    die_with_parent()
    executor = os.environ.get(EXECUTOR_PID_ENV)
    if executor and int(executor) not in {p.pid for p in psutil.Process().parents()}:
        os._exit(1)
