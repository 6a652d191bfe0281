"""Faults through the path users run: `ado create operation` -> the actuator -> a Ray task.

One operation over entities that each end differently, run twice:
- tiny model on the CPU: measured (the first time its result's conversion for ado is made
  to raise: it must come back Failed, not vanish);
- 1 GPU of a gpu_model no node has: Failed at once, naming what the nodes offer;
- a model nobody mapped: Failed, naming model_map (with 0 GPUs and with 1);
- a model whose weights file a copy cut short (as an interrupted copy to a shared filesystem
  leaves it): Failed naming the file; repaired before the re-run, which then measures it.
Every request is answered exactly once (the trace's requests and the stored rows are
counted, not compared as sets), each failure's reason is on the operation's own output,
and the re-run measures again exactly the entities that failed.
"""

from __future__ import annotations

import os
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
import yaml
from ado_cli import AdoCLI, AdoError, generate_text_dataset
from ado_operations import leftover_processes, run_operation, trace
from tiny_model import build_tiny_model

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
INJECT = Path(__file__).with_name("inject")
DATASET = "news-chars-512-entries-4096"
GPU = "NVIDIA-A100-SXM4-80GB"
WEIGHTS = "model.safetensors"


def write_yaml(path: Path, document: dict) -> Path:
    path.write_text(yaml.safe_dump(document))
    return path


def cut_short(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def entity_key(entity_ids: str) -> tuple[str, str]:
    """(model_name, number_gpus) of the single entity in a trace row's `Entity IDs`."""
    (found,) = re.findall(r"model_name\.(.+?)-number_gpus\.(\d+)", entity_ids)
    return found


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    model = build_tiny_model(root / "tiny-llama")
    damaged = shutil.copytree(model, root / "damaged-llama")
    cut_short(damaged / WEIGHTS)
    data = root / "data"
    generate_text_dataset(data, DATASET, 16)
    python_path = os.pathsep.join(p for p in (str(INJECT), os.environ.get("PYTHONPATH")) if p)
    ado = AdoCLI(
        home=root / "ado",
        extra_env={
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "HF_HOME": str(root / "hf"),
            "PYTHONPATH": python_path,
        },
    )
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
                    "model_map": {
                        "tiny-llama": {"Vanilla": str(model)},
                        "damaged-llama": {"Vanilla": str(damaged)},
                    },
                },
            },
        ),
    )
    parameterization = [
        {"property": {"identifier": "fms_hf_tuning_version"}, "value": "3.2.2"},
        {"property": {"identifier": "dataset_id"}, "value": DATASET},
        {"property": {"identifier": "max_steps"}, "value": 1},
        {"property": {"identifier": "torch_dtype"}, "value": "float32"},
        {"property": {"identifier": "gradient_accumulation_steps"}, "value": 1},
        {"property": {"identifier": "gpu_model"}, "value": GPU},
    ]
    space_id = ado.create(
        "space",
        write_yaml(
            root / "space.yaml",
            {
                "experiments": [
                    {
                        "experimentIdentifier": "finetune_full_benchmark-v1.0.0",
                        "actuatorIdentifier": "SFTTrainer",
                        "parameterization": parameterization,
                    }
                ],
                "entitySpace": [
                    {
                        "identifier": "model_name",
                        "propertyDomain": {
                            "values": ["tiny-llama", "unmapped-model", "damaged-llama"]
                        },
                    },
                    {"identifier": "number_gpus", "propertyDomain": {"values": [0, 1]}},
                    {"identifier": "model_max_length", "propertyDomain": {"values": [64]}},
                    {"identifier": "batch_size", "propertyDomain": {"values": [2]}},
                ],
            },
        ),
        "--new-sample-store",
    )
    operation = yaml.safe_load((REPO / "examples" / "local-cpu" / "operation.yaml").read_text())
    operation |= {"spaces": [space_id], "actuatorConfigurationIdentifiers": [config_id]}
    return ado, space_id, write_yaml(root / "op.yaml", operation), root


def test_every_request_answered_once_with_its_reason_and_rerun_measures_the_failed(setup):
    ado, space_id, operation, root = setup
    # tiny-llama on 0 GPUs trains, but converting its result for ado raises the first time
    first_id, output = run_operation(
        ado, operation, SFTTRAINER_TEST_BREAK_CONVERSION="model_name.tiny-llama-number_gpus.0"
    )
    requests = trace(ado, first_id)
    assert len(requests) == 6, requests  # 3 models x 2 GPU counts: none lost, none twice
    status = {entity_key(r["Entity IDs"]): r["Status"] for r in requests}
    assert Counter(entity_key(r["Entity IDs"]) for r in requests).most_common(1)[0][1] == 1
    assert status == {
        ("tiny-llama", "0"): "Failed",
        ("tiny-llama", "1"): "Failed",
        ("unmapped-model", "0"): "Failed",
        ("unmapped-model", "1"): "Failed",
        ("damaged-llama", "0"): "Failed",
        ("damaged-llama", "1"): "Failed",
    }, status
    # each reason, one line per request, on the operation's own console output
    lines = [line for line in output.splitlines() if "SFTTrainer finetune_full_benchmark" in line]
    assert len(lines) == 6, "\n".join(lines)
    by_entity = {
        key: next(line for line in lines if f"model_name.{key[0]}-number_gpus.{key[1]}" in line)
        for key in status
    }
    assert (
        "internal error while converting the result for ado: RuntimeError('injected"
        in by_entity[("tiny-llama", "0")]
    )
    # resources no node has: refused at once, naming what the nodes offer
    assert (
        f"no Ray node offers {{'GPU': 1, '{GPU}': 1.0}} (nodes offer: "
        in by_entity[("tiny-llama", "1")]
    )
    assert "CPU=" in by_entity[("tiny-llama", "1")]
    assert (
        "model_name 'unmapped-model' is not in the shipped model map"
        in by_entity[("unmapped-model", "0")]
    )
    weights = root / "damaged-llama" / WEIGHTS
    assert (
        f"Failed: the weights file {weights} cannot be read" in by_entity[("damaged-llama", "0")]
    ), by_entity[("damaged-llama", "0")][-400:]
    assert not ado.measurements(space_id)  # nothing Failed is stored
    assert not leftover_processes(root)

    # the re-run, without the injected fault and with the weights copied again: what failed
    # is measured again, nothing twice
    shutil.copyfile(root / "tiny-llama" / WEIGHTS, weights)
    second_id, _ = run_operation(ado, operation)
    again = trace(ado, second_id)
    assert Counter(entity_key(r["Entity IDs"]) for r in again) == Counter(list(status)), again
    rows = ado.measurements(space_id)
    measured = Counter((r["model_name"], r["number_gpus"]) for r in rows)
    assert measured == Counter([("tiny-llama", "0"), ("damaged-llama", "0")]), rows
    assert all(
        float(r["is_valid"]) == 1 and float(r["dataset_tokens_per_second"]) > 0 for r in rows
    )
    assert not leftover_processes(root)


def test_unknown_experiment_is_refused_naming_it(setup):
    ado, _, _, root = setup
    space = write_yaml(
        root / "unknown.yaml",
        {
            "experiments": [
                {
                    "experimentIdentifier": "finetune_nonexistent-v1.0.0",
                    "actuatorIdentifier": "SFTTrainer",
                }
            ],
            "entitySpace": [
                {"identifier": "model_name", "propertyDomain": {"values": ["tiny-llama"]}}
            ],
        },
    )
    with pytest.raises(AdoError, match="finetune_nonexistent"):
        ado.create("space", space, "--new-sample-store")
