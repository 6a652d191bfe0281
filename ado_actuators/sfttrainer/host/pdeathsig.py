"""Tie a process's life to its parent's (Linux): a launcher or rank must not outlive the task
that started it, even when that task's worker is SIGKILLed and can run no clean-up."""

from __future__ import annotations

import ctypes
import signal
import sys

_PR_SET_PDEATHSIG = 1


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
