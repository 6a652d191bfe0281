"""The watchdog over real process groups: nothing outlives a measurement.

The watchdog acts on wall-clock silence, so these tests decide when silence begins: until then
the test keeps an activity directory fresh itself (tests/keep_active.py), and how fast the
machine starts a process does not matter.
"""

import os
import subprocess
import sys
import textwrap
import time

import psutil
from keep_active import KeepActive  # pytest puts tests/ on sys.path

from ado_actuators.sfttrainer.execute.process import run_process
from ado_actuators.sfttrainer.host.pdeathsig import EXECUTOR_PID_ENV

STALL = 2  # seconds: the tests wait it out once or thrice
NEVER = 3600  # a stall timeout the processes that end by themselves never come near

CHILD_SLEEPS = textwrap.dedent(
    """
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    open(sys.argv[1], "w").write(str(child.pid))
    print("started", flush=True)
    time.sleep(600)
    """
)


def gone_or_zombie(pid: int, timeout: float = 30) -> bool:
    """Whether `pid` has ended, waiting for the kernel to finish a SIGKILL already sent."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_a_silent_process_group_is_stopped_and_reported(tmp_path):
    pid_file, log = tmp_path / "child.pid", tmp_path / "log"
    beat = tmp_path / "beat"
    beat.mkdir()
    # silent from the moment the grandchild is recorded and the script said so
    with KeepActive(lambda: [] if log.exists() and "started" in log.read_text() else [beat]):
        result = run_process(
            [sys.executable, "-c", CHILD_SLEEPS, str(pid_file)],
            env=dict(os.environ),
            cwd=tmp_path,
            log_path=log,
            stall_timeout=STALL,
            activity_paths=(beat,),
        )
    assert result.stopped_by_watchdog and f"stall timeout {STALL} s" in result.stopped_by_watchdog
    assert result.seconds >= STALL  # never before the configured silence
    # the grandchild, in the launched process's group, did not outlive it
    assert gone_or_zombie(int(pid_file.read_text()))
    # the whole log: under coverage, the SIGTERMed child's coverage save may append a
    # traceback that pushes "started" out of the tail
    assert "started" in log.read_text()


def test_exit_status_signal_and_log_tail(tmp_path):
    ok = run_process(
        [sys.executable, "-c", "print('hello')"],
        env=dict(os.environ),
        cwd=tmp_path,
        log_path=tmp_path / "a.log",
        stall_timeout=NEVER,
    )
    assert ok.returncode == 0 and ok.stopped_by_watchdog is None and ok.log_tail() == "hello"
    killed = run_process(
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
        env=dict(os.environ),
        cwd=tmp_path,
        log_path=tmp_path / "b.log",
        stall_timeout=NEVER,
    )
    assert killed.signal_name == "SIGKILL"


def test_arguments_are_never_interpreted_by_a_shell(tmp_path):
    marker = tmp_path / "pwned"
    result = run_process(
        [sys.executable, "-c", "import sys; print(sys.argv[1])", f"; touch {marker}"],
        env=dict(os.environ),
        cwd=tmp_path,
        log_path=tmp_path / "c.log",
        stall_timeout=NEVER,
    )
    assert result.returncode == 0 and not marker.exists()
    assert result.log_tail() == f"; touch {marker}"


def test_progress_files_keep_a_quiet_process_alive(tmp_path):
    beat = tmp_path / "beat"
    beat.mkdir()
    # silent for three stall timeouts, while its progress (here the test's) goes on
    script = f"import time; time.sleep({3 * STALL})"
    with KeepActive(lambda: [beat]):
        result = run_process(
            [sys.executable, "-c", script],
            env=dict(os.environ),
            cwd=tmp_path,
            log_path=tmp_path / "d.log",
            stall_timeout=STALL,
            activity_paths=(beat,),
        )
    assert result.returncode == 0 and result.stopped_by_watchdog is None
    assert result.seconds >= 3 * STALL


def rank_without_arguments(executor_pid: int) -> subprocess.CompletedProcess:
    """The trainer's entry point as a launcher starts a rank, told which executor it descends from."""
    env = {**os.environ, EXECUTOR_PID_ENV: str(executor_pid)}
    return subprocess.run(
        [sys.executable, "-m", "ado_actuators.sfttrainer.trainer"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_rank_whose_executor_is_not_its_ancestor_exits_before_its_imports():
    # A launcher SIGKILLed while its rank was still importing leaves the rank re-parented, out
    # of reach of the parent-death signal it had not yet asked for. A live process that is not
    # an ancestor stands in for that executor, so the outcome does not depend on a race.
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        orphan = rank_without_arguments(stranger.pid)
    finally:
        stranger.kill()
        stranger.wait()
    # exit 1 and silent: it never reached the argument parsing that would print its usage (2)
    assert (orphan.returncode, orphan.stdout, orphan.stderr) == (1, "", "")


def test_a_rank_that_descends_from_its_executor_runs_on():
    descendant = rank_without_arguments(os.getpid())
    assert (
        descendant.returncode == 2 and "--sfttrainer_job" in descendant.stdout + descendant.stderr
    )


def test_the_launcher_is_told_which_executor_it_descends_from(tmp_path):
    log = tmp_path / "log"
    script = f"import os; print(os.environ[{EXECUTOR_PID_ENV!r}])"
    result = run_process(
        [sys.executable, "-c", script],
        env=dict(os.environ),
        cwd=tmp_path,
        log_path=log,
        stall_timeout=NEVER,
    )
    assert result.returncode == 0 and log.read_text().split() == [str(os.getpid())]
