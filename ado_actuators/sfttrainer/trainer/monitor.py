"""A background thread sampling this process's CPU and memory, and the node's GPUs, while training.

Why not AIM's own system tracker: it needs pkg_resources, records every environment variable
(log_system_params), samples every 10 s (a short run reports 0 % CPU) and, under DDP, only
sees the process that owns the Run. Here every rank samples itself; local rank 0 also samples
the GPUs of the measurement and, when it owns an AIM Run, records every sample there.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable

import psutil

from ado_actuators.sfttrainer.contract import GpuEnergy, GpuSample, GpuSampleFailure, ProcessSample

log = logging.getLogger(__name__)


def physical_devices(indices: list[int], cuda_visible_devices: str | None) -> list[int | str]:
    """NVML ignores CUDA_VISIBLE_DEVICES: map the CUDA indices the job names (0..n-1 of the
    devices Ray gave this task) to NVML's physical indices, or to UUIDs when listed so."""
    if not cuda_visible_devices:
        return list(indices)
    visible = [d.strip() for d in cuda_visible_devices.split(",") if d.strip()]
    return [
        int(visible[i]) if visible[i].isdigit() else visible[i]
        for i in indices
        if i < len(visible)
    ]


MAX_RECORDED_FAILURES = 10_000


class GpuSampler:
    """NVML readings for the given node-local GPU indices; `available` is False without NVML.

    `nvml` is the NVML binding (pynvml, from nvidia-ml-py); unit tests hand in a stand-in.
    A reading NVML refuses is returned as a GpuSampleFailure, never as zeros: an idle GPU
    and an unreadable one must not look alike.
    """

    def __init__(self, indices: list[int], nvml=None) -> None:
        self.indices = list(indices)
        self.node = socket.gethostname()
        self.available = False
        self.problem: str | None = None
        self._handles: list = []
        if not self.indices:
            return
        try:
            if nvml is None:
                import pynvml as nvml

            nvml.nvmlInit()
            devices = physical_devices(self.indices, os.environ.get("CUDA_VISIBLE_DEVICES"))
            if len(devices) < len(self.indices):
                raise LookupError(
                    f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r} lists "
                    f"fewer devices than the {len(self.indices)} to sample"
                )
            self._handles = [
                (i, nvml.nvmlDeviceGetHandleByIndex(d) if isinstance(d, int)
                 else nvml.nvmlDeviceGetHandleByUUID(d))
                for i, d in zip(self.indices, devices, strict=False)
            ]  # fmt: skip
            self._nvml = nvml
            self.available = True
        except ImportError as e:
            self.problem = f"nvidia-ml-py (pynvml) is not installed ({e})"
        except Exception as e:  # pynvml.NVMLError and its many subclasses
            self.problem = f"NVML failed to start ({type(e).__name__}: {e})"

    def sample(self, now: float) -> tuple[list[GpuSample], list[GpuSampleFailure]]:
        if not self.available:
            return [], []
        nvml, out, failures = self._nvml, [], []
        for index, handle in self._handles:
            try:
                util = nvml.nvmlDeviceGetUtilizationRates(handle)
                mem = nvml.nvmlDeviceGetMemoryInfo(handle)
                power_mw = nvml.nvmlDeviceGetPowerUsage(handle)
                limit_mw = nvml.nvmlDeviceGetEnforcedPowerLimit(handle)
            except Exception as e:  # NVMLError: GPU lost, driver hiccup, not supported, ...
                failures.append(
                    GpuSampleFailure(time=now, index=index, node=self.node,
                                     error=f"{type(e).__name__}: {e}"[:300])
                )  # fmt: skip
                continue
            out.append(
                GpuSample(
                    time=now,
                    index=index,
                    node=self.node,
                    compute_percent=float(util.gpu),
                    memory_percent=100.0 * mem.used / mem.total if mem.total else 0.0,
                    power_watts=power_mw / 1000.0,
                    power_percent=100.0 * power_mw / limit_mw if limit_mw else 0.0,
                )
            )
        return out, failures

    def energy_millijoules(self) -> dict[int, int | str]:
        """Each GPU's total-energy counter (Volta and newer), or why it could not be read."""
        if not self.available:
            return {}
        readings: dict[int, int | str] = {}
        for index, handle in self._handles:
            try:
                readings[index] = int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
            except Exception as e:
                readings[index] = f"{type(e).__name__}: {e}"[:300]
        return readings

    def close(self) -> None:
        if self.available:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # shutting down must never turn a good run into a failure
                pass
            self.available = False


