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
