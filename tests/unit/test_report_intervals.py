"""The 95 % interval of dataset tokens/s in the report: which configurations tie with the
fastest, which rule flags a --compare pair, the error bars, and the page that carries them."""

from __future__ import annotations

import pytest
from matplotlib.figure import Figure
from test_report import FULL, row

from ado_actuators.sfttrainer.report import figure
from ado_actuators.sfttrainer.report.answers import answers, ties
from ado_actuators.sfttrainer.report.compare import BAND, INTERVALS, compare
from ado_actuators.sfttrainer.report.files import write_report
from ado_actuators.sfttrainer.report.summary import answer_blocks, comparison_block
from ado_actuators.sfttrainer.report.table import space_table

CI = "dataset_tokens_per_second_ci95_percent"


def measured(batch, tps, ci=None, experiment=FULL, **extra):
    return row(experiment, batch=batch, tps=tps, **({CI: ci} if ci is not None else {}), **extra)


def at(table, batch):
    return next(p for p in table.points if p.batch_size == batch)


def test_intervals_that_meet_tie_and_a_missing_one_ties_only_at_the_same_speed():
    table = space_table(
        [
            measured(4, 1000.0, 10),  # [900, 1100]: meets the fastest's at 1100
            measured(8, 1250.0, 12),  # [1100, 1400]: the fastest
            measured(16, 1000.0, 5),  # [950, 1050]: below it
            measured(32, 1250.0),  # no interval, the same speed
            measured(64, 1200.0),  # no interval: not judged
        ]
    )
    assert at(table, 4).interval == (900.0, 1100.0) and at(table, 8).interval == (1100.0, 1400.0)
    (group,) = answers(table)
    assert group.fastest is at(table, 8)
    assert [p.batch_size for p in group.tied] == [32, 4]
    assert (group.unjudged, group.rivals) == (1, 4)
    lines = answer_blocks((group,))[0][1]
    assert lines[0] == (
        "Fastest valid: 1 GPU, sequence length 512, batch 8: 1,250 ± 12 % dataset "
        "tokens/s (95 % interval), 0.222 GPU-hours per million dataset tokens"
    )
    assert lines[1] == (
        "Tied within the 95 % intervals: 1 GPU, sequence length 512, batch 32: 1,250 (the same "
        "speed, no interval); 1 GPU, sequence length 512, batch 4: 1,000 ± 10 %; 1 other valid "
        "configuration not judged (no 95 % interval: stored before it existed, or too few "
        "steps; only an equal speed would tie)"
    )


@pytest.mark.parametrize(("ci", "tied"), [(10.0, True), (9.99, False)])
def test_intervals_tie_exactly_when_they_intersect(ci, tied):
    table = space_table([measured(4, 1000.0, ci), measured(8, 1250.0, 12)])
    assert ties(at(table, 4), at(table, 8)) is tied
    (group,) = answers(table)
    expected = (
        "1 GPU, sequence length 512, batch 4: 1,000 ± 10 %"
        if tied
        else "none (no other interval overlaps)"
    )
    assert answer_blocks((group,))[0][1][1] == f"Tied within the 95 % intervals: {expected}"


def test_a_fastest_without_an_interval_ties_only_at_its_own_speed():
    table = space_table([measured(4, 1240.0, 50), measured(8, 1250.0), measured(16, 1250.0, 1)])
    (group,) = answers(table)
    assert group.fastest is at(table, 8) and [p.batch_size for p in group.tied] == [16]
    lines = answer_blocks((group,))[0][1]
    assert "1,250 dataset tokens/s (no 95 % interval: stored before it existed" in lines[0]
    assert lines[1] == (
        "Tied: not judged, the fastest has no 95 % interval (only an equal speed "
        "ties); the same speed: 1 GPU, sequence length 512, batch 16: 1,250 ± 1 %"
    )
    (alone,) = answers(space_table([measured(4, 1000.0, 3)]))
    assert answer_blocks((alone,))[0][1][1].startswith("Largest batch")  # no rival, no tie line


def test_repeated_measurements_get_the_interval_that_holds_each_ones():
    twice = measured(4, 0.0) | {
        "is_valid": "[1, 1]",
        CI: "[10.0, 5.0]",
        "dataset_tokens_per_second": "[900.0, 1100.0]",
    }
    # mean 1000; [810, 990] and [1045, 1155]: 190 below the mean is the wider side
    assert at(space_table([twice]), 4).ci95_percent == 19.0
    # an interval on one measurement only cannot be told from the other's
    assert at(space_table([twice | {CI: "10.0"}]), 4).ci95_percent is None


