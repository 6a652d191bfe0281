"""LaunchPlan rendering: command lines, accelerate configs, resources. Pure data."""

import json
from pathlib import Path

import pytest

from ado_actuators.sfttrainer.catalog.entity import entity_values
from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.contract.trainer_io import JOB_FLAG
from ado_actuators.sfttrainer.plan.launch.launch_plan import (
    PlanError,
    PlanInputs,
    plan_launch,
    plan_resources,
)


def inputs(
    experiment="finetune_full_benchmark-v1.0.0",
    use_cpu=False,
    machine_rank=0,
    main_process_ip=None,
    visible_devices=None,
    **overrides,
):
    definition = catalog_data().experiment(experiment)
    base = {
        "model_name": "granite-3.1-2b",
        "model_max_length": 512,
        "batch_size": 8,
        "number_gpus": 1,
        "gpu_model": "NVIDIA-A100-SXM4-80GB",
    }
    return PlanInputs(
        values=entity_values({**base, **overrides}, definition.default_overrides()),
        definition=definition,
        model_location="/models/granite",
        dataset_path=Path("/data/news.jsonl"),
        text_field="output",
        workdir=Path("/work/m1"),
        python="/venv/bin/python",
        hf_home="/hf",
        main_process_port=29511,
        aim_repo="/work/m1/aim",
        use_cpu=use_cpu,
        machine_rank=machine_rank,
        main_process_ip=main_process_ip,
        visible_devices=visible_devices,
    )


def option(argv, flag):
    return argv[argv.index(flag) + 1]


def test_single_device_runs_the_trainer_directly_with_the_spec_command_line():
    plan = plan_launch(inputs(max_steps=3))
    node = plan.node
    argv = node.argv
    assert argv[:5] == [
        "/venv/bin/python",
        "-m",
        "ado_actuators.sfttrainer.trainer",
        JOB_FLAG,
        "/work/m1/job.json",
    ]
    assert node.accelerate_config is None
    assert option(argv, "--per_device_train_batch_size") == "8"
    assert option(argv, "--max_seq_length") == "512"
    assert option(argv, "--response_template") == "\n### Response:"
    assert option(argv, "--torch_dtype") == "bfloat16"
    assert option(argv, "--use_flash_attn") == "True"
    assert option(argv, "--peft_method") == "none"
    assert option(argv, "--gradient_accumulation_steps") == "4"
    assert option(argv, "--max_steps") == "3"
    assert option(argv, "--packing") == "False"
    assert json.loads(option(argv, "--gradient_checkpointing_kwargs")) == {"use_reentrant": False}
    assert "--fast_moe" not in argv and "--target_modules" not in argv


def test_max_steps_bounds_the_entries_trained_on():
    plan = plan_launch(inputs(max_steps=3, batch_size=4, gradient_accumulation_steps=2))
    assert plan.dataset_entries_needed == 3 * 4 * 2
    assert option(plan.node.argv, "--training_data_path") == str(plan.training_data_path)
    # the subset lies in the measurement's directory, named for its entries, in the data's format
    assert plan.training_data_path == Path("/work/m1/dataset-first-24.jsonl")
    unbounded = plan_launch(inputs())
    assert unbounded.dataset_entries_needed is None
    assert unbounded.training_data_path == unbounded.dataset_path


def test_multi_gpu_fsdp_uses_accelerate_with_the_spec_config():
    plan = plan_launch(
        inputs(
            number_gpus=4,
            fsdp_sharding_strategy="HYBRID_SHARD",
            accelerate_config_fsdp_transformer_layer_cls_to_wrap="LlamaDecoderLayer",
        )
    )
    node = plan.node
    assert node.argv[1:3] == ["-m", "accelerate.commands.launch"]
    assert option(node.argv, "--num_processes") == "4"
    assert option(node.argv, "--per_device_train_batch_size") == "2"
    config = node.accelerate_config
    assert config["distributed_type"] == "FSDP"
    assert config["num_processes"] == 4 and config["machine_rank"] == 0
    assert config["main_process_port"] == 29511
    assert config["use_cpu"] is False
    fsdp = config["fsdp_config"]
    assert fsdp["fsdp_sharding_strategy"] == "HYBRID_SHARD"
    assert fsdp["fsdp_transformer_layer_cls_to_wrap"] == "LlamaDecoderLayer"
    assert fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert fsdp["fsdp_sync_module_states"] is True
    assert plan.resources_per_node.cpus == 8 and plan.resources_per_node.gpus == 4
    assert plan.resources_per_node.custom == {"NVIDIA-A100-SXM4-80GB": 4.0}
    assert plan.job.gpu_indices == [0, 1, 2, 3]


