"""fms-hf-tuning versions other than the installed one, as a user measures them: the real `ado`
CLI, a local Ray, environments built on the node (uv, the registry), real training on CPU."""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import pytest
import yaml
from ado_cli import AdoCLI, generate_text_dataset
from tiny_model import build_tiny_model

from ado_actuators.sfttrainer.contract.trainer_io import RankReport

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
INJECT = Path(__file__).with_name("inject")
DATASET = "news-chars-512-entries-4096"
FULL = "finetune_full_benchmark-v1.0.0"
MAX_SEQ = 128


def write_yaml(path: Path, document: dict) -> Path:
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory, environments_dir):
    root = tmp_path_factory.mktemp("versions")
    ado = AdoCLI(
        home=root / "ado-home",
        extra_env={
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "HF_HOME": str(root / "hf"),
        },
    )
    model = build_tiny_model(root / "tiny-llama")
    data = root / "data"
    generate_text_dataset(data, DATASET, 16)
    config_id = ado.create(
        "actuatorconfiguration",
        write_yaml(
            root / "ac.yaml",
            {
                "actuatorIdentifier": "SFTTrainer",
                "parameters": {
                    "data_directory": str(data),
                    "hf_home": str(root / "hf"),
                    "output_dir": str(root / "out"),
                    "match_exact_dependencies": False,
                    "environments_directory": str(environments_dir),
                    "model_map": {"tiny-llama": {"Vanilla": str(model)}},
                },
            },
        ),
    )
    return ado, root, model, data, config_id


def measure_space(
    setup,
    name: str,
    version: str | None,
    batch_sizes: list[int],
    *,
    versions: list[str] | None = None,
    experiments: tuple[str, ...] = (FULL,),
    env: dict[str, str] | None = None,
) -> tuple[list[dict], str]:
    """The entities of one space (batch sizes, and `versions` as an entity dimension),
    measured under `experiments` by one operation (with `env` added to ado's environment)."""
    ado, root, _, _, config_id = setup
    if env:
        ado = AdoCLI(home=ado.home, extra_env={**ado.extra_env, **env})
    parameterization = [
        {"property": {"identifier": "dataset_id"}, "value": DATASET},
        {"property": {"identifier": "max_steps"}, "value": 2},
        {"property": {"identifier": "torch_dtype"}, "value": "float32"},
        {"property": {"identifier": "gradient_accumulation_steps"}, "value": 1},
    ]
    if version:
        parameterization.append(
            {"property": {"identifier": "fms_hf_tuning_version"}, "value": version}
        )
    dimensions = [
        {"identifier": "model_name", "propertyDomain": {"values": ["tiny-llama"]}},
        {"identifier": "number_gpus", "propertyDomain": {"values": [0]}},
        {"identifier": "model_max_length", "propertyDomain": {"values": [MAX_SEQ]}},
        {"identifier": "batch_size", "propertyDomain": {"values": batch_sizes}},
    ]
    if versions:
        dimensions.append(
            {"identifier": "fms_hf_tuning_version", "propertyDomain": {"values": versions}}
        )
    space_id = ado.create(
        "space",
        write_yaml(
            root / f"{name}-space.yaml",
            {
                "experiments": [
                    {
                        "experimentIdentifier": experiment,
                        "actuatorIdentifier": "SFTTrainer",
                        "parameterization": parameterization,
                    }
                    for experiment in experiments
                ],
                "entitySpace": dimensions,
            },
        ),
        "--new-sample-store",
    )
    operation = yaml.safe_load((REPO / "examples" / "local-cpu" / "operation.yaml").read_text())
    operation |= {"spaces": [space_id], "actuatorConfigurationIdentifiers": [config_id]}
    operation_id = ado.create("operation", write_yaml(root / f"{name}-op.yaml", operation))
    trace = root / f"{name}-trace.yaml"
    ado.run("show", "trace", "operation", operation_id, "-o", "yaml", "--output-file", str(trace))
    return ado.measurements(space_id), trace.read_text()


def traced_results(trace: str) -> list[dict]:
    """Each measurement's result metadata, once (the trace shows it under its request too)."""
    found = [m for m in _walk(yaml.safe_load(trace)) if isinstance(m, dict) and "versions" in m]
    return list({m["workdir"]: m for m in found}.values())


def spec_tokens(model: Path, data: Path, entries: int, trainer_tools) -> int:
    first = data.parent / f"first-{entries}.jsonl"
    source = data / f"{DATASET}.jsonl"
    first.write_text("".join(source.read_text().splitlines(keepends=True)[:entries]))
    return sum(trainer_tools.spec_dataset_tokens(model, first, MAX_SEQ))


