"""MIG slices and UUIDs through a stand-in NVML: CUDA_VISIBLE_DEVICES entries -> NVML handles,
and what a MIG slice cannot report. The errors are pynvml's own classes (nvidia-ml-py imports
without a GPU); the devices are made up."""

from __future__ import annotations

import types

import pynvml
import pytest

from ado_actuators.sfttrainer.trainer import nvml_devices
from ado_actuators.sfttrainer.trainer.monitor import GpuSampler, SystemMonitor

A100 = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"
H100 = "GPU-8932f0aa-11b2-4c3d-9e4f-5a6b7c8d9e0f"  # shares "GPU-8932f" with the A100
MIG = "MIG-c7384736-a75d-5afc-978f-d2f1294409fd"  # a 1g.10gb slice of the H100 (GI 1, CI 0)


def not_supported():
    return pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)


class StandInNvml:
    """pynvml's calls as the sampler makes them, over two GPUs and one MIG slice; pynvml's
    errors and constants are the real ones."""

    def __init__(self):
        self.devices = {
            "gpu0": {"uuid": A100, "mig": []},
            "gpu1": {"uuid": H100, "mig": ["mig0"]},
            "mig0": {"uuid": MIG, "ids": (1, 0), "is_mig": True},
        }
        self.gpus = ["gpu0", "gpu1"]

    def __getattr__(self, name):  # NVMLError, NVMLError_NotSupported, NVML_ERROR_* ...
        return getattr(pynvml, name)

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return self.gpus[index]

    def nvmlDeviceGetHandleByUUID(self, uuid):
        for handle, device in self.devices.items():
            if device["uuid"] == uuid:
                return handle
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetUUID(self, handle):
        return self.devices[handle]["uuid"]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        if self.devices[handle].get("is_mig"):
            raise not_supported()
        return 7 if self.devices[handle]["mig"] else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, slot):
        migs = self.devices[handle]["mig"]
        if slot >= len(migs):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)  # an empty slot
        return migs[slot]

    def nvmlDeviceIsMigDeviceHandle(self, handle):
        return int(self.devices[handle].get("is_mig", False))

    def nvmlDeviceGetGpuInstanceId(self, handle):
        return self.devices[handle]["ids"][0]

    def nvmlDeviceGetComputeInstanceId(self, handle):
        return self.devices[handle]["ids"][1]

    # readings: a MIG slice reports memory only (NVML: utilisation, power, energy not supported)
    def nvmlDeviceGetUtilizationRates(self, handle):
        if self.devices[handle].get("is_mig"):
            raise not_supported()
        return types.SimpleNamespace(gpu=70)

    def nvmlDeviceGetMemoryInfo(self, handle):
        return types.SimpleNamespace(used=5, total=10)

    def nvmlDeviceGetPowerUsage(self, handle):
        if self.devices[handle].get("is_mig"):
            raise not_supported()
        return 200_000

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        if self.devices[handle].get("is_mig"):
            raise not_supported()
        return 400_000

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if self.devices[handle].get("is_mig"):
            raise not_supported()
        return 1_000_000


@pytest.mark.parametrize(
    "entry, handle",
    [
        (0, "gpu0"),
        (A100, "gpu0"),  # whole UUID: NVML's own lookup
        ("GPU-8932f937", "gpu0"),  # a unique prefix, as CUDA accepts it
        ("GPU-8932f0aa-11b2", "gpu1"),
        (MIG, "mig0"),  # a MIG device by its own UUID (driver R470 on)
        ("MIG-c7384736", "mig0"),
        (f"MIG-{H100}/1/0", "mig0"),  # the older MIG-GPU-<uuid>/<GI>/<CI> form
    ],
)
def test_every_form_cuda_accepts_resolves_to_an_nvml_handle(entry, handle):
    assert nvml_devices.handle(StandInNvml(), entry) == handle


@pytest.mark.parametrize("entry, matches", [("GPU-8932f", 2), ("GPU-ffff", 0)])
def test_an_ambiguous_or_unknown_prefix_is_refused_naming_it(entry, matches):
    with pytest.raises(LookupError, match=f"{entry!r} matches {matches} of the devices.*{A100}"):
        nvml_devices.handle(StandInNvml(), entry)


def test_a_uuid_prefix_in_cuda_visible_devices_is_sampled(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8932f0aa,GPU-8932f937")
    sampler = GpuSampler([0, 1], nvml=StandInNvml())
    assert sampler.available, sampler.problem
    samples, failures = sampler.sample(1.0)
    assert [s.index for s in samples] == [0, 1] and failures == []


def test_a_mig_slice_records_what_it_can_and_says_what_it_cannot(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", MIG)
    monitor = SystemMonitor(10, gpu_indices=[0], nvml=StandInNvml())
    monitor.start()
    monitor.mark_window_start(1.0)
    monitor.sample_if_window_has_none()
    monitor.mark_window_end(2.0)
    monitor.stop()
    assert monitor.gpu_problem is None and monitor.gpu_sample_failures == []
    samples = monitor.gpu_samples
    assert samples and all(s.memory_percent == 50.0 for s in samples)
    assert all(s.compute_percent is s.power_watts is s.power_percent is None for s in samples)
    unsupported = [n for n in monitor.notes if "not supported on MIG" in n]
    # said once each, however many samples: utilisation, power, energy counter
    assert len(unsupported) == 3, monitor.notes
    assert any("energy counter" in n for n in unsupported) and monitor.gpu_energy == {}
