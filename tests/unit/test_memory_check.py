"""The certain-OOM check of one measurement: verdict, reason, and why it was skipped."""

from __future__ import annotations

import json

import pytest
from training_configuration import configuration_of

from ado_actuators.sfttrainer.actuator.results import to_result
from ado_actuators.sfttrainer.catalog.entity import entity_values
from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.contract.outcomes import Failed, Measured
from ado_actuators.sfttrainer.plan.memory.verdict import PROPERTY, assess

LLAMA_405B = dict(
    model_type="llama",
    vocab_size=128256,
    hidden_size=16384,
    intermediate_size=53248,
    num_hidden_layers=126,
    num_attention_heads=128,
    num_key_value_heads=8,
    tie_word_embeddings=False,
)
LLAMA_8B = dict(
    LLAMA_405B,
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
)
FULL = catalog_data().experiment("finetune_full_benchmark-v1.0.0")
LORA = catalog_data().experiment("finetune_lora_benchmark-v1.0.0")


@pytest.fixture
def model_dir(tmp_path):
    """A model directory as the hidden spaces give it: config.json and nothing else."""

    def write(config):
        path = tmp_path / config.get("name", "model")
        path.mkdir()
        (path / "config.json").write_text(json.dumps(config))
        return str(path)

    return write


def values(**kw):
    return entity_values(
        {
            "model_name": "big",
            "model_max_length": 512,
            "batch_size": 8,
            "number_gpus": 1,
            "gpu_model": "NVIDIA-A100-SXM4-80GB",
            **kw,
        }
    )


def check(entity, location, experiment=FULL, enabled=True, stated=None):
    configuration = configuration_of(entity, experiment, location)
    return assess(configuration, hf_home="/nonexistent", enabled=enabled, stated=stated)


def test_a_405b_model_on_one_a100_is_certain_oom_with_both_numbers_and_parts(model_dir):
    found = check(values(), model_dir(LLAMA_405B))
    assert found.certain_oom
    invalid = found.invalid()
    assert invalid.gpu_oom and invalid.properties[PROPERTY] > 3000
    reason = invalid.reason
    assert "certain GPU out of memory" in reason and "NVIDIA-A100-SXM4-80GB has 80 GiB" in reason
    assert f"{found.bound.gib:.2f} GiB" in reason
    for part in ("weights", "gradients", "optimizer_state", "CUDA context", "memory_bound_check"):
        assert part in reason
    assert invalid.metadata["gpu_memory_bound"]["checked"] is True
    assert invalid.metadata["answered_by"] == "certain_oom"  # what report/cost.py counts


def test_lora_of_405b_over_8_gpus_is_still_certain_oom_but_an_8b_fits(model_dir):
    big, small = model_dir(LLAMA_405B), model_dir({**LLAMA_8B, "name": "small"})
    assert check(values(number_gpus=8), big, LORA).certain_oom  # 810 GB of bf16 weights / 8
    fits = check(values(), small)
    assert not fits.certain_oom and fits.skipped is None and 55 < fits.bound.gib < 80


def test_turned_off_unknown_gpu_unreadable_config_and_cpu_are_skipped_with_a_reason(
    model_dir, monkeypatch
):
    big = model_dir(LLAMA_405B)
    off = check(values(), big, enabled=False)
    assert not off.certain_oom and "memory_bound_check: false" in off.skipped
    assert off.bound is not None  # still reported
    unknown = check(values(gpu_model="Acme-X1"), model_dir({**LLAMA_8B, "name": "u"}))
    assert not unknown.certain_oom and "Acme-X1" in unknown.skipped
    missing = check(values(), "/nonexistent/model")
    assert not missing.certain_oom and "config.json" in missing.skipped and missing.bound is None
    # an architecture not counted by hand is traced (integration/test_traced_parts_kept.py); where
    # the trace cannot run, the reason says why
    from ado_actuators.sfttrainer.plan.memory import traced as traced_parts

    def untraceable(spec, directory):
        raise traced_parts.TraceUnavailable(f"model_type {spec.config['model_type']!r} unknown")

    monkeypatch.setattr(traced_parts, "traced", untraceable)
    hybrid = check(values(), model_dir({"model_type": "acme_lm", "name": "h"}))
    assert not hybrid.certain_oom and "'acme_lm' unknown" in hybrid.skipped
    cpu = check(values(number_gpus=0, batch_size=1), big)
    assert not cpu.certain_oom and "CPU" in cpu.skipped


