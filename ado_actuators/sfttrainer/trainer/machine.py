"""The machine a rank trains on, read once as training starts: what two rows measured a month
apart, or on two clusters, must record to be told apart.

The CPU is always described (psutil, /proc/cpuinfo); the GPUs of the measurement through NVML,
with the handles the system monitor already opened (`nvml` is the binding, pynvml from
nvidia-ml-py; tests hand in an imitation). Every NVML reading may be refused (a MIG slice has
no clocks or links of its own, an old driver lacks a call): a refused reading is left out and
said in `problems`, and never fails the training. Host-side calls only: nothing runs on a GPU.
"""

from __future__ import annotations

import itertools
import os
import platform
import socket
from collections.abc import Callable
from pathlib import Path

import psutil

from ado_actuators.sfttrainer.contract.trainer_io import GpuFacts, GpuLink, Machine
from ado_actuators.sfttrainer.contract.units import GIB

PCIE_PATHS = {0: "BOARD", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
"""NVML's nvmlGpuTopologyLevel_t -> nvidia-smi topo -m's legend, nearest first: the same board,
one PCIe switch, several switches, a host bridge, host bridges of one NUMA node, across the
CPUs' interconnect."""
NVLINK_TARGETS = {0: "GPU", 1: "IBM NPU", 2: "NVSwitch"}
"""nvmlDeviceGetNvLinkRemoteDeviceType's answers."""


class _Reader:
    """Calls NVML; a refused call gives None and one line in `problems`."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems

    def __call__(self, what: str, call: Callable, *args):
        try:
            return call(*args)
        except Exception as e:  # NVMLError's many subclasses, a missing function
            self.problems.append(f"{what}: {type(e).__name__}: {e}"[:300])
            return None


def describe(nvml=None, handles=(), gpu_problem: str | None = None) -> Machine:
    """The node, its CPU and torch's libraries; with `handles` ((CUDA index, NVML handle) of
    each GPU of the measurement) the GPUs, their driver and how they are linked."""
    problems: list[str] = [f"GPUs not described: {gpu_problem}"] if gpu_problem else []
    gpus: list[GpuFacts] = []
    links: list[GpuLink] = []
    gpu_driver = cuda_driver = None
    if nvml is not None and handles:
        read = _Reader(problems)
        gpu_driver = _text(read("driver version", nvml.nvmlSystemGetDriverVersion))
        cuda_driver = _cuda_version(read("CUDA driver version", _cuda_driver, nvml))
        gpus = [_gpu(read, nvml, index, handle) for index, handle in handles]
        links = [_link(read, nvml, a, b) for a, b in itertools.combinations(handles, 2)]
    return Machine(
        **cpu_facts(),
        **torch_facts(problems),
        gpu_driver=gpu_driver,
        cuda_driver=cuda_driver,
        gpus=gpus,
        links=links,
        interconnect=interconnect(gpus, links),
        problems=problems,
    )


def cpu_facts(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict:
    return {
        "node": socket.gethostname(),
        "cpu_model": cpu_model(cpuinfo),
        "cpu_cores": psutil.cpu_count(logical=True) or 1,
        "cpu_physical_cores": psutil.cpu_count(logical=False),
        "cpu_cores_usable": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else psutil.cpu_count(logical=True) or 1,
        "memory_gib": round(psutil.virtual_memory().total / GIB, 2),
        "os": platform.platform(),
        "python": platform.python_version(),
    }


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The model name Linux reports (x86: "model name"; some ARM kernels: "Model" or
    "Hardware"); else the implementer and part ARM kernels give; else what Python knows."""
    try:
        fields = [line.partition(":") for line in cpuinfo.read_text().splitlines()]
    except OSError:
        fields = []
    found = {name.strip(): value.strip() for name, _, value in reversed(fields) if value.strip()}
    for key in ("model name", "Model", "Hardware", "cpu model"):
        if key in found:
            return found[key]
    if "CPU part" in found:
        return (
            f"{platform.machine()} (implementer {found.get('CPU implementer', '?')}, "
            f"part {found['CPU part']})"
        )
    return platform.processor() or platform.machine() or "unknown"


def torch_facts(problems: list[str]) -> dict:
    """torch's thread count and the CUDA, cuDNN and NCCL it runs with (where it has CUDA)."""
    try:
        import torch
    except ImportError:
        return {}
    facts: dict = {"torch_threads": torch.get_num_threads(), "cuda_runtime": torch.version.cuda}
    try:
        if torch.backends.cudnn.is_available():
            facts["cudnn"] = str(torch.backends.cudnn.version())
        if torch.cuda.is_available():
            version = torch.cuda.nccl.version()
            is_tuple = isinstance(version, tuple)
            facts["nccl"] = ".".join(map(str, version)) if is_tuple else str(version)
    except Exception as e:  # a build without NCCL, a library that will not load
        problems.append(f"cuDNN or NCCL version: {type(e).__name__}: {e}"[:300])
    return facts


