"""`sfttrainer_preview SPACE.yaml`: what a space would launch and cost, before anything runs."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from ado_actuators.sfttrainer.cli.errors import UsageError, one_line_errors

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

COLUMNS = (
    "experiment",
    "entity",
    "verdict",
    "bound_gib",
    "predicted_gib",
    "device_gib",
    "fewest_gpus",
    "gpu_hours",
    "why",
)


@app.command(
    help="Preview a space without ado, Ray or a GPU: for every entity of SPACE (the file `ado "
    "create space -f` takes) under each experiment's parameterization, the configuration rules' "
    "verdict, the certain lower bound and the predicted peak of GPU memory per device (from "
    "each model's config.json, under hf_home or the model_map), a verdict (invalid, certain "
    "OOM, predicted OOM, fits, unknown) and, for those that do not fit, the fewest GPUs at the "
    "same per-device batch the prediction says fit. Ends with how many configurations would "
    "be launched and their GPU-hours, and how those were estimated. The predicted figures are "
    "predictions, not measurements. "
    "Example: sfttrainer_preview space.yaml --actuator-config ac.yaml --csv preview.csv"
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
            "--csv", metavar="FILE", show_default=False, help="Also write the rows to FILE as CSV."
        ),
    ] = None,
) -> None:
    with one_line_errors(csv_file, "Interrupted; nothing was launched."):
        rows, _settings = _rows(space, actuator_config)
        _print(rows)
        if csv_file is not None:
            _write_csv(rows, csv_file)
            typer.echo(f"rows written to {csv_file}")


def _load_yaml(path: Path, what: str) -> Any:
    import yaml

    if not path.is_file():
        raise UsageError(f"{what} {str(path)!r} does not exist")
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise UsageError(
            f"{what} {str(path)!r} is not YAML: {str(error).splitlines()[0]}"
        ) from None


def _rows(space: Path, actuator_config: Path | None):
    import pydantic

    from ado_actuators.sfttrainer.engine.preview import SpaceError, entities, preview_entity
    from ado_actuators.sfttrainer.engine.settings import MeasurementSettings

    parameters: dict[str, Any] = {}
    if actuator_config is not None:
        document = _load_yaml(actuator_config, "--actuator-config")
        parameters = (document or {}).get("parameters") or {} if isinstance(document, dict) else {}
    try:
        settings = MeasurementSettings.model_validate(parameters)
    except pydantic.ValidationError as error:
        first = error.errors()[0]
        raise UsageError(
            f"--actuator-config parameters.{'.'.join(map(str, first['loc']))}: {first['msg']}"
        ) from None
    try:
        points = entities(_load_yaml(space, "space file"))
    except SpaceError as error:
        raise UsageError(f"{space}: {error}") from None
    unknown = sorted(
        {v["model_name"] for _, v in points if "model_name" in v} - _known_models(settings)
    )
    if unknown:
        raise UsageError(
            f"{space}: unknown model {unknown[0]!r}: add it to the actuator "
            f"configuration's model_map"
        )
    return [preview_entity(values, experiment, settings) for experiment, values in points], settings


def _known_models(settings: Any) -> set[str]:
    from ado_actuators.sfttrainer.catalog.models import merged_model_map

    return set(merged_model_map(settings.model_map))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def _print(rows: list) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if Console().is_terminal else 160)
    table = Table(title="SFTTrainer space preview (GiB per device; predicted, not measured)")
    for name in (
        "experiment",
        "entity",
        "verdict",
        "bound",
        "predicted",
        "device",
        "fewest GPUs",
        "GPU-hours",
        "why",
    ):
        table.add_column(name, overflow="fold")
    for row in rows:
        entity = ", ".join(f"{k}={v}" for k, v in row.entity.items() if k != "model_name")
        table.add_row(
            row.experiment.removesuffix("-v1.0.0"),
            f"{row.entity.get('model_name', '')}: {entity}",
            row.verdict,
            _cell(row.bound_gib),
            _cell(row.predicted_gib),
            _cell(row.device_gib),
            _cell(row.fewest_gpus),
            _cell(row.gpu_hours),
            row.why,
        )
    console.print(table)
    launched = [r for r in rows if r.launched]
    hours = [r.gpu_hours for r in launched if r.gpu_hours is not None]
    by_verdict: dict[str, int] = {}
    for row in rows:
        by_verdict[row.verdict] = by_verdict.get(row.verdict, 0) + 1
    console.print(
        f"{len(rows)} configurations: {len(launched)} would be launched, "
        + ", ".join(f"{n} {v}" for v, n in sorted(by_verdict.items()))
        + "."
    )
    if launched:
        unknown = len(launched) - len(hours)
        console.print(
            f"Estimated training time of the launched ones: {sum(hours):.2f} GPU-hours"
            + (f" ({unknown} without an estimate)" if unknown else "")
            + ". Time-bounded measurements are counted exactly (stop_after_seconds x GPUs); "
            "step-bounded ones from the model's FLOPs per token at the stated MFU and the GPU's "
            "peak; model loading and environments are not counted."
        )


def _write_csv(rows: list, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        for row in rows:
            writer.writerow(
                [
                    row.experiment,
                    json.dumps(row.entity, sort_keys=True),
                    row.verdict,
                    *(_cell(getattr(row, c)) for c in COLUMNS[3:8]),
                    row.why,
                ]
            )
    tmp.replace(path)


def main() -> None:
    app(prog_name="sfttrainer_preview")


if __name__ == "__main__":
    main()
