"""The logits' memory of every transformers release an offered fms-hf-tuning version pins, read
from the release itself: its wheel, fetched once from the package registry, through the same
`read_loss_code` the record was written with; and which of the model types the catalogue's
shipped shapes name (catalog/model_shapes.yaml) each release can build: those its
models/auto/configuration_auto.py maps to a config class (CONFIG_MAPPING_NAMES). Fails when
plan/packages/transformers-loss.yaml and the releases disagree, or when a version pins a release
the record lacks. The same for
TRL's copy of the logits (plan/memory/logits.trl_copies_logits): each pinned TRL release's
SFTTrainer, read from its wheel.

    python tests/unit/test_transformers_releases.py --write DIR   # rewrite the record from
                                                                   # the wheels in DIR
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import distribution
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

from ado_actuators.sfttrainer.catalog.entity import FMS_HF_TUNING_VERSIONS
from ado_actuators.sfttrainer.catalog.model_shapes import shipped_shapes
from ado_actuators.sfttrainer.plan.memory import logits as logits_memory
from ado_actuators.sfttrainer.plan.model import releases

RECORD = Path(logits_memory.__file__).parent.parent / "packages" / releases.RECORD


def pinned_releases() -> dict[str, list[str]]:
    """transformers release -> the fms-hf-tuning versions whose package list pins it."""
    pins: dict[str, list[str]] = {}
    for version in FMS_HF_TUNING_VERSIONS:
        if release := releases.transformers_release(version):
            pins.setdefault(release, []).append(version)
    return pins


def fetch(release: str, directory: Path, package: str = "transformers") -> Path:
    wheel = directory / f"{package}-{release}-py3-none-any.whl"
    if not wheel.is_file():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary",
                ":all:",
                f"{package}=={release}",
                "-d",
                str(directory),
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )
    return wheel


def read_release(wheel: Path) -> dict[str, dict[str, str]]:
    """family -> {upcast, shifts}, for every family the release has a modeling file for."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        loss_path = "transformers/loss/loss_utils.py"
        loss = archive.read(loss_path).decode() if loss_path in names else None
        read = {}
        for model_type, folder in logits_memory.FAMILY_MODULES.items():
            path = f"transformers/models/{folder}/modeling_{folder}.py"
            if path in names:
                source = archive.read(path).decode()
                code = logits_memory.read_loss_code(source, loss)
                read[model_type] = {
                    "upcast": code.upcast,
                    "shifts": code.shifts,
                    "checkpoints": logits_memory.read_checkpointing(source),
                    "attention": logits_memory.read_attention(source),
                }
        return read


CONFIG_AUTO = "transformers/models/auto/configuration_auto.py"


def catalogue_model_types() -> set[str]:
    """Every model_type the shipped shapes' config.json fields name, their sub-configs'
    (a vision model's text_config and vision_config) included; a weights format's own fields too."""
    found: set[str] = set()

    def collect(config: dict) -> None:
        if isinstance(config.get("model_type"), str):
            found.add(config["model_type"])
        for value in config.values():
            if isinstance(value, dict):
                collect(value)

    for entry in shipped_shapes().values():
        for config in [entry.get("config")] + [
            own.get("config") for own in entry.values() if isinstance(own, dict)
        ]:
            if isinstance(config, dict):
                collect(config)
    return found


def read_builds(wheel: Path) -> list[str]:
    """The catalogue's model types the release can build: those its CONFIG_MAPPING_NAMES maps
    to a config class (what AutoConfig reads a config.json's model_type by)."""
    with zipfile.ZipFile(wheel) as archive:
        tree = ast.parse(archive.read(CONFIG_AUTO).decode())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "CONFIG_MAPPING_NAMES" for t in node.targets
        ):
            assert isinstance(node.value, ast.Call), "CONFIG_MAPPING_NAMES is not OrderedDict(...)"
            names = dict(ast.literal_eval(node.value.args[0]))
            return sorted(catalogue_model_types() & set(names))
    raise AssertionError(f"no CONFIG_MAPPING_NAMES in {wheel.name}'s {CONFIG_AUTO}")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    kept = os.environ.get("SFTTRAINER_TEST_ENVIRONMENTS")
    directory = Path(kept) / "releases" if kept else tmp_path_factory.mktemp("transformers")
    directory.mkdir(parents=True, exist_ok=True)
    releases = sorted(pinned_releases())
    with ThreadPoolExecutor(4) as pool:
        return dict(zip(releases, pool.map(lambda r: fetch(r, directory), releases), strict=True))


@pytest.mark.slow
def test_the_record_is_what_each_pinned_release_reads(wheels):
    record = yaml.safe_load(RECORD.read_text())["releases"]
    assert set(record) == set(wheels), "the record and the pinned releases differ"
    for release, wheel in wheels.items():
        assert record[release] == read_release(wheel), release


@pytest.mark.slow
def test_the_record_says_what_each_pinned_release_can_build(wheels):
    builds = yaml.safe_load(RECORD.read_text())["builds"]
    assert set(builds) == set(wheels), "the record and the pinned releases differ"
    for release, wheel in wheels.items():
        assert builds[release] == read_builds(wheel), release
    # the reader itself: the newest pinned release builds every catalogue model type
    assert set(builds[max(builds, key=Version)]) == catalogue_model_types()


