"""The Python a measurement trains with, on the node that trains: built, cached, checked.

The installed fms-hf-tuning needs nothing: the worker's own interpreter. Any other version gets
a virtual environment built from its package list (plan/environments.py) with uv: created with
the worker's site-packages behind its own (so the worker's torch, this package and its
dependencies stay importable), the list installed --no-deps, the libraries the trainer imports
probed, then published atomically under a name that hashes everything it depends on. Builds run
under a file lock, so concurrent measurements on one node build once; later ones reuse it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import site
import subprocess
import sys
import time
import uuid
from pathlib import Path

import filelock
import pydantic
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from ado_actuators.sfttrainer.outcomes import Failed
from ado_actuators.sfttrainer.plan import environments as plan

READY = "sfttrainer-environment.json"
PROBE_MODULES = ("tuning.sft_trainer", "transformers", "trl", "peft", "accelerate", "datasets",
                 "torch", "ado_actuators.sfttrainer.trainer.callback")  # fmt: skip
WORKER_ROOTS = ("pydantic", "pydantic-core")
"""The worker's packages the trainer imports next to any list (this package's own contract)."""
ERROR_LINES = 15


class EnvironmentRequest(pydantic.BaseModel):
    """How the node chooses and builds the environment (from the actuator parameters)."""

    match_exact_dependencies: bool
    directory: Path
    build_timeout_seconds: float
    package_lists_directory: Path | None = None


class Environment(pydantic.BaseModel):
    python: str
    metadata: dict


def installed_fms_hf_tuning() -> str | None:
    try:
        return importlib.metadata.version(plan.FMS)
    except importlib.metadata.PackageNotFoundError:
        return None


def worker_needs(roots: tuple[str, ...]) -> dict[str, SpecifierSet]:
    """What the worker's `roots` (and what they need, transitively) require of other packages."""
    needs: dict[str, SpecifierSet] = {}
    todo, seen = list(roots), set()
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for text in requires:
            requirement = Requirement(text)
            if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
                continue
            dependency = canonicalize_name(requirement.name)
            needs[dependency] = needs.get(dependency, SpecifierSet()) & requirement.specifier
            todo.append(dependency)
    for root in roots:  # the roots themselves stay at the worker's version
        try:
            needs[canonicalize_name(root)] = SpecifierSet(f"=={importlib.metadata.version(root)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return needs


def choose(
    values, definition, request: EnvironmentRequest, *, on_gpus: bool
) -> Environment | Failed:
    """The environment for this measurement, built if needed; or why there can be none."""
    version = values.fms_hf_tuning_version
    wanted = plan.requested_features(values, definition.sft_trainer_arguments, on_gpus=on_gpus)
    if version == installed_fms_hf_tuning():
        names = (d.metadata["Name"] for d in importlib.metadata.distributions())
        if problems := plan.feature_problems(wanted, plan.provided_features(names), version, None):
            return Failed("; ".join(problems))
        return Environment(
            python=sys.executable,
            metadata={"fms_hf_tuning_version": version, "installed": True},
        )
    exact = request.match_exact_dependencies
    try:
        lines = plan.read_package_list(version, request.package_lists_directory)
        roots = WORKER_ROOTS if exact else (*WORKER_ROOTS, "torch")
        spec = plan.environment_spec(version, lines, exact=exact, worker_needs=worker_needs(roots))
    except plan.NoEnvironment as error:
        return Failed(str(error))
    provided = plan.provided_features(spec.names)
    if problems := plan.feature_problems(wanted, provided, version, exact):
        return Failed("; ".join(problems))
    return build(spec, request.directory, request.build_timeout_seconds)


def _worker_site_dirs() -> list[str]:
    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    return list(dict.fromkeys(d for d in dirs if Path(d).is_dir()))


def environment_key(spec: plan.EnvironmentSpec) -> str:
    """Everything the built environment depends on: its packages and the worker it extends."""
    identity = {
        "packages": spec.packages,
        "python": os.path.realpath(sys.executable),  # python and python3 are one interpreter
        "version": sys.version,
        "worker_site": _worker_site_dirs(),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def build(spec: plan.EnvironmentSpec, directory: Path, timeout: float) -> Environment | Failed:
    directory = Path(directory).expanduser().absolute()
    name = f"fms-hf-tuning-{spec.fms_hf_tuning_version}-{environment_key(spec)}"
    target = directory / name
    metadata = {**spec.summary(), "path": str(target)}
    started = time.monotonic()
    if (target / READY).is_file():
        return Environment(python=_python(target), metadata={**metadata, "reused": True})
    directory.mkdir(parents=True, exist_ok=True)
    try:
        with filelock.FileLock(directory / f"{name}.lock", timeout=timeout):
            if (target / READY).is_file():  # built by a concurrent measurement while we waited
                return Environment(python=_python(target), metadata={**metadata, "reused": True})
            remaining = timeout - (time.monotonic() - started)
            if problem := _build_into(spec, target, directory, remaining):
                return Failed(f"could not build the fms-hf-tuning {spec.fms_hf_tuning_version} "
                              f"environment in {directory}: {problem}")  # fmt: skip
    except filelock.Timeout:
        return Failed(
            f"timed out after {timeout:g}s waiting for another measurement to build {target}; "
            f"raise environment_build_timeout_seconds or remove {target}.lock if no build runs"
        )
    seconds = round(time.monotonic() - started, 1)
    return Environment(
        python=_python(target), metadata={**metadata, "reused": False, "build_seconds": seconds}
    )


def _python(env: Path) -> str:
    return str(env / "bin" / "python")


def _build_into(
    spec: plan.EnvironmentSpec, target: Path, directory: Path, timeout: float
) -> str | None:
    """Builds in a scratch directory and renames it into place; returns why it failed."""
    from uv import find_uv_bin

    scratch = directory / f".build-{target.name}-{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + timeout
    try:
        uv = find_uv_bin()
        steps = [
            [uv, "venv", "--quiet", "--system-site-packages", "--python", sys.executable,
             str(scratch)],
            None,  # the worker's site-packages, written below
            [uv, "pip", "install", "--no-deps", "--python", _python(scratch),
             "-r", str(scratch / "requirements.txt")],
            [_python(scratch), "-c",
             f"import importlib; [importlib.import_module(m) for m in {PROBE_MODULES!r}]"],
        ]  # fmt: skip
        for step in steps:
            if step is None:
                _extend_with_worker_site(scratch, spec)
                continue
            if problem := _run(step, deadline):
                return problem
        (scratch / READY).write_text(json.dumps(spec.summary(), indent=1))
        os.replace(scratch, target)
        return None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _extend_with_worker_site(env: Path, spec: plan.EnvironmentSpec) -> None:
    """A .pth that appends the worker's site-packages after the environment's own.

    A virtual environment's --system-site-packages reaches the base interpreter's, not the
    worker's virtual environment (where its torch and this package live). `site.addsitedir`
    also runs the worker's .pth files (editable installs).
    """
    purelib = subprocess.run(
        [_python(env), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    lines = [f"import site; site.addsitedir({d!r})" for d in _worker_site_dirs()]
    (Path(purelib) / "_sfttrainer_worker_site.pth").write_text("\n".join(lines) + "\n")
    (env / "requirements.txt").write_text("\n".join(spec.packages) + "\n")


def _run(argv: list[str], deadline: float) -> str | None:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return "environment_build_timeout_seconds ran out"
    env = {**os.environ, "UV_NO_PROGRESS": "1", "PYTHONNOUSERSITE": "1"}
    env.pop("VIRTUAL_ENV", None)
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=remaining, env=env)
    except subprocess.TimeoutExpired as error:
        tail = _tail(error.stderr or error.stdout)
        return f"{Path(argv[0]).name} {argv[1]} ran past environment_build_timeout_seconds{tail}"
    if result.returncode != 0:
        tail = _tail(result.stderr or result.stdout)
        return f"`{Path(argv[0]).name} {argv[1]}` exited {result.returncode}{tail}"
    return None


def _tail(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        output = output.decode(errors="replace")
    lines = [line for line in (output or "").splitlines() if line.strip()]
    return (":\n" + "\n".join(lines[-ERROR_LINES:])) if lines else ""
