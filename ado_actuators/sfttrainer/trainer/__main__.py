"""The training process: fms-hf-tuning's sft_trainer, measured, with one RankReport per rank.

    python -m ado_actuators.sfttrainer.trainer --sfttrainer_job JOB.json <sft_trainer args...>
    accelerate launch ... -m ado_actuators.sfttrainer.trainer --sfttrainer_job JOB.json ...

Every rank writes exactly one report, whatever happens after the job file is read (a SIGKILL
excepted), and exits 0 only when training succeeded (1: error, 3: GPU memory exhausted).
fms runs in the caller's working directory; its termination log goes to the report dir.
"""

from __future__ import annotations

if __name__ == "__main__":
    # Before the imports below, which take seconds on busy cores: a launcher SIGKILLed in that
    # window would leave this rank training on, holding GPUs and a dead rendezvous.
    from ado_actuators.sfttrainer.host.pdeathsig import die_with_executor

    die_with_executor()

import contextlib
import datetime
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ado_actuators.sfttrainer.contract.trainer_io import (
    JOB_FLAG,
    RankOutcome,
    RankReport,
    TrainerJob,
)
from ado_actuators.sfttrainer.contract.workspace import ReportDirectory
from ado_actuators.sfttrainer.host.pdeathsig import die_with
from ado_actuators.sfttrainer.stopping.methods import make_policy
from ado_actuators.sfttrainer.stopping.policy import StopPolicy
from ado_actuators.sfttrainer.trainer import adapt, cuda, fms, lazy_dataset
from ado_actuators.sfttrainer.trainer.callback import MeasurementCallback
from ado_actuators.sfttrainer.trainer.failures import classify
from ado_actuators.sfttrainer.trainer.faults import Fault
from ado_actuators.sfttrainer.trainer.identity import (
    RankIdentity,
    accelerate_distributed_type,
    library_versions,
)
from ado_actuators.sfttrainer.trainer.monitor import SystemMonitor
from ado_actuators.sfttrainer.trainer.tokens import TokenMeter

if TYPE_CHECKING:  # aim is imported only by the rank that records (_open_aim)
    from ado_actuators.sfttrainer.trainer.aim_run import AimRecorder

log = logging.getLogger("ado_actuators.sfttrainer.trainer")

EXIT_CODES = {RankOutcome.OK: 0, RankOutcome.ERROR: 1, RankOutcome.GPU_OOM: 3}
USAGE_EXIT_CODE = 2
FINAL_BARRIER_SECONDS = 120


class Terminated(Exception):
    """SIGTERM (e.g. from accelerate when a peer rank died) while training."""


def split_argv(argv: list[str]) -> tuple[Path, list[str]]:
    """Takes `--sfttrainer_job PATH` (or `=PATH`) out; the rest is fms-hf-tuning's."""
    rest, job = [], None
    it = iter(argv)
    for arg in it:
        if arg == JOB_FLAG:
            job = next(it, None)
            if job is None:
                raise ValueError(f"{JOB_FLAG} needs a path")
        elif arg.startswith(JOB_FLAG + "="):
            job = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    if not job:
        raise ValueError(f"missing {JOB_FLAG} JOB.json")
    return Path(job), rest


def _raise_terminated(signum, frame):
    raise Terminated(f"terminated by signal {signal.Signals(signum).name}")


_forking_pid = os.getpid()


def _remember_forking_pid() -> None:
    global _forking_pid
    _forking_pid = os.getpid()


def _default_sigterm_in_child() -> None:
    """A process forked from a rank (datasets' `map(num_proc=N)` pool in fms-hf-tuning 2.x)
    must die of SIGTERM as usual: with the rank's handler inherited, a pool worker blocked on
    its task queue ignores the pool's terminate() and the rank waits in join() for ever.

    It must also die with the rank: the kernel clears the parent-death signal on fork, and a
    pool worker of a rank SIGKILLed with its Ray worker (ado killed mid-operation) waited on
    its queue's semaphore for ever (seen once in the overnight test)."""
    if signal.getsignal(signal.SIGTERM) is _raise_terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with(_forking_pid)


