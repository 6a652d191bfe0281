"""The predicted step time's arithmetic, part by part, by hand (plan/speed/step_time.py), and the
glue from an entity and a config.json to it (plan/speed/prediction.py)."""

from __future__ import annotations

import dataclasses

import pytest
from training_configuration import configuration_of

from ado_actuators.sfttrainer.plan.model.training import (
    Batch,
    FastKernels,
    Kernels,
    Parallelism,
    Precision,
    TrainingConfiguration,
    Tuning,
)
from ado_actuators.sfttrainer.plan.speed.devices import AttentionCurve, device_named
from ado_actuators.sfttrainer.plan.speed.layer_bytes import FUSABLE_WITHOUT_WIDTHS, LayerKernels
from ado_actuators.sfttrainer.plan.speed.parts import COMPUTE_SLOWDOWN_BESIDE_COLLECTIVES, exposed
from ado_actuators.sfttrainer.plan.speed.step_time import (
    CLIP_PASSES,
    NCCL_LINK_SHARE,
    REFERENCE,
    Device,
    Fitted,
    ModelShape,
    attention_kernel,
    fused_attention,
    gpus,
    hardware_flops_per_token,
    micro_batches,
    nodes,
    step_time,
    weight_bytes,
)

ADAMW_BYTES = (3 + 18) * 2
HIDDEN_SHOWS = COMPUTE_SLOWDOWN_BESIDE_COLLECTIVES / (1 + COMPUTE_SLOWDOWN_BESIDE_COLLECTIVES)
"""The share of the traffic the compute hides that still costs time: the compute runs slower
beside it (parts.COMPUTE_SLOWDOWN_BESIDE_COLLECTIVES)."""


def shown(traffic: float, units: int) -> float:
    """What traffic the compute outlasts adds: the first unit's, and its share of the rest."""
    first = traffic / units
    return first + (traffic - first) * HIDDEN_SHOWS


"""bf16 weights: the clipping's 3 passes and foreach AdamW's 18, 2 bytes each."""
# Round numbers: 1,000 FLOP/s at half efficiency, attention at the matmuls' achieved rate (no
# curve), 1 byte/s of memory, 1 byte/s of FSDP traffic.
SLOW = Device("slow", tflops=1e-9, memory_gbps=1e-9, interconnect_gbps=1e-9 / NCCL_LINK_SHARE)
UNITS = Fitted(
    matmul_efficiency=0.5,
    elementwise_bytes=1.0,
    fast_kernels_elementwise=0.5,
    adapter_bytes=2.0,
    fused_lora_adapters=0.5,
    dequant_bytes_gptq=2.0,  # at most the counted bytes: all priced at the device's bandwidth
    dequant_bytes_bnb=2.5,
    fsdp_unit_latency_s=0.1,
    host_exposed=1.0,  # the host's time beside the device's, whole: each part as it is
)
SHAPE = ModelShape(
    layers=2,
    attention_width=4,
    activated_width=10,
    matmul_params=100,
    total_params=120,
    trainable_params=100,
)
# flash-attn 2 and every layer recomputed: what the hand arithmetic below counts
RECOMPUTED = Kernels(flash_attention=True, attention="flash_attention_2", checkpointing="reentrant")
FULL = TrainingConfiguration(  # full fine-tuning, 16 tokens a micro-batch, one GPU
    batch=Batch(per_device_batch=2, sample_tokens=8), kernels=RECOMPUTED
)
LORA = Tuning(method="lora")


def varied(**parts) -> TrainingConfiguration:
    """FULL with the parts a test varies."""
    return dataclasses.replace(FULL, **parts)


def batch(per_device_batch=2, sample_tokens=8, **more) -> Batch:
    return Batch(per_device_batch=per_device_batch, sample_tokens=sample_tokens, **more)


def parts(shape=SHAPE, configuration=FULL, device=SLOW):
    return step_time(shape, configuration, device, UNITS).parts


def test_full_fine_tuning_flops_count_forward_recompute_both_gradients_and_causal_attention():
    # 2 x 3 passes x 100 weights + 2 x 100 weight gradients; attention 4 x 2 layers x 4 x 8
    # tokens, halved by causal flash attention, x (forward 1 + backward 2.5 + recompute 1)
    assert hardware_flops_per_token(SHAPE, FULL) == 600 + 200 + 128 * 4.5


def test_lora_and_prompt_tuning_compute_no_weight_gradients_of_frozen_weights():
    lora = varied(tuning=LORA)
    prompt = varied(tuning=Tuning(method="pt"))
    assert hardware_flops_per_token(SHAPE, lora) == 600 + 128 * 4.5
    # prompt tuning's 8 virtual tokens double the 8-token sequence each position attends over
    assert hardware_flops_per_token(SHAPE, prompt) == 600 + 256 * 4.5


def test_prompt_tunings_virtual_tokens_run_through_the_layers_but_are_not_counted():
    frozen = varied(tuning=Tuning(method="lora"))  # frozen, no adapter: as prompt tuning
    prompt = varied(tuning=Tuning(method="pt"))
    assert parts(configuration=prompt)["gemm"] == pytest.approx(
        2 * parts(configuration=frozen)["gemm"]
    )
    assert step_time(SHAPE, prompt, SLOW, UNITS).tokens_per_gpu == 16  # 2 samples of 8 tokens


