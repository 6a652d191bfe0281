"""The host's time per layer (plan/speed/host.py): the ops it counts are the ops the release
dispatches (benchmarks/host_ops.py counts them with torch's profiler on tiny Llama models), and
the time follows what a layer runs, not the tokens it runs them on."""

from __future__ import annotations

import pytest
from benchmark_modules import benchmark

from ado_actuators.sfttrainer.plan.model.training import (
    Batch,
    Kernels,
    TrainingConfiguration,
    Tuning,
)
from ado_actuators.sfttrainer.plan.speed.host import EAGER_OP_SECONDS, host_seconds, layer_ops

LORA = Tuning(method="lora", target_modules=("q_proj", "v_proj"))
FULL = Tuning()


def configuration(
    tuning: Tuning = FULL, checkpointing: str = "none", tokens: int = 1024
) -> TrainingConfiguration:
    return TrainingConfiguration(
        tuning=tuning,
        batch=Batch(per_device_batch=1, sample_tokens=tokens),
        kernels=Kernels(checkpointing=checkpointing),  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def counted():
    pytest.importorskip("peft")
    return benchmark("host_ops")


@pytest.mark.parametrize(
    "name",
    [
        "frozen",
        "trainable",
        "lora q v",
        "lora q k v o",
        "lora mlp",
        "trainable, reentrant checkpointing",
        "trainable, non-reentrant checkpointing",
        "lora q k v o, reentrant checkpointing",
    ],
)
def test_the_counts_are_what_the_release_dispatches(counted, name):
    variant = counted.VARIANTS[name]
    forward, backward = counted.per_layer(**variant)
    adapters = len(variant.get("lora", ()))
    tuning = (
        Tuning(method="lora")
        if adapters
        else Tuning(method="none" if variant.get("trainable") else "pt")
    )
    priced = layer_ops(configuration(tuning, variant.get("checkpointing", "none")), adapters)
    assert priced == forward + backward


def test_the_host_time_follows_what_a_layer_runs_not_its_tokens():
    frozen = layer_ops(configuration(LORA), 0)
    assert layer_ops(configuration(LORA), 2) == frozen + 2 * (6 + 23)
    assert layer_ops(configuration(Tuning()), 0) == frozen + 43  # weight gradients
    assert layer_ops(configuration(LORA, "reentrant"), 2) == frozen + 2 * (6 + 23) + 74 + 2 * 6
    assert layer_ops(configuration(LORA, "non_reentrant"), 2) == frozen + 2 * (6 + 23) + 71 + 2 * 6
    short, long = configuration(LORA, tokens=128), configuration(LORA, tokens=8192)
    assert host_seconds(28, short, 2) == host_seconds(28, long, 2)
    assert host_seconds(28, short, 2) == pytest.approx(28 * layer_ops(short, 2) * EAGER_OP_SECONDS)


def test_a_host_bound_row_says_so_and_a_gpu_bound_one_does_not():
    from ado_actuators.sfttrainer.plan.speed.host import HOST_BOUND_SHARE, host_note

    assert host_note(HOST_BOUND_SHARE - 0.01) == ""
    note = host_note(0.4)
    assert note.startswith("host-bound: the host's dispatch of eager ops adds 40 % of this step")
    assert "not measured on this host" in note and "16 % too slow to 16 % too fast" in note


def test_the_preview_notes_a_short_lora_step_as_host_bound():
    from model_configs import LLAMA_31_8B
    from training_configuration import configuration_of

    from ado_actuators.sfttrainer.catalog.entity import entity_values
    from ado_actuators.sfttrainer.catalog.experiments import catalog_data
    from ado_actuators.sfttrainer.plan.speed.prediction import predict_speed

    definition = catalog_data().experiment("finetune_lora_benchmark-v1.0.0")

    def notes(length: int, batch: int) -> tuple[str, ...]:
        values = entity_values(
            {
                "model_name": "llama3.1-8b",
                "model_max_length": length,
                "batch_size": batch,
                "number_gpus": 1,
                "gpu_model": "NVIDIA-H100-80GB-HBM3",
            }
        )
        return predict_speed(configuration_of(values, definition, LLAMA_31_8B)).notes

    assert any(n.startswith("host-bound") for n in notes(128, 1))
    assert not any(n.startswith("host-bound") for n in notes(4096, 8))


@pytest.mark.parametrize("family", ["mixtral", "granitemoe"])
@pytest.mark.parametrize("trained", [False, True])
def test_the_expert_loops_counts_are_what_the_release_dispatches(counted, family, trained):
    """Per expert and per layer (beyond the Llama layer host.py charges every layer), as torch's
    profiler saw transformers' own Mixtral and GraniteMoE dispatch them."""
    from ado_actuators.sfttrainer.plan.speed.experts import DISPATCH
    from ado_actuators.sfttrainer.plan.speed.host import (
        BACKWARD_OPS,
        FORWARD_OPS,
        WEIGHT_GRADIENT_OPS,
    )

    found = counted.expert_loop(family, trained)
    shape = DISPATCH[family]
    backward_expert = shape.backward_per_expert + (
        shape.backward_per_trained_expert if trained else 0
    )
    backward_layer = BACKWARD_OPS + shape.backward_per_layer
    if trained:
        backward_layer += WEIGHT_GRADIENT_OPS + shape.backward_per_trained_layer
    assert (found["forward_per_expert"], found["backward_per_expert"]) == (
        shape.forward_per_expert,
        backward_expert,
    )
    assert found["forward_per_layer"] == FORWARD_OPS + shape.forward_per_layer
    assert found["backward_per_layer"] == backward_layer


def test_a_row_waiting_inside_a_reentrant_checkpoint_says_so_and_names_the_fix():
    """FSDP over several GPUs, reentrant checkpointing on a version whose transformers
    checkpoints each layer from the model's forward (2.x): the row's notes say why it waits and
    which field lets FSDP prefetch; not on a version whose layers checkpoint themselves, not
    without reentrancy, not on one GPU."""
    from model_configs import LLAMA_31_8B
    from training_configuration import configuration_of

    from ado_actuators.sfttrainer.catalog.entity import entity_values
    from ado_actuators.sfttrainer.catalog.experiments import catalog_data
    from ado_actuators.sfttrainer.plan.speed.prediction import predict_speed

    definition = catalog_data().experiment("finetune_full_benchmark-v1.0.0")

    def waits(version: str, reentrant: bool, number_gpus: int = 4) -> bool:
        values = entity_values(
            {
                "model_name": "llama3.1-8b",
                "model_max_length": 2048,
                "batch_size": 8,
                "number_gpus": number_gpus,
                "gpu_model": "NVIDIA-L40S",
                "fms_hf_tuning_version": version,
                "gradient_checkpointing_use_reentrant": reentrant,
            }
        )
        notes = predict_speed(configuration_of(values, definition, LLAMA_31_8B)).notes
        said = [n for n in notes if n.startswith("reentrant checkpointing under FSDP")]
        assert not said or "gradient_checkpointing_use_reentrant false" in said[0]
        return bool(said)

    assert waits("2.8.2", True)
    assert not waits("3.2.2", True) and not waits("2.8.2", False)
    assert not waits("2.8.2", True, number_gpus=1)
