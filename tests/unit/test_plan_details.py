"""LaunchPlan, in detail: the trainer's environment, its job, where its files go, the settings
that only some entities use, and the plans that are refused. test_plan.py has the shapes."""

from pathlib import Path

import pytest
from test_plan import inputs, option

from ado_actuators.sfttrainer.plan.launch.launch_plan import PlanError, plan_launch, plan_resources
from ado_actuators.sfttrainer.stopping.warmup_stable import WARMUP_60S_STABLE_120S_OR_10_STEPS

COMMON_ENV = {
    "HF_HOME": "/hf",
    "HF_HUB_CACHE": "/hf/hub",
    # trainer/failures.py writes why a rank died there: beside the reports the executor collects
    "TERMINATION_LOG_FILE": "/work/m1/reports/termination.log",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
    "AIM_UI_TELEMETRY_ENABLED": "0",
}


def test_the_trainers_environment_is_exactly_what_the_plan_sets():
    gpu = plan_launch(inputs())
    assert gpu.env == {**COMMON_ENV, "CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert Path(gpu.env["TERMINATION_LOG_FILE"]).parent == gpu.job.report_dir
    # one CPU process: no accelerate launcher, so nothing to tell it
    cpu = plan_launch(inputs(number_gpus=0, gpu_model=None))
    assert cpu.env == {**COMMON_ENV, "CUDA_VISIBLE_DEVICES": ""}
    offline = plan_launch(inputs().model_copy(update={"weights_offline": True}))
    assert offline.env == {**gpu.env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def test_the_trainer_job_carries_the_aim_repo_labels_and_stop_policy():
    labelled = inputs(stop_after_seconds=30, auto_stop_method=WARMUP_60S_STABLE_120S_OR_10_STEPS)
    job = plan_launch(labelled.model_copy(update={"run_labels": {"entity": "e1"}})).job
    assert job.aim_repo == "/work/m1/aim" and job.run_labels == {"entity": "e1"}
    assert (job.stop_after_seconds, job.auto_stop_method) == (
        30.0,
        WARMUP_60S_STABLE_120S_OR_10_STEPS,
    )
    assert job.auto_stop_max_seconds == 80.0  # the field's default reaches the trainer
    capped = plan_launch(
        inputs(auto_stop_method="STEADY_CI95_1PCT", auto_stop_max_seconds=45.0)
    ).job
    assert (capped.auto_stop_method, capped.auto_stop_max_seconds) == ("STEADY_CI95_1PCT", 45.0)


def test_files_go_under_the_measurements_workdir():
    single = plan_launch(inputs())
    assert single.node.machine_rank == 0
    assert option(single.node.argv, "--output_dir") == "/work/m1/output"
    multi = plan_launch(inputs(number_gpus=2))
    # the launcher reads the config the executor writes to the path the plan names
    assert option(multi.node.argv, "--config_file") == str(multi.workspace.accelerate_config)
    assert multi.workspace.accelerate_config == Path("/work/m1/accelerate_config.yaml")


def test_cpu_processes_standing_in_for_gpus_sample_no_gpu():
    assert plan_launch(inputs(number_gpus=2, use_cpu=True)).job.gpu_indices == []


def test_a_one_node_run_meets_on_its_own_machine_whatever_address_it_is_given():
    config = plan_launch(inputs(number_gpus=2, main_process_ip="10.0.0.9")).node.accelerate_config
    assert "main_process_ip" not in config


def test_only_a_positive_max_steps_bounds_the_entries():
    # Hugging Face trains num_train_epochs when max_steps <= 0
    assert plan_launch(inputs(max_steps=1, batch_size=8)).dataset_entries_needed == 1 * 8 * 4
    whole = plan_launch(inputs(max_steps=0))
    assert whole.dataset_entries_needed is None and whole.training_data_path == whole.dataset_path


def test_expert_parallelism_and_fast_kernels_reach_the_command_line():
    mixtral = dict(number_gpus=2, model_name="mixtral-8x7b-instruct-v0.1")
    moe, plain = (plan_launch(inputs(fast_moe=degree, **mixtral)).node.argv for degree in (2, 0))
    i = moe.index("--fast_moe")
    assert moe[i : i + 2] == ["--fast_moe", "2"] and moe[:i] + moe[i + 2 :] == plain  # nothing else
    gptq = plan_launch(
        inputs(
            "finetune_gptq-lora_benchmark-v1.0.0",
            model_name="llama-7b",
            fast_kernels=["True", "False", "True"],
        )
    ).node.argv
    i = gptq.index("--fast_kernels")
    assert gptq[i + 1 : i + 4] == [
        "true",
        "false",
        "true",
    ]  # the entity's, replacing the experiment's


def test_data_parallel_over_two_gpus_is_one_process():
    plan = plan_launch(inputs(number_gpus=2, distributed_backend="None"))
    assert plan.world_size == 1 and plan.node.accelerate_config is None


def test_a_cpu_entity_asks_for_no_gpu_model_resource():
    assert plan_resources(inputs(number_gpus=0).values).custom == {}  # gpu_model set, no GPU


@pytest.mark.parametrize("rank, nodes", [(2, 2), (-1, 2), (1, 1)])
def test_a_machine_rank_outside_the_nodes_is_refused(rank, nodes):
    with pytest.raises(PlanError, match=f"^machine_rank {rank} outside 0..{nodes - 1}$"):
        plan_launch(
            inputs(
                number_gpus=2 * nodes,
                number_nodes=nodes,
                machine_rank=rank,
                main_process_ip="10.0.0.1",
            )
        )


def test_refusals_say_what_to_change():
    with pytest.raises(PlanError, match=r"^a multi-node plan needs the address of rank 0's node$"):
        plan_launch(inputs(number_gpus=4, number_nodes=2))
    with pytest.raises(PlanError, match=r"batch_size is split evenly over them$"):
        plan_launch(
            inputs(
                number_gpus=0,
                gpu_model=None,
                number_nodes=2,
                batch_size=3,
                main_process_ip="10.0.0.1",
            )
        )
    with pytest.raises(
        PlanError,
        match=r"widen CUDA_VISIBLE_DEVICES \(or the GPUs Ray gives the task\), "
        "or measure with fewer GPUs$",
    ):
        plan_launch(inputs(number_gpus=2, distributed_backend="DDP", visible_devices="2"))


@pytest.mark.parametrize(
    ("batch_size", "gpus", "nodes", "expected"),
    [(2, 2, 1, 1), (1, 2, 1, 1), (8, 2, 1, 4), (8, 0, 2, 4), (3, 0, 1, 3)],
)
def test_the_per_device_batch_splits_the_batch_over_the_devices_at_least_one_each(
    batch_size, gpus, nodes, expected
):
    """One reading for the launch (--per_device_train_batch_size) and both predictions
    (plan/model/training.py): batch_size over the GPUs (one CPU rank a node without them),
    floored, and never below one sample."""
    from ado_actuators.sfttrainer.catalog.entity import entity_values
    from ado_actuators.sfttrainer.plan.model.geometry import per_device_batch

    values = entity_values(
        {
            "model_name": "m",
            "model_max_length": 64,
            "batch_size": batch_size,
            "number_gpus": gpus,
            "number_nodes": nodes,
        }
    )
    assert per_device_batch(values) == expected
