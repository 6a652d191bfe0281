"""`sfttrainer_download_hf_weights` end to end, as `ray job submit` runs it (a subprocess, no TTY,
no stdin), against a local stand-in for the hub: a small HTTP server speaking the hub API that
huggingface_hub uses (model info, HEAD/GET resolve). huggingface_hub itself writes the cache;
transformers then loads the fetched model offline from HF_HOME."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_hub import FakeHub
from hub_cache import write_cached_model

from ado_actuators.sfttrainer.host import hf_cache

SKIPPED_EXTRAS = {
    "flax_model.msgpack": b"flax",
    "original/consolidated.00.pth": b"meta",
    "pytorch_model.bin": b"duplicate",
}


@pytest.fixture(scope="module")
def hub(tiny_model_dir):
    fake = FakeHub()
    tiny = {p.name: p.read_bytes() for p in sorted(tiny_model_dir.iterdir()) if p.is_file()}
    fake.add("org/tiny-llama", {**tiny, "README.md": b"# tiny", **SKIPPED_EXTRAS})
    fake.add("org/gated", {"config.json": b"{}"}, gated=True)
    fake.add("org/huge", {"config.json": b"{}", "model.safetensors": b"0"}, claimed_size=10**16)
    fake.add(
        "org/flaky",
        {"config.json": tiny["config.json"], "model.safetensors": tiny["model.safetensors"]},
    )
    yield fake
    fake.server.shutdown()


def cli(*args, endpoint: str, env: dict | None = None):
    """The console script, as `ray job submit -- sfttrainer_download_hf_weights ...` runs it."""
    script = Path(sys.executable).with_name("sfttrainer_download_hf_weights")
    command = (
        [str(script)]
        if script.exists()
        else [sys.executable, "-m", "ado_actuators.sfttrainer.cli.download_hf_weights"]
    )
    full_env = {
        **os.environ,
        "HF_ENDPOINT": endpoint,
        "HF_HUB_OFFLINE": "0",
        "TRANSFORMERS_OFFLINE": "0",
        **(env or {}),
    }
    full_env.pop("HF_TOKEN", None)
    proc = subprocess.run(
        command + list(args),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "\x1b[" not in proc.stdout + proc.stderr  # no terminal: plain text
    return proc


def rows(stdout: str) -> dict[str, tuple[str, str]]:
    """source -> (status, reason) from the plain summary table."""
    lines = stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("model "))
    table = {}
    for line in lines[header + 1 :]:
        if " entries: " in line:
            break
        cells = re.split(r"\s{2,}", line, maxsplit=4)
        table[cells[2]] = (cells[3], cells[4])
    return table


def models_yaml(path: Path, entries: dict[str, str]) -> Path:
    path.write_text("".join(f"{n}:\n  Vanilla: {loc}\n" for n, loc in entries.items()))
    return path


def snapshot(hf_home: Path, repo_id: str) -> Path:
    repo = hf_cache.repo_folder(repo_id, hf_home / "hub")
    return repo / "snapshots" / (repo / "refs" / "main").read_text()


def fetched(hf_home: Path, name: str) -> bool:
    """`name` of org/flaky is in its snapshot (no snapshot yet: not fetched)."""
    try:
        return (snapshot(hf_home, "org/flaky") / name).is_file()
    except FileNotFoundError:
        return False


@pytest.mark.slow  # five CLI runs and a model load: the heaviest test of this file
def test_fetch_report_rerun_cached_and_load_offline(tmp_path, hub, tiny_model_dir):
    hf_home = tmp_path / "hf_home"
    models = models_yaml(
        tmp_path / "models.yaml",
        {
            "local": str(tiny_model_dir),
            "gone": str(tmp_path / "no-such-model"),
            "tiny": "org/tiny-llama",
            "nope": "org/does-not-exist",
            "gated": "org/gated",
        },
    )
    first = cli("-i", str(models), "-o", str(hf_home), endpoint=hub.url)
    assert first.returncode == 1, first.stdout + first.stderr
    table = rows(first.stdout)
    assert table[str(tiny_model_dir)] == ("local", "config.json present")
    assert table[str(tmp_path / "no-such-model")][0] == "missing"
    status, reason = table["org/tiny-llama"]
    assert status == "fetched" and reason.startswith("7 files, "), reason
    assert table["org/does-not-exist"] == (
        "failed",
        "repository not found on the hub (private? pass --token or set HF_TOKEN)",
    )
    status, reason = table["org/gated"]
    assert status == "failed" and reason.startswith("gated repository"), reason
    assert "5 entries: 1 local, 1 missing, 1 fetched, 2 failed" in first.stdout
    assert re.search(r"org/tiny-llama: 7 files, [\d.]+ kB", first.stderr), first.stderr

    # Files training does not read were neither requested nor stored.
    fetched = {p for _, p in hub.requests if "/org/tiny-llama/resolve/" in p}
    assert not [p for p in fetched if any(p.endswith(x) for x in SKIPPED_EXTRAS)]
    stored = sorted(p.name for p in snapshot(hf_home, "org/tiny-llama").iterdir())
    assert stored == sorted([*(p.name for p in tiny_model_dir.iterdir()), "README.md"])
    assert hf_cache.cache_state("org/tiny-llama", hf_home).recorded

    # Again: cached, and the hub is not asked at all.
    hub.requests.clear()
    again = cli(
        "-i",
        str(models_yaml(tmp_path / "tiny.yaml", {"tiny": "org/tiny-llama"})),
        "-o",
        str(hf_home),
        endpoint=hub.url,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert rows(again.stdout)["org/tiny-llama"][0] == "cached"
    assert hub.requests == []

    # A training process with HF_HOME=<that dir> loads it with the hub offline.
    load = (
        "from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer\n"
        "c = AutoConfig.from_pretrained('org/tiny-llama')\n"
        "t = AutoTokenizer.from_pretrained('org/tiny-llama')\n"
        "m = AutoModelForCausalLM.from_pretrained('org/tiny-llama')\n"
        "print(c.model_type, len(t), sum(p.numel() for p in m.parameters()))\n"
    )
    env = {
        **os.environ,
        "HF_HOME": str(hf_home),
        "HF_HUB_OFFLINE": "1",
        "HF_ENDPOINT": "http://127.0.0.1:9",
    }
    proc = subprocess.run(
        [sys.executable, "-c", load], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "llama"
    from ado_actuators.sfttrainer.catalog.validity import read_model_config

    assert read_model_config("org/tiny-llama", str(hf_home))["model_type"] == "llama"


def test_interrupted_download_is_never_reported_cached(tmp_path, hub):
    from huggingface_hub import snapshot_download

    hf_home = tmp_path / "hf_home"
    models = models_yaml(tmp_path / "models.yaml", {"flaky": "org/flaky"})
    hub.truncate.add(("org/flaky", "model.safetensors"))
    try:
        broken = cli("-i", str(models), "-o", str(hf_home), endpoint=hub.url)
    finally:
        hub.truncate.clear()
    assert broken.returncode == 1
    status, reason = rows(broken.stdout)["org/flaky"]
    assert (status, reason) == (
        "failed",
        "download interrupted: the connection dropped mid-file; run again to resume",
    )
    # huggingface_hub's offline look-up accepts the partial snapshot (config.json is there)...
    assert snapshot_download("org/flaky", cache_dir=hf_home / "hub", local_files_only=True)
    assert (snapshot(hf_home, "org/flaky") / "config.json").is_file()
    assert not (snapshot(hf_home, "org/flaky") / "model.safetensors").exists()
    # ...but this command and the actuator do not.
    assert not hf_cache.is_cached("org/flaky", hf_home)
    dry = cli("-i", str(models), "-o", str(hf_home), "--dry-run", endpoint=hub.url)
    assert rows(dry.stdout)["org/flaky"] == (
        "would fetch",
        "an earlier download did not finish; run the download again",
    )

    resumed = cli("-i", str(models), "-o", str(hf_home), endpoint=hub.url)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert rows(resumed.stdout)["org/flaky"][0] == "fetched"
    assert hf_cache.is_cached("org/flaky", hf_home)
    assert not list(hf_cache.repo_folder("org/flaky", hf_home / "hub").glob("blobs/*.incomplete"))


def test_killed_download_is_never_reported_cached(tmp_path, hub):
    """`ray job stop` kills the command mid-file: the model must not look cached afterwards."""
    hf_home = tmp_path / "hf_home"
    models = models_yaml(tmp_path / "models.yaml", {"flaky": "org/flaky"})
    hub.stall.add(("org/flaky", "model.safetensors"))
    script = Path(sys.executable).with_name("sfttrainer_download_hf_weights")
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0"}
    proc = subprocess.Popen(
        [str(script), "-i", str(models), "-o", str(hf_home)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 300  # a guard against a hang, not a speed claim
        # the weights' file stalls for ever; the config.json fetched beside it (another of
        # huggingface_hub's threads) completes, but only after its own while under load
        while not (
            any(kind == "STALLED" for kind, _ in hub.requests) and fetched(hf_home, "config.json")
        ):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.terminate()
        proc.wait(timeout=30)
    finally:
        hub.stall.clear()
        hub.release.set()
        proc.kill()
    partial = list(hf_cache.repo_folder("org/flaky", hf_home / "hub").glob("blobs/*.incomplete"))
    assert partial  # the file being written when the command was killed
    assert (snapshot(hf_home, "org/flaky") / "config.json").is_file()
    state = hf_cache.cache_state("org/flaky", hf_home)
    assert not state.complete and "did not finish" in state.reason
    resumed = cli("-i", str(models), "-o", str(hf_home), endpoint=hub.url)
    assert resumed.returncode == 0 and rows(resumed.stdout)["org/flaky"][0] == "fetched"
    assert hf_cache.is_cached("org/flaky", hf_home)


def test_unreachable_hub_fails_fast_and_keeps_usable_cache(tmp_path, tiny_model_dir):
    # Held bound (never listening) for the whole test: refused, and no one else can take it.
    refusing = socket.socket()
    refusing.bind(("127.0.0.1", 0))
    closed = f"http://127.0.0.1:{refusing.getsockname()[1]}"
    hf_home = tmp_path / "hf_home"
    # A model another tool put in the cache (no record of ours): usable, but not checkable.
    write_cached_model(
        hf_home / "hub",
        "org/prefilled",
        {
            name: (tiny_model_dir / name).read_bytes()
            for name in ("config.json", "model.safetensors")
        },
    )
    models = models_yaml(
        tmp_path / "models.yaml",
        {
            "a": "org/a",
            "b": "org/b",
            "prefilled": "org/prefilled",
        },
    )
    try:
        proc = cli("-i", str(models), "-o", str(hf_home), endpoint=closed)
    finally:
        refusing.close()
    assert proc.returncode == 1
    table = rows(proc.stdout)
    assert table["org/a"] == ("failed", f"hub unreachable ({closed}): connection refused")
    assert table["org/b"] == ("failed", "not cached; hub unreachable (as for org/a)")
    status, reason = table["org/prefilled"]
    assert status == "cached" and "not checked against the hub" in reason, reason


def test_not_enough_disk_space_fails_before_downloading(tmp_path, hub):
    hf_home = tmp_path / "hf_home"
    models = models_yaml(tmp_path / "models.yaml", {"huge": "org/huge"})
    proc = cli("-i", str(models), "-o", str(hf_home), endpoint=hub.url)
    assert proc.returncode == 1
    status, reason = rows(proc.stdout)["org/huge"]
    assert status == "failed" and reason.startswith("disk full: needs 20000.0 TB"), reason
    assert not hf_cache.repo_folder("org/huge", hf_home / "hub").exists()
    shutil.rmtree(hf_home, ignore_errors=True)
