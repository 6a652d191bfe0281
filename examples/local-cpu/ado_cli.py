"""Drive the real `ado` CLI (the demo and the end-to-end tests share this)."""

from __future__ import annotations

import csv
import dataclasses
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

_CREATED = re.compile(r"Created .*? with identifier:? (\S+)")


class AdoError(RuntimeError):
    pass


@dataclasses.dataclass
class AdoCLI:
    """ado with its state (XDG_CONFIG_HOME) in `home`, so no user context is touched."""

    home: Path
    extra_env: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def executable(self) -> str:
        beside_python = Path(sys.executable).with_name("ado")
        return str(beside_python) if beside_python.exists() else (shutil.which("ado") or "ado")

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "XDG_CONFIG_HOME": str(self.home), **self.extra_env}

    def run(
        self, *args: str, check: bool = True, timeout: float = 1800
    ) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [self.executable, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if check and result.returncode != 0:
            raise AdoError(
                f"ado {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
            )
        return result

    def create(self, kind: str, path: Path, *extra: str) -> str:
        result = self.run("create", kind, "-f", str(path), *extra)
        found = _CREATED.search(result.stdout + result.stderr)
        if not found:
            raise AdoError(f"no identifier in the output of ado create {kind}:\n{result.stdout}")
        return found.group(1)

    def measurements(self, space_id: str) -> list[dict[str, str]]:
        """One row per measured entity, columns named by target property."""
        target = self.home / f"measurements-{space_id}.csv"
        self.run(
            "show",
            "measurements",
            "space",
            space_id,
            "-o",
            "csv",
            "--property-format",
            "target",
            "--output-file",
            str(target),
        )
        if not target.exists():  # ado writes no file for a space without measurements
            return []
        with target.open(newline="") as handle:
            return list(csv.DictReader(handle))


def _generate(kind: str, directory: Path, dataset_id: str, entries: int, *more: str) -> None:
    """The shipped generator of `kind` (text, vision) writing `dataset_id` with `entries`
    entries where the actuator looks for it, as a user prepares a cluster."""
    subprocess.run(
        [
            str(Path(sys.executable).with_name(f"sfttrainer_generate_dataset_{kind}")),
            "--dataset-id",
            dataset_id,
            "--entries",
            str(entries),
            "--output-dir",
            str(directory),
            *more,
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )


def generate_text_dataset(directory: Path, dataset_id: str, entries: int) -> Path:
    """Write the text dataset `dataset_id` with `entries` entries; returns the file."""
    _generate("text", directory, dataset_id, entries)
    return directory / f"{dataset_id}.jsonl"


def generate_vision_dataset(
    directory: Path, dataset_id: str, entries: int, min_tokens: int = 24
) -> Path:
    """Write the vision dataset `dataset_id` with `entries` entries of at least `min_tokens`
    tokens of text; returns the file (the e2e and the vision demo keep the text short: a CPU
    trains it)."""
    _generate("vision", directory, dataset_id, entries, "--min-tokens", str(min_tokens))
    return directory / f"{dataset_id}.parquet"