def test_the_default_version_measures_in_its_environment_built_once(setup, trainer_tools):
    rows, trace = measure_space(setup, "default", None, [2, 4])
    assert len(rows) == 2, trace[-3000:]
    assert all(float(row["is_valid"]) == 1 for row in rows), trace[-3000:]
    results = traced_results(trace)
    assert len(results) == 2, trace[-3000:]
    for metadata in results:
        assert metadata["versions"]["fms-hf-tuning"] == "2.1.2"
        assert metadata["environment"]["fms_hf_tuning_version"] == "2.1.2"
        assert metadata["versions"]["torch"] == importlib.metadata.version("torch")  # the worker's
    # one environment, built at most once (earlier tests of the session may have built it)
    assert len({m["environment"]["path"] for m in results}) == 1
    assert sum(not m["environment"]["reused"] for m in results) <= 1
    assert_exact_tokens(setup, results, {4: 1, 8: 1}, trainer_tools)


# One release of every API generation, as the wrapper reads them (trainer/fms_api.py): trackers
# set on a factory built from 3 configs (2.3.1, 2.4.0: 12 and 13 values parsed) or 4 (2.5-2.8),
# and one tracker config (3.0.0), in one space, one operation. The 2.0-2.2 generation (the
# default 2.1.2) trains in the test above; 3.1 and later (one tracker config and a
# quantization config) is the installed 3.2.2's, which trains in every other e2e test.
# tests/unit/test_fms_releases.py reads every offered release's main(); `make test-versions`
# trains each of them with full, LoRA and prompt tuning.
# The installed 3.2.2 comes first and runs out of memory (the tests' fault hook): the others,
# the same configuration but for the version, are each asked after that OOM was recorded
# (batchSize 1, one experiment: one request at a time, in this order) and must launch.
INSTALLED, GENERATIONS = "3.2.2", ["2.3.1", "2.4.0", "2.8.2", "3.0.0"]


def test_a_release_of_every_api_generation_trains_full_fine_tuning(setup, trainer_tools):
    oom = f"fms_hf_tuning_version.{INSTALLED}-"
    rows, trace = measure_space(
        setup,
        "generations",
        None,
        [2],
        versions=[INSTALLED, *GENERATIONS],
        env={
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(INJECT), os.environ.get("PYTHONPATH")])
            ),
            "SFTTRAINER_TEST_FAULTS": f"{oom}=oom@1",
        },
    )
    valid = {row["fms_hf_tuning_version"]: float(row["is_valid"]) for row in rows}
    assert valid == {INSTALLED: 0, **dict.fromkeys(GENERATIONS, 1)}, trace[-3000:]
    assert all(
        float(r["dataset_tokens_per_second"]) > 0
        for r in rows
        if r["fms_hf_tuning_version"] != INSTALLED
    )
    results = traced_results(trace)
    assert sorted(m["versions"]["fms-hf-tuning"] for m in results) == GENERATIONS
    for metadata in results:  # the version the training process imported is the one asked for
        assert (
            metadata["versions"]["fms-hf-tuning"]
            == metadata["environment"]["fms_hf_tuning_version"]
        )
        assert "answered_by" not in metadata
    # the OOM was measured and recorded before any other version was asked for, and answered none
    (measured_oom,) = {
        m["workdir"]: m
        for m in _walk(yaml.safe_load(trace))
        if isinstance(m, dict) and "oom_record" in m
    }.values()
    record = Path(measured_oom["oom_record"]["recorded"])
    assert (
        oom in Path(measured_oom["workdir"]).name
        and "GPU out of memory" in measured_oom["invalid_reason"]
    )
    assert all(
        Path(m["workdir"], "job.json").stat().st_mtime > record.stat().st_mtime for m in results
    )
    assert_exact_tokens(setup, results, {4: len(GENERATIONS)}, trainer_tools)


def assert_exact_tokens(setup, results: list[dict], entries: dict[int, int], trainer_tools) -> None:
    """Every entry trained (2 steps of batch_size entries) counted as the spec counts them:
    `entries` maps the entries trained to how many measurements trained that many."""
    _, _, model, data, _ = setup
    expected = sorted(
        spec_tokens(model, data, n, trainer_tools)
        for n, times in entries.items()
        for _ in range(times)
    )
    assert sorted(trained_tokens(m["workdir"]) for m in results) == expected


def trained_tokens(workdir: str) -> int:
    report = RankReport.read_all(Path(workdir) / "reports")[0]
    return sum(step.dataset_tokens for step in report.steps)


def _walk(node):
    yield node
    if isinstance(node, dict):
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)
