"""What the trainer asks of CUDA (device sync at step end, peak memory over every device),
through a stand-in torch module: this machine has no GPU."""

from __future__ import annotations

import types

from ado_actuators.sfttrainer.stopping.methods import make_policy
from ado_actuators.sfttrainer.trainer import cuda
from ado_actuators.sfttrainer.trainer.callback import MeasurementCallback
from ado_actuators.sfttrainer.trainer.tokens import TokenMeter


class StandInCuda:
    def __init__(self, peaks=(0,), available=True, initialized=True):
        self.peaks, self.available, self.initialized = list(peaks), available, initialized
        self.synced: list = []

    def is_available(self):
        return self.available

    def is_initialized(self):
        return self.initialized

    def device_count(self):
        return len(self.peaks)

    def max_memory_allocated(self, device=None):
        return self.peaks[0 if device is None else device]

    def synchronize(self, device=None):
        self.synced.append(device)


def stand_in_torch(**kwargs):
    return types.SimpleNamespace(cuda=StandInCuda(**kwargs))


def test_peak_memory_is_the_largest_of_every_device_the_process_drove():
    dp = stand_in_torch(peaks=[10, 70, 30])  # DataParallel: GPU 1 held the most
    assert cuda.max_memory_allocated(dp) == 70


def test_no_cuda_means_no_peak_and_no_sync():
    for torch in (stand_in_torch(available=False), stand_in_torch(initialized=False)):
        assert cuda.max_memory_allocated(torch) == 0
        cuda.synchronize(4, torch)
        assert torch.cuda.synced == []


def test_sync_waits_on_the_current_device_or_on_each_of_a_dataparallel_process():
    one = stand_in_torch()
    cuda.synchronize(1, one)
    assert one.cuda.synced == [None]  # the current device only: others would get a context
    dp = stand_in_torch(peaks=[0, 0, 0])
    cuda.synchronize(3, dp)
    assert dp.cuda.synced == [0, 1, 2]


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_step_ends_when_the_device_has_finished_it():
    """The GPU's queued work (here: 2.5 s of it) belongs to the step whose end waits for it."""
    clock, waited = Clock(), []

    def synchronize(devices):
        waited.append(devices)
        clock.now += 2.5  # the kernels still queued when HF's on_step_end fired

    callback = MeasurementCallback(
        meter=TokenMeter(),
        policy=make_policy(-1, None),
        synchronize=synchronize,
        clock=clock,
    )
    args = types.SimpleNamespace(n_gpu=2, process_index=0, device="cpu")
    state = types.SimpleNamespace(global_step=0, max_steps=1)
    callback.on_step_begin(args, state, None)
    clock.now += 1.0  # what the CPU saw of the step
    state.global_step = 1
    callback.on_step_end(args, state, types.SimpleNamespace(should_training_stop=False))
    assert waited == [2]  # both GPUs of the DataParallel process
    step = callback.steps[0]
    assert (step.start, step.end) == (100.0, 103.5)
