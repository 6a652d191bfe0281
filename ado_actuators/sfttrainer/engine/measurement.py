"""One entity under one experiment -> MeasurementOutcome: resolved and judged here, launched
by execute/ when nothing answers it without launching."""

from __future__ import annotations

import logging
import traceback
from pathlib import Path
from typing import Any, NamedTuple

import pydantic

from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.catalog.entity import (
    FIELDS,
    EntityValues,
    domain_problems,
    entity_values,
)
from ado_actuators.sfttrainer.catalog.experiments import ExperimentDefinition, catalog_data
from ado_actuators.sfttrainer.catalog.model_shapes import (
    FoundConfig,
    ModelConfigUnavailable,
    find_model_config,
)
from ado_actuators.sfttrainer.catalog.models import ModelMap, UnknownModelError, model_location
from ado_actuators.sfttrainer.catalog.validity import configuration_problems
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
from ado_actuators.sfttrainer.contract.trainer_io import RaceAgainst
from ado_actuators.sfttrainer.engine.race import Race
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
from ado_actuators.sfttrainer.plan.model.lora_targets import lora_target_problem
from ado_actuators.sfttrainer.plan.model.releases import config_build_problem
from ado_actuators.sfttrainer.plan.model.training import TrainingConfiguration
from ado_actuators.sfttrainer.plan.speed.prediction import SpeedPrediction, predict_speed

log = logging.getLogger(__name__)


class Resolved(NamedTuple):
    """An entity ready to be judged: its values (the experiment's fixed values applied), where
    its model's weights are, and its one training configuration (plan/model/training.py), with
    the model's config.json read once."""

    values: EntityValues
    location: str
    training: TrainingConfiguration
    found: FoundConfig | None
    """Where config.json came from; None where it was found nowhere (`config_error` says why)."""
    config_error: ModelConfigUnavailable | None = None


def not_understood(error: pydantic.ValidationError) -> str:
    """One line per field a configuration's values fail on, each naming the field and the fix
    (pydantic's own dump is a wall of text with the whole input in it)."""
    said = []
    for found in error.errors():
        field = ".".join(str(part) for part in found["loc"]) or "the values"
        if found["type"] == "missing":
            said.append(
                f"{field} is required: give it in the space (entitySpace, or the experiment's "
                "parameterization)"
            )
        else:
            said.append(f"{field} = {found.get('input')!r}: {found['msg']}")
    return "entity values not understood: " + "; ".join(said)


def resolve(
    values_in: dict[str, Any],
    definition: ExperimentDefinition,
    model_map: ModelMap | None,
    hf_home: str,
    *,
    hub: bool = False,
) -> Resolved | Invalid | Failed:
    """The entity's values, its model's location and config.json, and its training
    configuration; or the outcome that needs no launch (a configuration rule, a value outside
    the domain, an unknown model). The preview (space/preview.py) answers with the same, and
    asks the hub (`hub`) for a config.json found nowhere else."""
    try:
        values = entity_values(values_in, overrides=definition.default_overrides())
    except pydantic.ValidationError as error:
        return Failed(not_understood(error))
    # Rules 1-6 need no model: an invalid configuration is answered before anything else.
    if not values.fast_moe and (problems := configuration_problems(values)):
        return _broken_rule("; ".join(problems))
    if problems := domain_problems(values):
        return Failed("entity value(s) outside the experiment's domain: " + "; ".join(problems))
    # their domains hold no None, so domain_problems refused it (EntityValues types them as ado
    # hands them over)
    assert values.dataset_id is not None and values.fms_hf_tuning_version is not None
    vision = bool(values.dataset_image_field or datasets.get_shape(values.dataset_id).image_field)
    if problem := vision_problem(values.fms_hf_tuning_version, vision):
        return _broken_rule(problem)
    try:
        location = model_location(values.model_name, definition.weights_format, model_map)
    except UnknownModelError as error:
        return Failed(str(error))
    found, config_error = _model_config(values, definition, location, hf_home, hub)
    # a model type the version's transformers cannot build would fail at its load, after a
    # placement and an environment build (plan/packages/transformers-loss.yaml's builds)
    if (
        found is not None
        and isinstance(found.config, dict)
        and (problem := config_build_problem(values.fms_hf_tuning_version, found.config))
    ):
        return _broken_rule(problem)
    if values.fast_moe and found is None:
        return Failed(f"fast_moe needs the model's num_local_experts: {config_error}")
    fixed = values.model_copy(update={k: v for k, v in definition.fixed.items() if k in FIELDS})
    training = TrainingConfiguration.of(
        fixed,
        definition,
        found.config if found else None,
        str(config_error) if config_error else None,
    )
    # rule 7 reads the experts as the model's shape does (plan/model/shape.py), like every count
    experts = training.shape.experts_given if training.shape else None
    if values.fast_moe and (problems := configuration_problems(values, experts)):
        return _broken_rule("; ".join(problems))
    if problem := lora_target_problem(training):
        return _broken_rule(problem)
    return Resolved(fixed, location, training, found, config_error)


