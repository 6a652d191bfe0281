"""LaunchPlan: everything needed to run one measurement, as data. No I/O, no Ray."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pydantic

from ado_actuators.sfttrainer.catalog.entity import FIELDS, EntityValues
from ado_actuators.sfttrainer.catalog.experiments import ExperimentDefinition, catalog_data
from ado_actuators.sfttrainer.contract.trainer_io import JOB_FLAG, RaceAgainst, TrainerJob
from ado_actuators.sfttrainer.contract.workspace import Workspace
from ado_actuators.sfttrainer.plan.launch.accelerate import accelerate_config
from ado_actuators.sfttrainer.plan.launch.environments import skip_prepare_dataset_problem
from ado_actuators.sfttrainer.plan.model.geometry import (
    DATA_PARALLEL,
    per_device_batch,
    processes_per_node,
    world_size,
)
from ado_actuators.sfttrainer.plan.model.training import fast_kernel_words

TRAINER_MODULE = "ado_actuators.sfttrainer.trainer"
MIN_CPUS_PER_NODE = 2
CPUS_PER_GPU = 2
FULL_WORKER = "full-worker"
"""Ray custom resource of a worker that is a whole machine (the spec's RayCluster setup)."""
ROCE = "RoCE"
"""Ray custom resource of a worker whose NICs do RDMA over Converged Ethernet."""


class PlanError(ValueError):
    """The entity cannot be launched as configured (a user-fixable reason)."""


class ResourceRequest(pydantic.BaseModel):
    """What one node's task asks Ray for (the spec: 2 cores per GPU, at least 2)."""

    cpus: int
    gpus: int
    custom: dict[str, float] = pydantic.Field(default_factory=dict)

    def bundle(self) -> dict[str, float]:
        """This request as a placement-group bundle."""
        gpus = {"GPU": float(self.gpus)} if self.gpus else {}
        return {"CPU": float(self.cpus), **gpus, **self.custom}


class NodeLaunch(pydantic.BaseModel):
    """What one node runs: its accelerate machine_rank, the command, the accelerate config."""

    machine_rank: int
    argv: list[str]
    accelerate_config: dict[str, Any] | None = None


class LaunchPlan(pydantic.BaseModel):
    """One node's part of a measurement (multi-node: each node plans its own, by machine_rank)."""

    workdir: Path
    node: NodeLaunch
    number_nodes: int = 1
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
    def workspace(self) -> Workspace:
        return Workspace(self.workdir)

    @property
    def world_size(self) -> int:
        return self.processes_per_node * self.number_nodes


class MeasurementInputs(pydantic.BaseModel):
    """What the engine resolves for one measurement's launch, the same on every node: it
    crosses to the node (a Ray task) in execute/node.NodeRequest."""

    values: EntityValues
    definition: ExperimentDefinition
    model_location: str
    dataset_path: Path
    text_field: str
    image_field: str | None = None
    conversation_field: str | None = None
    hf_home: str
    aim_repo: str | None
    run_labels: dict[str, str] = pydantic.Field(default_factory=dict)
    use_cpu: bool = False
    """Run multi-process measurements on CPUs over gloo (machines without GPUs, tests)."""
    race: RaceAgainst | None = None
    """The answer group's measured fastest this run races (stopping/racing.py); None: none."""


class PlanInputs(MeasurementInputs):
    """What the planner needs: the measurement's inputs and what only the node can choose
    (its directory, interpreter, port and devices)."""

    workdir: Path
    python: str
    main_process_port: int
    main_process_ip: str | None = None
    """Rank 0's node address; multi-node plans need it (the executor asks Ray for it)."""
    machine_rank: int = 0
    visible_devices: str | None = None
    """The CUDA devices this node's part may use, as CUDA_VISIBLE_DEVICES lists them (Ray's
    assignment, or the launching process's own list: indices, GPU UUIDs or MIG ids); None:
    every device of the machine, numbered from 0. The ranks are pinned to the first of them."""
    weights_offline: bool = False
    """The weights are local or fully cached: the trainer need not (and will not) ask the hub."""


def _flag(value: Any) -> str:
    return str(value) if not isinstance(value, bool) else ("True" if value else "False")


def effective_max_steps(inputs: PlanInputs) -> int:
    steps = inputs.definition.fixed.get("max_steps", inputs.values.max_steps)
    assert isinstance(steps, int | float), steps  # catalog/experiments.yaml fixes a number
    return int(steps)


def sft_trainer_arguments(inputs: PlanInputs, training_data_path: Path) -> list[str]:
    """fms-hf-tuning's command line for this entity: the spec's command lines, as argv."""
    values, definition = inputs.values, inputs.definition
    constants = catalog_data().sft_trainer_constants
    args = [
        "--model_name_or_path",
        inputs.model_location,
        "--training_data_path",
        str(training_data_path),
        "--dataset_text_field",
        inputs.text_field,
        "--per_device_train_batch_size",
        str(per_device_batch(values)),
        "--max_seq_length",
        str(values.model_max_length),
        "--output_dir",
        str(Workspace(inputs.workdir).output),
        "--peft_method",
        definition.peft_method,
        "--gradient_checkpointing_kwargs",
        json.dumps({"use_reentrant": values.gradient_checkpointing_use_reentrant}),
    ]
    for name, value in constants.items():
        args += [f"--{name}", value]
    for name in sorted({*definition.optional_fields, *definition.fixed}):
        if flag := FIELDS[name].fms_flag:
            args += [flag, _flag(definition.fixed.get(name, getattr(values, name)))]
    if definition.peft_method == "lora":
        assert values.model_name is not None  # resolve found its weights (models.model_location)
        args += ["--target_modules", *catalog_data().target_modules(values.model_name)]
    if values.fast_moe:
        args += ["--fast_moe", str(values.fast_moe)]
    fixed_arguments = dict(definition.sft_trainer_arguments)
    if (kernels := fast_kernel_words(values, definition.sft_trainer_arguments)) is not None:
        fixed_arguments["fast_kernels"] = kernels
    for name, words in fixed_arguments.items():
        args += [f"--{name}", *words]
    if inputs.image_field:
        args += ["--dataset_image_field", inputs.image_field]
    if inputs.conversation_field:
        args += ["--dataset_conversation_field", inputs.conversation_field]
    return args


def plan_resources(values: EntityValues) -> ResourceRequest:
    nodes = max(1, values.number_nodes)
    gpus_per_node = values.number_gpus // nodes
    custom = {values.gpu_model: float(gpus_per_node)} if gpus_per_node and values.gpu_model else {}
    if nodes > 1:
        # The spec's RayCluster: a GPU worker that is a whole machine has one `full-worker`,
        # so a multi-node measurement's GPU ranks land on distinct machines; RoCE-capable
        # workers have one `RoCE` each.
        if gpus_per_node:
            custom[FULL_WORKER] = 1.0
        if values.enable_roce:
            custom[ROCE] = 1.0
    return ResourceRequest(
        cpus=max(MIN_CPUS_PER_NODE, CPUS_PER_GPU * gpus_per_node), gpus=gpus_per_node, custom=custom
    )


def pinned_devices(visible: str | None, count: int) -> str:
    """CUDA_VISIBLE_DEVICES for a node's ranks: the first `count` of the devices it may use.

    Always set: a process that sees more GPUs than planned uses them (Hugging Face wraps a
    one-GPU run in DataParallel over every visible GPU), while only the planned ones are
    sampled. Entries pass through as listed (CUDA takes indices, UUIDs, UUID prefixes, MIG ids).
    """
    if count == 0:
        return ""
    if visible is None:
        return ",".join(str(i) for i in range(count))
    listed = [d.strip() for d in visible.split(",") if d.strip()]
    if len(listed) < count:
        raise PlanError(
            f"number_gpus asks for {count} GPU(s) on this node but CUDA_VISIBLE_DEVICES="
            f"{visible!r} leaves it {len(listed)}: widen CUDA_VISIBLE_DEVICES (or the GPUs "
            "Ray gives the task), or measure with fewer GPUs"
        )
    return ",".join(listed[:count])


def _check_launchable(inputs: PlanInputs) -> None:
    values = inputs.values
    assert values.fms_hf_tuning_version is not None  # catalog.domain_problems refused None
    if values.dataset_kwargs_skip_prepare_dataset and (
        problem := skip_prepare_dataset_problem(values.fms_hf_tuning_version)
    ):
        raise PlanError(problem)
    if values.number_nodes > 1 and values.distributed_backend == DATA_PARALLEL:
        raise PlanError(
            f"distributed_backend None (Data Parallel) trains in one process on one node; "
            f"with number_nodes {values.number_nodes} use distributed_backend DDP or FSDP"
        )
    if values.number_gpus == 0 and values.batch_size % values.number_nodes:
        raise PlanError(
            f"batch_size {values.batch_size} is not divisible by number_nodes "
            f"{values.number_nodes}: with number_gpus 0 each node trains one CPU rank and "
            "batch_size is split evenly over them"
        )
    if values.number_nodes > 1 and not inputs.main_process_ip:
        raise PlanError("a multi-node plan needs the address of rank 0's node")
    if not 0 <= inputs.machine_rank < values.number_nodes:
        raise PlanError(f"machine_rank {inputs.machine_rank} outside 0..{values.number_nodes - 1}")


def plan_launch(inputs: PlanInputs) -> LaunchPlan:
    """The launch of node `inputs.machine_rank` (the only node unless number_nodes > 1)."""
    _check_launchable(inputs)
    values = inputs.values
    workspace = Workspace(inputs.workdir)
    needed = _entries_needed(inputs)
    training_data = (
        workspace.training_data(needed, inputs.dataset_path.suffix)
        if needed is not None
        else inputs.dataset_path
    )
    return LaunchPlan(
        workdir=inputs.workdir,
        node=_node_launch(inputs, workspace, training_data),
        number_nodes=values.number_nodes,
        env=_environment(inputs, workspace),
        job=_trainer_job(inputs, workspace),
        resources_per_node=plan_resources(values),
        processes_per_node=processes_per_node(values),
        dataset_path=inputs.dataset_path,
        training_data_path=training_data,
        dataset_entries_needed=needed,
    )


def _entries_needed(inputs: PlanInputs) -> int | None:
    """The dataset entries a run bounded by max_steps consumes; None: unbounded."""
    values = inputs.values
    max_steps = effective_max_steps(inputs)
    if max_steps > 0:
        return max_steps * values.batch_size * values.gradient_accumulation_steps
    return None


def _runs_on_cpu(inputs: PlanInputs) -> bool:
    """number_gpus 0: the ranks are CPU processes over gloo (machines without GPUs, CI)."""
    return inputs.use_cpu or inputs.values.number_gpus == 0


def _trainer_job(inputs: PlanInputs, workspace: Workspace) -> TrainerJob:
    values = inputs.values
    return TrainerJob(
        report_dir=workspace.reports.path,
        aim_repo=inputs.aim_repo,
        run_labels=inputs.run_labels,
        stop_after_seconds=values.stop_after_seconds,
        auto_stop_method=values.auto_stop_method,
        auto_stop_max_seconds=values.auto_stop_max_seconds,
        race=inputs.race,
        # use_cpu stands CPU processes in for GPUs: there is no GPU to sample
        gpu_indices=[]
        if inputs.use_cpu
        else list(range(values.number_gpus // values.number_nodes)),
    )


def _node_launch(inputs: PlanInputs, workspace: Workspace, training_data: Path) -> NodeLaunch:
    """The node's command: the trainer itself for one rank, accelerate's launcher for more."""
    values = inputs.values
    ranks = world_size(values)
    trainer = [
        "-m",
        TRAINER_MODULE,
        JOB_FLAG,
        str(workspace.job),
        *sft_trainer_arguments(inputs, training_data),
    ]
    if ranks == 1:
        # One process; under DP it sees every GPU of the node and HF's Trainer wraps the
        # model in torch.nn.DataParallel.
        return NodeLaunch(machine_rank=0, argv=[inputs.python, *trainer])
    config = accelerate_config(
        values,
        processes_per_node=processes_per_node(values),
        machine_rank=inputs.machine_rank,
        main_process_ip=inputs.main_process_ip if values.number_nodes > 1 else None,
        main_process_port=inputs.main_process_port,
        use_cpu=_runs_on_cpu(inputs),
    )
    launcher = [
        inputs.python,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(workspace.accelerate_config),
        # accelerate's --num_processes counts every machine's processes
        "--num_processes",
        str(ranks),
    ]
    return NodeLaunch(
        machine_rank=inputs.machine_rank, argv=[*launcher, *trainer], accelerate_config=config
    )


def _environment(inputs: PlanInputs, workspace: Workspace) -> dict[str, str]:
    """The environment variables the plan sets for the node's processes."""
    values = inputs.values
    use_cpu = _runs_on_cpu(inputs)
    env = {
        "HF_HOME": inputs.hf_home,
        # an inherited HF_HUB_CACHE would send the trainer to another cache than hf_home's
        "HF_HUB_CACHE": str(Path(inputs.hf_home) / "hub"),
        "TERMINATION_LOG_FILE": str(workspace.reports.termination_log),
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONUNBUFFERED": "1",
        "AIM_UI_TELEMETRY_ENABLED": "0",
    }
    if inputs.weights_offline:
        env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    # CPU ranks (number_gpus 0, or use_cpu standing CPU processes in for GPUs) see no GPU
    env["CUDA_VISIBLE_DEVICES"] = pinned_devices(
        inputs.visible_devices, 0 if use_cpu else values.number_gpus // values.number_nodes
    )
    if not use_cpu:
        # CUDA's default order is fastest first, NVML's (the GPU sampler's) is PCI bus order:
        # the same index must name the same GPU in both
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if use_cpu and world_size(values) > 1:
        # accelerate's multi-GPU launcher ignores the config file's use_cpu.
        env["ACCELERATE_USE_CPU"] = "true"
    if values.number_nodes > 1:
        # The measured setting wins over the worker's own NCCL_IB_DISABLE; every other
        # NCCL_* variable of the worker (NCCL_IB_HCA, NCCL_IB_GID_INDEX, ...) passes through.
        env["NCCL_IB_DISABLE"] = "0" if values.enable_roce else "1"
    return env
