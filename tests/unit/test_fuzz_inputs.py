"""Bad input, fuzzed: entity values, actuator parameters and the CLIs' options.

Every input must end in one of: a clear error naming the field, is_valid = 0, or a launch
plan whose command lines are plain strings and whose files stay inside the directories the
user configured. Never a traceback, never an "internal error".
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pydantic
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ado_actuators.sfttrainer.actuator.parameters import SFTTrainerParameters
from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.catalog.entity import FIELDS, Domain
from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.contract.outcomes import Failed, Invalid, Measured
from ado_actuators.sfttrainer.engine import measurement
from ado_actuators.sfttrainer.execute.environment import installed_fms_hf_tuning
from ado_actuators.sfttrainer.execute.node import Rendezvous, plan_node
from ado_actuators.sfttrainer.plan.launch.launch_plan import PlanError

FUZZ = settings(
    # 100 keeps the fast suite fast; raise it to hunt: SFTTRAINER_FUZZ_EXAMPLES=2000
    max_examples=int(os.environ.get("SFTTRAINER_FUZZ_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
ROOT = Path("/srv/sft-fuzz")  # never created: planning does no I/O
DATA_DIR, OUTPUT_DIR = ROOT / "data", ROOT / "out"
PATHLIKE = st.sampled_from(
    [
        "../x",
        "../../etc/passwd",
        "/abs/path",
        "a/b",
        "..",
        ".",
        "~",
        "",
        "a\x00b",
        "x\ny",
        "$(touch pwned)",
        "; rm -rf /",
        "`id`",
    ]
)
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    PATHLIKE,
    st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _field_value(field) -> st.SearchStrategy:
    """A value from the field's domain."""
    if field.domain is Domain.BINARY:
        return st.sampled_from([0, 1, True, False])
    if field.domain is Domain.DISCRETE:
        low, high = field.range
        return st.integers(min_value=int(low), max_value=min(int(high) - 1, int(low) + 64))
    return st.sampled_from(list(field.values or ["output"]))


STRING_FIELDS = sorted(
    n for n, f in FIELDS.items() if f.domain in (Domain.CATEGORICAL, Domain.OPEN_CATEGORICAL)
)
VALID = {
    "model_name": "tiny",
    "model_max_length": 64,
    "batch_size": 4,
    "number_gpus": 0,
    "fms_hf_tuning_version": installed_fms_hf_tuning(),
}
# A valid entity with a few fields changed: one bad value must not hide behind another.
ENTITY = st.builds(
    lambda base, changed, junk: {**base, **changed, **junk},
    st.fixed_dictionaries(
        {"number_gpus": st.sampled_from([0, 1, 2, 4]), "batch_size": st.sampled_from([1, 4, 8])},
        optional={"gpu_model": st.sampled_from(["NVIDIA-A100-SXM4-80GB", "L40S"])},
    ).map(lambda d: {**VALID, **d}),
    st.fixed_dictionaries(
        {},
        optional={
            name: _field_value(field)
            for name, field in FIELDS.items()
            if name not in ("fms_hf_tuning_version", "model_name")
        },
    ),
    st.dictionaries(
        # the string fields that reach file names, resources and command lines, most often
        st.sampled_from(STRING_FIELDS) | st.sampled_from([*sorted(FIELDS), "not_a_field"]),
        st.one_of(JUNK, PATHLIKE, st.text(max_size=8)),
        min_size=1,
        max_size=2,
    )
    | st.just({}),
)
EXPERIMENTS = st.sampled_from(sorted(catalog_data().experiments))


def _plan(request) -> object:
    """What the node does with the request, up to the launch: its own planning function, for
    the node a measurement of that many nodes has first (a rendezvous only when there are
    several, as execute/cluster.py passes them)."""
    several = request.plan_inputs.values.number_nodes > 1
    rendezvous = Rendezvous(ip="10.0.0.1", port=29500) if several else None
    return plan_node(request, 0, rendezvous, python=sys.executable, weights_offline=True)


def _inside(path: Path, root: Path) -> bool:
    return Path(os.path.normpath(path)).is_relative_to(root)


def _check_plan(plan) -> None:
    for node in [plan.node]:
        assert all(type(word) is str and "\x00" not in word for word in node.argv), node.argv
    assert _inside(plan.workdir, OUTPUT_DIR), plan.workdir
    assert _inside(plan.dataset_path, DATA_DIR), plan.dataset_path
    assert (
        _inside(plan.training_data_path, plan.workdir)
        or plan.training_data_path == plan.dataset_path
    )
    assert all(type(v) is str and "\x00" not in v for v in plan.env.values())
    resources = plan.resources_per_node
    assert resources.cpus >= 1 and resources.gpus >= 0
    assert all(v > 0 for v in resources.custom.values())


