"""A measurement's working directory is laid out as contract/workspace.py declares it: the
plan names its files there, the executor writes them there, and the trainer finds its job and
writes its reports there."""

import json
from pathlib import Path

from test_plan import inputs, option

from ado_actuators.sfttrainer.contract.trainer_io import JOB_FLAG, TrainerJob
from ado_actuators.sfttrainer.contract.workspace import ReportDirectory, Workspace
from ado_actuators.sfttrainer.execute import workspace as executor
from ado_actuators.sfttrainer.plan.launch.launch_plan import plan_launch


def test_the_layout_names_each_file_once():
    root = Path("/w/m1")
    found = Workspace(root)
    assert found.job == root / "job.json"
    assert found.accelerate_config == root / "accelerate_config.yaml"
    assert found.train_log == root / "train.log"
    assert found.output == root / "output"
    assert found.reports == ReportDirectory(root / "reports")
    assert found.reports.termination_log == root / "reports" / "termination.log"
    assert found.reports.rank_report(3) == root / "reports" / "rank-3.json"
    assert found.reports.heartbeat(3) == root / "reports" / "heartbeat-3"
    assert found.training_data(40, ".jsonl") == root / "dataset-first-40.jsonl"
    assert found.dataset_head(1, ".parquet") == root / "dataset-head-rank1.parquet"
    # the rank reports' glob matches the reports and nothing else the ranks write there
    reports = found.reports
    for rank in (0, 12):
        assert reports.rank_report(rank).match(ReportDirectory.RANK_REPORTS)
        assert not reports.heartbeat(rank).match(ReportDirectory.RANK_REPORTS)
    assert not reports.termination_log.match(ReportDirectory.RANK_REPORTS)


def test_each_node_of_a_run_has_its_own_directory():
    one = Workspace.for_node(Path("/out"), "e1", "ab12", 0, 1)
    assert one.root == Path("/out/e1-ab12")
    two = [Workspace.for_node(Path("/out"), "e1", "ab12", k, 2).root for k in (0, 1)]
    assert two == [Path("/out/e1-ab12/node-0"), Path("/out/e1-ab12/node-1")]


def test_the_plan_and_the_prepared_directory_follow_the_layout(tmp_path):
    dataset = tmp_path / "news.jsonl"
    dataset.write_text("".join(json.dumps({"output": f"e{i}"}) + "\n" for i in range(100)))
    workdir = tmp_path / "m1"
    planned = inputs(number_gpus=2, max_steps=2, use_cpu=True).model_copy(
        update={"workdir": workdir, "dataset_path": dataset}
    )
    plan = plan_launch(planned)
    layout = Workspace(workdir)
    assert plan.workspace == layout
    argv = plan.node.argv
    assert option(argv, JOB_FLAG) == str(layout.job)
    assert option(argv, "--config_file") == str(layout.accelerate_config)
    assert option(argv, "--output_dir") == str(layout.output)
    assert option(argv, "--training_data_path") == str(plan.training_data_path)
    assert plan.env["TERMINATION_LOG_FILE"] == str(layout.reports.termination_log)
    executor.prepare(plan)
    written = {p.relative_to(workdir).as_posix() for p in workdir.rglob("*")}
    assert written == {
        "job.json",
        "accelerate_config.yaml",
        "reports",
        plan.training_data_path.name,
    }
    assert plan.training_data_path == layout.training_data(plan.dataset_entries_needed, ".jsonl")
    job = TrainerJob.model_validate_json(layout.job.read_text())
    assert job.report_dir == layout.reports.path
