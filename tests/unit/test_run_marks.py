"""A test session killed halfway leaves nothing to the next (tests/run_marks.py), on real
processes: the next session kills what the dead one started and deletes its directories, and
leaves alone what a session still running started."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import run_marks

REPO = Path(__file__).resolve().parents[2]
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


@pytest.fixture
def spawn():
    """Starts processes in sessions of their own (as `ray start` does, out of reach of their
    parent's group); kills whatever of them is left when the test ends, passed or not."""
    started: list[subprocess.Popen] = []

    def start(argv=SLEEPER, **options) -> subprocess.Popen:
        started.append(subprocess.Popen(argv, start_new_session=True, **options))
        return started[-1]

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()  # SIGKILL ends a stopped process too
        proc.wait()


def ended(proc: subprocess.Popen, timeout: float = 30) -> bool:
    """Whether `proc` ended (the SIGKILL was sent before; this only lets the kernel finish)."""
    try:
        proc.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


def test_what_a_dead_session_left_is_killed_and_deleted_a_live_ones_kept(tmp_path, spawn):
    root = tmp_path / "runs"
    owner = spawn()
    dead = run_marks.Run.start(root, owner=owner.pid)
    owner.kill()
    owner.wait()  # the killed pytest
    recorded = spawn()  # a `ray start --block` the dead session recorded
    dead.record_process(recorded.pid)
    marked = spawn(
        env={**os.environ, run_marks.MARK_ENV: str(dead.directory)}
    )  # deeper: marked only
    stopped = spawn(env={**os.environ, run_marks.MARK_ENV: str(dead.directory)})
    stopped.send_signal(signal.SIGSTOP)  # a rank a test stopped, then died before resuming
    leftover_dir = tmp_path / "sftc-cluster"
    leftover_dir.mkdir()
    dead.record_path(leftover_dir)

    alive_owner = spawn()  # another session of this user, still running
    alive = run_marks.Run.start(root, owner=alive_owner.pid)
    theirs = spawn(env={**os.environ, run_marks.MARK_ENV: str(alive.directory)})
    alive.record_process(theirs.pid)
    mine = run_marks.Run.start(root)

    cleared = run_marks.clear_leftovers(root, keep=mine.directory)

    assert all(ended(p) for p in (recorded, marked, stopped)), cleared
    assert not leftover_dir.exists() and not dead.directory.exists()
    assert theirs.poll() is None and alive.directory.exists() and mine.directory.exists()
    assert sorted(line.split(":")[0] for line in cleared if line.startswith("killed")) == sorted(
        f"killed {p.pid}" for p in (recorded, marked, stopped)
    )


def test_a_reused_pid_is_not_taken_for_the_recorded_process(tmp_path, spawn):
    root = tmp_path / "runs"
    owner = spawn()
    dead = run_marks.Run.start(root, owner=owner.pid)
    owner.kill()
    owner.wait()
    bystander = spawn()
    dead.record_process(bystander.pid)
    # as if the recorded process had ended and the pid now named another: another start time
    record = dead.directory / f"{bystander.pid}.pid"
    record.write_text(record.read_text().replace('"started": ', '"started": 1'))
    run_marks.clear_leftovers(root)
    assert bystander.poll() is None and not dead.directory.exists()


def test_every_process_the_session_starts_carries_its_mark(marked_run):
    shown = subprocess.run(
        [sys.executable, "-c", f"import os; print(os.environ[{run_marks.MARK_ENV!r}])"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.strip() == str(marked_run.directory)
    assert marked_run.directory.is_dir() and (marked_run.directory / "owner").is_file()


# A session of this suite's own conftest, as `make test` starts it, in a root of its own.
INNER_TEST = textwrap.dedent(
    """
    import os, pathlib, subprocess, sys, time

    def test_starts_a_cluster_then_hangs():
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                 start_new_session=True)
        pathlib.Path(os.environ["LEFTOVER_PID"]).write_text(str(child.pid))
        time.sleep(600)

    def test_nothing():
        pass
    """
)


@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["one-process", "xdist"])
def test_a_session_after_a_killed_one_starts_clean(tmp_path, spawn, workers):
    """Killed: the pytest a user or CI kills (with xdist, the controller; its worker is then
    orphaned and winds down on its own for seconds, and must not keep or delete its run)."""
    (tmp_path / "test_inner.py").write_text(INNER_TEST)
    pid_file = tmp_path / "leftover.pid"
    env = {
        **os.environ,
        run_marks.ROOTS_ENV: str(tmp_path / "runs"),
        "LEFTOVER_PID": str(pid_file),
        "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
    }
    pytest_argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "conftest",
        "--rootdir",
        str(tmp_path),
        str(tmp_path / "test_inner.py"),
    ]
    first = spawn(
        [*pytest_argv, *workers, "-k", "hangs"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120  # a guard against a hang, not a speed claim
    while not pid_file.exists():
        assert first.poll() is None and time.monotonic() < deadline, (
            "the first session never started it"
        )
        time.sleep(0.1)
    leftover = psutil.Process(int(pid_file.read_text()))
    orphans = psutil.Process(first.pid).children()  # xdist's worker
    first.kill()  # SIGKILL: no finalizer runs
    first.wait()
    try:
        assert leftover.is_running()  # what the next session must clear
        second = subprocess.run(
            [*pytest_argv, "-k", "nothing"], cwd=REPO, env=env, capture_output=True, text=True
        )
        assert second.returncode == 0, second.stdout + second.stderr
        assert "cleared what killed test sessions left" in second.stdout  # the warnings summary
        assert f"killed {leftover.pid}:" in second.stdout
        assert not leftover.is_running() or leftover.status() == psutil.STATUS_ZOMBIE
        # the first session's run cleared, the second's own deleted as it ended
        assert [p.name for p in (tmp_path / "runs").iterdir()] == []
    finally:
        for proc in [leftover, *orphans]:
            with contextlib.suppress(psutil.Error):
                proc.kill()
