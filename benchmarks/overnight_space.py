"""The overnight rehearsal's space (benchmarks/overnight.py): its entities, the faults mixed
into it, and the outcome the design promises each (entity, experiment)."""

from __future__ import annotations

from pathlib import Path

import yaml

DATASET = "news-chars-512-entries-4096"
MODEL = "tiny"  # short: the measurement directory's name is the entity id cut at 80 characters
GPU_MODEL = "NVIDIA-A100-SXM4-80GB"  # no node of the local cluster offers a GPU
EXPERIMENTS = {"full": "finetune_full_benchmark-v1.0.0", "lora": "finetune_lora_benchmark-v1.0.0"}
BATCH_SIZES = (2, 3, 4)
NODES = (1, 2)
GPUS = (0, 1)
STEPS = 2
BATCH_SIZE_OP = 3  # the operation's batchSize: three measurements at once


def entity_id(batch: int, length: int, gpus: int, nodes: int) -> str:
    """ado's entity identifier: the constitutive properties in sorted order."""
    return (
        f"batch_size.{batch}-model_max_length.{length}-model_name.{MODEL}-"
        f"number_gpus.{gpus}-number_nodes.{nodes}"
    )


def method_of(experiment: str) -> str:
    return "lora" if "lora" in experiment else "full"


def write_yaml(path: Path, document: dict) -> Path:
    path.write_text(yaml.safe_dump(document))
    return path


# ---- the space -------------------------------------------------------------------------


OOM_BATCH = 3


def faults(lengths: list[int]) -> dict[str, str]:
    """Needle -> FAULT_ENV. A needle is a whole single-node CPU entity's identifier followed
    by the "-" before the run's name, so it matches that measurement's directory only: OOM
    for batch_size 3 at the first (shortest) length, a crash for batch_size 2 there."""
    return {
        f"{oom_entity(lengths)}-": "oom@1",
        f"{entity_id(OOM_BATCH - 1, lengths[0], 0, 1)}-": "exception@1",
    }


def oom_entity(lengths: list[int]) -> str:
    return entity_id(OOM_BATCH, lengths[0], 0, 1)


def dominated(batch: int, length: int, gpus: int, nodes: int, lengths: list[int]) -> bool:
    """Whether the injected OOM answers the entity: the same but for a batch and a length no
    smaller (single-node CPU ranks, as the OOM's), the OOM itself aside."""
    no_smaller = batch >= OOM_BATCH and length >= lengths[0]
    return gpus == 0 and nodes == 1 and no_smaller and (batch, length) != (OOM_BATCH, lengths[0])


def expected(lengths: list[int], injected: dict[str, str]) -> dict[tuple[str, str], str]:
    """(entity, method) -> the outcome the design promises for it."""
    promised = {}
    for batch in BATCH_SIZES:
        for length in lengths:
            for gpus in GPUS:
                for nodes in NODES:
                    entity = entity_id(batch, length, gpus, nodes)
                    if gpus and gpus % nodes:
                        outcome = "invalid: configuration"
                    elif gpus:
                        outcome = "failed: unsatisfiable"
                    elif batch % nodes:
                        outcome = "failed: configuration"
                    elif dominated(batch, length, gpus, nodes, lengths):
                        outcome = "invalid: dominated"
                    else:
                        fault = next(
                            (f for n, f in injected.items() if nodes == 1 and n in entity + "-"),
                            None,
                        )
                        outcome = {"oom@1": "invalid: OOM", "exception@1": "failed: crash"}.get(
                            fault, "valid"
                        )
                    for method in EXPERIMENTS:
                        promised[(entity, method)] = outcome
    return promised


def awaited(lengths: list[int], second_run: Path) -> dict[str, str]:
    """Entity -> what it waits for before asking the record of measured OOMs (the test hook
    SFTTRAINER_TEST_AWAIT_OOM): "" for its experiment's OOM alone, or a file besides. Every
    entity the OOM answers, and the smaller batches at longer lengths it must not answer, ask
    only once the OOM is recorded; the largest also only in the run after the kill, so that
    one answer comes from what the killed run recorded."""
    waits = {}
    for length in lengths:
        for batch in BATCH_SIZES:
            if dominated(batch, length, 0, 1, lengths) or (
                batch < OOM_BATCH and length > lengths[0]
            ):
                waits[entity_id(batch, length, 0, 1)] = ""
    waits[entity_id(BATCH_SIZES[-1], lengths[-1], 0, 1)] = str(second_run)
    return waits


def trainings(promised: dict[tuple[str, str], str]) -> int:
    """How many measurements launch a trainer."""
    return sum(o in ("valid", "invalid: OOM", "failed: crash") for o in promised.values())


def space_document(lengths: list[int]) -> dict:
    fixed = {
        "fms_hf_tuning_version": "3.2.2",
        "dataset_id": DATASET,
        "max_steps": STEPS,
        "torch_dtype": "float32",
        "gradient_accumulation_steps": 1,
        "distributed_backend": "DDP",
        "gpu_model": GPU_MODEL,
    }
    parameterization = [{"property": {"identifier": k}, "value": v} for k, v in fixed.items()]
    return {
        "experiments": [
            {
                "experimentIdentifier": e,
                "actuatorIdentifier": "SFTTrainer",
                "parameterization": parameterization,
            }
            for e in EXPERIMENTS.values()
        ],
        "entitySpace": [
            {"identifier": name, "propertyDomain": {"values": values}}
            for name, values in {
                "model_name": [MODEL],
                "model_max_length": lengths,
                "batch_size": list(BATCH_SIZES),
                "number_nodes": list(NODES),
                "number_gpus": list(GPUS),
            }.items()
        ],
    }


def operation_document(space_id: str, config_id: str) -> dict:
    return {
        "spaces": [space_id],
        "actuatorConfigurationIdentifiers": [config_id],
        "operation": {
            "module": {"operatorName": "random_walk", "operationType": "search"},
            "parameters": {
                "numberEntities": "all",
                "singleMeasurement": True,
                "batchSize": BATCH_SIZE_OP,
                "samplerConfig": {"mode": "sequential", "samplerType": "generator"},
            },
        },
    }
