"""What the releases an fms-hf-tuning version pins do with a model family, read once from their
own code: the package list each version pins (plan/packages/fms-hf-tuning_v*.txt) and what
tests/unit/test_transformers_releases.py read from each pinned transformers wheel
(plan/packages/transformers-loss.yaml: the loss's logits, the layers' checkpointing, the
attention a family runs by default, and which of the catalogue's model types the release can
build at all: build_problem). The memory formula (plan/memory/logits.py) and the speed model
both read the attention that runs from here, so they cannot disagree on it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from packaging.version import Version

from ado_actuators.sfttrainer.catalog.entity import FMS_HF_TUNING_VERSIONS
from ado_actuators.sfttrainer.contract.memory_trace import Attention

PACKAGES_DIR = Path(__file__).parent.parent / "packages"
FMS = "fms-hf-tuning"
RECORD = "transformers-loss.yaml"
"""Under plan/packages: per transformers release and family, what its source does."""


class NoEnvironment(ValueError):
    """The requested version cannot be given an environment (a user-fixable reason)."""


def list_path(version: str, directory: Path | None = None) -> Path:
    return (directory or PACKAGES_DIR) / f"{FMS}_v{version}.txt"


def read_package_list(version: str, directory: Path | None = None) -> list[str]:
    """The requirement lines fms-hf-tuning `version` pins (plan/packages), comments left out."""
    path = list_path(version, directory)
    try:
        text = path.read_text()
    except OSError as error:
        raise NoEnvironment(f"no package list for fms-hf-tuning {version}: {error}") from None
    return [s for line in text.splitlines() if (s := line.split(" #")[0].strip()) and s[0] != "#"]


@functools.cache
def record() -> dict[str, Any]:
    text = resources.files("ado_actuators.sfttrainer.plan").joinpath("packages", RECORD).read_text()
    found: dict[str, Any] = yaml.safe_load(text)
    return found


def pinned_release(fms_hf_tuning_version: str, package: str) -> str | None:
    """The release of `package` the version's package list pins (plan/packages)."""
    for line in read_package_list(fms_hf_tuning_version):
        if pinned := re.fullmatch(rf"{package}==([\w.]+)", line.strip()):
            return pinned.group(1)
    return None


def transformers_release(fms_hf_tuning_version: str) -> str | None:
    """The transformers release the version's package list pins (plan/packages)."""
    return pinned_release(fms_hf_tuning_version, "transformers")


def default_attention(transformers_version: str | None, model_type: str) -> str:
    """The attention the release runs for a family when flash-attn is not asked for
    (plan/memory/logits.read_attention); "sdpa", the newest releases' way, where the record does not say."""
    family = record()["releases"].get(transformers_version, {}).get(model_type) or {}
    return str(family.get("attention", "sdpa"))


def checkpointing(transformers_version: str | None, model_type: str) -> str:
    """How the release checkpoints a family's layers (plan/memory/logits.read_checkpointing):
    "layer", inside the layer's own call (FSDP's unit holds the checkpoint); "model", by the
    model's forward around each layer's call (the unit inside the checkpoint); "none". "layer"
    where the record does not say (the newest releases' way)."""
    family = record()["releases"].get(transformers_version, {}).get(model_type) or {}
    return str(family.get("checkpoints", "layer"))


def checkpointing_for(fms_hf_tuning_version: str, model_type: str) -> str:
    """How the release an fms-hf-tuning version trains with checkpoints a family's layers."""
    return checkpointing(transformers_release(fms_hf_tuning_version), model_type)


def attention_for(fms_hf_tuning_version: str, model_type: str, flash_attn: bool) -> Attention:
    """The attention that runs: flash-attn 2 when asked for (`flash_attn`), else the default of
    the transformers release the fms-hf-tuning version pins (default_attention)."""
    if flash_attn:
        return "flash_attention_2"
    default = default_attention(transformers_release(fms_hf_tuning_version), model_type)
    return "eager" if default == "eager" else "sdpa"


def installs_from_url(line: str) -> bool:
    """Whether a package list's line installs from a URL (`name@git+https://...`), which
    the package registry cannot serve."""
    return "@" in line and "://" in line


def _can_build(fms_hf_tuning_version: str, model_type: str) -> bool:
    """Whether the version's pinned transformers release builds `model_type` models, read from
    the record (its builds); False too where its package list installs from git (no release on
    the package registry: plan/launch/environments.environment_spec refuses it)."""
    try:
        lines = read_package_list(fms_hf_tuning_version)
    except NoEnvironment:
        return False
    # a URL besides fms-hf-tuning's own line (the registry's release replaces that one)
    if any(installs_from_url(line) and not line.startswith(FMS) for line in lines):
        return False
    release = transformers_release(fms_hf_tuning_version)
    return model_type in record().get("builds", {}).get(release, ())


def build_problem(fms_hf_tuning_version: str, model_type: str) -> str | None:
    """Why the transformers release `fms_hf_tuning_version` pins cannot build `model_type` models,
    naming the earliest offered version (by version order) whose release can. None where it can,
    where the record lists the model type under no release (a local model of another type is not
    judged), or where the version pins no release the record holds."""
    builds: dict[str, list[str]] = record().get("builds", {})
    if not any(model_type in types for types in builds.values()):
        return None
    try:
        release = transformers_release(fms_hf_tuning_version)
    except NoEnvironment:
        return None
    if release not in builds or model_type in builds[release]:
        return None
    offered = sorted(FMS_HF_TUNING_VERSIONS, key=Version)
    first = next((v for v in offered if _can_build(v, model_type)), None)
    fix = (
        f"choose fms_hf_tuning_version {first} or later"
        if first
        else "no offered fms_hf_tuning_version can"
    )
    return (
        f"fms-hf-tuning {fms_hf_tuning_version} pins transformers {release}, which cannot build "
        f"{model_type} models; {fix}"
    )


def model_types(config: Mapping[str, Any]) -> Iterator[str]:
    """The model types a config.json names: its own, then its sub-configs' (a vision model's
    text_config and vision_config), each once."""
    seen: set[str] = set()
    pending: list[Mapping[str, Any]] = [config]
    while pending:
        current = pending.pop(0)
        if isinstance(kind := current.get("model_type"), str) and kind not in seen:
            seen.add(kind)
            yield kind
        pending.extend(v for v in current.values() if isinstance(v, Mapping))


def config_build_problem(fms_hf_tuning_version: str, config: Mapping[str, Any]) -> str | None:
    """build_problem of the first model type the config.json names (model_types) that the
    version's release cannot build; None where it builds them all."""
    for kind in model_types(config):
        if problem := build_problem(fms_hf_tuning_version, kind):
            return problem
    return None
