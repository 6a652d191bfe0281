"""A Granite 4.0 hybrid measured end to end on CPU, below ado, as test_measure.py measures the
tiny Llama: a tiny random `granitemoehybrid` (tests/tiny_hybrid.py: Mamba-2 layers beside
attention layers, experts) trained for real, in full and with LoRA. Without mamba_ssm and off a
GPU its Mamba-2 layers run transformers' torch path, and the row must say so; its token counts
are the tokenizer's own over the entries trained, counted here independently of the trainer.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_measure import DATASET, entity  # pytest puts tests/integration on sys.path
from tiny_hybrid import build_tiny_hybrid

from ado_actuators.sfttrainer.actuator.parameters import SFTTrainerParameters
from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.cli.generate_dataset_text import generate
from ado_actuators.sfttrainer.contract.outcomes import Measured
from ado_actuators.sfttrainer.contract.trainer_io import RankReport
from ado_actuators.sfttrainer.engine.measurement import measure
from ado_actuators.sfttrainer.trainer.model_size import MAMBA_PATH_NOTES

pytestmark = pytest.mark.slow
STEPS, BATCH = 2, 2
LENGTH = 1024
"""Longer than every entry of news-chars-512 under the tiny tokenizer (its first eight: 726 to 756 tokens), so
each entry is counted whole: the counts are the tokenizer's own, not the length cut. Past the
responses (about 400 tokens in), so labels are trained."""


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory) -> Path:
    return build_tiny_hybrid(
        tmp_path_factory.mktemp("models") / "tiny-hybrid", model_max_length=LENGTH
    )


@pytest.fixture(scope="module")
def params(tmp_path_factory, hybrid) -> SFTTrainerParameters:
    root = tmp_path_factory.mktemp("hybrid")
    data = root / "data"
    data.mkdir()
    generate(
        data / datasets.dataset_filename(DATASET),
        datasets.get_shape(DATASET),
        entries=4 * STEPS * BATCH,
        progress=False,
    )
    return SFTTrainerParameters(
        data_directory=str(data),
        hf_home=str(root / "hf"),
        output_dir=str(root / "out"),
        model_map={"tiny-hybrid": {"Vanilla": str(hybrid)}},
        stall_timeout_seconds=120,
    )


def trained_entries_tokens(params, hybrid, trainer_tools, tmp_path) -> int:
    """The spec's note 3 over the entries the measurement trains on (STEPS x BATCH, in order)."""
    data = Path(params.data_directory) / datasets.dataset_filename(DATASET)
    first = tmp_path / "first.jsonl"
    first.write_text("".join(data.read_text().splitlines(keepends=True)[: STEPS * BATCH]))
    counts = trainer_tools.spec_dataset_tokens(hybrid, first, LENGTH)
    assert max(counts) < LENGTH, counts  # none cut: each is the tokenizer's whole count
    return sum(counts)


def saved_parameters(hybrid: Path) -> int:
    """The parameters in the builder's weights file (the embeddings are not tied)."""
    from safetensors.torch import load_file

    return sum(t.numel() for t in load_file(hybrid / "model.safetensors").values())


@pytest.mark.parametrize(
    "experiment", ["finetune_full_benchmark-v1.0.0", "finetune_lora_benchmark-v1.0.0"]
)
def test_a_tiny_hybrid_measures_on_the_torch_scan_path_with_the_tokenizers_counts(
    params, hybrid, trainer_tools, tmp_path, experiment
):
    values = entity(
        model_name="tiny-hybrid",
        model_max_length=LENGTH,
        batch_size=BATCH,
        max_steps=STEPS,
    )
    outcome = measure(values, experiment, params, label="hybrid", use_cpu=False)
    assert isinstance(outcome, Measured), getattr(outcome, "reason", "")
    props, metadata = outcome.properties, outcome.metadata
    assert props["is_valid"] == 1 and metadata["steps"] == STEPS
    assert metadata["mamba_scan_path"] == "torch"
    assert MAMBA_PATH_NOTES["torch"] in metadata["notes"]
    assert props["train_loss_finite"] == 1.0 and props["train_loss_first_step"] > 0
    size, saved = metadata["model_parameters"], saved_parameters(hybrid)
    assert size["mixture_of_experts"] is True
    if experiment.startswith("finetune_lora"):  # the base frozen, the adapters added
        assert size["total"] - size["trainable"] == saved and 0 < size["trainable"] < saved
    else:
        assert size["total"] == size["trainable"] == saved
    # experts: no per-token FLOP convention, and the row says so rather than give a figure
    assert metadata["model_flops_per_token"] is None and "model_tflops_per_device" not in props
    assert (
        "model_tflops_per_device omitted: mixture-of-experts model: the per-token FLOP "
        "convention does not apply"
    ) in metadata["notes"]

    expected = trained_entries_tokens(params, hybrid, trainer_tools, tmp_path)
    (report,) = RankReport.read_all(Path(metadata["workdir"]) / "reports")
    assert [s.samples for s in report.steps] == [BATCH] * STEPS
    assert sum(s.dataset_tokens for s in report.steps) == expected
    # the row's throughput is those tokens over its runtime
    assert props["dataset_tokens_per_second"] * props["train_runtime"] == pytest.approx(expected)
    print(
        f"{experiment}: {props['dataset_tokens_per_second']:.0f} dataset tokens/s, "
        f"{expected} tokens in {props['train_runtime']:.2f} s, scan path "
        f"{metadata['mamba_scan_path']}"
    )
