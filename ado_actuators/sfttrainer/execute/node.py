"""A measurement's part on the node this code runs on: plan, prepare, launch, collect."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pydantic

from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.contract.outcomes import Failed
from ado_actuators.sfttrainer.contract.trainer_io import RankOutcome, RankReport
from ado_actuators.sfttrainer.contract.workspace import Workspace
from ado_actuators.sfttrainer.execute import environment, gpu_exclusive, workspace
from ado_actuators.sfttrainer.execute.devices import visible_devices
from ado_actuators.sfttrainer.execute.interruptible import interruptible
from ado_actuators.sfttrainer.execute.process import ProcessResult, log_tail, run_process
from ado_actuators.sfttrainer.host import hf_cache
from ado_actuators.sfttrainer.plan.launch.launch_plan import (
    LaunchPlan,
    MeasurementInputs,
    PlanError,
    PlanInputs,
    plan_launch,
)

HUB_PROBE_SECONDS = 15
# Any one of these lets transformers build a tokenizer from a local model directory (fast,
# sentencepiece, BPE and WordPiece vocabularies); without all of them it fails obscurely
# ("Either model_file or model_proto must be specified").
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "vocab.json", "vocab.txt")


class NodeRequest(pydantic.BaseModel):
    """What a node is asked to measure: the measurement's inputs, and where and how long."""

    plan_inputs: MeasurementInputs
    output_root: Path
    label: str
    stall_timeout: float
    environment: environment.EnvironmentRequest
    allow_shared_gpus: bool = pydantic.Field(
        default=False, description="Launch even where other processes use the GPUs."
    )
    run_name: str = pydantic.Field(
        default_factory=lambda: uuid.uuid4().hex[:8],
        description="Names the measurement's directory; the same on every node of a run.",
    )

    def workdir(self, machine_rank: int, number_nodes: int) -> Path:
        """Each node its own directory, also where nodes share a filesystem."""
        return Workspace.for_node(
            self.output_root, self.label, self.run_name, machine_rank, number_nodes
        ).root


class Rendezvous(pydantic.BaseModel):
    """Where the ranks of a multi-node measurement meet: rank 0's node, a port free there."""

    ip: str
    port: int


class NodeRun(pydantic.BaseModel):
    """What one node's part of a measurement left: its ranks' reports and how it ended.

    Built on the node and returned through Ray, so nothing needs a shared filesystem."""

    machine_rank: int = 0
    hostname: str = ""
    cancelled: bool = pydantic.Field(
        default=False, description="Stopped because another node of the measurement failed."
    )
    problem: str | None = pydantic.Field(
        default=None, description="Why this node did not launch (or was stopped), if so."
    )
    returncode: int | None = None
    signal_name: str | None = None
    stopped_by_watchdog: str | None = None
    log_tail: str = ""
    reports: list[RankReport] = pydantic.Field(default_factory=list)
    workdir: str | None = None
    log_path: str | None = None
    environment: dict | None = pydantic.Field(
        default=None, description="Which environment trained (execute/environment.py)."
    )
    gpu_exclusivity: gpu_exclusive.Exclusivity | None = pydantic.Field(
        default=None, description="Other processes on this node's GPUs before launch (GPU runs)."
    )

    @property
    def succeeded(self) -> bool:
        return (
            not self.cancelled
            and self.problem is None
            and self.returncode == 0
            and all(r.outcome is RankOutcome.OK for r in self.reports)
        )


def download_hint(model_name: str, weights_format: str, location: str, hf_home: str) -> str:
    return (
        f"fetch it first: put `{model_name}: {{{weights_format}: {location}}}` in a models.yaml "
        f"and run: sfttrainer_download_hf_weights -i models.yaml -o {hf_home}"
    )


def _hub_offline() -> bool:
    """huggingface_hub fixes offline mode when imported (TRANSFORMERS_OFFLINE counts too)."""
    from huggingface_hub import constants

    return constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").lower() in (
        "1",
        "true",
        "yes",
        "on",
    )


