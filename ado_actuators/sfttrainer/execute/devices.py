"""Which CUDA devices this node's part of a measurement may use, as plan/launch/launch_plan.py pins them."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping


def _ray_assignment(ray) -> list[str]:
    """The GPUs Ray gave the task this code runs in ([] outside a Ray task, or none given)."""
    if ray is None or not ray.is_initialized():
        return []
    try:
        ids = [str(i) for i in ray.get_gpu_ids()]  # [] in a driver; a set's order in a task
    except Exception:
        return []
    return sorted(ids, key=lambda i: (0, int(i), "") if i.isdigit() else (1, 0, i))


def visible_devices(environ: Mapping[str, str] = os.environ, ray=None) -> str | None:
    """Ray's assignment when there is one (also where Ray was told not to set
    CUDA_VISIBLE_DEVICES itself), else this process's CUDA_VISIBLE_DEVICES; None: every GPU.

    `ray`: the Ray module, if this process uses it (never imported here: the engine also
    runs without Ray); unit tests hand in a stand-in."""
    if assigned := _ray_assignment(ray if ray is not None else sys.modules.get("ray")):
        return ",".join(assigned)
    return environ.get("CUDA_VISIBLE_DEVICES")
