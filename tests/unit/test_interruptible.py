"""execute/interruptible.py: Ray's cooperative cancel (`_thread.interrupt_main()`) reaches a
task in a process that inherited SIGINT ignored, and the process's own choice is back after.
The real cancel of a node task on such a cluster: integration/test_multinode_stages.py."""

from __future__ import annotations

import signal
import subprocess
import sys

PROBE = """
import _thread, signal, time
from ado_actuators.sfttrainer.execute.interruptible import interruptible

def cancelled() -> bool:
    try:
        _thread.interrupt_main()  # what ray.cancel(ref, force=False) does in the worker
        time.sleep(0.2)
    except KeyboardInterrupt:
        return True
    return False

print("before", signal.getsignal(signal.SIGINT) is signal.SIG_IGN, cancelled())
with interruptible():
    print("inside", cancelled())
print("after", signal.getsignal(signal.SIGINT) is signal.SIG_IGN, cancelled())
"""


def ignoring_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_a_worker_that_inherited_sigint_ignored_is_cancelled_inside_and_ignores_it_after():
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=ignoring_sigint,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:3] == ["before True False", "inside True", "after True False"]
