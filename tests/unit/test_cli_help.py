"""Each console script's options say what the code does: the help the generated CLI reference
shows (docs/reference/cli.md) is held to the behaviour or the declaration it describes, where a
test can check it. `--fail-on`'s checks: test_report_loss.py."""

import importlib
import re
import shutil
import tomllib
from pathlib import Path

import typer
from typer.testing import CliRunner

from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.catalog.models import WEIGHTS_FORMATS

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
ADO_CSV = Path(__file__).parent / "data" / "ado-measurements-demo.csv"


def _options(script: str) -> dict[str, object]:
    module = importlib.import_module(SCRIPTS[script].split(":")[0])
    command = typer.main.get_command(module.app)
    return {opt: p for p in command.params for opt in getattr(p, "opts", ())}


def test_the_dataset_and_format_choices_a_help_lists_are_the_catalog_s():
    text = _options("sfttrainer_generate_dataset_text")
    vision = _options("sfttrainer_generate_dataset_vision")
    weights = _options("sfttrainer_download_hf_weights")
    listed = re.compile(r"Dataset shape: (.*?)\. Default")
    assert listed.search(text["--dataset-id"].help).group(1).split(", ") == list(
        datasets.TEXT_DATASET_IDS
    )
    assert listed.search(vision["--dataset-id"].help).group(1).split(", ") == list(
        datasets.VISION_DATASET_IDS
    )
    assert f"else {datasets.DEFAULT_DATASET_ID}" in text["--dataset-id"].help
    assert f"the instruction is always {datasets.PROMPT_CHARS}" in text["--chars"].help
    assert " or ".join(WEIGHTS_FORMATS) in weights["--format"].help


def test_plot_names_its_files_as_name_s_help_says(tmp_path):
    """--name: "default: the space id, or the CSV file's stem"; -o: where the files go."""
    from ado_actuators.sfttrainer.cli.plot import app

    csv = shutil.copy(ADO_CSV, tmp_path / "my-space.csv")
    result = CliRunner().invoke(app, ["--csv", str(csv), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"my-space.png", "my-space.html"}
    help_text = _options("sfttrainer_plot")["--name"].help
    assert "the CSV file's stem" in help_text


def test_preview_writes_each_file_its_help_names(tmp_path):
    """--csv FILE, --json FILE, --html FILE "and the picture beside it with the suffix .png"."""
    from ado_actuators.sfttrainer.cli.preview import app

    space = REPO / "examples" / "remote-raycluster" / "space.yaml"
    out = {flag: tmp_path / f"p.{flag[2:]}" for flag in ("--csv", "--json", "--html")}
    args = [str(space), *(x for flag, path in out.items() for x in (flag, str(path)))]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert all(path.is_file() for path in out.values())
    assert out["--html"].with_suffix(".png").is_file()
    assert "suffix .png" in _options("sfttrainer_preview")["--html"].help
