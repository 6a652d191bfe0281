"""The trace path's arithmetic (plan/memory/traced.py) on a traced step made by hand: the state
at rest, FSDP's sharding, gathered units and held input gradients, the request and its key."""

from __future__ import annotations

import dataclasses

import pytest
from training_configuration import configuration_of

from ado_actuators.sfttrainer.catalog.entity import entity_values
from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.contract.memory_trace import StepSpec, TracedStep
from ado_actuators.sfttrainer.plan.memory import traced as T
from ado_actuators.sfttrainer.plan.memory.bound import memory_bound
from ado_actuators.sfttrainer.plan.memory.peak import ReleaseBehaviour
from ado_actuators.sfttrainer.plan.model.architecture import PROMPT_TUNING_VIRTUAL_TOKENS
from ado_actuators.sfttrainer.plan.model.training import (
    Batch,
    Kernels,
    Parallelism,
    Precision,
    TrainingConfiguration,
    Tuning,
)

KERNELS = Kernels(attention="flash_attention_2", checkpointing="non_reentrant")  # unless told
TOKENS = Batch(per_device_batch=2, model_max_length=8)  # 16 tokens a device

INVENTORY = {
    "total": 1000,
    "embedding": 200,
    "lm_head": 0,
    "norms": 10,
    "layers": 4,
    "hidden": 8,
    "linears": [["q_proj", 8, 8, 4], ["v_proj", 8, 4, 4]],
    "trainable": 0,
    "model_type": "acme",
}
STEP = TracedStep(
    phases={
        "forward": {"weights": 2000, "gradients": 0, "forward": 500, "backward": 0},
        "backward": {"weights": 2000, "forward": 300, "backward": 400, "gradients": 16},
        "optimizer_step": {"weights": 2000, "gradients": 16, "optimizer_temporaries": 48},
    },
    rest={"weights": 2000, "optimizer_state": 32},
    inventory=INVENTORY,
    assumed=("routing: every expert an equal share of the tokens",),
    versions={"torch": "2", "transformers": "4", "peft": "0"},
)


def reentrant(configuration: TrainingConfiguration) -> TrainingConfiguration:
    """`configuration` checkpointed by torch.utils.checkpoint's use_reentrant=True."""
    kernels = dataclasses.replace(configuration.kernels, checkpointing="reentrant")
    return dataclasses.replace(configuration, kernels=kernels)


def lora(gpus: int = 1) -> TrainingConfiguration:
    return TrainingConfiguration(
        kernels=KERNELS,
        tuning=Tuning(method="lora", target_modules=("q_proj",), lora_r=2),
        parallelism=Parallelism(gpus=gpus),
        batch=TOKENS,
    )


def test_counts_from_the_traced_model_feed_the_bound():
    counts = T.counts_of(INVENTORY)
    assert counts.total == 1000 and counts.embedding == 200 and counts.lm_head == 0
    assert counts.attention == 790 and counts.norms == 10
    assert counts.quantizable == 8 * 8 * 4 + 8 * 4 * 4
    bound = memory_bound(counts, lora())
    assert bound.parts["gradients"] == 2 * (8 + 8) * 4 * 2  # r x (in + out), 4 q_proj, bf16


def test_every_forward_and_backward_after_the_first_step_holds_the_optimizer_state():
    one = lora()
    prediction = T.predict(STEP, one, memory_bound(T.counts_of(INVENTORY), one), ReleaseBehaviour())
    assert prediction.phases["forward"] == {
        "weights": 2000,
        "activations": 500,
        "optimizer_state": 32,
    }
    assert prediction.phases["backward"]["optimizer_state"] == 32
    # the first step's state is made in its optimizer phase: counted as state, not temporaries
    assert prediction.phases["optimizer_step"] == {
        "weights": 2000,
        "gradients": 16,
        "optimizer_temporaries": 16,
        "optimizer_state": 32,
    }
    assert prediction.source == "trace" and prediction.moments["backward"] == "traced"
    assert prediction.notes[-1] == "assumed: routing: every expert an equal share of the tokens"
    assert prediction.notes[-2].startswith("parts from a trace of the model's own code")


def test_the_notes_say_how_deep_the_model_was_traced():
    how = "traced at reduced depth (copies of 4, 5, 5 of its 40 layers), extrapolated per layer"
    step = dataclasses.replace(STEP, depth=how)
    one = lora()
    prediction = T.predict(step, one, memory_bound(T.counts_of(INVENTORY), one), ReleaseBehaviour())
    assert prediction.notes[-1] == how


