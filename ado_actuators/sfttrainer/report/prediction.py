"""How well the throughput predictor did on a measured space: each valid configuration's
predicted dataset tokens/s per GPU (the row's `dataset_tokens_per_second_per_gpu_predicted`,
plan/speed/step_time.py) against the measured one."""

from __future__ import annotations

import statistics

from ado_actuators.sfttrainer.contract.properties import THROUGHPUT_PER_GPU, THROUGHPUT_PREDICTED
from ado_actuators.sfttrainer.report.summary import Block, configuration, format_value
from ado_actuators.sfttrainer.report.table import Point, SpaceTable

MEASURED, PREDICTED = THROUGHPUT_PER_GPU, THROUGHPUT_PREDICTED
HEADING = "Throughput: predicted beside measured"
SHOWN = 3


def errors(table: SpaceTable) -> list[tuple[Point, float]]:
    """(point, predicted / measured - 1) of every valid configuration with both figures."""
    found = []
    for point in table.points:
        measured = point.values.get(MEASURED, (0.0,))[0]
        predicted = point.values.get(PREDICTED, (0.0,))[0]
        if point.valid and measured > 0 and predicted > 0:
            found.append((point, predicted / measured - 1))
    return found


def error_block(table: SpaceTable) -> Block | None:
    pairs = errors(table)
    if not pairs:
        return None
    absolute = sorted(abs(e) for _, e in pairs)
    p90 = absolute[min(len(absolute) - 1, round(0.9 * (len(absolute) - 1)))]
    lines = [
        f"The predictor's error on this space: median |error| "
        f"{statistics.median(absolute):.1%}, 90th percentile {p90:.1%}, over {len(pairs)} "
        f"valid configurations (dataset tokens/s per GPU, predicted ÷ measured − 1; its "
        f"constants were fitted on fms-acceleration's A100 runs, not on this space)"
    ]
    for point, error in sorted(pairs, key=lambda p: -abs(p[1]))[:SHOWN]:
        lines.append(
            f"{', '.join(point.panel.column)}, {configuration(point)}: predicted "
            f"{format_value(point.values[PREDICTED][0])}, measured "
            f"{format_value(point.values[MEASURED][0])} ({error:+.0%})"
        )
    return HEADING, lines
