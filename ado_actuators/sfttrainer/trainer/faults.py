"""The FAULT_ENV test hook: `KIND@STEP` makes every rank fail at the start of optimisation step
STEP; `KIND@STEP@RANK` only the rank with that global rank (the others then see a dead peer).
For experiments that repeat a run (stability), `REPEAT:FAULT` entries, comma-separated, give
each repeat (0-based, TrainerJob.run_labels["repeat"]) its own fault; repeats not named run
clean, e.g. `0:oom@1,1:oom@1,2:exception@2`.

It lets the layers above test how they handle crashes, GPU OOMs, dead and hung ranks without
a GPU. Unset in production; a malformed value is an error, so a typo cannot silently disable
the fault a test relies on.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time

from ado_actuators.sfttrainer.contract.trainer_io import FAULT_ENV, FaultKind


@dataclasses.dataclass(frozen=True)
class Fault:
    kind: FaultKind
    step: int
    rank: int | None = None  # None: every rank

    @classmethod
    def parse(cls, value: str) -> Fault:
        parts = [p.strip() for p in value.strip().split("@")]
        try:
            kind, step, *rank = parts
            if len(rank) > 1:
                raise ValueError(value)
            fault = cls(FaultKind(kind.lower()), int(step), int(rank[0]) if rank else None)
        except ValueError:
            fault = None
        if fault is None or fault.step < 1 or (fault.rank is not None and fault.rank < 0):
            choices = ", ".join(k.value for k in FaultKind)
            raise ValueError(
                f"{FAULT_ENV}={value!r}: expected KIND@STEP or KIND@STEP@RANK, KIND in {choices}, "
                "STEP >= 1"
            )
        return fault

    @classmethod
    def from_env(cls, environ=os.environ, repeat: str | None = None) -> Fault | None:
        value = environ.get(FAULT_ENV, "").strip()
        if not value:
            return None
        if ":" not in value:
            return cls.parse(value)
        per_repeat = {}
        for entry in value.split(","):
            which, _, fault = entry.partition(":")
            if not which.strip().isdigit() or not fault.strip():
                raise ValueError(f"{FAULT_ENV}={value!r}: expected REPEAT:KIND@STEP[@RANK], ...")
            per_repeat[which.strip()] = cls.parse(fault)
        return per_repeat.get(repeat) if repeat is not None else None

    def maybe_fire(self, step: int, rank: int = 0) -> None:
        if step == self.step and self.rank in (None, rank):
            fire(self.kind, step)


def fire(kind: FaultKind, step: int) -> None:
    where = f"(injected by {FAULT_ENV} at step {step})"
    if kind is FaultKind.EXCEPTION:
        raise RuntimeError(f"Injected trainer crash {where}")
    if kind is FaultKind.OOM:
        import torch

        raise torch.cuda.OutOfMemoryError(f"CUDA out of memory. Tried to allocate 2.00 GiB {where}")
    if kind is FaultKind.ILLEGAL_MEMORY:
        raise RuntimeError(f"CUDA error: an illegal memory access was encountered {where}")
    if kind is FaultKind.KILL:
        os.kill(os.getpid(), signal.SIGKILL)
    if kind is FaultKind.HANG:
        print(f"sfttrainer: hanging {where}", file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)
