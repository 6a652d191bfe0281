"""`make demo`: measure a space of tiny-model fine-tuning configurations on this machine.

Everything is local: a tiny Llama built here, a small generated dataset, ado's own state in
demo-work/ado-config. Prints the measured table, then draws the space with `sfttrainer_plot`
(demo-work/<space-id>.png and .html) and prints its answers and where.

`make guided-demo` (`demo.py --guided`, in demo-work-guided/): the guided walk over
space-guided.yaml (operation-guided.yaml), which measures only what can still be the fastest;
then `sfttrainer_plot` prints the answer, what the walk left unmeasured and why, and the bill.

`make vision-demo` (`demo.py --vision`, in demo-work-vision/): one measurement of a tiny
LLaVA-NeXT (granite-vision's architecture, tiny_vision_model.py) on a vision dataset written by
`sfttrainer_generate_dataset_vision` (space-vision.yaml), and how its tokens were counted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml
from ado_cli import AdoCLI, generate_text_dataset, generate_vision_dataset
from rich.console import Console
from rich.table import Table
from tiny_model import build_tiny_model
from tiny_vision_model import build_tiny_vision_model

from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.contract.guided import ENVIRONMENT as GUIDED_RECORDS

HERE = Path(__file__).parent
# Rows of the printed table: what identifies a configuration, then every measured property.
CONFIGURATION = {
    "experiment_id": "experiment",
    "model_max_length": "model_max_length",
    "batch_size": "batch_size",
}
PROPERTIES = catalog_data().experiment("finetune_full_benchmark-v1.0.0").targets


def main() -> int:
    console = Console()
    if not console.is_terminal:
        console = Console(width=140)  # make's output is no terminal: rich would assume 80
    if sys.argv[1:] == ["--guided"]:
        return guided(console)
    if sys.argv[1:] == ["--vision"]:
        return vision(console)
    work = Path(os.environ.get("DEMO_WORK", "demo-work")).absolute()
    started = time.monotonic()
    ado, config_id = prepare(console, work)
    space_id, rows, valid = measure(
        console,
        ado,
        work,
        "space.yaml",
        config_id,
        doing="measuring 8 configurations (full + LoRA) on CPU",
        lasting="a few minutes",
    )
    written = work / "measurements.csv"
    shutil.copyfile(ado.home / f"measurements-{space_id}.csv", written)
    console.print(
        f"{len(rows)} measured, {valid} valid, in {time.monotonic() - started:.0f} s. "
        f"Every property, one row per configuration: {written}\n(written by "
        f"XDG_CONFIG_HOME={work / 'ado-config'} ado show measurements space {space_id} "
        "-o csv --property-format target --output-file FILE)"
    )
    answers = plot(console, ado, space_id, work)
    return 0 if answers is not None and valid >= 4 else 1


def guided(console: Console) -> int:
    """The guided walk of space-guided.yaml: one configuration measured, the other left."""
    work = Path(os.environ.get("DEMO_WORK", "demo-work-guided")).absolute()
    started = time.monotonic()
    ado, config_id = prepare(console, work)
    space_id = ado.create("space", HERE / "space-guided.yaml", "--new-sample-store")
    records = work / "guided"
    sampler = {
        "actuator_parameters": {
            "hf_home": str(work / "hf"),
            "model_map": model_map(work),
            "data_directory": str(work / "data"),
        },
        "record_directory": str(records),
    }
    operation = operation_file(work, "operation-guided.yaml", space_id, config_id, sampler)
    console.print(f"space [bold]{space_id}[/]: 2 configurations, the guided walk on CPU")
    with console.status("ado create operation (the guided walk; real training, about a minute)"):
        ado.run("create", "operation", "-f", str(operation))
    rows = ado.measurements(space_id)
    console.print(
        f"{len(rows)} of 2 configurations measured in {time.monotonic() - started:.0f} s "
        f"(the walk's record: {records / (space_id + '.json')})"
    )
    ado.extra_env[GUIDED_RECORDS] = str(records)
    answers = plot(console, ado, space_id, work)
    return 0 if answers is not None else 1


VISION_MODEL = "tiny-granite-vision"
VISION_DATASET = "vision-384x384-16384plus-entries-4096"


def vision(console: Console) -> int:
    """One measurement of space-vision.yaml: a tiny vision-language model on pictures."""
    work = Path(os.environ.get("DEMO_WORK", "demo-work-vision")).absolute()
    started = time.monotonic()
    ado, config_id = prepare(console, work, model=VISION_MODEL)
    _, rows, valid = measure(
        console,
        ado,
        work,
        "space-vision.yaml",
        config_id,
        doing="measuring a tiny LLaVA-NeXT on pictures, on CPU",
        lasting="about a minute",
    )
    console.print(
        f"{len(rows)} measured, {valid} valid, in {time.monotonic() - started:.0f} s. "
        "dataset_tokens_per_second counts each sample's text and image tokens together; the "
        "row's notes say how many were image tokens (XDG_CONFIG_HOME="
        f"{work / 'ado-config'} ado show trace operation ... -o yaml: image_tokens, "
        "image_tiles, notes)"
    )
    return 0 if rows and valid == len(rows) else 1


def measure(
    console: Console,
    ado: AdoCLI,
    work: Path,
    space_file: str,
    config_id: str,
    *,
    doing: str,
    lasting: str,
) -> tuple[str, list[dict[str, str]], int]:
    """This directory's `space_file` measured by a random walk under the actuator configuration
    `config_id`, saying what it measures (`doing`) and for how long (`lasting`); prints the
    table, returns the space, its rows and how many are valid."""
    space_id = ado.create("space", HERE / space_file, "--new-sample-store")
    operation = operation_file(work, "operation.yaml", space_id, config_id)
    console.print(f"space [bold]{space_id}[/], {doing}")
    with console.status(f"ado create operation (real training; {lasting})"):
        ado.run("create", "operation", "-f", str(operation))
    rows = ado.measurements(space_id)
    print_table(console, space_id, rows)
    return space_id, rows, sum(row.get("is_valid") in ("1", "1.0") for row in rows)


def operation_file(
    work: Path, name: str, space_id: str, config_id: str, sampler: dict | None = None
) -> Path:
    """This directory's operation `name` with the two identifiers filled in (and the sampler's
    parameters, for the guided walk), written to `work`."""
    spec = yaml.safe_load((HERE / name).read_text())
    spec |= {"spaces": [space_id], "actuatorConfigurationIdentifiers": [config_id]}
    if sampler:
        spec["operation"]["parameters"]["samplerConfig"]["parameters"] |= sampler
    written = work / name
    written.write_text(yaml.safe_dump(spec))
    return written


def model_map(work: Path, model: str = "tiny-llama") -> dict[str, dict[str, str]]:
    return {model: {"Vanilla": str(work / model)}}


def prepare(console: Console, work: Path, model: str = "tiny-llama") -> tuple[AdoCLI, str]:
    """A fresh `work`: the tiny model (the Llama, or VISION_MODEL), its dataset, ado's context
    and the actuator configuration; returns the ado CLI and the configuration's identifier."""
    shutil.rmtree(work, ignore_errors=True)
    (work / "data").mkdir(parents=True)
    offline = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(work / "hf"),
    }
    os.environ.update(offline)
    if model == VISION_MODEL:
        with console.status("building a tiny LLaVA-NeXT and its processor"):
            build_tiny_vision_model(work / model)
        generate_vision_dataset(work / "data", VISION_DATASET, 16)
    else:
        with console.status("building a tiny Llama model and tokenizer"):
            build_tiny_model(work / model)
        generate_text_dataset(work / "data", "news-chars-512-entries-4096", 256)

    ado = AdoCLI(home=work / "ado-config", extra_env=offline)
    config = work / "actuator_configuration.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "actuatorIdentifier": "SFTTrainer",
                "parameters": {
                    "data_directory": str(work / "data"),
                    "hf_home": str(work / "hf"),
                    "output_dir": str(work / "measurements"),
                    "model_map": model_map(work, model),
                },
            }
        )
    )
    return ado, ado.create("actuatorconfiguration", config)