PARAMS = SFTTrainerParameters(
    data_directory=str(DATA_DIR),
    output_dir=str(OUTPUT_DIR),
    hf_home=str(ROOT / "hf"),
    model_map={"tiny": {"Vanilla": str(ROOT / "models" / "tiny")}},
)
# with an AIM repository, and without one (the trainer then opens none)
PARAMS_EITHER = st.sampled_from([PARAMS, PARAMS.model_copy(update={"aim_db": str(ROOT / "aim")})])


@FUZZ
@given(values=ENTITY, experiment=EXPERIMENTS, params=PARAMS_EITHER)
@example(
    values={**VALID, "dataset_id": "../../etc/passwd"},
    experiment="finetune_full_benchmark-v1.0.0",
    params=PARAMS,
)
@example(
    values={**VALID, "model_name": "../x", "gpu_model": "../x", "number_gpus": 1},
    experiment="finetune_lora_benchmark-v1.0.0",
    params=PARAMS,
)
@example(
    values={**VALID, "dataset_text_field": "a\x00b"},
    experiment="finetune_full_benchmark-v1.0.0",
    params=PARAMS,
)
@example(
    values={**VALID, "number_gpus": -2}, experiment="finetune_full_benchmark-v1.0.0", params=PARAMS
)
@example(
    values={
        **VALID,
        "number_gpus": 4,
        "number_nodes": 2,
        "distributed_backend": "DDP",
        "gpu_model": "NVIDIA-A100-SXM4-80GB",
    },
    experiment="finetune_full_benchmark-v1.0.0",
    params=PARAMS,
)  # a plan with a rendezvous
def test_any_entity_ends_in_a_named_error_invalid_or_a_safe_plan(values, experiment, params):
    planned = []

    def plan_instead_of_launching(request, resources, **_options):
        try:
            plan = _plan(request)
        except PlanError as error:
            return Failed(str(error))
        _check_plan(plan)
        assert resources.gpus >= 0 and resources.cpus >= 1
        planned.append(plan)
        return Measured(properties={"is_valid": 1})

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(measurement, "measure_on_cluster", plan_instead_of_launching)
        outcome = measurement.measure(values, experiment, params, label=str(values["model_name"]))
    event(type(outcome).__name__)
    if isinstance(outcome, Failed):
        reason = outcome.reason
        assert "internal error" not in reason and "Traceback" not in reason, reason
        named = [name for name in (*FIELDS, "not_a_field") if name in reason]
        assert named, f"the reason names no field: {reason}"
    else:
        assert isinstance(outcome, (Invalid, Measured)), outcome
        if isinstance(outcome, Measured) and "runs" not in outcome.metadata:
            assert planned


PARAMETER_VALUES = st.dictionaries(
    st.one_of(st.sampled_from(sorted(SFTTrainerParameters.model_fields)), st.text(max_size=10)),
    st.one_of(
        JUNK,
        st.dictionaries(
            st.text(max_size=6),
            st.one_of(
                JUNK,
                st.dictionaries(
                    st.sampled_from(["Vanilla", "GPTQ-Quantized", "QPTQ-Quantized", "x"]),
                    JUNK,
                    max_size=2,
                ),
            ),
            max_size=2,
        ),
    ),
    max_size=4,
)


@FUZZ
@given(raw=PARAMETER_VALUES)
def test_any_parameters_block_is_accepted_or_rejected_naming_the_key(raw):
    from ado_actuators.sfttrainer.actuator.plugin import SFTTrainer

    try:
        params = SFTTrainer.validate_parameters(raw)
    except pydantic.ValidationError as error:
        wrong = {str(e["loc"][0]) for e in error.errors() if e["loc"]} or {
            key for key in map(str, raw) if key in str(error)
        }
        assert wrong and all(key in str(error) for key in wrong), str(error)
        return
    for name in SFTTrainerParameters.model_fields:
        getattr(params, name)  # every value is there, of its declared type
    assert params.tokens_cache_path() is None or isinstance(params.tokens_cache_path(), Path)


# ---- the command-line tools -----------------------------------------------------------------

RUNNER = CliRunner()
SMALL = st.one_of(st.integers(min_value=-3, max_value=3), st.sampled_from([0, -(2**31), 2**63]))
# lengths: small ones, and ones past the cap (a typo must be refused, not run for hours)
LENGTHS = st.one_of(st.none(), SMALL, st.sampled_from([20, 2**20 + 1, 10**9, 2**63]))
NAMES = st.one_of(PATHLIKE, st.sampled_from(datasets.DATASET_IDS), st.text(max_size=10))
# A shell cannot pass a NUL byte in an argument: only files (models.yaml) can hold one.
ARG_NAMES = NAMES.filter(lambda name: "\x00" not in name)


