"""The loss in the report: a row that did not train is never named fastest or tied, loss parity
and the machines in --compare, and the regression gate's exit status (--fail-on)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
from cli_checks import one_line_error
from test_report import FULL, row
from typer.testing import CliRunner

from ado_actuators.sfttrainer.cli.plot import app
from ado_actuators.sfttrainer.report import gate
from ado_actuators.sfttrainer.report.answers import answers
from ado_actuators.sfttrainer.report.compare import compare
from ado_actuators.sfttrainer.report.loss import EPSILON, compute_dtype
from ado_actuators.sfttrainer.report.machine import fingerprint
from ado_actuators.sfttrainer.report.summary import answer_blocks, comparison_block
from ado_actuators.sfttrainer.report.table import MACHINE, space_table

CI = "dataset_tokens_per_second_ci95_percent"


def measured(batch, tps, ci=None, first=2.5, finite=1, rose=0, experiment=FULL, **extra):
    loss = {"train_loss_first_step": first, "train_loss_finite": finite, "train_loss_rose": rose}
    if first is None:
        loss = {}
    return row(experiment, batch=batch, tps=tps, **({CI: ci} if ci else {}), **loss, **extra)


def at(table, batch):
    return next(p for p in table.points if p.batch_size == batch)


# ---- the answers -------------------------------------------------------------------------------


def test_a_fast_row_whose_loss_was_not_finite_is_passed_over_and_says_why():
    table = space_table(
        [
            measured(4, 1000.0, 2),
            measured(8, 1010.0, 2),  # tied with batch 4 ([990, 1030] meets [980, 1020])
            measured(16, 3000.0, 2, finite=0),  # the fastest by far, but it did not train
            measured(32, 1005.0, 2, rose=1),  # would tie, but its loss climbed
        ]
    )
    (group,) = answers(table)
    assert group.fastest is at(table, 8)
    assert [p.batch_size for p in group.tied] == [4]
    assert [p.batch_size for p in group.passed_over] == [16, 32]
    lines = answer_blocks((group,))[0][1]
    assert lines[0].startswith("Fastest valid: 1 GPU, sequence length 512, batch 8: 1,010 ± 2 %")
    assert (
        lines[1]
        == "Tied within the 95 % intervals: 1 GPU, sequence length 512, batch 4: 1,000 ± 2 %"
    )
    assert lines[2] == (
        "Passed over: 1 GPU, sequence length 512, batch 16: 3,000 ± 2 % dataset tokens/s, but its "
        "training loss was not finite (train_loss_finite = 0)"
    )
    assert lines[3].endswith(
        "but its training loss rose across the measured window (train_loss_rose = 1)"
    )
    # it ran: the largest batch that fits still counts it
    assert group.batch_limits[0].largest_valid == 32


def test_when_no_valid_row_trained_none_is_named_fastest():
    (group,) = answers(space_table([measured(4, 1000.0, finite=0)]))
    assert group.fastest is None
    assert answer_blocks((group,))[0][1][:2] == [
        "Fastest valid: none whose loss shows it trained (passed over below)",
        "Passed over: 1 GPU, sequence length 512, batch 4: 1,000 dataset tokens/s, but its "
        "training loss was not finite (train_loss_finite = 0)",
    ]


def test_rows_stored_before_the_loss_was_are_judged_on_speed_alone():
    (group,) = answers(space_table([measured(4, 1000.0, first=None), measured(8, 900.0)]))
    assert group.fastest.batch_size == 4 and group.passed_over == ()


# ---- loss parity --------------------------------------------------------------------------------


def release(version, *rows):
    return space_table(
        [r | {"experiment_id": f"{FULL}-fms_hf_tuning_version.{version}"} for r in rows]
    )


@pytest.mark.parametrize(
    ("dtype", "first_there", "differs"),
    [
        ("bfloat16", 2.5 * (1 - 0.99 * 2**-7), False),  # within one unit in the last place
        ("bfloat16", 2.5 * (1 - 1.01 * 2**-7), True),
        ("float16", 2.5 * (1 - 0.99 * 2**-10), False),
        ("float16", 2.5 * (1 - 1.01 * 2**-10), True),
        ("float32", 2.5 * (1 - 0.99 * 2**-10), False),  # TF32's epsilon: see report/loss.py
        ("float32", 2.5 * (1 - 1.01 * 2**-10), True),
    ],
)
def test_first_step_losses_differ_beyond_one_unit_in_the_last_place(dtype, first_there, differs):
    here = release("2", measured(4, 1000.0, first=2.5, torch_dtype=dtype))
    there = release("1", measured(4, 1000.0, first=first_there, torch_dtype=dtype))
    (pair,) = compare(here, there, "old.csv").pairs
    assert pair.parity.dtype == dtype
    assert pair.parity.tolerance == pytest.approx(EPSILON[dtype] * 2.5)
    assert (pair.flag == "first-step loss differs") is differs
    assert (pair.flag is None) is not differs


def test_the_precision_is_the_coarsest_the_row_computes_in():
    assert compute_dtype({}) == "bfloat16"  # the entity's default torch_dtype
    assert compute_dtype({"torch_dtype": "auto"}.items()) == "bfloat16"  # unknown: the default
    assert compute_dtype({"torch_dtype": "float16", "bf16": "1"}.items()) == "bfloat16"
    assert compute_dtype({"torch_dtype": "float16", "bf16": "False"}.items()) == "float16"
    assert compute_dtype({"torch_dtype": "float32"}.items()) == "float32"
    assert compute_dtype({"torch_dtype": "float32", "bf16": "True"}.items()) == "bfloat16"
    mixed = {"torch_dtype": "float32", "accelerate_config_mixed_precision": "fp8"}
    assert compute_dtype(mixed.items()) == "fp8"
    assert EPSILON["bfloat16"] == 2**-7 and EPSILON["float16"] == EPSILON["float32"] == 2**-10


def test_the_comparison_shows_the_first_step_losses_and_why_they_are_circled():
    here = release("2", measured(4, 1000.0, 2, first=2.5), measured(8, 800.0, 2, first=2.0))
    there = release("1", measured(4, 1000.0, 2, first=2.7), measured(8, 1000.0, 2, first=2.0))
    comparison = compare(here, there, "old.csv")
    assert [p.flag for p in comparison.pairs] == ["first-step loss differs", "slower"]
    lines = comparison_block(comparison)[1]
    assert lines[2] == (
        "full, 1 GPU, sequence length 512, batch 4: 1.00×; first-step loss 2.5000 here, 2.7000 "
        "there: 7.41% apart, beyond what rounding explains (±0.0211: one unit in the last place "
        "of bfloat16, 0.00781 relative); the two runs did not train the same thing"
    )
    assert lines[3] == (
        "full, 1 GPU, sequence length 512, batch 8: 0.80× slower (95 % intervals apart: 800 ± 2 % "
        "here, 1,000 ± 2 % there); first-step loss 2.0000 here, 2.0000 there"
    )


def test_the_coarser_precision_of_the_two_rows_judges_and_one_loss_alone_is_not_judged():
    here = release("2", measured(4, 1000.0, first=2.5, torch_dtype="float32"))
    there = release("1", measured(4, 1000.0, first=2.515, torch_dtype="bfloat16"))
    (pair,) = compare(here, there, "old.csv").pairs
    assert pair.parity.dtype == "bfloat16" and pair.parity.holds  # 0.78 % of 2.515 > 0.015
    (alone,) = compare(release("2", measured(4, 1000.0, first=None)), there, "old").pairs
    assert alone.parity is None and alone.flag is None
    (alone,) = compare(there, release("2", measured(4, 1000.0, first=None)), "old").pairs
    assert alone.parity is None


def test_a_loss_that_fails_in_one_space_only_is_flagged_where_it_failed():
    here = release("2", measured(4, 1000.0, finite=0), measured(8, 1000.0, rose=1))
    there = release("1", measured(4, 1000.0), measured(8, 1000.0, rose=1))
    assert [p.flag for p in compare(here, there, "old.csv").pairs] == ["loss not finite here", None]
    assert [p.flag for p in compare(there, here, "new.csv").pairs] == [
        "loss not finite there",
        None,
    ]


# ---- the machines -------------------------------------------------------------------------------


def on(machine_row, gpu="NVIDIA H100 80GB HBM3", driver="550.54.15", torch="2.8.0"):
    """A row as sources.with_metadata adds what its measurement ran on."""
    metadata = {
        "machine": {
            "gpus": [{"name": gpu}],
            "gpu_driver": driver,
            "cuda_runtime": "12.8",
            "nccl": "2.27.3",
            "interconnect": "one GPU",
            "cpu_model": "AMD EPYC 7763",
        },
        "versions": {"torch": torch, "fms-hf-tuning": "3.2.2"},
    }
    return machine_row | {MACHINE: [fingerprint(metadata)]}


def test_the_comparison_says_when_the_rows_ran_on_other_drivers_gpus_or_libraries():
    here = release(
        "2", on(measured(4, 1000.0), driver="570.86.15", torch="2.9.0"), on(measured(8, 900.0))
    )
    there = release("1", on(measured(4, 1000.0)), on(measured(8, 900.0)))
    comparison = compare(here, there, "old")
    assert comparison.pairs[0].machine_differences == (
        ("GPU driver", "570.86.15", "550.54.15"),
        ("torch", "2.9.0", "2.8.0"),
    )
    assert comparison_block(comparison)[1][1] == (
        "Measured on different machines or libraries: GPU driver 570.86.15 here, 550.54.15 "
        "there (1 of 2 pairs); torch 2.9.0 here, 2.8.0 there (1 of 2 pairs)"
    )
    alike = compare(there, there, "same")
    assert comparison_block(alike)[1][1].startswith("Measured alike: the same GPUs, driver")
    assert at(there, 4).machine[0] == ("GPU", "1 × NVIDIA H100 80GB HBM3")


# ---- the regression gate ------------------------------------------------------------------------


def write_csv(path, rows):
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def spaces(tmp_path, new, old):
    """Two CSVs of one space measured with two releases: batch -> (tokens/s, interval, loss)."""

    def rows(version, speeds):
        return [
            measured(b, tps, ci, first, experiment=f"{FULL}-fms_hf_tuning_version.{version}")
            for b, (tps, ci, first) in speeds.items()
        ]

    return (
        str(write_csv(tmp_path / "new.csv", rows("3.2.2", new))),
        str(write_csv(tmp_path / "old.csv", rows("3.1.0", old))),
    )


def gate_run(tmp_path, new, old, checks="slower,loss"):
    new_csv, old_csv = spaces(tmp_path, new, old)
    args = [new_csv, "--compare", old_csv, "-o", str(tmp_path / "out"), "--fail-on", checks]
    return CliRunner().invoke(app, args)


OLD = {4: (1000.0, 2, 2.5), 8: (1000.0, 2, 2.5)}


def loss_gate_with(tmp_path, side: str, changes: dict[str, str], new_speed: float = 1000.0):
    """`--fail-on loss` over one batch measured alike in both spaces but for `changes` made to
    the `side` ("new" or "old") space's row, and `new_speed` here."""
    new_csv, old_csv = spaces(tmp_path, {4: (new_speed, 2, 2.5)}, {4: (1000.0, 2, 2.5)})
    edited = new_csv if side == "new" else old_csv
    rows = list(csv.DictReader(open(edited)))  # noqa: SIM115 - read whole at once
    rows[0] |= changes
    write_csv(Path(edited), rows)
    args = [new_csv, "--compare", old_csv, "-o", str(tmp_path / "o"), "--fail-on", "loss"]
    return CliRunner().invoke(app, args)