def _cuda_driver(nvml) -> int:
    call = getattr(nvml, "nvmlSystemGetCudaDriverVersion_v2", None)
    return call() if call is not None else nvml.nvmlSystemGetCudaDriverVersion()


def _cuda_version(encoded: int | None) -> str | None:
    """CUDA's own encoding, 1000 * major + 10 * minor (12040: 12.4)."""
    if encoded is None:
        return None
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


def _text(value) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _gpu(read: _Reader, nvml, index: int, handle) -> GpuFacts:
    where = f"GPU {index}"
    memory = read(f"{where} memory", nvml.nvmlDeviceGetMemoryInfo, handle)
    pci = read(f"{where} PCI bus id", nvml.nvmlDeviceGetPciInfo, handle)
    limit = read(f"{where} power limit", nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    clock, top = nvml.nvmlDeviceGetClockInfo, nvml.nvmlDeviceGetMaxClockInfo
    up, targets = _nvlinks(read, nvml, where, handle)
    return GpuFacts(
        index=index,
        name=_text(read(f"{where} name", nvml.nvmlDeviceGetName, handle)),
        uuid=_text(read(f"{where} UUID", nvml.nvmlDeviceGetUUID, handle)),
        pci_bus_id=_text(pci.busId) if pci is not None else None,
        memory_gib=round(memory.total / GIB, 2) if memory is not None else None,
        sm_clock_mhz=read(f"{where} SM clock", clock, handle, nvml.NVML_CLOCK_SM),
        memory_clock_mhz=read(f"{where} memory clock", clock, handle, nvml.NVML_CLOCK_MEM),
        max_sm_clock_mhz=read(f"{where} max SM clock", top, handle, nvml.NVML_CLOCK_SM),
        max_memory_clock_mhz=read(f"{where} max memory clock", top, handle, nvml.NVML_CLOCK_MEM),
        power_limit_watts=limit / 1000.0 if limit is not None else None,
        nvlinks=up,
        nvlink_to=targets,
    )


def _nvlinks(read: _Reader, nvml, where: str, handle) -> tuple[int | None, list[str]]:
    """Links up, and what they lead to. NVML answers "not supported" for link 0 of a GPU
    without NVLink, and "invalid argument" past a GPU's last link."""
    up, targets = 0, set()
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except Exception as e:
            code = getattr(e, "value", None)
            if link == 0 and code != getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3):
                read.problems.append(f"{where} NVLink: {type(e).__name__}: {e}"[:300])
                return None, []
            break
        if state != getattr(nvml, "NVML_FEATURE_ENABLED", 1):
            continue
        up += 1
        try:
            kind = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
        except Exception:  # a driver without the call (function not found): the link counts
            kind = None
        targets.add(NVLINK_TARGETS.get(kind, "unknown"))
    return up, sorted(targets)


def _link(read: _Reader, nvml, first: tuple[int, object], second: tuple[int, object]) -> GpuLink:
    (a, one), (b, other) = first, second
    where = f"GPUs {a} and {b}"
    level = read(f"{where} PCIe path", nvml.nvmlDeviceGetTopologyCommonAncestor, one, other)
    index = getattr(nvml, "NVML_P2P_CAPS_INDEX_NVLINK", 2)
    status = read(f"{where} NVLink peer status", nvml.nvmlDeviceGetP2PStatus, one, other, index)
    return GpuLink(
        gpus=(a, b),
        nvlink=None if status is None else status == getattr(nvml, "NVML_P2P_STATUS_OK", 0),
        pcie_path=PCIE_PATHS.get(level) if level is not None else None,
    )


def interconnect(gpus: list[GpuFacts], links: list[GpuLink]) -> str:
    """The GPUs' links in a phrase: NVLink (through NVSwitch), PCIe with the farthest path
    between two of them, or the mix."""
    if len(gpus) < 2:
        return "one GPU" if gpus else "no GPU"
    nvlinked = sum(link.nvlink is True for link in links)
    if any(link.nvlink is None for link in links):
        return "unknown (NVML did not say; see problems)"
    if nvlinked == len(links):
        switched = all("NVSwitch" in gpu.nvlink_to for gpu in gpus)
        return "NVLink through NVSwitch" if switched else "NVLink"
    order = list(PCIE_PATHS.values())
    paths = [link.pcie_path for link in links if not link.nvlink and link.pcie_path]
    farthest = f" ({max(paths, key=order.index)})" if paths else ""
    if nvlinked == 0:
        return f"PCIe{farthest}"
    return f"NVLink between {nvlinked} of {len(links)} GPU pairs, PCIe{farthest} otherwise"