def test_the_bound_and_the_record_go_on_measured_rows_only(model_dir):
    found = check(values(), model_dir(LLAMA_8B))
    row = found.attach_bound_and_prediction(Measured(properties={"is_valid": 1}))
    assert row.properties[PROPERTY] == pytest.approx(found.bound.gib, abs=1e-3)
    assert row.metadata["gpu_memory_bound"]["device_memory_gib"] == 80
    assert row.metadata["gpu_memory_bound"]["parts_gib"]["optimizer_state"] > 0
    skipped = check(values(gpu_model="Acme-X1"), model_dir({**LLAMA_8B, "name": "b"}))
    record = skipped.attach_bound_and_prediction(Measured(properties={})).metadata[
        "gpu_memory_bound"
    ]
    assert record["checked"] is False and "Acme-X1" in record["skipped"]
    failed = found.attach_bound_and_prediction(Failed("x"))
    assert "gpu_memory_bound" not in failed.metadata


def test_an_invalid_row_stores_the_bound_beside_is_valid(model_dir):
    from ado_actuators.sfttrainer.actuator.experiments import build_experiments

    experiment = next(e for e in build_experiments() if e.identifier == FULL.identifier)
    result = to_result(check(values(), model_dir(LLAMA_405B)).invalid(), "e1", experiment)
    stored = {v.property.targetProperty.identifier: v.value for v in result.measurements}
    assert stored["is_valid"] == 0 and stored[PROPERTY] > 3000
    assert "certain GPU out of memory" in result.metadata["invalid_reason"]


def test_gptq_weights_without_a_width_in_config_count_at_the_narrowest_gptq_width(model_dir):
    gptq = catalog_data().experiment("finetune_gtpq-lora_benchmark-v1.0.0")
    found = check(values(torch_dtype="float16"), model_dir(LLAMA_405B), gptq)
    assert "block weights at 2 bits" in found.bound.notes
    with_bits = check(
        values(torch_dtype="float16"),
        model_dir({**LLAMA_405B, "name": "q", "quantization_config": {"bits": 4}}),
        gptq,
    )
    assert with_bits.bound.total > found.bound.total


def test_every_row_carries_the_prediction_beside_the_bound_marked_as_predicted(model_dir):
    from ado_actuators.sfttrainer.plan.memory.verdict import PREDICTED_PROPERTY

    found = check(values(), model_dir(LLAMA_8B))
    row = found.attach_bound_and_prediction(Measured(properties={"is_valid": 1}))
    assert row.properties[PREDICTED_PROPERTY] == pytest.approx(found.prediction.gib, abs=1e-3)
    record = row.metadata["gpu_memory_prediction"]
    assert record["predicted"] is True and record["measured"] is False
    assert record["peak_phase"] in record["phases_gib"]
    assert record["parts_from"] == "formula"
    assert record["moments"]["backward"] in record["moments_gib"]["backward"]
    cpu = check(values(number_gpus=0, batch_size=1), model_dir({**LLAMA_8B, "name": "c"}))
    assert (
        cpu.attach_bound_and_prediction(Measured(properties={})).metadata["gpu_memory_prediction"][
            "predicted"
        ]
        is False
    )


def test_a_predicted_oom_says_predicted_gives_both_numbers_and_how_to_measure_it(model_dir):
    # Llama 8B full fine-tuning, 16 x 2048 tokens on one A100: the bound fits, the logits do not
    found = check(values(batch_size=16, model_max_length=2048), model_dir(LLAMA_8B))
    assert not found.certain_oom and found.predicted_oom
    invalid = found.predicted_invalid()
    assert invalid.gpu_oom and invalid.metadata["answered_by"] == "prediction"
    assert invalid.metadata["gpu_memory_prediction"]["measured"] is False
    reason = invalid.reason
    assert reason.startswith("predicted GPU out of memory (a prediction, not a measurement)")
    assert f"{found.prediction.gib:.2f} GiB" in reason
    # nvidia-smi's 81,920 MiB less the CUDA context's 400 MiB
    assert "can allocate 79.61 GiB" in reason
    record = invalid.metadata["gpu_memory_prediction"]
    assert record["allocatable_gib"] == 79.609 and "81920MiB" in record["allocatable_source"]
    assert "skip_predicted_oom: false" in reason
    smaller = check(
        values(batch_size=1, model_max_length=512), model_dir({**LLAMA_8B, "name": "s"})
    )
    assert not smaller.predicted_oom


