"""A space's measurements -> points, panels, invalid markers, and the PNG + HTML files."""

from __future__ import annotations

import base64
import io
import re

import pytest
from PIL import Image

from ado_actuators.sfttrainer.report.figure import invalid_markers
from ado_actuators.sfttrainer.report.files import write_report
from ado_actuators.sfttrainer.report.summary import format_value
from ado_actuators.sfttrainer.report.table import Panel, TableError, space_table

FULL = "SFTTrainer.finetune_full_benchmark-v1.0.0-dataset_id.news-tokens-16384plus-entries-4096"
LORA = "SFTTrainer.finetune_lora_benchmark-v1.0.0-dataset_id.news-tokens-16384plus-entries-4096"


def row(experiment=FULL, gpus=1, length=512, batch=4, valid=1, tps=1000.0, **extra):
    """A row as `ado show measurements ... -o csv --property-format target` writes it."""
    measured = {"dataset_tokens_per_second": tps, "dataset_tokens_per_second_per_gpu": tps / max(1, gpus)}
    return {
        "identifier": f"batch_size.{batch}-model_max_length.{length}-number_gpus.{gpus}",
        "generatorid": "explicit_grid_sample_generator", "experiment_id": experiment,
        "model_name": "granite-3.1-2b", "number_gpus": str(gpus), "model_max_length": str(length),
        "batch_size": str(batch), "is_valid": str(valid),
        **({k: str(v) for k, v in measured.items()} if valid else
           {k: "" for k in measured}),
        **{k: str(v) for k, v in extra.items()},
    }  # fmt: skip


def grid():
    """2 experiments x 2 GPU counts x 2 lengths x 3 batch sizes; the longest sequences run out
    of memory at the largest batch on 1 GPU, and both lengths do for full at batch 16."""
    rows = []
    for experiment in (FULL, LORA):
        for gpus in (1, 2):
            for length in (512, 1024):
                for batch in (4, 8, 16):
                    oom = gpus == 1 and batch == 16 and (length == 1024 or experiment == FULL)
                    tps = 100.0 * gpus * batch * (2 if experiment == LORA else 1) + length
                    rows.append(row(experiment, gpus, length, batch, valid=0 if oom else 1, tps=tps))
    return rows


def test_panels_are_gpu_counts_by_experiment_and_lines_are_sequence_lengths():
    table = space_table(grid())
    assert table.panels == (Panel(1, ("full",)), Panel(1, ("lora",)),
                            Panel(2, ("full",)), Panel(2, ("lora",)))  # fmt: skip
    assert table.sequence_lengths == (512, 1024) and table.batch_sizes == (4, 8, 16)
    assert table.shared == (("model_name", "granite-3.1-2b"),)
    point = next(p for p in table.in_panel(Panel(2, ("lora",))) if (p.sequence_length, p.batch_size) == (1024, 8))
    assert point.valid and point.values["dataset_tokens_per_second"] == (4224.0, 4224.0, 4224.0)
    assert point.values["dataset_tokens_per_second_per_gpu"][0] == 2112.0
    # only the figures present in the table are plotted
    assert [m.column for m in table.metrics] == ["dataset_tokens_per_second",
                                                 "dataset_tokens_per_second_per_gpu"]  # fmt: skip


def test_invalid_configurations_are_marked_at_their_batch_size_stacked_by_length():
    table = space_table(grid())
    assert {(p.panel, p.sequence_length, p.batch_size) for p in table.invalid} == {
        (Panel(1, ("full",)), 512, 16), (Panel(1, ("full",)), 1024, 16),
        (Panel(1, ("lora",)), 1024, 16)}  # fmt: skip
    full = invalid_markers(table.in_panel(Panel(1, ("full",))))
    assert sorted(full) == [(16, 0.06, 512), (16, pytest.approx(0.15), 1024)]
    assert invalid_markers(table.in_panel(Panel(1, ("lora",)))) == [(16, 0.06, 1024)]
    assert invalid_markers(table.in_panel(Panel(2, ("full",)))) == []
    assert all(p.values == {} for p in table.invalid)


