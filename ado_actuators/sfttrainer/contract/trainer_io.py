"""The two documents that cross the boundary between the actuator and the trainer process.

`TrainerJob` goes in (a JSON file named on the trainer's command line), one `RankReport`
per rank comes out (a JSON file per rank in `TrainerJob.report_dir`). Both sides import
this module, so it imports nothing but pydantic (and host/'s atomic write, standard library
only).
"""

from __future__ import annotations

import enum
from pathlib import Path

import pydantic

from ado_actuators.sfttrainer.contract.workspace import ReportDirectory
from ado_actuators.sfttrainer.host.atomic import write_atomically

JOB_FLAG = "--sfttrainer_job"
"""The trainer wrapper's own flag; every other argument belongs to fms-hf-tuning."""

FAULT_ENV = "SFTTRAINER_INJECT_FAULT"
"""Test hook, read by the trainer: `KIND@STEP` with KIND in `FaultKind` (e.g. `exception@2`),
every rank at the start of optimisation step STEP; `KIND@STEP@RANK` (e.g. `kill@2@1`): that
global rank only."""


class FaultKind(enum.StrEnum):
    EXCEPTION = "exception"  # a plain RuntimeError: a trainer crash
    OOM = "oom"  # torch.cuda.OutOfMemoryError, as a GPU would raise it
    ILLEGAL_MEMORY = "illegal_memory"  # RuntimeError: CUDA error: an illegal memory access ...
    KILL = "kill"  # SIGKILL to the rank's own process: nothing is reported
    HANG = "hang"  # the rank sleeps forever: the watchdog must end it


class RankOutcome(enum.StrEnum):
    """How one rank's training ended, as its report says."""

    OK = "ok"
    GPU_OOM = "gpu_oom"  # the spec's "invalid due to GPU memory exhaustion"
    ERROR = "error"


class RaceAgainst(pydantic.BaseModel):
    """The answer group's measured fastest a run races (stopping/racing.py): its whole-run tokens/s
    and 95 % half-width in percent (None: no interval, its figure is its lower bound), the
    configuration that measured it, and whether possible ties are still wanted."""

    model_config = pydantic.ConfigDict(extra="forbid")

    speed: float = pydantic.Field(gt=0)
    ci95_percent: float | None = pydantic.Field(default=None, ge=0)
    incumbent: str = pydantic.Field(description="What the reason names: the fastest's values.")
    measure_ties: bool = True


class TrainerJob(pydantic.BaseModel):
    """What the trainer wrapper needs besides fms-hf-tuning's own arguments."""

    model_config = pydantic.ConfigDict(extra="forbid")

    report_dir: Path
    aim_repo: str | None = pydantic.Field(
        default=None, description="Path or aim:// URL; None disables AIM recording."
    )
    aim_experiment: str = "sfttrainer"
    run_labels: dict[str, str] = pydantic.Field(
        default_factory=dict, description="Recorded as AIM run params (entity, experiment)."
    )
    stop_after_seconds: float = -1.0
    auto_stop_method: str | None = None
    auto_stop_max_seconds: float | None = pydantic.Field(
        default=None, description="STEADY_CI95_1PCT's cap; None: the method's default."
    )
    race: RaceAgainst | None = pydantic.Field(
        default=None,
        description="Stop once this run cannot win its group (STEADY_CI95_1PCT only); None: "
        "measure to the method's own end.",
    )
    sample_interval_seconds: float = 0.5
    gpu_indices: list[int] = pydantic.Field(
        default_factory=list, description="Node-local GPU indices this measurement uses."
    )


class AutoStopOutcome(pydantic.BaseModel):
    """How an adaptive stop method (STEADY_CI95_1PCT) ended: whether it found a steady state
    and reached its target, or was cut short, and the interval it judged last."""

    model_config = pydantic.ConfigDict(extra="forbid")

    method: str
    target_percent: float
    max_seconds: float
    steady_state_found: bool
    target_reached: bool
    ended_by: str = pydantic.Field(
        description="'target': the interval reached the target; 'cap': max_seconds passed first; "
        "'other limit': another limit (stop_after_seconds) stopped it; 'training end': the "
        "training's own end (max_steps, epochs) came first (a race lost: RankReport.race)."
    )
    ci95_percent: float | None = pydantic.Field(
        default=None, description="The relative half-width the method judged at its last step."
    )
    warmup_steps: int = 0
    measured_steps: int = 0


class RaceOutcome(pydantic.BaseModel):
    """How a run that raced its group's measured fastest (RaceAgainst) lost: why, naming the
    incumbent and the margin, how far behind it was, and the training seconds its stop method
    would still have spent (what racing saved)."""

    model_config = pydantic.ConfigDict(extra="forbid")

    reason: str
    behind_percent: float
    saved_seconds: float = pydantic.Field(ge=0)


