"""The predicted peak (plan/memory_peak.py) and the logits' bytes (plan/logits_memory.py), term
by term against hand arithmetic."""

from __future__ import annotations

import pytest

from ado_actuators.sfttrainer.plan import logits_memory
from ado_actuators.sfttrainer.plan.architecture import count_parameters
from ado_actuators.sfttrainer.plan.logits_memory import LossCode, read_loss_code
from ado_actuators.sfttrainer.plan.memory_bound import GIB, Training, memory_bound
from ado_actuators.sfttrainer.plan.memory_peak import (
    Dimensions,
    Fitted,
    Workload,
    activation_bytes,
    gathered_bytes,
    held_input_gradient_bytes,
    layer_activation_bytes,
    logits_bytes,
    predict_peak,
)

# A Llama with round numbers: h 64, 4 heads of 16, 2 kv heads, MLP 128, 2 layers, vocab 1000.
TINY = {
    "model_type": "llama",
    "vocab_size": 1000,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}
MISTRAL_7B = {
    "model_type": "mistral",
    "vocab_size": 32000,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "tie_word_embeddings": False,
}
UNIT = Fitted(activations=1.0, recompute=1.0, logits=1.0)


def full(number_gpus: int = 1) -> Training:
    return Training(
        peft_method="none", torch_dtype="bfloat16", optim="adamw_torch", number_gpus=number_gpus
    )


@pytest.mark.parametrize(
    ("code", "fused", "autocast", "expected"),
    [
        # 4.44/4.45: fp32 logits (4) + shifted fp32 copy (4) + log_softmax (4) = 12 = backward's 3 x 4
        (LossCode("model", "logits"), None, False, 12),
        # 4.46-4.48: bf16 logits (2) + fp32 upcast (4) + copy (4) + log_softmax (4)
        (LossCode("loss", "logits"), None, False, 14),
        # 4.49+: 2 + 4 + 4 = 10 forward; backward 3 x 4 = 12
        (LossCode("loss", "labels"), None, False, 12),
        # GPTBigCode before 4.48.3: all bf16, 2 + 2 + 2 = 6
        (LossCode("none", "logits"), None, False, 6),
        # under autocast: + the fp32 copy nll_loss takes (4), then accelerate's fp32 logits (4)
        (LossCode("none", "logits"), None, True, 12),
        (LossCode("loss", "labels"), None, True, 12),
        # an in-place kernel: only what exists before cross-entropy
        (LossCode("model", "logits"), "in_place", False, 8),
        (LossCode("loss", "logits"), "in_place", False, 10),
        (LossCode("loss", "labels"), "in_place", False, 6),
        (LossCode("loss", "labels"), "chunked", False, 0),
    ],
)
def test_bytes_per_logit_by_release(code, fused, autocast, expected):
    assert code.bytes_per_logit(2, fused, autocast=autocast) == expected


LOSS_446 = """
def ForCausalLMLoss(logits, labels, vocab_size: int, **kwargs):
    logits = logits.float()
    shift_logits = logits[..., :-1, :].contiguous()
    return fixed_cross_entropy(shift_logits, labels)
"""
LOSS_449 = """
def ForCausalLMLoss(logits, labels, vocab_size: int, **kwargs):
    logits = logits.float()
    labels = nn.functional.pad(labels, (0, 1), value=ignore_index)
    return fixed_cross_entropy(logits.view(-1, vocab_size), labels)
"""
MODEL_LOSS_FUNCTION = """
class KwargsForCausalLM(FlashAttentionKwargs): ...

class LlamaForCausalLM(LlamaPreTrainedModel, GenerationMixin):
    def forward(self, input_ids, labels=None):
        logits = self.lm_head(hidden_states)
        if labels is None:
            logits = logits.float()
        loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.vocab_size)
        return loss, logits
"""
MODEL_INLINE = """
class LlamaForCausalLM(LlamaPreTrainedModel):
    def forward(self, input_ids, labels=None):
        logits = self.lm_head(hidden_states).float()
        if labels is not None:
            shift_logits = logits[..., :-1, :].contiguous()
            loss = CrossEntropyLoss()(shift_logits.view(-1, V), labels)
        return loss, logits
"""