def test_ddp_and_cpu_variants():
    ddp = plan_launch(inputs(number_gpus=2, distributed_backend="DDP")).node.accelerate_config
    assert ddp["distributed_type"] == "MULTI_GPU" and "fsdp_config" not in ddp
    cpu = plan_launch(inputs(number_gpus=2, use_cpu=True)).node.accelerate_config
    assert cpu["use_cpu"] is True
    assert plan_launch(inputs(number_gpus=2, use_cpu=True)).env["ACCELERATE_USE_CPU"] == "true"
    assert cpu["fsdp_config"]["fsdp_sync_module_states"] is False


def test_cpu_only_entity_hides_gpus_and_asks_for_two_cores():
    plan = plan_launch(inputs(number_gpus=0, gpu_model=None))
    assert plan.env["CUDA_VISIBLE_DEVICES"] == ""
    assert plan.resources_per_node.cpus == 2
    assert plan_resources(inputs(number_gpus=8, number_nodes=1).values).cpus == 16
    assert plan.resources_per_node.gpus == 0 and plan.resources_per_node.custom == {}


def test_lora_pt_and_gptq_command_lines():
    lora = plan_launch(inputs("finetune_lora_benchmark-v1.0.0", model_name="granite-13b-v2", r=8))
    argv = lora.node.argv
    assert option(argv, "--peft_method") == "lora"
    assert argv[argv.index("--target_modules") + 1 : argv.index("--target_modules") + 3] == [
        "c_attn",
        "c_proj",
    ]
    assert option(argv, "--r") == "8" and option(argv, "--lora_alpha") == "16"
    pt = plan_launch(inputs("finetune_pt_benchmark-v1.0.0")).node.argv
    assert option(pt, "--peft_method") == "pt" and "--r" not in pt
    gptq = plan_launch(
        inputs("finetune_gptq-lora_benchmark-v1.0.0", model_name="llama-7b")
    ).node.argv
    assert option(gptq, "--torch_dtype") == "float16"
    assert option(gptq, "--auto_gptq") == "triton_v2"
    i = gptq.index("--fast_kernels")
    assert gptq[i + 1 : i + 4] == ["true", "true", "true"]
    i = gptq.index("--fused_lora")
    assert gptq[i + 1 : i + 3] == ["auto_gptq", "true"]


def test_stability_runs_five_steps():
    plan = plan_launch(inputs("finetune_full_stability-v1.0.0", batch_size=2))
    assert option(plan.node.argv, "--max_steps") == "5"
    assert plan.dataset_entries_needed == 5 * 2 * 4


def test_values_stay_single_arguments_never_shell_text():
    hostile = inputs().model_copy(
        update={"dataset_path": Path("/data/a b; rm -rf ~ #.jsonl"), "model_location": "$(reboot)"}
    )
    argv = plan_launch(hostile).node.argv
    assert option(argv, "--training_data_path") == "/data/a b; rm -rf ~ #.jsonl"
    assert option(argv, "--model_name_or_path") == "$(reboot)"


