"""The memory verdicts of one measurement before launch: the certain lower bound and the
predicted peak (plan/memory/peak.py) against the device's memory.

Runs in the engine after the entity is resolved and before any Ray resource is requested. It
reads only the model's config.json, so a model directory holding nothing else (no tokenizer,
no weights) is answered here; the node's checks for weights and tokenizer files come later,
and only for measurements that are launched. The bound answers a certain OOM (on by default);
the prediction is reported on every row and answers only where `skip_predicted_oom` asks it
to, marked as a prediction.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ado_actuators.sfttrainer.contract.outcomes import (
    ANSWERED_BY,
    CERTAIN_OOM,
    PREDICTED_OOM,
    Invalid,
    Measured,
    MeasurementOutcome,
)
from ado_actuators.sfttrainer.contract.units import GIB
from ado_actuators.sfttrainer.metrics.gpu_memory import (
    Stated,
    allocatable_bytes,
    allocatable_source,
    device_memory_bytes,
    largest_device,
)
from ado_actuators.sfttrainer.plan.memory import hybrid
from ado_actuators.sfttrainer.plan.memory import traced as traced_parts
from ado_actuators.sfttrainer.plan.memory.bound import (
    UNCOUNTED_STATE,
    WHOLE_GRADIENTS,
    MemoryBound,
    memory_bound,
    trainable_parameters,
    weight_bits,
)
from ado_actuators.sfttrainer.plan.memory.logits import copies_logits, loss_code_for
from ado_actuators.sfttrainer.plan.memory.peak import (
    ALLOCATOR_HEADROOM,
    Dimensions,
    PeakPrediction,
    ReleaseBehaviour,
    predict_peak,
)
from ado_actuators.sfttrainer.plan.memory.traced import TraceUnavailable
from ado_actuators.sfttrainer.plan.model.architecture import (
    ParameterCounts,
    UnsupportedArchitecture,
    count_parameters,
)
from ado_actuators.sfttrainer.plan.model.releases import checkpointing_for
from ado_actuators.sfttrainer.plan.model.shape import ModelShape
from ado_actuators.sfttrainer.plan.model.training import TrainingConfiguration

PROPERTY = "gpu_memory_lower_bound_gib"
METADATA = "gpu_memory_bound"
PREDICTED_PROPERTY = "gpu_memory_predicted_gib"
PREDICTED_METADATA = "gpu_memory_prediction"
MAX_GPUS_TRIED = 64


@dataclasses.dataclass(frozen=True)
class MemoryAssessment:
    bound: MemoryBound | None = None
    device_bytes: int | None = None
    gpu_model: str | None = None
    skipped: str | None = None
    """Why no verdict was given (the measurement then runs as it would without the check)."""
    prediction: PeakPrediction | None = None
    prediction_skipped: str | None = None
    counts: ParameterCounts | None = None
    dimensions: Dimensions | None = None
    trainable: int | None = None
    allocatable: int | None = None
    """What a training process can allocate on the device (nvidia-smi's total less the CUDA
    context): the predicted peak is compared with it, the bound with `device_bytes`."""
    largest: tuple[str, int] | None = None
    """A gpu_model of no known memory whose bound exceeds the largest device of the table (its
    name and bytes): a certain OOM whatever the device is."""
    stated: Stated = None

    @property
    def predicted_need(self) -> float | None:
        """Bytes the prediction needs of what the device can allocate: the allocated peak and
        the allocator's headroom over it."""
        if self.prediction is None:
            return None
        return self.prediction.total * (1 + ALLOCATOR_HEADROOM)

    @property
    def need_share(self) -> float | None:
        """The predicted need over what the device can allocate (None where either is
        unknown): how near the device's memory the run is predicted to come."""
        need = self.predicted_need
        if need is None or not self.allocatable:
            return None
        return need / self.allocatable

    @property
    def paged_out_bytes(self) -> float:
        """Bytes per device of a paged optimizer's state that cross the host link each way every
        step (plan/speed/step_time.py prices them): all of it once the device cannot hold it
        beside the predicted need (torch's allocator keeps that reserved through the update),
        since the update visits the states in the same order every step and the driver evicts
        the least recently used pages: each is gone by the time it is needed again. 0 where it
        fits, or where nothing is paged or known."""
        need, paged = self.predicted_need, self.prediction.paged if self.prediction else 0.0
        if not paged or need is None or self.allocatable is None:
            return 0.0
        return paged if need + paged > self.allocatable else 0.0

    @property
    def predicted_oom(self) -> bool:
        need = self.predicted_need
        return need is not None and self.allocatable is not None and need > self.allocatable

    @property
    def certain_oom(self) -> bool:
        limit = self.device_bytes if self.largest is None else self.largest[1]
        return (
            self.skipped is None
            and self.bound is not None
            and limit is not None
            and self.bound.total > limit
        )

    def metadata(self) -> dict[str, Any]:
        data: dict[str, Any] = self.bound.as_metadata() if self.bound else {}
        if self.device_bytes is not None:
            data["device_memory_gib"] = round(self.device_bytes / GIB, 3)
        data["checked"] = self.skipped is None
        if self.skipped:
            data["skipped"] = self.skipped
        return data

    def beyond_every_device(self) -> str:
        """Why a gpu_model of no known memory is a certain OOM: what no device has."""
        assert self.largest is not None
        name, largest = self.largest
        return (
            f"that is more than any GPU has (the largest, {name}'s {largest / GIB:g} GiB), and "
            f"{self.gpu_model!r} has no memory figure"
        )

    def invalid(self) -> Invalid:
        assert self.bound is not None
        if self.largest is not None:
            has = self.beyond_every_device()
        else:
            assert self.device_bytes is not None
            has = f"{self.gpu_model} has {self.device_bytes / GIB:g} GiB"
        accumulation = (
            "set gradient_accumulation_steps to 1 (its micro-batches hold FSDP's gradients whole), "
            if self.bound.gradients_whole
            else ""
        )
        reason = (
            f"certain GPU out of memory: each device needs at least {self.bound.gib:.2f} GiB "
            f"({self.bound.describe()}; activations not counted), but {has}. Not launched: "
            f"{accumulation}use more GPUs, LoRA or a smaller model, or set the actuator "
            f"parameter memory_bound_check: false to measure anyway"
        )
        return self._out_of_memory(reason, CERTAIN_OOM)

    def _out_of_memory(self, reason: str, answered_by: str) -> Invalid:
        """An OOM answered without launching, with what the bound and the prediction said."""
        return Invalid(
            reason=reason,
            gpu_oom=True,
            metadata={
                METADATA: self.metadata(),
                PREDICTED_METADATA: self.prediction_metadata(),
                ANSWERED_BY: answered_by,
            },
            properties=self.properties(),
        )

    def prediction_metadata(self) -> dict[str, Any]:
        need = self.predicted_need
        if self.prediction is None or need is None:
            return {"predicted": False, "skipped": self.prediction_skipped}
        data = {
            "predicted": True,
            "measured": False,
            **self.prediction.as_metadata(),
            "allocator_headroom": ALLOCATOR_HEADROOM,
            "needs_on_device_gib": round(need / GIB, 3),
        }
        if self.allocatable is not None:
            data["allocatable_gib"] = round(self.allocatable / GIB, 3)
            data["allocatable_source"] = allocatable_source(self.gpu_model, self.stated)
        return data

    def predicted_invalid(self) -> Invalid:
        """skip_predicted_oom's answer: is_valid = 0 without launching, marked as predicted."""
        need_bytes = self.predicted_need
        assert self.prediction is not None and need_bytes is not None
        assert self.allocatable is not None
        need = need_bytes / GIB
        reason = (
            f"predicted GPU out of memory (a prediction, not a measurement): each device is "
            f"predicted to peak at {self.prediction.gib:.2f} GiB allocated in the "
            f"{self.prediction.phase} phase, {need:.2f} GiB with the allocator's headroom, but "
            f"{self.gpu_model} can allocate {self.allocatable / GIB:.2f} GiB (its total less the "
            f"CUDA context). Not launched: set the actuator parameter skip_predicted_oom: false "
            f"to measure it anyway"
        )
        return self._out_of_memory(reason, PREDICTED_OOM)

    def answer(self, skip_predicted_oom: bool) -> Invalid | None:
        """is_valid = 0, skipped without launching, where the device's memory settles it: a
        certain OOM always, a predicted one where skip_predicted_oom asks for it."""
        if self.certain_oom:
            return self.invalid()
        if skip_predicted_oom and self.predicted_oom:
            return self.predicted_invalid()
        return None

    def verdict(self) -> tuple[str, str]:
        """The preview's verdict and why: certain OOM, predicted OOM, unknown or fits."""
        if self.certain_oom and self.largest is not None:
            assert self.bound is not None
            needs = f"needs at least {self.bound.gib:.2f} GiB per device: "
            return "certain OOM", needs + self.beyond_every_device()
        if self.certain_oom:
            assert self.bound is not None
            whole = f" ({WHOLE_GRADIENTS})" if self.bound.gradients_whole else ""
            return "certain OOM", "the lower bound exceeds the device" + whole
        if self.predicted_oom and self.prediction is not None:
            why = f"the prediction ({self.prediction.phase}) exceeds the device"
            return "predicted OOM", why + self._optimizer()
        if self.skipped:
            return "unknown", self.skipped
        if self.prediction is None:
            return "unknown", self.prediction_skipped or "no prediction"
        return "fits", f"peak in the {self.prediction.phase} phase" + self._optimizer()

    def _optimizer(self) -> str:
        """What the optimizer's state adds beyond the allocated peak: a paged optimizer's
        state, and whether the device holds it or the run relies on the driver moving it to
        the host; or that the optimizer's state could not be counted, and why."""
        need, paged = self.predicted_need, self.prediction.paged if self.prediction else 0.0
        if not paged or need is None:
            notes = self.bound.notes if self.bound else ()
            unstated = [n for n in notes if n.startswith(UNCOUNTED_STATE)]
            return "".join(f"; {note}" for note in unstated)
        whole = (need + paged) / GIB
        text = f"; plus {paged / GIB:.2f} GiB of paged optimizer state ({whole:.2f} GiB in all)"
        if self.allocatable is not None and need + paged > self.allocatable:
            text += (
                f": relies on paging, {self.allocatable / GIB:.2f} GiB can be allocated, so the "
                "driver moves optimizer state to the host at every step"
            )
        return text

    def properties(self) -> dict[str, float]:
        found = {}
        if self.bound is not None:
            found[PROPERTY] = round(self.bound.gib, 3)
        if self.prediction is not None:
            found[PREDICTED_PROPERTY] = round(self.prediction.gib, 3)
        return found

    def attach_bound_and_prediction(self, outcome: MeasurementOutcome) -> MeasurementOutcome:
        """The bound and the prediction on a measured (or measured-invalid) row."""
        if isinstance(outcome, (Measured, Invalid)):
            outcome.metadata[METADATA] = self.metadata()
            outcome.metadata[PREDICTED_METADATA] = self.prediction_metadata()
            outcome.properties.update(self.properties())
        return outcome


