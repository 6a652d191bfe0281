"""What a measurement ran on, as two rows' comparison needs it: the GPUs, driver, CUDA, NCCL,
CPU and library versions, from a result's metadata (its `machine` block and `versions`).

Only a space read through ado's API has them: ado's CSV holds the properties, not the
metadata. Pure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from ado_actuators.sfttrainer.contract.outcomes import MACHINE, VERSIONS

Fingerprint = tuple[tuple[str, str], ...]
"""(what, value) pairs, in a fixed order; empty where the metadata has no machine block."""


def fingerprint(metadata: Mapping[str, Any]) -> Fingerprint:
    machine = metadata.get(MACHINE) or {}
    if not machine:
        return ()
    gpus = Counter(g.get("name") or "unknown" for g in machine.get("gpus") or [])
    found = {
        "GPU": ", ".join(f"{n} × {name}" for name, n in sorted(gpus.items())) or "none",
        "GPU driver": machine.get("gpu_driver"),
        "CUDA runtime": machine.get("cuda_runtime"),
        "NCCL": machine.get("nccl"),
        "GPU links": machine.get("interconnect") if gpus else None,
        "CPU": machine.get("cpu_model"),
    }
    versions = metadata.get(VERSIONS) or {}
    found |= {name: versions[name] for name in sorted(versions)}
    return tuple((k, str(v)) for k, v in found.items() if v not in (None, ""))


def of_measurements(fingerprints: Iterable[Fingerprint]) -> Fingerprint:
    """One configuration measured more than once: what all its measurements share, and
    "several" where they differ; empty unless every measurement has a machine block."""
    found = list(fingerprints)
    if not found or not all(found):
        return ()
    keys = list(dict.fromkeys(k for f in found for k, _ in f))
    values = [dict(f) for f in found]
    return tuple(
        (k, vs.pop() if len(vs := {v.get(k, "") for v in values}) == 1 else "several") for k in keys
    )


def differences(here: Fingerprint, there: Fingerprint) -> tuple[tuple[str, str, str], ...]:
    """(what, value here, value there) for what both rows record and differs."""
    theirs = dict(there)
    return tuple((k, v, theirs[k]) for k, v in here if k in theirs and theirs[k] != v)
