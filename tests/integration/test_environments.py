"""Measurements with an fms-hf-tuning version other than the installed one, without Ray:
the environment is built from the version's package list (real uv, real registry), reused,
and a build that cannot succeed is a Failed outcome carrying the installer's message."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from ado_actuators.sfttrainer.actuator.parameters import SFTTrainerParameters
from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.cli.generate_dataset_text import generate
from ado_actuators.sfttrainer.contract.outcomes import Failed, Measured
from ado_actuators.sfttrainer.contract.trainer_io import RankReport
from ado_actuators.sfttrainer.engine.measurement import measure
from ado_actuators.sfttrainer.execute import install
from ado_actuators.sfttrainer.plan.launch.environments import list_path

DATASET = "news-chars-512-entries-4096"
MAX_SEQ = 128


@pytest.fixture(scope="module")
def params(tmp_path_factory, tiny_model_dir, environments_dir) -> SFTTrainerParameters:
    root = tmp_path_factory.mktemp("envs")
    data = root / "data"
    data.mkdir()
    generate(
        data / datasets.dataset_filename(DATASET),
        datasets.get_shape(DATASET),
        entries=16,
        progress=False,
    )
    return SFTTrainerParameters(
        data_directory=str(data),
        hf_home=str(root / "hf"),
        output_dir=str(root / "out"),
        model_map={"tiny": {"Vanilla": str(tiny_model_dir)}},
        stall_timeout_seconds=300,
        match_exact_dependencies=False,
        environments_directory=str(environments_dir),
        environment_build_timeout_seconds=600,
    )


def entity(**overrides):
    return {
        "model_name": "tiny",
        "model_max_length": MAX_SEQ,
        "batch_size": 2,
        "number_gpus": 0,
        "dataset_id": DATASET,
        "max_steps": 2,
        "gradient_accumulation_steps": 1,
        "torch_dtype": "float32",
        **overrides,
    }


def trained_tokens(outcome: Measured) -> int:
    report = RankReport.read_all(Path(outcome.metadata["workdir"]) / "reports")[0]
    return sum(step.dataset_tokens for step in report.steps)


@pytest.mark.slow
def test_a_version_other_than_the_installed_one_trains_in_its_own_environment_reused_later(
    params, tiny_model_dir, trainer_tools
):
    first = measure(
        entity(fms_hf_tuning_version="3.0.0"),
        "finetune_full_benchmark-v1.0.0",
        params,
        label="v300",
    )
    assert isinstance(first, Measured), getattr(first, "reason", "")
    assert first.metadata["versions"]["fms-hf-tuning"] == "3.0.0"
    assert first.metadata["versions"]["transformers"] == "4.52.4"
    assert first.metadata["versions"]["torch"] == importlib.metadata.version(
        "torch"
    )  # the worker's
    env = first.metadata["environment"]
    assert env["match_exact_dependencies"] is False
    assert any(o.startswith("torch==2.6.0") for o in env["left_out"])
    # the 4 entries trained (2 steps x 2), counted as the spec counts them
    data = Path(params.data_directory) / datasets.dataset_filename(DATASET)
    first_four = data.with_name("first-four.jsonl")
    first_four.write_text("".join(data.read_text().splitlines(keepends=True)[:4]))
    expected = sum(trainer_tools.spec_dataset_tokens(tiny_model_dir, first_four, MAX_SEQ))
    assert trained_tokens(first) == expected

    started = time.monotonic()
    second = measure(
        entity(fms_hf_tuning_version="3.0.0", batch_size=4),
        "finetune_lora_benchmark-v1.0.0",
        params,
        label="v300-again",
    )
    assert isinstance(second, Measured), getattr(second, "reason", "")
    assert second.metadata["environment"]["reused"] is True
    assert second.metadata["environment"]["path"] == env["path"]
    print(
        f"first build {env.get('build_seconds')} s; second measurement {time.monotonic() - started:.1f} s"
    )


@pytest.mark.slow
def test_an_environment_that_cannot_be_built_fails_with_the_installers_message(params, tmp_path):
    lists = tmp_path / "lists"
    lists.mkdir()
    shipped = list_path("2.1.2").read_text()
    (lists / list_path("2.1.2").name).write_text(shipped.replace("peft==0.13.2", "peft==0.0.404"))
    broken = params.model_copy(
        update={
            "package_lists_directory": str(lists),
            "environments_directory": str(tmp_path / "envs"),
        }
    )
    outcome = measure(entity(), "finetune_full_benchmark-v1.0.0", broken, label="broken")
    assert isinstance(outcome, Failed)
    assert "could not build the fms-hf-tuning 2.1.2 environment" in outcome.reason
    assert "peft==0.0.404" in outcome.reason  # uv's own words about the pin
    assert not [p for p in (tmp_path / "envs").iterdir() if p.is_dir()], "nothing half-built left"


def test_a_build_step_past_its_time_is_stopped_and_said(tmp_path):
    deadline = time.monotonic() + 1
    problem, _ = install.run([sys.executable, "-c", "import time; time.sleep(60)"], deadline)
    assert problem and "ran past environment_build_timeout_seconds" in problem


def test_a_failing_build_step_reports_its_last_lines():
    problem, _ = install.run(
        [
            sys.executable,
            "-c",
            "import sys; print('\\n'.join(map(str, range(40))), file=sys.stderr); sys.exit(3)",
        ],
        time.monotonic() + 60,
    )
    assert problem.splitlines()[-1] == "39" and "exited 3" in problem
    assert "24" not in problem.splitlines()[1:], "only the last lines"


TORCH_KERNELS = "torchy-kernels"
SETUP_PY = f"""import torch  # builds against the installed torch, as flash-attn does
from setuptools import setup
setup(name="{TORCH_KERNELS}", version="0.1.0", py_modules=["torchy_kernels"])
"""


def torch_importing_sdist(directory: Path) -> Path:
    """A source package standing in for flash-attn: its setup.py imports torch."""
    source = directory / "torchy_kernels-0.1.0"
    source.mkdir(parents=True)
    (source / "setup.py").write_text(SETUP_PY)
    (source / "torchy_kernels.py").write_text("import torch\nBUILT_FOR = torch.__version__\n")
    archive = directory / "links" / "torchy_kernels-0.1.0.tar.gz"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source, arcname=source.name)
    return archive.parent


@pytest.mark.slow
def test_exact_mode_builds_a_torch_importing_package_from_find_links_against_torch(
    params, tmp_path, monkeypatch
):
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))  # no wheel built earlier
    links = torch_importing_sdist(tmp_path)
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / list_path("3.1.0").name).write_text(f"{TORCH_KERNELS}==0.1.0\n")
    # without the phases: one isolated install, as before, fails at once for want of torch
    from uv import find_uv_bin

    venv = tmp_path / "one-phase"
    assert (
        install.run([find_uv_bin(), "venv", "--quiet", str(venv)], time.monotonic() + 60)[0] is None
    )
    problem, output = install.run(
        [
            find_uv_bin(),
            "pip",
            "install",
            "--no-deps",
            "--python",
            str(venv / "bin" / "python"),
            "--find-links",
            str(links),
            f"{TORCH_KERNELS}==0.1.0",
        ],
        time.monotonic() + 120,
    )
    assert problem and "No module named 'torch'" in output
    exact = params.model_copy(
        update={
            "package_lists_directory": str(lists),
            "match_exact_dependencies": True,
            "environments_directory": str(tmp_path / "envs"),
            "find_links": [str(links)],
        }
    )
    outcome = measure(
        entity(fms_hf_tuning_version="3.1.0"),
        "finetune_full_benchmark-v1.0.0",
        exact,
        label="torch-kernels",
    )
    assert isinstance(outcome, Measured), getattr(outcome, "reason", "")
    env = outcome.metadata["environment"]
    assert env["built_against_torch"] == [f"{TORCH_KERNELS}==0.1.0"]
    assert outcome.metadata["versions"]["fms-hf-tuning"] == "3.1.0"
    assert outcome.metadata["versions"]["transformers"] == importlib.metadata.version(
        "transformers"
    )
    built = subprocess.run(
        [
            env["path"] + "/bin/python",
            "-c",
            "import torchy_kernels; print(torchy_kernels.BUILT_FOR)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert built == importlib.metadata.version("torch")


@pytest.mark.slow
def test_a_package_that_does_not_build_is_named_with_its_phase_and_the_fix(params, tmp_path):
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / list_path("3.1.0").name).write_text(
        "flash-attn==0.0.1\n"
    )  # an sdist that is not there
    source = tmp_path / "links" / "flash_attn-0.0.1"
    source.mkdir(parents=True)
    (source / "setup.py").write_text("raise SystemExit('nvcc not found')\n")
    with tarfile.open(source.parent / "flash_attn-0.0.1.tar.gz", "w:gz") as tar:
        tar.add(source, arcname=source.name)
    exact = params.model_copy(
        update={
            "package_lists_directory": str(lists),
            "match_exact_dependencies": True,
            "environments_directory": str(tmp_path / "envs"),
            "find_links": [str(source.parent)],
        }
    )
    outcome = measure(
        entity(fms_hf_tuning_version="3.1.0"),
        "finetune_full_benchmark-v1.0.0",
        exact,
        label="no-build",
    )
    assert isinstance(outcome, Failed)
    assert "flash-attn==0.0.1 did not build in phase 2" in outcome.reason
    assert "find_links" in outcome.reason and "match_exact_dependencies: false" in outcome.reason
    assert "nvcc not found" in outcome.reason