def weights_problem(location: str, hf_home: str, hint: str) -> tuple[str | None, bool]:
    """(why the weights cannot be loaded on this node, whether they load without the hub).

    A hub id that is not cached is fine while the hub answers: the trainer fetches it.
    """
    if location.startswith(("/", ".", "~")):
        path = Path(location).expanduser()
        if not (path / "config.json").is_file():
            return (
                f"the model weights are not at {path} on {os.uname().nodename} (no "
                f"config.json); fix the model_map entry or copy the weights there"
            ), False
        if not any((path / name).is_file() for name in TOKENIZER_FILES):
            return (
                f"the model directory {path} on {os.uname().nodename} has no tokenizer file "
                f"(none of {', '.join(TOKENIZER_FILES)}): a copy cut short? copy the model's "
                f"tokenizer files there"
            ), False
        return None, True
    if hf_cache.is_cached(location, hf_home):
        return None, True
    if _hub_offline():
        return (
            f"{location} is not in the cache under {hf_home} and offline mode is on "
            f"(HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE); {hint}"
        ), False
    try:
        from huggingface_hub import HfApi

        HfApi().model_info(location, timeout=HUB_PROBE_SECONDS)
    except Exception as error:
        why = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        return (
            f"{location} is not in the cache under {hf_home} and the hub did not serve it ({why}); {hint}",
            False,
        )
    return None, False


def plan_node(
    request: NodeRequest,
    machine_rank: int,
    rendezvous: Rendezvous | None,
    *,
    python: str,
    weights_offline: bool,
) -> LaunchPlan:
    """This node's launch plan, once its inputs were checked: it touches no file and launches
    nothing (without a rendezvous it only picks a free port), so tests drive it with any request
    (tests/unit/test_fuzz_inputs.py). Raises PlanError for a request that cannot be launched."""
    values = request.plan_inputs.values
    # No aim_db, no AIM: a temporary repository would cost ~2 s per measurement (import,
    # repository creation) to be deleted unread; the rank reports carry every sample.
    return plan_launch(
        PlanInputs(
            **dict(request.plan_inputs),
            workdir=request.workdir(machine_rank, values.number_nodes),
            weights_offline=weights_offline,
            python=python,
            machine_rank=machine_rank,
            visible_devices=visible_devices(),
            main_process_ip=rendezvous.ip if rendezvous else None,
            main_process_port=rendezvous.port if rendezvous else workspace.free_port(),
        )
    )


class Prepared(pydantic.BaseModel):
    """What a node's checks and environment leave for its launch. Valid on that node only:
    `python` is a path there, so the launch must run in the same bundle."""

    machine_rank: int
    hostname: str
    python: str
    weights_offline: bool
    environment: dict
    on_gpus: bool


def prepare_node(request: NodeRequest, machine_rank: int = 0) -> Prepared | NodeRun:
    """This node's inputs checked and its environment chosen (built when missing, which may
    take minutes); a NodeRun naming the problem when the node cannot take part. Launches
    nothing, so a multi-node measurement runs it on every node before any rank starts."""
    inputs = request.plan_inputs
    values = inputs.values
    # typed `str | None` as ado hands them; catalog.domain_problems refused None before planning
    assert values.model_name is not None and values.dataset_id is not None
    here = NodeRun(machine_rank=machine_rank, hostname=os.uname().nodename)
    location, hf_home = inputs.model_location, inputs.hf_home
    hint = download_hint(values.model_name, inputs.definition.weights_format, location, hf_home)
    writes = {"hf_home": hf_home, "output_dir": str(request.output_root.parent)}
    if inputs.aim_repo and "://" not in inputs.aim_repo:
        writes["aim_db"] = inputs.aim_repo
    for setting, directory in writes.items():
        if why := workspace.unwritable(Path(directory).expanduser()):
            return here.model_copy(
                update={
                    "problem": (
                        f"{setting} {directory} cannot be written on {here.hostname} ({why}); "
                        f"set {setting} to a directory every node can write"
                    )
                }
            )
    problem, offline = weights_problem(location, hf_home, hint)
    if problem:
        return here.model_copy(update={"problem": problem})
    dataset = inputs.dataset_path
    if not dataset.is_file():
        command = " ".join(datasets.creation_command(values.dataset_id, dataset))
        return here.model_copy(
            update={
                "problem": (
                    f"dataset file {dataset} does not exist on {here.hostname}; "
                    f"create it with: {command}"
                )
            }
        )
    on_gpus = values.number_gpus > 0 and not inputs.use_cpu
    chosen = environment.choose(values, inputs.definition, request.environment, on_gpus=on_gpus)
    if isinstance(chosen, Failed):
        return here.model_copy(update={"problem": chosen.reason})
    return Prepared(
        machine_rank=machine_rank,
        hostname=here.hostname,
        python=chosen.python,
        weights_offline=offline,
        environment=chosen.metadata,
        on_gpus=on_gpus,
    )


