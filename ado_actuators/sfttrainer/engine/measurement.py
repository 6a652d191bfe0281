"""One entity under one experiment -> MeasurementOutcome: resolved and judged here, launched
by execute/ when nothing answers it without launching."""

from __future__ import annotations

import logging
import traceback
from pathlib import Path
from typing import Any, NamedTuple

import pydantic

from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.catalog.entity import EntityValues, domain_problems, entity_values
from ado_actuators.sfttrainer.catalog.experiments import ExperimentDefinition, catalog_data
from ado_actuators.sfttrainer.catalog.models import ModelMap, UnknownModelError, model_location
from ado_actuators.sfttrainer.catalog.validity import (
    ModelConfigUnavailable,
    configuration_problems,
    num_local_experts,
    read_model_config,
)
from ado_actuators.sfttrainer.contract.outcomes import (
    ANSWERED_BY,
    CONFIGURATION_RULE,
    TRAINING_COMPLETED,
    WORKDIR,
    Failed,
    Invalid,
    Measured,
    MeasurementOutcome,
    failed_before_launch,
)
from ado_actuators.sfttrainer.engine.settings import MeasurementSettings
from ado_actuators.sfttrainer.execute.cluster import measure_on_cluster
from ado_actuators.sfttrainer.execute.environment import EnvironmentRequest
from ado_actuators.sfttrainer.execute.node import NodeRequest
from ado_actuators.sfttrainer.ledger.neighbours import neighbours
from ado_actuators.sfttrainer.plan.launch.environments import vision_problem
from ado_actuators.sfttrainer.plan.launch.launch_plan import (
    MeasurementInputs,
    ResourceRequest,
    plan_resources,
)
from ado_actuators.sfttrainer.plan.memory.verdict import MemoryAssessment, assess
from ado_actuators.sfttrainer.plan.speed.prediction import SpeedPrediction, predict_speed

log = logging.getLogger(__name__)


class Resolved(NamedTuple):
    """An entity ready to be judged: its values, and where its model's weights are."""

    values: EntityValues
    location: str


def resolve(
    values_in: dict[str, Any],
    definition: ExperimentDefinition,
    model_map: ModelMap | None,
    hf_home: str,
) -> Resolved | MeasurementOutcome:
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
        location = model_location(values.model_name, definition.weights_format, model_map)
    except UnknownModelError as error:
        return Failed(str(error))
    if values.fast_moe:
        try:
            config = read_model_config(
                location,
                hf_home,
                model_name=values.model_name,
                weights_format=definition.weights_format,
            )
            experts = num_local_experts(config)
        except ModelConfigUnavailable as error:
            return Failed(f"fast_moe needs the model's num_local_experts: {error}")
        if problems := configuration_problems(values, experts):
            return _broken_rule("; ".join(problems))
    return Resolved(values, location)


def _broken_rule(reason: str) -> Invalid:
    return Invalid(reason=reason, metadata={ANSWERED_BY: CONFIGURATION_RULE})


def measure(
    values_in: dict[str, Any],
    experiment_id: str,
    settings: MeasurementSettings,
    *,
    label: str,
    use_cpu: bool = False,
) -> MeasurementOutcome:
    """One measurement: resolve the entity, judge its memory, answer it from the record of
    measured OOMs, or else launch it and record the outcome. Each step before the launch may
    settle it, skipped without launching. Never raises: an unexpected error is a Failed outcome
    with its traceback's tail."""
    try:
        definition = catalog_data().experiment(experiment_id)
        resolved = resolve(values_in, definition, settings.model_map, settings.hf_home)
        if not isinstance(resolved, Resolved):
            return resolved
        values, location = resolved
        # Before any Ray resource is requested, and from config.json alone: a certain OOM
        # costs no placement, environment or model load.
        memory = assess(
            values,
            definition,
            location,
            hf_home=settings.hf_home,
            enabled=settings.memory_bound_check,
        )
        if (verdict := _memory_verdict(memory, settings.skip_predicted_oom)) is not None:
            return verdict
        # A measured OOM of a configuration no larger answers this one, before any Ray
        # resource too; what the launch shows is told to the record afterwards.
        oom_record = neighbours(settings.oom_record_file(), values, definition, location, label)
        if oom_record is not None and (answer := oom_record.answer_from_measured_ooms()):
            return memory.attach_bound_and_prediction(answer)
        outcome = _launch(
            _node_request(resolved, definition, settings, label, use_cpu),
            placement_timeout=settings.placement_timeout_seconds,
            aim_dashboard_url=settings.aim_dashboard_url,
        )
        if oom_record is not None:
            oom_record.record_outcome(outcome)
        if definition.repeats == 1:
            outcome = _speed(resolved, definition, settings).attach_to(outcome)
        return memory.attach_bound_and_prediction(outcome)
    except Exception as error:
        log.exception("measurement of %s failed unexpectedly", label)
        tail = "".join(traceback.format_exception(error)[-3:])
        return Failed(f"internal error while measuring: {error!r}\n{tail}")


def _memory_verdict(memory: MemoryAssessment, skip_predicted_oom: bool) -> Invalid | None:
    """is_valid = 0, skipped without launching, where the device's memory settles it: a
    certain OOM always, a predicted one where skip_predicted_oom asks for it."""
    if memory.certain_oom:
        return memory.invalid()
    if skip_predicted_oom and memory.predicted_oom:
        return memory.predicted_invalid()
    return None


