"""Lets Ray's cooperative cancel reach a node task, whatever the worker inherited.

`ray.cancel(ref, force=False)` stops a running task by `_thread.interrupt_main()`, which
raises KeyboardInterrupt only where SIGINT runs Python's handler. A process that starts with
SIGINT ignored keeps it ignored, and so do its children: every worker of a cluster started
from a background job of a non-interactive shell (POSIX ignores SIGINT there), under nohup, or
by a supervisor that ignores it. In those workers the cancel did nothing; the peer of a failed
node then waited out stages.CANCEL_GRACE_SECONDS and was killed with what its ranks reported
(measured: a cluster started by `ray start … &` lost every cancelled node's GPU OOM).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Python's SIGINT handler for the duration (then the previous one again). Only the main
    thread can set handlers; Ray runs a task there, anything else is left as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