def test_a_configuration_slower_beyond_both_intervals_fails_the_gate(tmp_path):
    # 900 ± 2 % is [882, 918], 1000 ± 2 % is [980, 1020]: apart
    result = gate_run(tmp_path, {4: (900.0, 2, 2.5), 8: (1000.0, 2, 2.5)}, OLD)
    assert result.exit_code == 1, result.output
    out = result.stdout
    assert "Regression gate (--fail-on slower,loss)\n  failed: 1 of 2 matched configurations" in out
    assert (
        "full, 1 GPU, sequence length 512, batch 4: 0.90× slower (95 % intervals apart: 900 ± 2 % "
        "here, 1,000 ± 2 % there); first-step loss 2.5000 here, 2.5000 there [fails: slower]"
    ) in out
    assert out.splitlines()[0].endswith("new.png")  # the files are written all the same


def test_speeds_within_the_noise_pass_the_gate(tmp_path):
    # 20 % slower, but 800 ± 25 % ([600, 1000]) meets [980, 1020]: the runs cannot tell them apart
    result = gate_run(tmp_path, {4: (800.0, 25, 2.5), 8: (1010.0, 2, 2.5)}, OLD)
    assert result.exit_code == 0, result.output
    assert "passed: none of 2 matched configurations is slower beyond both rows' 95 %" in (
        result.stdout
    )


