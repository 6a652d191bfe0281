"""The guided walk simulated on public tables: measuring a configuration returns its published
throughput (or its OOM) and costs what the project's bill says that measurement costs.

Spaces, each one device's calibration:
- fms-acceleration's A100 tables (benchmarks/data/fms_acceleration_a100_80gb.csv, the three
  packed tables), one space per model family, predicted with the constants fitted on the other
  families (benchmarks/throughput_prediction.py's leave one family out);
- fms-acceleration's L40 table, predicted with the shipped constants (nothing fitted on it).

An answer group is what sfttrainer_plot's "Fastest valid" compares: one table, model, framework
and method, across GPU counts and batch sizes. Its runs that did not finish are OOMs (the
tables strip the error). The bill of one measurement: the process start and the checkpoint's
read (space/bill.py's start_seconds), then the spec's stop method
(WARMUP_60S_STABLE_120S_OR_10_STEPS) at the published step time; an OOM pays its start and one
step (the predicted one), on every GPU. As the product's walk does, the guided walk (and random
order under its rule) leaves each A100 run the memory verdict calls a predicted OOM unmeasured
(guided_oom.py: 90 of the 100 OOMs, none of the runs that ran); the full walk launches it.

Strategies, on the same oracle: the full walk (every configuration); random order with the
guided walk's stopping rule; Optuna's TPE (ado-ray-tune's default sampler) per group at the
GPU-hours the guided walk spent on that group; the guided walk. Reported: GPU-hours, the share
of groups whose named fastest is the true fastest or within TIE of it, and the regret in
tokens/s (the true fastest's throughput less the named one's, summed over the groups). Then
racing (issue 54, benchmarks/guided_racing.py): the guided walk with and without stopping a
measurement once it cannot win its group, against the floor, under each stop method's window.

    python benchmarks/guided_search.py [--seeds 5] [--without-attention-factor]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import math
import random
import statistics
import subprocess
import sys
from collections.abc import Callable
from datetime import date
from pathlib import Path
from types import SimpleNamespace

import optuna
from guided_oom import predicted_ooms, row_key
from memory_bound import load_configs
from throughput_prediction import (
    DATA,
    FITTED,
    L40_DATA,
    PACKED_TABLES,
    Observed,
    _observed,
    errors,
    fit,
    load_l40,
    predicted,
)

from ado_actuators.sfttrainer.plan.speed.prediction import device_of
from ado_actuators.sfttrainer.plan.speed.step_time import Fitted, StepParts, step_time
from ado_actuators.sfttrainer.space.bill import start_seconds, training_time
from ado_actuators.sfttrainer.space.calibration import (
    REFERENCE_DEVICE,
    Prior,
    fit_level_spreads,
    prior_for,
)
from ado_actuators.sfttrainer.space.guided_rule import Candidate, Result, Settings, decide, judge
from ado_actuators.sfttrainer.stopping.warmup_stable import WARMUP_60S_STABLE_120S_OR_10_STEPS

PREDICTED_OOM = "predicted OOM: the predicted peak exceeds the device (guided_oom.py)"
"""The reason the walk leaves a configuration for, as space/guided_walk.py gives its verdict."""

TIE = 0.02
"""Two throughputs closer than this count as the same: fms-acceleration publishes one run per
configuration, so no spread is published; 2 % is the spread this project's steady-state
interval aims at (STEADY_CI95_1PCT's 1 % half-width, both sides)."""
GUIDED_NO_TIES = "guided, ties not measured"
ORACLE = "the floor: only each group's true fastest"
SPEC = SimpleNamespace(
    auto_stop_method=WARMUP_60S_STABLE_120S_OR_10_STEPS,
    auto_stop_max_seconds=0,  # the method has no cap: space/bill.py passes it to every method
    stop_after_seconds=0,
)


@dataclasses.dataclass(frozen=True)
class Config:
    key: str
    group: str
    observed: Observed
    oom: bool
    predicted: float  # whole run, tokens/s
    cost: float  # GPU-hours to measure it
    attention_share: float = 0.0  # of the predicted step, in the attention kernel
    parts: StepParts | None = None  # the predicted step's compute and collectives
    skip: str = ""  # the memory verdict the walk leaves it for (guided_oom.py), or none

    @property
    def speed(self) -> float:
        gpus = self.observed.configuration.parallelism.gpus
        return 0.0 if self.oom else self.observed.tokens_per_second * gpus


def _rows(path: Path) -> list[dict[str, str]]:
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    return list(csv.DictReader(lines))


def checkpoint_bytes(o: Observed) -> float:
    """The checkpoint a run reads before its first step (space/bill.py's start_seconds), as
    stored: a GPTQ checkpoint's quantized linears at 4 bits (every GPTQ checkpoint of these
    tables says 4 in its config.json), every other weight at 2 bytes; bitsandbytes quantizes
    a 16-bit checkpoint as it loads it, so its read is the 16-bit one. The product's bill
    reads a pre-quantized checkpoint at its bits too (space/preview.py's _checkpoint_bytes:
    plan/memory/bound.py's weights, quantized at weight_bits)."""
    quantized = o.shape.quantized_params if o.shape.quantization == "gptq" else 0
    return (o.shape.total_params - quantized) * 2 + quantized * 0.5


def _cost(o: Observed, oom: bool, guess: float) -> float:
    tokens = o.configuration.batch.per_device_batch * o.configuration.batch.sample_tokens
    step = tokens / (guess / o.configuration.parallelism.gpus if oom else o.tokens_per_second)
    start = start_seconds(checkpoint_bytes(o))
    seconds = start + (step if oom else training_time(SPEC, step).seconds or 0.0)
    return o.configuration.parallelism.gpus * seconds / 3600


def attention_share(o: Observed, fitted: Fitted) -> float:
    return step_time(o.shape, o.configuration, o.device, fitted).attention_share


def step_parts(o: Observed, fitted: Fitted) -> StepParts:
    """The predicted step split into compute and the collectives within the node."""
    return step_time(o.shape, o.configuration, o.device, fitted).step_parts


def _config(index: int, row: dict[str, str], o: Observed, fitted: Fitted) -> Config:
    oom = not row["train_tokens_per_second"].strip()
    guess = predicted(o, fitted) * o.configuration.parallelism.gpus
    group = " ".join((row.get("table", "l40"), o.model, o.framework, o.configuration.tuning.method))
    share, parts = attention_share(o, fitted), step_parts(o, fitted)
    return Config(f"{index}", group, o, oom, guess, _cost(o, oom, guess), share, parts)


def a100_spaces() -> dict[str, list[Config]]:
    configs, rows = load_configs(), _rows(DATA)
    kept = [r for r in rows if r["table"] in PACKED_TABLES and r["model_name_or_path"] in configs]
    observed = [
        _observed({**r, "train_tokens_per_second": r["train_tokens_per_second"] or "0"}, configs)
        for r in kept
    ]
    spaces = {}
    called = predicted_ooms()
    for family in sorted({o.family for o in observed}):
        fitted = fit(
            [
                o
                for o, r in zip(observed, kept, strict=True)
                if o.family != family and r["train_tokens_per_second"].strip()
            ]
        )
        spaces[f"A100 {family}"] = [
            dataclasses.replace(
                _config(i, r, o, fitted), skip=PREDICTED_OOM if row_key(r) in called else ""
            )
            for i, (r, o) in enumerate(zip(kept, observed, strict=True))
            if o.family == family
        ]
    return spaces


def l40_space() -> list[Config]:
    configs, device = load_configs(), device_of("NVIDIA-L40")
    rows = [r for r in _rows(L40_DATA) if r["model_name_or_path"] in configs]
    return [
        _config(i, r, _observed({**r, "torch_dtype": "float16"}, configs, device), FITTED)
        for i, r in enumerate(rows)
    ]


def subgroup_of(c: Config) -> str:
    """The configurations of a group that differ by their batch size alone."""
    configuration = c.observed.configuration
    gpus, tokens = configuration.parallelism.gpus, configuration.batch.sample_tokens
    return f"{c.group}, {gpus} GPUs, {tokens} tokens"


def residual_groups(space: list[Config], centred: bool = False) -> list[list[list[float]]]:
    """The log errors of the speed model (measured over predicted): per group, one list per
    subgroup; `centred`: less the mean of the space's rows of the same method (what a device's
    and a method's factors take up)."""
    errors = {c.key: math.log(c.speed / c.predicted) for c in space if not c.oom}
    by_method: dict[str, list[float]] = {}
    for c in space:
        if c.key in errors:
            by_method.setdefault(c.observed.configuration.tuning.method, []).append(errors[c.key])
    found: dict[str, dict[str, list[float]]] = {}
    for c in space:
        if c.key in errors:
            method = c.observed.configuration.tuning.method
            shift = statistics.mean(by_method[method]) if centred else 0.0
            at = found.setdefault(c.group, {}).setdefault(subgroup_of(c), [])
            at.append(errors[c.key] - shift)
    return [list(g.values()) for g in found.values()]


def fitted_prior(device: str, a100: list[list[Config]]) -> Prior:
    """The device's prior, its group levels (space/calibration.py's GROUP_SD, SUBGROUP_SD and
    WITHIN_SUBGROUP) fitted here on the A100 families `a100`'s errors, about zero (on the
    reference device the device's and the method's factors are held near 0)."""
    found = fit_level_spreads(g for s in a100 for g in residual_groups(s))
    group_sd, subgroup_sd, within = found
    return dataclasses.replace(
        prior_for(device), group_sd=group_sd, subgroup_sd=subgroup_sd, spread=within
    )


L40_SOURCE = "fms-acceleration L40"
FOUNDRY_SOURCE = "llm-foundry"


@functools.cache
def validation_errors() -> tuple[tuple[str, Observed, float], ...]:
    """(source, run, log of measured over predicted) of the public runs the speed model was not
    fitted on that vary the device, GPU count and length (other frameworks', the L40 table,
    llm-foundry's; not PEFT's or Qwen's, one GPU each), predicted with the shipped constants; a
    source: one framework's publication (the L40 table, llm-foundry's tables, each of
    public_throughput.yaml's)."""
    from throughput_validation import load, load_foundry

    sourced = [(o.family, o) for o in load()]
    sourced += [(L40_SOURCE, o) for o in load_l40()] + [(FOUNDRY_SOURCE, o) for o in load_foundry()]
    found = errors([o for _, o in sourced], FITTED)
    return tuple((s, o, -math.log1p(e)) for (s, o), e in zip(sourced, found, strict=True))


def off_source_spreads(without: str = "") -> tuple[float, float, float]:
    """(group, subgroup, row) spreads of the speed model's errors off the source it was fitted
    on (calibration.py's OFF_SOURCE_*), by fit_level_spreads on every validation source but
    `without`: a group is one source, device, model, framework and method, a subgroup its runs
    at one GPU count and length; each source's device's and method's mean error taken out (what
    the device's and method's factors take up)."""
    found = [r for r in validation_errors() if r[0] != without]
    by_key: dict[tuple[str, str, str], list[tuple[Observed, float]]] = {}
    for source, o, y in found:
        by_key.setdefault((source, o.device.name, o.configuration.tuning.method), []).append((o, y))
    taken = {id(o): y for runs in by_key.values() for o, y in _device_factors_out(runs)}
    groups: dict[tuple[str, ...], dict[tuple[int, int], list[float]]] = {}
    for source, o, _ in found:
        group = (source, o.device.name, o.model, o.framework, o.configuration.tuning.method)
        at = groups.setdefault(group, {}).setdefault(
            (o.configuration.parallelism.gpus, o.configuration.batch.sample_tokens), []
        )
        at.append(taken[id(o)])
    return fit_level_spreads(list(g.values()) for g in groups.values())


ATTENTION = True
"""Whether the calibration's attention-kernel factor is modelled (space/calibration.py's
Prior.attention_sd); False: the calibration before it, for the comparison."""


def _device_factors_out(runs: list[tuple[Observed, float]]) -> list[tuple[Observed, float]]:
    """One source's runs on one device and method, less what the device's factors take up: the
    mean, and (with ATTENTION) the attention kernel's factor times each run's attention share,
    by least squares where the shares spread enough to tell it."""
    shares = [attention_share(o, FITTED) for o, _ in runs]
    ys = [y for _, y in runs]
    if not ATTENTION or len(runs) < 3 or statistics.pstdev(shares) < 0.02:
        mean = statistics.mean(ys)
        return [(o, y - mean) for o, y in runs]
    slope, intercept = statistics.linear_regression(shares, ys)
    return [(o, y - intercept - slope * x) for (o, y), x in zip(runs, shares, strict=True)]


def framework_shift_sd(without: str = "") -> float:
    """How far another framework strays as a whole on the fitted device (calibration.py's
    FRAMEWORK_SHIFT_SD): the root mean square of each source's mean error there, but
    `without`'s."""
    by_source: dict[str, list[float]] = {}
    for source, o, y in validation_errors():
        if source != without and o.device.name == REFERENCE_DEVICE:
            by_source.setdefault(source, []).append(y)
    return math.sqrt(statistics.mean(statistics.mean(v) ** 2 for v in by_source.values()))


def off_source_prior(device: str, without: str) -> Prior:
    """The prior of a device or framework the speed model was not fitted on, its spreads
    fitted on the validation sources but `without` (the source it is scored on)."""
    group_sd, subgroup_sd, within = off_source_spreads(without)
    prior = prior_for(device, fitted_framework=False)
    if not ATTENTION:
        prior = dataclasses.replace(prior, attention_sd=0.0)
    if device == REFERENCE_DEVICE:
        prior = dataclasses.replace(prior, shift_sd=framework_shift_sd(without))
    return dataclasses.replace(prior, group_sd=group_sd, subgroup_sd=subgroup_sd, spread=within)


Space = tuple[list[Config], str, Prior]


def spaces_to_walk() -> tuple[dict[str, Space], dict[str, Space]]:
    """fms-acceleration's spaces and llm-foundry's, each with its device and its prior: an
    A100 family's group levels fitted on the other four families; the L40's and llm-foundry's
    on the public validation runs of the other sources (off_source_prior)."""
    a100 = a100_spaces()
    fms = {}
    for name, space in a100.items():
        others = [s for n, s in a100.items() if n != name]
        fms[name] = (space, REFERENCE_DEVICE, fitted_prior(REFERENCE_DEVICE, others))
    fms["L40"] = (l40_space(), "NVIDIA-L40", off_source_prior("NVIDIA-L40", L40_SOURCE))
    foundry = {}
    for name, space in foundry_spaces().items():
        device = space[0].observed.device.name
        foundry[name] = (space, device, off_source_prior(device, FOUNDRY_SOURCE))
    return fms, foundry


def foundry_spaces() -> dict[str, list[Config]]:
    """llm-foundry's MPT pretraining tables (benchmarks/data/llm_foundry_throughput.csv, read as
    benchmarks/throughput_validation.py reads them), one space per device, predicted with the
    shipped constants: another framework, nothing fitted on it. A group: one model, precision
    and checkpointing on one device, across GPU counts, micro-batches and sequence lengths."""
    from throughput_validation import load_foundry

    spaces: dict[str, list[Config]] = {}
    for i, o in enumerate(load_foundry()):
        guess = predicted(o, FITTED) * o.configuration.parallelism.gpus
        group = f"{o.device.name} {o.model} {o.framework}"
        share, parts = attention_share(o, FITTED), step_parts(o, FITTED)
        config = Config(f"{i}", group, o, False, guess, _cost(o, False, guess), share, parts)
        spaces.setdefault(f"llm-foundry {o.device.name}", []).append(config)
    return spaces


def _candidates(space: list[Config], device: str) -> list[Candidate]:
    return [
        Candidate(
            c.key,
            c.group,
            device,
            c.predicted,
            c.cost,
            method=c.observed.configuration.tuning.method,
            subgroup=subgroup_of(c),
            attention_share=c.attention_share,
            parts=c.parts,
            skip=c.skip,
        )
        for c in space
    ]


def _result(c: Config) -> Result:
    return Result(c.key, not c.oom, None if c.oom else c.speed, gpu_hours=c.cost)


Picker = Callable[[list[Candidate], dict[str, Result]], Candidate | None]


def walk(space: list[Config], device: str, pick: Picker) -> dict[str, Result]:
    by_key = {c.key: c for c in space}
    results: dict[str, Result] = {}
    candidates = _candidates(space, device)
    while (chosen := pick(candidates, results)) is not None:
        results[chosen.key] = _result(by_key[chosen.key])
    return results


def guided(settings: Settings) -> Picker:
    def pick(candidates: list[Candidate], results: dict[str, Result]) -> Candidate | None:
        return decide(candidates, results, settings=settings).next

    return pick


def randomly(seed: int, settings: Settings) -> Picker:
    chooser = random.Random(seed)

    def pick(candidates: list[Candidate], results: dict[str, Result]) -> Candidate | None:
        open_, _, _ = judge(candidates, results, settings=settings)
        return chooser.choice(open_)[1] if open_ else None

    return pick


def full(candidates: list[Candidate], results: dict[str, Result]) -> Candidate | None:
    return next((c for c in candidates if c.key not in results), None)


def tpe(group: list[Config], budget: float, seed: int) -> dict[str, Result]:
    """Optuna's TPE over one group's configurations (GPU count and batch size), each trial one
    measurement, until the next would pass `budget` GPU-hours (one at least)."""
    by_point = {
        (
            c.observed.configuration.parallelism.gpus,
            c.observed.configuration.batch.per_device_batch,
        ): c
        for c in group
    }
    gpus = sorted({g for g, _ in by_point})
    batches = sorted({b for _, b in by_point})
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    results: dict[str, Result] = {}
    spent = 0.0
    for _ in range(4 * len(group)):
        trial = study.ask()
        point = (
            trial.suggest_categorical("gpus", gpus),
            trial.suggest_categorical("batch", batches),
        )
        found = by_point.get(point)
        if found is None:
            study.tell(trial, 0.0)  # not a configuration of the table
            continue
        if found.key not in results:
            if results and spent + found.cost > budget:
                break
            spent += found.cost
            results[found.key] = _result(found)
        study.tell(trial, found.speed)
    return results


@dataclasses.dataclass
class Score:
    hours: float = 0.0
    right: int = 0
    groups: int = 0
    regret: float = 0.0

    def add(self, group: list[Config], results: dict[str, Result]) -> None:
        self.groups += 1
        self.hours += sum(c.cost for c in group if c.key in results)
        best = max(c.speed for c in group)
        named = max((c.speed for c in group if c.key in results), default=0.0)
        self.right += named >= best * (1 - TIE)
        self.regret += best - named


def _true_fastest(group: list[Config]) -> Config:
    return max(group, key=lambda c: c.speed)


def _groups(space: list[Config]) -> dict[str, list[Config]]:
    found: dict[str, list[Config]] = {}
    for c in space:
        found.setdefault(c.group, []).append(c)
    return {g: cs for g, cs in found.items() if len(cs) > 1 and any(not c.oom for c in cs)}


def simulate(spaces: dict[str, Space], seeds: int) -> dict[str, Score]:
    names = (
        "full walk",
        "random order, same rule",
        "Optuna TPE",
        "guided",
        GUIDED_NO_TIES,
        ORACLE,
    )
    scores = {name: Score() for name in names}
    for space, device, prior in spaces.values():
        groups = _groups(space)
        kept = [c for cs in groups.values() for c in cs]
        settings = Settings(priors={device: prior})
        runs = {
            "full walk": walk(kept, device, full),
            "guided": walk(kept, device, guided(settings)),
            GUIDED_NO_TIES: walk(
                kept, device, guided(dataclasses.replace(settings, measure_ties=False))
            ),
            ORACLE: {c.key: _result(c) for c in map(_true_fastest, groups.values())},
        }
        for name, results in runs.items():
            for group in groups.values():
                scores[name].add(group, results)
        for seed in range(seeds):
            shuffled = walk(kept, device, randomly(seed, settings))
            for group in groups.values():
                scores["random order, same rule"].add(group, shuffled)
                budget = sum(c.cost for c in group if c.key in runs["guided"])
                scores["Optuna TPE"].add(group, tpe(group, budget, seed))
    for name in ("random order, same rule", "Optuna TPE"):
        score = scores[name]
        score.hours, score.regret = score.hours / seeds, score.regret / seeds
        score.right, score.groups = score.right, score.groups  # summed over seeds
    return scores


def table(scores: dict[str, Score]) -> list[str]:
    total = scores["full walk"].hours
    lines = [
        "| strategy | GPU-hours | of the full walk's | groups right | regret (tokens/s, summed) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, s in scores.items():
        lines.append(
            f"| {name} | {s.hours:,.1f} | {s.hours / total:.0%} | {s.right / s.groups:.1%} "
            f"({s.right} of {s.groups}) | {s.regret:,.0f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="random orders and TPE runs")
    parser.add_argument(
        "--without-attention-factor",
        action="store_true",
        help="the calibration without the attention kernel's factor, for the comparison",
    )
    args = parser.parse_args(argv)
    global ATTENTION
    ATTENTION = not args.without_attention_factor
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    import guided_racing  # imports this module's walk: here, not at the top, so no cycle

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    print(f"{date.today()}, commit {commit}; random order and TPE: mean of {args.seeds} seeds")
    for label, spaces in zip(("fms-acceleration", "llm-foundry"), spaces_to_walk(), strict=True):
        print(f"\n{label}:")
        for name, (space, _, _) in spaces.items():
            print(f"{name}: {len(_groups(space))} groups, {len(space)} configurations")
        scores = simulate(spaces, args.seeds)
        print("\n".join(table(scores)))
        for goal, met in goals(scores).items():
            print(f"goal ({label}): {goal}: {'met' if met else 'NOT met'}")
        print("\n".join(guided_racing.report(label, spaces)))
    return 0


def goals(scores: dict[str, Score]) -> dict[str, bool]:
    guided_, full_, tpe_ = scores["guided"], scores["full walk"], scores["Optuna TPE"]
    return {
        "right in >= 95 % of groups": guided_.right / guided_.groups >= 0.95,
        "<= 25 % of the full walk's GPU-hours": guided_.hours <= 0.25 * full_.hours,
        "more groups right than TPE at equal budget": guided_.right / guided_.groups
        > tpe_.right / tpe_.groups,
    }


if __name__ == "__main__":
    sys.exit(main())
