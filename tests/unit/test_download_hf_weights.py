"""`sfttrainer_download_hf_weights` without a hub: models.yaml validation, local paths, a real
hub-cache tree built on disk, completeness rules, and failure reporting while offline."""

from __future__ import annotations

import errno
import json
import re
from pathlib import Path

import pytest
import requests
from hub_cache import COMMIT, write_cached_model
from typer.testing import CliRunner

from ado_actuators.sfttrainer.cli import download_hf_weights as dl
from ado_actuators.sfttrainer.cli.hf_fetch import describe_error
from ado_actuators.sfttrainer.host import hf_cache

CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "vocab_size": 512,
}


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    # What the command would set for itself, set here so that it is undone after each test.
    monkeypatch.setenv("HF_XET_CACHE", str(tmp_path / "xet"))
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)


def run(*args: str):
    return CliRunner().invoke(dl.app, list(args))


def model_files(**extra: bytes) -> dict[str, bytes]:
    return {"config.json": json.dumps(CONFIG).encode(), "model.safetensors": b"\0" * 64, **extra}


def write_yaml(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def summary(output: str) -> dict[tuple[str, str], tuple[str, str]]:
    """(model, format) -> (status, reason) from the plain summary table."""
    lines = output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("model "))
    assert re.split(r"\s{2,}", lines[header]) == list(dl.HEADERS)
    rows = {}
    for line in lines[header + 1 :]:
        if " entries: " in line:
            break
        cells = re.split(r"\s{2,}", line, maxsplit=4)  # columns are 2+ spaces apart
        rows[(cells[0], cells[1])] = (cells[3], cells[4])
    return rows


# ---- models.yaml validation: one line, exit 2 --------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("- a\n- b\n", "expected a mapping of model names"),
        ("", "is empty"),
        ("a: [1\n", "not valid YAML at line"),
        ("smol: HuggingFaceTB/SmolLM2-135M\n", "entry 'smol' must map a weights format"),
        ("smol: {}\n", "entry 'smol' has no weights formats"),
        ("smol:\n  vanilla: x/y\n", "unknown weights format 'vanilla'; did you mean 'Vanilla'?"),
        ("smol:\n  GPTQ: x/y\n", "did you mean 'GPTQ-Quantized'?"),
        ("smol:\n  Vanilla: ''\n", "entry 'smol'.Vanilla: empty hub id or path"),
        ("smol:\n  Vanilla: 3\n", "entry 'smol'.Vanilla: expected a hub id or path, got 3"),
        ("m:\n  GPTQ-Quantized: a/b\n  QPTQ-Quantized: a/c\n", "GPTQ-Quantized is given twice"),
    ],
)
def test_bad_models_yaml_is_one_line_exit_2(tmp_path, text, expected):
    models = write_yaml(tmp_path / "models.yaml", text)
    result = run("-i", str(models), "-o", str(tmp_path / "hf"))
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and expected in result.stderr, result.stderr
    assert result.stderr.startswith("Error: -i/--input") and "Traceback" not in result.stderr
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["-o", "hf"], "no models file given; add -i models.yaml"),
        (["-i", "models.yaml"], "no HF_HOME given"),
        (["-i", "absent.yaml", "-o", "hf"], "-i/--input 'absent.yaml': no such file"),
        (["-i", "models.yaml", "-o", "models.yaml"], "-o/--output 'models.yaml' is a file"),
        (["-i", "models.yaml", "-o", "hf", "--format", "int4"], "--format: unknown weights"),
        (["-i", "models.yaml", "-o", "hf", "--format", "GPTQ-Quantized"], "has no GPTQ-Quantized"),
        (["-i", "models.yaml", "-o", "hf", "--max-workers", "0"], "--max-workers 0"),
    ],
)
def test_bad_options_are_one_line_exit_2(tmp_path, args, expected):
    write_yaml(tmp_path / "models.yaml", "smol:\n  Vanilla: HuggingFaceTB/SmolLM2-135M\n")
    result = run(*args)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
    assert expected in result.stderr


def test_unwritable_hf_home_is_a_usage_error(tmp_path):
    write_yaml(tmp_path / "models.yaml", "smol:\n  Vanilla: HuggingFaceTB/SmolLM2-135M\n")
    (tmp_path / "plain-file").write_text("")  # not a directory, even for root
    result = run("-i", "models.yaml", "-o", str(tmp_path / "plain-file" / "hf"))
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "-o/--output: cannot create" in result.stderr and "Not a directory" in result.stderr


# ---- statuses: local, missing, cached, not cached while offline --------------------------------


