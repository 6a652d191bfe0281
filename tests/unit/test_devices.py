"""Which GPUs a node's part may use: Ray's assignment, else this process's list."""

from ado_actuators.sfttrainer.execute.devices import visible_devices


class StandInRay:
    def __init__(self, ids, initialized=True, raises=False):
        self.ids, self.initialized, self.raises = ids, initialized, raises

    def is_initialized(self):
        return self.initialized

    def get_gpu_ids(self):
        if self.raises:
            raise RuntimeError("not connected")
        return self.ids


def test_ray_assignment_wins_in_numeric_order():
    ray = StandInRay([10, 2])  # Ray returns a set's order
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "7"}, ray=ray) == "2,10"
    uuids = StandInRay(["GPU-b", "GPU-a"])
    assert visible_devices({}, ray=uuids) == "GPU-a,GPU-b"


def test_without_a_ray_assignment_the_process_list_or_every_gpu():
    for ray in (StandInRay([]), StandInRay([1], initialized=False), StandInRay([1], raises=True)):
        assert visible_devices({"CUDA_VISIBLE_DEVICES": "GPU-8932f937"}, ray=ray) == "GPU-8932f937"
        assert visible_devices({}, ray=ray) is None
