"""The Python a measurement trains with, on the node that trains: built, cached, checked.

The installed fms-hf-tuning needs nothing: the worker's own interpreter. Any other version gets
a virtual environment built from its package list (plan/launch/environments.py) with uv: created with
the worker's site-packages behind its own (so the worker's torch, this package and its
dependencies stay importable), the list installed --no-deps, the libraries the trainer imports
probed, then published atomically under a name that hashes everything it depends on. Builds run
under a file lock, so concurrent measurements on one node build once; later ones reuse it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
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

from ado_actuators.sfttrainer.catalog.entity import EntityValues
from ado_actuators.sfttrainer.catalog.experiments import ExperimentDefinition
from ado_actuators.sfttrainer.contract.outcomes import Failed
from ado_actuators.sfttrainer.execute import install
from ado_actuators.sfttrainer.plan.launch import environments as plan
from ado_actuators.sfttrainer.trainer import fms_api

READY = "sfttrainer-environment.json"
PROBE_MODULES = (
    "tuning.sft_trainer",
    "transformers",
    "trl",
    "peft",
    "accelerate",
    "datasets",
    "torch",
    "ado_actuators.sfttrainer.trainer.callback",
)
WORKER_ROOTS = ("pydantic", "pydantic-core")
"""The worker's packages the trainer imports next to any list (this package's own contract)."""


class EnvironmentRequest(pydantic.BaseModel):
    """How the node chooses and builds the environment (from the actuator parameters)."""

    match_exact_dependencies: bool
    directory: Path
    build_timeout_seconds: float
    package_lists_directory: Path | None = None
    find_links: tuple[str, ...] = ()


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
    values: EntityValues,
    definition: ExperimentDefinition,
    request: EnvironmentRequest,
    *,
    on_gpus: bool,
) -> Environment | Failed:
    """The environment for this measurement, built if needed; or why there can be none."""
    version = values.fms_hf_tuning_version
    assert version is not None  # catalog.domain_problems refused None before planning
    wanted = plan.requested_features(values, definition.sft_trainer_arguments, on_gpus=on_gpus)
    if version == installed_fms_hf_tuning():
        names = (d.metadata["Name"] for d in importlib.metadata.distributions())
        if problems := plan.feature_problems(wanted, plan.provided_features(names), version, None):
            return Failed("; ".join(problems))
        installed = Environment(
            python=sys.executable,
            metadata={"fms_hf_tuning_version": version, "installed": True},
        )
        source = importlib.metadata.distribution(plan.FMS).locate_file(fms_api.SOURCE)
        return _readable_api(installed, Path(str(source)), version)
    exact = request.match_exact_dependencies
    try:
        lines = plan.read_package_list(version, request.package_lists_directory)
        roots = WORKER_ROOTS if exact else (*WORKER_ROOTS, "torch")
        spec = plan.environment_spec(version, lines, exact=exact, worker_needs=worker_needs(roots))
    except plan.NoEnvironment as error:
        return Failed(str(error))
    provided = plan.provided_features(spec.names)
    from_worker = {} if exact else worker_features(wanted.keys() - provided)
    if problems := plan.feature_problems(wanted, provided | from_worker.keys(), version, exact):
        return Failed("; ".join(problems))
    chosen = build(spec, request.directory, request.build_timeout_seconds, request.find_links)
    if isinstance(chosen, Failed):
        return chosen
    if from_worker:
        chosen.metadata["features_from_worker"] = from_worker
    sources = sorted(
        Path(chosen.metadata["path"]).glob(f"lib/python*/site-packages/{fms_api.SOURCE}")
    )
    if not sources:
        return Failed(
            f"the fms-hf-tuning {version} environment {chosen.metadata['path']} has no "
            f"{fms_api.SOURCE}; remove it so the next measurement builds it again"
        )
    return _readable_api(chosen, sources[0], version)


def worker_features(features) -> dict[str, str]:
    """The features among `features` that the worker's own site provides: feature -> where.

    A non-exact environment sees the worker's site-packages behind its own, so a package the
    worker has (a site's flash-attn built for its torch) is importable in training."""
    found = {}
    for feature in sorted(features):
        spec = importlib.util.find_spec(plan.FEATURE_MODULES[feature])
        if spec is None:
            continue
        package = plan.FEATURE_PACKAGES[feature]
        try:
            version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            version = "(no package metadata)"
        found[feature] = f"the worker's {package} {version} ({spec.origin})"
    return found


def _readable_api(chosen: Environment, source: Path, version: str) -> Environment | Failed:
    """The release can be called as its main() calls it (read before anything launches)."""
    try:
        fms_api.read_api(source.read_text(), str(source))
    except (OSError, fms_api.ApiNotUnderstood) as error:
        return Failed(
            f"fms-hf-tuning {version}: the trainer cannot tell how to call this release: "
            f"{error}. Choose another fms_hf_tuning_version"
        )
    return chosen


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


def build(
    spec: plan.EnvironmentSpec, directory: Path, timeout: float, find_links: tuple[str, ...] = ()
) -> Environment | Failed:
    directory = Path(directory).expanduser().absolute()
    name = f"fms-hf-tuning-{spec.fms_hf_tuning_version}-{environment_key(spec)}"
    target = directory / name
    started = time.monotonic()
    if (target / READY).is_file():
        return _ready(target, reused=True)
    directory.mkdir(parents=True, exist_ok=True)
    try:
        with filelock.FileLock(directory / f"{name}.lock", timeout=timeout):
            if (target / READY).is_file():  # built by a concurrent measurement while we waited
                return _ready(target, reused=True)
            remaining = timeout - (time.monotonic() - started)
            if problem := _build_into(spec, target, directory, remaining, find_links):
                return Failed(
                    f"could not build the fms-hf-tuning {spec.fms_hf_tuning_version} "
                    f"environment in {directory}: {problem}"
                )
    except filelock.Timeout:
        return Failed(
            f"timed out after {timeout:g}s waiting for another measurement to build {target}; "
            f"raise environment_build_timeout_seconds or remove {target}.lock if no build runs"
        )
    built = _ready(target, reused=False)
    built.metadata["build_seconds"] = round(time.monotonic() - started, 1)
    return built


def _ready(target: Path, *, reused: bool) -> Environment:
    """A published environment, described by what its build wrote (what went in, and how)."""
    metadata = json.loads((target / READY).read_text())
    return Environment(
        python=_python(target), metadata={**metadata, "path": str(target), "reused": reused}
    )


def _python(env: Path) -> str:
    return str(env / "bin" / "python")


def _build_into(
    spec: plan.EnvironmentSpec,
    target: Path,
    directory: Path,
    timeout: float,
    find_links: tuple[str, ...],
) -> str | None:
    """Builds in a scratch directory and renames it into place; returns why it failed."""
    from uv import find_uv_bin

    scratch = directory / f".build-{target.name}-{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + timeout
    try:
        uv = find_uv_bin()
        venv = [
            uv,
            "venv",
            "--quiet",
            "--system-site-packages",
            "--python",
            sys.executable,
            str(scratch),
        ]
        if problem := install.run(venv, deadline)[0]:
            return problem
        _extend_with_worker_site(scratch)
        try:
            against_torch = install.install(
                uv,
                _python(scratch),
                spec.packages,
                find_links=find_links,
                scratch=scratch,
                deadline=deadline,
            )
        except install.InstallFailed as error:
            return str(error)
        probe = [
            _python(scratch),
            "-c",
            f"import importlib; [importlib.import_module(m) for m in {PROBE_MODULES!r}]",
        ]
        if problem := install.run(probe, deadline)[0]:
            return problem
        ready = {**spec.summary(), "built_against_torch": against_torch}
        (scratch / READY).write_text(json.dumps(ready, indent=1))
        os.replace(scratch, target)
        return None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _extend_with_worker_site(env: Path) -> None:
    """A .pth that appends the worker's site-packages after the environment's own.

    A virtual environment's --system-site-packages reaches the base interpreter's, not the
    worker's virtual environment (where its torch and this package live). `site.addsitedir`
    also runs the worker's .pth files (editable installs).
    """
    purelib = subprocess.run(
        [_python(env), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    lines = [f"import site; site.addsitedir({d!r})" for d in _worker_site_dirs()]
    (Path(purelib) / "_sfttrainer_worker_site.pth").write_text("\n".join(lines) + "\n")
