"""ado's own optimisers over this actuator (issue 19, "ado's optimisers"): a tiny-model CPU
space where two entities in three are configuration-invalid (number_gpus > 0 and no
gpu_model), on the 2-CPU machine the tests run on. `make test-operators` builds the
environment (the `operators` extra); elsewhere this module skips."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

pytest.importorskip("ado_ray_tune", reason="ado's optimisers: `make test-operators`")
pytest.importorskip("trim", reason="ado's optimisers: `make test-operators`")

from ado_cli import AdoCLI, generate_text_dataset
from ado_operations import run_operation, trace

pytestmark = pytest.mark.slow

EXPERIMENT = "finetune_full_benchmark-v1.0.0"
DATASET = "news-chars-512-entries-4096"
METRIC = "dataset_tokens_per_second"
FIXED = {
    "dataset_id": DATASET,
    "max_steps": 2,
    "gradient_accumulation_steps": 1,
    "torch_dtype": "float32",
    "fms_hf_tuning_version": "3.2.2",
}
SPACE = {
    "model_name": ["tiny"],
    "number_nodes": [1],
    "number_gpus": [0, 1, 2],
    "model_max_length": [32, 64],
    "batch_size": [1, 2, 4],
}
TRIALS = 8
SEED = 7
RECOMMENDED = {"failed_metric_value": 0.0}
"""docs/guide/optimisers.md: an invalid entity reaches the sampler as 0 tokens/s, the worst."""


def invalid(entity: str) -> bool:
    """number_gpus > 0 without gpu_model: the spec's rule 5 (catalog/validity.py)."""
    return not re.search(r"number_gpus\.0(\b|-|$)", entity)


@pytest.fixture(scope="module")
def ado_space(tmp_path_factory, tiny_model_dir):
    """A function giving a fresh space (its own sample store) and the actuator configuration."""
    root = tmp_path_factory.mktemp("operators")
    generate_text_dataset(root / "data", DATASET, 64)
    ado = AdoCLI(home=root / "ado")
    (root / "ac.yaml").write_text(
        yaml.safe_dump(
            {
                "actuatorIdentifier": "SFTTrainer",
                "parameters": {
                    "data_directory": str(root / "data"),
                    "hf_home": str(root / "hf"),
                    "output_dir": str(root / "out"),
                    "model_map": {"tiny": {"Vanilla": str(tiny_model_dir)}},
                    "stall_timeout_seconds": 300,
                    "placement_timeout_seconds": 120,
                },
            }
        )
    )
    config_id = ado.create("actuatorconfiguration", root / "ac.yaml")
    (root / "space.yaml").write_text(
        yaml.safe_dump(
            {
                "experiments": [
                    {
                        "experimentIdentifier": EXPERIMENT,
                        "actuatorIdentifier": "SFTTrainer",
                        "parameterization": [
                            {"property": {"identifier": k}, "value": v} for k, v in FIXED.items()
                        ],
                    }
                ],
                "entitySpace": [
                    {"identifier": k, "propertyDomain": {"values": v}} for k, v in SPACE.items()
                ],
            }
        )
    )

    def new_space() -> tuple[AdoCLI, str, str]:
        return ado, ado.create("space", root / "space.yaml", "--new-sample-store"), config_id

    return new_space


def operation_file(path: Path, space_id: str, config_id: str, operation: dict) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "spaces": [space_id],
                "actuatorConfigurationIdentifiers": [config_id],
                "operation": operation,
            }
        )
    )
    return path


def ray_tune(orchestrator: dict) -> dict:
    return {
        "module": {"operatorName": "ray_tune", "operationType": "explore"},
        "parameters": {
            "orchestratorConfig": {
                "metric_format": "target",
                "single_measurement_per_property": True,
                **orchestrator,
            },
            "tuneConfig": {
                "metric": METRIC,
                "mode": "max",
                "num_samples": TRIALS,
                "max_concurrent_trials": 1,
                "search_alg": {
                    "name": "optuna",
                    "params": {
                        "sampler": "TPESampler",
                        "sampler_parameters": {"seed": SEED, "n_startup_trials": 2},
                    },
                },
            },
        },
    }


def tune(
    ado_space, tmp_path: Path, orchestrator: dict
) -> tuple[AdoCLI, str, list[dict], str, list[dict]]:
    ado, space_id, config_id = ado_space()
    path = operation_file(
        tmp_path / f"tune-{len(orchestrator)}.yaml", space_id, config_id, ray_tune(orchestrator)
    )
    identifier, output = run_operation(ado, path)
    assert "finished successfully" in output, output[-4000:]
    return ado, identifier, trace(ado, identifier), output, ado.measurements(space_id)


