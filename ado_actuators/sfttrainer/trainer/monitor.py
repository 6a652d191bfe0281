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

from ado_actuators.sfttrainer.contract.trainer_io import (
    GpuEnergy,
    GpuSample,
    GpuSampleFailure,
    Machine,
    ProcessSample,
)
from ado_actuators.sfttrainer.trainer import machine, nvml_devices

log = logging.getLogger(__name__)

MAX_RECORDED_FAILURES = 10_000


def _not_supported(nvml, error: Exception) -> bool:
    """NVML's NVMLError_NotSupported (pynvml builds one class per error code)."""
    cls = getattr(nvml, "NVMLError_NotSupported", None)
    if isinstance(cls, type) and isinstance(error, cls):
        return True
    return getattr(error, "value", None) == getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3)


class _CpuShare:
    """CPU use since the previous reading, 100 == one core, from a (busy seconds, elapsed
    seconds) pair of clocks: `_clocks` and `_cores` say which."""

    def __init__(self) -> None:
        self._last: tuple[float, float] | None = None

    def _clocks(self) -> tuple[float, float]:
        raise NotImplementedError

    def _cores(self) -> int:
        return 1

    def prime(self) -> None:
        self._last = self._clocks()

    def share(self) -> float | None:
        """None on the first reading (no baseline) or when no time passed."""
        now, last = self._clocks(), self._last
        self._last = now
        if last is None or now[1] <= last[1]:
            return None
        return 100.0 * self._cores() * (now[0] - last[0]) / (now[1] - last[1])


class MachineCpu(_CpuShare):
    """The node's CPU use since the previous reading, every process's, 100 == one core.

    From psutil.cpu_times() deltas rather than psutil.cpu_percent(None), whose baseline is
    module-wide and would be moved by any other caller in this process."""

    def _clocks(self) -> tuple[float, float]:
        times = psutil.cpu_times()
        total = sum(times)
        idle = times.idle + getattr(times, "iowait", 0.0)
        return total - idle, total  # every core's seconds: the share is of all cores

    def _cores(self) -> int:
        return psutil.cpu_count() or 1

    def read(self) -> float | None:
        return self.share()


class ProcessCpu(_CpuShare):
    """This process's CPU use since the previous reading, every thread's, 100 == one core.

    From time.process_time() (CLOCK_PROCESS_CPUTIME_ID: nanoseconds) rather than psutil's
    cpu_percent, which reads /proc in clock ticks (10 ms at Linux's USER_HZ of 100): over a
    window of a few short steps a tick-counted reading is 0 % or several hundred, so a short
    measured window could report no CPU use at all."""

    def _clocks(self) -> tuple[float, float]:
        return time.process_time(), time.perf_counter()

    def read(self) -> float:
        """0.0 on the first reading (no baseline), as psutil's."""
        share = self.share()
        return 0.0 if share is None else share


