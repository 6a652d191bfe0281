"""Which packages a measurement's fms-hf-tuning version is trained with, as data.

Each version the experiments offer has a package list under `packages/` (a `pip freeze` of a
CUDA machine that ran it; 3.2.2's lists what it needs next to an installed torch). A measurement
whose version is not the installed one trains in an environment built from that list
(execute/environment.py builds it); this module decides what goes in, what is left out and why,
and which optional features the result can provide. No I/O beyond reading the lists.

The environment is created with the worker's site-packages visible behind its own, so the
worker's torch (match_exact_dependencies: false), this package and its pydantic stay importable.
The lists are complete, so they are installed with --no-deps: nothing is resolved, nothing is
found missing later.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Iterable, Mapping

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from ado_actuators.sfttrainer.catalog.entity import EntityValues
from ado_actuators.sfttrainer.plan.model.releases import FMS as FMS
from ado_actuators.sfttrainer.plan.model.releases import PACKAGES_DIR as PACKAGES_DIR
from ado_actuators.sfttrainer.plan.model.releases import NoEnvironment as NoEnvironment
from ado_actuators.sfttrainer.plan.model.releases import installs_from_url
from ado_actuators.sfttrainer.plan.model.releases import list_path as list_path
from ado_actuators.sfttrainer.plan.model.releases import read_package_list as read_package_list
from ado_actuators.sfttrainer.plan.model.training import fast_kernel_words

GPU_ONLY_PATTERNS = (
    "flash-attn",
    "mamba-ssm",
    "causal-conv1d",
    "fms-acceleration*",
    "nvidia-*",
    "triton",
    "triton-kernels",
    "bitsandbytes",
    "cupy*",
)
"""Canonical names of packages that need NVIDIA GPUs (CUDA kernels) to install or import."""

WORKER_TORCH = ("torch", "torchvision", "torchaudio")
"""match_exact_dependencies: false keeps the worker's own torch (a CPU or a site's CUDA build)."""

CPU_TORCH_PINS: Mapping[str, tuple[str, ...]] = {}
"""Extra pins, per version, that the list needs next to the worker's torch (none measured yet:
the lists' own numpy/pyarrow pins import and train with torch 2.13 CPU)."""

FEATURE_PACKAGES: Mapping[str, str] = {
    "flash_attn": "flash-attn",
    "fast_kernels": "fms-acceleration-foak",
    "fast_moe": "fms-acceleration-moe",
    "gptq": "fms-acceleration-peft",
}
"""Optional feature -> the package that provides it (canonical name)."""

FEATURE_MODULES: Mapping[str, str] = {
    "flash_attn": "flash_attn",
    "fast_kernels": "fms_acceleration_foak",
    "fast_moe": "fms_acceleration_moe",
    "gptq": "fms_acceleration_peft",
}
"""Optional feature -> the module its package installs (what the trainer imports)."""

BUILDS_AGAINST_TORCH = ("flash-attn", "mamba-ssm", "causal-conv1d")
"""Source-only packages whose build imports the installed torch (the spec's "Requirements":
install them after torch, without build isolation). Others are found by the installer saying
so (execute/environment.py)."""

VISION_DATASET_ARGUMENT = ("--dataset_image_field", "2.8.2")
"""The argument fms-hf-tuning reads image datasets with, and the first release that has it
(tests/unit/test_fms_releases.py checks this against every published release's parser)."""

SKIP_PREPARE_DATASET_VERSIONS: frozenset[str] = frozenset()
"""Versions whose command line can set TRL's skip_prepare_dataset. None can: every release
decides it itself (pre-tokenised datasets in 2.x, vision datasets in 3.x)."""


@dataclasses.dataclass(frozen=True)
class EnvironmentSpec:
    """What an environment for one fms-hf-tuning version holds."""

    fms_hf_tuning_version: str
    exact: bool
    packages: tuple[str, ...]  # requirement lines, installed --no-deps
    left_out: tuple[str, ...]  # "line: why", for the result metadata

    @property
    def names(self) -> frozenset[str]:
        return frozenset(package_name(line) for line in self.packages)

    def summary(self) -> dict[str, str | bool | list[str]]:
        return {
            "fms_hf_tuning_version": self.fms_hf_tuning_version,
            "match_exact_dependencies": self.exact,
            "packages": list(self.packages),
            "left_out": list(self.left_out),
        }


def package_name(line: str) -> str:
    """The canonical name a requirement line installs."""
    return canonicalize_name(re.split(r"[\s=<>!~;\[@]", line, maxsplit=1)[0])


