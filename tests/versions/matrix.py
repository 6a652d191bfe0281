"""`make test-versions`: every offered fms-hf-tuning version x {full, LoRA, prompt tuning},
trained for real on the CPU (tiny Llama, 2 steps) through the measurement engine, each
version in the environment the actuator builds for it (match_exact_dependencies: false).
Prints a Markdown table: valid with dataset tokens/s, or the one-line reason it was not.

    python tests/versions/matrix.py [--versions 2.4.0 2.8.2] [--environments DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from ado_actuators.sfttrainer.actuator.parameters import SFTTrainerParameters
from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.catalog.entity import FMS_HF_TUNING_VERSIONS
from ado_actuators.sfttrainer.cli.generate_dataset_text import generate
from ado_actuators.sfttrainer.contract.outcomes import Measured
from ado_actuators.sfttrainer.engine.measurement import measure

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "local-cpu"))
from tiny_model import build_tiny_model

DATASET = "news-chars-512-entries-4096"
METHODS = {
    "full": "finetune_full_benchmark-v1.0.0",
    "LoRA": "finetune_lora_benchmark-v1.0.0",
    "PT": "finetune_pt_benchmark-v1.0.0",
}


def cell(outcome) -> str:
    if isinstance(outcome, Measured) and outcome.properties.get("is_valid") == 1:
        return f"valid, {outcome.properties['dataset_tokens_per_second']:.0f} tokens/s"
    reason = getattr(outcome, "reason", "") or "no reason given"
    return f"{type(outcome).__name__}: {reason.splitlines()[0][:160]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", nargs="*", default=list(FMS_HF_TUNING_VERSIONS))
    parser.add_argument("--methods", nargs="*", default=list(METHODS), choices=list(METHODS))
    parser.add_argument(
        "--environments",
        default=os.environ.get(
            "SFTTRAINER_TEST_ENVIRONMENTS", str(Path(tempfile.gettempdir()) / "sfttrainer-versions")
        ),
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sfttrainer-versions-"))
    for name, value in {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(root / "hf"),
    }.items():
        os.environ[name] = value
    model = build_tiny_model(root / "tiny-llama")
    data = root / "data"
    data.mkdir()
    generate(
        data / datasets.dataset_filename(DATASET),
        datasets.get_shape(DATASET),
        entries=16,
        progress=False,
    )
    params = SFTTrainerParameters(
        data_directory=str(data),
        hf_home=str(root / "hf"),
        output_dir=str(root / "out"),
        model_map={"tiny-llama": {"Vanilla": str(model)}},
        match_exact_dependencies=False,
        environments_directory=args.environments,
    )
    rows = []
    for version in args.versions:
        cells = []
        for method in args.methods:
            started = time.monotonic()
            outcome = measure(
                {
                    "model_name": "tiny-llama",
                    "model_max_length": 128,
                    "batch_size": 2,
                    "number_gpus": 0,
                    "dataset_id": DATASET,
                    "max_steps": 2,
                    "gradient_accumulation_steps": 1,
                    "torch_dtype": "float32",
                    "fms_hf_tuning_version": version,
                },
                METHODS[method],
                params,
                label=f"{version}-{method}",
            )
            cells.append(cell(outcome))
            env = outcome.metadata.get("environment") or {}
            build = (
                f", environment built in {env['build_seconds']} s" if "build_seconds" in env else ""
            )
            print(
                f"{version} {method}: {cells[-1]} ({time.monotonic() - started:.1f} s{build})",
                flush=True,
            )
        rows.append((version, cells))
    print(f"\n| fms-hf-tuning | {' | '.join(args.methods)} |")
    print(f"|---|{'---|' * len(args.methods)}")
    for version, cells in rows:
        print(f"| {version} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
