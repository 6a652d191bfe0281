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

from ado_actuators.sfttrainer.contract import GpuSample, ProcessSample

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


class GpuSampler:
    """NVML readings for the given node-local GPU indices; `available` is False without NVML."""

    def __init__(self, indices: list[int]) -> None:
        self.indices = list(indices)
        self.node = socket.gethostname()
        self.available = False
        self.problem: str | None = None
        self._handles: list = []
        if not self.indices:
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            devices = physical_devices(self.indices, os.environ.get("CUDA_VISIBLE_DEVICES"))
            self._handles = [
                (i, pynvml.nvmlDeviceGetHandleByIndex(d) if isinstance(d, int)
                 else pynvml.nvmlDeviceGetHandleByUUID(d))
                for i, d in zip(self.indices, devices, strict=False)
            ]  # fmt: skip
            self._nvml = pynvml
            self.available = True
        except ImportError as e:
            self.problem = f"GPU sampling disabled: nvidia-ml-py is not installed ({e})"
        except Exception as e:  # pynvml.NVMLError and its many subclasses
            self.problem = f"GPU sampling disabled: NVML failed ({type(e).__name__}: {e})"

    def sample(self, now: float) -> list[GpuSample]:
        if not self.available:
            return []
        nvml, out = self._nvml, []
        for index, handle in self._handles:
            try:
                util = nvml.nvmlDeviceGetUtilizationRates(handle)
                mem = nvml.nvmlDeviceGetMemoryInfo(handle)
                power_mw = nvml.nvmlDeviceGetPowerUsage(handle)
                limit_mw = nvml.nvmlDeviceGetEnforcedPowerLimit(handle)
            except nvml.NVMLError as e:
                log.debug("NVML sample of GPU %s failed: %s", index, e)
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
        return out

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
    ) -> None:
        self.interval = max(0.01, interval)
        self.process_samples: list[ProcessSample] = []
        self.gpu_samples: list[GpuSample] = []
        self.notes: list[str] = []
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
        self._gpus = GpuSampler(self._gpu_indices)
        if self._gpus.problem:
            self.notes.append(self._gpus.problem)
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
            gpus = self._gpus.sample(now) if self._gpus else []
            self.gpu_samples.extend(gpus)
            if self._on_process:
                self._on_process(sample)
            if gpus and self._on_gpus:
                self._on_gpus(gpus)
