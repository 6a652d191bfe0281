"""Every fms-hf-tuning release the experiments offer, read the way the trainer reads the one it
runs in: its own tuning/sft_trainer.py, fetched once from the package registry. Fails the day a
version is offered whose API the wrapper cannot read."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ado_actuators.sfttrainer.catalog.entity import FMS_HF_TUNING_VERSIONS
from ado_actuators.sfttrainer.plan.launch import environments as plan
from ado_actuators.sfttrainer.trainer import fms_api


def published_versions() -> list[str]:
    """The offered versions that have a release on the registry (3.0.0.1's list installs from
    git and is refused before anything is built)."""
    published = []
    for version in FMS_HF_TUNING_VERSIONS:
        try:
            plan.environment_spec(version, plan.read_package_list(version), exact=True)
        except plan.NoEnvironment:
            continue
        published.append(version)
    return published


@pytest.fixture(scope="module")
def releases(tmp_path_factory) -> dict[str, Path]:
    """version -> its wheel, downloaded once (kept with SFTTRAINER_TEST_ENVIRONMENTS, as the
    test environments are)."""
    kept = os.environ.get("SFTTRAINER_TEST_ENVIRONMENTS")
    directory = Path(kept) / "releases" if kept else tmp_path_factory.mktemp("releases")
    directory.mkdir(parents=True, exist_ok=True)

    def fetch(version: str) -> Path:
        wheel = directory / f"fms_hf_tuning-{version}-py3-none-any.whl"
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
                    f"{plan.FMS}=={version}",
                    "-d",
                    str(directory),
                ],
                check=True,
                capture_output=True,
                timeout=300,
            )
        return wheel

    versions = published_versions()
    with ThreadPoolExecutor(4) as pool:
        return dict(zip(versions, pool.map(fetch, versions), strict=True))


def read(wheel: Path, member: str) -> str:
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(member).decode()


def test_only_the_git_only_release_is_unpublished():
    assert set(FMS_HF_TUNING_VERSIONS) - set(published_versions()) == {"3.0.0.1"}


@pytest.mark.parametrize("version", published_versions())
def test_the_wrapper_reads_how_each_release_calls_train(releases, version):
    source = read(releases[version], str(fms_api.SOURCE))
    api = fms_api.read_api(source, f"fms-hf-tuning {version}")
    # every value parse_arguments returns reaches train(), directly or inside a built config
    used = {fms_api.METADATA}
    for _, where in api.train_sources:
        if isinstance(where, str):
            used.add(where)
        elif isinstance(where, fms_api.Built):
            used |= {name for _, name in (*where.keywords, *where.attributes)}
    assert used == set(api.parsed_names), version
    sources = dict(api.train_sources)
    assert sources["train_args"] == "training_args" and sources["peft_config"] == "tune_config"
    # the tracker configuration is whatever the release has: one value, or built from several
    trackers = sources["tracker_configs"]
    if isinstance(trackers, fms_api.Built):
        assert trackers.constructor == "TrackerConfigFactory"
        assert ("aim_config", "aim_config") in (*trackers.keywords, *trackers.attributes)
    else:
        assert trackers == "tracker_configs"


@pytest.mark.parametrize("version", published_versions())
def test_the_first_release_with_vision_datasets_is_the_declared_one(releases, version):
    argument, _ = plan.VISION_DATASET_ARGUMENT
    configs = read(releases[version], "tuning/config/configs.py")
    has_argument = argument.removeprefix("--") in configs
    assert has_argument == (plan.vision_problem(version, vision=True) is None), version
