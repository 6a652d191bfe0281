"""The measurement's GPUs, as CUDA names them, -> NVML device handles.

NVML ignores CUDA_VISIBLE_DEVICES: CUDA index i of the job is the i-th entry of that list (an
NVML index with CUDA_DEVICE_ORDER=PCI_BUS_ID, which the plan sets), or a UUID. CUDA accepts a
unique UUID *prefix* ("GPU-8932f937"), and MIG devices as "MIG-<uuid>" or, before driver R470,
"MIG-GPU-<parent uuid>/<GPU instance>/<compute instance>"; NVML's lookup wants whole UUIDs.
`nvml` is the binding (pynvml, from nvidia-ml-py); unit tests hand in a stand-in.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

_LEGACY_MIG = re.compile(r"MIG-(GPU-[0-9A-Fa-f-]+)/(\d+)/(\d+)")


def physical_devices(indices: list[int], cuda_visible_devices: str | None) -> list[int | str]:
    """The CUDA indices the job names (0..n-1 of the devices it was pinned to) -> NVML indices,
    or the UUIDs CUDA_VISIBLE_DEVICES lists; entries past the list's end are dropped."""
    if not cuda_visible_devices:
        return list(indices)
    visible = [d.strip() for d in cuda_visible_devices.split(",") if d.strip()]
    return [
        int(visible[i]) if visible[i].isdigit() else visible[i] for i in indices if i < len(visible)
    ]


def _uuid(nvml, handle) -> str:
    uuid = nvml.nvmlDeviceGetUUID(handle)
    return uuid.decode() if isinstance(uuid, bytes) else str(uuid)


def _mig_devices(nvml, gpu) -> Iterator:
    try:
        slots = nvml.nvmlDeviceGetMaxMigDeviceCount(gpu)
    except Exception:
        return
    for slot in range(slots):
        try:
            yield nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, slot)
        except Exception:
            continue


def _every_device(nvml) -> Iterator[tuple[str, object]]:
    """(UUID, handle) of every GPU and every MIG device on it."""
    for index in range(nvml.nvmlDeviceGetCount()):
        gpu = nvml.nvmlDeviceGetHandleByIndex(index)
        yield _uuid(nvml, gpu), gpu
        for mig in _mig_devices(nvml, gpu):
            yield _uuid(nvml, mig), mig


def _legacy_mig(nvml, parent: str, instance: int, compute: int):
    for _, gpu in _matching(nvml, parent):
        for mig in _mig_devices(nvml, gpu):
            if (nvml.nvmlDeviceGetGpuInstanceId(mig), nvml.nvmlDeviceGetComputeInstanceId(mig)) == (
                instance,
                compute,
            ):
                return mig
    return None


def _matching(nvml, prefix: str) -> list[tuple[str, object]]:
    return [(u, h) for u, h in _every_device(nvml) if u.lower().startswith(prefix.lower())]


def handle(nvml, device: int | str):
    """The NVML handle of one CUDA_VISIBLE_DEVICES entry; LookupError naming it if none or
    several devices answer to it."""
    if isinstance(device, int):
        return nvml.nvmlDeviceGetHandleByIndex(device)
    if legacy := _LEGACY_MIG.fullmatch(device):
        found = _legacy_mig(nvml, legacy[1], int(legacy[2]), int(legacy[3]))
        if found is not None:
            return found
        raise LookupError(f"CUDA_VISIBLE_DEVICES entry {device!r}: NVML has no such MIG device")
    try:
        return nvml.nvmlDeviceGetHandleByUUID(device)  # a whole UUID: NVML's own lookup
    except Exception:
        pass
    matches = _matching(nvml, device)
    if len(matches) == 1:
        return matches[0][1]
    known = ", ".join(u for u, _ in _every_device(nvml)) or "none"
    raise LookupError(
        f"CUDA_VISIBLE_DEVICES entry {device!r} matches {len(matches)} of the devices NVML "
        f"knows ({known}); CUDA would refuse it too: list whole UUIDs (nvidia-smi -L)"
    )


def is_mig(nvml, device_handle) -> bool:
    try:
        return bool(nvml.nvmlDeviceIsMigDeviceHandle(device_handle))
    except Exception:
        return False