def behaviour_of(configuration: TrainingConfiguration, model_type: str) -> ReleaseBehaviour:
    """What the releases fms_hf_tuning_version pins do with `configuration` on a model of
    `model_type`, beside what the configuration itself says (plan/memory/peak.py reads both)."""
    version = configuration.fms_hf_tuning_version
    style = checkpointing_for(version, model_type)
    return ReleaseBehaviour(
        checkpointing_honoured=style != "none",
        checkpointed_by_model=style == "model",
        loss=loss_code_for(version, model_type),
        fused_loss="in_place" if configuration.kernels.fast_kernels.fast_loss else None,
        fsdp_upcast=configuration.fsdp_upcast,
        logits_copy=copies_logits(version),
    )


def traces_directory(hf_home: str) -> Path:
    """Where traced configurations are kept (plan/memory/traced.py)."""
    return Path(hf_home) / traced_parts.TRACE_DIRECTORY


def assess(
    configuration: TrainingConfiguration, *, hf_home: str, enabled: bool, stated: Stated = None
) -> MemoryAssessment:
    """The bound and the predicted peak of `configuration`, and whether they fit; traced
    architectures are kept under hf_home."""
    if configuration.parallelism.gpus < 1:
        why = "number_gpus 0 trains on CPUs: no GPU memory to bound"
        return MemoryAssessment(skipped=why, prediction_skipped=why)
    if configuration.config is None:
        why = f"no bound from the model's config.json: {configuration.config_problem}"
        return MemoryAssessment(skipped=why, prediction_skipped=why)
    return judge(configuration, enabled=enabled, traces=traces_directory(hf_home), stated=stated)


