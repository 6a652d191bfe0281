"""Puts the demo's own helpers on the import path: the tiny model builder and the ado CLI
driver live beside the demo (examples/local-cpu), outside the wheel, and the benchmarks build
the same model and drive ado the same way."""

from __future__ import annotations

import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parents[1] / "examples" / "local-cpu"
if str(DEMO) not in sys.path:
    sys.path.insert(0, str(DEMO))
