"""fms-hf-tuning versions other than the installed one, as a user measures them: the real `ado`
CLI, a local Ray, environments built on the node (uv, the registry), real training on CPU."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
import yaml

from ado_actuators.sfttrainer.contract import RankReport
from ado_actuators.sfttrainer.testing.ado_cli import AdoCLI, generate_text_dataset
from ado_actuators.sfttrainer.testing.tiny_model import build_tiny_model

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
DATASET = "news-chars-512-entries-4096"
MAX_SEQ = 128


def write_yaml(path: Path, document: dict) -> Path:
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory, environments_dir):
    root = tmp_path_factory.mktemp("versions")
    ado = AdoCLI(home=root / "ado-home", extra_env={
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(root / "hf")})  # fmt: skip
    model = build_tiny_model(root / "tiny-llama")
    data = root / "data"
    generate_text_dataset(data, DATASET, 16)
    config_id = ado.create("actuatorconfiguration", write_yaml(root / "ac.yaml", {
        "actuatorIdentifier": "SFTTrainer",
        "parameters": {"data_directory": str(data), "hf_home": str(root / "hf"),
                       "output_dir": str(root / "out"), "match_exact_dependencies": False,
                       "environments_directory": str(environments_dir),
                       "model_map": {"tiny-llama": {"Vanilla": str(model)}}},
    }))  # fmt: skip
    return ado, root, model, data, config_id


def measure_space(setup, name: str, version: str | None, batch_sizes: list[int]) -> tuple[list[dict], str]:
    """The entities (one per batch size) of one space, measured by one operation."""
    ado, root, _, _, config_id = setup
    parameterization = [
        {"property": {"identifier": "dataset_id"}, "value": DATASET},
        {"property": {"identifier": "max_steps"}, "value": 2},
        {"property": {"identifier": "torch_dtype"}, "value": "float32"},
        {"property": {"identifier": "gradient_accumulation_steps"}, "value": 1},
    ]
    if version:
        parameterization.append({"property": {"identifier": "fms_hf_tuning_version"}, "value": version})
    space_id = ado.create("space", write_yaml(root / f"{name}-space.yaml", {
        "experiments": [{"experimentIdentifier": "finetune_full_benchmark-v1.0.0",
                         "actuatorIdentifier": "SFTTrainer", "parameterization": parameterization}],
        "entitySpace": [
            {"identifier": "model_name", "propertyDomain": {"values": ["tiny-llama"]}},
            {"identifier": "number_gpus", "propertyDomain": {"values": [0]}},
            {"identifier": "model_max_length", "propertyDomain": {"values": [MAX_SEQ]}},
            {"identifier": "batch_size", "propertyDomain": {"values": batch_sizes}},
        ],
    }), "--new-sample-store")  # fmt: skip
    operation = yaml.safe_load((REPO / "examples" / "local-cpu" / "operation.yaml").read_text())
    operation |= {"spaces": [space_id], "actuatorConfigurationIdentifiers": [config_id]}
    operation_id = ado.create("operation", write_yaml(root / f"{name}-op.yaml", operation))
    trace = root / f"{name}-trace.yaml"
    ado.run("show", "trace", "operation", operation_id, "-o", "yaml", "--output-file", str(trace))
    return ado.measurements(space_id), trace.read_text()


def spec_tokens(model: Path, data: Path, entries: int, trainer_tools) -> int:
    first = data.parent / f"first-{entries}.jsonl"
    source = data / f"{DATASET}.jsonl"
    first.write_text("".join(source.read_text().splitlines(keepends=True)[:entries]))
    return sum(trainer_tools.spec_dataset_tokens(model, first, MAX_SEQ))


# Two measurements of the default version (the second reuses the environment); one of 3.0.0
# (its reuse is tested without Ray in tests/integration/test_environments.py).
@pytest.mark.parametrize(("version", "batch_sizes"), [(None, [2, 4]), ("3.0.0", [4])],
                         ids=["default-2.1.2", "3.0.0"])  # fmt: skip
def test_each_version_measures_in_its_environment(setup, version, batch_sizes, trainer_tools):
    rows, trace = measure_space(setup, version or "default", version, batch_sizes)
    expected_version = version or "2.1.2"
    assert len(rows) == len(batch_sizes), trace[-3000:]
    for row in rows:
        assert float(row["is_valid"]) == 1, trace[-3000:]
        assert float(row["dataset_tokens_per_second"]) > 0
    traced = yaml.safe_load(trace)
    # the trace shows each result under its request and on its own: one per working directory
    found = [m for m in _walk(traced) if isinstance(m, dict) and "versions" in m]
    results = list({m["workdir"]: m for m in found}.values())
    assert len(results) == len(batch_sizes), trace[-3000:]
    for metadata in results:
        assert metadata["versions"]["fms-hf-tuning"] == expected_version
        assert metadata["environment"]["fms_hf_tuning_version"] == expected_version
        assert metadata["versions"]["torch"] == importlib.metadata.version("torch")  # the worker's
    # one environment, built at most once (earlier tests of the session may have built it)
    assert len({m["environment"]["path"] for m in results}) == 1
    assert sum(not m["environment"]["reused"] for m in results) <= 1
    # every entry trained (2 steps of 2 or 4 entries) counted as the spec counts dataset tokens
    _, _, model, data, _ = setup
    expected = sorted(spec_tokens(model, data, 2 * b, trainer_tools) for b in batch_sizes)
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
