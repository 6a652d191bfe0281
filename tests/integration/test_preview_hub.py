"""`sfttrainer_preview` fetching a model's config.json alone from the hub, as a user runs it (the
console script in a subprocess), against a local stand-in for the hub (HF_ENDPOINT): the file
lands in hf_home's cache, no weight is requested, and the next run, with the hub gone, reads it
from the cache."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fake_hub import FakeHub

pytestmark = pytest.mark.slow

CONFIG = {
    "model_type": "llama",
    "vocab_size": 32000,
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 22,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "tie_word_embeddings": False,
}


@pytest.fixture
def hub():
    fake = FakeHub()
    fake.add(
        "acme/tiny-1b", {"config.json": json.dumps(CONFIG).encode(), "model.safetensors": b"0"}
    )
    yield fake
    fake.server.shutdown()


def write_space(tmp_path: Path) -> tuple[Path, Path]:
    space = tmp_path / "space.yaml"
    space.write_text(
        yaml.safe_dump(
            {
                "experiments": [{"experimentIdentifier": "finetune_lora_benchmark-v1.0.0"}],
                "entitySpace": [
                    {"identifier": "model_name", "propertyDomain": {"values": ["tiny-1b"]}},
                    {"identifier": "number_gpus", "propertyDomain": {"values": [1]}},
                    {
                        "identifier": "gpu_model",
                        "propertyDomain": {"values": ["NVIDIA-A100-SXM4-80GB"]},
                    },
                    {"identifier": "model_max_length", "propertyDomain": {"values": [2048]}},
                    {"identifier": "batch_size", "propertyDomain": {"values": [4]}},
                ],
            }
        )
    )
    ac = tmp_path / "ac.yaml"
    ac.write_text(
        yaml.safe_dump(
            {
                "parameters": {
                    "hf_home": str(tmp_path / "hf"),
                    "model_map": {"tiny-1b": {"Vanilla": "acme/tiny-1b"}},
                }
            }
        )
    )
    return space, ac


def preview(space: Path, ac: Path, out: Path, endpoint: str) -> subprocess.CompletedProcess:
    script = Path(sys.executable).with_name("sfttrainer_preview")
    env = {**os.environ, "HF_ENDPOINT": endpoint, "HF_HUB_OFFLINE": "0"}
    env.pop("HF_HOME", None)
    return subprocess.run(
        [str(script), str(space), "--actuator-config", str(ac), "--csv", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_hubs_config_json_alone_is_fetched_cached_and_read_offline_next_time(tmp_path, hub):
    space, ac = write_space(tmp_path)
    first = preview(space, ac, tmp_path / "first.csv", hub.url)
    assert first.returncode == 0, first.stdout + first.stderr
    (row,) = csv.DictReader((tmp_path / "first.csv").open())
    assert row["shape_source"] == "hub config.json"
    assert row["verdict"] == "fits" and float(row["predicted_tokens_per_second_per_gpu"]) > 0
    fetched = {path.rsplit("/", 1)[-1] for _, path in hub.requests}
    assert fetched == {"config.json"}  # never the weights
    cached = list((tmp_path / "hf" / "hub").glob("models--acme--tiny-1b/snapshots/*/config.json"))
    assert len(cached) == 1 and json.loads(cached[0].read_text()) == CONFIG

    hub.requests.clear()
    again = preview(space, ac, tmp_path / "again.csv", "http://127.0.0.1:9")  # the hub is gone
    assert again.returncode == 0, again.stdout + again.stderr
    (row,) = csv.DictReader((tmp_path / "again.csv").open())
    assert row["shape_source"] == "hf_home cache"
    assert hub.requests == []


def test_a_model_the_hub_lacks_gets_one_line_saying_how_to_add_it(tmp_path, hub):
    space, ac = write_space(tmp_path)
    document = yaml.safe_load(ac.read_text())
    document["parameters"]["model_map"] = {"tiny-1b": {"Vanilla": "acme/nowhere"}}
    ac.write_text(yaml.safe_dump(document))
    found = preview(space, ac, tmp_path / "p.csv", hub.url)
    assert found.returncode == 0, found.stdout + found.stderr
    (row,) = csv.DictReader((tmp_path / "p.csv").open())
    assert row["verdict"] == "unknown"
    assert row["why"].startswith("no config.json for model 'tiny-1b': none at ")
    assert "model_map ({tiny-1b: {Vanilla: /path/to/model}})" in row["why"]
