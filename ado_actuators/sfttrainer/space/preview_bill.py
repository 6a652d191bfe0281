"""The bill of a whole previewed space: its GPU-hours, those of the configurations that would
launch, what skipping the predicted OOMs saves, and, apart, model loading and package
environments. Every figure is predicted from the rows (space/preview.py)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from ado_actuators.sfttrainer.space.bill import (
    ENVIRONMENT_BUILD_SECONDS,
    LOAD_GBPS,
    START_SECONDS,
)
from ado_actuators.sfttrainer.space.preview import PreviewRow, installed_fms_hf_tuning
from ado_actuators.sfttrainer.stopping.steady import STEADY_STEPS


@dataclasses.dataclass(frozen=True)
class SpaceBill:
    configurations: int
    verdicts: dict[str, int]
    space_gpu_hours: float  # every configuration the rules allow, trained to its stop
    launched: int
    launched_gpu_hours: float  # those that would launch; a predicted OOM until it fails
    without_estimate: int  # launched rows with no predicted step time
    predicted_ooms: int
    oom_saving_gpu_hours: float  # what skip_predicted_oom saves
    skipping_ooms: bool
    load_gpu_hours: float
    environment_builds: int
    environment_hours: float

    def lines(self) -> list[str]:
        """The bill in words (the terminal, the page and the JSON say the same)."""
        counts = ", ".join(f"{n} {v}" for v, n in sorted(self.verdicts.items()))
        skip = (
            f"skip_predicted_oom is on: the {self.predicted_ooms} predicted OOMs are not launched, "
            f"saving {self.oom_saving_gpu_hours:.2f} GPU-hours"
            if self.skipping_ooms
            else f"skipping the {self.predicted_ooms} predicted OOMs (skip_predicted_oom: true) "
            f"would save {self.oom_saving_gpu_hours:.2f} GPU-hours"
        )
        missing = f" ({self.without_estimate} without an estimate)" if self.without_estimate else ""
        until = " (a predicted OOM until its first step)" if self.predicted_ooms else ""
        return [
            f"{self.configurations} configurations: {counts}.",
            f"Predicted training GPU-hours: the space {self.space_gpu_hours:.2f} (every "
            f"configuration the rules allow, to its stop); the {self.launched} that would launch "
            f"{self.launched_gpu_hours:.2f}{missing}{until}; "
            f"{skip}.",
            f"Apart: loading the models {self.load_gpu_hours:.2f} GPU-hours (the weights at "
            f"{LOAD_GBPS:g} GB/s, assumed, and {START_SECONDS:g} s to the first step); "
            f"{self.environment_builds} package environment build(s), about "
            f"{self.environment_hours:.2f} hours on the nodes ({ENVIRONMENT_BUILD_SECONDS:g} s "
            f"each; the installed fms-hf-tuning needs none).",
            "Training time per stop method: stop_after_seconds exactly; max_steps, epochs, "
            "WARMUP_60S_STABLE_120S_OR_10_STEPS (whole steps to 60 s, then to both 120 s and "
            f"10 steps) and STEADY_CI95_1PCT ({STEADY_STEPS} steps of a "
            "steady step time, at most its cap) from the "
            "predicted step time. All predicted, none measured.",
        ]

    def as_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "predicted": True, "lines": self.lines()}


def _sum(values: list[float | None]) -> float:
    return sum(v for v in values if v is not None)


def _environment_builds(rows: list[PreviewRow]) -> int:
    """One build per fms-hf-tuning version other than the installed one, on each node."""
    installed = installed_fms_hf_tuning()
    nodes: dict[str, int] = {}
    for row in rows:
        if not row.launched:
            continue
        version = str(row.effective.get("fms_hf_tuning_version") or "")
        count = int(row.effective.get("number_nodes") or 1)
        if version and version != installed:
            nodes[version] = max(nodes.get(version, 0), count)
    return sum(nodes.values())


def space_bill(rows: list[PreviewRow], settings: Any) -> SpaceBill:
    skipping = bool(getattr(settings, "skip_predicted_oom", False))
    launched = [r for r in rows if r.launched and not (skipping and r.verdict == "predicted OOM")]
    ooms = [r for r in rows if r.verdict == "predicted OOM"]
    builds = _environment_builds(launched)
    return SpaceBill(
        configurations=len(rows),
        verdicts=dict(Counter(r.verdict for r in rows)),
        space_gpu_hours=_sum([r.full_gpu_hours for r in rows]),
        launched=len(launched),
        launched_gpu_hours=_sum([r.gpu_hours for r in launched]),
        without_estimate=sum(r.gpu_hours is None for r in launched),
        predicted_ooms=len(ooms),
        oom_saving_gpu_hours=_sum([r.oom_gpu_hours for r in ooms]),
        skipping_ooms=skipping,
        load_gpu_hours=_sum([r.load_gpu_hours for r in launched]),
        environment_builds=builds,
        environment_hours=builds * ENVIRONMENT_BUILD_SECONDS / 3600,
    )
