"""`sfttrainer_plot` on the CSV ado writes, and its errors on bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_checks import one_line_error
from PIL import Image
from typer.testing import CliRunner

from ado_actuators.sfttrainer.cli.plot import app

# Written by `ado show measurements space ... -o csv --property-format target` after `make
# demo` (8 configurations, 3 s of training each, on a busy 2-core machine).
ADO_CSV = Path(__file__).parent / "data" / "ado-measurements-demo.csv"
# Written the same way by tests/e2e's operation: 4 measured, 8 stored as is_valid = 0 (2 GPUs
# without a gpu_model), full and prompt tuning, two models.
ADO_CSV_INVALID = Path(__file__).parent / "data" / "ado-measurements-invalid.csv"


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_help_says_what_it_draws_and_how_to_feed_it():
    result = invoke("--help")
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for needle in (
        "SPACE_ID",
        "--csv",
        "--context",
        "--output-dir",
        "batch size",
        "is_valid",
        "ado show measurements",
        "--compare",
        "fastest valid",
        "largest batch size that fits",
        "GPU-hours",
        "95 % intervals",
        "skipped without launching",
    ):
        assert needle in text, needle


def test_the_csv_ado_wrote_becomes_a_picture_and_a_page(tmp_path):
    result = invoke("--csv", str(ADO_CSV), "-o", str(tmp_path), "--name", "demo")
    assert result.exit_code == 0, result.output
    png, html = tmp_path / "demo.png", tmp_path / "demo.html"
    # the two paths, then the answers
    assert result.stdout.splitlines()[:2] == [str(png), str(html)]
    assert result.stdout.splitlines()[2:6] == [
        "full",
        "  Fastest valid: 0 GPUs (CPU), sequence length 128, batch 2: 1,329 dataset tokens/s (no "
        "95 % interval: stored before it existed, or too few steps)",
        "  Tied: not judged, the fastest has no 95 % interval (only an equal speed ties)",
        "  Largest batch that fits, 0 GPUs (CPU): sequence length 128: 4 (largest tried, none "
        "invalid); sequence length 256: 4 (largest tried, none invalid)",
    ]
    assert (
        "lora\n  Fastest valid: 0 GPUs (CPU), sequence length 128, batch 2: 1,099" in result.stdout
    )
    assert "Scaling" not in result.stdout  # one GPU count (CPU): nothing to scale
    with Image.open(png) as image:
        image.load()
        assert image.format == "PNG" and image.width >= 700 and image.height >= 500
    page = html.read_text()
    assert "data:image/png;base64," in page and "ado-measurements-demo.csv" in page
    assert "1,329" in page and "927.5" in page  # two of the measured dataset tokens/s


def test_invalid_configurations_in_the_csv_are_listed_as_such(tmp_path):
    result = invoke("--csv", str(ADO_CSV_INVALID), "-o", str(tmp_path))
    assert result.exit_code == 0, result.output
    page = (tmp_path / "ado-measurements-invalid.html").read_text()
    assert page.count('class="invalid"') == 8 and "12 configurations: 4 measured, 8 invalid" in page
    assert "<td>model unmapped-model</td>" in page and "<td>pt</td>" in page
    assert "Fastest valid: none, no configuration ran" in result.stdout


def other_release(tmp_path, slower_row: int) -> Path:
    """The demo's CSV as if measured with another fms-hf-tuning release: same configurations,
    the version in the experiment id changed, one configuration 25 % faster there."""
    import csv

    with ADO_CSV.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for index, row in enumerate(rows):
        row["experiment_id"] = row["experiment_id"].replace(
            "fms_hf_tuning_version.3.2.2", "fms_hf_tuning_version.3.1.0"
        )
        if index == slower_row:
            row["dataset_tokens_per_second"] = str(float(row["dataset_tokens_per_second"]) * 1.25)
    other = tmp_path / "release-3.1.0.csv"
    with other.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return other


def test_compare_gives_the_ratio_per_configuration_and_flags_a_regression(tmp_path):
    other = other_release(tmp_path, slower_row=0)
    result = invoke("--csv", str(ADO_CSV), "--compare", str(other), "-o", str(tmp_path))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Compared with release-3.1.0.csv (fms-hf-tuning 3.2.2 here, 3.1.0 there)" in out
    assert "8 configurations matched (0 only here, 0 only there)" in out
    assert "1 differ: slower or faster where the 95 % intervals do not overlap" in out
    assert (
        "full, 0 GPUs (CPU), sequence length 128, batch 2: 0.80× slower (beyond the ±10% "
        "band: neither row has a 95 % interval)"
    ) in out
    page = (tmp_path / "ado-measurements-demo.html").read_text()
    assert page.count('<tr class="flagged">') == 1 and page.count('<td class="n">1.000</td>') == 7
    assert page.count("<td>±10% band</td>") == 8  # the demo's rows predate the intervals
    assert "compared with release-3.1.0.csv" in page


@pytest.mark.parametrize(
    ("other", "needles"),
    [
        ("missing.csv", ["'missing.csv' does not exist"]),
        (
            str(ADO_CSV_INVALID),
            ["--compare ado-measurements-invalid.csv: no configuration matches", "batch_size"],
        ),
    ],
)
def test_a_comparison_that_cannot_be_made_is_one_line(other, needles, tmp_path):
    one_line_error(invoke("--csv", str(ADO_CSV), "--compare", other, "-o", str(tmp_path)), *needles)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--csv", "missing.csv"], ["'missing.csv' does not exist", "ado show measurements"]),
        ([], ["give either SPACE_ID or --csv FILE"]),
        (["space-1", "--csv", str(ADO_CSV)], ["give either SPACE_ID or --csv FILE"]),
        (["--csv", str(ADO_CSV), "--context", "ctx.yaml"], ["--context applies to SPACE_ID"]),
        (["--csv", str(ADO_CSV), "--name", "a/b"], ["--name 'a/b'"]),
    ],
)
def test_bad_arguments_get_one_line_naming_the_problem(args, needles, tmp_path):
    one_line_error(invoke(*args, "-o", str(tmp_path)), *needles)
    assert not list(tmp_path.iterdir())


def test_a_csv_without_the_needed_columns_is_named(tmp_path):
    other = tmp_path / "entities.csv"
    other.write_text("identifier,batch_size\nx,4\n")
    one_line_error(
        invoke("--csv", str(other), "-o", str(tmp_path)),
        "lacks the column(s) experiment_id, model_max_length, is_valid",
        "--property-format target",
    )


def test_a_space_without_an_ado_context_says_how_to_get_one(tmp_path):
    # The API path reads ado's configuration at import: run it in its own process.
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "empty")}
    result = subprocess.run(
        [sys.executable, "-m", "ado_actuators.sfttrainer.cli.plot", "space-1", "-o", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert (
        result.stderr.startswith("Error: no active ado context")
        and "Traceback" not in result.stderr
    )
    assert "--csv FILE" in result.stderr
    assert not (tmp_path / "empty" / "ado").exists()  # nothing created in the user's ado home