def test_without_checkpointing_nothing_is_recomputed_and_without_flash_the_mask_costs():
    plain = varied(kernels=dataclasses.replace(RECOMPUTED, checkpointing="none"))
    assert hardware_flops_per_token(SHAPE, plain) == 400 + 200 + 128 * 3.5
    eager = varied(kernels=Kernels(attention="eager", checkpointing="reentrant"))
    assert hardware_flops_per_token(SHAPE, eager) == 800 + 256 * 4.5


def test_the_step_reads_the_kernel_the_bytes_and_the_counts_from_the_configuration():
    for runs, kernel, fused in [
        ("flash_attention_2", "fa2", True),
        ("sdpa", "sdpa", True),  # SDPA's causal kernels skip the masked half too
        ("eager", "eager", False),
    ]:
        configuration = varied(kernels=Kernels(attention=runs))
        assert (attention_kernel(configuration), fused_attention(configuration)) == (kernel, fused)
    # flash attention's Triton port (llm-foundry's attn_impl: triton) only where a run says so
    triton = varied(kernels=Kernels(attention="flash_attention_2", flash_build="triton"))
    assert (attention_kernel(triton), fused_attention(triton)) == ("triton", True)
    assert attention_kernel(varied(kernels=Kernels(attention="sdpa", flash_build="triton"))) == (
        "sdpa"
    )
    assert weight_bytes(FULL) == 2.0  # bfloat16, the parts' default
    assert weight_bytes(varied(precision=Precision(torch_dtype="float32"))) == 4.0
    # none of a count is priced as one (0 GPUs trains on the CPU: predict_speed skips it)
    none = varied(
        parallelism=Parallelism(gpus=0, nodes=0), batch=batch(gradient_accumulation_steps=0)
    )
    assert (gpus(none), nodes(none), micro_batches(none)) == (1, 1, 1)


def test_one_device_step_by_part():
    found = parts()
    assert found["gemm"] == pytest.approx(800 * 16 / (1000 * 0.5))
    # without a curve, attention runs at the achieved rate, not the framework's share of it
    assert found["attention"] == pytest.approx(576 * 16 / 1000)
    assert found["elementwise"] == pytest.approx(1 * 2 * 10 * 3 * 16)  # bytes/s = 1
    assert found["adapters"] == 0 and found["dequantization"] == 0
    # 2 layers of full training, recomputed: 56 + 93 + 43 weight-gradient + 74 recompute ops
    assert found["host"] == pytest.approx(2 * 266 * 10e-6)
    assert found["optimizer"] == pytest.approx(ADAMW_BYTES * 100)
    step = step_time(SHAPE, FULL, SLOW, UNITS)
    assert step.seconds == pytest.approx(sum(found.values()))
    assert step.tokens_per_second_per_gpu == pytest.approx(16 / step.seconds)


def test_fast_kernels_cut_the_bytes_of_the_rms_norms_and_rotary_embedding_they_replace():
    fast = varied(
        kernels=dataclasses.replace(RECOMPUTED, fast_kernels=FastKernels(True, True, True))
    )
    # no widths: a Llama layer's usual share of them; half of it left (UNITS)
    share = FUSABLE_WITHOUT_WIDTHS
    assert parts(configuration=fast)["elementwise"] == pytest.approx(
        (1 - 0.5 * share) * parts()["elementwise"]
    )
    # LayerNorms and no rotary embedding (GPTBigCode, MPT): nothing for them to fuse
    plain = dataclasses.replace(
        SHAPE, hidden=4, layer_kernels=LayerKernels(rms_norm=False, rotary=False, gated_mlp=False)
    )
    assert parts(plain, fast)["elementwise"] == pytest.approx(parts(plain)["elementwise"])


def test_lora_adapters_cost_per_pass_and_fused_kernels_cut_them():
    shape = ModelShape(2, 4, 10, 100, 120, trainable_params=5, adapted_width=20)
    lora = varied(tuning=LORA)
    assert parts(shape, lora)["adapters"] == pytest.approx(2 * 20 * 3 * 16)
    fused = varied(tuning=Tuning(method="lora", fused_lora=True))
    assert parts(shape, fused)["adapters"] == pytest.approx(2 * 20 * 3 * 16 * 0.5)
    # PEFT keeps the adapters, their gradients and states in fp32: twice the bf16 bytes
    assert parts(shape, lora)["optimizer"] == pytest.approx(2 * ADAMW_BYTES * 5)


def test_quantized_weights_are_unpacked_once_per_pass_whatever_the_batch():
    gptq = ModelShape(2, 4, 10, 100, 120, 5, quantized_params=60, quantization="gptq")
    small = varied(tuning=LORA, batch=batch(per_device_batch=1))
    large = varied(tuning=LORA, batch=batch(per_device_batch=8))
    assert parts(gptq, small)["dequantization"] == pytest.approx(2 * 60 * 3)
    assert parts(gptq, large)["dequantization"] == pytest.approx(2 * 60 * 3)
    bnb = ModelShape(2, 4, 10, 100, 120, 5, quantized_params=60, quantization="bnb")
    assert parts(bnb, small)["dequantization"] == pytest.approx(2.5 * 60 * 3)


