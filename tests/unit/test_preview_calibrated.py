"""`sfttrainer_preview SPACE --calibrate-from MEASURED`: the calibrated section the CLI prints
(cli/preview_calibrated.py over space/calibrated.py), from a CSV of measured rows as
`ado show entities ... measurements` writes them."""

from __future__ import annotations

import re

import yaml
from cli_checks import one_line_error
from typer.testing import CliRunner

from ado_actuators.sfttrainer.cli.preview import app

A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
LORA = "finetune_lora_benchmark-v1.0.0"
HEADER = (
    "experiment_id,model_name,number_gpus,gpu_model,model_max_length,batch_size,is_valid,"
    "dataset_tokens_per_second_per_gpu"
)


def _space(path):
    dimensions = {
        "model_name": ["llama3.1-8b"],
        "number_gpus": [4],
        "gpu_model": [A100, H100],
        "model_max_length": [2048, 4096],
        "batch_size": [16, 32],
    }
    space = {
        "experiments": [{"experimentIdentifier": LORA}],
        "entitySpace": [
            {"identifier": k, "propertyDomain": {"values": v}} for k, v in dimensions.items()
        ],
    }
    path.write_text(yaml.safe_dump(space))
    return path


def _measured(path, *rows):
    lines = [f"SFTTrainer.{LORA},llama3.1-8b,4,{H100},{row}" for row in rows]
    path.write_text("\n".join([HEADER, *lines]) + "\n")
    return path


def _device_block(output: str, device: str) -> list[str]:
    lines = output[output.index("Calibrated on ") :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{device}:"))
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if line.startswith("    "):  # the device's line, wrapped
            block[0] += " " + line.strip()
        elif line.startswith("  "):
            block.append(line)
        else:
            break
    return block


def test_measured_rows_calibrate_their_device_and_narrow_their_own_group_most(tmp_path):
    # measured well below what the speed model predicts: LoRA's factor on the H100 falls
    measured = _measured(
        tmp_path / "measured.csv",
        "2048,16,1,2000",
        "2048,32,1,2300",
        "4096,16,0,99999",  # not valid: never calibrates
    )
    result = CliRunner().invoke(
        app, [str(_space(tmp_path / "space.yaml")), "--calibrate-from", str(measured)]
    )
    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if line.startswith("Calibrated on"))
    assert header.endswith("measured.csv; tokens/s per GPU, predicted (95 % interval):")
    h100 = _device_block(result.output, H100)
    factor = re.search(r"2 measured rows, lora x(\d\.\d+), attention x\d\.\d+,", h100[0])
    assert factor and float(factor.group(1)) < 1, h100[0]
    a100 = _device_block(result.output, A100)
    assert a100[0] == f"{A100}: no measured row, the speed model alone"
    assert len(h100) == len(a100) == 1 + 4  # every configuration of the device, once
    section = result.output[result.output.index("Calibrated on ") :].splitlines()[1:]
    assert max(len(line) for line in section) <= 88  # a device's long line wraps

    def spread(line: str) -> float:
        low, high = re.findall(r"\(([\d,]+)-([\d,]+)\)$", line)[0]
        return float(high.replace(",", "")) / float(low.replace(",", ""))

    measured_group = [spread(line) for line in h100[1:] if "2048 tokens" in line]
    other_length = [spread(line) for line in h100[1:] if "4096 tokens" in line]
    # beside the measured rows (their GPU count and length) the interval is narrowest
    assert max(measured_group) < min(other_length)


def test_a_missing_measured_file_is_one_line_naming_the_option(tmp_path):
    result = CliRunner().invoke(
        app,
        [str(_space(tmp_path / "space.yaml")), "--calibrate-from", str(tmp_path / "no.csv")],
    )
    one_line_error(result, "--calibrate-from", "no.csv")
    assert result.stdout == ""  # it fails first: no table before the error
