"""Each optimizer's state, by what it is (plan/model/optimizers.py): every `optim` the entity
lists is in the table with its source or the reason it cannot be stated; the bound, the
formula's peak and the trace's peak count it; a paged optimizer's state is outside the allocated
peak and the verdict says what the run relies on."""

from __future__ import annotations

import dataclasses

import pytest
from model_configs import LLAMA_31_8B

from ado_actuators.sfttrainer.catalog.entity import FIELDS
from ado_actuators.sfttrainer.catalog.entity import OPTIMIZERS as ENTITY_OPTIMIZERS
from ado_actuators.sfttrainer.contract.memory_trace import TracedStep
from ado_actuators.sfttrainer.contract.units import GIB
from ado_actuators.sfttrainer.plan.memory import traced as T
from ado_actuators.sfttrainer.plan.memory.bound import memory_bound
from ado_actuators.sfttrainer.plan.memory.peak import ReleaseBehaviour, model_states
from ado_actuators.sfttrainer.plan.memory.verdict import assess
from ado_actuators.sfttrainer.plan.model.architecture import count_parameters
from ado_actuators.sfttrainer.plan.model.optimizers import OPTIMIZERS, optimizer_state
from ado_actuators.sfttrainer.plan.model.training import (
    Batch,
    Parallelism,
    Precision,
    TrainingConfiguration,
    Tuning,
)


def test_every_optimizer_the_entity_lists_is_stated_or_says_why_not():
    assert set(ENTITY_OPTIMIZERS) == set(OPTIMIZERS)
    for name, state in OPTIMIZERS.items():
        assert bool(state.source) != bool(state.unstated), name
    assert (
        optimizer_state("made_up").unstated == "made_up is not in plan/model/optimizers.py's table"
    )


@pytest.mark.parametrize(
    ("optim", "bytes_per_parameter"),
    [
        ("adamw_torch", 4),  # exp_avg, exp_avg_sq in bf16
        ("adamw_torch_fused", 4),
        ("adamw_anyprecision", 8),  # fp32 moments whatever the dtype
        ("adamw_8bit", 2),
        ("paged_adamw_8bit", 0),  # the host can hold it: no device must
        ("adamw_torch_4bit", 1),
        ("lion_8bit", 1),
        ("lion_32bit", 4),
        ("ademamix", 12),
        ("rmsprop", 2),
        ("rmsprop_bnb_8bit", 1),
        ("adagrad", 2),
        ("sgd", 0),
        ("adafactor", 0),
        ("schedule_free_adamw", 4),
        ("grokadamw", 6),
        ("galore_adamw", 0),  # unstated: counted as none, and said
    ],
)
def test_the_bound_counts_each_optimizers_state(optim, bytes_per_parameter):
    counts = count_parameters(LLAMA_31_8B)
    bound = memory_bound(counts, TrainingConfiguration(precision=Precision(optim=optim)))
    assert bound.parts["optimizer_state"] == bytes_per_parameter * counts.total


def _states(optim: str, tuning: Tuning | None = None) -> dict[str, float]:
    configuration = TrainingConfiguration(
        tuning=tuning or Tuning(), precision=Precision(optim=optim)
    )
    counts = count_parameters(LLAMA_31_8B)
    bound = memory_bound(counts, configuration)
    return model_states(counts, configuration, bound, ReleaseBehaviour())[0]


def test_only_torchs_foreach_step_allocates_a_temporary():
    norms = count_parameters(LLAMA_31_8B).norms / count_parameters(LLAMA_31_8B).total
    adamw = _states("adamw_torch")
    assert adamw["optimizer_temporaries"] == pytest.approx(
        adamw["optimizer_state"] / 2 * (1 - norms)
    )
    rmsprop = _states("rmsprop")
    assert rmsprop["optimizer_temporaries"] == pytest.approx(
        rmsprop["optimizer_state"] * (1 - norms)
    )
    for kernel in ("adamw_torch_fused", "adamw_8bit", "sgd", "paged_adamw_32bit", "lion_32bit"):
        assert _states(kernel)["optimizer_temporaries"] == 0, kernel


def test_lora_adapters_in_fp32_scale_a_state_in_their_dtype_but_not_an_8_bit_one():
    lora = Tuning(method="lora", target_modules=("q_proj", "v_proj"), lora_r=16)
    adamw, eight = _states("adamw_torch", lora), _states("adamw_8bit", lora)
    assert adamw["optimizer_state"] == 2 * adamw["gradients"]  # two fp32 states, fp32 gradients
    assert eight["optimizer_state"] == adamw["gradients"] / 4 * 2  # two bytes a parameter


def _assessment(optim: str, gpus: int = 1, batch: int = 1):
    configuration = TrainingConfiguration(
        model_name="llama3.1-8b",
        fms_hf_tuning_version=FIELDS["fms_hf_tuning_version"].default,
        config=LLAMA_31_8B,
        precision=Precision(optim=optim),
        parallelism=Parallelism(gpus=gpus, gpu_model="NVIDIA-A100-SXM4-80GB"),
        batch=Batch(per_device_batch=batch, model_max_length=512),
    )
    return assess(configuration, hf_home="/nonexistent", enabled=True)


