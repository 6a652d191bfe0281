"""What a space would cost before anything is launched: each entity of a space document as the
engine would answer it up to the launch (configuration rules, the certain bound, the
predicted peak), and the GPU time of the configurations it would launch. No Ray, no ado, no
GPU: only each model's config.json.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from ado_actuators.sfttrainer.catalog.entity import FIELDS
from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.contract.outcomes import Invalid
from ado_actuators.sfttrainer.contract.trainer_io import ModelParameters
from ado_actuators.sfttrainer.engine.measurement import resolve
from ado_actuators.sfttrainer.engine.settings import MeasurementSettings
from ado_actuators.sfttrainer.metrics.flops import flops_per_token
from ado_actuators.sfttrainer.metrics.gpu_memory import GIB
from ado_actuators.sfttrainer.metrics.gpu_peaks import peak_tflops
from ado_actuators.sfttrainer.plan.memory_check import MemoryAssessment, assess, fewest_gpus
from ado_actuators.sfttrainer.trainer.steady import STEADY_CI95_1PCT

PREVIEW_MFU = 0.35
"""The model-FLOPs utilisation a step-bounded measurement's time is estimated at: typical of
bf16 fine-tuning with flash attention on A100/H100 (fms-acceleration's tables, 30-45 %)."""
SPEC_AUTO_STOP_SECONDS = 180
"""WARMUP_60S_STABLE_120S_OR_10_STEPS measures at least 60 s of warm-up and 120 s after it."""


class SpaceError(ValueError):
    """The space document cannot be read: the message names the part and the fix."""


@dataclasses.dataclass(frozen=True)
class PreviewRow:
    experiment: str
    entity: dict[str, Any]
    verdict: str  # invalid | certain OOM | predicted OOM | fits | unknown | failed
    why: str = ""
    bound_gib: float | None = None
    predicted_gib: float | None = None
    device_gib: float | None = None
    fewest_gpus: int | None = None
    gpu_hours: float | None = None

    @property
    def launched(self) -> bool:
        return self.verdict in ("fits", "unknown")


def _values(domain: dict[str, Any], name: str) -> list[Any]:
    if "values" in domain and domain["values"] is not None:
        return list(domain["values"])
    if "domainRange" in domain:
        low, high = domain["domainRange"]
        return list(range(int(low), int(high), int(domain.get("interval") or 1)))
    raise SpaceError(f"entitySpace {name}: a propertyDomain needs values or a domainRange")


def entities(document: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(experiment id, entity values with the experiment's parameterization) per point."""
    if not isinstance(document, dict) or "entitySpace" not in document:
        raise SpaceError(
            "the space file has no entitySpace: give the file `ado create space -f` takes"
        )
    dimensions = []
    for item in document["entitySpace"]:
        name = item.get("identifier") if isinstance(item, dict) else None
        if name not in FIELDS:
            raise SpaceError(
                f"entitySpace names an unknown field {name!r}: see `ado describe "
                f"experiment` for the fields"
            )
        dimensions.append((name, _values(item.get("propertyDomain") or {}, name)))
    experiments = document.get("experiments") or []
    if not experiments:
        raise SpaceError("the space file lists no experiments")
    found = []
    catalog = catalog_data()
    for experiment in experiments:
        identifier = experiment.get("experimentIdentifier", "")
        try:
            catalog.experiment(identifier)
        except KeyError:
            raise SpaceError(f"unknown experiment {identifier!r}") from None
        fixed = {
            p["property"]["identifier"]: p["value"]
            for p in experiment.get("parameterization") or []
        }
        for point in itertools.product(*(values for _, values in dimensions)):
            found.append(
                (identifier, {**dict(zip([n for n, _ in dimensions], point, strict=True)), **fixed})
            )
    return found


def model_parameters(memory: MemoryAssessment, peft_method: str) -> ModelParameters | None:
    counts, dims = memory.counts, memory.dimensions
    if counts is None or dims is None:
        return None
    matmul = counts.total - (counts.embedding if counts.lm_head else 0)
    trainable = {"none": matmul, "pt": 0}.get(peft_method, memory.trainable or 0)
    return ModelParameters(
        total=counts.total,
        trainable=trainable,
        matmul=matmul,
        trainable_matmul=trainable,
        layers=dims.layers,
        attention_width=dims.q_width,
        mixture_of_experts=dims.experts_per_token > 1,
    )


def gpu_hours(values: Any, memory: MemoryAssessment, peft_method: str) -> tuple[float | None, str]:
    """The GPU time a launched configuration trains for, and how it was estimated."""
    gpus = max(1, values.number_gpus)
    steady = (values.auto_stop_method or "").upper() == STEADY_CI95_1PCT
    if steady:  # whichever limit comes first; the target usually comes before either
        cap = min(
            values.auto_stop_max_seconds,
            values.stop_after_seconds if values.stop_after_seconds > 0 else float("inf"),
        )
        return gpus * cap / 3600, f"{STEADY_CI95_1PCT}: at most {cap:g} s"
    if values.stop_after_seconds > 0:  # -1: no time limit
        return gpus * values.stop_after_seconds / 3600, "time-bounded: exact"
    if values.auto_stop_method:
        return gpus * SPEC_AUTO_STOP_SECONDS / 3600, "auto-stop: at least 60 s + 120 s"
    if values.max_steps and values.max_steps > 0:
        params = model_parameters(memory, peft_method)
        per_token = flops_per_token(params, values.model_max_length) if params else None
        peak = peak_tflops(values.gpu_model)
        if per_token and peak:
            tokens = (
                values.max_steps
                * values.batch_size
                * values.gradient_accumulation_steps
                * values.model_max_length
            )
            seconds = per_token * tokens / (gpus * peak * 1e12 * PREVIEW_MFU)
            return gpus * seconds / 3600, f"step-bounded: FLOPs at {PREVIEW_MFU:.0%} MFU"
        return None, "step-bounded: no FLOP figure for this model or GPU"
    return None, "bounded by epochs: the dataset's length decides"


def preview_entity(
    values_in: dict[str, Any], experiment_id: str, settings: MeasurementSettings
) -> PreviewRow:
    definition = catalog_data().experiment(experiment_id)
    resolved = resolve(values_in, definition, settings.model_map, settings.hf_home)
    row = PreviewRow(experiment=experiment_id, entity=values_in, verdict="unknown")
    if not isinstance(resolved, tuple):
        verdict = "invalid" if isinstance(resolved, Invalid) else "failed"
        return dataclasses.replace(row, verdict=verdict, why=resolved.reason)
    values, location = resolved
    memory = assess(values, definition, location, hf_home=settings.hf_home, enabled=True)
    row = dataclasses.replace(
        row,
        bound_gib=memory.bound.gib if memory.bound else None,
        predicted_gib=memory.prediction.gib if memory.prediction else None,
        device_gib=memory.device_bytes / GIB if memory.device_bytes else None,
    )
    if memory.certain_oom:
        verdict, why = "certain OOM", "the lower bound exceeds the device"
    elif memory.predicted_oom:
        verdict, why = (
            "predicted OOM",
            f"the prediction ({memory.prediction.phase}) exceeds the device",
        )
    elif memory.skipped:
        verdict, why = "unknown", memory.skipped
    elif memory.prediction is None:
        verdict, why = "unknown", memory.prediction_skipped or "no prediction"
    else:
        verdict, why = "fits", f"peak in the {memory.prediction.phase} phase"
    fewest = None
    if verdict in ("certain OOM", "predicted OOM"):
        fewest = fewest_gpus(values, definition, location, hf_home=settings.hf_home)
    hours, how = gpu_hours(values, memory, definition.peft_method)
    if verdict in ("fits", "unknown") and hours is not None:
        why = f"{why}; {how}"
    return dataclasses.replace(
        row,
        verdict=verdict,
        why=why,
        fewest_gpus=fewest,
        gpu_hours=hours if verdict in ("fits", "unknown") else None,
    )