class StepTiming(pydantic.BaseModel):
    # a loss of NaN or inf must come back as one, not as null (pydantic's default in JSON)
    model_config = pydantic.ConfigDict(ser_json_inf_nan="strings")

    step: int  # global optimisation step, 1-based
    start: float  # wall-clock seconds (time.time())
    end: float
    dataset_tokens: int  # non-padding tokens this rank consumed in the step
    samples: int = 0  # sequences (dataset entries) this rank trained in the step
    padded_tokens: int = 0  # positions of the batches, padding included (HF's token figure)
    sequence_tokens_squared: int = 0  # sum over sequences of (real length)^2: attention FLOPs
    loss: float | None = pydantic.Field(
        default=None,
        description="This rank's training loss of the step: what Hugging Face's training_step "
        "returned for each micro-batch, summed as HF sums it into the loss it logs (HF logs its "
        "mean over the ranks); None where training_step returned none.",
    )
    labelled_tokens: int | None = pydantic.Field(
        default=None,
        description="Positions of the step's batches with a label (not -100): what the loss is "
        "computed over; 0 when every label was masked. None where the batches carry no labels.",
    )
    image_tokens: int | None = pydantic.Field(
        default=None,
        description="Of dataset_tokens, the image tokens a vision-language model's processor "
        "expanded the step's images into. None for a model without an image token.",
    )
    image_tiles: int | None = pydantic.Field(
        default=None,
        description="Tiles the vision tower encoded in the step (each image's tiling and its "
        "base image, LLaVA-NeXT's count; the batch's padding tiles left out). None for a model "
        "without a vision tower.",
    )


class ProcessSample(pydantic.BaseModel):
    time: float
    cpu_percent: float  # of one core: 100 == one full core
    memory_percent: float  # this process's RSS as % of the node's memory
    # every process on the node since the previous sample, 100 == one full core: what the
    # others used is this less the ranks' own (None: not read)
    machine_cpu_percent: float | None = None


class GpuSample(pydantic.BaseModel):
    """One reading of one GPU. None: NVML does not support that reading on this device (a MIG
    slice reports neither utilisation nor power); it is left out, never read as 0."""

    time: float
    index: int  # node-local device index
    node: str = ""  # hostname: with several nodes, (node, index) names a GPU
    compute_percent: float | None
    memory_percent: float
    power_watts: float | None
    power_percent: float | None


class GpuSampleFailure(pydantic.BaseModel):
    """A reading of one GPU that NVML refused: the sample is missing, not zero."""

    time: float
    index: int
    node: str = ""
    error: str


class GpuEnergy(pydantic.BaseModel):
    """NVML's total-energy counter of one GPU at the measured window's start and end."""

    index: int
    node: str = ""
    start_time: float
    start_millijoules: int
    end_time: float | None = None
    end_millijoules: int | None = None

    @property
    def joules(self) -> float | None:
        if self.end_millijoules is None:
            return None
        return (self.end_millijoules - self.start_millijoules) / 1000.0


class ImageTower(pydantic.BaseModel):
    """A vision-language model's vision tower and projector, whose work is per tile of an
    image, not per token: their matmul parameters (the patch embedding's convolution
    included, the position table left out), the trainable part, the tower's layers and width,
    and the positions it attends over per tile (its patches, and a CLS token)."""

    matmul: int
    trainable_matmul: int
    layers: int
    attention_width: int
    tile_positions: int


class ModelParameters(pydantic.BaseModel):
    """The trained model's size and shape, counted in the trainer (before any sharding).

    `matmul` counts the parameters used in matrix multiplications: all of them except
    embedding tables, which are looked up (a table tied to the LM head is a matmul and
    counts). `trainable_matmul` is the part of those that gets weight gradients. A
    vision-language model's tower and projector are `image_tower`, not in these.
    """

    total: int
    trainable: int
    matmul: int
    trainable_matmul: int
    layers: int | None = None
    attention_width: int | None = None  # query heads x head dimension
    mixture_of_experts: bool = False
    image_tower: ImageTower | None = None


class GpuFacts(pydantic.BaseModel):
    """One GPU of the measurement as NVML described it when training started; None where NVML
    could not say (Machine.problems has why)."""

    index: int  # node-local CUDA index, as the job names it
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    memory_gib: float | None = None
    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    max_memory_clock_mhz: int | None = None
    power_limit_watts: float | None = None
    nvlinks: int | None = pydantic.Field(
        default=None, description="NVLink links up (0 on a GPU without NVLink)."
    )
    nvlink_to: list[str] = pydantic.Field(
        default_factory=list, description="What the links lead to: GPU, NVSwitch, ..."
    )


class GpuLink(pydantic.BaseModel):
    """How two GPUs of the measurement reach each other."""

    gpus: tuple[int, int]
    nvlink: bool | None = pydantic.Field(
        default=None, description="NVML's peer-to-peer status over NVLink is OK."
    )
    pcie_path: str | None = pydantic.Field(
        default=None,
        description="Their closest common PCIe ancestor in nvidia-smi topo -m's words: BOARD, "
        "PIX, PXB, PHB, NODE or SYS.",
    )