class GpuSampler:
    """NVML readings for the given node-local GPU indices; `available` is False without NVML.

    `nvml` is the NVML binding (pynvml, from nvidia-ml-py); unit tests hand in a stand-in.
    A reading NVML refuses is returned as a GpuSampleFailure, never as zeros: an idle GPU
    and an unreadable one must not look alike. A reading NVML does not support on a device (a
    MIG slice has no utilisation or power of its own) is left out of every sample (None) and
    said once in `notes`; what can be read is still recorded.
    """

    READINGS = ("utilisation", "power", "power limit")

    def __init__(self, indices: list[int], nvml=None) -> None:
        self.indices = list(indices)
        self.node = socket.gethostname()
        self.available = False
        self.problem: str | None = None
        self.notes: list[str] = []
        self._handles: list = []
        self._unsupported: dict[int, set[str]] = {i: set() for i in self.indices}
        self._mig: set[int] = set()
        if not self.indices:
            return
        try:
            if nvml is None:
                import pynvml

                nvml = pynvml

            nvml.nvmlInit()
            devices = nvml_devices.physical_devices(
                self.indices, os.environ.get("CUDA_VISIBLE_DEVICES")
            )
            if len(devices) < len(self.indices):
                raise LookupError(
                    f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r} lists "
                    f"fewer devices than the {len(self.indices)} to sample"
                )
            self._handles = [
                (i, nvml_devices.handle(nvml, d))
                for i, d in zip(self.indices, devices, strict=False)
            ]
            self._mig = {i for i, h in self._handles if nvml_devices.is_mig(nvml, h)}
            self._nvml = nvml
            self.available = True
        except ImportError as e:
            self.problem = f"nvidia-ml-py (pynvml) is not installed ({e})"
        except Exception as e:  # pynvml.NVMLError and its many subclasses, LookupError
            self.problem = f"NVML failed to start ({type(e).__name__}: {e})"

    def devices(self) -> tuple[object, list[tuple[int, object]]]:
        """The NVML binding and (CUDA index, handle) of each GPU; (None, []) without NVML."""
        return (self._nvml, list(self._handles)) if self.available else (None, [])

    def unsupported_note(self, index: int, reading: str, error: Exception | str) -> str:
        where = "not supported on MIG" if index in self._mig else "not supported on this GPU"
        return f"GPU {index}: {reading} {where} (NVML: {error}); what needs it is omitted"

    def _read(self, index: int, reading: str, call, handle):
        """One reading, or None where NVML does not support it on this device."""
        if reading in self._unsupported[index]:
            return None
        try:
            return call(handle)
        except Exception as e:
            if not _not_supported(self._nvml, e):
                raise
            self._unsupported[index].add(reading)
            self.notes.append(self.unsupported_note(index, reading, f"{type(e).__name__}: {e}"))
            return None

    def sample(self, now: float) -> tuple[list[GpuSample], list[GpuSampleFailure]]:
        if not self.available:
            return [], []
        nvml, out, failures = self._nvml, [], []
        for index, handle in self._handles:
            try:
                util = self._read(index, "utilisation", nvml.nvmlDeviceGetUtilizationRates, handle)
                mem = nvml.nvmlDeviceGetMemoryInfo(handle)
                power_mw = self._read(index, "power", nvml.nvmlDeviceGetPowerUsage, handle)
                limit = nvml.nvmlDeviceGetEnforcedPowerLimit
                limit_mw = (
                    self._read(index, "power limit", limit, handle)
                    if power_mw is not None
                    else None
                )
            except Exception as e:  # NVMLError: GPU lost, driver hiccup, ...
                failures.append(
                    GpuSampleFailure(
                        time=now,
                        index=index,
                        node=self.node,
                        error=f"{type(e).__name__}: {e}"[:300],
                    )
                )
                continue
            out.append(
                GpuSample(
                    time=now,
                    index=index,
                    node=self.node,
                    compute_percent=float(util.gpu) if util is not None else None,
                    memory_percent=100.0 * mem.used / mem.total if mem.total else 0.0,
                    power_watts=power_mw / 1000.0 if power_mw is not None else None,
                    power_percent=(
                        100.0 * power_mw / limit_mw if power_mw is not None and limit_mw else None
                    ),
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
                error = f"{type(e).__name__}: {e}"[:300]
                unsupported = _not_supported(self._nvml, e)
                readings[index] = (
                    self.unsupported_note(index, "energy counter", error)
                    if unsupported
                    else f"GPU {index}: energy counter unreadable ({error})"
                )
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

    The process's first CPU reading has nothing to compare with, so start() primes it
    (ProcessCpu). The sample at stop() makes even a run shorter than one interval report its
    CPU use.

    The measured window (metrics/aggregate.py counts only samples inside it) starts at
    mark_window_start(): the process's CPU reading restarts there, so the first sample in the
    window covers no time before it. Where the sampler has not sampled in the window by the end
    of its first step, the training thread samples once before stamping that end
    (sample_if_window_has_none), so even a window shorter than one interval has its figures.

    The sampling thread reads psutil and sweeps NVML without holding the lock (a sweep of 8
    GPUs takes milliseconds), then publishes under it: the training thread never waits for a
    sweep. NVML itself is thread-safe.

    With `describe_machine`, start() also reads the machine (trainer/machine.py) through the
    handles just opened, before any sample: the clocks and power limits as training starts.
    """

    def __init__(
        self,
        interval: float,
        gpu_indices: list[int] | None = None,
        on_process_sample: Callable[[ProcessSample], None] | None = None,
        on_gpu_samples: Callable[[list[GpuSample]], None] | None = None,
        nvml=None,
        describe_machine: bool = False,
    ) -> None:
        self.interval = max(0.01, interval)
        self.describe_machine = describe_machine
        self.machine: Machine | None = None
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
        self._process_cpu = ProcessCpu()
        self._machine_cpu = MachineCpu()
        self._node_memory = psutil.virtual_memory().total
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # the sample lists, the AIM recorder, the CPU baselines
        self._window_start: float | None = None
        self._window_sampled = False

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._gpus = GpuSampler(self._gpu_indices, nvml=self._nvml)
        self.gpu_problem = self._gpus.problem
        if self.describe_machine:
            self.machine = machine.describe(*self._gpus.devices(), gpu_problem=self.gpu_problem)
        self._process_cpu.prime()
        self._machine_cpu.prime()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="sfttrainer-monitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None or self._gpus is None:  # start() sets both
            return
        self._stop.set()
        self._thread.join(timeout=10 + self.interval)
        self._thread = None
        self._sample()
        self._gpus.close()
        for note in self._gpus.notes:
            self._note(note)

    def mark_window_start(self, now: float) -> None:
        """The measured window (re)starts now: read every GPU's energy counter and restart
        the CPU reading, so that nothing before the window is averaged into it."""
        if self._gpus is None:
            return
        with self._lock:
            self._process_cpu.prime()
            self._machine_cpu.prime()
            self._window_start, self._window_sampled = now, False
        self.gpu_energy = {}
        for index, value in self._gpus.energy_millijoules().items():
            if isinstance(value, int):
                self.gpu_energy[index] = GpuEnergy(
                    index=index, node=self._gpus.node, start_time=now, start_millijoules=value
                )
            else:
                self._note(value)

    def sample_if_window_has_none(self) -> None:
        """Called before a step's end is stamped: the window gets at least one sample."""
        if self._thread is not None and self._window_start is not None and not self._window_sampled:
            self._sample()

    def mark_window_end(self, now: float) -> None:
        """The measured window ends now (so far): update the energy counters' end readings."""
        if self._gpus is None or not self.gpu_energy:
            return
        for index, value in self._gpus.energy_millijoules().items():
            energy = self.gpu_energy.get(index)
            if energy is None:
                continue
            if isinstance(value, int):
                energy.end_time, energy.end_millijoules = now, value
            else:
                self._note(value)

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
        with self._lock:  # the CPU readings restart here
            now = time.time()
            cpu = self._process_cpu.read()
            rss = self._process.memory_info().rss
            machine_cpu = self._machine_cpu.read()
        sample = ProcessSample(
            time=now,
            cpu_percent=cpu,
            memory_percent=100.0 * rss / self._node_memory,
            machine_cpu_percent=machine_cpu,
        )
        gpus, failures = self._gpus.sample(now) if self._gpus else ([], [])
        with self._lock:
            self.process_samples.append(sample)
            self.gpu_samples.extend(gpus)
            room = MAX_RECORDED_FAILURES - len(self.gpu_sample_failures)
            self.gpu_sample_failures.extend(failures[: max(0, room)])
            if self._window_start is not None and now >= self._window_start:
                self._window_sampled = True
            if self._on_process:
                self._on_process(sample)
            if gpus and self._on_gpus:
                self._on_gpus(gpus)
