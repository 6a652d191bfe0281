"""A space's measurements -> points, panels, invalid markers, the answers (fastest, largest
batch, scaling), a comparison of two spaces, and the PNG + HTML files."""

from __future__ import annotations

import base64
import io
import re

import pytest
from PIL import Image

from ado_actuators.sfttrainer.report.answers import (
    BatchLimit,
    answers,
    gpu_hours_per_million_tokens,
    speed,
)
from ado_actuators.sfttrainer.report.compare import compare
from ado_actuators.sfttrainer.report.figure import invalid_markers
from ado_actuators.sfttrainer.report.files import write_report
from ado_actuators.sfttrainer.report.summary import answer_blocks, comparison_block, format_value
from ado_actuators.sfttrainer.report.table import Panel, TableError, space_table

FULL = "SFTTrainer.finetune_full_benchmark-v1.0.0-dataset_id.news-tokens-16384plus-entries-4096"
LORA = "SFTTrainer.finetune_lora_benchmark-v1.0.0-dataset_id.news-tokens-16384plus-entries-4096"


def row(experiment=FULL, gpus=1, length=512, batch=4, valid=1, tps=1000.0, **extra):
    """A row as `ado show measurements ... -o csv --property-format target` writes it."""
    measured = {
        "dataset_tokens_per_second": tps,
        "dataset_tokens_per_second_per_gpu": tps / max(1, gpus),
    }
    return {
        "identifier": f"batch_size.{batch}-model_max_length.{length}-number_gpus.{gpus}",
        "generatorid": "explicit_grid_sample_generator",
        "experiment_id": experiment,
        "model_name": "granite-3.1-2b",
        "number_gpus": str(gpus),
        "model_max_length": str(length),
        "batch_size": str(batch),
        "is_valid": str(valid),
        **({k: str(v) for k, v in measured.items()} if valid else dict.fromkeys(measured, "")),
        **{k: str(v) for k, v in extra.items()},
    }


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
                    rows.append(
                        row(experiment, gpus, length, batch, valid=0 if oom else 1, tps=tps)
                    )
    return rows


def test_panels_are_gpu_counts_by_experiment_and_lines_are_sequence_lengths():
    table = space_table(grid())
    assert table.panels == (
        Panel(1, ("full",)),
        Panel(1, ("lora",)),
        Panel(2, ("full",)),
        Panel(2, ("lora",)),
    )
    assert table.sequence_lengths == (512, 1024) and table.batch_sizes == (4, 8, 16)
    assert table.shared == (("model_name", "granite-3.1-2b"),)
    point = next(
        p
        for p in table.in_panel(Panel(2, ("lora",)))
        if (p.sequence_length, p.batch_size) == (1024, 8)
    )
    assert point.valid and point.values["dataset_tokens_per_second"] == (4224.0, 4224.0, 4224.0)
    assert point.values["dataset_tokens_per_second_per_gpu"][0] == 2112.0
    # only the figures present in the table are plotted
    assert [m.column for m in table.metrics] == [
        "dataset_tokens_per_second",
        "dataset_tokens_per_second_per_gpu",
    ]


def test_invalid_configurations_are_marked_at_their_batch_size_stacked_by_length():
    table = space_table(grid())
    assert {(p.panel, p.sequence_length, p.batch_size) for p in table.invalid} == {
        (Panel(1, ("full",)), 512, 16),
        (Panel(1, ("full",)), 1024, 16),
        (Panel(1, ("lora",)), 1024, 16),
    }
    full = invalid_markers(table.in_panel(Panel(1, ("full",))))
    assert sorted(full) == [(16, 0.06, 512), (16, pytest.approx(0.15), 1024)]
    assert invalid_markers(table.in_panel(Panel(1, ("lora",)))) == [(16, 0.06, 1024)]
    assert invalid_markers(table.in_panel(Panel(2, ("full",)))) == []
    assert all(p.values == {} for p in table.invalid)