os.register_at_fork(before=_remember_forking_pid, after_in_child=_default_sigterm_in_child)


@contextlib.contextmanager
def sigterm_raises():
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Measurement:
    """One rank's training run and everything measured about it."""

    def __init__(self, job: TrainerJob, ident: RankIdentity) -> None:
        self.job, self.ident = job, ident
        self.report = RankReport(
            rank=ident.rank,
            local_rank=ident.local_rank,
            world_size=ident.world_size,
            hostname=ident.hostname,
            outcome=RankOutcome.ERROR,
            versions=library_versions(),
        )
        self.aim: AimRecorder | None = None
        self.policy: StopPolicy | None = None
        self.monitor: SystemMonitor | None = None
        self.callback: MeasurementCallback | None = None

    def run(self, fms_argv: list[str]) -> None:
        notes = self.report.notes
        fault = Fault.from_env(repeat=self.job.run_labels.get("repeat"))
        adapt.require_cuda_for_gpus(self.job.gpu_indices)
        if note := adapt.use_cpu_for_multi_process(self.ident.world_size):
            notes.append(note)
        args = fms.parse(fms_argv)
        adapt.refuse_ignored_arguments(args.ignored, self.report.versions.get("fms-hf-tuning"))
        for note in (
            adapt.check_flash_attention(args.model_args),
            adapt.same_shuffle_on_every_rank(args.train_args, self.ident.world_size),
            adapt.keep_the_vision_columns(args.data_args, args.train_args),
        ):
            if note:
                notes.append(note)
        self.report.flash_attention = bool(args.model_args.use_flash_attn)
        self.policy = policy = make_policy(
            self.job.stop_after_seconds,
            self.job.auto_stop_method,
            self.job.auto_stop_max_seconds,
            self.job.race,
        )
        self._open_aim()
        # local rank 0 samples the node's GPUs of this measurement
        self.report.gpu_indices = list(self.job.gpu_indices) if self.ident.local_rank == 0 else []
        self.monitor = SystemMonitor(
            self.job.sample_interval_seconds,
            gpu_indices=self.report.gpu_indices,
            on_process_sample=self.aim.record_process if self.aim else None,
            on_gpu_samples=self.aim.record_gpus if self.aim else None,
            describe_machine=self.ident.local_rank == 0,  # one description per node
        )
        meter = TokenMeter()
        self.callback = MeasurementCallback(
            meter=meter,
            policy=policy,
            monitor=self.monitor,
            fault=fault,
            appends_eos=fms.appends_eos(args),
            align_prompt_logits=fms.PROMPT_LOGITS_NEED_ALIGNMENT,
            heartbeat=ReportDirectory(self.job.report_dir).heartbeat(self.ident.rank),
        )
        data: contextlib.AbstractContextManager[lazy_dataset.LazyData | None]
        data = contextlib.nullcontext(None)
        if self.job.stop_after_seconds > 0 and args.train_args.max_steps <= 0:
            workdir = self.job.report_dir.parent
            data = lazy_dataset.installed(args, self.ident.world_size, self.ident.rank, workdir)
        with meter.installed(), data as lazy:
            try:
                fms.train(args, [self.callback])
            finally:
                notes.extend(lazy.summary() if lazy else [])

    def _open_aim(self) -> None:
        # one writer per node: a second process opening the repo fails on RocksDB's LOCK
        if not self.job.aim_repo or self.ident.local_rank != 0:
            return
        try:
            from ado_actuators.sfttrainer.trainer.aim_run import AimRecorder

            self.aim = AimRecorder(self.job, self.ident.rank)
            self.report.aim_run_hash = self.aim.hash
        except Exception as e:  # recording is secondary: the report still carries every sample
            self.report.notes.append(f"AIM recording disabled: {type(e).__name__}: {e}")

    def finish(self) -> None:
        """Collects what was measured into the report; safe after any failure."""
        report = self.report
        report.distributed_type = accelerate_distributed_type()
        if self.monitor is not None:
            self.monitor.stop()  # already stopped at train end unless training raised
            report.process_samples = self.monitor.process_samples
            report.gpu_samples = self.monitor.gpu_samples
            report.gpu_sample_failures = self.monitor.gpu_sample_failures
            report.gpu_sampling_problem = self.monitor.gpu_problem
            report.gpu_energy = list(self.monitor.gpu_energy.values())
            report.machine = self.monitor.machine
            report.notes.extend(self.monitor.notes)
        if self.callback is not None:
            report.steps = self.callback.steps
            report.hf_metrics = self.callback.hf_metrics
            report.stopped_by = self.callback.stopped_by
            assert self.policy is not None  # made before the callback
            report.warmup_steps = self.policy.warmup_steps
            report.auto_stop = self.policy.outcome()
            report.race = self.policy.race_outcome()
            report.model_parameters = self.callback.model_parameters
            report.mamba_scan_path = self.callback.mamba_scan_path
            report.notes.extend(self.callback.notes)
        report.gpu_memory_max_allocated_bytes = cuda.max_memory_allocated()
        if self.aim is not None:
            with contextlib.suppress(Exception):
                self.aim.record_params(outcome=report.outcome.value)
            self.aim.close()