def test_the_loss_code_is_read_from_the_release_source():
    assert read_loss_code(MODEL_INLINE, None) == LossCode("model", "logits")
    assert read_loss_code(MODEL_INLINE.replace(".float()", ""), None) == LossCode("none", "logits")
    # an upcast only without labels (inference) does not count; the Kwargs class is not the model
    assert read_loss_code(MODEL_LOSS_FUNCTION, LOSS_446) == LossCode("loss", "logits")
    assert read_loss_code(MODEL_LOSS_FUNCTION, LOSS_449) == LossCode("loss", "labels")
    with pytest.raises(ValueError, match="loss_utils"):
        read_loss_code(MODEL_LOSS_FUNCTION, None)


def test_a_version_reads_the_release_its_package_list_pins():
    assert logits_memory.transformers_release("2.1.2") == "4.45.2"
    assert logits_memory.loss_code_for("2.1.2", "mistral") == LossCode("model", "logits")
    assert logits_memory.loss_code_for("2.6.0", "llama") == LossCode("loss", "logits")
    assert logits_memory.loss_code_for("3.2.2", "llama") == LossCode("loss", "labels")
    assert logits_memory.loss_code_for("3.2.2", "falcon") is None


def test_layer_activations_of_full_fine_tuning_with_flash_attention():
    dims = Dimensions.of(TINY)
    assert (dims.q_width, dims.kv_width, dims.intermediate) == (64, 32, 128)
    work = Workload(per_device_batch=1, sequence_length=8)
    # norms 2 x (fp32 input 4h + dtype output 2h) = 768; attention 2 x (2 x 64 + 2 x 32) = 384;
    # MLP 2 x 4 x 128 = 1024
    assert layer_activation_bytes(dims, full(), work, fitted=UNIT) == 768 + 384 + 1024
    fused = Workload(per_device_batch=1, sequence_length=8, fast_rms_layernorm=True)
    assert layer_activation_bytes(dims, full(), fused, fitted=UNIT) == 2 * 128 + 384 + 1024


def test_without_flash_attention_each_layer_keeps_the_s_squared_probabilities():
    dims = Dimensions.of(TINY)
    flash = Workload(per_device_batch=1, sequence_length=8)
    eager = Workload(per_device_batch=1, sequence_length=8, flash_attention=False)
    extra = layer_activation_bytes(dims, full(), eager, fitted=UNIT) - layer_activation_bytes(
        dims, full(), flash, fitted=UNIT
    )
    assert extra == 4 * 8 * (4 + 2)  # heads x s x (fp32 softmax + bf16 copy) per token


def test_lora_keeps_no_input_of_a_frozen_linear_and_the_dropout_copy_of_an_adapted_one():
    dims = Dimensions.of(TINY)
    lora = Training(
        peft_method="lora",
        torch_dtype="bfloat16",
        optim="adamw_torch",
        number_gpus=1,
        lora_r=8,
        target_modules=("q_proj", "v_proj"),
    )
    work = Workload(per_device_batch=1, sequence_length=8)
    # norms 2 x 4h = 512 (frozen weight: no dtype copy); attention 384; MLP 2 x 3 x 128 = 768;
    # adapters 2 x ((2 + 1) x 64 + 2 x 8) = 416
    assert (
        layer_activation_bytes(dims, lora, work, ("q_proj", "v_proj"), UNIT)
        == 512 + 384 + 768 + 416
    )


def test_checkpointing_keeps_every_layers_input_and_recomputes_one_layer():
    dims = Dimensions.of(TINY)
    work = Workload(per_device_batch=2, sequence_length=8)
    per_layer = layer_activation_bytes(dims, full(), work, fitted=UNIT) * 16
    parts = activation_bytes(dims, full(), work, fitted=Fitted(recompute=2.0, activations=1.0))
    assert parts == {"checkpointed_inputs": 2 * 16 * 64 * 2, "recompute": 2 * per_layer}
    off = Workload(per_device_batch=2, sequence_length=8, gradient_checkpointing=False)
    assert activation_bytes(dims, full(), off, fitted=UNIT) == {"activations": 2 * per_layer}


