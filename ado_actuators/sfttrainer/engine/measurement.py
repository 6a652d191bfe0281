"""One entity under one experiment -> Outcome. Resolves, validates, then hands over to execute/."""

from __future__ import annotations

import logging
import traceback
from pathlib import Path
from typing import Any

import pydantic

from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.catalog.entity import domain_problems, entity_values
from ado_actuators.sfttrainer.catalog.experiments import ExperimentDefinition, catalog_data
from ado_actuators.sfttrainer.catalog.models import UnknownModelError, model_location
from ado_actuators.sfttrainer.catalog.validity import (
    ModelConfigUnavailable,
    configuration_problems,
    num_local_experts,
    read_model_config,
)
from ado_actuators.sfttrainer.contract.outcomes import (
    ANSWERED_BY,
    CONFIGURATION_RULE,
    Failed,
    Invalid,
    Measured,
    Outcome,
)
from ado_actuators.sfttrainer.engine.settings import MeasurementSettings
from ado_actuators.sfttrainer.execute.classify import TRAINING_COMPLETED
from ado_actuators.sfttrainer.execute.cluster import measure_on_cluster
from ado_actuators.sfttrainer.execute.environment import EnvironmentRequest
from ado_actuators.sfttrainer.execute.node import NodeRequest
from ado_actuators.sfttrainer.ledger.neighbours import neighbours
from ado_actuators.sfttrainer.plan.environments import vision_problem
from ado_actuators.sfttrainer.plan.launch import plan_resources
from ado_actuators.sfttrainer.plan.memory_check import assess
from ado_actuators.sfttrainer.plan.speed_check import SpeedPrediction, predict_speed

log = logging.getLogger(__name__)


def resolve(
    values_in: dict[str, Any], definition: ExperimentDefinition, params: MeasurementSettings
) -> tuple[Any, str] | Outcome:
    """The entity's values and its model's location, or the outcome that needs no launch
    (a configuration rule, a value outside the domain, an unknown model). The preview
    (engine/preview.py) answers with the same."""
    try:
        values = entity_values(values_in, overrides=definition.default_overrides())
    except pydantic.ValidationError as error:
        fields = ", ".join(str(e["loc"][0]) for e in error.errors())
        return Failed(f"entity values not understood ({fields}): {error}")
    # Rules 1-6 need no model: an invalid configuration is answered before anything else.
    if not values.fast_moe and (problems := configuration_problems(values)):
        return _broken_rule("; ".join(problems))
    if problems := domain_problems(values):
        return Failed("entity value(s) outside the experiment's domain: " + "; ".join(problems))
    vision = bool(values.dataset_image_field or datasets.get_shape(values.dataset_id).image_field)
    if problem := vision_problem(values.fms_hf_tuning_version, vision):
        return _broken_rule(problem)
    try:
        location = model_location(values.model_name, definition.weights_format, params.model_map)
    except UnknownModelError as error:
        return Failed(str(error))
    if values.fast_moe:
        try:
            config = read_model_config(
                location,
                params.hf_home,
                model_name=values.model_name,
                weights_format=definition.weights_format,
            )
            experts = num_local_experts(config)
        except ModelConfigUnavailable as error:
            return Failed(f"fast_moe needs the model's num_local_experts: {error}")
        if problems := configuration_problems(values, experts):
            return _broken_rule("; ".join(problems))
    return values, location


def _broken_rule(reason: str) -> Invalid:
    return Invalid(reason=reason, metadata={ANSWERED_BY: CONFIGURATION_RULE})


def _dataset(values: Any, params: MeasurementSettings) -> dict[str, Any]:
    """The dataset file and the columns the trainer reads (the entity's, else the shape's).

    Whether the file exists is checked on the node that trains (execute/node.py)."""
    shape = datasets.get_shape(values.dataset_id)
    return {
        "dataset_path": Path(params.data_directory) / shape.filename,
        "text_field": values.dataset_text_field or shape.text_field,
        "image_field": values.dataset_image_field or shape.image_field,
        "conversation_field": shape.conversation_field,
    }