def test_only_the_counted_bytes_follow_the_device_s_bandwidth_the_fit_s_excess_keeps_its_time():
    from ado_actuators.sfttrainer.plan.speed.step_time import COUNTED_ELEMENTWISE_BYTES

    fitted = dataclasses.replace(UNITS, elementwise_bytes=2 * COUNTED_ELEMENTWISE_BYTES)
    half = dataclasses.replace(REFERENCE, name="half", memory_gbps=REFERENCE.memory_gbps / 2)
    on_reference = step_time(SHAPE, FULL, REFERENCE, fitted).parts["elementwise"]
    on_half = step_time(SHAPE, FULL, half, fitted).parts["elementwise"]
    # half the fitted bytes are counted: they take twice as long, the other half as long
    assert on_half == pytest.approx(on_reference * (0.5 * 2 + 0.5))
    # where the fit is within the count, every byte is the device's
    within = dataclasses.replace(UNITS, elementwise_bytes=COUNTED_ELEMENTWISE_BYTES)
    ratio = (
        step_time(SHAPE, FULL, half, within).parts["elementwise"]
        / (step_time(SHAPE, FULL, REFERENCE, within).parts["elementwise"])
    )
    assert ratio == pytest.approx(2)


def test_gradient_accumulation_repeats_the_micro_batch_not_the_optimizer():
    accumulated = varied(batch=batch(gradient_accumulation_steps=3))
    once, thrice = parts(), parts(configuration=accumulated)
    for name in ("gemm", "attention", "elementwise", "host"):
        assert thrice[name] == pytest.approx(3 * once[name])
    assert thrice["optimizer"] == once["optimizer"]
    assert step_time(SHAPE, accumulated, SLOW, UNITS).tokens_per_gpu == 48


def test_each_micro_batch_after_the_first_adds_its_gradients_into_the_held_ones():
    accumulated = varied(batch=batch(gradient_accumulation_steps=3))
    # 2 micro-batches x 3 passes x 2 bytes x 100 trainable weights, at 1 byte/s
    assert parts(configuration=accumulated)["accumulation"] == pytest.approx(2 * 3 * 2 * 100)
    # under FSDP too, whole: the Trainer's no_sync keeps the gradients unsharded until the last
    sharded = varied(batch=batch(gradient_accumulation_steps=3), parallelism=Parallelism(gpus=2))
    assert parts(configuration=sharded)["accumulation"] == pytest.approx(2 * 3 * 2 * 100)
    assert "accumulation" not in parts()


def test_fsdp_reduces_the_gradients_once_a_step_not_once_a_micro_batch():
    """The Trainer runs a step's micro-batches but the last under no_sync: the gathers repeat
    each micro-batch, the gradients' reduce-scatter runs once."""
    once, thrice, each = (
        parts(
            configuration=varied(
                batch=batch(gradient_accumulation_steps=m),
                parallelism=Parallelism(gpus=2, gradient_sync=sync),
            ),
            device=dataclasses.replace(SLOW, interconnect_gbps=1e-12 / NCCL_LINK_SHARE),
        )
        for m, sync in ((1, "last"), (3, "last"), (3, "each"))
    )
    # at a thousandth of a byte a second the link is busy throughout: all the traffic shows
    gathers, gradients = 0.5 * 2 * 240 * 1000, 0.5 * 200 * 1000
    assert once["communication"] == pytest.approx(gathers + gradients, rel=0.01)
    assert thrice["communication"] == pytest.approx(3 * gathers + gradients, rel=0.01)
    # a trainer that reduces after each micro-batch (Composer, DeepSpeed), into shards
    assert each["communication"] == pytest.approx(3 * (gathers + gradients), rel=0.01)
    assert each["accumulation"] == pytest.approx(thrice["accumulation"] / 2)


def test_fsdp_gathers_the_weights_twice_and_reduces_the_gradients_each_micro_batch():
    found = parts(configuration=varied(parallelism=Parallelism(gpus=2)))
    # (n - 1) / n x (2 x 120 weights x 2 bytes + 100 gradients x 2 bytes) at 1 byte/s, less
    # what the micro-batch's compute hides
    compute = sum(found[k] for k in ("gemm", "attention", "elementwise"))
    traffic = 0.5 * (2 * 240 + 200)
    assert compute > traffic  # hidden but for the first of the 2 layers' gathers
    assert found["communication"] == pytest.approx(shown(traffic, 2))
    assert found["fsdp_latency"] == pytest.approx(0.1 * 2)  # a unit per layer
    assert found["optimizer"] == pytest.approx(ADAMW_BYTES * 100 / 2)  # sharded