def test_unsupported_settings_are_plan_errors_naming_the_field():
    with pytest.raises(
        PlanError, match=r"distributed_backend None .* use distributed_backend DDP or FSDP"
    ):
        plan_launch(
            inputs(
                number_gpus=4,
                number_nodes=2,
                distributed_backend="None",
                main_process_ip="10.0.0.1",
            )
        )
    with pytest.raises(PlanError, match="batch_size 3 is not divisible by number_nodes 2"):
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
        PlanError, match=r"dataset_kwargs_skip_prepare_dataset: fms-hf-tuning 3.0.0"
    ):
        plan_launch(inputs(dataset_kwargs_skip_prepare_dataset=True, fms_hf_tuning_version="3.0.0"))


def test_stop_after_seconds_and_labels_reach_the_trainer_job():
    plan = plan_launch(inputs(stop_after_seconds=30))
    assert plan.job.stop_after_seconds == 30.0
    assert plan.job.report_dir == Path("/work/m1/reports")
    assert plan.env["HF_HOME"] == "/hf"


def test_vision_datasets_name_their_image_and_conversation_columns():
    vision = inputs(dataset_id="vision-384x384-16384plus-entries-4096").model_copy(
        update={"text_field": "messages", "image_field": "images", "conversation_field": "messages"}
    )
    argv = plan_launch(vision).node.argv
    assert option(argv, "--dataset_image_field") == "images"
    assert option(argv, "--dataset_conversation_field") == "messages"
    assert option(argv, "--dataset_text_field") == "messages"
    text = plan_launch(inputs()).node.argv
    assert "--dataset_image_field" not in text and "--dataset_conversation_field" not in text


def test_local_or_cached_weights_train_offline_from_hf_homes_cache():
    plan = plan_launch(inputs().model_copy(update={"weights_offline": True}))
    assert plan.env["HF_HUB_OFFLINE"] == "1" and plan.env["HF_HUB_CACHE"] == "/hf/hub"
    assert "HF_HUB_OFFLINE" not in plan_launch(inputs()).env


def test_each_node_of_a_multi_node_run_gets_its_machine_rank_and_rank_0s_address():
    entity = dict(
        number_gpus=16,
        number_nodes=2,
        batch_size=32,
        distributed_backend="DDP",
        main_process_ip="10.1.2.3",
    )
    plans = [plan_launch(inputs(machine_rank=rank, **entity)) for rank in (0, 1)]
    for rank, plan in enumerate(plans):
        config = plan.node.accelerate_config
        assert plan.node.machine_rank == config["machine_rank"] == rank
        assert (config["num_machines"], config["num_processes"]) == (2, 16)
        assert (config["main_process_ip"], config["main_process_port"]) == ("10.1.2.3", 29511)
        # accelerate's --num_processes is the total over all machines, as in the spec
        assert option(plan.node.argv, "--num_processes") == "16"
        assert option(plan.node.argv, "--per_device_train_batch_size") == "2"
        assert plan.world_size == 16 and plan.processes_per_node == 8
        assert plan.job.gpu_indices == list(range(8))
        assert plan.env["NCCL_IB_DISABLE"] == "1"
    assert plans[0].node.argv == plans[1].node.argv  # the config file carries the rank


def test_multi_node_bundles_ask_for_a_full_worker_and_roce_when_enabled():
    values = inputs(number_gpus=16, number_nodes=2, enable_roce=True).values
    resources = plan_resources(values)
    assert (resources.cpus, resources.gpus) == (16, 8)
    assert resources.custom == {"NVIDIA-A100-SXM4-80GB": 8.0, "full-worker": 1.0, "RoCE": 1.0}
    assert resources.bundle() == {"CPU": 16.0, "GPU": 8.0, **resources.custom}
    plan = plan_launch(
        inputs(number_gpus=16, number_nodes=2, enable_roce=True, main_process_ip="10.1.2.3")
    )
    assert plan.env["NCCL_IB_DISABLE"] == "0"
    # one node: neither resource, and RoCE is a multi-node setting
    single = plan_resources(inputs(number_gpus=8, enable_roce=True).values)
    assert single.custom == {"NVIDIA-A100-SXM4-80GB": 8.0}
    assert "NCCL_IB_DISABLE" not in plan_launch(inputs(number_gpus=8, enable_roce=True)).env