def _model_config(
    values: EntityValues, definition: ExperimentDefinition, location: str, hf_home: str, hub: bool
) -> tuple[FoundConfig | None, ModelConfigUnavailable | None]:
    """The model's config.json, read once for every judgement of the measurement, or why not."""
    try:
        found = find_model_config(
            location,
            hf_home,
            model_name=values.model_name,
            weights_format=definition.weights_format,
            hub=hub,
        )
    except ModelConfigUnavailable as error:
        return None, error
    return found, None


def _broken_rule(reason: str) -> Invalid:
    return Invalid(reason=reason, metadata={ANSWERED_BY: CONFIGURATION_RULE})


def measure(
    values_in: dict[str, Any],
    experiment_id: str,
    settings: MeasurementSettings,
    *,
    label: str,
    use_cpu: bool = False,
    race_key: str | None = None,
) -> MeasurementOutcome:
    """One measurement: resolve the entity, judge its memory, answer it from the record of
    measured OOMs, or else launch it (racing its group's measured fastest: engine/race.py;
    `race_key` is the key a guided walk deals its card under) and record the outcome. Each
    step before the launch may settle it, skipped without launching. Never raises: an
    unexpected error is a Failed outcome with its traceback's tail."""
    try:
        definition = catalog_data().experiment(experiment_id)
        resolved = resolve(values_in, definition, settings.model_map, settings.hf_home)
        if not isinstance(resolved, Resolved):
            return resolved
        values, location = resolved.values, resolved.location
        # Before any Ray resource is requested, and from config.json alone: a certain OOM
        # costs no placement, environment or model load.
        memory = assess(
            resolved.training,
            hf_home=settings.hf_home,
            enabled=settings.memory_bound_check,
            stated=settings.gpu_memory_gib,
        )
        if (verdict := memory.answer(settings.skip_predicted_oom)) is not None:
            return verdict
        # A measured OOM of a configuration no larger answers this one, before any Ray
        # resource too; what the launch shows is told to the record afterwards.
        oom_record = neighbours(settings.oom_record_file(), values, definition, location, label)
        if oom_record is not None and (answer := oom_record.answer_from_measured_ooms()):
            return memory.attach_bound_and_prediction(answer)
        race = Race(settings, experiment_id, values_in, race_key)
        against = race.against() if definition.repeats == 1 else None
        outcome = _launch(
            _node_request(resolved, definition, settings, label, use_cpu, against),
            placement_timeout=settings.placement_timeout_seconds,
            aim_dashboard_url=settings.aim_dashboard_url,
        )
        if oom_record is not None:
            oom_record.record_outcome(outcome)
        if definition.repeats == 1:
            race.record(outcome)
            speed = _speed(resolved.training, settings, memory)
            outcome = speed.attach_to(outcome)
        return memory.attach_bound_and_prediction(outcome)
    except Exception as error:
        log.exception("measurement of %s failed unexpectedly", label)
        tail = "".join(traceback.format_exception(error)[-3:])
        return Failed(f"internal error while measuring: {error!r}\n{tail}")


def _node_request(
    resolved: Resolved,
    definition: ExperimentDefinition,
    settings: MeasurementSettings,
    label: str,
    use_cpu: bool,
    race: RaceAgainst | None = None,
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
            race=race,
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
    assert values.dataset_id is not None  # resolve: domain_problems refused None
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
    training: TrainingConfiguration, settings: MeasurementSettings, memory: MemoryAssessment
) -> SpeedPrediction:
    """The predicted throughput a measured row carries beside the measured one (with what a
    paged optimizer moves every step where the memory verdict finds no room for its state, and
    how near the device's memory the verdict puts it)."""
    try:
        return predict_speed(
            training,
            settings.inter_node_gbps,
            settings.intra_node_gbps,
            memory.paged_out_bytes,
            memory.need_share,
        )
    except Exception as error:  # a prediction never costs the measurement its row
        log.exception("predicting the throughput of %s failed", training.model_name)
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
