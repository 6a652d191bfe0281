"""`sfttrainer_plot` on a space whose requests failed: each configuration with its reason, read
from the requests ado-core's own SQL sample store keeps (a real SQLite file), not "no
measurements" (issue 53, part 5)."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from cli_checks import one_line_error
from typer.testing import CliRunner

from ado_actuators.sfttrainer.cli.plot import app
from ado_actuators.sfttrainer.report import failures

UNKNOWN = (
    "model_name 'granite-3.1-2bb' is not in the model map; did you mean 'granite-3.1-2b'? "
    "`sfttrainer_preview --list-models` lists them"
)


@pytest.fixture
def experiment():
    from ado_actuators.sfttrainer.actuator.experiments import build_experiments

    return next(e for e in build_experiments() if e.identifier == "finetune_full_benchmark-v1.0.0")


def entity(batch: int, model: str = "granite-3.1-2bb"):
    from ado.schema.entity import Entity
    from ado.schema.property import ConstitutivePropertyDescriptor
    from ado.schema.property_value import ConstitutivePropertyValue

    fields = {"model_name": model, "number_gpus": 2, "model_max_length": 512, "batch_size": batch}
    return Entity(
        constitutive_property_values=tuple(
            ConstitutivePropertyValue(
                value=v, property=ConstitutivePropertyDescriptor(identifier=k)
            )
            for k, v in fields.items()
        )
    )


def store_with(path: Path, experiment, requests):
    """ado-core's SQLSampleStore in a SQLite file, holding `requests`: (operation, index,
    entity, outcome) measured as the actuator completes a request (actuator/results.py)."""
    from ado.core.samplestore.sql import SQLSampleStore
    from ado.schema.request import MeasurementRequest
    from ado.utilities.location import SQLiteStoreConfiguration
    from ado.utilities.support import compute_measurement_status

    from ado_actuators.sfttrainer.actuator.results import to_result

    store = SQLSampleStore(
        identifier="failed", storageLocation=SQLiteStoreConfiguration(path=str(path)), parameters={}
    )
    for operation, index, measured, outcome in requests:
        results = [to_result(outcome, measured.identifier, experiment)]
        store.addMeasurement(
            MeasurementRequest(
                operation_id=operation,
                requestIndex=index,
                experimentReference=experiment.reference,
                entities=[measured],
                measurements=results,
                status=compute_measurement_status(results),
            )
        )
    return store


def test_each_failed_configuration_is_read_with_its_latest_reason(tmp_path, experiment):
    """Two operations on a space: batch 4 failed in both (the later reason is shown), batch 8
    failed, then was measured (left out: a row of the table holds it)."""
    from ado_actuators.sfttrainer.contract.outcomes import Failed, Measured

    four, eight = entity(4), entity(8)
    store = store_with(
        tmp_path / "store.db",
        experiment,
        [
            ("op-1", 0, four, Failed("first reason")),
            ("op-1", 1, eight, Failed(UNKNOWN)),
            ("op-2", 0, four, Failed(UNKNOWN + "\nsecond line")),
            ("op-2", 1, eight, Measured({"is_valid": 1, "dataset_tokens_per_second": 1.0})),
        ],
    )
    space = types.SimpleNamespace(operations={"op-1", "op-2"}, sample_store=store)
    measured = {(eight.identifier, str(experiment.reference))}
    (failure,) = failures.of_space(space, measured)
    assert (failure.operation, failure.entity, failure.reason) == (
        "op-2",
        four.identifier,
        UNKNOWN + "\nsecond line",
    )
    assert failures.failure_lines([failure]) == [
        "Failed, nothing stored: 1 configuration (ado keeps the reason in the operation's trace)",
        "  full: model granite-3.1-2bb, 2 GPUs, batch 4, sequence length 512:",
        f"    {UNKNOWN}",
        "    second line",
        "The trace in full: `ado show trace operation op-2 -o yaml`",
    ]
    assert (
        failures.of_space(types.SimpleNamespace(operations=set(), sample_store=store), set()) == ()
    )


SPACE = """
experiments:
  - experimentIdentifier: finetune_full_benchmark-v1.0.0
    actuatorIdentifier: SFTTrainer
entitySpace:
  - identifier: model_name
    propertyDomain: {values: ["granite-3.1-2bb", "granite-3.1-2b"]}
  - identifier: number_gpus
    propertyDomain: {values: [2]}
  - identifier: model_max_length
    propertyDomain: {values: [512]}
  - identifier: batch_size
    propertyDomain: {values: [4, 8]}