def test_cpu_nodes_train_one_gloo_rank_each_and_split_the_batch():
    plan = plan_launch(
        inputs(
            number_gpus=0,
            gpu_model=None,
            number_nodes=2,
            batch_size=4,
            distributed_backend="DDP",
            machine_rank=1,
            main_process_ip="10.1.2.3",
        )
    )
    assert plan.world_size == 2 and plan.processes_per_node == 1
    assert option(plan.node.argv, "--num_processes") == "2"
    assert option(plan.node.argv, "--per_device_train_batch_size") == "2"
    config = plan.node.accelerate_config
    assert config["use_cpu"] is True and config["machine_rank"] == 1
    assert plan.env["ACCELERATE_USE_CPU"] == "true" and plan.env["CUDA_VISIBLE_DEVICES"] == ""
    resources = plan_resources(inputs(number_gpus=0, gpu_model=None, number_nodes=2).values)
    assert resources.bundle() == {"CPU": 2.0}  # no GPUs: no full-worker needed


def test_data_parallel_is_one_process_seeing_every_gpu_of_the_node():
    plan = plan_launch(inputs(number_gpus=4, batch_size=8, distributed_backend="None"))
    argv = plan.node.argv
    assert argv[:3] == ["/venv/bin/python", "-m", "ado_actuators.sfttrainer.trainer"]
    assert "accelerate.commands.launch" not in argv and plan.node.accelerate_config is None
    # HF's Trainer wraps the model in DataParallel: each GPU gets batch_size / number_gpus
    assert option(argv, "--per_device_train_batch_size") == "2"
    assert plan.world_size == 1 and plan.processes_per_node == 1
    assert plan.job.gpu_indices == [0, 1, 2, 3]
    assert plan.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and "ACCELERATE_USE_CPU" not in plan.env
    assert plan.resources_per_node.gpus == 4
    assert (
        inputs(distributed_backend="None").values.distributed_backend == "None"
    )  # stored as asked


def test_gpus_are_pinned_to_the_planned_ones_of_what_the_process_sees():
    """Without pinning, a one-GPU run on an 8-GPU host is wrapped in DataParallel over all 8."""
    alone = plan_launch(inputs(number_gpus=1)).env
    assert alone["CUDA_VISIBLE_DEVICES"] == "0" and alone["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    ray_gave = plan_launch(inputs(number_gpus=2, distributed_backend="DDP", visible_devices="5,3"))
    assert ray_gave.env["CUDA_VISIBLE_DEVICES"] == "5,3"
    assert ray_gave.job.gpu_indices == [0, 1]  # CUDA's numbering inside the pinned list
    uuids = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6,GPU-7f1d0a2e"
    assert plan_launch(inputs(visible_devices=uuids)).env["CUDA_VISIBLE_DEVICES"] == (
        "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"
    )
    mig = "MIG-c7384736-a75d-5afc-978f-d2f1294409fd"
    assert plan_launch(inputs(visible_devices=f" {mig} ")).env["CUDA_VISIBLE_DEVICES"] == mig
    per_node = plan_launch(
        inputs(
            number_gpus=16,
            number_nodes=2,
            main_process_ip="10.0.0.1",
            visible_devices="0,1,2,3,4,5,6,7",
        )
    )
    assert per_node.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"


def test_cpu_ranks_see_no_gpu_and_too_few_visible_gpus_is_refused():
    assert (
        plan_launch(inputs(number_gpus=2, use_cpu=True, visible_devices="0,1")).env[
            "CUDA_VISIBLE_DEVICES"
        ]
        == ""
    )
    with pytest.raises(PlanError, match=r"CUDA_VISIBLE_DEVICES='2'.*leaves it 1"):
        plan_launch(inputs(number_gpus=2, distributed_backend="DDP", visible_devices="2"))
    with pytest.raises(PlanError, match="CUDA_VISIBLE_DEVICES=''"):
        plan_launch(inputs(number_gpus=1, visible_devices=""))