def test_under_fsdps_mixed_precision_the_update_passes_over_fp32_shards():
    sharded = Parallelism(gpus=2)
    mixed = varied(parallelism=sharded, precision=Precision(mixed_precision=True))
    plain = varied(parallelism=sharded)
    # accelerate upcasts the trained flat parameters to fp32: gradients and states follow
    assert parts(configuration=mixed)["optimizer"] == pytest.approx(2 * ADAMW_BYTES * 100 / 2)
    assert parts(configuration=plain)["optimizer"] == pytest.approx(ADAMW_BYTES * 100 / 2)
    one = varied(precision=Precision(mixed_precision=True))  # one GPU: no FSDP, no upcast
    assert parts(configuration=one)["optimizer"] == pytest.approx(ADAMW_BYTES * 100)


def test_fsdp_moves_quantized_weights_at_half_a_byte_and_counts_adapter_units():
    shape = ModelShape(
        2, 4, 10, 100, 120, 5, quantized_params=60, quantization="gptq", adapters_per_layer=4
    )
    found = parts(shape, varied(tuning=LORA, parallelism=Parallelism(gpus=4)))
    stored = 60 * 2 + 60 * 0.5
    traffic = 0.75 * (2 * stored + 5 * 2)
    assert found["communication"] == pytest.approx(shown(traffic, 2))
    assert found["fsdp_latency"] == pytest.approx(0.1 * 2 * 5)


def test_ddp_all_reduces_the_trainable_gradients_once_a_step_and_shards_nothing():
    ddp = varied(
        batch=batch(gradient_accumulation_steps=2), parallelism=Parallelism(gpus=2, backend="DDP")
    )
    found = parts(configuration=ddp)
    # the all-reduce overlaps the last micro-batch's backward (2/3 of its compute)
    assert found["communication"] == pytest.approx(shown(2 * 0.5 * 100 * 2, 2))
    assert found["optimizer"] == pytest.approx(ADAMW_BYTES * 100)
    assert "fsdp_latency" not in found


def test_between_nodes_the_network_per_node_is_the_link_and_is_not_scaled_again():
    slow_network = Device(
        "slow", tflops=1e-9, memory_gbps=1e-9, interconnect_gbps=1.0, network_gbps=0.5e-9
    )
    two_nodes = varied(parallelism=Parallelism(gpus=2, nodes=2))
    found = parts(configuration=two_nodes, device=slow_network)
    compute = sum(found[k] for k in ("gemm", "attention", "elementwise"))
    traffic = 0.5 * (2 * 240 + 200) / 0.5  # at half a byte a second, the network's
    forward = 0.5 * 240 / 0.5  # the forward's gathers, beside the forward's quarter alone
    expected = exposed(traffic - forward, compute * 3 / 4, 2) + exposed(forward, compute / 4, 2)
    assert found["communication"] == pytest.approx(expected)


def test_the_host_and_the_device_hide_each_other_but_for_the_fitted_share_of_the_shorter():
    from ado_actuators.sfttrainer.plan.speed.step_time import exposed_host

    assert exposed_host(compute=4.0, host=1.0, share=0.5) == 0.5  # half the host's second
    assert exposed_host(compute=1.0, host=4.0, share=0.5) == 3.5  # the host's, half the device's
    assert exposed_host(compute=4.0, host=1.0, share=1.0) == 1.0  # one after the other
    assert exposed_host(compute=4.0, host=1.0, share=0.0) == 0.0  # the longer alone
    # in the step: the host's part is what it adds beside the rest of the micro-batch
    counted = parts()["host"]
    hidden = step_time(SHAPE, FULL, SLOW, dataclasses.replace(UNITS, host_exposed=0.25))
    assert counted < sum(v for k, v in parts().items() if k != "host")  # the device's is longer
    assert hidden.parts["host"] == pytest.approx(0.25 * counted)


def test_the_forward_s_gathers_hide_behind_the_forward_alone():
    """FSDP gathers a unit's weights for the forward while the previous unit computes its
    forward: the backward that follows cannot hide them. Here the micro-batch's compute covers
    the whole traffic, but its forward (a quarter: forward, recompute, input and weight
    gradients) does not cover the forward's gathers."""
    shape = dataclasses.replace(SHAPE, layers=10, total_params=2_000)
    found = parts(shape, varied(parallelism=Parallelism(gpus=2)))
    compute = sum(found[k] for k in ("gemm", "attention", "elementwise"))
    gather = 0.5 * 2_000 * 2  # (n - 1) / n of the bf16 weights at 1 byte/s
    backward = gather + 0.5 * 100 * 2  # the backward's gathers and the gradients' reduce-scatter
    assert gather + backward < compute < 4 * gather  # pooled, all but a unit's would hide
    # the forward's beyond the forward's compute; the backward's hidden, its first unit's aside
    assert gather - compute / 4 > gather / 10
    assert found["communication"] == pytest.approx(gather - compute / 4 + shown(backward, 10))


def test_traffic_the_compute_covers_is_hidden_but_the_first_units_gather():
    assert exposed(traffic=10.0, compute=4.0, units=2) == 6.0
    assert exposed(traffic=10.0, compute=40.0, units=5, slowdown=0.0) == 2.0  # one unit of five