def environment_spec(
    version: str,
    lines: Iterable[str],
    *,
    exact: bool,
    worker_needs: Mapping[str, SpecifierSet] | None = None,
) -> EnvironmentSpec:
    """The packages for `version`, from its list `lines`.

    `worker_needs`: what the worker's own packages that stay in use (torch when not exact,
    pydantic for this package) require; a pin outside it is left out so the worker's copy stays.
    """
    packages, left_out, urls = [], [], []
    has_fms = False
    for line in lines:
        name = package_name(line)
        if name == FMS:
            has_fms = True
            line = f"{FMS}=={version}"  # the lists name a local wheel; the registry has it
        if not exact and name in WORKER_TORCH:
            left_out.append(f"{line}: the worker's own torch is used")
            continue
        if not exact and any(fnmatch.fnmatch(name, p) for p in GPU_ONLY_PATTERNS):
            left_out.append(f"{line}: needs NVIDIA GPUs (match_exact_dependencies: false)")
            continue
        if installs_from_url(line):
            urls.append(line)
            continue
        if (needs := (worker_needs or {}).get(name)) is not None and not _pin_fits(line, needs):
            left_out.append(f"{line}: the worker's copy is kept (its packages need {name}{needs})")
            continue
        packages.append(line)
    if urls:
        raise NoEnvironment(
            f"fms-hf-tuning {version} has no release on the package registry: its package list "
            f"installs from git ({'; '.join(urls)}), which the nodes cannot reach; choose "
            f"another fms_hf_tuning_version (e.g. 3.0.0 or 3.1.0)"
        )
    if not has_fms:
        packages.append(f"{FMS}=={version}")
    if not exact:
        packages.extend(CPU_TORCH_PINS.get(version, ()))
    return EnvironmentSpec(version, exact, tuple(packages), tuple(left_out))


def _pin_fits(line: str, needs: SpecifierSet) -> bool:
    try:
        requirement = Requirement(line)
    except InvalidRequirement:
        return True
    pinned = [s.version for s in requirement.specifier if s.operator in ("==", "===")]
    return not pinned or needs.contains(pinned[0], prereleases=True)


def vision_problem(version: str, vision: bool) -> str | None:
    """Why `version` cannot train on a vision dataset (None: it can, or the data is text)."""
    argument, first = VISION_DATASET_ARGUMENT
    if not vision or Version(version) >= Version(first):
        return None
    return (
        f"fms-hf-tuning {version} cannot read vision datasets (it has no {argument}); "
        f"choose fms_hf_tuning_version {first} or later, or a text dataset_id"
    )


def provided_features(package_names: Iterable[str]) -> frozenset[str]:
    names = {canonicalize_name(n) for n in package_names}
    return frozenset(f for f, package in FEATURE_PACKAGES.items() if package in names)


def requested_features(
    values: EntityValues, sft_trainer_arguments: Mapping[str, list[str]], *, on_gpus: bool
) -> dict[str, str]:
    """Optional features the measurement needs -> the setting that asks for it.

    `on_gpus`: the measurement trains on GPUs (not number_gpus ranks run on CPUs, as in tests).
    """
    wanted = {}
    if fast_kernel_words(values, sft_trainer_arguments) is not None:
        wanted["fast_kernels"] = "fast_kernels"
    if values.fast_moe:
        wanted["fast_moe"] = "fast_moe"
    if "auto_gptq" in sft_trainer_arguments:
        wanted["gptq"] = "the GPTQ-LoRA experiment (auto_gptq)"
    # On CPU flash attention is impossible whatever is installed: the trainer turns it off
    # and says so in the metadata. On GPUs a missing package would silently change the result.
    if values.flash_attn and on_gpus:
        wanted["flash_attn"] = "flash_attn: true"
    return wanted


def feature_problems(
    wanted: Mapping[str, str], provided: frozenset[str], version: str, exact: bool | None
) -> list[str]:
    """Why each wanted feature cannot be had; `exact` None: the installed environment."""
    problems = []
    for feature, setting in wanted.items():
        if feature in provided:
            continue
        package = FEATURE_PACKAGES[feature]
        if exact is None:
            where = f"the installed environment (fms-hf-tuning {version}) lacks {package}"
            fix = f"install {package} on the workers"
        elif exact:
            where = f"fms-hf-tuning {version}'s package list has no {package}"
            fix = "choose an fms_hf_tuning_version whose environment provides it"
        else:
            where = (
                f"match_exact_dependencies: false leaves {package} out of the fms-hf-tuning "
                f"{version} environment (it needs NVIDIA GPUs)"
            )
            fix = (
                f"set match_exact_dependencies: true on a GPU cluster, or install {package} "
                f"on the workers (an environment built with false uses the worker's copy)"
            )
        fix += f", or measure without {setting}" if feature != "gptq" else ""
        problems.append(f"{setting} needs {package}, but {where}; {fix}")
    return problems


def skip_prepare_dataset_problem(version: str) -> str | None:
    if version in SKIP_PREPARE_DATASET_VERSIONS:
        return None
    return (
        f"dataset_kwargs_skip_prepare_dataset: fms-hf-tuning {version} has no argument for it "
        f"(it decides skip_prepare_dataset itself); leave it at its default (False)"
    )
