"""LaunchPlan: everything needed to run one measurement, as data. No I/O, no Ray."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pydantic

from ado_actuators.sfttrainer.catalog.experiments import ExperimentDefinition, catalog_data
from ado_actuators.sfttrainer.contract import JOB_FLAG, TrainerJob
from ado_actuators.sfttrainer.plan.accelerate import accelerate_config
from ado_actuators.sfttrainer.plan.environments import skip_prepare_dataset_problem

TRAINER_MODULE = "ado_actuators.sfttrainer.trainer"
MIN_CPUS_PER_NODE = 2
CPUS_PER_GPU = 2


class PlanError(ValueError):
    """The entity cannot be launched as configured (a user-fixable reason)."""


class ResourceRequest(pydantic.BaseModel):
    """What one node's task asks Ray for (the spec: 2 cores per GPU, at least 2)."""

    cpus: int
    gpus: int
    custom: dict[str, float] = pydantic.Field(default_factory=dict)


class NodeLaunch(pydantic.BaseModel):
    machine_rank: int
    argv: list[str]
    accelerate_config: dict[str, Any] | None = None


class LaunchPlan(pydantic.BaseModel):
    workdir: Path
    nodes: list[NodeLaunch]
    env: dict[str, str]
    job: TrainerJob
    resources_per_node: ResourceRequest
    processes_per_node: int
    dataset_path: Path
    training_data_path: Path
    dataset_entries_needed: int | None = pydantic.Field(
        description="When training is bounded by max_steps: the entries it can consume. The "
        "executor trains on just those, so start-up does not grow with the dataset."
    )

    @property
    def job_path(self) -> Path:
        return self.workdir / "job.json"

    @property
    def accelerate_config_path(self) -> Path:
        return self.workdir / "accelerate_config.yaml"

    @property
    def report_dir(self) -> Path:
        return self.job.report_dir

    @property
    def world_size(self) -> int:
        return self.processes_per_node * len(self.nodes)


class PlanInputs(pydantic.BaseModel):
    """What the planner needs beyond the entity's values; all resolved by the caller."""

    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)

    values: Any  # EntityValues
    definition: ExperimentDefinition
    model_location: str
    dataset_path: Path
    text_field: str
    image_field: str | None = None
    conversation_field: str | None = None
    workdir: Path
    python: str
    hf_home: str
    main_process_port: int
    aim_repo: str | None
    run_labels: dict[str, str] = pydantic.Field(default_factory=dict)
    use_cpu: bool = False
    """Run multi-process measurements on CPUs over gloo (machines without GPUs, tests)."""
    weights_offline: bool = False
    """The weights are local or fully cached: the trainer need not (and will not) ask the hub."""


def _flag(value: Any) -> str:
    return str(value) if not isinstance(value, bool) else ("True" if value else "False")


def effective_max_steps(inputs: PlanInputs) -> int:
    return int(inputs.definition.fixed.get("max_steps", inputs.values.max_steps))