def test_the_compute_the_collectives_run_beside_runs_slower():
    """Of 8 s of traffic beside 40 s of compute slowed by a quarter, the compute does 6.4 s of
    its work in those 8 s: the step ends 1.6 s later, a fifth of the traffic. Where the traffic
    outlasts the slowed compute, it alone sets the pace."""
    assert exposed(traffic=10.0, compute=40.0, units=5, slowdown=0.25) == pytest.approx(2 + 1.6)
    assert exposed(traffic=10.0, compute=4.0, units=2, slowdown=0.25) == pytest.approx(6.0)
    assert 0.15 < COMPUTE_SLOWDOWN_BESIDE_COLLECTIVES < 0.4  # the published average, not a fit


def _checkpointed(by_model: bool, checkpointing="reentrant", accumulation=1, strategy="FULL_SHARD"):
    kernels = dataclasses.replace(
        RECOMPUTED, checkpointing=checkpointing, checkpointed_by_model=by_model
    )
    parallelism = Parallelism(gpus=2, fsdp_sharding_strategy=strategy)
    configuration = varied(
        kernels=kernels,
        parallelism=parallelism,
        batch=batch(gradient_accumulation_steps=accumulation),
    )
    return parts(configuration=configuration)["communication"]


def test_inside_a_reentrant_checkpoint_fsdp_gathers_each_unit_twice_and_the_compute_waits():
    """transformers before 4.52 checkpoints each layer's call from the model's forward, so FSDP's
    unit runs inside the checkpoint: under reentrant recompute the backward gathers each unit
    for its recompute and again for its backward, with no prefetch, each gather after the
    reduce-scatter of the unit before (tests/fsdp_prefetch_probe.py). The micro-batch that
    reduces waits for a gather of each unit and the reduce-scatters whole; the extra gather of
    every micro-batch hides as the rest of the backward's traffic does."""
    prefetched = _checkpointed(by_model=False)  # the layer checkpoints itself: as before
    assert _checkpointed(by_model=True, checkpointing="non_reentrant") == prefetched
    waiting = 0.5 * (240 + 200)  # a gather of the bf16 weights and the gradients' reduce-scatter
    recompute_gather = shown(0.5 * 240, 2)  # beside the compute, as the backward's traffic
    inside = _checkpointed(by_model=True)
    assert inside - prefetched == pytest.approx(waiting + recompute_gather - shown(waiting, 2))
    # four micro-batches a step, one of them reducing (the Trainer's no_sync): the step waits
    # as long, and each micro-batch's backward hides two gathers and a quarter of the
    # reduce-scatter less what waits (a quarter of a gather and of the reduce-scatter) where
    # it hid one gather and that quarter
    step = _checkpointed(by_model=True, accumulation=4) - _checkpointed(False, accumulation=4)
    hidden_inside = 0.5 * (2 * 240 + 200 / 4) - waiting / 4
    hidden_prefetched = 0.5 * (240 + 200 / 4)
    assert step == pytest.approx(
        waiting + 4 * (shown(hidden_inside, 2) - shown(hidden_prefetched, 2))
    )
    # SHARD_GRAD_OP keeps the gathered weights from forward to backward: nothing waits
    grad_op = _checkpointed(by_model=True, strategy="SHARD_GRAD_OP")
    assert grad_op == _checkpointed(by_model=False, strategy="SHARD_GRAD_OP")


def test_another_device_changes_only_what_it_achieves_and_says_so():
    fast = Device("fast", tflops=2e-9, memory_gbps=2e-9, interconnect_gbps=2e-9 / NCCL_LINK_SHARE)
    slow, quick = (parts(), parts(device=fast))
    for name in ("gemm", "attention", "elementwise", "optimizer"):
        assert quick[name] == pytest.approx(slow[name] / 2)
    assert quick["host"] == slow["host"]  # host time: not scaled
    assert step_time(SHAPE, FULL, fast, UNITS).scaled_from == REFERENCE.name
    assert step_time(SHAPE, FULL, REFERENCE, UNITS).scaled_from is None


def test_the_speed_check_reads_the_entity_and_config_json():
    from ado_actuators.sfttrainer.catalog.entity import entity_values
    from ado_actuators.sfttrainer.catalog.experiments import catalog_data
    from ado_actuators.sfttrainer.contract.properties import THROUGHPUT_PREDICTED
    from ado_actuators.sfttrainer.plan.speed.prediction import predict_speed

    config = {
        "model_type": "llama",
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "tie_word_embeddings": False,
    }
    values = entity_values(
        {
            "model_name": "llama-7b",
            "model_max_length": 4096,
            "batch_size": 8,
            "number_gpus": 2,
            "gpu_model": "NVIDIA-H100-80GB-HBM3",
            "gradient_accumulation_steps": 1,
        }
    )
    definition = catalog_data().experiment("finetune_lora_benchmark-v1.0.0")

    def predicted(entity):
        return predict_speed(configuration_of(entity, definition, config))

    found = predicted(values)
    assert found.step is not None and found.step.tokens_per_gpu == 4 * 4096
    assert found.properties() == {THROUGHPUT_PREDICTED: round(found.tokens_per_second_per_gpu, 1)}
    assert found.metadata()["predicted"] is True and found.metadata()["measured"] is False
    assert any("priced by what it achieves" in note for note in found.notes)
    # H100, one node, 4k tokens: the regime's validated error, and where it comes from
    assert found.notes[0].startswith("regime validated (NVIDIA-H100-80GB-HBM3, up to 8k tokens)")
    assert "public runs nothing was fitted on" in found.notes[0]
    # an L40S: no public run of it was at hand, and the row says so; over several GPUs its
    # PCIe link's regime was validated on another PCIe device's runs, and the row says which
    l40s = predicted(values.model_copy(update={"gpu_model": "NVIDIA-L40S", "number_gpus": 1}))
    assert l40s.notes[0].startswith("regime not validated")
    two = predicted(values.model_copy(update={"gpu_model": "NVIDIA-L40S"}))
    assert two.notes[0].startswith("regime validated (several GPUs over PCIe, one node)")
    assert "L40 table, its 2-GPU runs" in two.notes[0]
    nvlink = predicted(values.model_copy(update={"gpu_model": "NVIDIA-A100-SXM4-40GB"}))
    assert "over PCIe" not in nvlink.notes[0]
    cpu = predicted(values.model_copy(update={"number_gpus": 0}))
    assert cpu.step is None and "CPUs" in cpu.skipped
    unknown = predicted(values.model_copy(update={"gpu_model": "Quantum-9"}))
    assert unknown.step is None and "Quantum-9" in unknown.skipped


