"""A GPU somebody else is using is not measured: NVML's compute processes before launch."""

from __future__ import annotations

import types

from ado_actuators.sfttrainer.execute.gpu_exclusive import check_devices, metadata, shared_problem


class FakeNvml:
    """Stands in for pynvml: physical device index -> compute processes on it."""

    def __init__(self, processes=None, fail_on=None):
        self.processes = processes or {}
        self.fail_on = fail_on
        self.shut = False

    def nvmlInit(self):
        if self.fail_on == "init":
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return uuid

    def nvmlDeviceGetComputeProcesses(self, handle):
        if self.fail_on == "list":
            raise RuntimeError("Not Supported")
        return [
            types.SimpleNamespace(pid=pid, usedGpuMemory=used)
            for pid, used in self.processes.get(handle, [])
        ]


def test_idle_devices_are_exclusive(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml = FakeNvml({2: [(77, 2**30)]})  # a process on a GPU not ours
    found = check_devices([0, 1], nvml)
    assert found.exclusive is True and not found.others and nvml.shut
    assert metadata([found], allowed=False) == {"gpu_devices_exclusive": True}


def test_another_process_names_its_pid_memory_and_device(monkeypatch):
    # Ray gave this task physical GPUs 3 and 5: CUDA index 1 is physical 5.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    found = check_devices([0, 1], FakeNvml({5: [(4242, 5 * 2**30), (4243, None)]}))
    assert found.exclusive is False
    assert [(p.index, p.pid, p.memory_mib) for p in found.others] == [
        (1, 4242, 5120.0),
        (1, 4243, None),
    ]
    problem = shared_problem(found, "node-a")
    assert "GPU 1: pid 4242 (5120 MiB)" in problem and "pid 4243" in problem
    assert "allow_shared_gpus: true" in problem and "node-a" in problem


def test_this_process_itself_is_not_another(monkeypatch):
    import os

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert check_devices([0], FakeNvml({0: [(os.getpid(), 1)]})).exclusive is True


def test_uuids_in_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc")
    assert check_devices([0], FakeNvml({"GPU-abc": [(9, 1)]})).exclusive is False


def test_nvml_that_cannot_tell_is_recorded_not_failed(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    no_nvml = check_devices([0], FakeNvml(fail_on="init"))
    assert no_nvml.exclusive is None and "NVML unavailable" in no_nvml.problem
    unsupported = check_devices([0], FakeNvml(fail_on="list"))
    assert unsupported.exclusive is None and "Not Supported" in unsupported.problem
    record = metadata([unsupported], allowed=False)
    assert (
        record["gpu_devices_exclusive"] is None
        and "Not Supported" in record["gpu_exclusivity_unknown"]
    )


def test_row_metadata_over_nodes_and_the_allowance(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    idle = check_devices([0], FakeNvml())
    busy = check_devices([0], FakeNvml({0: [(11, 2**20)]}))
    record = metadata([idle, busy], allowed=True)
    assert record["gpu_devices_exclusive"] is False and record["allow_shared_gpus"] is True
    assert record["gpu_shared_with"] == [{"index": 0, "pid": 11, "memory_mib": 1.0}]
    assert (
        check_devices([], FakeNvml(fail_on="init")).exclusive is True
    )  # no GPUs: nothing to share


def test_a_refused_node_fails_the_row_naming_the_processes(monkeypatch, tmp_path):
    from ado_actuators.sfttrainer.catalog.entity import entity_values
    from ado_actuators.sfttrainer.catalog.experiments import catalog_data
    from ado_actuators.sfttrainer.contract.outcomes import Failed
    from ado_actuators.sfttrainer.execute.cluster import _outcome
    from ado_actuators.sfttrainer.execute.environment import EnvironmentRequest
    from ado_actuators.sfttrainer.execute.node import NodeRequest, NodeRun
    from ado_actuators.sfttrainer.plan.launch.launch_plan import MeasurementInputs

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    values = entity_values(
        {
            "model_name": "m",
            "model_max_length": 8,
            "batch_size": 1,
            "number_gpus": 1,
            "gpu_model": "NVIDIA-A100-SXM4-80GB",
        }
    )
    request = NodeRequest(
        plan_inputs=MeasurementInputs(
            values=values,
            definition=catalog_data().experiment("finetune_full_benchmark-v1.0.0"),
            model_location="/models/m",
            dataset_path=tmp_path / "d.jsonl",
            text_field="output",
            hf_home=str(tmp_path),
            aim_repo=None,
        ),
        output_root=tmp_path,
        label="x",
        stall_timeout=1,
        environment=EnvironmentRequest(
            match_exact_dependencies=True, directory=tmp_path, build_timeout_seconds=1
        ),
    )
    busy = check_devices([0], FakeNvml({0: [(11, 2**30)]}))
    refused = NodeRun(problem=shared_problem(busy, "h"), gpu_exclusivity=busy)
    outcome = _outcome(request, [refused])
    assert isinstance(outcome, Failed) and "pid 11 (1024 MiB)" in outcome.reason
    assert "workdir" not in outcome.metadata  # nothing launched
    assert outcome.metadata["gpu_devices_exclusive"] is False
