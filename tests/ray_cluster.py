"""A real multi-node Ray cluster on this machine: a head (`ray start --head`, job server
included) plus worker nodes (`ray start --address ...`), each a raylet with its own custom
resources. Started with `--block` in their own sessions and stopped by pid, never `ray stop`
(which would stop every cluster on the machine). Each cluster's directory and starters are
recorded in the session's run (tests/run_marks.py): a killed session's clusters are stopped
by the next one."""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import run_marks

from ado_actuators.sfttrainer.execute.workspace import free_port
from ado_actuators.sfttrainer.plan.launch.launch_plan import FULL_WORKER

RAY = str(Path(sys.executable).with_name("ray"))
NODE_IP = "127.0.0.1"
WORKER_PORTS = 60
"""Each raylet's worker port range: min to min + WORKER_PORTS."""


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((NODE_IP, port))
        except OSError:
            return False
    return True


def _as_a_background_job() -> None:
    """SIGINT ignored, as in every process of a cluster started by `ray start … &` from a
    script (POSIX), nohup or some supervisors: what the product must work under
    (execute/interruptible.py), and the same however this pytest was started."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@dataclasses.dataclass
class RayCluster:
    temp_dir: Path  # short: Ray's socket paths must stay under 107 bytes
    gcs_port: int
    dashboard_port: int
    env: dict[str, str]
    starters: list[subprocess.Popen] = dataclasses.field(default_factory=list)
    taken: set[int] = dataclasses.field(default_factory=set)
    worker_ranges: list[tuple[int, int]] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self.taken |= {self.gcs_port, self.dashboard_port}

    @property
    def address(self) -> str:
        return f"{NODE_IP}:{self.gcs_port}"

    @property
    def job_server(self) -> str:
        return f"http://{NODE_IP}:{self.dashboard_port}"

    @property
    def auth_env(self) -> dict[str, str]:
        """What a process needs to join this cluster besides its address."""
        return {k: self.env[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}

    @property
    def client_env(self) -> dict[str, str]:
        """For a process that attaches to this cluster (ado, ray job submit)."""
        return {**self.env, "RAY_ADDRESS": self.address}

    def _port(self, also: Callable[[int], bool]) -> int:
        """A free port outside every worker port range and not taken yet, that `also` accepts."""
        while True:
            port = free_port()
            if (
                port not in self.taken
                and also(port)
                and not any(low <= port <= high for low, high in self.worker_ranges)
            ):
                self.taken.add(port)
                return port

    def _worker_range(self) -> int:
        """The first port of a raylet's worker port range. Ray refuses a node whose ports fall
        in a worker port range (its own or, at run time, another raylet's), and a worker
        cannot bind a port that something else holds. So the ranges lie below the kernel's
        ephemeral ports (where every other port of a test cluster, and every outgoing
        connection, comes from), in a slice of their own per pytest-xdist worker: clusters of
        sessions running side by side never share a port."""
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
        worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
        slices, low = 8, 10_000
        width = (ephemeral - low) // slices
        start = low + (int(worker) % slices if worker.isdigit() else 0) * width
        while True:
            minimum = secrets.randbelow(width - WORKER_PORTS) + start
            last = minimum + WORKER_PORTS
            overlaps = any(minimum <= b and a <= last for a, b in self.worker_ranges)
            if not overlaps and all(_bindable(p) for p in range(minimum, last + 1)):
                return minimum

    def _start(self, extra: list[str], resources: dict[str, float], cpus: int, log: str) -> None:
        ports = [
            "--node-manager-port",
            "--object-manager-port",
            "--dashboard-agent-grpc-port",
            "--dashboard-agent-listen-port",
            "--metrics-export-port",
            "--runtime-env-agent-port",
        ]
        argv = [
            RAY,
            "start",
            "--block",
            "--node-ip-address",
            NODE_IP,
            "--num-cpus",
            str(cpus),
            "--num-gpus",
            "0",
            "--resources",
            json.dumps(resources),
            "--object-store-memory",
            str(80 * 1024**2),
            "--disable-usage-stats",
            *extra,
        ]
        minimum = self._worker_range()
        self.worker_ranges.append((minimum, minimum + WORKER_PORTS))
        argv += [
            "--min-worker-port",
            str(minimum),
            "--max-worker-port",
            str(minimum + WORKER_PORTS),
        ]
        for flag in ports:
            argv += [flag, str(self._port(lambda p: True))]
        with (self.temp_dir.parent / log).open("wb") as out:
            self.starters.append(
                subprocess.Popen(
                    argv,
                    env=self.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    preexec_fn=_as_a_background_job,
                )
            )
        if run := run_marks.current():
            run.record_process(self.starters[-1].pid)

    def start(self, nodes: list[dict[str, float]], cpus: int = 4, timeout: float = 300) -> None:
        head, *workers = nodes
        self._start(
            [
                "--head",
                "--port",
                str(self.gcs_port),
                "--temp-dir",
                str(self.temp_dir),
                "--include-dashboard",
                "true",
                "--dashboard-host",
                NODE_IP,
                "--dashboard-port",
                str(self.dashboard_port),
                "--ray-client-server-port",
                str(self._port(lambda p: True)),
            ],
            head,
            cpus,
            "head.log",
        )
        self.wait_for_nodes(1, timeout)
        for index, resources in enumerate(workers, start=1):
            # its own temp dir: raylets sharing one would build a job's runtime environment
            # into the same directory at once (a real cluster's nodes never share one)
            self._start(
                ["--address", self.address, "--temp-dir", f"{self.temp_dir}-w{index}"],
                resources,
                cpus,
                f"worker-{index}.log",
            )
        self.wait_for_nodes(len(nodes), timeout)

    def wait_for_nodes(self, count: int, timeout: float) -> None:
        probe = (
            "import ray, sys; ray.init(logging_level='ERROR');"
            "print(sum(n['Alive'] for n in ray.nodes()))"
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for starter in self.starters:
                if starter.poll() is not None:
                    raise RuntimeError(f"ray start exited {starter.returncode}: {self.logs()}")
            remaining = max(1.0, deadline - time.monotonic())
            try:  # a probe that cannot reach the GCS yet (a loaded machine) is a "not yet"
                result = subprocess.run(
                    [sys.executable, "-c", probe],
                    env=self.client_env,
                    capture_output=True,
                    text=True,
                    timeout=remaining,
                )
            except subprocess.TimeoutExpired:
                continue
            if result.returncode == 0 and result.stdout.strip().splitlines()[-1:] == [str(count)]:
                return
            time.sleep(1)
        raise TimeoutError(f"{count} Ray nodes did not come up in {timeout} s: {self.logs()}")

    def logs(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-3000:] for p in self.temp_dir.parent.glob("*.log")
        )

    def processes(self) -> list[psutil.Process]:
        """Every process of this cluster: the starters' trees and whatever names its temp dir."""
        found: dict[int, psutil.Process] = {}
        for starter in self.starters:
            try:
                root = psutil.Process(starter.pid)
                for proc in [root, *root.children(recursive=True)]:
                    found[proc.pid] = proc
            except psutil.NoSuchProcess:
                pass
        marker = str(self.temp_dir)
        for proc in psutil.process_iter(["pid", "cmdline"]):
            if any(marker in part for part in proc.info["cmdline"] or ()):
                found[proc.pid] = proc
        return list(found.values())

    def stop(self) -> None:
        """SIGTERM each `ray start --block` (it stops its node), then SIGKILL what is left."""
        leftovers = self.processes()
        for starter in reversed(self.starters):
            if starter.poll() is None:
                starter.send_signal(signal.SIGTERM)
        # a worker node that served a job's runtime environment was seen still running 30 s
        # after SIGTERM, and a head after one was never seen to stop: a test cluster's state is
        # not worth waiting for (an idle one stops in about 3 s)
        deadline = time.monotonic() + 5
        for starter in reversed(self.starters):
            try:
                starter.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in leftovers + self.processes():
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(leftovers, timeout=10)
        # deleted beside the next test: a cluster that built a job's runtime environment
        # leaves a directory that took 14 s to delete (a non-daemon thread: the interpreter
        # waits for it at exit)
        threading.Thread(
            target=shutil.rmtree, args=(self.temp_dir.parent,), kwargs={"ignore_errors": True}
        ).start()


def start_cluster(
    nodes: list[dict[str, float]], env: dict[str, str] | None = None, cpus: int = 4
) -> RayCluster:
    """`nodes`: the custom resources of each node, head first; each node offers `cpus` CPUs."""
    root = Path(tempfile.mkdtemp(prefix="sftc-", dir="/tmp"))
    if run := run_marks.current():
        run.record_path(root)
    # RAY_memory_monitor_refresh_ms=0: on a machine shared with other test runs, Ray's OOM
    # killer would pick this cluster's workers for memory others use.
    # Token authentication with a token of its own (`ray start` never creates one: without
    # RAY_AUTH_TOKEN it needs ~/.ray/auth_token, which only an earlier local ray.init() writes).
    environ = {
        **os.environ,
        **(env or {}),
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "RAY_memory_monitor_refresh_ms": "0",
    }
    environ.pop("RAY_ADDRESS", None)
    cluster = RayCluster(
        temp_dir=root / "r", gcs_port=free_port(), dashboard_port=free_port(), env=environ
    )
    try:
        cluster.start(nodes, cpus=cpus)
    except BaseException:
        cluster.stop()
        raise
    return cluster


REPO = Path(__file__).resolve().parents[1]
WHOLE_MACHINE = {FULL_WORKER: 1.0}
"""What each node of the two-node cluster offers: the custom resource a multi-node measurement
asks each node for (docs/guide/ray-clusters.md starts GPU nodes with the same name)."""
HOOKS = REPO / "tests" / "e2e" / "inject"  # the test hooks' sitecustomize.py


def two_raylets(
    *, cpus: int = 4, hooks: bool = False, env: dict[str, str] | None = None
) -> Iterator[RayCluster]:
    """A module fixture's whole body: two raylets (one `full-worker` each, `cpus` CPUs) whose
    workers import this checkout (the venv's editable install may be another), with the test
    hooks first when `hooks`, and `env`; stopped after the module, leaving no Ray process."""
    path = [str(HOOKS)] if hooks else []
    node_env = {
        "PYTHONPATH": os.pathsep.join(
            filter(None, [*path, str(REPO), os.environ.get("PYTHONPATH")])
        ),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        **(env or {}),
    }
    started = start_cluster([WHOLE_MACHINE, WHOLE_MACHINE], env=node_env, cpus=cpus)
    yield started
    started.stop()
    assert not started.processes(), "a Ray process outlived the cluster"


_PLACEMENT_GROUPS = """
import json, ray
from ray.util import placement_group_table
ray.init(logging_level="ERROR")
print("GROUPS " + json.dumps([g["state"] for g in placement_group_table().values()]))
"""


def live_placement_groups(cluster: RayCluster) -> list[str]:
    """The state of every placement group of `cluster` not removed (from a process of its
    own: a test process must not join a cluster, RAY_AUTH_MODE is read when ray is imported)."""
    result = subprocess.run(
        [sys.executable, "-c", _PLACEMENT_GROUPS],
        env=cluster.client_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    line = next((x for x in result.stdout.splitlines() if x.startswith("GROUPS ")), None)
    if line is None:
        raise AssertionError(f"could not list placement groups:\n{result.stdout}{result.stderr}")
    return [state for state in json.loads(line.removeprefix("GROUPS ")) if state != "REMOVED"]
