"""What the releases an fms-hf-tuning version pins do with a model family, read once from their
own code: the package list each version pins (plan/packages/fms-hf-tuning_v*.txt) and what
tests/unit/test_transformers_releases.py read from each pinned transformers wheel
(plan/packages/transformers-loss.yaml: the loss's logits, the layers' checkpointing, the
attention a family runs by default). The memory formula (plan/memory/logits.py) and the speed
model both read the attention that runs from here, so they cannot disagree on it.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

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


def attention_for(fms_hf_tuning_version: str, model_type: str, flash_attn: bool) -> Attention:
    """The attention that runs: flash-attn 2 when asked for (`flash_attn`), else the default of
    the transformers release the fms-hf-tuning version pins (default_attention)."""
    if flash_attn:
        return "flash_attention_2"
    default = default_attention(transformers_release(fms_hf_tuning_version), model_type)
    return "eager" if default == "eager" else "sdpa"
