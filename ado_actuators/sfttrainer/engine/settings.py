"""What the measurement engine needs to know beyond an entity: directories, caches, time limits.

The engine (catalog, plan, execute, trainer, metrics, engine/measurement.py) reads only these, so it
runs wherever pydantic does, without ado-core or Ray (benchmarks/gpu drives it that way). The
ado actuator's `parameters:` block (actuator/parameters.py) is these settings plus ado's supervisor
fields; each field is declared here once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Self

import pydantic

from ado_actuators.sfttrainer.catalog.models import (
    WEIGHTS_FORMAT_ALIASES,
    WEIGHTS_FORMATS,
    ModelMap,
)
from ado_actuators.sfttrainer.catalog.names import did_you_mean
from ado_actuators.sfttrainer.plan.speed.devices import DEFAULT_NETWORK_GBPS


class MeasurementSettings(pydantic.BaseModel):
    """The engine's settings: the actuator parameters that shape a measurement."""

    # Unknown keys are admitted, then refused with a hint (_reject_unknown_keys): a plain
    # "extra forbidden" would not say which known key was meant.
    model_config = pydantic.ConfigDict(extra="allow")

    match_exact_dependencies: bool = pydantic.Field(
        default=True,
        description="For an fms_hf_tuning_version other than the installed one: true builds "
        "an environment with exactly its pinned packages (CUDA builds included); false leaves "
        "out what needs NVIDIA GPUs (flash-attn, mamba-ssm, fms-acceleration*, nvidia-*, "
        "triton, bitsandbytes, ...) and keeps the workers' own torch.",
    )
    environments_directory: str = pydantic.Field(
        default="~/.cache/ado-sfttrainer/environments",
        description="Where each node keeps the environments it builds, one per fms-hf-tuning "
        "version and package set; a later measurement reuses them.",
    )
    environment_build_timeout_seconds: float = pydantic.Field(
        default=1800.0,
        gt=0,
        description="Longest an environment build may take (waiting for a concurrent build of "
        "the same environment included) before the measurement is Failed.",
    )
    package_lists_directory: str | None = pydantic.Field(
        default=None,
        description="Directory of `fms-hf-tuning_v<version>.txt` package lists replacing the "
        "shipped ones (plan/packages/); null uses the shipped lists.",
    )
    find_links: list[str] = pydantic.Field(
        default_factory=list,
        description="Directories or URLs of wheels (and source archives) the environment "
        "builder looks in before the package registry, for every install phase: prebuilt "
        "flash-attn, mamba-ssm or causal-conv1d wheels for the cluster's torch and CUDA "
        "spare hours of compiling.",
    )
    output_dir: str = pydantic.Field(
        default="output",
        description="Directory prefix under which each measurement's working directory "
        "(trainer output, logs, reports) is created.",
    )
    data_directory: str = pydantic.Field(
        default="/data/fms-hf-tuning/artificial-dataset/",
        description="Directory containing the dataset files (`<dataset_id>.jsonl|.parquet`).",
    )
    aim_db: str | None = pydantic.Field(
        default=None,
        description="AIM repository (path or aim://host:port) to record system metrics in. "
        "None: no AIM recording (the rank reports hold every sample either way).",
    )
    aim_dashboard_url: str | None = pydantic.Field(
        default=None,
        description="URL of the AIM dashboard; included, with the run hash, in result metadata.",
    )
    hf_home: str = pydantic.Field(
        default="/hf-models-pvc/huggingface_home",
        description="HF_HOME of the training processes: Hugging Face cache and tokens.",
    )
    model_map: ModelMap | None = pydantic.Field(
        default=None,
        description="model_name -> {Vanilla|GPTQ-Quantized: hub id or absolute path}; "
        "entries override the shipped map per model and per weights format.",
    )
    num_tokens_cache_directory: str | None = pydantic.Field(
        default="cache",
        description="Directory for cached dataset token statistics, relative paths under "
        "data_directory; null disables it. Measurements count tokens from the batches they "
        "train on, so nothing is written here today.",
    )

    stall_timeout_seconds: float = pydantic.Field(
        default=1800.0,
        gt=0,
        description="A measurement whose processes write no output and make no progress "
        "for this long is stopped and reported Failed (a hung rank never holds an operation).",
    )

    placement_timeout_seconds: float = pydantic.Field(
        default=600.0,
        gt=0,
        description="A measurement whose node tasks (one Ray placement-group bundle per "
        "node, on one node too) are not all placed within this many seconds is reported "
        "Failed, naming what the cluster lacks or what holds its resources. Allow for an "
        "autoscaler adding workers, and for other measurements of the operation running first.",
    )

    memory_bound_check: bool = pydantic.Field(
        default=True,
        description="Skip without launching, storing is_valid = 0, when the lower bound of the GPU "
        "memory one device needs (weights, gradients, optimizer state and CUDA context, from "
        "the model's config.json) exceeds gpu_model's memory; false measures such "
        "configurations anyway. The bound is reported either way.",
    )
    skip_predicted_oom: bool = pydantic.Field(
        default=False,
        description="Skip without launching, storing is_valid = 0, when the predicted peak of GPU "
        "memory per device (with the allocator's headroom and the CUDA context) exceeds "
        "gpu_model's memory; the row says it was predicted, not measured. false (the "
        "default) launches every configuration the certain bound lets through. The "
        "prediction is reported either way (gpu_memory_predicted_gib).",
    )
    inter_node_gbps: float = pydantic.Field(
        default=DEFAULT_NETWORK_GBPS,
        gt=0,
        description="GB/s one node's network moves for NCCL's collectives between nodes (all "
        "its NICs together; 8 x 400 Gb/s is 400 GB/s, 2 x 100 Gb/s is 25 GB/s): what the "
        "predicted throughput of a several-node run prices FSDP's and DDP's traffic by, as "
        "given. The default, 100 (800 Gb/s), is a cluster between PyTorch's FSDP blog's A100 "
        "(400 Gb/s) and H100 (800 Gb/s) ones; measurements are unaffected.",
    )
    intra_node_gbps: float | None = pydantic.Field(
        default=None,
        gt=0,
        description="GB/s of bus bandwidth NCCL's collectives reach between the GPUs of one node "
        "(nccl-tests' busbw of all_gather / reduce_scatter at large messages), where the node's "
        "link is not the device's usual one (an NVLink bridge between PCIe cards, peer-to-peer "
        "enabled where the table assumes none, another host): what the predicted throughput "
        "of a one-node, several-GPU run prices FSDP's and DDP's traffic by, as given, at any "
        "GPU count. Unset (the default): the device table's figure (metrics/gpu_peaks.yaml, "
        "`link`); measurements are unaffected.",
    )
    gpu_memory_gib: dict[str, pydantic.PositiveFloat] = pydantic.Field(
        default_factory=dict,
        description="GiB of memory of a gpu_model, by its name, where metrics/gpu_memory.yaml "
        "has none (or to replace the table's): nvidia-smi's memory.total in MiB over 1024, or "
        'the datasheet\'s GB; e.g. {"My-GPU-Name": 48}. The certain bound is compared with it '
        "and the predicted peak with it less the CUDA context, so a device the table lacks is "
        "answered. Unset, such a device is a certain OOM only where the bound exceeds the "
        "largest device the table lists, else unknown.",
    )
    oom_dominance: bool = pydantic.Field(
        default=True,
        description="Skip without launching, storing is_valid = 0, a request that a measured GPU "
        "out-of-memory run proves: equal to it in every other entity value and experiment "
        "parameter (experiment, fms_hf_tuning_version, gpu_model, GPUs, nodes, ...) with a "
        "per-device batch and a model_max_length no smaller; its reason names the run that "
        "proved it. The stability experiment neither uses nor feeds the record. false neither "
        "reads nor writes the record.",
    )
    oom_record_path: str = pydantic.Field(
        default=".sfttrainer/measured-ooms.jsonl",
        description="The record of measured GPU out-of-memory runs (JSON lines, appended under "
        "a file lock), read and written by every measurement wherever Ray runs it: a relative "
        "path is under data_directory, which every node already reads.",
    )
    racing: bool | None = pydantic.Field(
        default=None,
        description="Stop a measurement as soon as it cannot be the fastest of its answer "
        "group: once its 95 % interval lies below that of the group's measured fastest, after "
        "its stop method's warm-up and 20 measured steps. The row stays valid, with its wider "
        "interval, raced_behind_percent and raced_saved_seconds, and is never named fastest. "
        "Unset (the default): only what a guided walk sends races, against the incumbent it "
        "deals. true: a plain random walk's measurements race too, against the fastest of "
        "their group that measurements have recorded (measured_speeds_path). false: every "
        "configuration is measured to its method's end.",
    )
    race_cards_path: str = pydantic.Field(
        default=".sfttrainer/race-cards.jsonl",
        description="Where a guided walk leaves, for each configuration it sends, the measured "
        "fastest it races (JSON lines, appended under a file lock): a relative path is under "
        "data_directory, which the walk and every node read.",
    )
    measured_speeds_path: str = pydantic.Field(
        default=".sfttrainer/measured-speeds.jsonl",
        description="With racing: true, where every measurement records its figure and "
        "interval by configuration and group (JSON lines, appended under a file lock), and "
        "what one no guided walk dealt a card races: a relative path is under data_directory.",
    )
    allow_shared_gpus: bool = pydantic.Field(
        default=False,
        description="Measure on a GPU where another process holds memory (the metadata lists "
        "them); false fails such a measurement, naming the processes, before it launches.",
    )

    @pydantic.field_validator("model_map", mode="before")
    @classmethod
    def _normalise_model_map(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, dict):
            raise ValueError(
                "model_map must map a model name to {Vanilla: <hub id or path>, "
                "GPTQ-Quantized: <hub id or path>}"
            )
        normalised: ModelMap = {}
        for name, formats in value.items():
            if not isinstance(formats, dict) or not formats:
                raise ValueError(
                    f"model_map.{name} must be a mapping such as "
                    f"{{Vanilla: <hub id or path>}}, got {formats!r}"
                )
            entry = {}
            for fmt, location in formats.items():
                fmt = WEIGHTS_FORMAT_ALIASES.get(fmt, fmt)
                if fmt not in WEIGHTS_FORMATS:
                    raise ValueError(
                        f"model_map.{name}: unknown weights format {fmt!r}; "
                        f"use one of {', '.join(WEIGHTS_FORMATS)}"
                    )
                if not isinstance(location, str) or not location.strip():
                    raise ValueError(
                        f"model_map.{name}.{fmt} must be a hub id or a path, got {location!r}"
                    )
                entry[fmt] = location
            normalised[str(name)] = entry
        return normalised

    @pydantic.model_validator(mode="after")
    def _reject_unknown_keys(self) -> MeasurementSettings:
        # ado-core parses the YAML into a permissive model first, so a misspelt key would
        # otherwise vanish silently and the user would measure with a default they never chose.
        unknown = sorted((self.model_extra or {}).keys())
        if unknown:
            known = sorted(type(self).model_fields)
            hints = [key + did_you_mean(key, known) for key in unknown]
            raise ValueError(
                f"unknown SFTTrainer parameter(s) {', '.join(hints)}; "
                f"known parameters are {', '.join(known)}"
            )
        return self

    @classmethod
    def from_any(cls, params: Any) -> Self:
        """Accept a dict, None, or any pydantic model ado-core hands over (extras included)."""
        if params is None:
            return cls()
        if isinstance(params, cls):
            return params
        if isinstance(params, pydantic.BaseModel):
            params = {**params.model_dump(exclude_unset=True), **(params.model_extra or {})}
        return cls.model_validate(params)

    def oom_record_file(self) -> Path | None:
        """The record of measured OOMs, or None when oom_dominance is off."""
        if not self.oom_dominance:
            return None
        path = Path(self.oom_record_path).expanduser()
        return path if path.is_absolute() else Path(self.data_directory) / path

    def race_cards_file(self) -> Path:
        return self._under_data(self.race_cards_path)

    def measured_speeds_file(self) -> Path | None:
        """The record of measured speeds, or None unless racing is true: a guided walk reads
        the space's own rows, and a read-only data_directory must cost nothing else."""
        return self._under_data(self.measured_speeds_path) if self.racing is True else None

    def _under_data(self, given: str) -> Path:
        path = Path(given).expanduser()
        return path if path.is_absolute() else Path(self.data_directory) / path

    def tokens_cache_path(self) -> Path | None:
        if self.num_tokens_cache_directory is None:
            return None
        path = Path(self.num_tokens_cache_directory)
        return path if path.is_absolute() else Path(self.data_directory) / path