class SystemMonitor:
    """Samples every `interval` seconds between start() and stop(), plus once at stop().

    psutil's first cpu_percent() reading of a process is always 0 (it has nothing to compare
    with), so start() primes it and that reading is dropped. The sample at stop() makes even a
    run shorter than one interval report its CPU use.
    """

    def __init__(
        self,
        interval: float,
        gpu_indices: list[int] | None = None,
        on_process_sample: Callable[[ProcessSample], None] | None = None,
        on_gpu_samples: Callable[[list[GpuSample]], None] | None = None,
        nvml=None,
    ) -> None:
        self.interval = max(0.01, interval)
        self.process_samples: list[ProcessSample] = []
        self.gpu_samples: list[GpuSample] = []
        self.gpu_sample_failures: list[GpuSampleFailure] = []
        self.gpu_energy: dict[int, GpuEnergy] = {}
        self.gpu_problem: str | None = None
        self.notes: list[str] = []
        self._nvml = nvml
        self._gpu_indices = list(gpu_indices or [])
        self._gpus: GpuSampler | None = None
        self._on_process, self._on_gpus = on_process_sample, on_gpu_samples
        self._process = psutil.Process()
        self._node_memory = psutil.virtual_memory().total
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._gpus = GpuSampler(self._gpu_indices, nvml=self._nvml)
        self.gpu_problem = self._gpus.problem
        self._process.cpu_percent(None)  # prime: the first reading is always 0.0
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="sfttrainer-monitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=10 + self.interval)
        self._thread = None
        self._sample()
        self._gpus.close()

    def mark_window_start(self, now: float) -> None:
        """The measured window (re)starts now: read every GPU's energy counter."""
        if self._gpus is None:
            return
        with self._lock:
            readings = self._gpus.energy_millijoules()
        self.gpu_energy = {}
        for index, value in readings.items():
            if isinstance(value, int):
                self.gpu_energy[index] = GpuEnergy(
                    index=index, node=self._gpus.node, start_time=now, start_millijoules=value
                )
            else:
                self._note(f"GPU {index}: energy counter unreadable ({value})")

    def mark_window_end(self, now: float) -> None:
        """The measured window ends now (so far): update the energy counters' end readings."""
        if self._gpus is None or not self.gpu_energy:
            return
        with self._lock:
            readings = self._gpus.energy_millijoules()
        for index, value in readings.items():
            energy = self.gpu_energy.get(index)
            if energy is None:
                continue
            if isinstance(value, int):
                energy.end_time, energy.end_millijoules = now, value
            else:
                self._note(f"GPU {index}: energy counter unreadable ({value})")

    def _note(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._sample()
            except Exception as e:  # a failed sample must not end the sampling, nor training
                log.warning("system sample failed: %s", e)

    def _sample(self) -> None:
        with self._lock:
            now = time.time()
            with self._process.oneshot():
                cpu = self._process.cpu_percent(None)
                rss = self._process.memory_info().rss
            sample = ProcessSample(
                time=now, cpu_percent=cpu, memory_percent=100.0 * rss / self._node_memory
            )
            self.process_samples.append(sample)
            gpus, failures = self._gpus.sample(now) if self._gpus else ([], [])
            self.gpu_samples.extend(gpus)
            room = MAX_RECORDED_FAILURES - len(self.gpu_sample_failures)
            self.gpu_sample_failures.extend(failures[: max(0, room)])
            if self._on_process:
                self._on_process(sample)
            if gpus and self._on_gpus:
                self._on_gpus(gpus)
