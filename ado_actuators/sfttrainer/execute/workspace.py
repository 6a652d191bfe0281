"""The files a measurement's processes read, written into its own working directory."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import yaml

from ado_actuators.sfttrainer.plan.launch import LaunchPlan


def free_port() -> int:
    """A port for accelerate's rendezvous; two concurrent launches must not share one."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


class MalformedDataset(ValueError):
    """A record of the dataset does not parse: the message names the file and the line."""


def write_first_entries(source: Path, target: Path, entries: int) -> int:
    """Copy the first `entries` records of a jsonl or parquet dataset; returns how many.

    Reads only what it copies, so its cost does not grow with the dataset. JSON lines are
    parsed on the way (cheap: only the lines copied), so a damaged one is reported with
    the user's file and line number rather than as the trainer's error about the copy.
    """
    # unique: nodes sharing a filesystem may write the same target at once
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    if source.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        parquet = pq.ParquetFile(source)
        batches, copied = [], 0
        for batch in parquet.iter_batches(batch_size=min(entries, 1024)):
            batches.append(batch.slice(0, entries - copied))
            copied += batches[-1].num_rows
            if copied >= entries:
                break
        pq.write_table(pa.Table.from_batches(batches, schema=parquet.schema_arrow), tmp)
    else:
        copied = 0
        with source.open("rb") as reader, tmp.open("wb") as writer:
            for number, line in enumerate(reader, start=1):
                if not line.strip():
                    continue
                try:
                    if not isinstance(json.loads(line), dict):
                        raise ValueError("not a JSON object")
                except ValueError as error:  # UnicodeDecodeError included
                    tmp.unlink(missing_ok=True)
                    raise MalformedDataset(
                        f"dataset {source}: line {number} does not parse as a JSON object "
                        f"({error}); repair or delete that line, or create the file again"
                    ) from None
                writer.write(line if line.endswith(b"\n") else line + b"\n")
                copied += 1
                if copied >= entries:
                    break
        if copied == 0:
            tmp.unlink(missing_ok=True)
            raise MalformedDataset(f"dataset {source} has no entries; create the file again")
    tmp.replace(target)
    return copied


def prepare(plan: LaunchPlan) -> None:
    """Create the working directory and everything the launch reads."""
    plan.workdir.mkdir(parents=True, exist_ok=True)
    plan.report_dir.mkdir(parents=True, exist_ok=True)
    plan.job_path.write_text(plan.job.model_dump_json(indent=1))
    accelerate = plan.node.accelerate_config
    if accelerate is not None:
        plan.accelerate_config_path.write_text(yaml.safe_dump(accelerate, sort_keys=False))
    if plan.training_data_path != plan.dataset_path:
        write_first_entries(
            plan.dataset_path, plan.training_data_path, plan.dataset_entries_needed or 0
        )
