"""accelerate configs (the spec's FSDP and DDP `accelerate_config.yml`) as data."""

from __future__ import annotations

from typing import Any

from ado_actuators.sfttrainer.catalog.entity import EntityValues

# The spec's files, with the ${...} placeholders filled in by `accelerate_config`.
_COMMON: dict[str, Any] = {
    "compute_environment": "LOCAL_MACHINE",
    "downcast_bf16": "no",
    "main_training_function": "main",
    "rdzv_backend": "static",
    "same_network": True,
    "tpu_env": [],
    "tpu_use_cluster": False,
    "tpu_use_sudo": False,
    "use_cpu": False,
}

_FSDP_DEFAULTS: dict[str, Any] = {
    "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
    "fsdp_backward_prefetch": "BACKWARD_PRE",
    "fsdp_forward_prefetch": False,
    "fsdp_offload_params": False,
    "fsdp_cpu_ram_efficient_loading": True,
    "fsdp_sync_module_states": True,
}


def accelerate_config(
    values: EntityValues,
    *,
    processes_per_node: int,
    machine_rank: int,
    main_process_ip: str | None,
    main_process_port: int,
    use_cpu: bool = False,
) -> dict[str, Any]:
    """Render the config for one node.

    `use_cpu` runs the ranks on CPUs over gloo: the nearest equivalent of a GPU run that a
    machine without GPUs can execute (accelerate's MULTI_CPU mode starts a single process).
    """
    config = {
        **_COMMON,
        "machine_rank": machine_rank,
        "mixed_precision": values.accelerate_config_mixed_precision,
        "num_machines": values.number_nodes,
        "num_processes": processes_per_node * values.number_nodes,
        "main_process_port": main_process_port,
        "use_cpu": use_cpu,
    }
    if main_process_ip is not None:
        config["main_process_ip"] = main_process_ip
    if values.distributed_backend == "FSDP":
        fsdp = {
            **_FSDP_DEFAULTS,
            "fsdp_sharding_strategy": values.fsdp_sharding_strategy,
            "fsdp_state_dict_type": values.fsdp_state_dict_type,
            "fsdp_use_orig_params": values.fsdp_use_orig_params,
        }
        if values.accelerate_config_fsdp_transformer_layer_cls_to_wrap:
            fsdp["fsdp_transformer_layer_cls_to_wrap"] = (
                values.accelerate_config_fsdp_transformer_layer_cls_to_wrap
            )
        if use_cpu:
            # With these on, FSDP ranks on CPU (gloo) fail with "no available devices": both
            # are GPU loading paths (tests/integration/test_measure.py launches the FSDP config
            # on CPU).
            fsdp["fsdp_cpu_ram_efficient_loading"] = False
            fsdp["fsdp_sync_module_states"] = False
        config |= {"distributed_type": "FSDP", "fsdp_config": fsdp}
    else:
        # The spec's DDP file writes `downcast_bf16: no` unquoted: YAML reads it as False.
        config |= {"distributed_type": "MULTI_GPU", "debug": False, "downcast_bf16": False}
    return config
