"""The request that crosses to the node (a Ray task) is typed data: validated where it is
made, and the same after the crossing."""

import pickle

import pydantic
import pytest
from ray import cloudpickle

from ado_actuators.sfttrainer.catalog.entity import EntityValues, entity_values
from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.execute.environment import EnvironmentRequest
from ado_actuators.sfttrainer.execute.node import NodeRequest
from ado_actuators.sfttrainer.plan.launch.launch_plan import MeasurementInputs, PlanInputs


def request(tmp_path, **inputs) -> NodeRequest:
    values = entity_values(
        {"model_name": "m", "model_max_length": 8, "batch_size": 2, "number_gpus": 0}
    )
    fields = {
        "values": values,
        "definition": catalog_data().experiment("finetune_lora_benchmark-v1.0.0"),
        "model_location": "/models/m",
        "dataset_path": tmp_path / "d.jsonl",
        "text_field": "output",
        "hf_home": str(tmp_path),
        "aim_repo": None,
        "run_labels": {"entity": "e1"},
    }
    return NodeRequest(
        plan_inputs=MeasurementInputs(**{**fields, **inputs}),
        output_root=tmp_path,
        label="e1",
        stall_timeout=5,
        environment=EnvironmentRequest(
            match_exact_dependencies=True, directory=tmp_path, build_timeout_seconds=1
        ),
    )


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle", "ray"])
def test_the_request_is_the_same_after_crossing_to_the_node(tmp_path, dumps):
    sent = request(tmp_path)
    received = pickle.loads(dumps(sent))
    assert received == sent
    assert type(received.plan_inputs.values) is EntityValues
    assert received.plan_inputs.definition == sent.plan_inputs.definition


def test_the_inputs_refuse_what_is_not_an_entitys_values(tmp_path):
    with pytest.raises(pydantic.ValidationError, match="values"):
        request(tmp_path, values={"model_name": "m"})
    with pytest.raises(pydantic.ValidationError, match="model_location"):
        request(tmp_path, model_location=None)


def test_the_node_adds_only_what_it_chooses(tmp_path):
    sent = request(tmp_path).plan_inputs
    chosen = {"workdir": tmp_path / "w", "python": "/p/python", "main_process_port": 29500}
    planned = PlanInputs(**dict(sent), **chosen)
    assert {name: getattr(planned, name) for name in MeasurementInputs.model_fields} == dict(sent)
    assert set(PlanInputs.model_fields) - set(MeasurementInputs.model_fields) >= set(chosen)