@pytest.mark.parametrize(("speed", "status"), [(890.0, 1), (910.0, 0)])
def test_without_an_interval_the_gate_falls_back_to_the_10_percent_band(tmp_path, speed, status):
    old = {4: (1000.0, None, 2.5)}
    result = gate_run(tmp_path, {4: (speed, None, 2.5)}, old)
    assert result.exit_code == status, result.output
    if status:
        assert "beyond the ±10% band: neither row has a 95 % interval" in result.stdout


def test_a_first_step_loss_apart_fails_the_loss_check_only(tmp_path):
    moved = {4: (1000.0, 2, 2.6), 8: (1000.0, 2, 2.5)}  # 4 % apart, bfloat16: 0.78 %
    result = gate_run(tmp_path, moved, OLD)
    assert result.exit_code == 1 and "[fails: loss]" in result.stdout
    assert "first-step loss 2.6000 here, 2.5000 there: 3.85% apart" in result.stdout  # of 2.6
    assert gate_run(tmp_path, moved, OLD, checks="slower").exit_code == 0


def test_a_loss_not_finite_here_fails_the_gate_even_when_faster(tmp_path):
    result = loss_gate_with(tmp_path, "new", {"train_loss_finite": "0"}, new_speed=2000.0)
    assert result.exit_code == 1, result.output
    assert "2.00× faster" in result.stdout and "loss not finite here" in result.stdout