def _node_request(
    resolved: Resolved,
    definition: ExperimentDefinition,
    settings: MeasurementSettings,
    label: str,
    use_cpu: bool,
) -> NodeRequest:
    """What each node is asked to measure."""
    values = resolved.values
    return NodeRequest(
        plan_inputs=MeasurementInputs(
            **_dataset(values, settings.data_directory),
            values=values,
            definition=definition,
            model_location=resolved.location,
            hf_home=settings.hf_home,
            aim_repo=settings.aim_db,
            run_labels={"entity": label, "experiment": definition.identifier},
            use_cpu=use_cpu,
        ),
        output_root=Path(settings.output_dir).absolute() / definition.identifier,
        label=_safe_label(label),
        stall_timeout=settings.stall_timeout_seconds,
        environment=_environment_request(settings),
        allow_shared_gpus=settings.allow_shared_gpus,
    )


def _dataset(values: EntityValues, data_directory: str) -> dict[str, Any]:
    """The dataset file and the columns the trainer reads (the entity's, else the shape's).

    Whether the file exists is checked on the node that trains (execute/node.py)."""
    shape = datasets.get_shape(values.dataset_id)
    return {
        "dataset_path": Path(data_directory) / shape.filename,
        "text_field": values.dataset_text_field or shape.text_field,
        "image_field": values.dataset_image_field or shape.image_field,
        "conversation_field": shape.conversation_field,
    }


def _launch(
    request: NodeRequest, *, placement_timeout: float, aim_dashboard_url: str | None
) -> MeasurementOutcome:
    """The measurement launched on the cluster: once, or its repeats for the stability
    experiment's fractions."""
    definition = request.plan_inputs.definition
    resources = plan_resources(request.plan_inputs.values)
    if definition.repeats > 1:
        return _stability(_repeat(request, resources, definition.repeats, placement_timeout))
    outcome = measure_on_cluster(request, resources, placement_timeout=placement_timeout)
    if isinstance(outcome, Measured) and aim_dashboard_url:
        outcome.metadata["aim_dashboard_url"] = aim_dashboard_url
    return outcome


def _speed(
    resolved: Resolved, definition: ExperimentDefinition, settings: MeasurementSettings
) -> SpeedPrediction:
    """The predicted throughput a measured row carries beside the measured one."""
    values = resolved.values
    try:
        config = read_model_config(
            resolved.location,
            settings.hf_home,
            model_name=values.model_name,
            weights_format=definition.weights_format,
        )
    except ModelConfigUnavailable as error:
        return SpeedPrediction(skipped=str(error))
    try:
        return predict_speed(values, definition, config, settings.inter_node_gbps)
    except Exception as error:  # a prediction never costs the measurement its row
        log.exception("predicting the throughput of %s failed", values.model_name)
        return SpeedPrediction(skipped=f"the prediction failed: {error!r}")


def _environment_request(settings: MeasurementSettings) -> EnvironmentRequest:
    lists = settings.package_lists_directory
    return EnvironmentRequest(
        match_exact_dependencies=settings.match_exact_dependencies,
        directory=Path(settings.environments_directory).expanduser(),
        build_timeout_seconds=settings.environment_build_timeout_seconds,
        package_lists_directory=Path(lists).expanduser() if lists else None,
        find_links=tuple(settings.find_links),
    )


def _safe_label(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label)[:80]


def _repeat(
    request: NodeRequest, resources: ResourceRequest, repeats: int, placement_timeout: float
) -> list[MeasurementOutcome]:
    """The runs of a stability measurement, each labelled with its repeat (AIM, FAULT_ENV).

    A run that fails before it launches (missing dataset or weights, wrong environment) would
    fail every repeat alike and says nothing about stability: it ends the measurement.
    """
    runs: list[MeasurementOutcome] = []
    for repeat in range(repeats):
        inputs = request.plan_inputs
        labels = {**inputs.run_labels, "repeat": str(repeat)}
        labelled = request.model_copy(
            update={"plan_inputs": inputs.model_copy(update={"run_labels": labels})}
        )
        outcome = measure_on_cluster(labelled, resources, placement_timeout=placement_timeout)
        if failed_before_launch(outcome):
            return [outcome]
        runs.append(outcome)
    return runs


def _stability(runs: list[MeasurementOutcome]) -> MeasurementOutcome:
    """The stability experiment's fractions over its repeated runs.

    A run whose training completed counts as no error even when its benchmark figures could not
    be computed (e.g. GPU sampling failed): stability is about whether training runs.
    """
    if len(runs) == 1 and failed_before_launch(runs[0]):
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


def _summary(repeat: int, outcome: MeasurementOutcome) -> dict[str, Any]:
    where = {WORKDIR: outcome.metadata[WORKDIR]} if WORKDIR in outcome.metadata else {}
    if isinstance(outcome, Measured) or outcome.metadata.get(TRAINING_COMPLETED):
        reason = None if isinstance(outcome, Measured) else outcome.reason[:500]
        return {"repeat": repeat, "outcome": "completed", "reason": reason, **where}
    if isinstance(outcome, Invalid) and outcome.gpu_oom:
        return {"repeat": repeat, "outcome": "gpu_oom", "reason": outcome.reason[:500], **where}
    return {"repeat": repeat, "outcome": "error", "reason": outcome.reason[:500], **where}
