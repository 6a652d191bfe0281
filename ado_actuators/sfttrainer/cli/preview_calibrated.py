"""`sfttrainer_preview --calibrate-from MEASURED`'s section: per device, how many measured rows
calibrated it and by what factor, then each configuration's calibrated prediction with its
interval. Every figure is a prediction."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence

from ado_actuators.sfttrainer.catalog.experiments import short_name
from ado_actuators.sfttrainer.space.calibrated import CalibratedRow, Calibration

LINE = 88
"""Columns a device's line is wrapped at; its configurations' lines are indented two spaces,
its continuation four."""


def _configuration(line: CalibratedRow) -> str:
    values = line.row.effective or line.row.entity
    gpus = values.get("number_gpus")
    return (
        f"{short_name(line.row.experiment)}, {values.get('model_name')}, "
        f"{'CPU' if gpus in (0, None) else f'{gpus} GPUs'}, "
        f"{values.get('model_max_length')} tokens, batch {values.get('batch_size')}"
    )


def _device_line(device: str, found: Calibration) -> str:
    if found.rows == 0:
        return f"{device or 'no gpu_model'}: no measured row, the speed model alone"
    factors = ", ".join(f"{short_name(m)} x{found.factor(m):.2f}" for m in found.methods)
    if found.attention_sd > 0:  # its kernel's rate against the priced one's, as the rows say
        factors += f", attention x{found.attention_factor:.2f}"
    if found.link_sd > 0:  # the node's bus bandwidth against the table's, as the rows say
        factors += f", link x{found.link_factor:.2f}"
    if found.beside_sd > 0:  # how much of the traffic the compute hides, as the rows say
        factors += f", collectives overlapped {found.overlapped_share:.0%}"
    rows = f"{found.rows} measured row{'s' if found.rows != 1 else ''}"
    # the rows here name no answer group: their group's and subgroup's spreads are theirs too
    strays = math.sqrt(found.spread**2 + found.group_sd**2 + found.subgroup_sd**2)
    return f"{device}: {rows}, {factors}, one row strays {strays:.0%}"


def lines(
    rows: Sequence[CalibratedRow], calibrations: Mapping[str, Calibration], source: str
) -> list[str]:
    """Per device its calibration, then its configurations: tokens/s per GPU (interval)."""
    found = [f"Calibrated on {source}; tokens/s per GPU, predicted (95 % interval):"]
    for device, calibration in sorted(calibrations.items()):
        mine = [line for line in rows if line.device == device and line.interval is not None]
        if not mine:
            continue
        # wrapped where a terminal (and the docs' code blocks) would, under the device's name
        found += textwrap.wrap(_device_line(device, calibration), LINE, subsequent_indent="    ")
        for line in mine:
            i = line.interval
            assert i is not None
            found.append(f"  {_configuration(line)}: {i.central:,.0f} ({i.low:,.0f}-{i.high:,.0f})")
    return found
