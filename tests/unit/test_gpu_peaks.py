"""The dense bf16/fp16 peak table covers every gpu_model the catalog names, with a source."""

from ado_actuators.sfttrainer.catalog.entity import GPU_MODELS
from ado_actuators.sfttrainer.metrics.gpu_peaks import (
    gpu_model_from_device_name,
    peak_table,
    peak_tflops,
)


def test_every_catalog_gpu_model_has_a_cited_peak():
    for model in filter(None, GPU_MODELS):
        peak = peak_table()[model]
        assert peak.tflops > 0 and peak.dtype in ("bf16", "fp16")
        assert "datasheet" in peak.source.lower() or "whitepaper" in peak.source.lower()


def test_known_figures_and_unknown_devices():
    assert peak_tflops("NVIDIA-A100-SXM4-80GB") == 312
    assert peak_tflops("NVIDIA-H100-80GB-HBM3") == 989.4
    assert peak_tflops("Tesla-T4") == 65  # fp16: no bf16 on Turing
    assert peak_tflops(None) is None and peak_tflops("Acme-X1") is None


def test_torch_device_names_map_to_node_labels():
    assert gpu_model_from_device_name("NVIDIA H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"
    assert gpu_model_from_device_name("NVIDIA A100-SXM4-80GB") == "NVIDIA-A100-SXM4-80GB"
    assert peak_tflops(gpu_model_from_device_name("NVIDIA L40S")) == 362.05


RENTED = (
    "NVIDIA-A10G",
    "NVIDIA-L4",
    "NVIDIA-L40",
    "L40S",
    "NVIDIA-A100-SXM4-40GB",
    "NVIDIA-A100-SXM4-80GB",
    "NVIDIA-A100-PCIE-40GB",
    "NVIDIA-A100-80GB-PCIe",
    "NVIDIA-H100-80GB-HBM3",
    "NVIDIA-H100-PCIe",
    "NVIDIA-H100-NVL",
    "NVIDIA-H200",
    "NVIDIA-GH200-480GB",
    "NVIDIA-B200",
)


def test_every_rented_device_has_what_it_achieves_cited_and_a_memory_size():
    from ado_actuators.sfttrainer.metrics.gpu_memory import memory_table
    from ado_actuators.sfttrainer.plan.speed.devices import device_named

    for model in RENTED:
        peak = peak_table()[model]
        assert peak.gemm_tflops and peak.gemm_tflops.source
        assert 0 < peak.gemm_tflops.value <= peak.tflops
        assert peak.l2_mb and peak.l2_mb.value > 0
        assert peak.attention or peak.attention_from in peak_table()
        assert all(curve.source for curve in peak.attention)
        assert device_named(model).attention  # curves of its own or scaled from another's
        assert memory_table()[model].gib > 0


def _rates():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"))
    try:
        import rates
    finally:
        sys.path.pop(0)
    return rates


MEASURED = {
    "device": "NVIDIA H100 80GB HBM3",
    "torch": "2.11.0",
    "cuda": "12.8",
    "date": "2026-11-27",
    "gemm_tflops": {"4096x4096x4096": 700.0, "8192x8192x8192": 760.0},
    "attention": {
        "sdpa": {"forward": {1024: 250.0, 4096: 320.0}, "backward": {1024: 180.0, 4096: 260.0}},
        "fa2": None,
    },
    "copy_gbps": 2900.0,
}


def test_the_device_check_writes_an_entry_the_table_reads_with_its_provenance(
    tmp_path, monkeypatch
):
    import yaml

    from ado_actuators.sfttrainer.metrics import device_tables
    from ado_actuators.sfttrainer.plan.speed.devices import device_named

    listed = peak_table()["NVIDIA-H100-80GB-HBM3"].model_dump(
        mode="json", exclude_none=True, exclude_defaults=True
    )
    entry = _rates().device_entry(MEASURED, listed)
    found = entry["NVIDIA-H100-80GB-HBM3"]
    assert found["tflops"] == 989.4  # the datasheet stays
    assert (
        found["gemm_tflops"]["value"] == 760.0
        and "device check" in found["gemm_tflops"]["measured"]
    )
    assert found["memory_gbps"] == 2900.0 and found["memory_datasheet"] is False
    assert {c["kernel"] for c in found["attention"]} == {"sdpa"}
    path = tmp_path / "device-entry.yaml"
    path.write_text(yaml.safe_dump(entry, sort_keys=False))
    monkeypatch.setenv(device_tables.OVERRIDE, str(path))
    peak_table.cache_clear()
    try:
        device = device_named("NVIDIA-H100-80GB-HBM3")
        assert device.gemm_tflops == 760.0 and device.memory_gbps == 2900.0
        assert device.attention_tflops("sdpa", 128, 4096, True, "forward") == 320.0
    finally:
        monkeypatch.delenv(device_tables.OVERRIDE)
        peak_table.cache_clear()


def test_a_device_the_table_lacks_gets_an_entry_from_its_measurements_alone():
    entry = _rates().device_entry({**MEASURED, "device": "NVIDIA Acme X1"}, None)
    found = entry["NVIDIA-Acme-X1"]
    assert found["tflops"] == 760.0 and "not listed" in found["source"]
    from ado_actuators.sfttrainer.metrics.gpu_peaks import GpuPeak

    GpuPeak(**found)  # a valid entry


def test_an_alias_is_the_same_device_under_its_table_name():
    from ado_actuators.sfttrainer.metrics.gpu_memory import memory_table
    from ado_actuators.sfttrainer.plan.speed.devices import device_named

    assert device_named("NVIDIA-A100-SXM-80GB").name == "NVIDIA-A100-SXM4-80GB"
    assert device_named("L40").name == "NVIDIA-L40"
    assert memory_table()["NVIDIA-H100-SXM5-80GB"].gib == 80