def test_new_figures_are_plotted_when_present_and_gpu_only_zeros_are_not():
    rows = [row(batch=b, train_step_seconds_p50=0.5 * b, train_step_seconds_p90=0.6 * b,
                train_step_seconds_cv_percent=4.0, model_tflops_per_device=0.0,
                model_flops_utilization=0.0) for b in (2, 4)]  # fmt: skip
    rows[1]["model_tflops_per_device"] = "12.5"
    table = space_table(rows)
    assert [m.column for m in table.metrics] == [
        "dataset_tokens_per_second", "dataset_tokens_per_second_per_gpu",
        "train_step_seconds_p50", "train_step_seconds_cv_percent", "model_tflops_per_device"]  # fmt: skip
    assert table.in_panel(table.panels[0])[1].values["train_step_seconds_p90"][0] == 2.4


def test_repeated_measurements_are_averaged_with_their_range():
    # ado writes an entity measured twice as a list in each cell
    twice = row(tps=0) | {"is_valid": "[1, 1]", "dataset_tokens_per_second": "[900.0, 1100.0]"}
    (point,) = space_table([twice]).points
    assert point.values["dataset_tokens_per_second"] == (1000.0, 900.0, 1100.0)
    assert point.measurements == 2


def test_other_varying_fields_split_the_panels_and_fixed_axes_come_from_the_experiment_id():
    rows = [row(length=512) | {"model_name": "a"}, row(length=512) | {"model_name": "b"}]
    assert {p.column for p in space_table(rows).panels} == {("full", "model a"),
                                                           ("full", "model b")}  # fmt: skip
    fixed = row() | {"experiment_id": FULL + "-number_gpus.4-torch_dtype.bfloat16"}
    del fixed["number_gpus"]
    assert space_table([fixed]).panels == (Panel(4, ("full",)),)


def test_stability_experiments_beside_benchmarks_are_left_out():
    stability = {"experiment_id": "SFTTrainer.finetune_full_stability-v1.0.0", "number_gpus": "1",
                 "model_max_length": "512", "batch_size": "4", "is_valid": "1", "f_gpu_oom": "0.4"}  # fmt: skip
    assert space_table([row(), stability]).panels == (Panel(1, ("full",)),)
    with pytest.raises(TableError, match="no throughput measurement"):
        space_table([stability | {"dataset_tokens_per_second": ""}])


@pytest.mark.parametrize(
    ("rows", "needles"),
    [
        ([], ["no measurements", "run an operation"]),
        ([{"experiment_id": FULL, "batch_size": "2"}], ["model_max_length", "is_valid",
                                                        "dataset_tokens_per_second", "ado show measurements"]),
        ([row() | {"batch_size": "two"}], ["row 1", "'two'"]),
    ],
)  # fmt: skip
def test_tables_that_cannot_be_plotted_say_what_is_missing(rows, needles):
    with pytest.raises(TableError) as raised:
        space_table(rows, "x.csv")
    for needle in needles:
        assert needle in str(raised.value)


def test_files_hold_a_decodable_picture_and_the_plotted_values(tmp_path):
    table = space_table(grid())
    files = write_report(table, tmp_path / "out", "space-1", "SFTTrainer measurements: space-1")
    assert files.png == tmp_path / "out" / "space-1.png"
    image = Image.open(files.png)
    image.load()
    # 2 metrics x 4 facets: wider than one panel, taller than the four rows of panels
    assert image.format == "PNG" and 700 <= image.width <= 2000 and 900 <= image.height <= 2000
    assert len(image.convert("L").getcolors(256)) > 20  # drawn, not blank

    page = files.html.read_text()
    embedded = re.search(r'src="data:image/png;base64,([^"]+)"', page).group(1)
    markup = page.replace(embedded, "")
    assert "<script" not in markup and "http" not in markup  # nothing fetched on opening
    assert base64.b64decode(embedded) == files.png.read_bytes()
    assert Image.open(io.BytesIO(base64.b64decode(embedded))).size == image.size
    for point in table.points:
        if point.valid:
            assert format_value(point.values["dataset_tokens_per_second"][0]) in page
    assert page.count('class="invalid"') == 3
    assert "12 configurations" not in page and "24 configurations: 21 measured, 3 invalid" in page
    assert not list((tmp_path / "out").glob(".*partial"))
