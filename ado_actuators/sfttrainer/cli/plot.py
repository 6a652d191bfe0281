"""`sfttrainer_plot`: a space's measurements as a PNG and a self-contained HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ado_actuators.sfttrainer.cli.errors import one_line_errors
from ado_actuators.sfttrainer.report import gate

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

SpaceId = Annotated[
    str | None,
    typer.Argument(
        metavar="[SPACE_ID]",
        show_default=False,
        help="A stored space, read through ado's API in the active ado context (the one "
        "`ado show measurements space SPACE_ID` reads); a name ending in .csv is read as "
        "--csv FILE.",
    ),
]
CsvFile = Annotated[
    Path | None,
    typer.Option(
        "--csv",
        metavar="FILE",
        show_default=False,
        help="Instead of SPACE_ID: the CSV written by `ado show measurements space "
        "SPACE_ID -o csv --property-format target --output-file FILE`.",
    ),
]
ContextFile = Annotated[
    Path | None,
    typer.Option(
        "--context",
        "-c",
        metavar="FILE",
        show_default=False,
        help="With SPACE_ID: the ado ProjectContext file to read from, as for `ado "
        "--context FILE` (default: ado's active context).",
    ),
]
OutputDir = Annotated[
    Path, typer.Option("--output-dir", "-o", metavar="DIR", help="Where to write the files.")
]
CompareWith = Annotated[
    str | None,
    typer.Option(
        "--compare",
        metavar="OTHER",
        show_default=False,
        help="Another space to compare with, e.g. the same space measured with another "
        "fms-hf-tuning release: a CSV file (a name ending in .csv) or a space id (read like "
        "SPACE_ID, in the same context). Ratio = dataset tokens/s here / there, matched per "
        "configuration on every field except those fixed to a different value in each space; "
        "flagged where the two rows' 95 % intervals do not overlap, or, where either row has "
        "no interval, beyond ±10 %.",
    ),
]
FailOn = Annotated[
    str | None,
    typer.Option(
        "--fail-on",
        metavar="CHECKS",
        show_default=False,
        help="With --compare: exit with status 1 when any matched configuration fails one "
        "of these checks (comma-separated), printing the offending pairs; 0 otherwise. "
        + "; ".join(f"{name}: {meaning}" for name, meaning in gate.CHECKS.items())
        + ". E.g. --fail-on slower,loss in a CI job.",
    ),
]
NameStem = Annotated[
    str | None,
    typer.Option(
        "--name",
        metavar="NAME",
        show_default=False,
        help="File name stem (default: the space id, or the CSV file's stem).",
    ),
]


@app.command(
    help="Plot a space's SFTTrainer measurements: dataset tokens per second (total and per "
    "GPU) against batch size, one line per sequence length (model_max_length), one panel per "
    "number of GPUs and experiment, invalid configurations (is_valid = 0, e.g. out of GPU "
    "memory) marked with an X; step-time spread, model TFLOP/s and MFU too when the space has "
    "them; error bars are the 95 % intervals of dataset tokens/s where rows have them. Then "
    "the answers, per experiment (and model): the fastest valid configuration and those tied "
    "with it (their 95 % intervals overlap), the largest batch size that fits per number of "
    "GPUs and sequence length, with several GPU counts the scaling against perfect scaling and "
    "GPU-hours per million dataset tokens; then what the space cost: GPU-hours reserved (valid and "
    "invalid; CPU-hours apart) and the configurations skipped without launching, by rule. "
    "A valid configuration whose training loss was not finite or rose across its window is "
    "never named fastest or tied: the answers say why it was passed over. "
    "--compare OTHER adds the ratio of dataset tokens/s to another space per configuration, "
    "flagging a difference where the 95 % intervals do not overlap (over 10 % where a row has "
    "none), in validity, or in the loss: first-step losses apart beyond rounding, a loss not "
    "finite or rising in one space only; it says where the rows ran on different GPUs, "
    "drivers or library versions. --fail-on makes it a regression gate: exit status 1 when a "
    "matched configuration fails a chosen check, with the offending pairs printed, 0 otherwise. "
    "Read from SPACE_ID, each configuration whose requests failed (nothing stored, e.g. an "
    "unknown model) is listed after the answers with its reason; where every request failed, "
    "the list, then one line naming `ado show trace operation OPERATION_ID -o yaml`, exit "
    "status 2. "
    "Writes DIR/NAME.png and DIR/NAME.html (the picture "
    "embedded, plus the plotted values; no network needed to view it), prints both paths, "
    "then the answers. "
    "Examples: sfttrainer_plot space-3b2a1c-7d9e0f  |  "
    "sfttrainer_plot measurements.csv -o plots/  |  "
    "sfttrainer_plot new.csv --compare old.csv --fail-on slower,loss"
)
def plot(
    space_id: SpaceId = None,
    csv_file: CsvFile = None,
    context: ContextFile = None,
    output_dir: OutputDir = Path("."),
    compare: CompareWith = None,
    fail_on: FailOn = None,
    name: NameStem = None,
) -> None:
    from ado_actuators.sfttrainer.report import summary
    from ado_actuators.sfttrainer.report.table import TableError

    with one_line_errors(output_dir, "Interrupted; no file was left half-written.", (TableError,)):
        checks = gate.parse(fail_on) if fail_on is not None else ()
        if checks and compare is None:
            raise TableError(f"{gate.OPTION} needs --compare OTHER: it judges a comparison's pairs")
        files, comparison, failed = _plot(space_id, csv_file, context, output_dir, name, compare)
    # The paths first, one a line, so scripts can take the first two lines.
    typer.echo(files.png)
    typer.echo(files.html)
    typer.echo(files.summary)
    if space_id is not None and not space_id.endswith(".csv"):
        from ado_actuators.sfttrainer.report.guided import guided_text

        left = guided_text(space_id)
        if left is not None:
            typer.echo(left)
    if failed:
        from ado_actuators.sfttrainer.report.failures import failure_lines

        typer.echo("\n".join(failure_lines(failed)))
    if checks:
        found = gate.offences(comparison, checks)
        typer.echo(summary.as_text([summary.gate_block(checks, found, len(comparison.pairs))]))
        if found:
            raise typer.Exit(1)


def _plot(space_id, csv_file, context, output_dir, name, other):
    from ado_actuators.sfttrainer.report import compare, files, sources, table
    from ado_actuators.sfttrainer.report.guided import record_of

    if (space_id is None) == (csv_file is None):
        raise table.TableError("give either SPACE_ID or --csv FILE (exactly one)")
    if space_id is not None and space_id.endswith(".csv"):  # as --compare reads OTHER
        space_id, csv_file = None, Path(space_id)
    if csv_file is not None:
        if context is not None:
            raise table.TableError("--context applies to SPACE_ID, not to --csv FILE")
        rows, source, stem = sources.rows_from_csv(csv_file), str(csv_file), csv_file.stem
        title, failed = csv_file.name, ()
    else:
        rows, failed = sources.rows_and_failures(space_id, context)
        source, stem, title = f"space {space_id}", space_id, space_id
    stem = name or stem
    if not stem or "/" in stem or stem.startswith("."):
        raise table.TableError(f"--name {stem!r}: give a plain file name stem, e.g. my-space")
    data = _table(rows, source, failed)
    comparison = None
    if other is not None:
        other_rows = (
            sources.rows_from_csv(Path(other))
            if other.endswith(".csv")
            else sources.rows_from_space(other, context)
        )
        other_name = Path(other).name
        comparison = compare.compare(
            data, table.space_table(other_rows, f"--compare {other}"), other_name
        )
        title += f" compared with {other_name}"
    guided = None if space_id is None else record_of(space_id)
    written = files.write_report(
        data, output_dir, stem, f"SFTTrainer measurements: {title}", comparison, guided
    )
    return written, comparison, failed


def _table(rows, source, failed):
    """The space's table; where it cannot be drawn and requests failed, the failures first
    (their reasons say why nothing is there), then one line: every request failed."""
    from ado_actuators.sfttrainer.report import failures, table

    try:
        return table.space_table(rows, source)
    except table.TableError:
        if not failed:
            raise
        typer.echo("\n".join(failures.failure_lines(failed)))
        if rows:
            raise
        operations = sorted({f.operation for f in failed})
        raise table.TableError(
            f"every request of {source} failed ({len(failed)} configuration(s) listed above, "
            "none measured); the reasons in full: "
            + "; ".join(f"`{failures.trace_command(o)}`" for o in operations)
        ) from None


def main() -> None:
    app(prog_name="sfttrainer_plot")


if __name__ == "__main__":
    main()