"""


def new_sample_store(context) -> str:
    """A SQL sample store in `context`'s database, as `ado create space --new-sample-store`
    makes one: its id."""
    from ado.core.samplestore.config import (
        SampleStoreConfiguration,
        SampleStoreModuleConf,
        SampleStoreSpecification,
    )
    from ado.core.samplestore.utils import create_sample_store_resource
    from ado.metastore.sqlstore import SQLStore

    module = SampleStoreModuleConf(
        moduleClass="SQLSampleStore", moduleName="ado.core.samplestore.sql"
    )
    store, _ = create_sample_store_resource(
        SampleStoreConfiguration(
            specification=SampleStoreSpecification(
                module=module, storageLocation=context.metadataStore
            )
        ),
        SQLStore(project_context=context),
    )
    return store.identifier


def stored_space(tmp_path: Path, experiment, outcomes) -> tuple[str, Path, str]:
    """A space in a ProjectContext of its own (a SQLite file), created as `ado create space
    --new-sample-store` does, with an operation whose requests ended in `outcomes` (entity,
    outcome): returns the space's id, the context file, the operation's id."""
    import yaml
    from ado.core.discoveryspace.config import DiscoverySpaceConfiguration
    from ado.core.discoveryspace.space import DiscoverySpace
    from ado.core.operation.config import DiscoveryOperationResourceConfiguration
    from ado.core.operation.resource import OperationResource
    from ado.metastore.project import ProjectContext
    from ado.schema.request import MeasurementRequest
    from ado.utilities.location import SQLiteStoreConfiguration
    from ado.utilities.support import compute_measurement_status

    from ado_actuators.sfttrainer.actuator.results import to_result

    context = ProjectContext(
        project="failed", metadataStore=SQLiteStoreConfiguration(path=str(tmp_path / "failed.db"))
    )
    configuration = DiscoverySpaceConfiguration.model_validate(yaml.safe_load(SPACE))
    configuration.sampleStoreIdentifier = new_sample_store(context)
    space = DiscoverySpace.from_configuration(
        configuration, project_context=context, identifier=None
    )
    space.saveSpace()
    operation = OperationResource(
        operationType="search",
        operatorIdentifier="random_walk",
        config=DiscoveryOperationResourceConfiguration.model_validate(
            {
                "spaces": [space.uri],
                "operation": {"module": {"operatorName": "random_walk", "operationType": "search"}},
            }
        ),
    )
    space.addOperation(operation)
    for index, (measured, outcome) in enumerate(outcomes):
        results = [to_result(outcome, measured.identifier, experiment)]
        space.sample_store.addMeasurement(
            MeasurementRequest(
                operation_id=operation.identifier,
                requestIndex=index,
                experimentReference=experiment.reference,
                entities=[measured],
                measurements=results,
                status=compute_measurement_status(results),
            )
        )
    context_file = tmp_path / "context.yaml"
    context_file.write_text(yaml.safe_dump(context.model_dump(mode="json")))
    return space.uri, context_file, operation.identifier


def test_a_space_whose_every_request_failed_lists_each_and_exits_naming_the_trace(
    tmp_path, experiment
):
    from ado_actuators.sfttrainer.contract.outcomes import Failed

    space, context, operation = stored_space(
        tmp_path, experiment, [(entity(batch), Failed(UNKNOWN)) for batch in (4, 8)]
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [space, "--context", str(context), "-o", str(out)])
    one_line_error(
        result,
        f"every request of space {space} failed (2 configuration(s) listed above",
        f"`ado show trace operation {operation} -o yaml`",
    )
    assert "holds no measurements" not in result.output
    assert result.stdout.count(UNKNOWN) == 2
    assert "  full: model granite-3.1-2bb, 2 GPUs, batch 8, sequence length 512:" in result.stdout
    assert not out.exists()


def test_a_space_with_some_failed_requests_draws_the_rest_then_lists_the_failures(
    tmp_path, experiment
):
    from ado_actuators.sfttrainer.contract.outcomes import Failed, Measured

    valid = Measured({"is_valid": 1, "dataset_tokens_per_second": 100.0})
    space, context, operation = stored_space(
        tmp_path,
        experiment,
        [(entity(4), Failed(UNKNOWN)), (entity(4, "granite-3.1-2b"), valid)],
    )
    result = CliRunner().invoke(app, [space, "--context", str(context), "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == str(tmp_path / f"{space}.png")
    assert "Fastest valid: 2 GPUs, sequence length 512, batch 4" in result.stdout
    start = lines.index(
        "Failed, nothing stored: 1 configuration (ado keeps the reason in the operation's trace)"
    )
    assert lines[start + 1 :] == [
        "  full: model granite-3.1-2bb, 2 GPUs, batch 4, sequence length 512:",
        f"    {UNKNOWN}",
        f"The trace in full: `ado show trace operation {operation} -o yaml`",
    ]