def test_logits_are_tokens_times_vocabulary_times_the_releases_bytes():
    dims = Dimensions.of(TINY)
    work = Workload(per_device_batch=2, sequence_length=8, loss=LossCode("loss", "logits"))
    assert logits_bytes(dims, full(), work, UNIT) == 16 * 1000 * 14
    pt = Training(peft_method="pt", torch_dtype="bfloat16", optim="adamw_torch", number_gpus=1)
    assert logits_bytes(dims, pt, work, UNIT) == (16 + 2 * 8) * 1000 * 14  # 8 virtual tokens each
    assert logits_bytes(dims, full(), Workload(per_device_batch=2, sequence_length=8), UNIT) == 0


def test_fsdp_gathers_the_root_unit_and_two_prefetched_layers():
    counts, dims = count_parameters(TINY), Dimensions.of(TINY)
    four = full(number_gpus=4)
    bound = memory_bound(counts, four)
    root = counts.embedding + counts.lm_head + 64
    layer = (counts.total - root) / 2
    assert gathered_bytes(counts, dims, bound, four) == pytest.approx(
        (root + 2 * layer) * 2 * 3 / 4
    )
    single = full()
    assert gathered_bytes(counts, dims, memory_bound(counts, single), single) == 0


def test_mistral_7b_full_fine_tuning_peaks_at_the_optimizer_step_at_batch_4_and_8():
    """fms-acceleration's A100 runs: 67.46 GiB at batch 4 and at batch 8 (torch's peak), the
    step's 10 bytes a parameter: bf16 weights, gradients, two AdamW states and one temporary."""
    counts, dims = count_parameters(MISTRAL_7B), Dimensions.of(MISTRAL_7B)
    training = full()
    bound = memory_bound(counts, training)
    for batch in (4, 8):
        work = Workload(
            per_device_batch=batch,
            sequence_length=4096,
            fused_loss="in_place",
            loss=LossCode("loss", "logits"),
        )
        prediction = predict_peak(counts, dims, training, bound, work)
        assert prediction.phase == "optimizer_step"
        assert prediction.total == pytest.approx(10 * counts.total)
        assert prediction.gib == pytest.approx(67.46, abs=0.05)


def test_the_peak_is_the_largest_phase_not_their_sum():
    counts, dims = count_parameters(MISTRAL_7B), Dimensions.of(MISTRAL_7B)
    training = full()
    bound = memory_bound(counts, training)
    work = Workload(per_device_batch=32, sequence_length=4096, loss=LossCode("loss", "logits"))
    prediction = predict_peak(counts, dims, training, bound, work, fitted=UNIT)
    sums = {name: sum(parts.values()) for name, parts in prediction.phases.items()}
    assert prediction.phase == "loss" and prediction.total == max(sums.values())
    assert prediction.total < sum(sums.values())
    # the logits and a recomputed layer are never counted together
    assert "recompute" not in prediction.phases["loss"]
    assert "logits_and_loss" not in prediction.phases["backward"]
    assert prediction.as_metadata()["peak_phase"] == "loss"
    assert prediction.as_metadata()["predicted_gib"] == round(prediction.total / GIB, 3)


def test_accumulation_keeps_the_gradients_through_forward_and_backward():
    counts, dims = count_parameters(TINY), Dimensions.of(TINY)
    training = full()
    bound = memory_bound(counts, training)
    once = predict_peak(counts, dims, training, bound, Workload(1, 8))
    accumulated = predict_peak(
        counts, dims, training, bound, Workload(1, 8, gradient_accumulation_steps=4)
    )
    assert once.phases["loss"]["gradients"] == 0
    assert accumulated.phases["loss"]["gradients"] == bound.parts["gradients"]