def judge(
    configuration: TrainingConfiguration,
    *,
    enabled: bool,
    traces: Path | None = None,
    stated: Stated = None,
) -> MemoryAssessment:
    """assess() on a configuration whose config.json was found. An architecture
    plan/model/architecture.py counts is predicted by its formula (plan/memory/peak.py); any
    other, from a trace of its own code (plan/memory/traced.py), kept under `traces`."""
    config = configuration.config or {}
    shape = configuration.shape or ModelShape.of(config)
    try:
        weight_bits(configuration)  # an unreadable quantization answers here, before a trace
        if shape.family is not None:
            found = _by_formula(configuration, shape)
        elif hybrid.is_hybrid(config):
            found = _by_hybrid(configuration)
        else:
            found = _by_trace(configuration, shape, traces)
    except (UnsupportedArchitecture, KeyError, TypeError, TraceUnavailable) as error:
        why = f"no bound from the model's config.json: {error}"
        return MemoryAssessment(skipped=why, prediction_skipped=why)
    gpu_model = configuration.parallelism.gpu_model
    device = device_memory_bytes(gpu_model, stated)
    found = dataclasses.replace(
        found,
        device_bytes=device,
        allocatable=allocatable_bytes(gpu_model, stated),
        gpu_model=gpu_model,
        stated=stated,
    )
    if not enabled:
        return dataclasses.replace(found, skipped="turned off (memory_bound_check: false)")
    if device is None:
        largest = largest_device()
        if found.bound is not None and found.bound.total > largest[1]:
            return dataclasses.replace(found, largest=largest)
        why = (
            f"gpu_model {gpu_model!r} has no memory figure in metrics/gpu_memory.yaml: state it "
            f"with the actuator parameter gpu_memory_gib ({{{gpu_model!r}: GiB}})"
        )
        return dataclasses.replace(found, skipped=why)
    return found


