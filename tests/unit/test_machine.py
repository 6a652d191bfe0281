"""The machine block (trainer/machine.py, metrics/machine.py): the CPU always, the GPUs through
an imitation of NVML (tests/nvml_imitation/pynvml.py), handed in as the monitor's tests hand in
theirs, and imported by name in a child process as the trainer imports the real one."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ado_actuators.sfttrainer.contract.trainer_io import RankOutcome, RankReport
from ado_actuators.sfttrainer.metrics.machine import machine_metadata, machine_note
from ado_actuators.sfttrainer.trainer import machine
from ado_actuators.sfttrainer.trainer.monitor import GpuSampler, SystemMonitor

IMITATION = Path(__file__).resolve().parents[1] / "nvml_imitation"


@pytest.fixture
def nvml():
    spec = importlib.util.spec_from_file_location("nvml_imitation", IMITATION / "pynvml.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def described(nvml, indices):
    sampler = GpuSampler(indices, nvml=nvml)
    assert sampler.available, sampler.problem
    return machine.describe(*sampler.devices())


def test_the_cpu_is_always_described():
    found = machine.describe()
    assert found.cpu_cores >= found.cpu_cores_usable >= 1 and found.cpu_model
    assert found.memory_gib > 0 and found.python.count(".") == 2
    assert (found.gpus, found.links, found.interconnect) == ([], [], "no GPU")
    assert found.gpu_driver is None and found.problems == []


@pytest.mark.parametrize(
    ("cpuinfo", "model"),
    [
        (
            "processor\t: 0\nmodel name\t: AMD EPYC 7763 64-Core Processor\n",
            "AMD EPYC 7763 64-Core",
        ),
        ("processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n", "implementer 0x41, part"),
        ("Model\t\t: Raspberry Pi 5 Model B Rev 1.0\n", "Raspberry Pi 5 Model B Rev 1.0"),
    ],
)
def test_the_cpu_model_is_what_the_kernel_reports(tmp_path, cpuinfo, model):
    path = tmp_path / "cpuinfo"
    path.write_text(cpuinfo)
    assert model in machine.cpu_model(path)
    assert machine.cpu_model(tmp_path / "absent")  # no /proc: what Python knows


def test_gpus_on_nvswitch_their_driver_clocks_and_power_limits(nvml):
    found = described(nvml, [0, 1, 2, 3])
    assert (found.gpu_driver, found.cuda_driver) == ("550.54.15", "12.4")
    assert [g.name for g in found.gpus] == ["NVIDIA H100 80GB HBM3"] * 4
    first = found.gpus[0]
    assert (first.sm_clock_mhz, first.memory_clock_mhz) == (345, 2619)
    assert (first.max_sm_clock_mhz, first.max_memory_clock_mhz) == (1980, 2619)
    assert first.power_limit_watts == 700.0 and first.memory_gib == pytest.approx(79.65)
    assert (first.nvlinks, first.nvlink_to, first.pci_bus_id) == (
        18,
        ["NVSwitch"],
        "00000000:18:00.0",
    )
    assert len(found.links) == 6 and all(link.nvlink for link in found.links)
    paths = {link.gpus: link.pcie_path for link in found.links}
    assert paths[(0, 1)] == "PIX" and paths[(0, 2)] == "SYS"  # one switch; across the sockets
    assert found.interconnect == "NVLink through NVSwitch" and found.problems == []


def test_pcie_cards_say_the_farthest_path_between_them(nvml):
    cards = [nvml.gpu(i, "NVIDIA L40S", links=0) for i in range(3)]
    nvml.configure(
        {
            "driver": "535.161.08",
            "cuda": 12020,
            "gpus": cards,
            "pcie": {"0,1": 20, "0,2": 50, "1,2": 50},
        }
    )
    found = described(nvml, [0, 1, 2])
    assert [g.nvlinks for g in found.gpus] == [0, 0, 0] and found.gpus[0].nvlink_to == []
    assert found.interconnect == "PCIe (SYS)" and found.cuda_driver == "12.2"


def test_nvlink_bridges_between_some_pairs_are_said_as_a_mix(nvml):
    bridged = [nvml.gpu(i, "NVIDIA A100 80GB PCIe", links=12, to="GPU") for i in range(4)]
    nvml.configure(
        {
            "driver": "535.161.08",
            "cuda": 12020,
            "gpus": bridged,
            "pcie": {f"{i},{j}": 40 for i in range(4) for j in range(i + 1, 4)},
            "nvlink_pairs": [[0, 1], [2, 3]],
        }
    )
    found = described(nvml, [0, 1, 2, 3])
    assert found.gpus[0].nvlink_to == ["GPU"]
    assert found.interconnect == "NVLink between 2 of 6 GPU pairs, PCIe (NODE) otherwise"


def test_the_gpus_are_those_cuda_visible_devices_names(nvml, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    found = described(nvml, [0, 1])
    assert [g.uuid for g in found.gpus] == [nvml.gpu(3)["uuid"], nvml.gpu(1)["uuid"]]
    assert [g.index for g in found.gpus] == [0, 1]  # the job's CUDA indices
    assert found.links[0].pcie_path == "SYS"  # physical 3 and 1 sit on different sockets


def test_a_reading_nvml_refuses_is_left_out_and_said_never_a_failure(nvml):
    slice_ = nvml.gpu(0) | {"unsupported": ["clocks", "power", "topology"]}
    nvml.configure(
        {"driver": "550.54.15", "cuda": 12040, "gpus": [slice_, nvml.gpu(1)], "pcie": {}}
    )
    found = described(nvml, [0, 1])
    first = found.gpus[0]
    assert (first.sm_clock_mhz, first.max_sm_clock_mhz, first.power_limit_watts) == (None,) * 3
    assert first.name == "NVIDIA H100 80GB HBM3" and found.gpus[1].sm_clock_mhz == 345
    assert "GPU 0 SM clock: NVMLError_NotSupported: Not Supported" in found.problems
    assert found.interconnect.startswith("unknown")


def test_without_nvml_the_gpus_are_not_described_and_the_machine_says_why():
    monitor = SystemMonitor(10, gpu_indices=[0], nvml=_NoNvml(), describe_machine=True)
    monitor.start()
    monitor.stop()
    assert monitor.machine.gpus == [] and monitor.machine.cpu_model
    assert monitor.machine.problems == [
        "GPUs not described: NVML failed to start (RuntimeError: no driver)"
    ]


class _NoNvml:
    def nvmlInit(self):
        raise RuntimeError("no driver")


def test_the_trainers_own_import_finds_the_imitation_and_reads_the_gpus_at_start(tmp_path):
    """A child process with the imitation first on PYTHONPATH: the monitor imports `pynvml` by
    name, as in a trainer, and describes the machine before its first sample."""
    code = (
        "from ado_actuators.sfttrainer.trainer.monitor import SystemMonitor\n"
        "m = SystemMonitor(10, gpu_indices=[0, 1], describe_machine=True)\n"
        "m.start(); m.stop()\n"
        "print(m.machine.model_dump_json())\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(IMITATION), os.environ.get("PYTHONPATH", "")]),
        "CUDA_VISIBLE_DEVICES": "2,3",
        "SFTTRAINER_TEST_NVML": json.dumps(_eight_gpus()),
    }
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert [g["uuid"] for g in found["gpus"]] == [_eight_gpus()["gpus"][i]["uuid"] for i in (2, 3)]
    assert found["interconnect"] == "NVLink through NVSwitch"
    assert found["gpu_driver"] == "560.35.03"


def _eight_gpus() -> dict:
    spec = importlib.util.spec_from_file_location("nvml_imitation_8", IMITATION / "pynvml.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.machine(8) | {"driver": "560.35.03"}


def node(rank, hostname, gpu="NVIDIA H100 80GB HBM3", driver="550.54.15"):
    block = machine.describe().model_copy(
        update={"node": hostname, "gpu_driver": driver, "interconnect": "one GPU"}
    )
    block.gpus = [machine.GpuFacts(index=0, name=gpu)]
    return RankReport(
        rank=rank,
        local_rank=0,
        world_size=2,
        hostname=hostname,
        outcome=RankOutcome.OK,
        machine=block,
    )


def test_a_row_carries_rank_0s_node_and_each_node_unlike_it():
    alike = [node(1, "n1"), node(0, "n0")]
    block = machine_metadata(alike)
    assert (block["node"], block["nodes"], "other_nodes" in block) == ("n0", 2, False)
    assert machine_note(alike) is None
    unlike = [node(0, "n0"), node(1, "n1", driver="535.161.08")]
    block = machine_metadata(unlike)
    assert [n["gpu_driver"] for n in block["other_nodes"]] == ["535.161.08"]
    assert machine_note(unlike).startswith(
        "the nodes differ (CPU, GPUs, driver, CUDA, NCCL or links): n1 unlike n0"
    )
    assert machine_metadata([node(0, "n0").model_copy(update={"machine": None})]) is None
