"""Failure reasons a user can act on: the damaged file named, the log reduced to what explains it.

The exceptions are the libraries' own (datasets reading a JSON-lines file, safetensors opening
a truncated file), raised for real on small files.
"""

from __future__ import annotations

import json

import pytest

from ado_actuators.sfttrainer.contract.trainer_io import Failure, RankOutcome, RankReport
from ado_actuators.sfttrainer.execute.classify import launch_outcome
from ado_actuators.sfttrainer.execute.node import NodeRun
from ado_actuators.sfttrainer.execute.process import ProcessResult, explaining_lines
from ado_actuators.sfttrainer.trainer.failures import classify
from ado_actuators.sfttrainer.trainer.input_files import first_bad_json_line


def jsonl(path, records, bad_line=None):
    lines = [json.dumps({"output": f"### Input: {i}\n\n### Response: {i}"}) for i in range(records)]
    if bad_line is not None:
        lines[bad_line - 1] = lines[bad_line - 1][:-7]  # cut inside the string: not JSON
    path.write_text("\n".join(lines) + "\n")
    return path


def load_with_datasets(path, tmp_path):
    datasets = pytest.importorskip("datasets")
    try:
        datasets.load_dataset(
            "json", data_files=str(path), split="train", cache_dir=str(tmp_path / "cache")
        )
    except Exception as error:
        return error
    pytest.fail("datasets loaded a malformed file")


def test_first_bad_json_line_counts_from_one_and_stops_there(tmp_path):
    assert first_bad_json_line(jsonl(tmp_path / "ok.jsonl", 5)) is None
    line, why = first_bad_json_line(jsonl(tmp_path / "bad.jsonl", 300, bad_line=123))
    assert line == 123 and why
    (tmp_path / "list.jsonl").write_text('{"a": 1}\n\n[1, 2]\n')
    assert first_bad_json_line(tmp_path / "list.jsonl") == (3, "a JSON list, not an object")


def test_malformed_dataset_line_is_named_with_its_file_and_number(tmp_path):
    # Far past pyarrow's first block, whose "in row N" counts from the block, not the file.
    path = jsonl(tmp_path / "news.jsonl", 3000, bad_line=2500)
    error = load_with_datasets(path, tmp_path)
    try:  # as fms-hf-tuning re-raises it
        raise ValueError(
            "Failed to generate the dataset from the provided builder json."
        ) from error
    except ValueError as wrapped:
        outcome, failure = classify(wrapped)
    assert outcome is RankOutcome.ERROR
    assert failure.cause.startswith(f"dataset {path}: line 2500 does not parse as a JSON object")
    assert failure.message == "Failed to generate the dataset from the provided builder json."


def test_truncated_safetensors_file_is_named(tmp_path, tiny_model_dir):
    import shutil

    transformers = pytest.importorskip("transformers")
    model = shutil.copytree(tiny_model_dir, tmp_path / "model")
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(Exception) as info:
        transformers.AutoModelForCausalLM.from_pretrained(model)
    _, failure = classify(info.value)
    assert failure.cause.startswith(f"the weights file {weights} cannot be read (")
    assert failure.cause.endswith("download or copy the model's weights again")


def test_unrelated_errors_keep_their_own_message():
    try:
        raise RuntimeError("NCCL Error 2")
    except RuntimeError as error:
        _, failure = classify(error)
    assert (failure.message, failure.cause) == ("NCCL Error 2", "")


NOISY_LOG = """\
Rank-0 [INFO]:sft_trainer.py:train: Packing is set to False
	1: AddedToken("<s>", rstrip=False, lstrip=False, single_word=False, normalized=False, special=True),
You are resizing the embedding layer without providing a `pad_to_multiple_of` parameter.
Rank-0 [DEBUG]:_api.py:_poll_until_acquired: Attempting to acquire lock 1 on /hf/x.lock
Generating train split: 0 examples [00:00, ? examples/s]
Traceback (most recent call last):
  File "reader.py", line 1, in read
pyarrow.lib.ArrowInvalid: JSON parse error
Rank-0 [DEBUG]:_api.py:release: Lock 1 released on /hf/x.lock

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "fms.py", line 9, in load
ValueError: Failed to generate the dataset
Rank-0 [DEBUG]:_api.py:release: Lock 2 released on /aim/.aim/locks/y.softlock
"""