def test_new_figures_are_plotted_when_present_and_gpu_only_zeros_are_not():
    rows = [
        row(
            batch=b,
            train_step_seconds_p50=0.5 * b,
            train_step_seconds_p90=0.6 * b,
            train_step_seconds_cv_percent=4.0,
            model_tflops_per_device=0.0,
            model_flops_utilization=0.0,
        )
        for b in (2, 4)
    ]
    rows[1]["model_tflops_per_device"] = "12.5"
    table = space_table(rows)
    assert [m.column for m in table.metrics] == [
        "dataset_tokens_per_second",
        "dataset_tokens_per_second_per_gpu",
        "train_step_seconds_p50",
        "train_step_seconds_cv_percent",
        "model_tflops_per_device",
    ]
    assert table.in_panel(table.panels[0])[1].values["train_step_seconds_p90"][0] == 2.4


def test_repeated_measurements_are_averaged_with_their_range():
    # ado writes an entity measured twice as a list in each cell
    twice = row(tps=0) | {"is_valid": "[1, 1]", "dataset_tokens_per_second": "[900.0, 1100.0]"}
    (point,) = space_table([twice]).points
    assert point.values["dataset_tokens_per_second"] == (1000.0, 900.0, 1100.0)
    assert point.measurements == 2


def test_other_varying_fields_split_the_panels_and_fixed_axes_come_from_the_experiment_id():
    rows = [row(length=512) | {"model_name": "a"}, row(length=512) | {"model_name": "b"}]
    assert {p.column for p in space_table(rows).panels} == {
        ("full", "model a"),
        ("full", "model b"),
    }
    fixed = row() | {"experiment_id": FULL + "-number_gpus.4-torch_dtype.bfloat16"}
    del fixed["number_gpus"]
    assert space_table([fixed]).panels == (Panel(4, ("full",)),)


def test_stability_experiments_beside_benchmarks_are_left_out():
    stability = {
        "experiment_id": "SFTTrainer.finetune_full_stability-v1.0.0",
        "number_gpus": "1",
        "model_max_length": "512",
        "batch_size": "4",
        "is_valid": "1",
        "f_gpu_oom": "0.4",
    }
    assert space_table([row(), stability]).panels == (Panel(1, ("full",)),)
    with pytest.raises(TableError, match="no throughput measurement"):
        space_table([stability | {"dataset_tokens_per_second": ""}])


@pytest.mark.parametrize(
    ("rows", "needles"),
    [
        ([], ["no measurements", "run an operation"]),
        (
            [{"experiment_id": FULL, "batch_size": "2"}],
            ["model_max_length", "is_valid", "dataset_tokens_per_second", "ado show measurements"],
        ),
        ([row() | {"batch_size": "two"}], ["row 1", "'two'"]),
    ],
)
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


def find(table, gpus, length, batch, experiment="full"):
    return next(
        p
        for p in table.points
        if (p.panel.number_gpus, p.sequence_length, p.batch_size) == (gpus, length, batch)
        and p.panel.column[0] == experiment
    )


def test_the_fastest_valid_configuration_is_named_per_experiment():
    full, lora = answers(space_table(grid()))
    assert (full.label, lora.label) == ("full", "lora")
    assert (
        full.fastest.panel.number_gpus,
        full.fastest.sequence_length,
        full.fastest.batch_size,
    ) == (2, 1024, 16)
    assert speed(full.fastest) == 4224.0 and speed(lora.fastest) == 7424.0
    # an invalid configuration is never the answer, however high a number it once carried
    rows = [row(batch=4, tps=500.0), row(batch=8, valid=0) | {"dataset_tokens_per_second": "9e9"}]
    (only,) = answers(space_table(rows))
    assert only.fastest.batch_size == 4
    (nothing,) = answers(space_table([row(batch=4, valid=0)]))
    assert nothing.fastest is None
    assert "Fastest valid: none" in answer_blocks((nothing,))[0][1][0]


