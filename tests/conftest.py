"""Shared fixtures: an isolated environment for every test session, and a tiny model built once.

Nothing here reaches a model hub or the user's home: HF_HOME, XDG_CONFIG_HOME, TMPDIR and
RAY_TMPDIR point under pytest's temporary directory, and the hub is offline. The session's
environment changes go through one session-scoped MonkeyPatch, undone at its end. Every
process a session starts is marked as its own, and what a killed session left is cleared
when the next one starts (tests/run_marks.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pytest
import run_marks

from ado_actuators.sfttrainer.contract.trainer_io import FAULT_ENV, JOB_FLAG, RankReport, TrainerJob

TRAINER_MODULE = "ado_actuators.sfttrainer.trainer"

# Variables from an outer launcher (or a developer's shell) that would change what a test runs.
_LEAKY = (
    FAULT_ENV,
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "ACCELERATE_USE_CPU",
    "TERMINATION_LOG_FILE",
    "CUDA_VISIBLE_DEVICES",
)


@pytest.fixture(scope="session", autouse=True)
def marked_run(request):
    """This session's run directory (tests/run_marks.py), once what killed sessions left is
    cleared: before any test starts anything."""
    # A pytest-xdist worker's run belongs to the controller (its parent), the process a user
    # or CI kills: once that is gone, the next session clears what the worker started even
    # while the orphaned worker still winds down, and the worker leaves its run to be cleared.
    # (workerinput, not PYTEST_XDIST_WORKER: a pytest that a test starts inherits that one)
    worker = getattr(request.config, "workerinput", {}).get("workerid")
    run = run_marks.Run.start(owner=os.getppid() if worker else None, label=worker)
    if cleared := run_marks.clear_leftovers(keep=run.directory):
        warnings.warn(
            "cleared what killed test sessions left:\n" + "\n".join(cleared), stacklevel=1
        )
    yield run
    if run.owner_alive():
        run.finish()


@pytest.fixture(scope="session", autouse=True)
def isolated_env(tmp_path_factory, marked_run):
    root = tmp_path_factory.mktemp("env")
    values = {
        "HF_HOME": root / "hf-home",
        "XDG_CONFIG_HOME": root / "xdg-config",
        "XDG_CACHE_HOME": root / "xdg-cache",
        "TMPDIR": root / "tmp",
    }
    # Ray's socket paths must stay under 107 bytes: a pytest tmp path is too deep.
    values["RAY_TMPDIR"] = Path(tempfile.mkdtemp(prefix="sft-ray-", dir="/tmp"))
    marked_run.record_path(values["RAY_TMPDIR"])
    mp = pytest.MonkeyPatch()
    mp.setenv(run_marks.MARK_ENV, str(marked_run.directory))  # inherited by all it starts
    for name, path in values.items():
        path.mkdir(parents=True, exist_ok=True)
        mp.setenv(name, str(path))
    for name, value in {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "AIM_UI_TELEMETRY_ENABLED": "0",
        "PYTHONUNBUFFERED": "1",
        # ray.init() without an address attaches to any cluster `ray start`ed on this machine
        # (a developer's, or another test run's): every test starts its own unless it says so.
        "RAY_ADDRESS": "local",
        # One thread per training: the suite runs a worker per core, and two trainings of two
        # threads each on two cores spin against each other. A tiny model's batch 16 then
        # measured 3,080 tokens/s beside another training and 45,284 alone (batch 1: 33,273
        # alone), so which configuration is fastest depended on what the other worker ran;
        # with one thread each: 29,450 beside another, 29,340 alone (batch 1: 23,539).
        "OMP_NUM_THREADS": "1",
    }.items():
        mp.setenv(name, value)
    for name in _LEAKY:
        mp.delenv(name, raising=False)
    yield root
    mp.undo()
    shutil.rmtree(values["RAY_TMPDIR"], ignore_errors=True)


@pytest.fixture
def no_network(monkeypatch):
    """Any connection attempt fails at once, as on a machine with no network."""
    import socket

    def refuse(*args, **kwargs):
        raise OSError("no network in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny-llama")


@pytest.fixture(scope="session")
def environments_dir(tmp_path_factory) -> Path:
    """Where tests build per-version fms-hf-tuning environments: once per session, shared by
    every test (environments are keyed by their packages, so a second measurement reuses the
    first's). SFTTRAINER_TEST_ENVIRONMENTS keeps them between sessions (CI caches)."""
    kept = os.environ.get("SFTTRAINER_TEST_ENVIRONMENTS")
    if kept:
        return Path(kept)
    # Under xdist each worker has a base directory of its own: their common parent shares the
    # environments between workers too, as one node's measurements share them (the actuator
    # builds each one under a file lock: a second worker waits for the first's build).
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "environments"
    shared.mkdir(exist_ok=True)
    return shared


# ---- running the trainer for real -----------------------------------------------------------


def spec_fms_args(
    model: Path,
    data: Path,
    *,
    max_steps: int = 3,
    batch_size: int = 2,
    grad_accum: int = 2,
    max_seq_length: int = 64,
    peft_method: str = "none",
    torch_dtype: str = "float32",
    log_level: str = "info",
    extra: tuple[str, ...] = (),
) -> list[str]:
    """fms-hf-tuning's command line in the shape the spec (and the actuator) uses: the
    experiments' constants, from the catalog, plus the knobs these tests turn."""
    from ado_actuators.sfttrainer.catalog.experiments import catalog_data

    constants = {**catalog_data().sft_trainer_constants, "log_level": log_level}
    return [
        "--model_name_or_path",
        str(model),
        "--torch_dtype",
        torch_dtype,
        "--use_flash_attn",
        "True",
        "--training_data_path",
        str(data),
        "--dataset_text_field",
        "output",
        "--max_steps",
        str(max_steps),
        "--per_device_train_batch_size",
        str(batch_size),
        "--max_seq_length",
        str(max_seq_length),
        "--output_dir",
        "output",
        "--gradient_accumulation_steps",
        str(grad_accum),
        "--gradient_checkpointing",
        "True",
        "--peft_method",
        peft_method,
        "--optim",
        "adamw_torch",
        "--bf16",
        "False",
        "--gradient_checkpointing_kwargs",
        '{"use_reentrant": false}',
        *(word for name, value in constants.items() for word in (f"--{name}", value)),
        *extra,
    ]


@dataclasses.dataclass
class TrainerRun:
    workdir: Path
    returncode: int
    output: str
    reports: list[RankReport]

    @property
    def report(self) -> RankReport:
        assert len(self.reports) == 1, self.describe()
        return self.reports[0]

    def describe(self) -> str:
        tail = self.output[-6000:]
        return f"exit {self.returncode}, {len(self.reports)} reports; output tail:\n{tail}"


def accelerate_ddp_config(path: Path, processes: int) -> Path:
    """The actuator's DDP config for `processes` ranks on CPU (see notes/environment.md)."""
    from ado_actuators.sfttrainer.catalog.entity import entity_values
    from ado_actuators.sfttrainer.plan.launch.accelerate import accelerate_config

    values = entity_values(
        {
            "model_name": "tiny",
            "model_max_length": 64,
            "number_gpus": processes,
            "batch_size": processes,
            "distributed_backend": "DDP",
        }
    )
    config = accelerate_config(
        values,
        processes_per_node=processes,
        machine_rank=0,
        main_process_ip=None,
        main_process_port=0,
        use_cpu=True,
    )
    # Port 0: accelerate picks a free port just before it binds it. One picked here would stay
    # free for every import of the launch, for a concurrent launch to take.
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


def start_trainer(
    workdir: Path, job: TrainerJob, fms_argv: list[str], *, processes: int = 1, env=None
) -> subprocess.Popen:
    workdir.mkdir(parents=True, exist_ok=True)
    job_path = workdir / "job.json"
    job_path.write_text(job.model_dump_json())
    if processes == 1:
        cmd = [sys.executable, "-m", TRAINER_MODULE]
    else:
        config = accelerate_ddp_config(workdir / "accelerate.yaml", processes)
        cmd = [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--config_file",
            str(config),
            "--num_processes",
            str(processes),
            "-m",
            TRAINER_MODULE,
        ]
    return subprocess.Popen(
        [*cmd, JOB_FLAG, str(job_path), *fms_argv],
        cwd=workdir,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish_trainer(
    proc: subprocess.Popen, workdir: Path, job: TrainerJob, timeout=300
) -> TrainerRun:
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        pytest.fail(f"trainer timed out after {timeout}s:\n{output[-6000:]}")
    reports = RankReport.read_all(job.report_dir) if job.report_dir.exists() else []
    return TrainerRun(workdir, proc.returncode, output, reports)


def run_trainer(workdir: Path, job: TrainerJob, fms_argv: list[str], **kwargs) -> TrainerRun:
    timeout = kwargs.pop("timeout", 300)
    return finish_trainer(start_trainer(workdir, job, fms_argv, **kwargs), workdir, job, timeout)


def spec_dataset_tokens(model: Path, data: Path, max_seq_length: int) -> list[int]:
    """The spec's note 3, per entry, computed independently of the trainer:
    min(len(tokens(entry["output"])), tokenizer.model_max_length, max_seq_length)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    counts = []
    for line in data.read_text().splitlines():
        n = len(tokenizer(json.loads(line)["output"])["input_ids"])
        counts.append(min(n, tokenizer.model_max_length, max_seq_length))
    return counts


class _Tools:
    spec_fms_args = staticmethod(spec_fms_args)
    run_trainer = staticmethod(run_trainer)
    start_trainer = staticmethod(start_trainer)
    finish_trainer = staticmethod(finish_trainer)
    spec_dataset_tokens = staticmethod(spec_dataset_tokens)


@pytest.fixture(scope="session")
def trainer_tools() -> type[_Tools]:
    """The helpers above, for (module-scoped) fixtures and tests in any test file."""
    return _Tools
