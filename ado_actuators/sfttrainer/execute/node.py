"""One measurement on the node this code runs on: plan, prepare, launch, classify."""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from pathlib import Path

import pydantic

from ado_actuators.sfttrainer.catalog.validity import ModelConfigUnavailable, read_model_config
from ado_actuators.sfttrainer.contract import RankReport
from ado_actuators.sfttrainer.execute import workspace
from ado_actuators.sfttrainer.execute.classify import launch_outcome
from ado_actuators.sfttrainer.execute.process import run_process
from ado_actuators.sfttrainer.outcomes import Failed, Outcome
from ado_actuators.sfttrainer.plan.launch import PlanError, PlanInputs, plan_launch


class NodeRequest(pydantic.BaseModel):
    """PlanInputs minus what only the node can choose (directory, port, interpreter)."""

    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)

    plan_inputs: dict  # PlanInputs fields except workdir, main_process_port, python
    output_root: Path
    label: str
    stall_timeout: float
    keep_aim_repo: bool = False


def weights_problem(location: str, hf_home: str) -> str | None:
    """Why the weights cannot be loaded on this node, if that is known before launching.

    A hub id that is not cached is fine while the hub is reachable: the trainer fetches it.
    """
    if location.startswith(("/", ".", "~")):
        path = Path(location).expanduser()
        if not (path / "config.json").is_file():
            return (
                f"the model weights are not at {path} on {os.uname().nodename} (no config.json); "
                f"fix the model_map entry or copy the weights there"
            )
        return None
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        try:
            read_model_config(location, hf_home)
        except ModelConfigUnavailable as error:
            return f"{location} is not cached and the hub is offline: {error}"
    return None


def measure_here(request: NodeRequest) -> Outcome:
    inputs = request.plan_inputs
    if problem := weights_problem(inputs["model_location"], inputs["hf_home"]):
        return Failed(problem)
    if not Path(inputs["dataset_path"]).is_file():
        return Failed(f"dataset file {inputs['dataset_path']} is not on {os.uname().nodename}")
    workdir = request.output_root / f"{request.label}-{uuid.uuid4().hex[:8]}"
    ephemeral_aim = request.plan_inputs.get("aim_repo") is None
    inputs = PlanInputs(
        **{
            **request.plan_inputs,
            "aim_repo": request.plan_inputs.get("aim_repo") or str(workdir / "aim"),
        },
        workdir=workdir,
        python=sys.executable,
        main_process_port=workspace.free_port(),
    )
    try:
        plan = plan_launch(inputs)
    except PlanError as error:
        return Failed(str(error))
    try:
        workspace.prepare(plan)
    except OSError as error:
        return Failed(f"cannot prepare the measurement directory {workdir}: {error}")
    result = run_process(
        plan.nodes[0].argv,
        env={**os.environ, **plan.env},
        cwd=workdir,
        log_path=workdir / "train.log",
        stall_timeout=request.stall_timeout,
        activity_paths=(plan.report_dir,),
    )
    reports = RankReport.read_all(plan.report_dir)
    outcome = launch_outcome(
        reports,
        result,
        world_size=plan.world_size,
        number_gpus=inputs.values.number_gpus,
        stop_after_seconds=inputs.values.stop_after_seconds,
    )
    outcome.metadata.update({"workdir": str(workdir), "log": str(result.log_path)})
    _cleanup(plan.training_data_path if plan.training_data_path != plan.dataset_path else None)
    if ephemeral_aim and not request.keep_aim_repo:
        shutil.rmtree(workdir / "aim", ignore_errors=True)
    shutil.rmtree(workdir / "output", ignore_errors=True)
    return outcome


def _cleanup(path: Path | None) -> None:
    if path is not None:
        path.unlink(missing_ok=True)