def print_table(console: Console, space_id: str, rows: list[dict[str, str]]) -> None:
    """One column per configuration, one row per property that holds a figure: on CPU the
    GPU properties read 0 and a few are not measured, which would bury the others."""
    shown = [name for name in PROPERTIES if any(_holds(row.get(name, "")) for row in rows)]
    table = Table(title=f"SFTTrainer measurements, space {space_id}", show_header=False)
    table.add_column("")
    for _ in rows:
        table.add_column("", justify="right")
    for column, title in CONFIGURATION.items():
        table.add_row(title, *(_cell(row.get(column, "")) for row in rows), style="bold")
    table.add_section()
    for name in shown:
        table.add_row(name, *(_cell(row.get(name, "")) for row in rows))
    console.print(table)
    hidden = len(PROPERTIES) - len(shown)
    console.print(
        f"({hidden} properties that are 0 or empty in every row, as GPU ones on CPU, not shown)"
    )


def _holds(value: str) -> bool:
    """Whether a stored value is a figure: not empty, NaN or 0."""
    try:
        number = float(value)
    except ValueError:
        return bool(value.strip())
    return number == number and number != 0


def plot(console: Console, ado: AdoCLI, space_id: str, work: Path) -> list[str] | None:
    """The picture, read back through ado's API in the demo's ado context, as a user would;
    prints the answers and returns them (None when sfttrainer_plot failed)."""
    command = [str(Path(sys.executable).with_name("sfttrainer_plot")), space_id, "-o", str(work)]
    drawn = subprocess.run(command, env=ado.env, capture_output=True, text=True)
    if drawn.returncode != 0:
        console.print(f"[red]sfttrainer_plot failed:[/] {drawn.stderr.strip()}")
        return None
    # sfttrainer_plot prints the two paths, then the answers (fastest, largest batch, ...).
    png, html, *answers = drawn.stdout.splitlines()
    console.print("\n".join(answers), markup=False, highlight=False)
    console.print(f"Picture: [bold]{png}[/] (page with the values and answers: {html})")
    return answers


def _cell(value: str) -> str:
    if value.startswith("SFTTrainer."):
        # SFTTrainer.finetune_lora_benchmark-v1.0.0-... -> lora
        return value.removeprefix("SFTTrainer.finetune_").split("_")[0]
    try:
        number = float(value)
    except ValueError:
        return value
    return f"{number:.4g}"


if __name__ == "__main__":
    sys.exit(main())
