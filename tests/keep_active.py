"""Progress a test makes itself, for the stall watchdog (ado_actuators/sfttrainer/execute/process.py).

The watchdog stops a process whose log and activity directories stay unchanged for the stall
timeout. How long a process takes to start (or a helper thread to find it) depends on the
machine; a test that must not depend on it keeps the process's activity directory fresh
itself, for as long as it chooses: silence then begins when the test says, not when the
machine gets round to it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path

TOUCH_EVERY = 0.1  # seconds: a small fraction of any stall timeout a test configures
MARK = "test-activity"  # never a rank report's name (rank-*.json), so readers skip it


class KeepActive(threading.Thread):
    """Touches MARK in each directory `directories()` returns, every TOUCH_EVERY seconds,
    while the `with` block runs. Directories that do not exist (yet) are skipped."""

    def __init__(self, directories: Callable[[], Iterable[Path]]) -> None:
        super().__init__(daemon=True)
        self.directories = directories
        self._stop_requested = threading.Event()

    def run(self) -> None:
        while True:
            for directory in self.directories():
                try:
                    (directory / MARK).touch()
                except OSError:  # not there yet, or already removed
                    pass
            if self._stop_requested.wait(TOUCH_EVERY):
                return

    def __enter__(self) -> KeepActive:
        self.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._stop_requested.set()
        self.join()
