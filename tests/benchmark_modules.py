"""The benchmark scripts (benchmarks/*.py) as modules a test can call: they import their siblings
by name, so benchmarks/ is on sys.path while one loads."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def benchmark(name: str) -> ModuleType:
    """benchmarks/`name`.py, imported (once: later calls return the same module)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))
