"""Two short probes of device-check.sh, each in its own process:

    python benchmarks/gpu/probes.py environment --result FILE   # what the check runs on
    python benchmarks/gpu/probes.py nvml --result FILE          # the trainer's GPU sampler

`environment`: versions and where each library was imported from (the kit's --target folder
must win over the image's own copies), the device, and that fms-hf-tuning imports.
`nvml`: the trainer's own GpuSampler (trainer/monitor.py) on GPU 0, idle and then under a
matrix-product load, with the energy counter around the load: samples, failures, utilisation,
power, joules. Without a GPU it records why NVML did not start (the path CPU runs take). Then
the machine block every row carries (trainer/machine.py), read through NVML over every GPU of
the node: driver, CUDA, NCCL, each GPU's clocks and power limit, and how each pair is linked
(NVLink or the PCIe path), with what NVML refused to say.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from pathlib import Path

LIBRARIES = (
    "torch",
    "transformers",
    "tokenizers",
    "huggingface_hub",
    "accelerate",
    "trl",
    "peft",
    "datasets",
    "pydantic",
    "numpy",
    "pyarrow",
    "tuning",
    "ado_actuators",
)
IDLE_SECONDS, LOAD_SECONDS, INTERVAL = 2.0, 6.0, 0.2


def environment() -> dict:
    found = {}
    for name in LIBRARIES:
        try:
            module = importlib.import_module(name)
        except Exception as error:
            found[name] = {"error": f"{type(error).__name__}: {error}"[:500]}
            continue
        where = getattr(module, "__file__", None) or list(getattr(module, "__path__", []))[:1]
        found[name] = {"version": getattr(module, "__version__", None), "file": str(where)}
    import importlib.metadata as metadata

    found["fms-hf-tuning"] = {"version": metadata.version("fms-hf-tuning")}
    importlib.import_module("tuning.sft_trainer")  # raises if the trainer cannot import
    import torch

    device = {"cuda": torch.cuda.is_available(), "torch_cuda": torch.version.cuda}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        device |= {
            "name": props.name,
            "capability": list(torch.cuda.get_device_capability(0)),
            "memory_gib": round(props.total_memory / 2**30, 2),
            "count": torch.cuda.device_count(),
        }
    return {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "libraries": found,
        "device": device,
    }


def _summary(samples) -> dict:
    if not samples:
        return {"samples": 0}
    return {
        "samples": len(samples),
        "compute_percent_avg": round(statistics.fmean(s.compute_percent for s in samples), 1),
        "power_watts_avg": round(statistics.fmean(s.power_watts for s in samples), 1),
        "memory_percent_max": round(max(s.memory_percent for s in samples), 1),
    }


def _sample_for(sampler, seconds: float, work=None) -> tuple[list, list]:
    samples, failures = [], []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if work:
            work()
        got, failed = sampler.sample(time.time())
        samples += got
        failures += failed
        time.sleep(0 if work else INTERVAL)
    return samples, failures


def node_machine() -> dict:
    """The machine block as a measurement on every GPU of this node would record it."""
    from ado_actuators.sfttrainer.trainer import machine
    from ado_actuators.sfttrainer.trainer.monitor import GpuSampler

    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except Exception:  # no NVML: the sampler below says why
        count = 1
    sampler = GpuSampler(list(range(count)))
    described = machine.describe(*sampler.devices(), gpu_problem=sampler.problem)
    sampler.close()
    return described.model_dump(mode="json")


def nvml() -> dict:
    from ado_actuators.sfttrainer.trainer.monitor import GpuSampler

    sampler = GpuSampler([0])
    if not sampler.available:
        return {"available": False, "problem": sampler.problem, "machine": node_machine()}
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

    def load() -> None:  # ~0.2 s of matrix products per sample, synchronised
        for _ in range(100):
            a @ a
        torch.cuda.synchronize()

    idle, idle_failed = _sample_for(sampler, IDLE_SECONDS)
    before = sampler.energy_millijoules()
    started = time.monotonic()
    busy, busy_failed = _sample_for(sampler, LOAD_SECONDS, load)
    seconds = time.monotonic() - started
    after = sampler.energy_millijoules()
    sampler.close()
    energy = None
    if isinstance(before.get(0), int) and isinstance(after.get(0), int):
        energy = (after[0] - before[0]) / 1000.0
    failures = [f.error for f in idle_failed + busy_failed]
    return {
        "available": True,
        "idle": _summary(idle),
        "load": _summary(busy),
        "load_seconds": round(seconds, 2),
        "energy_joules": energy,
        "energy_counter": {"before": before.get(0), "after": after.get(0)},
        "mean_watts_from_energy": round(energy / seconds, 1) if energy is not None else None,
        "failures": len(failures),
        "first_failures": failures[:5],
        "machine": node_machine(),
    }


PROBES = {"environment": environment, "nvml": nvml}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("probe", choices=sorted(PROBES))
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args(argv)
    result = PROBES[args.probe]()
    args.result.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