TINY_HYBRID = {
    "model_type": "granitemoehybrid",
    "vocab_size": 100,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "layer_types": ["mamba", "attention"],
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "intermediate_size": 16,
    "shared_intermediate_size": 32,
    "mamba_n_heads": 4,
    "mamba_d_head": 32,
    "mamba_d_state": 8,
    "mamba_n_groups": 1,
    "mamba_expand": 2,
    "mamba_d_conv": 4,
    "tie_word_embeddings": True,
}


def test_an_architecture_the_counter_lacks_is_counted_on_the_meta_device():
    pytest.importorskip("transformers")
    from ado_actuators.sfttrainer.plan.model.meta_shape import meta_counts

    counts = meta_counts(TINY_HYBRID)
    assert (counts.layers, counts.attention_layers, counts.hidden) == (2, 1, 64)
    # each layer's experts: input (gate and up, 2 x 16) and output weights of 4 experts
    assert counts.experts == 2 * 4 * (2 * 16 * 64 + 64 * 16)
    assert counts.expert_share == 2 / 4
    assert counts.lm_head == 100 * 64  # tied, still a matmul
    assert counts.active_matmul == counts.linear + counts.experts / 2
    assert counts.attention_linear == 64 * 64 * 2 + 64 * 32 * 2  # q, o; k, v of 2 KV heads


def test_a_hybrid_gets_a_step_time_that_says_how_it_was_counted():
    pytest.importorskip("transformers")
    from ado_actuators.sfttrainer.catalog.entity import entity_values
    from ado_actuators.sfttrainer.catalog.experiments import catalog_data
    from ado_actuators.sfttrainer.plan.speed.prediction import META_NOTE, predict_speed

    values = entity_values(
        {
            "model_name": "granite-4.0-h-tiny",
            "model_max_length": 1024,
            "batch_size": 2,
            "number_gpus": 1,
            "gpu_model": "NVIDIA-A100-SXM4-80GB",
        }
    )
    definition = catalog_data().experiment("finetune_full_benchmark-v1.0.0")
    found = predict_speed(configuration_of(values, definition, TINY_HYBRID))
    assert found.tokens_per_second_per_gpu > 0 and META_NOTE in found.notes


@pytest.mark.parametrize(
    "name", ["llama3.1-8b", "mixtral-8x7b-instruct-v0.1", "granite-3.1-8b-instruct"]
)
def test_the_meta_count_agrees_with_the_counter_where_both_count(name):
    pytest.importorskip("transformers")
    from ado_actuators.sfttrainer.catalog.model_shapes import shipped_shape
    from ado_actuators.sfttrainer.plan.model.meta_shape import meta_counts
    from ado_actuators.sfttrainer.plan.model.training import Tuning
    from ado_actuators.sfttrainer.plan.speed.prediction import model_shape

    config = shipped_shape(name).config
    counted = model_shape(config, Tuning(), "Vanilla")
    meta = meta_counts(config)
    assert meta.total == counted.total_params
    assert meta.active_matmul == pytest.approx(counted.matmul_params, rel=1e-3)
    assert meta.attention_layers == counted.layers


TINY_MPT = {
    # MPT's own names (d_model, n_heads, n_layers), which transformers maps onto the common
    # ones; a 2-matrix GELU MLP of expansion_ratio x d_model
    "model_type": "mpt",
    "d_model": 64,
    "n_heads": 2,
    "n_layers": 3,
    "expansion_ratio": 4,
    "max_seq_len": 128,
    "vocab_size": 100,
}


def test_a_family_with_its_own_config_names_is_counted_by_transformers_names():
    pytest.importorskip("transformers")
    from ado_actuators.sfttrainer.plan.model.training import Tuning
    from ado_actuators.sfttrainer.plan.speed.prediction import model_shape

    shape = model_shape(TINY_MPT, Tuning(), "Vanilla")
    assert (shape.layers, shape.hidden, shape.head_dim) == (3, 64, 32)
    assert shape.attention_width == 64
    # hidden + the one up projection's 4 x 64 (not a gated MLP's two)
    assert shape.activated_width == 64 + 4 * 64
    # LayerNorms, no rotary embedding, a plain MLP: read from the modules transformers built
    assert shape.layer_kernels == LayerKernels(rms_norm=False, rotary=False, gated_mlp=False)