def sft_trainer_arguments(inputs: PlanInputs, training_data_path: Path) -> list[str]:
    """fms-hf-tuning's command line for this entity: the spec's command lines, as argv."""
    from ado_actuators.sfttrainer.catalog.entity import FIELDS

    values, definition = inputs.values, inputs.definition
    constants = catalog_data().sft_trainer_constants
    devices = max(1, values.number_gpus)
    args = [
        "--model_name_or_path", inputs.model_location,
        "--training_data_path", str(training_data_path),
        "--dataset_text_field", inputs.text_field,
        "--per_device_train_batch_size", str(values.batch_size // devices),
        "--max_seq_length", str(values.model_max_length),
        "--output_dir", str(inputs.workdir / "output"),
        "--peft_method", definition.peft_method,
        "--gradient_checkpointing_kwargs",
        json.dumps({"use_reentrant": values.gradient_checkpointing_use_reentrant}),
    ]  # fmt: skip
    for name, value in constants.items():
        args += [f"--{name}", value]
    for name in sorted({*definition.optional_fields, *definition.fixed}):
        if flag := FIELDS[name].fms_flag:
            args += [flag, _flag(definition.fixed.get(name, getattr(values, name)))]
    if definition.peft_method == "lora":
        args += ["--target_modules", *catalog_data().target_modules(values.model_name)]
    if values.fast_moe:
        args += ["--fast_moe", str(values.fast_moe)]
    fixed_arguments = dict(definition.sft_trainer_arguments)
    if values.fast_kernels is not None:
        fixed_arguments["fast_kernels"] = [v.lower() for v in values.fast_kernels]
    for name, words in fixed_arguments.items():
        args += [f"--{name}", *words]
    if inputs.image_field:
        args += ["--dataset_image_field", inputs.image_field]
    if inputs.conversation_field:
        args += ["--dataset_conversation_field", inputs.conversation_field]
    return args


def plan_resources(values: Any) -> ResourceRequest:
    gpus_per_node = values.number_gpus // max(1, values.number_nodes)
    custom = {values.gpu_model: float(gpus_per_node)} if gpus_per_node and values.gpu_model else {}
    return ResourceRequest(
        cpus=max(MIN_CPUS_PER_NODE, CPUS_PER_GPU * gpus_per_node), gpus=gpus_per_node, custom=custom
    )


def plan_launch(inputs: PlanInputs) -> LaunchPlan:
    values = inputs.values
    if values.dataset_kwargs_skip_prepare_dataset and (
        problem := skip_prepare_dataset_problem(values.fms_hf_tuning_version)
    ):
        raise PlanError(problem)
    if values.number_nodes > 1:
        raise PlanError(
            f"number_nodes {values.number_nodes}: multi-node measurements are not available "
            "in this release; use number_nodes: 1"
        )
    gpus_per_node = values.number_gpus // values.number_nodes
    processes = max(1, gpus_per_node)
    max_steps = effective_max_steps(inputs)
    needed = (
        max_steps * values.batch_size * values.gradient_accumulation_steps
        if max_steps > 0
        else None
    )
    training_data = (
        inputs.workdir / f"dataset-first-{needed}{inputs.dataset_path.suffix}"
        if needed is not None
        else inputs.dataset_path
    )
    job = TrainerJob(
        report_dir=inputs.workdir / "reports",
        aim_repo=inputs.aim_repo,
        run_labels=inputs.run_labels,
        stop_after_seconds=values.stop_after_seconds,
        auto_stop_method=values.auto_stop_method,
        # use_cpu stands CPU processes in for GPUs: there is no GPU to sample
        gpu_indices=[] if inputs.use_cpu else list(range(gpus_per_node)),
    )
    trainer = [
        "-m", TRAINER_MODULE, JOB_FLAG, str(inputs.workdir / "job.json"),
        *sft_trainer_arguments(inputs, training_data),
    ]  # fmt: skip
    if processes == 1:
        nodes = [NodeLaunch(machine_rank=0, argv=[inputs.python, *trainer])]
    else:
        config = accelerate_config(
            values,
            processes_per_node=processes,
            machine_rank=0,
            main_process_ip=None,
            main_process_port=inputs.main_process_port,
            use_cpu=inputs.use_cpu,
        )
        launcher = [
            inputs.python, "-m", "accelerate.commands.launch",
            "--config_file", str(inputs.workdir / "accelerate_config.yaml"),
            "--num_processes", str(processes),
        ]  # fmt: skip
        nodes = [NodeLaunch(machine_rank=0, argv=[*launcher, *trainer], accelerate_config=config)]
    env = {
        "HF_HOME": inputs.hf_home,
        # an inherited HF_HUB_CACHE would send the trainer to another cache than hf_home's
        "HF_HUB_CACHE": str(Path(inputs.hf_home) / "hub"),
        "TERMINATION_LOG_FILE": str(inputs.workdir / "reports" / "termination.log"),
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONUNBUFFERED": "1",
        "AIM_UI_TELEMETRY_ENABLED": "0",
    }
    if inputs.weights_offline:
        env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if values.number_gpus == 0:
        env["CUDA_VISIBLE_DEVICES"] = ""
    if inputs.use_cpu and processes > 1:
        # accelerate's multi-GPU launcher ignores the config file's use_cpu.
        env["ACCELERATE_USE_CPU"] = "true"
    if values.number_nodes > 1:
        env["NCCL_IB_DISABLE"] = "0" if values.enable_roce else "1"
    return LaunchPlan(
        workdir=inputs.workdir,
        nodes=nodes,
        env=env,
        job=job,
        resources_per_node=plan_resources(values),
        processes_per_node=processes,
        dataset_path=inputs.dataset_path,
        training_data_path=training_data,
        dataset_entries_needed=needed,
    )