def test_a_loss_that_rose_here_only_is_shown_but_does_not_fail_the_gate(tmp_path):
    """The rise rule flags a steady loss by chance (up to 2.5 % of windows): over a space, a gate
    failing on it would fail releases that changed nothing."""
    result = loss_gate_with(tmp_path, "new", {"train_loss_rose": "1"})
    assert result.exit_code == 0, result.output
    assert "loss rose here" in result.stdout  # shown, not failed


def test_the_fail_on_help_says_what_each_check_fails_on(tmp_path):
    """`sfttrainer_plot --help` (and the generated CLI reference) describes each check with the
    gate's own words, and each claim holds: a loss not finite here and finite there fails
    `loss`, a loss that rose here only does not."""
    import typer

    (option,) = [
        p for p in typer.main.get_command(app).params if "--fail-on" in getattr(p, "opts", ())
    ]
    for name, meaning in gate.CHECKS.items():
        assert f"{name}: {meaning}" in option.help
    assert "rose across its window here only is shown, not failed" in option.help
    assert "rising here" not in option.help
    for side in ("rose", "nan", "there"):
        (tmp_path / side).mkdir()
    rose = loss_gate_with(tmp_path / "rose", "new", {"train_loss_rose": "1"})
    assert rose.exit_code == 0, rose.output
    not_finite = loss_gate_with(tmp_path / "nan", "new", {"train_loss_finite": "0"})
    assert not_finite.exit_code == 1, not_finite.output
    there_only = loss_gate_with(tmp_path / "there", "old", {"train_loss_finite": "0"})
    assert there_only.exit_code == 0, there_only.output


