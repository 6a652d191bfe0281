"""The rule of "a measured OOM answers its larger neighbours" (ledger/dominance.py): which
requests a measured out-of-memory run answers, and which runs count as one."""

from __future__ import annotations

import json

import pytest

from ado_actuators.sfttrainer.catalog.entity import FIELDS, Domain, entity_values
from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.contract.outcomes import Failed, Invalid, Measured
from ado_actuators.sfttrainer.ledger.dominance import (
    SIZE_FIELDS,
    Configuration,
    configuration,
    dominates,
    is_measured_oom,
    takes_part,
    tightest,
)

FULL = "finetune_full_benchmark-v1.0.0"
LORA = "finetune_lora_benchmark-v1.0.0"
STABILITY = "finetune_full_stability-v1.0.0"
A100 = "NVIDIA-A100-SXM4-80GB"
WEIGHTS = "/models/granite"
OOM = {
    "model_name": "granite-3.1-2b",
    "model_max_length": 2048,
    "batch_size": 8,
    "number_gpus": 2,
    "gpu_model": A100,
    "fms_hf_tuning_version": "3.2.2",
}


def config(experiment: str = FULL, location: str = WEIGHTS, **changes) -> Configuration:
    return configuration(entity_values({**OOM, **changes}), experiment, location)


def answered(**changes) -> bool:
    """Whether the OOM measured at OOM answers the request changed by `changes`."""
    return dominates(config(), config(**changes))


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"batch_size": 16},
        {"model_max_length": 4096},
        {"batch_size": 10, "model_max_length": 2049},
    ],
    ids=["the same configuration", "larger batch", "longer sequences", "both"],
)
def test_a_request_no_smaller_in_batch_and_length_is_answered(changes):
    assert answered(**changes)


@pytest.mark.parametrize(
    "changes",
    [
        {"batch_size": 6},
        {"model_max_length": 1024},
        {"batch_size": 16, "model_max_length": 1024},
        {"batch_size": 6, "model_max_length": 4096},
    ],
    ids=[
        "smaller batch",
        "shorter sequences",
        "larger batch, shorter sequences",
        "smaller batch, longer sequences",
    ],
)
def test_a_request_smaller_in_either_is_measured(changes):
    assert not answered(**changes)


@pytest.mark.parametrize(
    "changes",
    [
        {"fms_hf_tuning_version": "3.1.0"},
        {"gpu_model": "NVIDIA-H100-80GB-HBM3"},
        # more GPUs for the same per-device batch: FSDP shards the state thinner, but the
        # rule never reasons about sharding: every other value must be equal
        {"number_gpus": 4, "batch_size": 16},
        {"number_nodes": 2},
        {"torch_dtype": "float32"},
        {"fsdp_sharding_strategy": "SHARD_GRAD_OP"},
        {"gradient_checkpointing": False},
    ],
    ids=[
        "other version",
        "other gpu_model",
        "other GPUs",
        "other nodes",
        "other dtype",
        "other sharding",
        "other checkpointing",
    ],
)
def test_any_other_difference_is_measured_even_at_a_larger_size(changes):
    assert not answered(**changes)
    assert not answered(
        **{**changes, "batch_size": changes.get("batch_size", 8) * 2, "model_max_length": 4096}
    )


def _another_value(name: str):
    field, value = FIELDS[name], entity_values(OOM).model_dump()[name]
    if field.domain is Domain.BINARY:
        return not value
    if field.domain is Domain.DISCRETE:
        return value + 1
    return next(v for v in (*(field.values or ()), "another") if v != value)


@pytest.mark.parametrize("name", [n for n in FIELDS if n not in SIZE_FIELDS])
def test_every_entity_value_but_the_size_must_be_equal(name):
    assert not answered(**{name: _another_value(name)})


def test_other_experiments_and_other_weights_are_measured():
    assert dominates(config(), config(batch_size=16))
    assert not dominates(config(), config(LORA, batch_size=16))
    assert not dominates(config(), config(location="/models/granite-v2", batch_size=16))


def test_the_batch_is_compared_per_device():
    assert config().batch_per_device == 4.0  # 8 over 2 GPUs
    assert config(number_gpus=0, gpu_model=None).batch_per_device == 8.0
    assert (
        config(number_gpus=0, gpu_model=None, number_nodes=2).batch_per_device == 4.0
    )  # CPU ranks
    assert config(number_gpus=4, number_nodes=2, batch_size=12).batch_per_device == 3.0
    assert config(model_max_length=512).model_max_length == 512


def test_the_identity_holds_everything_but_the_size():
    identity = config().as_json()["identity"]
    assert identity["experiment"] == FULL and identity["model_location"] == WEIGHTS
    assert identity["fms_hf_tuning_version"] == "3.2.2" and identity["gpu_model"] == A100
    assert not set(SIZE_FIELDS) & set(identity)
    assert set(identity) == (set(FIELDS) - set(SIZE_FIELDS)) | {"experiment", "model_location"}


def test_a_configuration_read_back_from_the_record_is_the_same():
    written = config(fast_kernels=["True", "False", "True"], num_train_epochs=2.0)
    text = json.dumps(written.as_json(), sort_keys=True)  # as the record writes it
    assert Configuration.from_json(json.loads(text)) == written
    assert dominates(Configuration.from_json(json.loads(text)), written)


def test_the_tightest_of_several_dominating_ooms_is_the_proof():
    request = config(batch_size=16, model_max_length=4096)
    ooms = [
        (config(batch_size=4), "small"),
        (config(batch_size=12), "close"),
        (config(batch_size=32), "larger than the request"),
        (config(LORA, batch_size=2), "other experiment"),
    ]
    assert tightest(ooms, request) == "close"
    assert tightest(ooms[2:], request) is None
    assert tightest([], request) is None
    # equal per-device batches: the longer sequence is the closer proof
    assert (
        tightest([(config(model_max_length=4096), "long"), (config(), "short")], request) == "long"
    )


def test_the_stability_experiment_takes_no_part():
    assert takes_part(catalog_data().experiment(FULL).repeats)
    assert not takes_part(catalog_data().experiment(STABILITY).repeats)
    assert not takes_part(2)


def test_only_an_oom_a_launched_run_showed_counts():
    assert is_measured_oom(
        Invalid("GPU out of memory: rank 0", gpu_oom=True, metadata={"workdir": "/w"})
    )
    # the certain-OOM bound (nothing launched) and an answer by dominance carry no workdir
    assert not is_measured_oom(Invalid("certain GPU out of memory", gpu_oom=True))
    assert not is_measured_oom(Invalid("batch_size 3 is not divisible", metadata={"workdir": "/w"}))
    assert not is_measured_oom(Failed("crashed", metadata={"workdir": "/w"}))
    assert not is_measured_oom(Measured({"is_valid": 1}, metadata={"workdir": "/w"}))