def _finish_distributed(ok: bool, exit_code: int) -> None:
    """Leaves the process group cleanly; called after the report is written.

    Without a final barrier + destroy, a rank sometimes dies at exit with "terminate called
    without an active exception". After a failure peers may be gone or blocked in another
    collective, where a barrier could hang and group teardown can abort: exit at once.
    """
    if "torch" not in sys.modules:
        return
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    if not ok:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exit_code)
    try:
        if dist.get_backend() == "gloo":
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=FINAL_BARRIER_SECONDS))
        else:
            dist.barrier()
        dist.destroy_process_group()
    except Exception as e:  # a peer that failed late: our own report already says OK
        log.warning("final barrier failed: %s", e)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exit_code)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        job_path, fms_argv = split_argv(argv)
        job = TrainerJob.model_validate_json(job_path.read_text())
    except (ValueError, OSError) as e:
        print(f"sfttrainer: {e}", file=sys.stderr)
        return USAGE_EXIT_CODE

    job.report_dir.mkdir(parents=True, exist_ok=True)
    # fms appends errors to ./error.log otherwise
    os.environ.setdefault(
        "TERMINATION_LOG_FILE", str(ReportDirectory(job.report_dir).termination_log)
    )
    measurement = Measurement(job, RankIdentity.from_env())
    report = measurement.report
    with sigterm_raises():
        try:
            measurement.run(fms_argv)
            report.outcome = RankOutcome.OK
        except BaseException as exc:  # SystemExit from argparse and Terminated included
            # The launcher's SIGTERM often follows a peer's failure while this rank is still
            # describing its own (a collective with the dead peer failed): raised here, it
            # would leave the report an error without its reason. The rank is ending anyway.
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            report.outcome, report.failure = classify(exc)
            failure = report.failure
            log.error(
                "training failed (%s): %s", report.outcome.value, failure.cause or failure.message
            )
        finally:
            try:
                measurement.finish()
            finally:
                report.write(job.report_dir)
    exit_code = EXIT_CODES[report.outcome]
    _finish_distributed(report.outcome is RankOutcome.OK, exit_code)
    return exit_code


def exit_without_teardown(code: int):
    """Ends the process as the interpreter would, minus freeing every module and object.

    With torch, transformers and AIM loaded that teardown takes seconds (3-8 s measured on 2
    cores) after the report is written, and the measurement waits for the exit. Threads are
    joined and atexit handlers run (logging's flush, AIM's, accelerate's), as at a normal exit.
    """
    import atexit
    import threading

    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_without_teardown(main())
