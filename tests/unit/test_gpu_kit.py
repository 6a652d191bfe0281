"""benchmarks/gpu's kit check and step budgets: pure parts, no download, no GPU."""

from __future__ import annotations

import subprocess
import sys
import time
import zipfile
from pathlib import Path

import psutil
import pytest
from packaging.version import Version

GPU = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"
sys.path.insert(0, str(GPU))

import check  # noqa: E402
import kit  # noqa: E402
from rows import SETS  # noqa: E402


def wheel(directory: Path, name: str, version: str, *requires: str) -> Path:
    path = directory / f"{name}-{version}-py3-none-any.whl"
    lines = [f"Name: {name}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}-{version}.dist-info/METADATA", "\n".join(lines) + "\n")
    return path


def test_kit_requirements_come_from_the_package_list_at_its_pins():
    pins = kit.kit_requirements()
    listed = kit.PACKAGE_LIST.read_text()
    for name in kit.FROM_PACKAGE_LIST:
        (pin,) = [p for p in pins if p.split("==")[0] == name]
        assert pin in listed
    assert not any(p.startswith(("torch", "nvidia", "ray", "ado-core")) for p in pins)


def test_kit_check_names_what_neither_the_kit_nor_the_image_has(tmp_path):
    image = {"requests": None, "numpy": Version("2.5.2"), "huggingface-hub": Version("1.33.0")}
    wheels = [
        wheel(
            tmp_path,
            "datasets",
            "4.8.5",
            "requests",
            "dill<0.4.2",
            "numpy>=1.17",
            "huggingface-hub<2.0,>=0.25.0",
            'pywin32; sys_platform == "win32"',
        ),
        wheel(tmp_path, "transformers", "4.55.4", "huggingface-hub<1.0,>=0.34.0", "torch>=2"),
    ]
    found = kit.problems(wheels, image, own="ado-sfttrainer")
    assert any("dill<0.4.2, which neither the kit nor the image has" in p for p in found)
    assert any("huggingface-hub<1.0,>=0.34.0, the image has 1.33.0" in p for p in found)
    assert len(found) == 2  # markers for other platforms and knowingly unmet torch are not news
    wheels.append(wheel(tmp_path, "dill", "0.4.1"))
    wheels.append(wheel(tmp_path, "huggingface_hub", "0.36.2"))
    assert kit.problems(wheels, image, own="ado-sfttrainer") == []


def test_the_shipped_image_list_has_the_versions_the_kit_relies_on():
    image = kit.image_packages()
    assert image["torch"] == Version("2.11.0") and image["transformers"] == Version("5.17.0")
    assert "pydantic" not in image and "datasets" not in image and "ray" not in image


def test_every_check_row_has_a_label_of_its_own_and_both_modes_cover_the_same_launches():
    for mode in ("gpu", "cpu"):
        labels = [c.label for c in SETS["check"][mode]]
        assert len(set(labels)) == len(labels)
    shape = {
        mode: sorted((c.method, c.launcher, c.expect_oom, c.bare) for c in SETS["check"][mode])
        for mode in ("gpu", "cpu")
    }
    assert shape["gpu"] == shape["cpu"]


def test_a_step_that_hangs_is_stopped_at_its_budget_with_its_children(tmp_path):
    child = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
        "print('started', flush=True); time.sleep(300)"
    )
    step = check.Step("hang", [sys.executable, "-c", child], budget=3)
    started = time.monotonic()
    record = check.run_step(step, time.monotonic() + 600, tmp_path, None)
    assert record["status"] == "timeout" and "budget of 3 s" in record["why"]
    assert time.monotonic() - started < 3 + check.KILL_GRACE_SECONDS + 5
    assert "started" in record["log_tail"]
    me = psutil.Process()
    assert not [
        p for p in me.children(recursive=True) if "time.sleep(300)" in " ".join(p.cmdline())
    ]


def test_a_step_is_skipped_when_the_call_has_no_time_left(tmp_path):
    step = check.Step("late", [sys.executable, "-c", "pass"], budget=60)
    record = check.run_step(step, time.monotonic() + check.RESERVE_SECONDS + 1, tmp_path, None)
    assert record["status"] == "skipped" and "no time left" in record["why"]


@pytest.mark.parametrize("status, code", [("ok", "pass"), ("failed", "raise SystemExit(3)")])
def test_a_step_reports_its_exit(tmp_path, status, code):
    record = check.run_step(
        check.Step("s", [sys.executable, "-c", code], 30), time.monotonic() + 600, tmp_path, None
    )
    assert record["status"] == status


def test_device_check_refuses_to_run_without_a_kit(tmp_path):
    done = subprocess.run(
        ["bash", str(GPU / "device-check.sh"), "--kit", str(tmp_path), "--cpu"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "make gpu-kit" in done.stderr


def test_the_device_checks_nvml_probe_describes_the_node_as_every_row_does(tmp_path):
    """probes.py reads the machine block through NVML over every GPU of the node; here through
    the NVML imitation (tests/nvml_imitation) first on PYTHONPATH, as the probe imports it."""
    import json
    import os

    imitation = Path(__file__).resolve().parents[1] / "nvml_imitation"
    code = "import json, probes; print(json.dumps(probes.node_machine()))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(imitation), str(GPU)])},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    machine = json.loads(done.stdout)
    assert [g["index"] for g in machine["gpus"]] == [0, 1, 2, 3]  # the imitation's 4 GPUs
    line = check.machine_line(machine)
    assert line.startswith("machine: 4 x NVIDIA H100 80GB HBM3, driver 550.54.15, CUDA ")
    assert "links: NVLink through NVSwitch; GPU 0 SM 345/1980 MHz, power limit 700.0 W" in line