def measure(
    values_in: dict[str, Any],
    experiment_id: str,
    params: MeasurementSettings,
    *,
    label: str,
    use_cpu: bool = False,
) -> Outcome:
    """Never raises: an unexpected error is a Failed outcome with its traceback's tail."""
    try:
        definition = catalog_data().experiment(experiment_id)
        resolved = resolve(values_in, definition, params)
        if not isinstance(resolved, tuple):
            return resolved
        values, location = resolved
        # Before any Ray resource is requested, and from config.json alone: a certain OOM
        # costs no placement, environment or model load.
        memory = assess(
            values, definition, location, hf_home=params.hf_home, enabled=params.memory_bound_check
        )
        if memory.certain_oom:
            return memory.invalid()
        if params.skip_predicted_oom and memory.predicted_oom:
            return memory.predicted_invalid()
        # A measured OOM of a configuration no larger answers this one, before any Ray
        # resource too; what the launch shows is told to the record afterwards.
        known = neighbours(params.oom_record_file(), values, definition, location, label)
        if known is not None and (answer := known.answer()) is not None:
            return memory.annotate(answer)
        dataset = _dataset(values, params)
        request = NodeRequest(
            plan_inputs={
                **dataset,
                "values": values,
                "definition": definition,
                "model_location": location,
                "hf_home": params.hf_home,
                "aim_repo": params.aim_db,
                "run_labels": {"entity": label, "experiment": definition.identifier},
                "use_cpu": use_cpu,
            },
            output_root=Path(params.output_dir).absolute() / definition.identifier,
            label=_safe_label(label),
            stall_timeout=params.stall_timeout_seconds,
            environment=_environment_request(params),
            allow_shared_gpus=params.allow_shared_gpus,
        )
        resources = plan_resources(values)
        placement_timeout = params.placement_timeout_seconds
        if definition.repeats > 1:
            runs = _repeat(request, resources, definition.repeats, placement_timeout)
            return memory.annotate(_stability(runs))
        outcome = measure_on_cluster(request, resources, placement_timeout=placement_timeout)
        if isinstance(outcome, Measured) and params.aim_dashboard_url:
            outcome.metadata["aim_dashboard_url"] = params.aim_dashboard_url
        if known is not None:
            known.learn(outcome)
        return _speed(values, definition, location, params).annotate(memory.annotate(outcome))
    except Exception as error:
        log.exception("measurement of %s failed unexpectedly", label)
        tail = "".join(traceback.format_exception(error)[-3:])
        return Failed(f"internal error while measuring: {error!r}\n{tail}")


def _speed(
    values: Any, definition: ExperimentDefinition, location: str, params: MeasurementSettings
) -> SpeedPrediction:
    """The predicted throughput a measured row carries beside the measured one."""
    try:
        config = read_model_config(
            location,
            params.hf_home,
            model_name=values.model_name,
            weights_format=definition.weights_format,
        )
    except ModelConfigUnavailable as error:
        return SpeedPrediction(skipped=str(error))
    try:
        return predict_speed(values, definition, config)
    except Exception as error:  # a prediction never costs the measurement its row
        log.exception("predicting the throughput of %s failed", values.model_name)
        return SpeedPrediction(skipped=f"the prediction failed: {error!r}")


def _environment_request(params: MeasurementSettings) -> EnvironmentRequest:
    lists = params.package_lists_directory
    return EnvironmentRequest(
        match_exact_dependencies=params.match_exact_dependencies,
        directory=Path(params.environments_directory).expanduser(),
        build_timeout_seconds=params.environment_build_timeout_seconds,
        package_lists_directory=Path(lists).expanduser() if lists else None,
        find_links=tuple(params.find_links),
    )


def _safe_label(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label)[:80]


def _repeat(
    request: NodeRequest, resources, repeats: int, placement_timeout: float
) -> list[Outcome]:
    """The runs of a stability measurement, each labelled with its repeat (AIM, FAULT_ENV).

    A run that fails before it launches (missing dataset or weights, wrong environment) would
    fail every repeat alike and says nothing about stability: it ends the measurement.
    """
    runs: list[Outcome] = []
    for repeat in range(repeats):
        inputs = request.plan_inputs
        labelled = request.model_copy(
            update={
                "plan_inputs": {
                    **inputs,
                    "run_labels": {**inputs["run_labels"], "repeat": str(repeat)},
                }
            }
        )
        outcome = measure_on_cluster(labelled, resources, placement_timeout=placement_timeout)
        if isinstance(outcome, Failed) and "workdir" not in outcome.metadata:
            return [outcome]
        runs.append(outcome)
    return runs


def _stability(runs: list[Outcome]) -> Outcome:
    """The stability experiment's fractions over its repeated runs.

    A run whose training completed counts as no error even when its benchmark figures could not
    be computed (e.g. GPU sampling failed): stability is about whether training runs.
    """
    if len(runs) == 1 and isinstance(runs[0], Failed) and "workdir" not in runs[0].metadata:
        return runs[0]
    summaries = [_summary(i, r) for i, r in enumerate(runs)]
    count = len(runs)
    oom = sum(s["outcome"] == "gpu_oom" for s in summaries)
    ok = sum(s["outcome"] == "completed" for s in summaries)
    return Measured(
        properties={
            "f_gpu_oom": oom / count,
            "f_other_error": (count - oom - ok) / count,
            "f_no_error": ok / count,
            "is_valid": 1,
        },
        metadata={"runs": summaries},
    )


def _summary(repeat: int, outcome: Outcome) -> dict[str, Any]:
    where = {"workdir": outcome.metadata["workdir"]} if "workdir" in outcome.metadata else {}
    if isinstance(outcome, Measured) or outcome.metadata.get(TRAINING_COMPLETED):
        reason = None if isinstance(outcome, Measured) else outcome.reason[:500]
        return {"repeat": repeat, "outcome": "completed", "reason": reason, **where}
    if isinstance(outcome, Invalid) and outcome.gpu_oom:
        return {"repeat": repeat, "outcome": "gpu_oom", "reason": outcome.reason[:500], **where}
    return {"repeat": repeat, "outcome": "error", "reason": outcome.reason[:500], **where}