def test_full_fine_tuning_of_an_8b_model_orders_the_optimizers_by_their_state():
    """Issue 51's case: llama3.1-8b, one A100-80GB: AdamW over 8-bit AdamW over SGD, and the
    paged optimizers' rows distinct from SGD's, saying the run relies on paging."""
    peak = {o: _assessment(o).prediction.gib for o in ("adamw_torch", "adamw_8bit", "sgd")}
    assert peak["adamw_torch"] > peak["adamw_8bit"] > peak["sgd"]
    sgd, paged = _assessment("sgd"), _assessment("paged_adamw_32bit")
    assert paged.prediction.gib == pytest.approx(sgd.prediction.gib)  # outside torch's peak
    assert paged.prediction.paged == 2 * 4 * count_parameters(LLAMA_31_8B).total
    verdict, why = paged.verdict()
    assert verdict == "fits" and sgd.verdict() == ("fits", "peak in the optimizer_step phase")
    whole = (paged.predicted_need + paged.prediction.paged) / GIB
    assert why == (
        f"peak in the optimizer_step phase; plus {paged.prediction.paged / GIB:.2f} GiB of paged "
        f"optimizer state ({whole:.2f} GiB in all): relies on paging, "
        f"{paged.allocatable / GIB:.2f} GiB can be allocated, so the driver moves optimizer "
        "state to the host at every step"
    )
    assert paged.prediction.as_metadata()["paged_optimizer_state_gib"] == pytest.approx(
        59.83, abs=0.01
    )


def test_a_paged_state_the_device_holds_is_said_without_reliance():
    held = _assessment("paged_adamw_8bit", gpus=8, batch=1)
    verdict, why = held.verdict()
    assert verdict == "fits" and "GiB of paged optimizer state" in why
    assert "relies on paging" not in why


def test_an_optimizer_whose_state_cannot_be_stated_says_so_in_the_verdict():
    _, why = _assessment("galore_adamw").verdict()
    assert why.startswith(
        "peak in the optimizer_step phase; optimizer state of galore_adamw not counted: "
    )


INVENTORY = {
    "total": 1000,
    "embedding": 200,
    "lm_head": 0,
    "norms": 10,
    "layers": 4,
    "hidden": 8,
    "linears": [["q_proj", 8, 8, 4]],
    "trainable": 1000,
    "model_type": "acme",
}
STEP = TracedStep(  # torch's foreach AdamW over 1,000 bf16 parameters: 4,000 bytes of state
    phases={
        "forward": {"weights": 2000, "forward": 500},
        "backward": {"weights": 2000, "backward": 400, "gradients": 2000},
        "optimizer_step": {"weights": 2000, "gradients": 2000, "optimizer_temporaries": 6000},
    },
    rest={"weights": 2000, "optimizer_state": 4000},
    inventory=INVENTORY,
    versions={"torch": "2", "transformers": "4", "peft": "0"},
)


@pytest.mark.parametrize(
    ("optim", "state", "temporaries", "paged"),
    [
        ("adamw_torch", 4000, 2000, 0),
        ("adamw_8bit", 2000, 0, 0),  # two bytes a parameter, bitsandbytes' kernel
        ("rmsprop", 2000, 2000, 0),  # one bf16 state, one foreach temporary
        ("sgd", 0, 0, 0),
        ("paged_adamw_32bit", 0, 0, 8000),
    ],
)
def test_the_trace_path_keeps_the_configurations_optimizer_not_the_traced_one(
    optim, state, temporaries, paged
):
    configuration = dataclasses.replace(TrainingConfiguration(), precision=Precision(optim=optim))
    bound = memory_bound(T.counts_of(INVENTORY), configuration)
    prediction = T.predict(STEP, configuration, bound, ReleaseBehaviour())
    step = prediction.phases["optimizer_step"]
    assert prediction.phases["forward"]["optimizer_state"] == state
    assert (step["optimizer_state"], step["optimizer_temporaries"]) == (state, temporaries)
    assert prediction.paged == paged


def test_a_state_at_the_optimizers_own_dtype_is_taken_out_before_the_parameters_scale():
    """Paged or unstated: nothing at rest, whatever the adapters' dtype; an 8-bit state over two
    devices is halved like every sharded state, not scaled with the fp32 adapters."""
    lora = Tuning(method="lora", target_modules=("q_proj", "v_proj"), lora_r=16)
    assert _states("paged_adamw_32bit", lora)["optimizer_state"] == 0
    assert _states("galore_adamw", lora)["optimizer_state"] == 0
    counts = count_parameters(LLAMA_31_8B)
    sharded = TrainingConfiguration(
        tuning=lora, precision=Precision(optim="adamw_8bit"), parallelism=Parallelism(gpus=2)
    )
    bound = memory_bound(counts, sharded)
    states, _ = model_states(counts, sharded, bound, ReleaseBehaviour())
    trainable = lora.count(counts)
    assert states["optimizer_state"] == 2 * trainable / 2  # two bytes each, half on a device
    assert optimizer_state("adamw_8bit").temporary_share() == 0


def test_only_a_paged_prediction_reports_paged_state_in_its_metadata():
    assert "paged_optimizer_state_gib" not in _assessment("sgd").prediction.as_metadata()
    paged = _assessment("paged_adamw_8bit").prediction
    assert paged.as_metadata()["paged_optimizer_state_gib"] == round(paged.paged / GIB, 3)