@pytest.fixture()
def four_kinds(tmp_path):
    """models.yaml with (a) a local model, (b) a missing path, (c) a cached hub id, (d) an
    uncached hub id; plus a spec-spelt QPTQ-Quantized entry pointing at (a)."""
    local = tmp_path / "models" / "local-llama"
    local.mkdir(parents=True)
    (local / "config.json").write_text(json.dumps(CONFIG))
    hf_home = tmp_path / "hf"
    write_cached_model(
        hf_home / "hub", "org/cached-llama", model_files(**{"tokenizer.json": b"{}"})
    )
    models = write_yaml(
        tmp_path / "models.yaml",
        f"""
local-llama:
  Vanilla: {local}
  QPTQ-Quantized: ./models/local-llama
gone:
  Vanilla: /nonexistent/weights/gone
cached:
  Vanilla: org/cached-llama
remote:
  Vanilla: org/not-cached
""",
    )
    return models, hf_home


def test_statuses_offline(four_kinds):
    models, hf_home = four_kinds
    result = run("-i", str(models), "-o", str(hf_home))
    assert result.exit_code == 1, result.output
    rows = summary(result.stdout)
    assert rows[("local-llama", "Vanilla")] == ("local", "config.json present")
    assert rows[("local-llama", "GPTQ-Quantized")] == ("local", "config.json present")
    assert rows[("gone", "Vanilla")] == ("missing", "no such directory /nonexistent/weights/gone")
    status, reason = rows[("cached", "Vanilla")]
    assert status == "cached" and "config and weights present" in reason
    assert "not checked against the hub" in reason
    assert rows[("remote", "Vanilla")] == (
        "failed",
        "not cached; HF_HUB_OFFLINE is set, no downloads",
    )
    assert "5 entries: 2 local, 1 missing, 1 cached, 1 failed" in result.stdout
    assert "\x1b[" not in result.output  # not a terminal: plain text


def test_dry_run_reports_without_fetching(four_kinds):
    models, hf_home = four_kinds
    result = run("-i", str(models), "-o", str(hf_home), "--dry-run")
    rows = summary(result.stdout)
    assert rows[("remote", "Vanilla")] == (
        "would fetch",
        "not in the cache " + str(hf_home / "hub"),
    )
    assert rows[("cached", "Vanilla")][0] == "cached"
    assert rows[("gone", "Vanilla")][0] == "missing"
    assert result.exit_code == 1  # the missing local path would fail a real run
    assert not (hf_home / "hub" / "models--org--not-cached").exists()


def test_format_filter_and_clean_exit(four_kinds):
    models, hf_home = four_kinds
    result = run("-i", str(models), "-o", str(hf_home), "--format", "QPTQ-Quantized")
    assert result.exit_code == 0, result.output
    assert list(summary(result.stdout)) == [("local-llama", "GPTQ-Quantized")]


def test_local_dir_without_config_is_missing(tmp_path):
    (tmp_path / "empty").mkdir()
    write_yaml(tmp_path / "models.yaml", "e:\n  Vanilla: ./empty\nbad:\n  Vanilla: 'a b c'\n")
    result = run("-i", "models.yaml", "-o", "hf")
    rows = summary(result.stdout)
    status, reason = rows[("e", "Vanilla")]
    assert status == "missing" and "no config.json in" in reason
    assert rows[("bad", "Vanilla")][0] == "failed" and "not a hub id" in rows[("bad", "Vanilla")][1]
    assert result.exit_code == 1


def test_constructed_cache_is_a_real_hub_cache(four_kinds):
    from huggingface_hub import scan_cache_dir, snapshot_download, try_to_load_from_cache

    _, hf_home = four_kinds
    hub = hf_home / "hub"
    folder = snapshot_download("org/cached-llama", cache_dir=hub, local_files_only=True)
    assert Path(folder).name == COMMIT
    assert try_to_load_from_cache("org/cached-llama", "config.json", cache_dir=hub) == str(
        Path(folder) / "config.json"
    )
    assert [r.repo_id for r in scan_cache_dir(hub).repos] == ["org/cached-llama"]
    assert hf_cache.is_cached("org/cached-llama", hf_home)
    assert not hf_cache.is_cached("org/not-cached", hf_home)


# ---- completeness rules (hf_cache) -------------------------------------------------------------