def _by_formula(configuration: TrainingConfiguration, shape: ModelShape) -> MemoryAssessment:
    counts = count_parameters(shape)
    dims = Dimensions.of(shape)
    bound = memory_bound(counts, configuration)
    behaviour = behaviour_of(configuration, dims.model_type)
    adapted = configuration.tuning.adapted_modules
    prediction = predict_peak(counts, dims, configuration, bound, behaviour, adapted)
    return MemoryAssessment(
        bound=bound,
        prediction=prediction,
        counts=counts,
        dimensions=dims,
        trainable=trainable_parameters(counts, configuration),
    )


def _by_hybrid(configuration: TrainingConfiguration) -> MemoryAssessment:
    """A Granite 4.0 hybrid, by formula (plan/memory/hybrid.py): its attention layers as the
    family the twin config.json names, its Mamba layers' mixers counted apart."""
    twin = ModelShape.of(hybrid.twin_config(configuration.config or {}))
    found = hybrid.predict_hybrid(configuration, behaviour_of(configuration, twin.model_type))
    return MemoryAssessment(
        bound=found.bound,
        prediction=found.prediction,
        counts=found.counts,
        dimensions=found.dims,
        trainable=trainable_parameters(found.counts, configuration),
    )


def _by_trace(
    configuration: TrainingConfiguration,
    shape: ModelShape,
    traces: Path | None,
) -> MemoryAssessment:
    """An architecture the formula does not know: its parts from a trace of its own code (a
    quantized checkpoint traced at the model's dtype, its block weights then as the bound
    counts them)."""
    behaviour = behaviour_of(configuration, shape.model_type)
    found = traced_parts.traced(traced_parts.request(configuration), traces)
    counts = traced_parts.counts_of(found.inventory)
    bound = memory_bound(counts, configuration)
    plain = memory_bound(counts, configuration, quantized=False)
    quantized = plain.parts["weights"] - bound.parts["weights"]
    prediction = traced_parts.predict(found, configuration, bound, behaviour, quantized)
    try:
        dims: Dimensions | None = Dimensions.of(shape)
    except (KeyError, TypeError):
        dims = None
    return MemoryAssessment(
        bound=bound,
        prediction=prediction,
        counts=counts,
        dimensions=dims,
        trainable=trainable_parameters(counts, configuration),
    )


def fewest_gpus(
    configuration: TrainingConfiguration, *, hf_home: str, stated: Stated = None
) -> int | None:
    """The fewest GPUs (on one node, the same per-device batch) the prediction says fit, up to
    MAX_GPUS_TRIED; None when none does or nothing can be predicted."""
    if configuration.config is None:
        return None
    for gpus in range(max(1, configuration.parallelism.gpus) + 1, MAX_GPUS_TRIED + 1):
        on_one_node = dataclasses.replace(configuration.parallelism, gpus=gpus, nodes=1)
        trial = dataclasses.replace(configuration, parallelism=on_one_node)
        found = judge(trial, enabled=True, traces=traces_directory(hf_home), stated=stated)
        if found.prediction is None or found.skipped:
            return None
        if not found.certain_oom and not found.predicted_oom:
            return gpus
    return None
