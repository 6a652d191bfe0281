"""The step time's reading of FSDP's backward under reentrant recompute, against torch's FSDP
itself (plan/speed/step_time.FsdpTraffic.waited, inside_reentrant_checkpoint): two CPU ranks over gloo run a
stack of FSDP units checkpointed as transformers checkpoints them and report the order in which
the backward issues each unit's all-gathers and reduce-scatters."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
PROBE = Path(__file__).resolve().parents[1] / "fsdp_prefetch_probe.py"


def _positions(order: list[list], kind: str, unit: int) -> list[int]:
    return [i for i, (what, which) in enumerate(order) if (what, which) == (kind, unit)]


def test_inside_a_reentrant_checkpoint_each_gather_waits_behind_the_reduce_before_it(tmp_path):
    out = tmp_path / "order.json"
    subprocess.run([sys.executable, str(PROBE), str(out)], check=True, timeout=300)
    found = json.loads(out.read_text())
    layers, orders = found["layers"], found["orders"]
    assert set(orders) == {
        "model reentrant",
        "model non_reentrant",
        "layer reentrant",
        "layer non_reentrant",
    }
    for name, order in orders.items():
        for unit in range(1, layers):
            gathers = _positions(order, "gather", unit - 1)
            reduced = _positions(order, "reduce", unit)
            assert len(reduced) == 1, (name, unit)
            if name == "model reentrant":
                # gathered for the recompute and again for the backward, after the reduce before
                assert len(gathers) == 2, (name, unit)
                assert reduced[0] < gathers[0], (name, unit)
            else:  # prefetched from the pre-backward hook of the unit after it
                assert len(gathers) == 1, (name, unit)
                assert gathers[0] < reduced[0], (name, unit)
