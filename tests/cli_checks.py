"""Assertions the command-line tools' tests share."""

from __future__ import annotations


def one_line_error(result, *needles: str) -> str:
    """A typer CliRunner result that failed on bad input: exit 2, one `Error:` line on
    stderr naming every needle, no traceback. Returns the line."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    err = result.stderr
    assert err.startswith("Error: ") and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err