def test_the_largest_batch_that_fits_says_when_a_larger_one_was_measured_invalid():
    full, lora = answers(space_table(grid()))
    assert full.batch_limits == (
        BatchLimit(1, 512, 8, 16),
        BatchLimit(1, 1024, 8, 16),
        BatchLimit(2, 512, 16, None),
        BatchLimit(2, 1024, 16, None),
    )
    assert lora.batch_limits[:2] == (BatchLimit(1, 512, 16, None), BatchLimit(1, 1024, 8, 16))
    # nothing fits: the smallest batch tried is named; a failure below a fit is no limit
    rows = [row(length=512, batch=b, valid=0) for b in (8, 4)] + [
        row(length=1024, batch=2, valid=0),
        row(length=1024, batch=4),
    ]
    assert answers(space_table(rows))[0].batch_limits == (
        BatchLimit(1, 512, None, 4),
        BatchLimit(1, 1024, 4, None),
    )
    lines = answer_blocks(answers(space_table(grid())))[0][1]
    assert (
        "Largest batch that fits, 1 GPU: sequence length 512: 8 (16 invalid: the limit); "
        "sequence length 1024: 8 (16 invalid: the limit)"
    ) in lines
    assert any("2 GPUs: sequence length 512: 16 (largest tried, none invalid)" in x for x in lines)


def test_scaling_is_judged_at_each_gpu_counts_best_batch_against_perfect_scaling():
    # at 4 GPUs the small batch is best (per-device batch 1 starves it): 3000, not 2400
    speeds = {(1, 4): 1000.0, (1, 8): 900.0, (2, 4): 1800.0, (4, 4): 3000.0, (4, 8): 2400.0}
    rows = [row(gpus=g, batch=b, tps=t) for (g, b), t in speeds.items()] + [row(gpus=0, tps=50.0)]
    (group,) = answers(space_table(rows))
    assert [(s.point.panel.number_gpus, s.point.batch_size) for s in group.scaling] == [
        (1, 4),
        (2, 4),
        (4, 4),
    ]  # the CPU row is no GPU count to scale from
    assert [s.perfect for s in group.scaling] == [1000.0, 2000.0, 4000.0]
    assert [s.efficiency for s in group.scaling] == [1.0, 0.9, 0.75]
    # number_gpus is the total over all nodes: 4 GPUs at 3000 tokens/s cost 4e6/3000 s per M
    assert gpu_hours_per_million_tokens(group.scaling[2].point) == pytest.approx(4e6 / 3000 / 3600)
    assert gpu_hours_per_million_tokens(group.scaling[0].point) == pytest.approx(1e6 / 1000 / 3600)
    cpu = find(space_table(rows), 0, 512, 4)
    assert gpu_hours_per_million_tokens(cpu) is None
    text = answer_blocks((group,))[0][1]
    assert (
        "Scaling at sequence length 512 (best batch per GPU count): 1 GPU 1,000 tokens/s "
        "(0.278 GPU-h/M tokens) → 2 GPUs 1,800 tokens/s (90% of perfect, 0.309 GPU-h/M "
        "tokens) → 4 GPUs 3,000 tokens/s (75% of perfect, 0.37 GPU-h/M tokens)"
    ) in text
    # one GPU count: nothing to scale
    assert answers(space_table([row(gpus=2, batch=b) for b in (4, 8)]))[0].scaling == ()


def release(version, **speeds):
    """The grid's full experiment as measured with one fms-hf-tuning release: ado puts a
    parameterised version into the experiment id."""
    rows = []
    for batch in (4, 8, 16):
        tps = speeds.get(f"b{batch}", 1000.0)
        rows.append(
            row(
                f"{FULL}-fms_hf_tuning_version.{version}-stop_after_seconds.300",
                batch=batch,
                valid=0 if tps is None else 1,
                tps=tps or 0.0,
            )
        )
    return space_table(rows)