def test_skip_predicted_oom_answers_without_launching_and_its_default_launches(model_dir, tmp_path):
    from ado_actuators.sfttrainer.contract.outcomes import Invalid
    from ado_actuators.sfttrainer.engine.measurement import measure
    from ado_actuators.sfttrainer.engine.settings import MeasurementSettings

    location = model_dir(LLAMA_8B)
    entity = {
        "model_name": "big",
        "model_max_length": 2048,
        "batch_size": 16,
        "number_gpus": 1,
        "gpu_model": "NVIDIA-A100-SXM4-80GB",
        "max_steps": 3,
    }

    def settings(skip: bool) -> MeasurementSettings:
        return MeasurementSettings(
            data_directory=str(tmp_path / "data"),
            hf_home=str(tmp_path),
            output_dir=str(tmp_path / "out"),
            skip_predicted_oom=skip,
            model_map={"big": {"Vanilla": location}},
        )

    answered = measure(entity, FULL.identifier, settings(True), label="p")
    assert isinstance(answered, Invalid) and answered.reason.startswith(
        "predicted GPU out of memory"
    )
    # launched: it goes on to the node's checks (a model directory without a tokenizer here)
    launched = measure(entity, FULL.identifier, settings(False), label="p")
    assert isinstance(launched, Failed) and "no tokenizer file" in launched.reason


def test_reentrant_checkpointing_of_lora_over_fsdp_holds_the_input_gradients(model_dir):
    location = model_dir(LLAMA_8B)
    entity = dict(number_gpus=2, batch_size=4, model_max_length=1024)
    held = check(values(**entity, gradient_checkpointing_use_reentrant=True), location, LORA)
    plain = check(values(**entity), location, LORA)
    last = {p.candidates["backward"]["last layer"] for p in (held.prediction, plain.prediction)}
    # (32 layers - 1) x 2 sequences of 1,024 tokens x 4,096 x 2 bytes held, with every layer's
    # input, the hook's leaf gradient and the recomputed output (reentrant)
    held_bytes = 31 * 2048 * 4096 * 2
    assert max(last) - min(last) >= held_bytes


def test_an_rtx_4090_is_answered_llama_3_8b_full_fine_tuning_on_one_is_certain_oom(model_dir):
    """Issue 51's goal: a workstation card is in the table, so its row is answered; full
    fine-tuning of a Llama-3-8B needs at least 60 GiB of the 4090's 24."""
    found = check(values(gpu_model="NVIDIA-GeForce-RTX-4090"), model_dir(LLAMA_8B))
    assert found.skipped is None and found.certain_oom and 55 < found.bound.gib < 80
    assert found.verdict() == ("certain OOM", "the lower bound exceeds the device")
    assert "NVIDIA-GeForce-RTX-4090 has 24 GiB" in found.invalid().reason
    # torch's spelling of the name, and the older drivers' label, find the same entry
    torch_name = check(
        values(gpu_model="NVIDIA GeForce RTX 4090"), model_dir({**LLAMA_8B, "name": "t"})
    )
    assert torch_name.device_bytes == found.device_bytes == 24 * 2**30
    # LoRA of the same model fits the bound on it, and is predicted (a verdict, not unknown)
    lora = check(
        values(gpu_model="NVIDIA-GeForce-RTX-4090"), model_dir({**LLAMA_8B, "name": "l"}), LORA
    )
    assert not lora.certain_oom and lora.verdict()[0] in ("fits", "predicted OOM")


def test_gpu_memory_gib_states_a_device_the_table_lacks(model_dir):
    small = model_dir(LLAMA_8B)
    unknown = check(values(gpu_model="My-GPU-Name"), small)
    verdict, why = unknown.verdict()
    assert verdict == "unknown" and "gpu_memory_gib" in why and "My-GPU-Name" in why
    stated = {"My-GPU-Name": 48}
    found = check(values(gpu_model="My-GPU-Name"), small, stated=stated)
    assert found.skipped is None and found.device_bytes == 48 * 2**30
    assert found.certain_oom and found.verdict()[0] == "certain OOM"  # 60 GiB > 48
    assert found.allocatable == 48 * 2**30 - 400 * 2**20  # less the CUDA context
    assert "gpu_memory_gib" in found.prediction_metadata()["allocatable_source"]
    roomy = check(values(gpu_model="My-GPU-Name"), small, stated={"My-GPU-Name": 1000})
    assert roomy.verdict()[0] == "fits"
    # a stated figure replaces the table's
    shrunk = check(values(), small, stated={"NVIDIA-A100-SXM4-80GB": 40})
    assert shrunk.device_bytes == 40 * 2**30 and shrunk.certain_oom
    from ado_actuators.sfttrainer.engine.settings import MeasurementSettings

    assert MeasurementSettings().gpu_memory_gib == {}
    assert MeasurementSettings(gpu_memory_gib=stated).gpu_memory_gib == {"My-GPU-Name": 48.0}
    with pytest.raises(ValueError):
        MeasurementSettings(gpu_memory_gib={"My-GPU-Name": 0})


