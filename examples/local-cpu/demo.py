"""`make demo`: measure a space of tiny-model fine-tuning configurations on this machine.

Everything is local: a tiny Llama built here, a small generated dataset, ado's own state in
demo-work/ado-config. Prints the measured table, then draws the space with `sfttrainer_plot`
(demo-work/<space-id>.png and .html) and prints its answers and where.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml
from ado_cli import AdoCLI, generate_text_dataset
from rich.console import Console
from rich.table import Table
from tiny_model import build_tiny_model

from ado_actuators.sfttrainer.catalog.experiments import catalog_data

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
    work = Path(os.environ.get("DEMO_WORK", "demo-work")).absolute()
    shutil.rmtree(work, ignore_errors=True)
    (work / "data").mkdir(parents=True)
    offline = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(work / "hf"),
    }
    os.environ.update(offline)
    started = time.monotonic()

    with console.status("building a tiny Llama model and tokenizer"):
        model = build_tiny_model(work / "tiny-llama")
    dataset_id = "news-chars-512-entries-4096"
    generate_text_dataset(work / "data", dataset_id, 256)

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
                    "model_map": {"tiny-llama": {"Vanilla": str(model)}},
                },
            }
        )
    )
    config_id = ado.create("actuatorconfiguration", config)
    space_id = ado.create("space", HERE / "space.yaml", "--new-sample-store")
    operation = work / "operation.yaml"
    spec = yaml.safe_load((HERE / "operation.yaml").read_text())
    spec |= {"spaces": [space_id], "actuatorConfigurationIdentifiers": [config_id]}
    operation.write_text(yaml.safe_dump(spec))
    console.print(f"space [bold]{space_id}[/], measuring 8 configurations (full + LoRA) on CPU")
    with console.status("ado create operation (real training; a few minutes)"):
        ado.run("create", "operation", "-f", str(operation))
    rows = ado.measurements(space_id)

    # One column per configuration, one row per property: 23 properties fit down a page.
    table = Table(title=f"SFTTrainer measurements, space {space_id}", show_header=False)
    table.add_column("")
    for _ in rows:
        table.add_column("", justify="right")
    for column, title in CONFIGURATION.items():
        table.add_row(title, *(_cell(row.get(column, "")) for row in rows), style="bold")
    table.add_section()
    for name in PROPERTIES:
        table.add_row(name, *(_cell(row.get(name, "")) for row in rows))
    console.print(table)
    valid = sum(row.get("is_valid") in ("1", "1.0") for row in rows)
    console.print(
        f"{len(rows)} measured, {valid} valid, in {time.monotonic() - started:.0f} s. "
        f"Inspect with: XDG_CONFIG_HOME={work / 'ado-config'} ado show measurements space "
        f"{space_id}"
    )

    # The picture, read back through ado's API in the demo's ado context, as a user would.
    plot = [str(Path(sys.executable).with_name("sfttrainer_plot")), space_id, "-o", str(work)]
    drawn = subprocess.run(plot, env=ado.env, capture_output=True, text=True)
    if drawn.returncode != 0:
        console.print(f"[red]sfttrainer_plot failed:[/] {drawn.stderr.strip()}")
        return 1
    # sfttrainer_plot prints the two paths, then the answers (fastest, largest batch, ...).
    png, html, *answers = drawn.stdout.splitlines()
    console.print("\n".join(answers), markup=False, highlight=False)
    console.print(f"Picture: [bold]{png}[/] (page with the values and answers: {html})")
    return 0 if valid >= 4 else 1


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