def launch_node(
    request: NodeRequest, prepared: Prepared, rendezvous: Rendezvous | None = None
) -> NodeRun:
    """Plan, write the workspace, launch this node's ranks and collect their reports.

    A node with peers (a rendezvous) that is cancelled because another node failed (Ray's
    cooperative cancel: KeyboardInterrupt, which reaches it even in a worker that inherited
    SIGINT ignored: execute/interruptible.py) stops its ranks and still returns what they
    reported, marked cancelled: its ranks may hold the cause of the other node's failure (a
    GPU OOM here makes the peers fail first). A lone node passes the interrupt on."""
    with interruptible():
        return _launch(request, prepared, rendezvous)


def _launch(request: NodeRequest, prepared: Prepared, rendezvous: Rendezvous | None) -> NodeRun:
    machine_rank = prepared.machine_rank
    here = NodeRun(
        machine_rank=machine_rank, hostname=prepared.hostname, environment=prepared.environment
    )
    plan: LaunchPlan | None = None
    exclusivity = None
    try:
        try:
            plan = plan_node(
                request,
                machine_rank,
                rendezvous,
                python=prepared.python,
                weights_offline=prepared.weights_offline,
            )
        except PlanError as error:
            return here.model_copy(update={"problem": str(error)})
        try:
            workspace.prepare(plan)
        except workspace.MalformedDataset as error:
            return here.model_copy(update={"problem": str(error)})
        except OSError as error:
            return here.model_copy(
                update={
                    "problem": f"cannot prepare the measurement directory {plan.workdir}: {error}"
                }
            )
        if prepared.on_gpus:
            exclusivity = gpu_exclusive.check_devices(plan.job.gpu_indices)
            if exclusivity.exclusive is False and not request.allow_shared_gpus:
                return here.model_copy(
                    update={
                        "problem": gpu_exclusive.shared_problem(exclusivity, here.hostname),
                        "gpu_exclusivity": exclusivity,
                    }
                )
        result = run_process(
            plan.node.argv,
            env={**os.environ, **plan.env},
            cwd=plan.workdir,
            log_path=plan.workspace.train_log,
            stall_timeout=request.stall_timeout,
            activity_paths=(plan.workspace.reports.path,),
        )
    except KeyboardInterrupt:
        # run_process's own clean-up has stopped the ranks (each writes its report on SIGTERM)
        if rendezvous is None:
            raise
        return _collected(here, plan, None, exclusivity)
    try:
        return _collected(here, plan, result, exclusivity)
    except KeyboardInterrupt:  # cancelled as it ended by itself: its run is whole all the same
        if rendezvous is None:
            raise
        return _collected(here, plan, result, exclusivity)


def _collected(
    here: NodeRun,
    plan: LaunchPlan | None,
    result: ProcessResult | None,
    exclusivity: gpu_exclusive.Exclusivity | None,
) -> NodeRun:
    """The run as the node returns it; without a result, a run cancelled by its peers'
    failure (its launcher's exit status is then ours, not news)."""
    if plan is None:
        return here.model_copy(update={"cancelled": True})
    workspace = plan.workspace
    log_path = workspace.train_log
    ended = (
        {
            "returncode": result.returncode,
            "signal_name": result.signal_name,
            "stopped_by_watchdog": result.stopped_by_watchdog,
        }
        if result
        else {"cancelled": True}
    )
    run = here.model_copy(
        update={
            **ended,
            "log_tail": result.log_tail() if result else log_tail(log_path),
            "reports": (
                RankReport.read_all(workspace.reports.path)
                if workspace.reports.path.is_dir()
                else []
            ),
            "workdir": str(plan.workdir),
            "log_path": str(log_path),
            "gpu_exclusivity": exclusivity,
        }
    )
    if plan.training_data_path != plan.dataset_path:
        plan.training_data_path.unlink(missing_ok=True)
    shutil.rmtree(workspace.output, ignore_errors=True)
    return run


def run_node(
    request: NodeRequest, machine_rank: int = 0, rendezvous: Rendezvous | None = None
) -> NodeRun:
    """This node's whole part of the measurement in one go: prepare, then launch and collect.
    For one node (no peer to keep waiting); several nodes go stage by stage
    (execute/stages.py)."""
    prepared = prepare_node(request, machine_rank)
    if isinstance(prepared, NodeRun):
        return prepared
    return launch_node(request, prepared, rendezvous)