def test_a_quantized_checkpoint_counts_its_block_weights_at_their_bits():
    """Traced at the model's dtype; the bound's quantized weights replace the traced ones."""
    four = TrainingConfiguration(
        kernels=KERNELS,
        tuning=Tuning(method="lora", target_modules=("q_proj",), lora_r=2),
        config={"quantization_config": {"bits": 4}},
        batch=TOKENS,
    )
    counts = T.counts_of(INVENTORY)
    plain = memory_bound(counts, lora())
    quantized = memory_bound(counts, four)
    saved = plain.parts["weights"] - quantized.parts["weights"]
    assert saved == counts.quantizable * (2 - 0.5)
    prediction = T.predict(STEP, four, quantized, ReleaseBehaviour(), saved)
    for phase in ("forward", "backward", "optimizer_step"):
        assert prediction.phases[phase]["weights"] == 2000 - saved
    assert "at 4 bits as the bound counts them" in prediction.notes[-1]
    # unquantized: nothing subtracted, no note
    assert T.predict(STEP, lora(), plain, ReleaseBehaviour()).phases["forward"]["weights"] == 2000


def test_fsdp_shards_the_states_gathers_the_root_and_a_layer_and_holds_input_gradients():
    two = lora(2)
    bound = memory_bound(T.counts_of(INVENTORY), two)
    by_model = ReleaseBehaviour(checkpointed_by_model=True)
    prediction = T.predict(STEP, reentrant(two), bound, by_model)
    root = 200 + 0 + 8
    layer = (1000 - root) / 4
    gathered = (root + 1 * layer) * 2  # whole, one layer at a time under LoRA
    assert prediction.phases["forward"] == {
        "weights": 1000,
        "activations": 500,
        "optimizer_state": 16,
        "fsdp_gathered": gathered,
    }
    # (4 layers - 1) x 16 tokens x 8 x bf16
    assert prediction.phases["backward"]["fsdp_held_input_gradients"] == 3 * 16 * 8 * 2
    assert "fsdp_gathered" not in prediction.phases["optimizer_step"]
    plain = T.predict(STEP, two, bound, ReleaseBehaviour())
    assert "fsdp_held_input_gradients" not in plain.phases["backward"]
    inside = T.predict(STEP, reentrant(two), bound, ReleaseBehaviour())
    assert "fsdp_held_input_gradients" not in inside.phases["backward"]


def test_fsdp_keeps_the_traced_gradients_whole_between_micro_batches_and_shards_the_updates():
    """More than one micro-batch a step: the Trainer's no_sync holds each device's gradients
    whole until the last backward, which reduces them before the update."""
    two = lora(2)
    four = dataclasses.replace(
        two, batch=dataclasses.replace(TOKENS, gradient_accumulation_steps=4)
    )
    one = T.predict(STEP, two, memory_bound(T.counts_of(INVENTORY), two), ReleaseBehaviour())
    held = T.predict(STEP, four, memory_bound(T.counts_of(INVENTORY), four), ReleaseBehaviour())
    assert one.phases["backward"]["gradients"] == 8  # the traced 16 over 2 devices
    assert held.phases["backward"]["gradients"] == 16  # whole
    assert held.phases["optimizer_step"]["gradients"] == one.phases["optimizer_step"]["gradients"]


def test_prompt_tunings_held_input_gradients_span_its_virtual_tokens_as_in_the_formula():
    """The trace path's FSDP terms are the formula's (plan/memory/fsdp.py), at the length the
    layers see: the samples' and prompt tuning's virtual tokens."""
    pt = TrainingConfiguration(
        kernels=KERNELS, tuning=Tuning(method="pt"), parallelism=Parallelism(gpus=2), batch=TOKENS
    )
    by_model = ReleaseBehaviour(checkpointed_by_model=True)
    bound = memory_bound(T.counts_of(INVENTORY), pt)
    held = T.predict(STEP, reentrant(pt), bound, by_model).phases["backward"][
        "fsdp_held_input_gradients"
    ]
    # (4 layers - 1) x 2 samples x (8 + 8 virtual tokens) x hidden 8 x 2 bytes
    assert held == 3 * 2 * (8 + PROMPT_TUNING_VIRTUAL_TOKENS) * 8 * 2


