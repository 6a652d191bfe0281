"""Where a space's measurements come from: ado's own API, or the CSV ado wrote.

Both give the rows of `ado show measurements space ID --property-format target`: the API path
calls the same DiscoverySpace method that command calls, in the same ado context.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from ado_actuators.sfttrainer.report import failures
from ado_actuators.sfttrainer.report.failures import Failure
from ado_actuators.sfttrainer.report.machine import fingerprint
from ado_actuators.sfttrainer.report.table import (
    ANSWERED,
    EXPERIMENT,
    MACHINE,
    REASON,
    TableError,
)

SpaceRows = list[dict[str, Any]]


def rows_from_csv(path: Path) -> SpaceRows:
    if not path.exists():
        raise TableError(
            f"{str(path)!r} does not exist; write it with `ado show measurements "
            "space SPACE_ID -o csv --property-format target --output-file FILE`"
        )
    if path.is_dir():
        raise TableError(f"{str(path)!r} is a directory; give the CSV file ado wrote")
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise TableError(f"cannot read {str(path)!r} as CSV: {err}") from None
    # ado writes its DataFrame index as an unnamed first column
    return [{k: v for k, v in row.items() if k not in ("", None)} for row in rows]


def rows_from_space(space_id: str, context_file: Path | None = None) -> SpaceRows:
    """The measured entities of a stored space, in the active ado context (or the
    ProjectContext in `context_file`, like `ado --context FILE`)."""
    return _rows(_space(space_id, context_file))


def rows_and_failures(
    space_id: str, context_file: Path | None = None
) -> tuple[SpaceRows, tuple[Failure, ...]]:
    """As rows_from_space, with the configurations whose requests failed and that have no
    row (report/failures.py)."""
    space = _space(space_id, context_file)
    rows = _rows(space)
    measured = {(str(row.get("identifier")), str(row.get(EXPERIMENT))) for row in rows}
    return rows, failures.of_space(space, measured)


def _rows(space: Any) -> SpaceRows:  # ado-core's DiscoverySpace
    frame = space.measuredEntitiesTable(property_type="target")
    return with_metadata(frame.to_dict(orient="records"), space.sampledEntities())


def _space(space_id: str, context_file: Path | None) -> Any:  # ado-core is untyped
    context = _project_context(context_file)
    from ado.core.discoveryspace.space import DiscoverySpace
    from ado.metastore.base import ResourceDoesNotExistError

    try:
        return DiscoverySpace.from_stored_configuration(
            project_context=context, space_identifier=space_id
        )
    except ResourceDoesNotExistError:
        raise TableError(
            f"space {space_id!r} does not exist in ado context {context.project!r}; list the "
            "spaces with `ado get spaces`, or pick the context with --context FILE"
        ) from None


def with_metadata(rows: SpaceRows, entities: Any) -> SpaceRows:  # ado-core is untyped
    """The rows with what the table of properties leaves out: each result's answered_by and
    invalid_reason (actuator/results.py stores the reason in the metadata) and what it ran on
    (report/machine.py), one per measurement in the order ado lists the row's values in (its
    results' order), "" (or no machine) where a result has none. ado's CSV has none of them, so
    only a space read here counts what was answered without launching (report/cost.py) and
    compares the machines of two spaces."""
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for entity in entities:
        for result in entity.measurement_results:
            key = (entity.identifier, str(result.experimentReference))
            found.setdefault(key, []).append(result.metadata or {})
    for row in rows:
        metadata = found.get((str(row.get("identifier")), str(row.get(EXPERIMENT))), [])
        row[ANSWERED] = [str(m.get(ANSWERED) or "") for m in metadata]
        row[REASON] = [str(m.get(REASON) or "") for m in metadata]
        row[MACHINE] = [fingerprint(m) for m in metadata]
    return rows


def _project_context(context_file: Path | None) -> Any:  # ado-core is untyped
    """Reads the context like ado does, but never creates or activates one."""
    import pydantic
    import yaml
    from ado.cli.core.config import AdoConfiguration
    from ado.metastore.project import ProjectContext

    if context_file is None:
        config = AdoConfiguration()
        if config.config_file.is_file():
            config = AdoConfiguration.model_validate_json(config.config_file.read_text())
        context_file = config.project_context_path_from_active_context()
        if context_file is None or not context_file.is_file():
            raise TableError(
                f"no active ado context under {str(config.config_file.parent)!r}; activate one "
                "with `ado context NAME`, pass --context FILE, or plot the CSV with --csv FILE"
            )
    elif not context_file.is_file():
        raise TableError(
            f"--context {str(context_file)!r} is not a file; give a ProjectContext "
            "YAML file, as for `ado --context FILE`"
        )
    try:
        return ProjectContext.model_validate(yaml.safe_load(context_file.read_text()))
    except (pydantic.ValidationError, yaml.YAMLError, OSError) as err:
        raise TableError(
            f"ado context {str(context_file)!r} is not a valid ProjectContext: {err}"
        ) from None