def test_log_tail_keeps_the_chained_traceback_and_drops_chatter():
    lines = explaining_lines(NOISY_LOG)
    assert lines[0] == "Traceback (most recent call last):"
    assert "pyarrow.lib.ArrowInvalid: JSON parse error" in lines
    assert lines[-1] == "ValueError: Failed to generate the dataset"
    assert not [line for line in lines if "DEBUG" in line or "AddedToken" in line]


def test_failed_rank_reason_leads_with_the_cause_then_the_exception_then_its_traceback(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(NOISY_LOG)
    failure = Failure(
        exception_type="builtins.ValueError",
        message="Failed to generate the dataset",
        cause="dataset /d/x.jsonl: line 5 does not parse as a JSON object (...)",
        traceback_tail="Traceback (most recent call last):\nValueError: boom",
    )
    report = RankReport(
        rank=0, local_rank=0, world_size=1, hostname="h", outcome=RankOutcome.ERROR, failure=failure
    )
    result = ProcessResult(returncode=1, stopped_by_watchdog=None, log_path=log, seconds=1)
    run = NodeRun(
        returncode=result.returncode, log_tail=result.log_tail()
    )  # as the node returns it
    outcome = launch_outcome([report], [run], world_size=1, number_gpus=0, stop_after_seconds=-1)
    first, raised, *rest = outcome.reason.splitlines()
    assert first == "dataset /d/x.jsonl: line 5 does not parse as a JSON object (...)"
    assert raised == "(raised on rank 0: ValueError: Failed to generate the dataset)"
    assert rest == [
        "Traceback of rank 0:",
        "Traceback (most recent call last):",
        "ValueError: boom",
    ]
    # an exception nobody explained leads with itself
    report.failure = failure.model_copy(update={"cause": ""})
    outcome = launch_outcome([report], [run], world_size=1, number_gpus=0, stop_after_seconds=-1)
    assert (
        outcome.reason.splitlines()[0]
        == "training failed: rank 0: ValueError: Failed to generate the dataset"
    )


def test_copying_the_first_entries_names_a_bad_line_of_the_users_file(tmp_path):
    from ado_actuators.sfttrainer.execute.workspace import MalformedDataset, write_first_entries

    source = jsonl(tmp_path / "news.jsonl", 50, bad_line=7)
    with pytest.raises(MalformedDataset, match=rf"^dataset {source}: line 7 does not parse"):
        write_first_entries(source, tmp_path / "first.jsonl", 20)
    assert list(tmp_path.iterdir()) == [source]  # no half copy left behind, hidden or not
    assert write_first_entries(source, tmp_path / "first.jsonl", 6) == 6  # before the bad line


def test_truncated_parquet_dataset_is_named(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "vision.parquet"
    pq.write_table(pa.table({"messages": [f"m{i}" for i in range(200)]}), path)
    path.write_bytes(path.read_bytes()[:-100])  # the footer lost
    error = None
    datasets = pytest.importorskip("datasets")
    try:
        datasets.load_dataset(
            "parquet", data_files=str(path), split="train", cache_dir=str(tmp_path / "cache")
        )
    except Exception as raised:
        error = raised
    assert error is not None
    _, failure = classify(error)
    assert failure.cause.startswith(f"dataset {path} cannot be read as parquet ("), failure


def test_copying_from_an_empty_dataset_says_so(tmp_path):
    from ado_actuators.sfttrainer.execute.workspace import MalformedDataset, write_first_entries

    source = tmp_path / "news.jsonl"
    source.write_text("\n\n")
    with pytest.raises(MalformedDataset, match=rf"^dataset {source} has no entries"):
        write_first_entries(source, tmp_path / "first.jsonl", 4)


def test_each_unsuccessful_request_gets_one_line_on_the_operation_output(capsys):
    from ado_actuators.sfttrainer.actuator.results import announce
    from ado_actuators.sfttrainer.contract.outcomes import Failed, Invalid, Measured

    announce(Failed("dataset /d/x.jsonl is empty\nTraceback ..."), "model_name.m", "exp-v1")
    announce(Invalid("batch_size 3 is not divisible by number_gpus 2"), "model_name.n", "exp-v1")
    announce(Measured(properties={"is_valid": 1}), "model_name.o", "exp-v1")
    assert capsys.readouterr().out.splitlines() == [
        "SFTTrainer exp-v1 model_name.m: Failed: dataset /d/x.jsonl is empty",
        "SFTTrainer exp-v1 model_name.n: is_valid=0: batch_size 3 is not divisible by number_gpus 2",
    ]