def test_a_loss_that_failed_only_in_the_old_space_passes_the_gate(tmp_path):
    result = loss_gate_with(tmp_path, "old", {"train_loss_finite": "0"})
    assert result.exit_code == 0, result.output
    assert "loss not finite there" in result.stdout  # shown, but no regression


def test_a_configuration_invalid_here_and_valid_there_fails_only_the_invalid_check(tmp_path):
    new_csv, old_csv = spaces(tmp_path, {4: (1000.0, 2, 2.5), 8: (500.0, 2, 2.5)}, OLD)
    rows = list(csv.DictReader(open(new_csv)))  # noqa: SIM115 - read whole at once
    rows[0] |= {"is_valid": "0", "dataset_tokens_per_second": "", CI: ""}
    write_csv(tmp_path / "new.csv", rows)
    args = [new_csv, "--compare", old_csv, "-o", str(tmp_path / "o"), "--fail-on"]
    invalid = CliRunner().invoke(app, [*args, "invalid"])
    assert invalid.exit_code == 1, invalid.output
    assert "failed: 1 of 2 matched configurations" in invalid.stdout
    assert "batch 4: valid only in the other space [fails: invalid]" in invalid.stdout
    slower = CliRunner().invoke(app, [*args, "slower"])
    assert slower.exit_code == 1 and "batch 8: 0.50× slower" in slower.stdout
    assert (
        "[fails: invalid]" not in slower.stdout
        and "batch 4" not in slower.stdout.split("Regression gate")[1]
    )


def test_without_fail_on_a_regression_is_shown_and_the_exit_status_is_0(tmp_path):
    new_csv, old_csv = spaces(tmp_path, {4: (500.0, 2, 3.0)}, {4: (1000.0, 2, 2.5)})
    result = CliRunner().invoke(app, [new_csv, "--compare", old_csv, "-o", str(tmp_path)])
    assert result.exit_code == 0 and "slower" in result.stdout
    assert "Regression gate" not in result.stdout


@pytest.mark.parametrize(
    ("value", "needles"),
    [
        ("slowr", ["--fail-on 'slowr'", "choose one or more of slower, loss, invalid"]),
        ("slower,,", ["--fail-on '':", "e.g. --fail-on slower,loss"]),
        ("slowr,lost", ["--fail-on 'slowr', 'lost': choose"]),
    ],
)
def test_a_bad_fail_on_names_the_option_and_the_choices(tmp_path, value, needles):
    new_csv, old_csv = spaces(tmp_path, OLD, OLD)
    args = [new_csv, "--compare", old_csv, "-o", str(tmp_path / "o"), "--fail-on", value]
    one_line_error(CliRunner().invoke(app, args), *needles)
    assert not (tmp_path / "o").exists()


def test_fail_on_needs_a_comparison(tmp_path):
    new_csv, _ = spaces(tmp_path, OLD, OLD)
    result = CliRunner().invoke(app, [new_csv, "--fail-on", "slower", "-o", str(tmp_path / "o")])
    one_line_error(result, "--fail-on needs --compare OTHER")


def test_the_gate_checks_are_parsed_once_each():
    assert gate.parse(" Slower , loss,slower") == ("slower", "loss")
    assert set(gate.CHECKS) == {"slower", "loss", "invalid"}


def test_the_page_lists_both_first_step_losses(tmp_path):
    new_csv, old_csv = spaces(tmp_path, {4: (1000.0, 2, 2.5)}, {4: (1000.0, 2, math.pi)})
    result = CliRunner().invoke(app, [new_csv, "--compare", old_csv, "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "new.html").read_text()
    assert "<th>first-step loss here</th>" in page
    assert '<td class="n">2.5000</td><td class="n">3.1416</td>' in page
    assert '<tr class="flagged">' in page
