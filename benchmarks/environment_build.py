"""Building one fms-hf-tuning environment three ways, side by side in one run.

    .venv/bin/python benchmarks/environment_build.py [--version 2.1.2] [--ray pip uv]

- the actuator's builder (execute/environment.py: uv venv + uv pip install --no-deps + probe);
- Ray's runtime_env `uv` and `pip` fields with the same packages (--no-deps). In a virtual
  environment Ray clones the worker's whole environment first, then installs into the clone.

Each is timed for a first build and for a reuse (a second task / measurement asking for it).
With --cold each method starts from an empty uv cache (UV_CACHE_DIR) and pip runs without
one; otherwise the machine's caches are used (run twice to compare warm).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from ado_actuators.sfttrainer.execute import environment
from ado_actuators.sfttrainer.plan.launch import environments as plan


def _spec(version: str) -> plan.EnvironmentSpec:
    roots = (*environment.WORKER_ROOTS, "torch")
    return plan.environment_spec(
        version,
        plan.read_package_list(version),
        exact=False,
        worker_needs=environment.worker_needs(roots),
    )


def _ours(spec: plan.EnvironmentSpec, directory: Path) -> list[float]:
    times = []
    for _ in range(2):
        started = time.monotonic()
        built = environment.build(spec, directory, timeout=1800)
        assert isinstance(built, environment.Environment), built
        times.append(time.monotonic() - started)
    return times


def _ray(spec: plan.EnvironmentSpec, kinds: list[str]) -> dict[str, list[float]]:
    import ray
    from ray.runtime_env import RuntimeEnvConfig

    @ray.remote
    def versions() -> str:
        import importlib.metadata

        return importlib.metadata.version("fms-hf-tuning")

    ray.init(address="local", num_cpus=2, include_dashboard=False)
    options = {"pip": "pip_install_options", "uv": "uv_pip_install_options"}
    results = {}
    try:
        for kind in kinds:
            runtime_env = {
                kind: {"packages": list(spec.packages), options[kind]: ["--no-deps"]},
                "config": RuntimeEnvConfig(setup_timeout_seconds=1800),
            }
            times = []
            for _ in range(2):
                started = time.monotonic()
                assert (
                    ray.get(versions.options(runtime_env=runtime_env).remote())
                    == spec.fms_hf_tuning_version
                )
                times.append(time.monotonic() - started)
            results[kind] = times
    finally:
        ray.shutdown()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="2.1.2")
    parser.add_argument("--ray", nargs="*", default=["uv", "pip"], choices=["uv", "pip"])
    parser.add_argument("--cold", action="store_true", help="empty package caches")
    args = parser.parse_args()
    spec = _spec(args.version)
    with tempfile.TemporaryDirectory() as scratch:
        if args.cold:
            os.environ["UV_CACHE_DIR"] = str(Path(scratch) / "uv-cache-actuator")
            os.environ["PIP_NO_CACHE_DIR"] = "1"
        rows = {"actuator (uv venv + uv pip --no-deps)": _ours(spec, Path(scratch) / "envs")}
        if args.cold:
            os.environ["UV_CACHE_DIR"] = str(Path(scratch) / "uv-cache-ray")
        rows |= {f"ray runtime_env {k}": v for k, v in _ray(spec, args.ray).items()}
    print(f"fms-hf-tuning {args.version}, {len(spec.packages)} packages")
    base = rows["actuator (uv venv + uv pip --no-deps)"][0]
    for name, (first, reuse) in rows.items():
        print(f"{name:40s} first {first:7.1f} s ({first / base:5.1f}x)   reuse {reuse:5.2f} s")


if __name__ == "__main__":
    main()