def release(version, speeds):
    """The full experiment measured with one release: batch -> (tokens/s, interval or None)."""
    experiment = f"{FULL}-fms_hf_tuning_version.{version}"
    return space_table([measured(b, tps, ci, experiment) for b, (tps, ci) in speeds.items()])


def test_compare_flags_by_the_intervals_where_both_rows_have_one_else_by_the_band():
    here = release("2", {4: (1050.0, 2), 8: (800.0, 25), 16: (850.0, None), 32: (1050.0, None)})
    there = release("1", {4: (1000.0, 2), 8: (1000.0, 2), 16: (1000.0, 1), 32: (1000.0, None)})
    pairs = compare(here, there, "old.csv").pairs
    # 5 % apart but the intervals [1029, 1071] and [980, 1020] do not meet: flagged;
    # 20 % apart but [600, 1000] meets [980, 1020]: not; without an interval, the band judges
    assert [p.judged_by for p in pairs] == [INTERVALS, INTERVALS, BAND, BAND]
    assert [p.flag for p in pairs] == ["faster", None, "slower", None]
    lines = comparison_block(compare(here, there, "old.csv"))[1]
    assert lines[1:] == [
        "full, 1 GPU, sequence length 512, batch 4: 1.05× faster (95 % intervals apart: "
        "1,050 ± 2 % here, 1,000 ± 2 % there)",
        "full, 1 GPU, sequence length 512, batch 16: 0.85× slower (beyond the ±10% band: the "
        "row here has no 95 % interval)",
    ]


def segments(ax):
    (bars,) = ax.containers
    return [tuple(map(tuple, s)) for s in bars.lines[2][0].get_segments()]


def test_the_throughput_panels_draw_each_interval_as_an_error_bar_and_nothing_without_one():
    table = space_table([measured(4, 1000.0, 10), measured(8, 1250.0, 12), measured(16, 900.0)])
    points = table.in_panel(table.panels[0])
    for metric in table.metrics:  # tokens/s, and per GPU (1 GPU: the same figures)
        ax = Figure().subplots()
        figure._draw_panel(ax, points, metric, {512: "C0"})
        assert segments(ax) == [((4.0, 900.0), (4.0, 1100.0)), ((8.0, 1100.0), (8.0, 1400.0))]
    # another figure's bars stay the range of repeated measurements, not the interval
    assert figure.bar_extents(points, "dataset_tokens_per_second", 1.0) == (
        [100.0, 150.0, 0.0],
        [100.0, 150.0, 0.0],
    )
    ax = Figure().subplots()
    figure._draw_panel(ax, space_table([measured(4, 1000.0)]).points, table.metrics[0], {512: "C0"})
    assert ax.containers == []


def test_the_page_shows_the_ties_the_intervals_and_what_the_space_cost(tmp_path):
    rows = [
        measured(4, 1000.0, 10, measurement_seconds=1800),
        measured(8, 1250.0, 12, measurement_seconds=1800),
        row(batch=16, valid=0, measurement_seconds=900),
    ]
    files = write_report(space_table(rows), tmp_path, "s", "t")
    page = files.html.read_text()
    assert (
        "<li>Tied within the 95 % intervals: 1 GPU, sequence length 512, batch 4: 1,000 ± 10 %</li>"
    ) in page
    assert "<th>dataset tokens/s 95 % interval (± %)</th>" in page
    assert '<td class="n">1,250</td><td class="n">12</td>' in page
    assert "<h2>What the space cost</h2>" in page
    assert (
        "<li>GPU time reserved: 1.25 GPU-hours (1 valid, 0.25 invalid) over 3 measurements "
        "(measurement_seconds × number_gpus)</li>"
    ) in page
    assert "<li>Skipped without launching: not known from this table" in page
    assert files.summary.splitlines()[2].startswith("  Tied within the 95 % intervals: ")
    # a page without intervals has no such column
    plain = write_report(space_table([row(batch=4)]), tmp_path, "plain", "t").html.read_text()
    assert "95 % interval (± %)" not in plain
