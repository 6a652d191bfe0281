"""The TrainerCallback that measures: step timings, dataset tokens, early stop, HF's end metrics.

Step boundaries are HF's own: on_step_begin fires before the first micro-batch of an
optimisation step (after the step's micro-batches were fetched), on_step_end after the
optimizer step. train_runtime, computed later, is last end - first start, so the logging and
data loading between steps fall inside it. A step's end is stamped once the GPU has finished
it (CUDA kernels run asynchronously); Hugging Face's own loss logging syncs every step anyway,
so the wait costs nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from transformers import TrainerCallback

from ado_actuators.sfttrainer.contract.trainer_io import HfTrainMetrics, ModelParameters, StepTiming
from ado_actuators.sfttrainer.stopping.policy import StopPolicy
from ado_actuators.sfttrainer.trainer import adapt, cuda, model_size, stopping
from ado_actuators.sfttrainer.trainer.faults import Fault
from ado_actuators.sfttrainer.trainer.monitor import SystemMonitor
from ado_actuators.sfttrainer.trainer.tokens import TokenMeter

HF_METRIC_NAMES = tuple(HfTrainMetrics.model_fields)


class MeasurementCallback(TrainerCallback):
    def __init__(
        self,
        *,
        meter: TokenMeter,
        policy: StopPolicy,
        monitor: SystemMonitor | None = None,
        fault: Fault | None = None,
        appends_eos: bool = False,
        align_prompt_logits: bool = False,
        heartbeat: Path | None = None,
        synchronize: Callable[[int], None] = cuda.synchronize,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.meter, self.policy, self.monitor, self.fault = meter, policy, monitor, fault
        self.appends_eos = appends_eos
        self.align_prompt_logits = align_prompt_logits
        # Touched every step: the watchdog's sign of progress on a node whose ranks print
        # nothing (only global rank 0 shows a progress bar; other nodes' logs stay quiet).
        self.heartbeat = heartbeat
        self.synchronize, self.clock = synchronize, clock
        self.steps: list[StepTiming] = []
        self.hf_metrics = HfTrainMetrics()
        self.stopped_by: str | None = None
        self.notes: list[str] = []
        self.model_parameters: ModelParameters | None = None
        self.mamba_scan_path: str | None = None
        self._step_start: float | None = None

    def on_init_end(self, args, state, control, **kwargs):
        # before accelerate wraps (FSDP would shard the parameters being counted)
        if (model := kwargs.get("model")) is not None:
            self.model_parameters = model_size.parameters_of_model(model)

    def on_train_begin(self, args, state, control, **kwargs):
        processing = kwargs.get("processing_class") or kwargs.get("tokenizer")
        tokenizer = getattr(processing, "tokenizer", processing)  # a vision processor wraps one
        if self.appends_eos and tokenizer is not None:
            self.meter.appended_eos_id = tokenizer.eos_token_id
        if (placed := kwargs.get("model")) is not None:
            if processing is not tokenizer:
                self.meter.image_token_id = model_size.image_token_id(placed)
                self.meter.tiles_of = model_size.tile_counter(placed)
            self.mamba_scan_path = model_size.mamba_scan_path(placed)
            if self.mamba_scan_path:
                self.notes.append(model_size.MAMBA_PATH_NOTES[self.mamba_scan_path])
        model = kwargs.get("model") if self.align_prompt_logits else None
        if model is not None and (note := adapt.align_prompt_learning_logits(model)):
            self.notes.append(note)
        if self.monitor is not None:
            self.monitor.start()

    def on_step_begin(self, args, state, control, **kwargs):
        self._step_start = self.clock()
        self.meter.take()  # nothing counted outside a step belongs to this one
        self.policy.begin(self._step_start)
        if self.monitor is not None and len(self.steps) == self.policy.warmup_steps:
            # the first step of the measured window (again, when warm-up just ended)
            self.monitor.mark_window_start(self._step_start)
        if self.fault is not None:
            self.fault.maybe_fire(state.global_step + 1, args.process_index)

    def on_step_end(self, args, state, control, **kwargs):
        self.synchronize(getattr(args, "n_gpu", 1))
        if self.monitor is not None:
            self.monitor.sample_if_window_has_none()
        end = self.clock()
        start = self._step_start if self._step_start is not None else end
        counts = self.meter.take()
        self.steps.append(
            StepTiming(
                step=state.global_step,
                start=start,
                end=end,
                dataset_tokens=counts.dataset_tokens,
                samples=counts.samples,
                padded_tokens=counts.padded_tokens,
                sequence_tokens_squared=counts.sequence_tokens_squared,
                loss=counts.loss,
                labelled_tokens=counts.labelled_tokens,
                image_tokens=counts.image_tokens,
                image_tiles=counts.image_tiles,
            )
        )
        self._step_start = None
        if self.heartbeat is not None:
            self.heartbeat.touch()
        if self.monitor is not None:
            self.monitor.mark_window_end(end)
        if not self.policy.synchronised:
            return
        tokens = counts.dataset_tokens
        if self.policy.shares_steps:
            start, end, tokens = stopping.shared_step(start, end, tokens, device=args.device)
        decision = stopping.agree(self.policy.propose(start, end, tokens), device=args.device)
        self.policy.commit(end, decision)
        if decision.stop:
            control.should_training_stop = True
            if state.max_steps <= 0 or state.global_step < state.max_steps:
                self.stopped_by = self.policy.reason

    def on_log(self, args, state, control, logs=None, **kwargs):
        for name in HF_METRIC_NAMES:
            if logs and name in logs:
                setattr(self.hf_metrics, name, float(logs[name]))

    def on_train_end(self, args, state, control, **kwargs):
        if self.monitor is not None:
            self.monitor.stop()