def test_the_request_is_the_devices_step_and_its_key_changes_with_it():
    lora_experiment = catalog_data().experiment("finetune_lora_benchmark-v1.0.0")

    def request(experiment=lora_experiment, **entity):
        values = entity_values(
            {
                "model_name": "acme",
                "model_max_length": 8,
                "batch_size": 4,
                "number_gpus": 2,
                "gpu_model": "NVIDIA-A100-SXM4-80GB",
                "r": 2,
                "gradient_checkpointing_use_reentrant": True,
                **entity,
            }
        )
        configuration = configuration_of(values, experiment, {"model_type": "acme"})
        return T.request(configuration)

    spec = request(lora_alpha=32, gradient_accumulation_steps=4)
    assert spec == StepSpec(
        config={"model_type": "acme"},
        peft_method="lora",
        target_modules=catalog_data().target_modules("acme"),
        lora_r=2,
        lora_alpha=32,
        torch_dtype="bfloat16",
        attention="flash_attention_2",
        checkpointing="reentrant",
        mixed_precision=False,
        batch=2,
        length=8,
        accumulation=2,  # the second micro-batch runs beside the first's gradients
        steps=1,
    )
    off = request(gradient_checkpointing=False, gradient_accumulation_steps=1)
    assert off.checkpointing is None and off.accumulation == 1 and off.lora_alpha == 16
    full = request(catalog_data().experiment("finetune_full_benchmark-v1.0.0"))
    assert full.target_modules == () and full.peft_method == "none"
    other = dataclasses.replace(spec, batch=4)
    assert T.key(spec) != T.key(other) and len(T.key(spec)) == 24


def test_a_trace_needs_the_libraries_and_says_which(monkeypatch):
    monkeypatch.setattr(T, "versions", lambda: {"torch": "", "transformers": "4", "peft": ""})
    with pytest.raises(T.TraceUnavailable, match=r"needs torch, peft: install .*\[fms\]"):
        T._run(StepSpec({}))


def mixed_fp32(tuning: Tuning, gpus: int = 2) -> TrainingConfiguration:
    """fp32 weights under bf16 mixed precision, FSDP over `gpus`."""
    return TrainingConfiguration(
        kernels=KERNELS,
        tuning=tuning,
        parallelism=Parallelism(gpus=gpus),
        batch=TOKENS,
        precision=Precision(torch_dtype="float32", mixed_precision=True, autocast_dtype="bfloat16"),
    )


def test_under_fsdp_mixed_precision_the_step_is_traced_in_16_bits_and_the_shards_kept_fp32():
    """FSDP gathers each unit in autocast's dtype (plan/memory/fsdp.casts_units): the trace runs
    the layers as they compute, in bf16; at rest the frozen weights stay at the loaded fp32
    (STEP's 1000 weights traced at 2 bytes, 2 more each), the adapters fp32 in both."""
    two = mixed_fp32(Tuning(method="lora", target_modules=("q_proj",), lora_r=2))
    assert T.request(two).torch_dtype == "bfloat16"
    assert T.request(dataclasses.replace(two, parallelism=Parallelism(gpus=1))).torch_dtype == (
        "float32"
    )
    bound = memory_bound(T.counts_of(INVENTORY), two)
    prediction = T.predict(STEP, two, bound, ReleaseBehaviour())
    assert prediction.phases["forward"]["weights"] == (2000 + 1000 * 2) / 2
    root = 200 + 0 + 8
    assert prediction.phases["forward"]["fsdp_gathered"] == (root + (1000 - root) / 4) * 2
    assert prediction.notes[-1] == (
        "traced at bfloat16, the dtype FSDP's mixed precision gathers every unit in; at rest "
        "trained parameters in fp32, frozen ones at float32"
    )


def test_under_fsdp_mixed_precision_trained_weights_their_gradients_and_states_are_fp32():
    """Full fine-tuning: accelerate upcasts the trained flat parameters to fp32, so the states
    traced at bf16 double (as peak.model_states' upcast), then shard over the 2 devices."""
    two = mixed_fp32(Tuning(method="none"))
    inventory = dict(INVENTORY, trainable=1000)
    step = dataclasses.replace(STEP, inventory=inventory)
    upcast = ReleaseBehaviour(fsdp_upcast=True)  # as verdict.behaviour_of gives it here
    prediction = T.predict(step, two, memory_bound(T.counts_of(inventory), two), upcast)
    assert prediction.phases["backward"]["weights"] == 2000 * 2 / 2
    assert prediction.phases["backward"]["gradients"] == 16 * 2 / 2
    assert prediction.phases["forward"]["optimizer_state"] == 32 * 2 / 2
    # the first step's temporaries less the state it made, both doubled
    assert prediction.phases["optimizer_step"]["optimizer_temporaries"] == (48 - 32) * 2 / 2
