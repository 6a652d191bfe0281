"""What the tests that run `ado create operation` read back: the operation's identifier, its
recorded requests (the trace) and what it left running."""

from __future__ import annotations

import csv
import os
import time
from pathlib import Path

import psutil
from ado_cli import AdoCLI


def operation_id(output: str) -> str:
    return output.split("Created operation with identifier ")[1].split()[0]


def run_operation(ado: AdoCLI, path: Path, **env: str) -> tuple[str, str]:
    """(identifier, console output) of `ado create operation -f path`, with `env` added."""
    runner = AdoCLI(home=ado.home, extra_env={**ado.extra_env, **env})
    started = time.monotonic()
    result = runner.run("create", "operation", "-f", str(path), timeout=900)
    print(f"ado create operation took {time.monotonic() - started:.1f} s")  # for the record only
    output = result.stdout + result.stderr
    return operation_id(output), output


def trace(ado: AdoCLI, operation: str) -> list[dict[str, str]]:
    """One row per request the operation recorded (counted by the tests, never as a set)."""
    target = ado.home / f"trace-{operation}.csv"
    ado.run("show", "trace", "operation", operation, "-o", "csv", "--output-file", str(target))
    with target.open(newline="") as handle:
        return list(csv.DictReader(handle))


def leftover_processes(root: Path) -> list[str]:
    """Processes still running with a path of this test on their command line (trainers,
    launchers), once the operation has returned."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        line = " ".join(proc.info["cmdline"] or [])
        if str(root) in line and proc.pid != os.getpid():
            found.append(f"{proc.pid}: {line[:200]}")
    return found
