"""The engine with the record of measured OOMs (engine/measurement.py, ledger/neighbours.py):
asked after validity and the certain-OOM check, before anything launches; told every outcome.
execute/ is stood in for, and counts what would have launched."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import pytest

from ado_actuators.sfttrainer.contract.outcomes import Failed, Invalid, Measured
from ado_actuators.sfttrainer.engine import measurement
from ado_actuators.sfttrainer.engine.settings import MeasurementSettings
from ado_actuators.sfttrainer.ledger.neighbours import ANSWERED_BY

FULL = "finetune_full_benchmark-v1.0.0"
STABILITY = "finetune_full_stability-v1.0.0"


class Cluster:
    """Stands in for measure_on_cluster: a batch of `oom_from` or more runs out of memory."""

    def __init__(self, oom_from: int = 4) -> None:
        self.oom_from, self.launched = oom_from, []
        self.fits: set[str] = set()  # labels that fit whatever their size
        self.during: dict[str, Callable[[], object]] = {}  # label -> what happens while it runs

    def __call__(self, request, resources, *, placement_timeout):
        values = request.plan_inputs.values
        workdir = f"/out/{request.label}-{request.run_name}"
        self.launched.append(request.label)
        if request.label in self.during:
            self.during.pop(request.label)()
        where = {"workdir": workdir, "log": f"{workdir}/train.log"}
        if values.batch_size >= self.oom_from and request.label not in self.fits:
            return Invalid("GPU out of memory: rank 0 at step 1", gpu_oom=True, metadata=where)
        return Measured({"is_valid": 1, "dataset_tokens_per_second": 10.0}, metadata=where)


@pytest.fixture
def cluster(monkeypatch) -> Cluster:
    stand_in = Cluster()
    monkeypatch.setattr(measurement, "measure_on_cluster", stand_in)
    return stand_in


@pytest.fixture
def settings(tmp_path) -> MeasurementSettings:
    return MeasurementSettings(
        data_directory=str(tmp_path / "data"),
        output_dir=str(tmp_path / "out"),
        model_map={"tiny": {"Vanilla": str(tmp_path / "tiny")}},
    )


def label(**values) -> str:
    return "-".join(f"{k}.{v}" for k, v in sorted(values.items()))


def measure(settings, experiment=FULL, **changes):
    values = {
        "model_name": "tiny",
        "model_max_length": 64,
        "batch_size": 4,
        "number_gpus": 0,
        "fms_hf_tuning_version": "3.2.2",
        **changes,
    }
    return measurement.measure(values, experiment, settings, label=label(**changes))


def record_lines(settings) -> list[dict]:
    path = settings.oom_record_file()
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_a_measured_oom_answers_larger_requests_without_launching(settings, cluster):
    oom = measure(settings, batch_size=4)
    assert isinstance(oom, Invalid) and oom.gpu_oom and cluster.launched == ["batch_size.4"]
    record = settings.oom_record_file()
    assert str(record).endswith("data/.sfttrainer/measured-ooms.jsonl")
    assert oom.metadata["oom_record"] == {"recorded": str(record)}
    for changes in (
        {"batch_size": 8},
        {"model_max_length": 128},
        {"batch_size": 6, "model_max_length": 96},
        {"batch_size": 4},
    ):
        answer = measure(settings, **changes)
        assert isinstance(answer, Invalid) and answer.gpu_oom, changes
        assert answer.reason.startswith(
            f"GPU out of memory, skipped without launching: batch_size.4 ({FULL}) ran out of "
            f"GPU memory with batch_size 4 (4 per device) and model_max_length 64"
        )
        assert (
            f"Its log: {oom.metadata['log']} (workdir {oom.metadata['workdir']}, recorded "
            in answer.reason
        )
        assert "oom_dominance: false" in answer.reason and str(record) in answer.reason
        assert (
            answer.metadata["answered_by"] == ANSWERED_BY and answer.metadata["measured"] is False
        )
        proof = answer.metadata["dominated_by"]
        assert proof["label"] == "batch_size.4" and proof["workdir"] == oom.metadata["workdir"]
        assert proof["record"] == str(record)
        assert answer.metadata["gpu_memory_bound"]["checked"] is False  # the bound's record too
    assert cluster.launched == ["batch_size.4"]  # none of them launched
    assert len(record_lines(settings)) == 1  # and an answer records nothing


@pytest.mark.parametrize(
    "changes",
    [
        {"batch_size": 2},
        {"batch_size": 8, "model_max_length": 32},
        {"batch_size": 8, "fms_hf_tuning_version": "3.1.0"},
        {"batch_size": 8, "number_nodes": 2},
        {"batch_size": 8, "gradient_accumulation_steps": 1},
    ],
    ids=[
        "smaller batch",
        "shorter sequences",
        "other version",
        "other nodes",
        "other accumulation",
    ],
)
def test_what_the_oom_does_not_dominate_is_launched(settings, cluster, changes):
    measure(settings, batch_size=4)
    measure(settings, **changes)
    assert cluster.launched == ["batch_size.4", label(**changes)]


def test_the_stability_experiment_neither_uses_nor_feeds_the_record(settings, cluster):
    measure(settings, batch_size=4)
    before = record_lines(settings)
    stability = measure(settings, STABILITY, batch_size=8)  # every repeat runs out of memory
    assert isinstance(stability, Measured) and stability.properties["f_gpu_oom"] == 1.0
    assert cluster.launched == ["batch_size.4"] + ["batch_size.8"] * 5
    assert record_lines(settings) == before
    # and a stability OOM answers no benchmark request
    measure(settings, STABILITY, batch_size=4, model_max_length=32)
    measure(settings, batch_size=5, model_max_length=32)
    assert cluster.launched[-1] == "batch_size.5-model_max_length.32"


def test_turned_off_every_request_launches_and_the_record_is_left_alone(settings, cluster):
    off = settings.model_copy(update={"oom_dominance": False})
    assert off.oom_record_file() is None
    measure(off, batch_size=4)
    measure(off, batch_size=8)
    assert cluster.launched == ["batch_size.4", "batch_size.8"]
    assert not (settings.oom_record_file().parent).exists()


def test_a_run_that_fits_withdraws_the_oom_it_contradicts(settings, cluster, caplog):
    # batch 8 launches while the record is empty; while it trains, batch 4 runs out of memory
    # and is recorded (two measurements at once); then batch 8 fits after all
    cluster.fits, cluster.during = (
        {"batch_size.8"},
        {"batch_size.8": lambda: measure(settings, batch_size=4)},
    )
    with caplog.at_level(logging.WARNING):
        fits = measure(settings, batch_size=8)
    assert isinstance(fits, Measured) and cluster.launched == ["batch_size.8", "batch_size.4"]
    assert (
        "batch_size.8 fitted (batch 8 per device, model_max_length 64), contradicting the "
        "measured OOM of batch_size.4 (batch 4 per device, model_max_length 64, log /out/"
    ) in caplog.text
    (withdrawn,) = fits.metadata["oom_record"]["superseded"]
    assert withdrawn["label"] == "batch_size.4" and withdrawn["workdir"].startswith(
        "/out/batch_size.4-"
    )
    assert [x["kind"] for x in record_lines(settings)] == ["oom", "superseded"]
    # the withdrawn OOM answers nothing any more: batch 4 and 6 are measured again
    measure(settings, batch_size=6)
    assert cluster.launched[-1] == "batch_size.6"


def test_a_valid_run_with_nothing_to_withdraw_writes_nothing(settings, cluster):
    # nearly every measurement: a read-only data_directory must cost it nothing
    assert isinstance(measure(settings, batch_size=2), Measured)
    assert not settings.oom_record_file().parent.exists()
    measure(settings, batch_size=4)
    lines = settings.oom_record_file().read_text()
    assert "oom_record" not in measure(settings, batch_size=2, model_max_length=128).metadata
    assert settings.oom_record_file().read_text() == lines


def test_a_record_that_cannot_be_read_or_written_never_fails_a_measurement(
    settings, cluster, caplog
):
    path = settings.oom_record_file()
    path.parent.parent.mkdir(parents=True)
    path.parent.write_text("a file where the record's directory should be")
    with caplog.at_level(logging.WARNING):
        oom = measure(settings, batch_size=4)
        larger = measure(settings, batch_size=8)
    assert (
        isinstance(oom, Invalid)
        and "cannot write the OOM record" in oom.metadata["oom_record"]["problem"]
    )
    assert isinstance(larger, Invalid) and "answered_by" not in larger.metadata  # measured
    assert cluster.launched == ["batch_size.4", "batch_size.8"]
    assert "is not in the OOM record" in caplog.text


def test_validity_comes_first_and_a_failure_records_nothing(settings, cluster, monkeypatch):
    gpus = {"number_gpus": 2, "gpu_model": "NVIDIA-A100-SXM4-80GB"}
    measure(settings, batch_size=4, **gpus)
    # batch 9 over 2 GPUs is dominated, but not divisible: invalid by rule, not by the record
    invalid = measure(settings, batch_size=9, **gpus)
    assert isinstance(invalid, Invalid) and not invalid.gpu_oom
    assert invalid.metadata["answered_by"] == "configuration_rule"
    assert "batch_size 9 is not divisible by number_gpus 2" in invalid.reason
    lines = record_lines(settings)
    crashed = Failed("crashed", metadata={"workdir": "/w"})
    monkeypatch.setattr(measurement, "measure_on_cluster", lambda *a, **k: crashed)
    assert measure(settings, batch_size=2) is crashed and "oom_record" not in crashed.metadata
    assert record_lines(settings) == lines