def test_partial_snapshot_is_not_cached_although_huggingface_hub_returns_it(tmp_path):
    from huggingface_hub import snapshot_download

    hub = tmp_path / "hub"
    index = {
        "weight_map": {
            "a": "model-00001-of-00002.safetensors",
            "b": "model-00002-of-00002.safetensors",
        }
    }
    repo = write_cached_model(
        hub,
        "org/sharded",
        {
            "config.json": b"{}",
            "model.safetensors.index.json": json.dumps(index).encode(),
            "model-00001-of-00002.safetensors": b"1",
        },
    )
    # huggingface_hub's own offline look-up calls this snapshot fine...
    assert snapshot_download("org/sharded", cache_dir=hub, local_files_only=True)
    # ...but a shard is missing, so it is not cached.
    state = hf_cache.cache_state("org/sharded", tmp_path)
    assert not state.complete and "1 of 2 weight shards missing" in state.reason
    write_cached_model(hub, "org/sharded", {"model-00002-of-00002.safetensors": b"2"})
    assert hf_cache.is_cached("org/sharded", tmp_path)
    (repo / "blobs" / "deadbeef.incomplete").write_bytes(b"half")
    assert "unfinished" in hf_cache.cache_state("org/sharded", tmp_path).reason


def test_marker_decides_when_present(tmp_path):
    hub = tmp_path / "hub"
    repo = write_cached_model(hub, "org/m", model_files())
    assert hf_cache.is_cached("org/m", tmp_path)  # inferred from the files
    files = ["config.json", "model.safetensors", "tokenizer.json"]
    hf_cache.write_marker(repo, commit=COMMIT, revision="main", state="incomplete", files=files)
    state = hf_cache.cache_state("org/m", tmp_path)
    assert not state.complete and "did not finish" in state.reason  # an interrupted download
    hf_cache.write_marker(repo, commit=COMMIT, revision="main", state="complete", files=files)
    assert "tokenizer.json" in hf_cache.cache_state("org/m", tmp_path).reason  # missing
    write_cached_model(hub, "org/m", {"tokenizer.json": b"{}"})
    assert hf_cache.cache_state("org/m", tmp_path) == (
        True,
        f"complete (3 files, {COMMIT[:12]})",
        True,
    )
    # A marker for another commit (the ref moved) is ignored.
    other = "f" * 40
    write_cached_model(hub, "org/m", model_files(), commit=other)
    state = hf_cache.cache_state("org/m", tmp_path)
    assert state.complete and not state.recorded


def test_no_weights_or_no_config_is_not_cached(tmp_path):
    write_cached_model(tmp_path / "hub", "org/cfg-only", {"config.json": b"{}"})
    assert "no weights file" in hf_cache.cache_state("org/cfg-only", tmp_path).reason
    write_cached_model(tmp_path / "hub", "org/no-cfg", {"model.safetensors": b"0"})
    assert "no config.json" in hf_cache.cache_state("org/no-cfg", tmp_path).reason
    write_cached_model(
        tmp_path / "hub",
        "org/shards-no-index",
        {
            "config.json": b"{}",
            "model-00001-of-00002.safetensors": b"1",
        },
    )
    assert not hf_cache.is_cached("org/shards-no-index", tmp_path)
    write_cached_model(
        tmp_path / "hub", "org/gptq", {"config.json": b"{}", "gptq_model-4bit.safetensors": b"1"}
    )
    assert hf_cache.is_cached("org/gptq", tmp_path)


def test_training_files_skips_other_frameworks_and_duplicates():
    names = [
        ".gitattributes",
        "README.md",
        "config.json",
        "generation_config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "pytorch_model-00001-of-00002.bin",
        "pytorch_model.bin.index.json",
        "tokenizer.json",
        "tokenizer.model",
        "tf_model.h5",
        "flax_model.msgpack",
        "onnx/model.onnx",
        "original/consolidated.00.pth",
        "consolidated.safetensors",
        "model.gguf",
        "modeling_custom.py",
    ]
    assert hf_cache.training_files(names) == [
        "README.md",
        "config.json",
        "generation_config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "pytorch_model.bin.index.json",
        "tokenizer.json",
        "tokenizer.model",
        "modeling_custom.py",
    ]
    # Without safetensors, the .bin weights are what transformers loads.
    assert hf_cache.training_files(["config.json", "pytorch_model.bin"]) == [
        "config.json",
        "pytorch_model.bin",
    ]


def test_error_reasons():
    refused = requests.ConnectionError("HTTPSConnectionPool(...): [Errno 111] Connection refused")
    assert describe_error(refused, "http://h") == "hub unreachable (http://h): connection refused"
    dns = requests.ConnectionError("Failed to resolve 'huggingface.co' (NameResolutionError)")
    assert "cannot resolve the host name" in describe_error(dns, None)
    full = OSError(errno.ENOSPC, "No space left on device", "/hf/hub/blobs/x.incomplete")
    assert describe_error(full, None) == (
        "disk full: No space left on device (/hf/hub/blobs/x.incomplete)"
    )
