"""Is a measurement alone on its GPUs? NVML's compute processes on each device, before launch.

Another process on a measured GPU (a stray job, a notebook) takes memory and compute from the
run, and its figures then describe a shared device. The node asks NVML just before it starts
the trainer; nothing of this measurement has touched the GPUs yet (the node task never
initialises CUDA), so any process listed belongs to somebody else.
"""

from __future__ import annotations

import os
from typing import Any

import pydantic

from ado_actuators.sfttrainer.contract.units import MIB
from ado_actuators.sfttrainer.trainer import nvml_devices


class GpuProcess(pydantic.BaseModel):
    index: int  # node-local CUDA index, as the measurement names the device
    pid: int
    memory_mib: float | None = None  # None where NVML does not say (e.g. in some containers)


class Exclusivity(pydantic.BaseModel):
    """What NVML said about the devices of one node."""

    exclusive: bool | None = pydantic.Field(
        description="True: no other process; False: some; None: NVML could not tell."
    )
    others: list[GpuProcess] = pydantic.Field(default_factory=list)
    problem: str | None = None

    def describe(self) -> str:
        return ", ".join(
            f"GPU {p.index}: pid {p.pid}"
            + (f" ({p.memory_mib:.0f} MiB)" if p.memory_mib is not None else "")
            for p in self.others
        )


def check_devices(indices: list[int], nvml: Any = None) -> Exclusivity:  # pynvml is untyped
    """The other compute processes on the node-local CUDA devices `indices`.

    `nvml` is the NVML binding (pynvml); unit tests hand in a stand-in.
    """
    if not indices:
        return Exclusivity(exclusive=True)
    try:
        if nvml is None:
            import pynvml

            nvml = pynvml

        nvml.nvmlInit()
    except Exception as error:  # ImportError, NVMLError (no driver): cannot tell
        return Exclusivity(
            exclusive=None, problem=f"NVML unavailable: {type(error).__name__}: {error}"
        )
    try:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        devices = nvml_devices.physical_devices(indices, visible)
        if len(devices) < len(indices):
            return Exclusivity(
                exclusive=None,
                problem=(
                    f"CUDA_VISIBLE_DEVICES={visible!r} lists fewer devices than the {len(indices)} used"
                ),
            )
        own = os.getpid()
        others = []
        for index, device in zip(indices, devices, strict=True):
            handle = nvml_devices.handle(nvml, device)  # UUID prefixes and MIG ids resolved
            for process in nvml.nvmlDeviceGetComputeProcesses(handle):
                if process.pid == own:
                    continue
                used = getattr(process, "usedGpuMemory", None)
                others.append(
                    GpuProcess(
                        index=index,
                        pid=process.pid,
                        memory_mib=used / MIB if isinstance(used, int) else None,
                    )
                )
        return Exclusivity(exclusive=not others, others=others)
    except Exception as error:  # NVMLError: not supported (vGPU, MIG), GPU lost, ...
        return Exclusivity(
            exclusive=None,
            problem=f"NVML could not list processes: {type(error).__name__}: {error}",
        )
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def shared_problem(found: Exclusivity, hostname: str) -> str:
    return (
        f"GPU(s) of this measurement on {hostname} are in use by other processes "
        f"({found.describe()}): figures measured there would describe a shared device. Stop "
        f"those processes or let Ray place the measurement elsewhere; or set the actuator "
        f"parameter allow_shared_gpus: true to measure anyway (recorded in the metadata)"
    )


def metadata(checks: list[Exclusivity], allowed: bool) -> dict[str, Any]:
    """The row's record of every node's check: exclusive only when each node said so."""
    states = [c.exclusive for c in checks]
    exclusive = False if False in states else None if None in states else True
    data: dict[str, Any] = {"gpu_devices_exclusive": exclusive}
    if others := [p.model_dump() for c in checks for p in c.others]:
        data["gpu_shared_with"] = others
    if problems := [c.problem for c in checks if c.problem]:
        data["gpu_exclusivity_unknown"] = problems[0]
    if allowed:
        data["allow_shared_gpus"] = True
    return data
