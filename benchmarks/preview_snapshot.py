"""The preview of fixed spaces as files, to show that a change meant to move no figure moved none.

    python benchmarks/preview_snapshot.py write DIR        # CSV and JSON per space, and timings
    python benchmarks/preview_snapshot.py compare OLD NEW  # exit 1 on the first differing file

The spaces: benchmarks/spaces/*.yaml (320 configurations over five model families; 1,024 over
the fields beyond the five axes) and the examples' GPU spaces. Each is previewed through the
console script, `sfttrainer_preview SPACE --csv --json`, in a process of its own, so the
seconds printed are what a user waits for, start-up included. To compare two commits, write a
directory with each (a `git worktree` of the older one, run with its own directory first on
PYTHONPATH) and compare them.
"""

from __future__ import annotations

import argparse
import filecmp
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SPACES = (
    *sorted((REPO / "benchmarks" / "spaces").glob("*.yaml")),
    REPO / "examples" / "preview" / "space.yaml",
    REPO / "examples" / "remote-raycluster" / "space.yaml",
)
PREVIEW = "import sys; from ado_actuators.sfttrainer.cli.preview import main; sys.exit(main())"


def name_of(space: Path) -> str:
    return f"{space.parent.name}-{space.stem}"


def write(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for space in SPACES:
        name = name_of(space)
        command = [sys.executable, "-c", PREVIEW, str(space)]
        command += ["--csv", str(directory / f"{name}.csv")]
        command += ["--json", str(directory / f"{name}.json")]
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        rows = len((directory / f"{name}.csv").read_text().splitlines()) - 1
        print(f"{name}: {rows} configurations in {time.perf_counter() - start:.2f} s")


def compare(old: Path, new: Path) -> int:
    names = sorted(p.name for p in old.iterdir() if p.suffix in (".csv", ".json"))
    differing = [n for n in names if not filecmp.cmp(old / n, new / n, shallow=False)]
    for name in names:
        print(f"{name}: {'differs' if name in differing else 'identical'}")
    return 1 if differing else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    verbs.add_parser("write").add_argument("directory", type=Path)
    both = verbs.add_parser("compare")
    both.add_argument("old", type=Path)
    both.add_argument("new", type=Path)
    arguments = parser.parse_args()
    if arguments.verb == "write":
        write(arguments.directory)
        return 0
    return compare(arguments.old, arguments.new)


if __name__ == "__main__":
    sys.exit(main())