def test_an_unknown_device_is_certain_oom_only_beyond_the_largest_device(model_dir):
    from ado_actuators.sfttrainer.metrics.gpu_memory import largest_device, memory_table

    name, largest = largest_device()
    assert largest == max(device.gib for device in memory_table().values()) * 2**30
    huge = check(values(gpu_model="Acme-X1"), model_dir(LLAMA_405B))  # about 6 TiB
    assert huge.certain_oom and huge.skipped is None and huge.bound.total > largest
    verdict, why = huge.verdict()
    assert verdict == "certain OOM"
    assert f"more than any GPU has (the largest, {name}'s {largest / 2**30:g} GiB)" in why
    assert f"{huge.bound.gib:.2f} GiB" in why
    invalid = huge.answer(skip_predicted_oom=False)  # what the engine answers before launch
    assert invalid is not None and invalid.gpu_oom and "Acme-X1" in invalid.reason
    beyond = (
        f"that is more than any GPU has (the largest, {name}'s {largest / 2**30:g} GiB), and "
        "'Acme-X1' has no memory figure"
    )
    assert why == f"needs at least {huge.bound.gib:.2f} GiB per device: {beyond}"
    assert invalid.reason.startswith(
        f"certain GPU out of memory: each device needs at least {huge.bound.gib:.2f} GiB ("
    )
    assert f"activations not counted), but {beyond}. Not launched: " in invalid.reason
    assert invalid.metadata["answered_by"] == "certain_oom"
    off = check(values(gpu_model="Acme-X1"), model_dir({**LLAMA_405B, "name": "o"}), enabled=False)
    assert not off.certain_oom and "memory_bound_check: false" in off.skipped
    small = check(values(gpu_model="Acme-X1"), model_dir({**LLAMA_8B, "name": "s"}))
    assert not small.certain_oom and small.answer(skip_predicted_oom=True) is None
    assert small.verdict()[0] == "unknown" and "gpu_memory_gib" in small.verdict()[1]


def test_accumulating_micro_batches_under_fsdp_holds_the_gradients_whole_and_says_so(model_dir):
    """Llama-3.1-70B's full fine-tuning over 8 A100s in bf16: weights, gradients and AdamW's
    states (about 525 GiB) sharded are 66 GiB a device, under the A100's 80; at 4 micro-batches
    a step the Trainer's no_sync holds its whole 131 GiB of gradients on each device beside the
    other shards, a certain OOM whose reason names the field to change."""
    llama_70b = {
        **LLAMA_8B,
        "name": "l70",
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
    }
    location = model_dir(llama_70b)
    one = check(values(number_gpus=8, gradient_accumulation_steps=1), location)
    four = check(values(number_gpus=8, gradient_accumulation_steps=4), location)
    assert not one.certain_oom and not one.bound.gradients_whole
    assert four.certain_oom and four.bound.gradients_whole
    assert four.bound.parts["gradients"] == pytest.approx(8 * one.bound.parts["gradients"])
    verdict, why = four.verdict()
    assert verdict == "certain OOM" and "gradients whole on each device" in why
    invalid = four.answer(skip_predicted_oom=False)
    assert invalid is not None
    assert "Not launched: set gradient_accumulation_steps to 1" in invalid.reason


def test_the_workstation_and_consumer_devices_load_with_their_sources():
    from ado_actuators.sfttrainer.metrics.gpu_memory import allocatable_source, memory_table

    expected = {
        "NVIDIA-GeForce-RTX-3090": 24,
        "NVIDIA-GeForce-RTX-3090-Ti": 24,
        "NVIDIA-GeForce-RTX-4090": 24,
        "NVIDIA-GeForce-RTX-5090": 32,
        "NVIDIA-RTX-A6000": 48,
        "NVIDIA-RTX-6000-Ada-Generation": 48,
        "NVIDIA-RTX-A5000": 24,
        "NVIDIA-RTX-A4000": 16,
        "NVIDIA-A40": 48,
        "NVIDIA-A10": 24,
        "NVIDIA-A10G": 24,
        "NVIDIA-L4": 24,
        "GeForce-RTX-3090": 24,  # an older driver's label
        "RTX-A6000": 48,
    }
    table = memory_table()
    for name, gib in expected.items():
        device = table[name]
        assert device.gib == gib and device.source, name
        assert allocatable_source(name)
        if device.total_mib:  # nvidia-smi's total, below the datasheet's GB read as GiB
            assert gib * 900 < device.total_mib <= gib * 1024 and device.total_source