@pytest.mark.parametrize("name", ["llama3.1-8b", "granite-3.1-8b-instruct"])
def test_the_meta_shape_agrees_with_the_counter_on_a_gated_mlp(name):
    pytest.importorskip("transformers")
    from ado_actuators.sfttrainer.catalog.model_shapes import shipped_shape
    from ado_actuators.sfttrainer.plan.model.meta_shape import meta_counts
    from ado_actuators.sfttrainer.plan.model.shape import ModelShape
    from ado_actuators.sfttrainer.plan.model.training import Tuning
    from ado_actuators.sfttrainer.plan.speed.prediction import _meta_shape, model_shape

    config = shipped_shape(name).config
    counted = model_shape(config, Tuning(), "Vanilla")
    meta = _meta_shape(meta_counts(config), ModelShape.of(config), Tuning(), None)
    assert meta.activated_width == counted.activated_width
    assert (meta.head_dim, meta.attention_width) == (counted.head_dim, counted.attention_width)
    # the same layer kernels read from transformers' modules as from the family
    assert meta.layer_kernels == counted.layer_kernels == LayerKernels()
    assert meta.key_width == counted.key_width


def test_gptq_lora_runs_the_fused_kernels_its_experiment_passes():
    from ado_actuators.sfttrainer.catalog.entity import entity_values
    from ado_actuators.sfttrainer.catalog.experiments import catalog_data

    values = entity_values(
        {
            "model_name": "mistral-7b-v0.1",
            "model_max_length": 512,
            "batch_size": 4,
            "number_gpus": 2,
        }
    )
    catalog = catalog_data()
    gptq_lora = catalog.experiment("finetune_gtpq-lora_benchmark-v1.0.0")
    gptq = configuration_of(values, gptq_lora, {})
    assert (gptq.tuning.method, gptq.batch.per_device_batch) == ("lora", 2)
    assert (gptq.kernels.fast_kernels.any, gptq.tuning.fused_lora) == (True, True)
    plain = configuration_of(values, catalog.experiment("finetune_lora_benchmark-v1.0.0"), {})
    assert (plain.kernels.fast_kernels.any, plain.tuning.fused_lora) == (False, False)


def test_attention_runs_at_the_kernels_measured_rate_by_length_and_head_dimension():
    curves = (
        AttentionCurve("fa2", 128, True, "forward", ((1024, 100.0), (4096, 200.0))),
        AttentionCurve("fa2", 128, True, "backward", ((1024, 50.0), (4096, 100.0))),
        AttentionCurve("fa2", 64, True, "forward", ((1024, 10.0),)),
    )
    device = Device("d", tflops=300, memory_gbps=1, interconnect_gbps=1, attention=curves)
    assert device.attention_tflops("fa2", 128, 2048, True, "forward") == pytest.approx(150)
    assert device.attention_tflops("fa2", 128, 65536, True, "forward") == 200  # flat beyond
    assert device.attention_tflops("fa2", 96, 1024, True, "forward") == 100  # nearest, larger
    assert device.attention_tflops("sdpa", 128, 1024, True, "backward") == 50  # fa2's kernels
    # the Triton port: flash-attn 2 is 1.3-1.5x faster forward, 2x backward (FA2 paper, 4.1)
    assert device.attention_tflops("triton", 128, 1024, True, "forward") == pytest.approx(100 / 1.4)
    assert device.attention_tflops("triton", 128, 1024, True, "backward") == pytest.approx(25)
    shape = SHAPE
    # recompute: forward twice at 200, backward 2.5x at 100
    long = varied(batch=batch(per_device_batch=1, sample_tokens=4096, model_max_length=4096))
    flops = 4 * 2 * 4 * 4096 / 2
    from ado_actuators.sfttrainer.plan.speed.step_time import attention_seconds_per_token

    assert attention_seconds_per_token(shape, long, device) == pytest.approx(
        flops * 2 / 200e12 + 2.5 * flops / 100e12
    )


def test_a_causal_backward_nobody_measured_is_scaled_as_the_forward_is():
    curves = (
        AttentionCurve("fa2", 128, True, "forward", ((4096, 150.0),)),
        AttentionCurve("fa2", 128, False, "forward", ((4096, 200.0),)),
        AttentionCurve("fa2", 128, False, "backward", ((4096, 160.0),)),
    )
    device = Device("d", tflops=300, memory_gbps=1, interconnect_gbps=1, attention=curves)
    assert device.attention_tflops("fa2", 128, 4096, True, "backward") == pytest.approx(120)


def test_the_table_s_devices_price_long_sequences_slower_than_their_matmuls():
    for name in ("NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-L40", "L40S"):
        device = device_named(name)
        rate = device.attention_tflops("fa2", 128, 32768, True, "backward")
        assert 0 < rate < device.gemm_tflops < device.tflops
    assert device_named("NVIDIA-H200").attention == device_named("NVIDIA-H100-80GB-HBM3").attention