def _no_traceback(result, tmp: Path) -> None:
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.output
    if result.exit_code:
        # a one-line error, or the table's rows saying which entry failed or is missing and why
        said = re.search(r"\d+ entries: .*\b(failed|missing)\b", result.output)
        assert result.stderr.startswith("Error: ") or "failed" in result.output or said, (
            result.output
        )
    written = [p for p in tmp.rglob("*") if p.is_file()]
    assert all(_inside(p, tmp) for p in written)


def _args(pairs) -> list[str]:
    return [word for flag, value in pairs if value is not None for word in (flag, str(value))]


@FUZZ
@given(
    dataset_id=st.one_of(st.none(), ARG_NAMES),
    name=ARG_NAMES,
    entries=st.one_of(st.none(), SMALL),
    chars=LENGTHS,
    min_tokens=LENGTHS,
    use_dir=st.booleans(),
)
def test_generate_dataset_text_options(
    tmp_path_factory, dataset_id, name, entries, chars, min_tokens, use_dir
):
    from ado_actuators.sfttrainer.cli.generate_dataset_text import app

    tmp = tmp_path_factory.mktemp("gen-text")
    target = ("--output-dir", tmp / name) if use_dir else ("-o", tmp / f"{name}.jsonl")
    # a valid run must stay small: the default entry count would write hundreds of MB
    entries = 2 if entries is None or entries > 2 else entries
    args = _args(
        [
            target,
            ("--dataset-id", dataset_id),
            ("--entries", entries),
            ("--chars", chars),
            ("--min-tokens", min_tokens),
        ]
    )
    result = RUNNER.invoke(app, args)
    _no_traceback(result, tmp)


@FUZZ
@given(
    dataset_id=st.one_of(st.none(), ARG_NAMES),
    name=ARG_NAMES,
    width=st.one_of(st.none(), SMALL, st.just(384)),
    height=st.one_of(st.none(), SMALL, st.just(768)),
    entries=st.one_of(st.none(), SMALL),
    min_tokens=LENGTHS,
)
def test_generate_dataset_vision_options(
    tmp_path_factory, dataset_id, name, width, height, entries, min_tokens
):
    from ado_actuators.sfttrainer.cli.generate_dataset_vision import app

    tmp = tmp_path_factory.mktemp("gen-vision")
    entries = 1 if entries is None or entries > 1 else entries
    min_tokens = 4 if min_tokens is None or 4 < min_tokens <= 2**20 else min_tokens
    args = _args(
        [
            ("-o", tmp / f"{name}.parquet"),
            ("--dataset-id", dataset_id),
            ("--image-width", width),
            ("--image-height", height),
            ("--entries", entries),
            ("--min-tokens", min_tokens),
        ]
    )
    _no_traceback(RUNNER.invoke(app, args), tmp)


MODELS_YAML = st.one_of(
    st.text(max_size=40),
    st.dictionaries(
        NAMES,
        st.one_of(
            JUNK,
            st.dictionaries(
                st.sampled_from(["Vanilla", "GPTQ-Quantized", "QPTQ-Quantized", "vanilla", "x"]),
                st.one_of(
                    JUNK,
                    PATHLIKE,
                    st.sampled_from(["org/model", "org/../../x", "a/b/c", "/m\x00x", "./m\ny"]),
                ),
                max_size=2,
            ),
        ),
        max_size=3,
    ),
)


@FUZZ
@given(
    models=MODELS_YAML,
    fmt=st.one_of(st.none(), st.text(max_size=8).filter(lambda f: "\x00" not in f)),
    workers=st.one_of(st.just(1), SMALL),
)
def test_download_hf_weights_options(tmp_path_factory, models, fmt, workers):
    import yaml

    from ado_actuators.sfttrainer.cli.download_hf_weights import app

    tmp = tmp_path_factory.mktemp("weights")
    models_file = tmp / "models.yaml"
    models_file.write_text(models if isinstance(models, str) else yaml.safe_dump(models))
    hf_home = tmp / "hf"
    args = ["-i", str(models_file), "-o", str(hf_home), "--dry-run", "--max-workers", str(workers)]
    args += ["--format", fmt] if fmt is not None else []
    result = RUNNER.invoke(app, args, env={"HF_HUB_OFFLINE": "1"})
    _no_traceback(result, tmp)
