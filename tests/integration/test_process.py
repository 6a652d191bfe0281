"""The watchdog over real process groups: nothing outlives a measurement."""

import os
import sys
import textwrap
import time

import psutil

from ado_actuators.sfttrainer.execute.process import run_process

CHILD_SLEEPS = textwrap.dedent(
    """
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    open(sys.argv[1], "w").write(str(child.pid))
    print("started", flush=True)
    time.sleep(600)
    """
)


def test_a_silent_process_group_is_stopped_and_reported(tmp_path):
    pid_file = tmp_path / "child.pid"
    result = run_process(
        [sys.executable, "-c", CHILD_SLEEPS, str(pid_file)],
        env=dict(os.environ), cwd=tmp_path, log_path=tmp_path / "log", stall_timeout=2,
    )
    assert result.stopped_by_watchdog and "stall timeout 2 s" in result.stopped_by_watchdog
    child = int(pid_file.read_text())
    time.sleep(0.5)
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    assert "started" in result.log_tail()


def test_exit_status_signal_and_log_tail(tmp_path):
    ok = run_process([sys.executable, "-c", "print('hello')"], env=dict(os.environ),
                     cwd=tmp_path, log_path=tmp_path / "a.log", stall_timeout=30)
    assert ok.returncode == 0 and ok.stopped_by_watchdog is None and ok.log_tail() == "hello"
    killed = run_process([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
                         env=dict(os.environ), cwd=tmp_path, log_path=tmp_path / "b.log", stall_timeout=30)
    assert killed.signal_name == "SIGKILL"


def test_arguments_are_never_interpreted_by_a_shell(tmp_path):
    marker = tmp_path / "pwned"
    result = run_process([sys.executable, "-c", "import sys; print(sys.argv[1])", f"; touch {marker}"],
                         env=dict(os.environ), cwd=tmp_path, log_path=tmp_path / "c.log", stall_timeout=30)
    assert result.returncode == 0 and not marker.exists()
    assert result.log_tail() == f"; touch {marker}"


def test_progress_files_keep_a_quiet_process_alive(tmp_path):
    beat = tmp_path / "beat"
    beat.mkdir()
    script = f"import time, pathlib\nfor i in range(6):\n    pathlib.Path({str(beat)!r}, str(i)).touch(); time.sleep(0.5)"
    result = run_process([sys.executable, "-c", script], env=dict(os.environ), cwd=tmp_path,
                         log_path=tmp_path / "d.log", stall_timeout=2, activity_paths=(beat,))
    assert result.returncode == 0 and result.stopped_by_watchdog is None
