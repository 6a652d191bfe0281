"""The trainer records which code a hybrid's Mamba-2 layers ran, and the row carries it."""

from __future__ import annotations

import sys
import types

import pytest

from ado_actuators.sfttrainer.contract.trainer_io import RankOutcome, RankReport
from ado_actuators.sfttrainer.trainer.model_size import MAMBA_PATH_NOTES, mamba_scan_path


class _Weight:
    def __init__(self, device: str) -> None:
        self.device = types.SimpleNamespace(type=device)


def _model(fast: bool, device: str) -> types.SimpleNamespace:
    """A model holding one Mamba-2 mixer whose modeling module did or did not find the kernels."""
    modeling = types.ModuleType("fake_modeling_hybrid")
    modeling.is_fast_path_available = fast  # type: ignore[attr-defined]

    class Mixer:
        __module__ = modeling.__name__

        def cuda_kernels_forward(self) -> None: ...

        def torch_forward(self) -> None: ...

    mixer = Mixer()
    mixer.in_proj = types.SimpleNamespace(weight=_Weight(device))  # type: ignore[attr-defined]
    sys.modules[modeling.__name__] = modeling
    return types.SimpleNamespace(modules=lambda: [object(), mixer])


@pytest.mark.parametrize(
    ("fast", "device", "path"),
    [(True, "cuda", "fused"), (False, "cuda", "torch"), (True, "cpu", "torch")],
)
def test_the_path_is_the_kernels_and_the_device_as_transformers_tests_them(fast, device, path):
    assert mamba_scan_path(_model(fast, device)) == path
    assert path in {"fused", "torch"} and MAMBA_PATH_NOTES[path]


def test_a_model_without_mamba_layers_records_none():
    assert mamba_scan_path(types.SimpleNamespace(modules=lambda: [object()])) is None


def test_a_tiny_hybrid_on_cpu_runs_the_torch_path():
    pytest.importorskip("transformers")
    import transformers

    config = transformers.GraniteMoeHybridConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        layer_types=["mamba", "attention"],
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=16,
        shared_intermediate_size=16,
        num_local_experts=0,
        mamba_n_heads=4,
        mamba_d_head=16,
        mamba_d_state=8,
    )
    model = transformers.AutoModelForCausalLM.from_config(config)
    assert mamba_scan_path(model) == "torch"


def test_the_rank_report_carries_the_path():
    report = RankReport(rank=0, local_rank=0, world_size=1, hostname="h", outcome=RankOutcome.OK)
    assert report.mamba_scan_path is None
    kept = RankReport.model_validate_json(
        report.model_copy(update={"mamba_scan_path": "torch"}).model_dump_json()
    )
    assert kept.mamba_scan_path == "torch"
