"""`sfttrainer_preview SPACE.yaml`: what a space would launch, how fast and at what cost, before
anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ado_actuators.sfttrainer.cli.errors import UsageError, one_line_errors

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

WIDTH = 120
"""The table's lines fit 120 columns, whatever the terminal's width."""


CalibrateFrom = Annotated[
    str | None,
    typer.Option(
        "--calibrate-from",
        metavar="MEASURED",
        show_default=False,
        help="Rows measured before: a space id (read through ado) or the CSV `ado show "
        "measurements` writes. Each device is calibrated on its own measured rows and every "
        "configuration is predicted again with its 95 % interval; the section says per device "
        "how many rows calibrated it. Still predictions, not measurements.",
    ),
]


@app.command(
    help="Preview a space without ado, Ray or a GPU: for every entity of SPACE (the file `ado "
    "create space -f` takes) under each experiment's parameterization, the configuration rules' "
    "verdict, the predicted peak of GPU memory per device against the device's, the predicted "
    "tokens/s per GPU and the predicted GPU-hours under its stop method. One line per "
    "configuration, grouped by experiment and model, fastest predicted first; then the space's "
    "bill: its GPU-hours, those of the configurations that would launch, what skipping the "
    "predicted OOMs saves, and model loading and package environments apart. A model's shape "
    "comes from its directory, hf_home's cache, the shapes shipped for every catalogue model "
    "or, online, the hub's config.json alone; each row says which. Every figure but the "
    "device's memory is a prediction, not a measurement. "
    "Example: sfttrainer_preview space.yaml --csv preview.csv --html preview.html"
)
def preview(
    space: Annotated[Path, typer.Argument(metavar="SPACE.yaml", show_default=False)],
    actuator_config: Annotated[
        Path | None,
        typer.Option(
            "--actuator-config",
            metavar="FILE",
            show_default=False,
            help="The actuatorconfiguration file (`ado create actuatorconfiguration -f`): its "
            "parameters give hf_home and model_map, where the config.json files are.",
        ),
    ] = None,
    csv_file: Annotated[
        Path | None,
        typer.Option(
            "--csv",
            metavar="FILE",
            show_default=False,
            help="Also write the rows to FILE as CSV: one column per entity field and "
            "parameter, then the verdict and the predicted figures.",
        ),
    ] = None,
    json_file: Annotated[
        Path | None,
        typer.Option(
            "--json",
            metavar="FILE",
            show_default=False,
            help="Also write the rows and the bill to FILE as JSON, for tools.",
        ),
    ] = None,
    calibrate_from: CalibrateFrom = None,
    html_file: Annotated[
        Path | None,
        typer.Option(
            "--html",
            metavar="FILE",
            show_default=False,
            help="Also draw the predicted speeds and memory on the page sfttrainer_plot draws "
            "(FILE, and the picture beside it with the suffix .png).",
        ),
    ] = None,
) -> None:
    outputs = [f for f in (csv_file, json_file, html_file) if f is not None]
    with one_line_errors(outputs[0] if outputs else None, "Interrupted; nothing was launched."):
        from ado_actuators.sfttrainer.space.preview_bill import space_bill

        measured = _measured(calibrate_from)  # first: a wrong one fails before the table
        rows, settings = _rows(space, actuator_config)
        bill = space_bill(rows, settings)
        _print(rows, bill, settings, measured)
        _write(rows, bill, space.name, csv_file, json_file, html_file)


def _write(
    rows: Any, bill: Any, title: str, csv: Path | None, json: Path | None, html: Path | None
) -> None:
    """The files the options name, each said when written."""
    from ado_actuators.sfttrainer.cli import preview_output as output

    if csv is not None:
        output.write_csv(rows, csv)
        typer.echo(f"rows written to {csv}")
    if json is not None:
        output.write_json(rows, bill, json)
        typer.echo(f"rows written to {json}")
    if html is not None:
        output.write_html(rows, bill, html, title)
        typer.echo(f"page written to {html}")


def _load_yaml(path: Path, what: str) -> Any:  # YAML as written
    import yaml

    if not path.is_file():
        raise UsageError(f"{what} {str(path)!r} does not exist")
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise UsageError(
            f"{what} {str(path)!r} is not YAML: {str(error).splitlines()[0]}"
        ) from None


def _settings(actuator_config: Path | None) -> Any:  # YAML as written
    import pydantic

    from ado_actuators.sfttrainer.engine.settings import MeasurementSettings

    parameters: dict[str, Any] = {}
    if actuator_config is not None:
        document = _load_yaml(actuator_config, "--actuator-config") or {}
        parameters = _parameters_of(document, actuator_config)
    try:
        return MeasurementSettings.model_validate(parameters)
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        where = ".".join(["parameters", *map(str, first["loc"])])
        raise UsageError(f"--actuator-config {where}: {first['msg']}") from None


def _parameters_of(document: Any, path: Path) -> dict[str, Any]:  # YAML as written
    """An actuator configuration's `parameters` (the file `ado create actuatorconfiguration`
    reads). A file of bare settings would otherwise be read as no settings at all."""
    shape = "actuatorIdentifier: SFTTrainer, then parameters: {hf_home: ..., model_map: ...}"
    if not isinstance(document, dict):
        raise UsageError(f"--actuator-config {str(path)!r} is not a mapping; expected {shape}")
    parameters = document.get("parameters")
    if parameters is None and set(document) - {"actuatorIdentifier", "metadata"}:
        found = ", ".join(sorted(set(document) - {"actuatorIdentifier", "metadata"}))
        raise UsageError(
            f"--actuator-config {str(path)!r} has no parameters: mapping (found {found} at the "
            f"top level); expected {shape}"
        )
    if parameters is not None and not isinstance(parameters, dict):
        raise UsageError(f"--actuator-config parameters: not a mapping; expected {shape}")
    return parameters or {}


def _rows(space: Path, actuator_config: Path | None):
    from ado_actuators.sfttrainer.catalog.models import close_models, merged_model_map
    from ado_actuators.sfttrainer.space.preview import (
        SpaceError,
        entities,
        preview_entity,
        sorted_rows,
    )

    settings = _settings(actuator_config)
    try:
        points = entities(_load_yaml(space, "space file"))
    except SpaceError as error:
        raise UsageError(f"{space}: {error}") from None
    known = set(merged_model_map(settings.model_map))
    unknown = sorted({v["model_name"] for _, v in points if "model_name" in v} - known)
    if unknown:
        name = unknown[0]
        raise UsageError(
            f"{space}: unknown model {name!r}{close_models(name, settings.model_map)}: add it "
            f"to the actuator configuration's model_map"
        )
    rows = [preview_entity(values, experiment, settings) for experiment, values in points]
    return sorted_rows(rows), settings


def _measured(measured: str | None) -> tuple[str, Any] | None:  # rows as ado gives them
    """The rows --calibrate-from names (a CSV file, else a space id read through ado), beside
    the name; None without the option."""
    from ado_actuators.sfttrainer.report import sources
    from ado_actuators.sfttrainer.report.table import TableError

    if measured is None:
        return None
    try:
        if measured.endswith(".csv"):
            return measured, sources.rows_from_csv(Path(measured))
        return measured, sources.rows_from_space(measured)
    except TableError as error:
        raise UsageError(f"--calibrate-from {measured}: {error}") from None


def _print(rows: Any, bill: Any, settings: Any, measured: tuple[str, Any] | None) -> None:
    """The table and the bill; then, with --calibrate-from, the calibrated predictions."""
    from ado_actuators.sfttrainer.catalog.entity import FIELDS
    from ado_actuators.sfttrainer.cli import preview_calibrated as section
    from ado_actuators.sfttrainer.cli import preview_output as output
    from ado_actuators.sfttrainer.space.calibrated import calibrated, measured_rows

    output.print_table(rows, bill, WIDTH)
    if measured is None:
        return
    source, given = measured
    found = measured_rows(given, settings, list(FIELDS))
    lines, calibrations = calibrated(rows, found, settings)
    for line in section.lines(lines, calibrations, source):
        typer.echo(line)


def main() -> None:
    app(prog_name="sfttrainer_preview")


if __name__ == "__main__":
    main()
