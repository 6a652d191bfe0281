"""`sfttrainer_preview --calibrate-from MEASURED`'s section: per device, how many measured rows
calibrated it and by what factor, then each configuration's calibrated prediction with its
interval. Every figure is a prediction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ado_actuators.sfttrainer.engine.calibrated import CalibratedRow, Calibration


def _configuration(line: CalibratedRow) -> str:
    values = line.row.effective or line.row.entity
    gpus = values.get("number_gpus")
    return (
        f"{line.row.experiment.split('-v')[0]}, {values.get('model_name')}, "
        f"{'CPU' if gpus in (0, None) else f'{gpus} GPUs'}, sequence length "
        f"{values.get('model_max_length')}, batch {values.get('batch_size')}"
    )


def device_lines(calibrations: Mapping[str, Calibration], source: str) -> list[str]:
    lines = [f"Calibrated on the rows measured in {source} (every figure below is a prediction):"]
    for device, found in sorted(calibrations.items()):
        factors = (
            ", ".join(f"{m.split('-v')[0]} x{found.factor(m):.2f}" for m in found.methods)
            or f"x{found.factor():.2f}"
        )
        rows = f"{found.rows} measured row{'s' if found.rows != 1 else ''}"
        what = "the speed model alone" if found.rows == 0 else f"{rows}: {factors}"
        lines.append(
            f"  {device or 'no gpu_model'}: {what}; one configuration strays about "
            f"{found.spread:.0%} from its factor"
        )
    return lines


def row_lines(rows: Sequence[CalibratedRow]) -> list[str]:
    lines = []
    for line in rows:
        if line.interval is None:
            continue
        i = line.interval
        lines.append(
            f"  {_configuration(line)}: predicted {i.central:,.0f} tokens/s per GPU, "
            f"{i.coverage:.0%} interval {i.low:,.0f}-{i.high:,.0f} "
            f"({line.device or 'no gpu_model'}, {line.rows_behind} rows)"
        )
    return lines
