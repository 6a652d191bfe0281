"""What the dataset generators share: where the file goes, how it is published, how errors
and progress are shown."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated

import typer
from typer.models import OptionInfo

from ado_actuators.sfttrainer.catalog.datasets import DatasetShape
from ado_actuators.sfttrainer.cli.errors import UsageError, one_line_errors
from ado_actuators.sfttrainer.host.atomic import replacing


# The options' metadata, for `Annotated[Path | None, ...]` in each generator: a type alias a
# function returned would be invisible to a type checker.
def output_option(suffix: str) -> OptionInfo:
    """`-o/--output FILE` of a generator writing `suffix` files."""
    return typer.Option("-o", "--output", metavar="FILE", help=f"The {suffix} file to write.")


def output_dir_option(suffix: str) -> OptionInfo:
    return typer.Option(
        "--output-dir",
        metavar="DIR",
        help=f"Instead of -o: write DIR/<dataset-id>{suffix}, the name the actuator looks for.",
    )


EntriesOption = Annotated[
    int | None, typer.Option(metavar="N", help="Number of entries (default: the dataset's own).")
]
SeedOption = Annotated[int, typer.Option(metavar="N", help="Random seed.")]


MAX_ENTRY_LENGTH = 1 << 20
"""Cap of --chars and --min-tokens: 8x the longest shape (128k tokens). Past it a typo (an
extra digit or three) would fill the disk or never finish instead of being reported."""


def check_length(option: str, value: int | None, low: int) -> None:
    if value is not None and not low <= value <= MAX_ENTRY_LENGTH:
        raise UsageError(f"{option} {value}: give a number >= {low} and <= {MAX_ENTRY_LENGTH}")


def resolve_output(output: Path | None, output_dir: Path | None, shape: DatasetShape) -> Path:
    """`-o FILE`, or `--output-dir DIR` with the file name the actuator looks for."""
    if output is not None and output_dir is not None:
        raise UsageError("give either -o/--output FILE or --output-dir DIR, not both")
    if output is not None:
        path = output
    elif output_dir is not None:
        path = output_dir / shape.filename
    else:
        raise UsageError(
            f"no output given; add -o FILE (e.g. -o ./{shape.filename}) or --output-dir DIR"
        )
    if path.is_dir():
        raise UsageError(
            f"-o/--output {str(path)!r} is a directory; give a file path or use --output-dir"
        )
    return path


@contextlib.contextmanager
def published_atomically(path: Path) -> Iterator[Path]:
    """Yields a temporary path beside `path`; renames it to `path` only if the block
    completes, so a file under the final name is always a whole dataset (host/atomic.py). A
    place that cannot be written is the user's to change, so it is said as a usage error."""
    with contextlib.ExitStack() as publishing:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = publishing.enter_context(replacing(path))
        except OSError as err:
            raise UsageError(
                f"cannot write {str(path)!r} ({err.strerror or err}); choose a writable location "
                "with -o/--output or --output-dir"
            ) from None
        yield partial


def progress_bar(path: Path):
    """A rich progress bar on stderr; silent when stderr is no terminal (e.g. a Ray job)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    console = Console(stderr=True)
    return Progress(
        TextColumn(f"[bold]{path.name}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=not console.is_terminal,
        transient=False,
    )


def report_errors(write: Callable[[], str], target: Path | None) -> None:
    """Runs `write` (which returns the success line), its failures each one line."""
    with one_line_errors(target, "Interrupted; no dataset file was written."):
        done = write()
    typer.echo(done, err=True)