def test_two_releases_compare_per_configuration_and_differences_over_10_percent_are_flagged():
    new = release("3.2.2", b4=850.0, b8=1050.0, b16=None)
    comparison = compare(new, release("3.1.0", b8=1000.0, b16=1000.0), "old.csv")
    assert comparison.differing == (("fms_hf_tuning_version", "3.2.2", "3.1.0"),)
    assert [(p.point.batch_size, p.other.batch_size) for p in comparison.pairs] == [
        (4, 4),
        (8, 8),
        (16, 16),
    ]
    assert [p.ratio for p in comparison.pairs] == [0.85, 1.05, None]
    assert [p.flag for p in comparison.pairs] == ["slower", None, "valid only in the other space"]
    assert comparison.only_here == comparison.only_there == 0
    heading, lines = comparison_block(comparison)
    assert heading == "Compared with old.csv (fms-hf-tuning 3.2.2 here, 3.1.0 there)"
    assert "3 configurations matched" in lines[0] and "2 differ: slower or faster" in lines[0]
    assert lines[1].startswith("Machines not compared: the rows hold no machine block")
    # rows without an interval (stored before it existed) are judged by the ±10 % band
    assert lines[2:] == [
        "full, 1 GPU, sequence length 512, batch 4: 0.85× slower (beyond the "
        "±10% band: neither row has a 95 % interval)",
        "full, 1 GPU, sequence length 512, batch 16: valid only in the other space",
    ]
    # 10 % exactly is within the noise band; past it in either direction is not
    assert compare(release("a", b4=1100.0), release("b"), "x").pairs[0].flag is None
    assert compare(release("a", b4=1101.0), release("b"), "x").pairs[0].flag == "faster"


def test_fields_that_vary_inside_a_space_are_matched_on_never_crossed():
    here = space_table(
        [
            row(batch=4, tps=t) | {"model_name": m, "fms_hf_tuning_version": "2"}
            for m, t in (("a", 100.0), ("b", 300.0))
        ]
    )
    there = space_table(
        [
            row(batch=4, tps=t) | {"model_name": m, "fms_hf_tuning_version": "1"}
            for m, t in (("b", 100.0), ("c", 100.0))
        ]
    )
    comparison = compare(here, there, "there")
    assert [(dict(p.point.identity)["model_name"], p.ratio) for p in comparison.pairs] == [
        ("b", 3.0)
    ]
    assert (comparison.only_here, comparison.only_there) == (1, 1)
    # the axes always match: two one-configuration spaces do not pair batch 4 with batch 8
    with pytest.raises(TableError, match="--compare other: no configuration matches"):
        compare(space_table([row(batch=4)]), space_table([row(batch=8)]), "other")


def test_the_picture_and_page_carry_the_answers_and_the_comparison(tmp_path):
    table = release("3.2.2", b4=850.0, b16=None)
    comparison = compare(table, release("3.1.0"), "old.csv")
    plain = write_report(table, tmp_path, "plain", "t")
    compared = write_report(table, tmp_path, "compared", "t", comparison)
    with Image.open(plain.png) as one, Image.open(compared.png) as two:
        # one more column of panels: the ratios
        assert two.width >= one.width + 250 and two.height >= one.height
    page = compared.html.read_text()
    assert page.count('<tr class="flagged">') == 2 and "<td>0.850</td>" not in page
    assert '<td class="n">0.850</td>' in page and '<td class="n">invalid</td>' in page
    assert (
        "<li>Fastest valid: 1 GPU, sequence length 512, batch 8: 1,000 dataset tokens/s (no "
        "95 % interval: stored before it existed, or too few steps), 0.278 GPU-hours per "
        "million dataset tokens</li>" in page
    )
    assert compared.summary.startswith("full\n  Fastest valid: 1 GPU, sequence length 512, batch 8")
    assert "Compared with old.csv" in compared.summary and "Compared" not in plain.summary


def test_the_fastest_answer_shows_the_predicted_memory_beside_the_measured():
    from ado_actuators.sfttrainer.report import summary
    from ado_actuators.sfttrainer.report.table import Panel, Point

    both = Point(
        Panel(1, ("full",)),
        512,
        8,
        True,
        {
            "dataset_tokens_per_second": (100.0, 100.0, 100.0),
            "gpu_memory_max_allocated_gib": (20.0, 20.0, 20.0),
            "gpu_memory_predicted_gib": (22.0, 22.0, 22.0),
        },
        1,
    )
    assert summary._memory(both) == "; GPU memory/device 20 GiB measured, 22 GiB predicted (+10%)"
    cpu = Point(Panel(0, ("full",)), 512, 8, True, {"gpu_memory_max_allocated_gib": (0.0,) * 3}, 1)
    assert summary._memory(cpu) == ""
