"""How a measurement's devices are laid out: how many share the batch, the ranks per node, the
world. The memory and speed models read the same layout here as the launch plan runs."""

from __future__ import annotations

from ado_actuators.sfttrainer.catalog.entity import EntityValues

DATA_PARALLEL = "None"
"""distributed_backend value of torch DataParallel: one process driving all of a node's GPUs."""


def batch_devices(values: EntityValues) -> int:
    """How many devices share batch_size: the GPUs, or with number_gpus 0 one CPU rank per node.

    Under DP the one process still feeds each GPU batch_size / number_gpus samples (torch
    DataParallel splits the process's batch), so the per-device size is the same."""
    return max(1, values.number_gpus, values.number_nodes)


def is_data_parallel(values: EntityValues) -> bool:
    """The spec's DP: distributed_backend None with several GPUs on one node, one process."""
    return values.distributed_backend == DATA_PARALLEL and values.number_gpus > 1


def processes_per_node(values: EntityValues) -> int:
    """One rank per GPU of the node (one CPU rank without GPUs); DP: one process in all."""
    if is_data_parallel(values):
        return 1
    return max(1, values.number_gpus // max(1, values.number_nodes))


def world_size(values: EntityValues) -> int:
    return processes_per_node(values) * max(1, values.number_nodes)


def per_device_batch(values: EntityValues) -> int:
    """The samples each device trains per micro-batch (fms-hf-tuning's
    --per_device_train_batch_size): batch_size split evenly over the devices, at least one."""
    return max(1, values.batch_size // batch_devices(values))
