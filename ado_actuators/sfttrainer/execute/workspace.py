"""The files a measurement's processes read, written into its own working directory."""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path

import yaml

from ado_actuators.sfttrainer.contract.entries import MalformedDataset, write_first_entries
from ado_actuators.sfttrainer.plan.launch.launch_plan import LaunchPlan

__all__ = ["MalformedDataset", "free_port", "prepare", "unwritable", "write_first_entries"]


def unwritable(directory: Path) -> str | None:
    """Why the processes cannot write under `directory` (created if missing), or None.

    A write is tried, not permissions read: a read-only mount or a full quota shows only then,
    and a failure found here names the setting, where the trainer's would not."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as error:
        return f"{type(error).__name__}: {error.strerror or error}"
    return None


def free_port() -> int:
    """A port for accelerate's rendezvous; two concurrent launches must not share one."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def prepare(plan: LaunchPlan) -> None:
    """Create the working directory and everything the launch reads."""
    workspace = plan.workspace
    workspace.root.mkdir(parents=True, exist_ok=True)
    workspace.reports.path.mkdir(parents=True, exist_ok=True)
    workspace.job.write_text(plan.job.model_dump_json(indent=1))
    accelerate = plan.node.accelerate_config
    if accelerate is not None:
        workspace.accelerate_config.write_text(yaml.safe_dump(accelerate, sort_keys=False))
    if plan.training_data_path != plan.dataset_path:
        write_first_entries(
            plan.dataset_path, plan.training_data_path, plan.dataset_entries_needed or 0
        )