def best_result(ado: AdoCLI, operation: str) -> dict:
    """The best configuration ray_tune recorded (a datacontainer of the operation)."""
    # one hop: --related-to follows the shared actuator configuration to other operations
    related = ado.run("show", "related", "operation", operation, "--max-hops", "1").stdout
    (identifier,) = set(re.findall(r"datacontainer-[0-9a-f]+", related))
    shown = ado.run("get", "datacontainer", identifier, "-o", "yaml").stdout
    container = yaml.safe_load(shown)
    container = container[0] if isinstance(container, list) else container
    return container["config"]["data"]["best_result"]


def cell(value: str) -> list[float]:
    """A measurements-CSV cell: one value, or a list of them for an entity measured twice."""
    return [
        float(v) for v in (yaml.safe_load(value) if value.startswith("[") else [value]) if v != ""
    ]


def on_invalid(requests: list[dict]) -> int:
    """Trials that landed on an invalid entity (a repeated entity is replayed, still a trial)."""
    return sum(invalid(r["Entity IDs"]) for r in requests)


def test_ray_tune_ends_names_its_best_and_learns_from_invalid_entities(ado_space, tmp_path):
    _, _, default_trace, default_output, _ = tune(ado_space, tmp_path, {})
    ado, operation, requests, output, rows = tune(ado_space, tmp_path, RECOMMENDED)
    assert len(default_trace) == len(requests) == TRIALS
    # the default: an invalid entity has no dataset_tokens_per_second, ado-ray-tune reports
    # NaN and Optuna discards the trial; recommended: it is the worst value, 0
    assert "The value nan is not acceptable" in default_output
    assert "The value nan is not acceptable" not in output, output[-4000:]
    print(
        f"trials on invalid entities: default {on_invalid(default_trace)}/{TRIALS}, "
        f"failed_metric_value 0: {on_invalid(requests)}/{TRIALS}"
    )
    assert on_invalid(requests) < on_invalid(default_trace)
    best = best_result(ado, operation)
    print("ray_tune's best configuration:", best["config"], best["metrics"][METRIC])
    measured = {r["identifier"]: max(cell(r[METRIC])) for r in rows if cell(r[METRIC])}
    assert best["config"]["number_gpus"] == 0 and best["metrics"]["is_valid"] == 1
    assert best["metrics"][METRIC] == pytest.approx(max(measured.values()))


TRIM = {
    "module": {"operatorName": "trim", "operationType": "characterize"},
    "parameters": {
        "targetOutput": METRIC,
        # docs/guide/optimisers.md: an is_valid = 0 row carries no dataset_tokens_per_second (0 would be a false
        # throughput for a model to learn); TRIM leaves such rows out of its training data
        "missingTargetMeasurements": {"mode": "Skip"},
        # docs/guide/optimisers.md: clhs draws with repeats, and a repeat counts as missing; random, each once
        "noPriorParameters": {"samples": 5, "batchSize": 1, "sampling_strategy": "random"},
        "samplingBudget": {"minPoints": 4, "maxPoints": 8},
        "holdoutSize": 2,
        "iterationSize": 2,
        "autoGluonArgs": {
            "fitArgs": {"time_limit": 20, "presets": "medium", "excluded_model_types": ["GBM"]},
            "tabularPredictorArgs": {"verbosity": 1},
        },
        "finalModelAutoGluonArgs": {
            "fitArgs": {"time_limit": 20, "presets": "medium", "excluded_model_types": ["GBM"]},
            "tabularPredictorArgs": {"verbosity": 1},
        },
    },
}


def test_trim_characterises_the_space_leaving_invalid_rows_out(ado_space, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # TRIM writes its models and debug files under the cwd
    ado, space_id, config_id = ado_space()
    _identifier, output = run_operation(
        ado, operation_file(tmp_path / "trim.yaml", space_id, config_id, TRIM)
    )
    assert "finished successfully" in output, output[-6000:]
    rows = ado.measurements(space_id)
    invalid_rows = [r for r in rows if not any(cell(r["is_valid"]))]
    print(f"TRIM measured {len(rows)} entities, {len(invalid_rows)} invalid")
    assert invalid_rows and len(invalid_rows) < len(rows)
    # no throughput stored for an invalid entity (NaN is how a list cell shows a missing one)
    assert all(v != v for r in invalid_rows for v in cell(r[METRIC])), invalid_rows
    assert all(min(cell(r[METRIC])) > 0 for r in rows if r not in invalid_rows)
