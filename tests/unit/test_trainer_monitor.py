"""The sampling thread: real psutil readings of this process, GPUs degrading without NVML."""

from __future__ import annotations

import threading
import time
import types

import psutil
import pytest

from ado_actuators.sfttrainer.trainer.monitor import GpuSampler, SystemMonitor


def busy_until(done, timeout: float = 60) -> None:
    """Uses the CPU until `done()` holds (`timeout`: a guard against a hang, not a speed claim)."""
    deadline = time.monotonic() + timeout
    x = 0
    while not done():
        assert time.monotonic() < deadline, "the sampler never got there"
        x += 1


def cpu_used(seconds: float):
    """Holds once this process has used `seconds` of CPU time more than when it was made: CPU
    time, unlike wall-clock time, cannot pass without the process running."""
    process = psutil.Process()
    start = sum(process.cpu_times()[:2])
    return lambda: sum(process.cpu_times()[:2]) - start >= seconds


def cpu_time_used(seconds: float):
    """As cpu_used, from the process's CPU clock (nanoseconds, not the kernel's 10 ms ticks)."""
    start = time.process_time()
    return lambda: time.process_time() - start >= seconds


def sampled(monitor: SystemMonitor, count: int):
    return lambda: len(monitor.process_samples) >= count


def nvml_works() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


def test_samples_while_running_and_once_more_at_stop():
    seen = []
    interval = 0.1
    monitor = SystemMonitor(interval, on_process_sample=seen.append)
    before = time.time()
    monitor.start()
    used = cpu_used(0.05)
    busy_until(lambda: sampled(monitor, 2)() and used())  # two of the thread's samples
    stopping = time.time()
    monitor.stop()
    after = time.time()
    samples = monitor.process_samples
    # the thread waits an interval before each sample: a loaded machine delays it (fewer
    # samples), nothing hurries it; stop() adds one
    assert 3 <= len(samples) <= (after - before) / interval + 1, len(samples)
    assert seen == samples  # every sample reached the recorder (AIM) too
    assert all(before <= s.time <= after for s in samples)
    assert samples[-1].time >= stopping  # the closing sample (taken by stop() itself)
    # the intervals between samples cover the CPU time this thread used: some reading shows
    # it (which ones depends on how the machine scheduled this process)
    assert any(s.cpu_percent > 0 for s in samples), [s.cpu_percent for s in samples]
    assert all(0 < s.memory_percent < 100 for s in samples)


def test_a_run_shorter_than_one_interval_still_reports_cpu_use():
    monitor = SystemMonitor(10.0)
    monitor.start()
    busy_until(cpu_used(0.1))
    monitor.stop()
    assert len(monitor.process_samples) == 1
    # primed at start(): an unprimed first reading is psutil's 0.0, whatever the CPU used
    assert monitor.process_samples[0].cpu_percent > 0


def test_stop_is_idempotent_and_stops_sampling():
    monitor = SystemMonitor(0.05)
    monitor.start()
    time.sleep(0.2)
    monitor.stop()
    n = len(monitor.process_samples)
    monitor.stop()
    time.sleep(0.2)
    assert len(monitor.process_samples) == n


def test_no_gpu_indices_means_no_gpu_sampling_and_no_complaint():
    sampler = GpuSampler([])
    assert not sampler.available and sampler.problem is None
    assert sampler.sample(time.time()) == ([], [])


@pytest.mark.skipif(nvml_works(), reason="this machine has working NVML")
def test_gpus_requested_without_nvml_record_why_there_are_no_samples():
    monitor = SystemMonitor(0.05, gpu_indices=[0, 1])
    monitor.start()
    time.sleep(0.15)
    monitor.stop()
    assert monitor.gpu_samples == []
    assert monitor.process_samples
    # not an idle GPU: the problem is kept for the report, which then fails the measurement
    assert "NVML failed to start" in monitor.gpu_problem or "not installed" in monitor.gpu_problem


@pytest.mark.skipif(not nvml_works(), reason="needs NVML and a GPU")
def test_gpu_samples_on_a_gpu_machine():
    monitor = SystemMonitor(0.05, gpu_indices=[0])
    monitor.start()
    time.sleep(0.3)
    monitor.stop()
    assert monitor.gpu_samples and {s.index for s in monitor.gpu_samples} == {0}
    s = monitor.gpu_samples[-1]
    assert 0 <= s.compute_percent <= 100 and 0 < s.memory_percent <= 100
    assert s.power_watts > 0 and 0 < s.power_percent <= 150


def test_cuda_indices_map_to_nvml_physical_devices():
    from ado_actuators.sfttrainer.trainer.nvml_devices import physical_devices

    assert physical_devices([0, 1], None) == [0, 1]
    assert physical_devices([0, 1], "3,5") == [3, 5]
    assert physical_devices([0], "GPU-8f2a,GPU-77c1") == ["GPU-8f2a"]
    assert physical_devices([0, 1, 2], "4") == [4]


# ---- NVML errors, fed through a stand-in NVML module (the aggregation logic is what is tested;
# ---- the real binding is exercised by the GPU tests above and by benchmarks/gpu/) ----------


class NVMLError(Exception):
    pass


class FakeNvml:
    """pynvml's surface as the sampler uses it; `fail` says which readings raise."""

    NVMLError = NVMLError

    def __init__(self, fail=lambda index, call: False, energy_supported=True):
        self.fail, self.energy_supported = fail, energy_supported
        self.calls = {0: 0, 1: 0}
        self.energy = {0: 1_000_000, 1: 5_000_000}  # millijoules

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetUtilizationRates(self, handle):
        self.calls[handle] += 1
        if self.fail(handle, self.calls[handle]):
            raise NVMLError("GPU is lost")
        return types.SimpleNamespace(gpu=80)

    def nvmlDeviceGetMemoryInfo(self, handle):
        return types.SimpleNamespace(used=40, total=80)

    def nvmlDeviceGetPowerUsage(self, handle):
        return 300_000

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return 400_000

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if not self.energy_supported:
            raise NVMLError("Not Supported")
        self.energy[handle] += 250_000  # 250 J between readings
        return self.energy[handle]


