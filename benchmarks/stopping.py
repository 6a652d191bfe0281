"""STEADY_CI95_1PCT against the spec's method, side by side in one run, a long run as the truth.

    .venv/bin/python benchmarks/stopping.py [--workdir DIR] [--truth-factor 10] [--quick]

One CPU space: the demo's tiny Llama (examples/local-cpu/tiny_model.py) trained by one process
(number_gpus 0) at batch_size x model_max_length x gradient_accumulation_steps in
CONFIGURATIONS, float32: steps of 0.13 to 0.2 s on two cores. Shorter steps
leave the figure at the mercy of single scheduler ticks (and 10x a cap's worth of them exceeds
max_steps' domain); longer ones make the truth run (10x the steps) last longer than a
benchmark can. Each configuration is measured three times, one right
after the other, through the engine (engine.measurement.measure; no ado, no Ray):

1. spec:   auto_stop_method WARMUP_60S_STABLE_120S_OR_10_STEPS;
2. steady: auto_stop_method STEADY_CI95_1PCT, its default cap (stopping/steady.py);
3. truth:  max_steps = --truth-factor (>= 10) x the steps the steady run trained (at most
   10,000, max_steps' domain: it warns when that is fewer), no early stop. Its figure is
   dataset tokens per second over its steps after the steady run's warm-up count (at least
   the first tenth), the same series and arithmetic as a row's.

It prints each configuration's training seconds (first step's start to last step's end) under
both methods, their ratio, each row's figure and 95 % interval against the truth, and
coverage: the share of configurations whose truth lies inside the reported interval. Goals:
steady / spec <= 0.5 in training seconds, and coverage >= 90 %. The figures land in
DIR/stopping.json. `--quick` measures one configuration (a check that the script runs).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.cli.generate_dataset_text import generate
from ado_actuators.sfttrainer.contract.outcomes import Measured
from ado_actuators.sfttrainer.contract.trainer_io import RankReport
from ado_actuators.sfttrainer.engine.measurement import measure
from ado_actuators.sfttrainer.engine.settings import MeasurementSettings
from ado_actuators.sfttrainer.execute.environment import installed_fms_hf_tuning
from ado_actuators.sfttrainer.metrics.precision import step_series
from ado_actuators.sfttrainer.stopping.steady import STEADY_CI95_1PCT
from ado_actuators.sfttrainer.stopping.warmup_stable import WARMUP_60S_STABLE_120S_OR_10_STEPS

sys.path.insert(0, str(Path(__file__).resolve().parent))  # when imported from benchmarks/gpu
import demo_kit  # noqa: F401  (examples/local-cpu on the path)
from tiny_model import build_tiny_model

DATASET = "news-chars-512-entries-4096"
CONFIGURATIONS = ((2, 128, 16), (4, 256, 4))  # (batch_size, model_max_length, accumulation)
MAX_STEPS = 9999  # max_steps' domain is [-1, 10000)
EXPERIMENT = "finetune_full_benchmark-v1.0.0"
RATIO_GOAL, COVERAGE_GOAL = 0.5, 0.9


def run(settings: MeasurementSettings, base: dict, shape: tuple[int, int, int], name: str, **extra):
    batch, length, accumulation = shape
    entity = {
        **base,
        "model_max_length": length,
        "batch_size": batch,
        "max_steps": -1,
        "gradient_accumulation_steps": accumulation,
        "num_train_epochs": 10000.0,
        **extra,
    }
    outcome = measure(entity, EXPERIMENT, settings, label=name, use_cpu=not base["number_gpus"])
    if not isinstance(outcome, Measured):
        raise SystemExit(f"{name}: {getattr(outcome, 'reason', outcome)}")
    reports = RankReport.read_all(Path(outcome.metadata["workdir"]) / "reports")
    return outcome, reports


def training_seconds(reports: list[RankReport]) -> float:
    return max(s.end for r in reports for s in r.steps) - min(r.steps[0].start for r in reports)


def truth_figure(reports: list[RankReport], skip: int) -> float:
    seconds, tokens = step_series([r.steps[skip:] for r in reports])
    return sum(tokens) / sum(seconds)


def row(outcome: Measured) -> dict:
    props = outcome.properties
    return {
        "tokens_per_second": props["dataset_tokens_per_second"],
        "ci95_percent": props.get("dataset_tokens_per_second_ci95_percent"),
        "warmup_seconds": props.get("warmup_seconds"),
        "measured_steps": outcome.metadata["measured_steps"],
        "auto_stop": outcome.metadata.get("auto_stop"),
    }


def covers(figure: dict, truth: float) -> bool:
    if figure["ci95_percent"] is None:
        return False
    half = figure["tokens_per_second"] * figure["ci95_percent"] / 100
    return abs(truth - figure["tokens_per_second"]) <= half


def compare(
    settings: MeasurementSettings, base: dict, configurations, truth_factor: int, out: Path
) -> dict:
    """The three runs of each (batch_size, model_max_length) of `configurations` over the
    entity fields `base` (model, GPUs, dtype, dataset); prints a line per configuration and
    the summary, writes both to out/stopping.json. benchmarks/gpu/stopping_gpu.py calls it too."""
    results = []
    for shape in configurations:
        batch, length, accumulation = shape
        here = f"b{batch}-l{length}-ga{accumulation}"
        spec, spec_reports = run(
            settings,
            base,
            shape,
            f"{here}-spec",
            auto_stop_method=WARMUP_60S_STABLE_120S_OR_10_STEPS,
        )
        steady, steady_reports = run(
            settings, base, shape, f"{here}-steady", auto_stop_method=STEADY_CI95_1PCT
        )
        trained = len(steady_reports[0].steps)
        # by steps, as the truth must be: stop_after_seconds would tokenise the dataset in the
        # background while it trains (trainer/lazy_dataset.py), slowing the truth alone
        steps = min(truth_factor * trained, MAX_STEPS)
        _, truth_reports = run(settings, base, shape, f"{here}-truth", max_steps=steps)
        if steps < truth_factor * trained:
            print(
                f"warning: {here}'s truth trained {steps} steps (max_steps' domain ends at "
                f"{MAX_STEPS}), fewer than {truth_factor} x {trained}",
                flush=True,
            )
        skip = max(steady_reports[0].warmup_steps, len(truth_reports[0].steps) // 10)
        truth = truth_figure(truth_reports, skip)
        entry = {
            "batch_size": batch,
            "model_max_length": length,
            "gradient_accumulation_steps": accumulation,
            "spec": row(spec)
            | {
                "training_seconds": training_seconds(spec_reports),
                "steps": len(spec_reports[0].steps),
            },
            "steady": row(steady)
            | {"training_seconds": training_seconds(steady_reports), "steps": trained},
            "truth": {
                "tokens_per_second": truth,
                "steps": len(truth_reports[0].steps),
                "steps_left_out": skip,
                "training_seconds": training_seconds(truth_reports),
            },
        }
        for method in ("spec", "steady"):
            entry[method]["covers_truth"] = covers(entry[method], truth)
            entry[method]["error_percent"] = 100 * (entry[method]["tokens_per_second"] / truth - 1)
        results.append(entry)
        print(line(entry), flush=True)
    summary = summarise(results)
    path = out / "stopping.json"
    path.write_text(json.dumps({"base": base, "configurations": results, **summary}, indent=1))
    print(report(summary, path))
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--truth-factor", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="one configuration only")
    args = parser.parse_args()
    if args.truth_factor < 10:
        parser.error("--truth-factor must be at least 10: the truth must be the longer run")
    root = args.workdir or Path(tempfile.mkdtemp(prefix="sfttrainer-stopping-"))
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    generate(
        data / datasets.dataset_filename(DATASET),
        datasets.get_shape(DATASET),
        entries=4096,
        progress=False,
    )
    model = build_tiny_model(root / "tiny-llama")
    settings = MeasurementSettings(
        data_directory=str(data),
        hf_home=str(root / "hf"),
        output_dir=str(root / "out"),
        model_map={"tiny": {"Vanilla": str(model)}},
        stall_timeout_seconds=600,
    )
    base = {
        "model_name": "tiny",
        "number_gpus": 0,
        "dataset_id": DATASET,
        "torch_dtype": "float32",
        "fms_hf_tuning_version": installed_fms_hf_tuning(),
    }
    compare(
        settings,
        base,
        CONFIGURATIONS[:1] if args.quick else CONFIGURATIONS,
        args.truth_factor,
        root,
    )


def line(e: dict) -> str:
    def fig(m: str) -> str:
        f = e[m]
        ci = "n/a" if f["ci95_percent"] is None else f"{f['ci95_percent']:.2f} %"
        return (
            f"{m} {f['training_seconds']:.0f} s {f['steps']} steps {f['tokens_per_second']:.0f} "
            f"tok/s ±{ci} ({f['error_percent']:+.2f} % vs truth, "
            f"{'covers' if f['covers_truth'] else 'misses'})"
        )

    stop = e["steady"]["auto_stop"] or {}
    return (
        f"batch {e['batch_size']} x {e['model_max_length']} x {e['gradient_accumulation_steps']}: "
        f"{fig('spec')} | {fig('steady')} "
        f"[{stop.get('ended_by')}, warm-up {stop.get('warmup_steps')} steps] | truth "
        f"{e['truth']['tokens_per_second']:.0f} tok/s over {e['truth']['steps']} steps"
    )


def summarise(results: list[dict]) -> dict:
    spec = sum(e["spec"]["training_seconds"] for e in results)
    steady = sum(e["steady"]["training_seconds"] for e in results)
    return {
        "spec_training_seconds": spec,
        "steady_training_seconds": steady,
        "ratio": steady / spec,
        "coverage_steady": sum(e["steady"]["covers_truth"] for e in results) / len(results),
        "coverage_spec": sum(e["spec"]["covers_truth"] for e in results) / len(results),
        "configurations": len(results),
    }


def report(s: dict, path: Path) -> str:
    return "\n".join(
        [
            f"training seconds: spec method {s['spec_training_seconds']:.0f} s, STEADY_CI95_1PCT "
            f"{s['steady_training_seconds']:.0f} s: ratio {s['ratio']:.3f} (goal <= {RATIO_GOAL})",
            f"coverage of the truth by the 95 % interval over {s['configurations']} configuration(s): "
            f"STEADY_CI95_1PCT {s['coverage_steady']:.0%} (goal >= {COVERAGE_GOAL:.0%}), "
            f"spec method {s['coverage_spec']:.0%}",
            f"figures: {path}",
        ]
    )


if __name__ == "__main__":
    main()
