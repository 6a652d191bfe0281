"""An imitation of NVML's Python binding (pynvml, from nvidia-ml-py) for a machine this test
machine is not: the function names, constants and error classes the trainer calls, over GPUs
described in JSON.

Injected as the project's tests inject faults: a test puts this directory first on PYTHONPATH,
so the trainer's own `import pynvml` (trainer/monitor.py) finds it, in whatever process runs
the trainer's code; SFTTRAINER_TEST_NVML holds the machine as JSON (the `machine()` shape,
which is also the default). A test in the same process calls `configure(machine)` instead.

The values of the constants and error codes are NVML's (nvml.h, as nvidia-ml-py 13 spells
them), so code that compares against the real binding's constants reads them alike.
"""

from __future__ import annotations

import json
import os
import types

NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 18  # 36 in nvidia-ml-py 13; the imitated GPUs have at most 18
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_STATUS_OK = 0
NVML_P2P_STATUS_NOT_SUPPORTED = 5
NVML_NVLINK_DEVICE_TYPE_GPU = 0
NVML_NVLINK_DEVICE_TYPE_SWITCH = 2
NVML_TOPOLOGY_SYSTEM = 50
_TARGETS = {"GPU": NVML_NVLINK_DEVICE_TYPE_GPU, "NVSwitch": NVML_NVLINK_DEVICE_TYPE_SWITCH}


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {2: "Invalid Argument", 3: "Not Supported", 6: "Not Found"}.get(
            self.value, f"NVML error {self.value}"
        )


class NVMLError_NotSupported(NVMLError):  # pynvml names one class per error code
    def __init__(self, value: int = NVML_ERROR_NOT_SUPPORTED) -> None:
        super().__init__(value)


def gpu(index: int, name: str = "NVIDIA H100 80GB HBM3", links: int = 18, to: str = "NVSwitch"):
    """One imitated GPU: `links` NVLink links up, all leading to `to` (none on a PCIe card)."""
    return {
        "name": name,
        "uuid": f"GPU-{index:08x}-0000-0000-0000-000000000000",
        "bus": f"00000000:{0x18 + 0x10 * index:02X}:00.0",
        "memory_bytes": 85_520_809_984,
        "clocks": {"sm": 345, "mem": 2619},
        "max_clocks": {"sm": 1980, "mem": 2619},
        "power_limit_mw": 700_000,
        "nvlinks": [to] * links,
    }


def machine(count: int = 4) -> dict:
    """The default: an HGX H100 board, every GPU on NVSwitch, pairs across two sockets."""
    half = count // 2
    return {
        "driver": "550.54.15",
        "cuda": 12040,
        "gpus": [gpu(i) for i in range(count)],
        # the PCIe path between GPUs i < j: one switch within a half, the sockets' link across
        "pcie": {
            f"{i},{j}": 10 if (i < half) == (j < half) else 50
            for i in range(count)
            for j in range(i + 1, count)
        },
    }


_machine: dict = (
    json.loads(os.environ["SFTTRAINER_TEST_NVML"])
    if os.environ.get("SFTTRAINER_TEST_NVML")
    else machine()
)


def configure(description: dict) -> None:
    global _machine
    _machine = description


def _device(handle) -> dict:
    return _machine["gpus"][handle]


def _refuses(handle, what: str) -> None:
    """A GPU whose description lists `what` under "unsupported" answers NOT_SUPPORTED."""
    if what in _device(handle).get("unsupported", ()):
        raise NVMLError_NotSupported()


def nvmlInit():
    pass


def nvmlShutdown():
    pass


def nvmlSystemGetDriverVersion():
    return _machine["driver"]


def nvmlSystemGetCudaDriverVersion_v2():
    return _machine["cuda"]


def nvmlDeviceGetCount():
    return len(_machine["gpus"])


def nvmlDeviceGetHandleByIndex(index):
    if not 0 <= index < len(_machine["gpus"]):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return index


def nvmlDeviceGetHandleByUUID(uuid):
    for index, device in enumerate(_machine["gpus"]):
        if device["uuid"] == uuid:
            return index
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def nvmlDeviceGetUUID(handle):
    return _device(handle)["uuid"]


def nvmlDeviceGetName(handle):
    return _device(handle)["name"]


def nvmlDeviceGetPciInfo(handle):
    return types.SimpleNamespace(busId=_device(handle)["bus"])


def nvmlDeviceGetMemoryInfo(handle):
    total = _device(handle)["memory_bytes"]
    return types.SimpleNamespace(total=total, used=total // 10, free=total - total // 10)


def nvmlDeviceGetClockInfo(handle, kind):
    _refuses(handle, "clocks")
    return _device(handle)["clocks"]["sm" if kind == NVML_CLOCK_SM else "mem"]


def nvmlDeviceGetMaxClockInfo(handle, kind):
    _refuses(handle, "clocks")
    return _device(handle)["max_clocks"]["sm" if kind == NVML_CLOCK_SM else "mem"]


def nvmlDeviceGetEnforcedPowerLimit(handle):
    _refuses(handle, "power")
    return _device(handle)["power_limit_mw"]


def nvmlDeviceGetPowerUsage(handle):
    _refuses(handle, "power")
    return _device(handle)["power_limit_mw"] // 2


def nvmlDeviceGetUtilizationRates(handle):
    _refuses(handle, "utilisation")
    return types.SimpleNamespace(gpu=90, memory=40)


def nvmlDeviceGetTotalEnergyConsumption(handle):
    _refuses(handle, "power")
    return 1_000_000


def nvmlDeviceIsMigDeviceHandle(handle):
    return 0


def nvmlDeviceGetMaxMigDeviceCount(handle):
    return 0


def nvmlDeviceGetNvLinkState(handle, link):
    links = _device(handle)["nvlinks"]
    if not links:
        raise NVMLError_NotSupported()  # a GPU without NVLink, as NVML answers for link 0
    if link >= len(links):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)  # past the GPU's last link
    return NVML_FEATURE_ENABLED


def nvmlDeviceGetNvLinkRemoteDeviceType(handle, link):
    return _TARGETS[_device(handle)["nvlinks"][link]]


def nvmlDeviceGetTopologyCommonAncestor(one, other):
    _refuses(one, "topology")
    return _machine["pcie"][f"{min(one, other)},{max(one, other)}"]


def nvmlDeviceGetP2PStatus(one, other, index):
    _refuses(one, "topology")
    assert index == NVML_P2P_CAPS_INDEX_NVLINK
    peers = {tuple(p) for p in _machine.get("nvlink_pairs", ())}
    switched = all("NVSwitch" in _device(h)["nvlinks"] for h in (one, other))
    linked = switched or (min(one, other), max(one, other)) in peers
    return NVML_P2P_STATUS_OK if linked else NVML_P2P_STATUS_NOT_SUPPORTED
