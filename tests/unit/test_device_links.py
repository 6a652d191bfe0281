"""The intra-node link of each device (metrics/gpu_peaks.yaml, `link`) and how the step time
prices FSDP's and DDP's collectives over it (plan/speed/step_time.py, link_bytes_per_second)."""

from __future__ import annotations

import dataclasses

import pytest

from ado_actuators.sfttrainer.metrics.gpu_peaks import peak_table
from ado_actuators.sfttrainer.plan.model.training import (
    Batch,
    Kernels,
    Parallelism,
    TrainingConfiguration,
)
from ado_actuators.sfttrainer.plan.speed.devices import Device, device_named, link_kind_of
from ado_actuators.sfttrainer.plan.speed.step_time import (
    FITTED,
    NCCL_LINK_SHARE,
    ModelShape,
    exposed,
    link_bytes_per_second,
    step_time,
)

# A Llama-2-7B-like model trained in full: 32 layers, 6.7 billion weights, all trainable.
SEVEN_B = ModelShape(
    layers=32,
    attention_width=4096,
    activated_width=4096 + 2 * 11008,
    matmul_params=6_500_000_000,
    total_params=6_700_000_000,
    trainable_params=6_700_000_000,
    hidden=4096,
)
# one short sequence a micro-batch: little compute to hide the gathers behind
SHORT = TrainingConfiguration(
    batch=Batch(per_device_batch=1, sample_tokens=512),
    kernels=Kernels(flash_attention=True, attention="flash_attention_2"),
)


def on(gpus: int, backend: str = "FSDP") -> TrainingConfiguration:
    return dataclasses.replace(SHORT, parallelism=Parallelism(gpus=gpus, backend=backend))


def entries():
    """The table's devices once each (aliases share their entry)."""
    seen = {}
    for name, entry in peak_table().items():
        seen.setdefault(id(entry), (name, entry))
    return list(seen.values())


@pytest.mark.parametrize("name,entry", entries(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_device_states_its_link_with_a_cited_source(name, entry):
    link = entry.link
    assert link is not None, f"{name}: no link"
    assert link.kind in ("nvlink", "pcie")
    assert link.pcie_gen in (3, 4, 5, 6)
    assert len(link.source) > 40, f"{name}: the source cites nothing"
    if link.kind == "pcie":  # an achieved figure, and how it follows where it is not measured
        assert link.bus_gbps and link.bus_gbps < (entry.interconnect_gbps or 0) / 2
        assert link.derived
    else:  # NVLink keeps the share rule the A100 fit was made with
        assert link.bus_gbps is None


def test_a_link_s_kind_is_read_as_the_device_takes_it():
    for name in peak_table():  # aliases too
        try:
            expected = device_named(name).link_kind
        except KeyError:  # listed without bandwidths: no device, still a kind
            continue
        assert link_kind_of(name) == expected, name
    assert link_kind_of("NVIDIA-L40S") == "pcie"
    assert link_kind_of("NVIDIA-A100-SXM4-80GB") == "nvlink"
    assert link_kind_of("Quantum-9") is None and link_kind_of(None) is None


def test_the_host_s_share_caps_the_link_with_many_gpus():
    pcie = Device("p", tflops=1, memory_gbps=1, interconnect_gbps=64, bus_gbps=10, host_gbps=64)
    assert [pcie.achieved_bus_gbps(n) for n in (2, 4, 6, 8)] == [10, 10, 10, 8]
    assert Device("n", tflops=1, memory_gbps=1, interconnect_gbps=600).achieved_bus_gbps(8) is None


def test_a_pcie_device_s_collectives_run_at_its_achieved_bus_bandwidth():
    l40s = device_named("L40S")
    assert l40s.link_kind == "pcie"
    for n, busbw in ((2, 10.0), (4, 10.0), (8, 8.0)):  # cited in gpu_peaks.yaml
        assert link_bytes_per_second(on(n), l40s) == pytest.approx(busbw * 1e9)
    found = step_time(SEVEN_B, on(4), l40s).parts
    compute = sum(v for k, v in found.items() if k not in ("host", "optimizer", "fsdp_latency"))
    compute -= found["communication"]
    # two all-gathers of the bf16 weights and a reduce-scatter of the gradients, 3/4 each
    traffic = 0.75 * (2 * 6.7e9 * 2 + 6.7e9 * 2) / 10e9
    assert found["communication"] == pytest.approx(exposed(traffic, compute, 32))


def test_ddp_s_all_reduce_counts_twice_the_volume_at_the_same_bus_bandwidth():
    l40s = device_named("L40S")
    found = step_time(SEVEN_B, on(2, "DDP"), l40s).parts
    traffic = 2 * 0.5 * 6.7e9 * 2 / 10e9  # 2 (n - 1) / n x gradients over busbw
    assert found["communication"] >= traffic / 32
    assert found["communication"] <= traffic


@pytest.mark.parametrize("name", ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"])
def test_an_nvlink_device_is_priced_as_before(name):
    device = device_named(name)
    old_rule = device.interconnect_gbps * 1e9 * NCCL_LINK_SHARE  # 200 GB/s on the A100
    for n in (2, 4, 8):
        assert link_bytes_per_second(on(n), device) == pytest.approx(old_rule)
    found = step_time(SEVEN_B, on(8), device, FITTED).parts
    compute = (
        sum(v for k, v in found.items() if k not in ("host", "optimizer", "fsdp_latency"))
        - found["communication"]
    )
    traffic = 7 / 8 * (3 * 6.7e9 * 2) / old_rule
    assert found["communication"] == pytest.approx(exposed(traffic, compute, 32))


def test_on_the_l40s_the_link_prefers_fewer_gpus_for_communication_bound_full_fine_tuning():
    """(n - 1) / n of the weights cross the link per GPU at a bus bandwidth that does not grow
    with n (and falls once the host is the narrower path): per GPU, 2 GPUs beat 4 beat 8."""
    l40s = device_named("L40S")
    steps = {n: step_time(SEVEN_B, on(n), l40s) for n in (2, 4, 8)}
    communication = {n: s.parts["communication"] for n, s in steps.items()}
    assert communication[4] / communication[2] == pytest.approx((3 / 4) / (1 / 2), rel=0.05)
    assert communication[8] / communication[4] == pytest.approx(
        (7 / 8 / 8) / (3 / 4 / 10), rel=0.05
    )
    rate = {n: s.tokens_per_second_per_gpu for n, s in steps.items()}
    assert rate[2] > rate[4] > rate[8]


def test_a_user_states_the_node_s_link_as_an_actuator_parameter():
    from ado_actuators.sfttrainer.engine.settings import MeasurementSettings
    from ado_actuators.sfttrainer.plan.speed.prediction import device_of

    assert MeasurementSettings().intra_node_gbps is None  # the device table's figure
    assert MeasurementSettings(intra_node_gbps=100).intra_node_gbps == 100
    bridged = device_of("L40S", intra_node_gbps=100.0)  # taken as given, no host cap
    assert bridged is not None
    assert link_bytes_per_second(on(8), bridged) == pytest.approx(100e9)
    a100 = device_of("NVIDIA-A100-SXM4-80GB", intra_node_gbps=50.0)
    assert a100 is not None
    assert link_bytes_per_second(on(4), a100) == pytest.approx(50e9)
    assert link_bytes_per_second(on(4), device_of("L40S")) == pytest.approx(10e9)
