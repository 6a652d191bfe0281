"""`sfttrainer_generate_dataset_text` on small sizes: format, lengths, determinism, errors."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from cli_checks import one_line_error
from typer.testing import CliRunner

from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.cli import generate_dataset_text as gen
from ado_actuators.sfttrainer.cli import news_text

RESPONSE_SEP = "\n\n### Response: "


def run(*args: str):
    return CliRunner().invoke(gen.app, list(args))


def read_outputs(path: Path) -> list[str]:
    lines = path.read_text(encoding="ascii").splitlines(keepends=True)
    outputs = []
    for line in lines:
        assert line.endswith("\n")
        record = json.loads(line)
        assert list(record) == ["output"]
        # stable serialisation: the line is exactly json.dumps of its record
        assert line == json.dumps(record) + "\n"
        outputs.append(record["output"])
    return outputs


def split(output: str) -> tuple[str, str]:
    assert output.startswith("### Input: ")
    # the actuator's --response_template occurs exactly once, with nothing like it elsewhere
    assert output.count("\n### Response:") == 1
    assert output.count("###") == 2
    prompt, response = output[len("### Input: ") :].split(RESPONSE_SEP)
    return prompt, response


def test_help():
    result = run("--help")
    assert result.exit_code == 0
    for option in (
        "--output",
        "-o",
        "--output-dir",
        "--dataset-id",
        "--entries",
        "--min-tokens",
        "--chars",
        "--seed",
    ):
        assert option in result.stdout


def test_tokens_shape_format_and_lengths(tmp_path):
    out = tmp_path / "t.jsonl"
    result = run("-o", str(out), "--entries", "6", "--min-tokens", "300")
    assert result.exit_code == 0, result.output
    assert "Wrote 6 entries" in result.stderr
    outputs = read_outputs(out)
    assert len(outputs) == 6
    for output in outputs:
        prompt, response = split(output)
        assert len(response.split()) >= 300
        assert len(prompt.split()) >= 20
        assert "  " not in output.replace("\n\n", "")
        assert all(any(c.isalnum() for c in word) for word in output.split() if word != "###")
    assert len(set(outputs)) == 6


@pytest.mark.parametrize("dataset_id", [i for i in datasets.TEXT_DATASET_IDS if "chars" in i])
def test_chars_shapes_have_exact_lengths(tmp_path, dataset_id):
    chars = datasets.get_shape(dataset_id).chars
    result = run("--output-dir", str(tmp_path), "--dataset-id", dataset_id, "--entries", "8")
    assert result.exit_code == 0, result.output
    outputs = read_outputs(tmp_path / f"{dataset_id}.jsonl")
    assert len(outputs) == 8
    for output in outputs:
        prompt, response = split(output)
        instruction, article = prompt.split("\n")
        assert (len(instruction), len(article), len(response)) == (127, chars, chars)


@pytest.mark.parametrize("chars", [16, 17, 18, 19, 20, 29, 64, 127, 333])
def test_chars_override(tmp_path, chars):
    out = tmp_path / "c.jsonl"
    result = run(
        "-o",
        str(out),
        "--dataset-id",
        "news-chars-512-entries-4096",
        "--entries",
        "5",
        "--chars",
        str(chars),
    )
    assert result.exit_code == 0, result.output
    for output in read_outputs(out):
        instruction, rest = split(output)[0].split("\n")
        assert (len(instruction), len(rest), len(split(output)[1])) == (127, chars, chars)


def test_exact_fit_every_length():
    pool = news_text.sentence_pool(0)
    rng = random.Random(1)
    for n in range(news_text.MIN_CHARS, 400):
        for pick in (
            lambda: rng.choice(pool.sentences),
            lambda: rng.choice(news_text._STYLE_NOTES),
        ):
            text = news_text._fit_chars(rng, n, pick, lambda: rng.choice(news_text._STYLE_NOTES))
            assert len(text) == n
            assert text.endswith(".") and "  " not in text and text.lstrip('"')[0].isupper()
            assert all(any(c.isalnum() for c in word) for word in text.split()), text


def test_pool_rejects_words_without_letters(monkeypatch):
    """The token guarantee counts words; a bare '--' could vanish in a tokenizer."""
    monkeypatch.setattr(news_text, "_SENTENCES", ("{name} said -- nothing.",))
    with pytest.raises(AssertionError, match="'--'"):
        news_text._Pool(seed=3)


def test_deterministic_byte_identical(tmp_path):
    args = ["--entries", "4", "--min-tokens", "500"]
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    assert run("-o", str(a), *args).exit_code == 0
    assert run("-o", str(b), *args).exit_code == 0
    assert run("-o", str(c), *args, "--seed", "7").exit_code == 0
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_deterministic_across_processes(tmp_path):
    """No dependence on PYTHONHASHSEED or anything else of the process."""
    digests = set()
    for hashseed in ("1", "2"):
        out = tmp_path / f"{hashseed}.jsonl"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "ado_actuators.sfttrainer.cli.generate_dataset_text",
                "-o",
                str(out),
                "--entries",
                "3",
                "--min-tokens",
                "200",
            ],
            check=True,
            capture_output=True,
            env={**os.environ, "PYTHONHASHSEED": hashseed},
        )
        digests.add(out.read_bytes())
    assert len(digests) == 1


def test_fewer_entries_is_a_prefix(tmp_path):
    small, big = tmp_path / "s.jsonl", tmp_path / "b.jsonl"
    assert run("-o", str(small), "--entries", "2", "--min-tokens", "100").exit_code == 0
    assert run("-o", str(big), "--entries", "5", "--min-tokens", "100").exit_code == 0
    assert big.read_bytes().startswith(small.read_bytes())


def test_dataset_id_inferred_from_output_name(tmp_path):
    out = tmp_path / "news-chars-1024-entries-4096.jsonl"
    assert run("-o", str(out), "--entries", "2").exit_code == 0
    _prompt, response = split(read_outputs(out)[0])
    assert len(response) == 1024


def test_creation_command_creates_the_file(tmp_path):
    """The command the actuator quotes in its 'dataset file missing' error works as is."""
    for dataset_id in ("news-chars-512-entries-4096", datasets.DEFAULT_DATASET_ID):
        path = datasets.dataset_path(tmp_path / "data", dataset_id)
        argv = datasets.creation_command(dataset_id, path)
        assert argv[0] == "sfttrainer_generate_dataset_text"
        small = ["--min-tokens", "50"] if "tokens" in dataset_id else []
        result = run(*argv[1:], "--entries", "2", *small)
        assert result.exit_code == 0, result.output
        assert len(read_outputs(path)) == 2


def test_atomic_no_leftovers_and_overwrite(tmp_path):
    out = tmp_path / "x.jsonl"
    out.write_text("old\n")
    assert run("-o", str(out), "--entries", "2", "--min-tokens", "50").exit_code == 0
    assert [p.name for p in tmp_path.iterdir()] == ["x.jsonl"]
    assert len(read_outputs(out)) == 2


def test_failure_midway_leaves_no_file(tmp_path, monkeypatch):
    real = gen.iter_entries

    def failing(*args, **kwargs):
        rows = real(*args, **kwargs)
        yield next(rows)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(gen, "iter_entries", failing)
    out = tmp_path / "x.jsonl"
    result = run("-o", str(out), "--entries", "3", "--min-tokens", "50")
    assert result.exit_code == 1
    assert "No space left on device" in result.stderr
    assert list(tmp_path.iterdir()) == []

    out.write_text("previous complete file\n")
    assert run("-o", str(out), "--entries", "3", "--min-tokens", "50").exit_code == 1
    assert out.read_text() == "previous complete file\n"
    assert [p.name for p in tmp_path.iterdir()] == ["x.jsonl"]


def test_module_streams_and_never_holds_the_dataset():
    rows = gen.iter_entries(
        datasets.get_shape(datasets.DEFAULT_DATASET_ID), entries=10**9, min_tokens=10
    )
    assert len(next(rows)) > 0  # a generator: a billion entries are not built up front


# ---- bad input: one line naming the option and the fix, exit 2, no traceback --------------


def test_unknown_dataset_id(tmp_path):
    err = one_line_error(
        run("-o", str(tmp_path / "x.jsonl"), "--dataset-id", "news-foo"),
        "--dataset-id",
        "news-foo",
        "news-chars-512-entries-4096",
    )
    assert "vision" not in err


def test_vision_dataset_id_points_to_the_vision_generator(tmp_path):
    one_line_error(
        run("--output-dir", str(tmp_path), "--dataset-id", "vision-384x384-16384plus-entries-4096"),
        "--dataset-id",
        "sfttrainer_generate_dataset_vision --image-width 384 --image-height 384",
    )


@pytest.mark.parametrize("entries", ["0", "-3"])
def test_entries_below_one(tmp_path, entries):
    one_line_error(run("-o", str(tmp_path / "x.jsonl"), "--entries", entries), "--entries", ">= 1")
    assert list(tmp_path.iterdir()) == []


def test_unwritable_path(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    one_line_error(run("-o", str(blocker / "sub" / "x.jsonl")), "cannot write", "-o/--output")


def test_output_is_a_directory(tmp_path):
    one_line_error(run("-o", str(tmp_path)), "-o/--output", "is a directory")


def test_output_missing_or_twice(tmp_path):
    one_line_error(run("--entries", "1"), "-o FILE", "--output-dir")
    one_line_error(run("-o", str(tmp_path / "x.jsonl"), "--output-dir", str(tmp_path)), "not both")


def test_length_option_must_fit_the_shape(tmp_path):
    out = str(tmp_path / "x.jsonl")
    one_line_error(
        run("-o", out, "--dataset-id", "news-chars-512-entries-4096", "--min-tokens", "10"),
        "--min-tokens",
        "--chars",
    )
    one_line_error(run("-o", out, "--chars", "100"), "--chars", "--min-tokens")
    one_line_error(run("-o", out, "--min-tokens", "0"), "--min-tokens", ">= 1")
    one_line_error(
        run("-o", out, "--dataset-id", "news-chars-512-entries-4096", "--chars", "3"),
        "--chars",
        f">= {news_text.MIN_CHARS}",
    )


def test_name_and_dataset_id_disagree(tmp_path):
    out = str(tmp_path / "news-chars-512-entries-4096.jsonl")
    one_line_error(
        run("-o", out, "--dataset-id", "news-tokens-16384plus-entries-4096"),
        "news-chars-512-entries-4096",
        "--dataset-id",
    )


def test_installed_script_runs(tmp_path):
    script = Path(sys.executable).with_name("sfttrainer_generate_dataset_text")
    if not script.exists():
        pytest.skip("console script not installed in this environment")
    out = tmp_path / "news-chars-512-entries-4096.jsonl"
    proc = subprocess.run(
        [str(script), "-o", str(out), "--entries", "1"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert len(read_outputs(out)) == 1
    bad = subprocess.run(
        [str(script), "-o", str(out), "--dataset-id", "nope"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
