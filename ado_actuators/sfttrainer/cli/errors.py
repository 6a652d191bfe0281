"""How the CLIs end on bad input, a failed write or Ctrl-C: one line on stderr and an exit
status (2, 1, 130), never a traceback."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import typer


class UsageError(Exception):
    """Bad input: reported as one line, exit status 2."""


@contextlib.contextmanager
def one_line_errors(
    target: Path | None, interrupted: str, usage: tuple[type[Exception], ...] = (UsageError,)
) -> Iterator[None]:
    """`usage`: the exceptions that mean bad input; `target`: what a failed write was writing;
    `interrupted`: what Ctrl-C left behind."""
    try:
        yield
    except usage as err:
        typer.echo(f"Error: {err}", err=True)
        raise typer.Exit(2) from None
    except OSError as err:
        typer.echo(f"Error: writing {str(target)!r} failed: {err}", err=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        typer.echo(interrupted, err=True)
        raise typer.Exit(130) from None