def test_l2_serves_the_re_read_share_where_a_layers_activations_fit():
    shape = dataclasses.replace(SHAPE, hidden=5)
    cached = Device("c", tflops=1e-9, memory_gbps=1e-9, interconnect_gbps=1, l2_mb=1.0)
    uncached = Device("u", tflops=1e-9, memory_gbps=1e-9, interconnect_gbps=1)
    small = varied(batch=batch(per_device_batch=1))
    with_l2 = step_time(shape, small, cached, UNITS).parts["elementwise"]
    without = step_time(shape, small, uncached, UNITS).parts["elementwise"]
    # half the bytes re-read, half of the width is the hidden one, at a third of the time
    assert with_l2 == pytest.approx(without * (1 - 0.25 + 0.25 / 3))


def test_the_cluster_network_is_an_actuator_parameter_with_a_stated_default():
    from ado_actuators.sfttrainer.engine.settings import MeasurementSettings
    from ado_actuators.sfttrainer.plan.speed.devices import DEFAULT_NETWORK_GBPS
    from ado_actuators.sfttrainer.plan.speed.prediction import device_of

    assert MeasurementSettings().inter_node_gbps == DEFAULT_NETWORK_GBPS
    assert MeasurementSettings(inter_node_gbps=25).inter_node_gbps == 25
    assert device_of("NVIDIA-H100-80GB-HBM3", 25.0).network_gbps == 25.0
    assert device_of("Quantum-9") is None


def _fsdp(strategy: str, gpus: int = 2, nodes: int = 1, network_gbps: float | None = None):
    device = SLOW if network_gbps is None else dataclasses.replace(SLOW, network_gbps=network_gbps)
    parallelism = Parallelism(gpus=gpus, nodes=nodes, fsdp_sharding_strategy=strategy)
    return parts(configuration=varied(parallelism=parallelism), device=device)


def test_each_sharding_strategy_moves_what_it_shards():
    """SHARD_GRAD_OP gathers the weights once (kept from forward to backward); NO_SHARD only
    all-reduces the gradients, beside the backward alone, as DDP does."""
    full, grad_op, no_shard = (_fsdp(s) for s in ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"))
    compute = sum(full[k] for k in ("gemm", "attention", "elementwise"))
    assert full["communication"] == pytest.approx(shown(0.5 * (2 * 240 + 200), 2))
    assert grad_op["communication"] == pytest.approx(shown(0.5 * (240 + 200), 2))
    traffic = 2 * 0.5 * 200  # an all-reduce of 100 bf16 gradients over 2 devices
    assert no_shard["communication"] == pytest.approx(exposed(traffic, compute * 2 / 3, 2))
    assert _fsdp("HYBRID_SHARD")["communication"] == full["communication"]  # one node


def test_hybrid_shard_gathers_within_a_node_and_all_reduces_across_nodes():
    """8 GPUs on 2 nodes over a network 100 times slower than the node's link: FULL_SHARD moves
    everything over the network, HYBRID_SHARD only the gradients' all-reduce."""
    network = 1e-11
    full = _fsdp("FULL_SHARD", gpus=8, nodes=2, network_gbps=network)
    hybrid = _fsdp("HYBRID_SHARD", gpus=8, nodes=2, network_gbps=network)
    within = 3 / 4 * (2 * 240 + 200) / 1.0  # 4 devices a node, 1 byte/s within
    across = 2 * 1 / 2 * 200 / (network * 1e9)  # the gradients' all-reduce between 2 nodes
    compute = sum(hybrid[k] for k in ("gemm", "attention", "elementwise"))
    forward = 3 / 4 * 240 / 1.0  # the forward's gathers, beside the forward's quarter alone
    rest = within + across - forward
    assert hybrid["communication"] == pytest.approx(
        exposed(rest, compute * 3 / 4, 2) + exposed(forward, compute / 4, 2)
    )
    assert full["communication"] == pytest.approx(7 / 8 * (2 * 240 + 200) / 0.01 - compute)
    assert hybrid["communication"] < full["communication"]


@pytest.mark.parametrize(
    ("optim", "traffic"),
    [
        ("adamw_torch", 18 * 2),  # torch's foreach step: 18 passes over bf16 tensors
        ("adamw_torch_fused", 3 * 2 + 2 * 4),  # one kernel: weight, gradient, two states
        ("adamw_8bit", 3 * 2 + 2 * 2),  # bitsandbytes' kernel: one byte a state
        ("paged_adamw_8bit", 3 * 2 + 2 * 2),
        ("sgd", 3 * 2),  # add_(weight, gradient)
        ("adagrad", 13 * 2),
        ("rmsprop", 13 * 2),
        ("lion_32bit", 3 * 2 + 2 * 4),
        ("galore_adamw", 18 * 2),  # unstated: as foreach AdamW
    ],
)
def test_the_update_moves_what_the_optimizers_kernels_pass_over(optim, traffic):
    found = parts(configuration=varied(precision=Precision(optim=optim)))
    clipping = CLIP_PASSES * 2  # every step, whatever the optimizer
    assert found["optimizer"] == pytest.approx((clipping + traffic) * 100)
