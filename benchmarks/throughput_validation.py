"""The predicted step time (plan/speed/step_time.py) on public throughput it was not fitted on:
other frameworks, devices and clusters (benchmarks/data/public_throughput.yaml, each run's source
cited there) and fms-acceleration's L40 table (benchmarks/data/fms_acceleration_l40.csv). The
constants are the shipped ones (FITTED, fitted on fms-acceleration's A100 table only); nothing
is fitted here. Prints the error per regime (device, one node or several, sequence length) and
every run with --rows. The regimes' figures are what plan/speed/validated.py states on each
preview row.

    python benchmarks/throughput_validation.py           # the figures per regime
    python benchmarks/throughput_validation.py --rows    # and every run
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from throughput_prediction import Observed, errors, load_l40

from ado_actuators.sfttrainer.plan.memory.bound import Training
from ado_actuators.sfttrainer.plan.speed.devices import DEFAULT_NETWORK_GBPS, device_named
from ado_actuators.sfttrainer.plan.speed.prediction import model_shape
from ado_actuators.sfttrainer.plan.speed.step_time import FITTED, Run
from ado_actuators.sfttrainer.plan.speed.validated import regime

DATA = Path(__file__).parent / "data" / "public_throughput.yaml"
RECOMPUTING = {"full", "yes", "selective", "selective layer"}
"""Checkpointing as the sources name it that recomputes every layer here (the data file says
why)."""


def _observed(row: list[Any], models: dict[str, dict[str, Any]]) -> Observed:
    source, gpu, gpus, nodes, network, model, length, batch, checkpointing, measured = row
    config = models[model]["config"]
    training = Training(
        peft_method="none",
        torch_dtype="bfloat16",
        optim="adamw_torch",
        number_gpus=int(gpus),
        lora_r=8,
        target_modules=(),
    )
    run = Run(
        method="full",
        per_device_batch=int(batch),
        sequence_length=int(length),
        gpus=int(gpus),
        nodes=int(nodes),
        gradient_checkpointing=str(checkpointing) in RECOMPUTING,
    )
    return Observed(
        model=model,
        family=source,
        framework=f"{source} ({checkpointing})",
        # what of the training the shape reads: the Training itself, or its `trainable` part
        # once plan/model/training.py's typed configuration carries it
        shape=model_shape(config, getattr(training, "trainable", training), "Vanilla"),
        run=run,
        tokens_per_second=float(measured),
        device=device_named(gpu, float(network or DEFAULT_NETWORK_GBPS)),
    )


def load(path: Path = DATA) -> list[Observed]:
    raw = yaml.safe_load(path.read_text())
    return [_observed(row, raw["models"]) for row in raw["runs"]]


def by_regime(pairs: list[tuple[Observed, float]]) -> dict[str, list[float]]:
    """Each run's error under every regime it belongs to (plan/speed/validated.regime)."""
    found: dict[str, list[float]] = {}
    for observed, error in pairs:
        for name in regime(observed.run, observed.device.name):
            found.setdefault(name, []).append(error)
    return found


def report(pairs: list[tuple[Observed, float]], show: Callable[[str], None] = print) -> None:
    for name, found in sorted(by_regime(pairs).items()):
        absolute = sorted(abs(e) for e in found)
        show(
            f"  {name:<28} {len(found):>3} runs  median |error| {statistics.median(absolute):6.1%}"
            f"  median error {statistics.median(found):+6.1%}  worst {absolute[-1]:6.1%}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", action="store_true", help="print every run's prediction")
    args = parser.parse_args(argv)
    public, l40 = load(), load_l40()
    pairs = list(zip(public + l40, errors(public + l40, FITTED), strict=True))
    print(f"the shipped constants: {FITTED}")
    print(f"{len(public)} public runs of other frameworks, {len(l40)} fms-acceleration L40 runs:")
    report(pairs)
    if args.rows:
        for observed, error in pairs:
            run = observed.run
            print(
                f"  {error:+7.1%}  {observed.tokens_per_second:8.0f} tokens/s  "
                f"{observed.label()} {observed.device.name} {run.nodes} node(s) "
                f"{run.sequence_length} tokens"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