class Machine(pydantic.BaseModel):
    """The node a rank ran on, read once when training started (trainer/machine.py): the CPU
    always, the GPUs of the measurement through NVML where it has any."""

    model_config = pydantic.ConfigDict(extra="forbid")

    node: str
    cpu_model: str
    cpu_cores: int = pydantic.Field(description="Logical CPUs of the node.")
    cpu_physical_cores: int | None = None
    cpu_cores_usable: int = pydantic.Field(description="Logical CPUs this process may run on.")
    torch_threads: int | None = None
    memory_gib: float
    os: str
    python: str
    gpu_driver: str | None = None
    cuda_driver: str | None = pydantic.Field(
        default=None, description="The newest CUDA the driver supports (NVML)."
    )
    cuda_runtime: str | None = pydantic.Field(
        default=None, description="The CUDA runtime torch was built with and ships."
    )
    cudnn: str | None = None
    nccl: str | None = None
    gpus: list[GpuFacts] = pydantic.Field(default_factory=list)
    links: list[GpuLink] = pydantic.Field(default_factory=list)
    interconnect: str = pydantic.Field(
        description="The GPUs' links in a phrase: 'NVLink', 'PCIe (SYS)', 'one GPU', 'no GPU', ..."
    )
    problems: list[str] = pydantic.Field(
        default_factory=list, description="What NVML or torch could not say, and why."
    )


class HfTrainMetrics(pydantic.BaseModel):
    """The end-of-training figures Hugging Face's Trainer logs (heuristic, per process)."""

    train_runtime: float | None = None
    train_samples_per_second: float | None = None
    train_steps_per_second: float | None = None
    train_tokens_per_second: float | None = None


class Failure(pydantic.BaseModel):
    exception_type: str
    message: str
    traceback_tail: str = ""
    # what failed in the user's terms, with the fix, where the exception does not say it
    # (e.g. which input file is damaged); "" when the exception's message is the best there is
    cause: str = ""


class RankReport(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    rank: int
    local_rank: int
    world_size: int
    hostname: str
    outcome: RankOutcome
    failure: Failure | None = None
    steps: list[StepTiming] = pydantic.Field(default_factory=list)
    stopped_by: str | None = pydantic.Field(
        default=None, description="Why training stopped before its natural end, if it did."
    )
    auto_stop: AutoStopOutcome | None = pydantic.Field(
        default=None, description="How an adaptive auto_stop_method ended; None for the others."
    )
    race: RaceOutcome | None = pydantic.Field(
        default=None, description="Where the run stopped once it could not win; None otherwise."
    )
    warmup_steps: int = pydantic.Field(
        default=0,
        description="Leading entries of `steps` that are warm-up (auto_stop_method): exclude them, "
        "and samples taken before steps[warmup_steps].start, from throughput and system metrics.",
    )
    hf_metrics: HfTrainMetrics = pydantic.Field(default_factory=HfTrainMetrics)
    process_samples: list[ProcessSample] = pydantic.Field(default_factory=list)
    gpu_samples: list[GpuSample] = pydantic.Field(default_factory=list)
    gpu_indices: list[int] = pydantic.Field(
        default_factory=list, description="Node-local GPUs this rank was asked to sample."
    )
    gpu_sampling_problem: str | None = pydantic.Field(
        default=None, description="Why GPU sampling could not start at all (e.g. no NVML)."
    )
    gpu_sample_failures: list[GpuSampleFailure] = pydantic.Field(default_factory=list)
    gpu_energy: list[GpuEnergy] = pydantic.Field(default_factory=list)
    gpu_memory_max_allocated_bytes: int = pydantic.Field(
        default=0, description="torch.cuda.max_memory_allocated() of this rank (0 on CPU)."
    )
    model_parameters: ModelParameters | None = None
    flash_attention: bool = False
    mamba_scan_path: str | None = pydantic.Field(
        default=None,
        description="The code a hybrid's Mamba-2 layers ran: 'fused' (mamba-ssm and "
        "causal-conv1d's kernels), 'torch' (transformers' torch path); None: no Mamba layers.",
    )
    distributed_type: str | None = pydantic.Field(
        default=None,
        description="accelerate's distributed mode as it ran (FSDP, MULTI_GPU, MULTI_CPU, NO), "
        "which on CPU differs from the config's (an FSDP config runs as MULTI_CPU).",
    )
    notes: list[str] = pydantic.Field(
        default_factory=list, description="Adjustments a user should know about."
    )
    aim_run_hash: str | None = None
    versions: dict[str, str] = pydantic.Field(default_factory=dict)
    machine: Machine | None = pydantic.Field(
        default=None, description="The node's CPU and GPUs; local rank 0 of each node reads it."
    )

    @staticmethod
    def path_for(report_dir: Path, rank: int) -> Path:
        return ReportDirectory(Path(report_dir)).rank_report(rank)

    def write(self, report_dir: Path) -> Path:
        """Atomically, so a reader never sees half a report."""
        target = self.path_for(report_dir, self.rank)
        write_atomically(target, self.model_dump_json(indent=1))
        return target

    @classmethod
    def read_all(cls, report_dir: Path) -> list[RankReport]:
        return sorted(
            (
                cls.model_validate_json(p.read_text())
                for p in Path(report_dir).glob(ReportDirectory.RANK_REPORTS)
            ),
            key=lambda r: r.rank,
        )
