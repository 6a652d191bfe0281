"""The sampling thread: real psutil readings of this process, GPUs degrading without NVML."""

from __future__ import annotations

import time

import pytest

from ado_actuators.sfttrainer.trainer.monitor import GpuSampler, SystemMonitor


def busy(seconds: float) -> None:
    end = time.time() + seconds
    x = 0
    while time.time() < end:
        x += 1


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
    monitor = SystemMonitor(0.1, on_process_sample=seen.append)
    before = time.time()
    monitor.start()
    busy(0.55)
    stopping = time.time()
    monitor.stop()
    after = time.time()
    samples = monitor.process_samples
    # a loaded machine delays the sampler (fewer samples), it never adds any
    assert 2 <= len(samples) <= 8
    assert seen == samples  # every sample reached the recorder (AIM) too
    assert all(before <= s.time <= after for s in samples)
    assert samples[-1].time >= stopping  # the closing sample (taken by stop() itself)
    # the readings are primed: not psutil's initial 0 (how far above 0 depends on the load
    # other processes put on the machine, so only "above 0" is asserted)
    assert all(s.cpu_percent > 0 for s in samples[:-1]), [s.cpu_percent for s in samples]
    assert all(0 < s.memory_percent < 100 for s in samples)


def test_a_run_shorter_than_one_interval_still_reports_cpu_use():
    monitor = SystemMonitor(10.0)
    monitor.start()
    busy(0.3)
    monitor.stop()
    assert len(monitor.process_samples) == 1
    assert monitor.process_samples[0].cpu_percent > 0  # primed, though no interval elapsed


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
    assert sampler.sample(time.time()) == []


@pytest.mark.skipif(nvml_works(), reason="this machine has working NVML")
def test_gpus_requested_without_nvml_degrade_to_none_with_a_note():
    monitor = SystemMonitor(0.05, gpu_indices=[0, 1])
    monitor.start()
    time.sleep(0.15)
    monitor.stop()
    assert monitor.gpu_samples == []
    assert monitor.process_samples
    assert len(monitor.notes) == 1 and "GPU sampling disabled" in monitor.notes[0]


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
    from ado_actuators.sfttrainer.trainer.monitor import physical_devices

    assert physical_devices([0, 1], None) == [0, 1]
    assert physical_devices([0, 1], "3,5") == [3, 5]
    assert physical_devices([0], "GPU-8f2a,GPU-77c1") == ["GPU-8f2a"]
    assert physical_devices([0, 1, 2], "4") == [4]
