"""`sfttrainer_plot` on the CSV ado writes, and its errors on bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from ado_actuators.sfttrainer.cli.plot import app
from ado_actuators.sfttrainer.testing.cli_checks import one_line_error

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
    for needle in ("SPACE_ID", "--csv", "--context", "--output-dir", "batch size",
                   "is_valid", "ado show measurements"):  # fmt: skip
        assert needle in text, needle


def test_the_csv_ado_wrote_becomes_a_picture_and_a_page(tmp_path):
    result = invoke("--csv", str(ADO_CSV), "-o", str(tmp_path), "--name", "demo")
    assert result.exit_code == 0, result.output
    png, html = tmp_path / "demo.png", tmp_path / "demo.html"
    assert result.stdout.split() == [str(png), str(html)]
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


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--csv", "missing.csv"], ["'missing.csv' does not exist", "ado show measurements"]),
        ([], ["give either SPACE_ID or --csv FILE"]),
        (["space-1", "--csv", str(ADO_CSV)], ["give either SPACE_ID or --csv FILE"]),
        (["--csv", str(ADO_CSV), "--context", "ctx.yaml"], ["--context applies to SPACE_ID"]),
        (["--csv", str(ADO_CSV), "--name", "a/b"], ["--name 'a/b'"]),
    ],
)  # fmt: skip
def test_bad_arguments_get_one_line_naming_the_problem(args, needles, tmp_path):
    one_line_error(invoke(*args, "-o", str(tmp_path)), *needles)
    assert not list(tmp_path.iterdir())


def test_a_csv_without_the_needed_columns_is_named(tmp_path):
    other = tmp_path / "entities.csv"
    other.write_text("identifier,batch_size\nx,4\n")
    one_line_error(invoke("--csv", str(other), "-o", str(tmp_path)),
                   "lacks the column(s) experiment_id, model_max_length, is_valid",
                   "--property-format target")  # fmt: skip


def test_a_space_without_an_ado_context_says_how_to_get_one(tmp_path):
    # The API path reads ado's configuration at import: run it in its own process.
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "empty")}
    result = subprocess.run(
        [sys.executable, "-m", "ado_actuators.sfttrainer.cli.plot", "space-1", "-o", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("Error: no active ado context") and "Traceback" not in result.stderr
    assert "--csv FILE" in result.stderr
    assert not (tmp_path / "empty" / "ado").exists()  # nothing created in the user's ado home