def test_every_pinned_release_is_in_the_record():
    """The fast half: an fms-hf-tuning list pinning a new transformers needs the record
    rewritten (the slow test above then checks it against the release)."""
    record = yaml.safe_load(RECORD.read_text())["releases"]
    assert set(pinned_releases()) == set(record)
    assert logits_memory.loss_code("4.45.2", "llama") == logits_memory.LossCode("model", "logits")


def test_every_catalogue_model_type_is_judged_by_the_record():
    """The fast half of what the releases build: a shipped shape of a new model type needs the
    record rewritten (plan/model/releases.build_problem judges only the types it lists)."""
    builds = yaml.safe_load(RECORD.read_text())["builds"]
    assert set(builds) == set(pinned_releases())
    assert catalogue_model_types() == set().union(*builds.values())
    assert "granitemoehybrid" in catalogue_model_types()


SFT_TRAINER = "trl/trainer/sft_trainer.py"
TRL_BOUNDARY = ("0.14.0", "0.15.0")
"""The last release without TRL's copy of the logits and the first with it
(plan/memory/logits.TRL_TOKEN_ACCURACY): read from their wheels beside the pinned ones."""


def sft_copies_logits(source: str) -> bool:
    """Whether SFTTrainer's own compute_loss slices the returned logits one position short and
    makes them contiguous (a [tokens, vocab] copy while the loss's saved tensors live)."""
    found = re.search(r"^    def compute_loss\(.*?(?=^    def |^class |\Z)", source, re.S | re.M)
    return bool(found) and ".logits[..., :-1, :].contiguous()" in found.group(0)


def pinned_trl() -> dict[str, list[str]]:
    """TRL release -> the fms-hf-tuning versions whose package list pins it."""
    pins: dict[str, list[str]] = {}
    for version in FMS_HF_TUNING_VERSIONS:
        if release := releases.pinned_release(version, "trl"):
            pins.setdefault(release, []).append(version)
    return pins


@pytest.mark.slow
def test_trl_copies_the_logits_where_its_release_does(tmp_path_factory):
    kept = os.environ.get("SFTTRAINER_TEST_ENVIRONMENTS")
    directory = Path(kept) / "releases" if kept else tmp_path_factory.mktemp("trl")
    directory.mkdir(parents=True, exist_ok=True)
    pins = pinned_trl()
    for release in sorted(set(pins) | set(TRL_BOUNDARY)):
        with zipfile.ZipFile(fetch(release, directory, "trl")) as archive:
            copies = sft_copies_logits(archive.read(SFT_TRAINER).decode())
        assert logits_memory.trl_copies_logits(release) is copies, release
        for version in pins.get(release, []):
            assert logits_memory.copies_logits(version) is copies, version
    assert [logits_memory.trl_copies_logits(r) for r in TRL_BOUNDARY] == [False, True]


def test_the_installed_trl_copies_the_logits_as_its_source_says():
    """The fast half: the TRL this environment installs (fms-hf-tuning 3.2.2's pin), its
    sft_trainer.py read where it lies, not imported."""
    installed = distribution("trl")
    assert releases.pinned_release("3.2.2", "trl") == installed.version
    source = Path(str(installed.locate_file(SFT_TRAINER))).read_text()
    assert sft_copies_logits(source)
    assert logits_memory.trl_copies_logits(installed.version)
    assert logits_memory.copies_logits("3.2.2")
    # the reader itself: SFTTrainer before 0.15 had no compute_loss of its own
    assert not sft_copies_logits(source.replace("    def compute_loss(", "    def other_loss("))


def write(directory: Path) -> None:
    releases = {r: read_release(fetch(r, directory)) for r in sorted(pinned_releases())}
    builds = {r: read_builds(fetch(r, directory)) for r in sorted(pinned_releases())}
    pins = pinned_releases()
    header = (
        "# Read by plan/memory/logits.py. What each transformers release pinned by an offered\n"
        "# fms-hf-tuning version does to the logits of a causal LM's loss, read from the\n"
        "# release's own source (models/<family>/modeling_<family>.py, loss/loss_utils.py) by\n"
        "# plan/memory/logits.read_loss_code. Written by\n"
        "# tests/unit/test_transformers_releases.py --write; the same test checks it against the\n"
        "# wheels. upcast: where the logits become fp32 (model | loss | none); shifts: what the\n"
        "# loss shifts (logits: a copy | labels); checkpoints: how the family's layers are\n"
        "# checkpointed (layer: by the layer itself; model: by the model's forward around each\n"
        "# layer; none: not at all; plan/memory/logits.read_checkpointing); attention: what runs\n"
        "# when flash-attn is not asked for (sdpa | eager; plan/memory/logits.read_attention).\n"
        "# builds: per release, the model types the catalogue's shipped shapes name\n"
        "# (catalog/model_shapes.yaml, sub-configs included) that the release can build: those\n"
        "# its models/auto/configuration_auto.py CONFIG_MAPPING_NAMES maps to a config class\n"
        "# (read by plan/model/releases.build_problem).\n"
    )
    body = {
        "builds": builds,
        "pinned_by": {r: pins[r] for r in sorted(pins)},
        "releases": releases,
    }
    RECORD.write_text(header + yaml.safe_dump(body, sort_keys=True, default_flow_style=None))


if __name__ == "__main__":
    if sys.argv[1:2] != ["--write"] or len(sys.argv) != 3:
        sys.exit("usage: test_transformers_releases.py --write WHEEL_DIRECTORY")
    write(Path(sys.argv[2]))