def test_failed_readings_are_failures_not_zeros():
    nvml = FakeNvml(fail=lambda index, call: index == 1)
    sampler = GpuSampler([0, 1], nvml=nvml)
    samples, failures = sampler.sample(5.0)
    assert [(s.index, s.compute_percent, s.memory_percent, s.power_percent) for s in samples] == [
        (0, 80.0, 50.0, 75.0)
    ]
    assert [(f.index, f.time) for f in failures] == [(1, 5.0)]
    assert "GPU is lost" in failures[0].error


def test_monitor_keeps_every_failed_reading_and_the_energy_window():
    nvml = FakeNvml(fail=lambda index, call: index == 1 and call % 2 == 0)
    monitor = SystemMonitor(0.02, gpu_indices=[0, 1], nvml=nvml)
    monitor.start()
    monitor.mark_window_start(100.0)
    # GPU 1 fails every second reading: two of the thread's and stop()'s make three
    busy_until(sampled(monitor, 2))
    monitor.mark_window_end(101.0)
    monitor.stop()
    good = [s for s in monitor.gpu_samples if s.index == 1]
    assert good and monitor.gpu_sample_failures
    assert {f.index for f in monitor.gpu_sample_failures} == {1}
    assert len(good) + len(monitor.gpu_sample_failures) == nvml.calls[1]
    energy = monitor.gpu_energy
    assert sorted(energy) == [0, 1]
    assert energy[0].start_time == 100.0 and energy[0].end_time == 101.0
    assert energy[0].joules == 250.0 and energy[1].joules == 250.0


def test_energy_counter_not_supported_is_a_note_and_no_reading():
    monitor = SystemMonitor(10, gpu_indices=[0], nvml=FakeNvml(energy_supported=False))
    monitor.start()
    monitor.mark_window_start(1.0)
    monitor.mark_window_end(2.0)
    monitor.stop()
    assert monitor.gpu_energy == {}
    assert any("energy counter unreadable" in n and "Not Supported" in n for n in monitor.notes)


def test_a_restarted_window_replaces_the_energy_start():
    monitor = SystemMonitor(10, gpu_indices=[0], nvml=FakeNvml())
    monitor.start()
    monitor.mark_window_start(1.0)  # first step
    monitor.mark_window_end(2.0)
    monitor.mark_window_start(3.0)  # warm-up ended
    monitor.mark_window_end(4.0)
    monitor.stop()
    assert monitor.gpu_energy[0].start_time == 3.0 and monitor.gpu_energy[0].joules == 250.0


def test_a_window_gets_one_sample_even_if_the_sampler_has_not_sampled_in_it():
    monitor = SystemMonitor(3600)  # the sampling thread never samples in this test
    monitor.start()
    start = time.time()
    monitor.mark_window_start(start)
    monitor.sample_if_window_has_none()  # at the first step end, before it is stamped
    monitor.sample_if_window_has_none()  # the window has one now
    assert len(monitor.process_samples) == 1 and monitor.process_samples[0].time >= start
    monitor.mark_window_start(time.time())  # warm-up ended: a new window
    monitor.sample_if_window_has_none()
    monitor.stop()
    assert len(monitor.process_samples) == 3  # + the closing sample


class SlowSweepNvml(FakeNvml):
    """A sweep that hangs in NVML, in the sampling thread only, until released."""

    def __init__(self):
        super().__init__()
        self.in_sweep, self.release = threading.Event(), threading.Event()

    def nvmlDeviceGetUtilizationRates(self, handle):
        if threading.current_thread().name == "sfttrainer-monitor":
            self.in_sweep.set()
            assert self.release.wait(60), "never released"
        return super().nvmlDeviceGetUtilizationRates(handle)


def test_the_training_thread_never_waits_for_a_sweep_in_progress():
    nvml = SlowSweepNvml()
    monitor = SystemMonitor(0.01, gpu_indices=[0, 1], nvml=nvml)
    monitor.start()
    assert nvml.in_sweep.wait(60)  # the sampler is inside NVML now

    def step_boundaries():  # what the training thread does at a step's start and end
        monitor.mark_window_start(1.0)
        monitor.sample_if_window_has_none()
        monitor.mark_window_end(2.0)

    training = threading.Thread(target=step_boundaries)
    training.start()
    training.join(60)  # a deadlock guard, not a timing: with the lock held it never returns
    done = not training.is_alive()
    nvml.release.set()
    monitor.stop()
    assert done, "the step boundary waited for the sampler's NVML sweep"
    assert monitor.gpu_energy[0].joules == 250.0


def test_a_window_of_a_few_milliseconds_still_reads_its_cpu_use():
    """A window of two short steps can last a few milliseconds: counted in the kernel's 10 ms
    clock ticks (psutil's cpu_percent) it read 0 % now and then; the process's CPU clock
    counts nanoseconds."""
    monitor = SystemMonitor(10.0)  # the thread never samples here: only the window's reading
    monitor.start()
    for _ in range(20):
        monitor.mark_window_start(time.time())
        busy_until(cpu_time_used(0.002))
        monitor.sample_if_window_has_none()
    monitor.stop()
    readings = [s.cpu_percent for s in monitor.process_samples[:-1]]
    assert len(readings) == 20 and min(readings) > 0, readings