def test_mixed_precision_under_fsdp_upcasts_the_trained_parameters_to_fp32():
    counts, dims = count_parameters(MISTRAL_7B), Dimensions.of(MISTRAL_7B)
    two = full(number_gpus=2)
    bound = memory_bound(counts, two)
    work = Workload(
        4,
        4096,
        autocast=True,
        fsdp_upcast=True,
        fused_loss="in_place",
        loss=LossCode("model", "logits"),
    )
    prediction = predict_peak(counts, dims, two, bound, work)
    # fp32 weights, gradients, two states and one temporary over 2 devices: 10 bytes a parameter
    assert prediction.phases["optimizer_step"]["weights"] == pytest.approx(
        2 * bound.parts["weights"]
    )
    assert prediction.total == pytest.approx(10 * counts.total)


def test_on_the_published_a100_runs_the_prediction_is_close_and_calls_no_run_that_ran_oom():
    """benchmarks/memory_prediction.py (printed by benchmarks/memory_bound.py) with FITTED: the
    figures docs/benchmarks/memory.md quotes, as floors a change must not fall below."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    try:
        import memory_prediction
    finally:
        sys.path.pop(0)
    found = memory_prediction.summary(memory_prediction.judge(memory_prediction.cases()))
    assert found["runs_with_torch_peak"] > 200
    assert found["median_abs_error"] <= 0.10
    assert found["ran_predicted_out_of_memory"] == 0
    assert found["out_of_memory_predicted"] >= 85  # the recall goal, of 100 OOMs


# ---- every field and key, exactly (what `make mutation` asks of this module) -----------------

WIDE_HEADS = dict(TINY, head_dim=32)  # q width 4 x 32 = 128, wider than the hidden 64
SANTACODER_LIKE = {
    "model_type": "gpt_bigcode",
    "vocab_size": 500,
    "n_embd": 64,
    "n_layer": 3,
    "n_head": 4,
    "n_positions": 128,
}


def test_dimensions_are_read_as_each_family_spells_them():
    assert Dimensions.of(TINY) == Dimensions("llama", 2, 64, 4, 64, 32, 128, 1000, 1)
    # head_dim given; no num_key_value_heads: as many as query heads
    no_kv = {k: v for k, v in WIDE_HEADS.items() if k != "num_key_value_heads"}
    assert Dimensions.of(no_kv) == Dimensions("llama", 2, 64, 4, 128, 128, 128, 1000, 1)
    assert (
        Dimensions.of(dict(TINY, model_type="mixtral", num_experts_per_tok=2)).experts_per_token
        == 2
    )
    # GPTBigCode: multi-query (one 16-wide key/value head), n_inner absent: 4 x hidden
    assert Dimensions.of(SANTACODER_LIKE) == Dimensions(
        "gpt_bigcode", 3, 64, 4, 64, 16, 256, 500, 1
    )
    multi_head = dict(SANTACODER_LIKE, multi_query=False, n_inner=100)
    assert Dimensions.of(multi_head) == Dimensions("gpt_bigcode", 3, 64, 4, 64, 64, 100, 500, 1)
    # a head's width is the whole part of hidden / heads
    assert Dimensions.of(dict(SANTACODER_LIKE, n_embd=66)).kv_width == 16
    assert Dimensions.of(dict(TINY, hidden_size=66)).q_width == 64


def test_gpt_bigcode_layers_keep_their_layernorm_inputs_and_gelu_tensors():
    dims = Dimensions.of(SANTACODER_LIKE)
    work = Workload(per_device_batch=1, sequence_length=8)
    # norms 2 x 2h = 256; attention 2 x (2 x 64 + 2 x 16) = 320; GELU 2 x 2 x 256 = 1024
    assert layer_activation_bytes(dims, full(), work, fitted=UNIT) == 256 + 320 + 1024


def test_experts_multiply_the_mlp_by_the_experts_each_token_visits():
    dense = Dimensions.of(TINY)
    moe = Dimensions.of(dict(TINY, model_type="mixtral", num_experts_per_tok=2))
    work = Workload(per_device_batch=1, sequence_length=8)
    assert (
        layer_activation_bytes(moe, full(), work, fitted=UNIT)
        - layer_activation_bytes(dense, full(), work, fitted=UNIT)
        == 1024
    )  # the MLP's 1024 once more


def test_an_adapters_input_is_the_hidden_state_but_for_o_proj_and_down_proj():
    dims = Dimensions.of(WIDE_HEADS)  # o_proj reads 128, down_proj 128 (the MLP), others 64
    lora = Training(
        peft_method="lora", torch_dtype="bfloat16", optim="adamw_torch", number_gpus=1, lora_r=8
    )
    work = Workload(per_device_batch=1, sequence_length=8)
    base = layer_activation_bytes(dims, lora, work, (), UNIT)
    for name, inputs in (("q_proj", 64), ("o_proj", 128), ("down_proj", 128), ("c_attn", 64)):
        assert (
            layer_activation_bytes(dims, lora, work, (name,), UNIT) - base == 3 * inputs + 2 * 8
        ), name


def test_fsdp_gathers_nothing_without_fsdp_or_shards_and_exactly_this_with_them():
    config = dict(TINY, num_hidden_layers=1, tie_word_embeddings=False)  # an LM head of its own
    counts, dims = count_parameters(config), Dimensions.of(config)
    expert_parallel_ddp = Training(
        peft_method="none",
        torch_dtype="bfloat16",
        optim="adamw_torch",
        number_gpus=4,
        distributed_backend="DDP",
        fast_moe=2,
    )
    for training in (full(), expert_parallel_ddp):
        assert gathered_bytes(counts, dims, memory_bound(counts, training), training) == 0
    two = full(number_gpus=2)
    root = counts.embedding + counts.lm_head + 64
    assert counts.lm_head == counts.embedding == 64000
    layer = counts.total - root  # the one layer
    assert (
        gathered_bytes(counts, dims, memory_bound(counts, two), two) == (root + 2 * layer) * 2 / 2
    )


def test_every_phase_holds_exactly_its_parts():
    counts, dims = count_parameters(TINY), Dimensions.of(TINY)
    training = full()
    bound = memory_bound(counts, training)
    weights, gradients, state = (
        bound.parts[k] for k in ("weights", "gradients", "optimizer_state")
    )
    work = Workload(
        per_device_batch=2,
        sequence_length=8,
        loss=LossCode("loss", "labels"),
        gradient_accumulation_steps=2,
    )
    fitted = Fitted(activations=1.0, recompute=3.0, logits=0.5)
    prediction = predict_peak(counts, dims, training, bound, work, fitted=fitted)
    per_layer = (768 + 384 + 1024) * 16
    during = {
        "weights": weights,
        "optimizer_state": state,
        "gradients": gradients,
        "fsdp_gathered": 0.0,
    }
    assert prediction.phases == {
        "loss": {
            **during,
            "checkpointed_inputs": 2 * 16 * 64 * 2,
            "logits_and_loss": 0.5 * 16 * 1000 * 12,
        },
        "backward": {
            **during,
            "checkpointed_inputs": 2 * 16 * 64 * 2,
            "recompute": 3.0 * per_layer,
        },
        "optimizer_step": {
            "weights": weights,
            "optimizer_state": state,
            "gradients": gradients,
            "optimizer_temporaries": state / 2,
        },
    }
    assert prediction.fitted == fitted and prediction.notes == ()
    metadata = prediction.as_metadata()
    assert metadata["phases_gib"]["optimizer_step"]["optimizer_temporaries"] == round(
        state / 2 / GIB, 3
    )
    assert metadata["phases_gib"]["loss"]["logits_and_loss"] == round(96000 / GIB, 3)
    assert metadata["fitted"] == {"activations": 1.0, "recompute": 3.0, "logits": 0.5}


def test_the_metadata_rounds_each_part_to_the_mebibyte_and_keeps_the_notes():
    counts, dims = count_parameters(MISTRAL_7B), Dimensions.of(MISTRAL_7B)
    training = full()
    bound = memory_bound(counts, training)
    prediction = predict_peak(counts, dims, training, bound, Workload(4, 4096))
    metadata = prediction.as_metadata()
    step = metadata["phases_gib"]["optimizer_step"]
    assert step["weights"] == round(bound.parts["weights"] / GIB, 3) == 13.489
    assert metadata["notes"] == [
        "logits not counted: the transformers release's loss is not on record"
    ]
    assert metadata["peak_phase"] == "optimizer_step" and metadata["predicted_gib"] == 67.444


def test_without_checkpointing_there_is_no_backward_phase_and_no_state_no_temporary():
    counts, dims = count_parameters(TINY), Dimensions.of(TINY)
    sgd = Training(peft_method="none", torch_dtype="bfloat16", optim="sgd", number_gpus=1)
    prediction = predict_peak(
        counts,
        dims,
        sgd,
        memory_bound(counts, sgd),
        Workload(1, 8, gradient_checkpointing=False),
        fitted=UNIT,
    )
    assert set(prediction.phases) == {"loss", "optimizer_step"}
    assert prediction.phases["optimizer_step"]["optimizer_temporaries"] == 0.0
    assert prediction.phases["loss"]["activations"] == 2 * (768 + 384 + 1024) * 8
    assert prediction.notes == (
        "optimizer state of sgd not counted",
        "logits not counted: the transformers release's loss is not on record",
    )


def test_two_accumulated_micro_batches_keep_the_gradients_and_a_chunked_loss_needs_no_record():
    counts, dims = count_parameters(TINY), Dimensions.of(TINY)
    training = full()
    bound = memory_bound(counts, training)
    two = predict_peak(
        counts,
        dims,
        training,
        bound,
        Workload(1, 8, gradient_accumulation_steps=2, fused_loss="chunked"),
    )
    assert two.phases["loss"]["gradients"] == bound.parts["gradients"] and two.notes == ()


def test_the_fp32_upcast_needs_fsdp_over_several_devices_and_unquantized_weights():
    counts, dims = count_parameters(TINY), Dimensions.of(TINY)
    upcast = Workload(1, 8, autocast=True, fsdp_upcast=True)
    one = full()
    single = predict_peak(counts, dims, one, memory_bound(counts, one), upcast)
    assert single.phases["optimizer_step"]["weights"] == memory_bound(counts, one).parts["weights"]
    quantized = Training(
        peft_method="lora",
        torch_dtype="bfloat16",
        optim="adamw_torch",
        number_gpus=2,
        quantized_bits=4,
    )
    bound = memory_bound(counts, quantized)
    assert (
        predict_peak(counts, dims, quantized, bound, upcast).phases["optimizer_step"]["weights"]
        == (bound.parts["weights"])
    )
    two = full(number_gpus=2)
    sharded = predict_peak(counts, dims, two, memory_bound(counts, two), upcast)
    assert sharded.notes[-1] == "FSDP under mixed precision: trainable parameters upcast to fp32"
    # LoRA: the adapters are units of their own; the layers' frozen weights stay bf16
    lora = Training(
        peft_method="lora",
        torch_dtype="bfloat16",
        optim="adamw_torch",
        number_gpus=2,
        target_modules=("q_proj",),
    )
    bound = memory_bound(counts, lora)
    step = predict_peak(counts, dims, lora, bound, upcast).phases["optimizer_step"]
    assert step["weights"] == bound.parts["weights"]
    assert step["gradients"] == 2 * bound.parts["gradients"] > 0
    assert step["optimizer_state"] == 2 * bound.parts["optimizer_state"] > 0


def lora_over(number_gpus: int, backend: str = "FSDP", peft: str = "lora") -> Training:
    return Training(
        peft_method=peft,
        torch_dtype="bfloat16",
        optim="adamw_torch",
        number_gpus=number_gpus,
        target_modules=("q_proj",),
        distributed_backend=backend,
    )


def test_fsdp_over_frozen_layers_holds_every_layers_input_gradient_under_reentrant_checkpointing():
    counts, dims = count_parameters(TINY), Dimensions.of(TINY)
    reentrant = Workload(per_device_batch=2, sequence_length=8, reentrant_checkpointing=True)
    two = lora_over(2)
    # (2 layers - 1) x 16 tokens x hidden 64 x 2 bytes
    assert held_input_gradient_bytes(dims, two, memory_bound(counts, two), reentrant) == 2048
    pt = lora_over(2, peft="pt")
    assert held_input_gradient_bytes(dims, pt, memory_bound(counts, pt), reentrant) == 2048
    prediction = predict_peak(counts, dims, two, memory_bound(counts, two), reentrant)
    assert prediction.phases["backward"]["fsdp_held_input_gradients"] == 2048
    assert "fsdp_held_input_gradients" not in prediction.phases["loss"]
    # none of it: the layers train (full), one device, DDP, no checkpointing, non-reentrant
    for training, work in [
        (full(number_gpus=2), reentrant),
        (lora_over(1), reentrant),
        (lora_over(2, "DDP"), reentrant),
        (two, Workload(2, 8, gradient_checkpointing=False, reentrant_checkpointing=True)),
        (two, Workload(2, 8)),
    ]:
        assert held_input_gradient_bytes(dims, training, memory_bound(counts, training), work) == 0
        phases = predict_peak(counts, dims, training, memory_bound(counts, training), work).phases
        assert "fsdp_held_input_gradients" not in phases.get("backward", {})


def test_logits_under_autocast_and_by_default():
    dims = Dimensions.of(TINY)
    code = LossCode("none", "logits")
    assert code.bytes_per_logit(2) == 6  # no autocast unless asked
    work = Workload(per_device_batch=1, sequence_length=8, loss=code, autocast=True)
    assert logits_bytes(dims, full(), work, UNIT) == 8 * 1000 * 12
    assert logits_bytes(dims, full(), work, Fitted(logits=2.0)) == 2 * 8 * 1000 * 12
    with pytest.raises(AssertionError):
        LossCode("bf16", "logits")
    with pytest.raises(AssertionError):
        LossCode("loss", "both")


def test_the_release_reader_names_what_it_could_not_find():
    with pytest.raises(ValueError, match=r"^no \*ForCausalLM class in the modeling source$"):
        read_loss_code("class Foo(Bar):\n    pass\n", None)
    with pytest.raises(ValueError, match=r"^the \*ForCausalLM class has no forward$"):
        read_loss_code("class LlamaForCausalLM(LlamaPreTrainedModel):\n    x = 1\n", None)
    with pytest.raises(
        ValueError, match=r"^the model calls self.loss_function, but no loss_utils.py was given$"
    ):
        read_loss_code(MODEL_LOSS_FUNCTION, None)
    with pytest.raises(ValueError, match=r"^no function ForCausalLMLoss in the source$"):
        read_loss_code(MODEL_LOSS_FUNCTION, "def Other():\n    pass\n")


def test_an_upcast_is_read_wherever_the_training_path_takes_it():
    no_upcast_loss = LOSS_449.replace("    logits = logits.float()\n", "")
    assert read_loss_code(MODEL_LOSS_FUNCTION, no_upcast_loss) == LossCode("none", "labels")
    # an unguarded upcast in a model that also calls the loss function: the model's
    unguarded = MODEL_LOSS_FUNCTION.replace(
        "        if labels is None:\n            logits = logits.float()\n",
        "        logits = logits.float()\n",
    )
    assert read_loss_code(unguarded, no_upcast_loss) == LossCode("model", "labels")
    # a guard ends where its block ends: an upcast after it counts
    after = MODEL_LOSS_FUNCTION.replace(
        "        loss = self.loss_function",
        "        logits = logits.float()\n        loss = self.loss_function",
    )
    assert read_loss_code(after, no_upcast_loss).upcast == "model"


def test_a_release_or_family_not_on_record_has_no_loss_code():
    assert logits_memory.loss_code("0.0.1", "llama") is None
    assert logits_memory.loss_code("4.45.2", "falcon") is None
    assert logits_memory.transformers_release("3.2.2") == "4.55.4"
