"""Launch results -> outcomes (OOM is invalid, anything else failed)."""

import pytest
from gpu_failure_texts import (
    ACCELERATE_PORT_IN_USE,
    CUBLAS_ALLOC_FAILED,
    CUDA_ERROR_OUT_OF_MEMORY,
    LAUNCHER_NOT_INSTALLED,
    NCCL_UNHANDLED_CUDA_ERROR_BARE,
    NCCL_UNHANDLED_CUDA_ERROR_OOM,
    NCCL_WARN_OOM_LINE,
    RANK_SIGKILLED,
    TCPSTORE_EADDRINUSE,
)

from ado_actuators.sfttrainer.contract.outcomes import Failed, Invalid, Measured
from ado_actuators.sfttrainer.contract.trainer_io import (
    Failure,
    RankOutcome,
    RankReport,
    StepTiming,
)
from ado_actuators.sfttrainer.execute.classify import launch_outcome
from ado_actuators.sfttrainer.execute.node import NodeRun


def report(rank, outcome=RankOutcome.OK, failure=None):
    return RankReport(
        rank=rank,
        local_rank=rank,
        world_size=2,
        hostname="h",
        outcome=outcome,
        failure=failure,
        steps=[StepTiming(step=1, start=0, end=1, dataset_tokens=5)],
    )


def process(tmp_path, returncode=0, watchdog=None, log=""):
    """One node's run as the node task returns it."""
    signal_name = "SIGKILL" if returncode == -9 else None
    return NodeRun(
        returncode=returncode, stopped_by_watchdog=watchdog, log_tail=log, signal_name=signal_name
    )


def classify(reports, proc):
    return launch_outcome(reports, [proc], world_size=2, number_gpus=2, stop_after_seconds=-1)


def test_success(tmp_path):
    outcome = classify([report(0), report(1)], process(tmp_path))
    assert isinstance(outcome, Measured)
    assert outcome.properties["dataset_tokens_per_second"] == 10


def test_gpu_oom_in_any_rank_is_invalid_even_when_others_failed(tmp_path):
    oom = report(
        1,
        RankOutcome.GPU_OOM,
        Failure(exception_type="OutOfMemoryError", message="CUDA out of memory"),
    )
    nccl = report(
        0, RankOutcome.ERROR, Failure(exception_type="RuntimeError", message="NCCL Error 3")
    )
    outcome = classify([nccl, oom], process(tmp_path, returncode=1))
    assert isinstance(outcome, Invalid) and outcome.gpu_oom
    assert "rank 1" in outcome.reason


def test_error_is_failed_with_the_exception(tmp_path):
    bad = report(
        1, RankOutcome.ERROR, Failure(exception_type="RuntimeError", message="NCCL Error 3")
    )
    outcome = classify([report(0), bad], process(tmp_path, returncode=1, log="boom\n"))
    assert isinstance(outcome, Failed)
    assert "rank 1: RuntimeError: NCCL Error 3" in outcome.reason and "boom" in outcome.reason


def test_missing_report_is_failed_naming_the_rank(tmp_path):
    outcome = classify([report(0)], process(tmp_path, returncode=-9))
    assert isinstance(outcome, Failed)
    assert "rank(s) [1] ended without a report" in outcome.reason and "SIGKILL" in outcome.reason


def test_oom_only_in_the_log_is_still_invalid(tmp_path):
    proc = process(tmp_path, returncode=1, log="torch.cuda.OutOfMemoryError: CUDA out of memory.\n")
    assert isinstance(classify([report(0)], proc), Invalid)


@pytest.mark.parametrize(
    "log",
    [
        f"torch.AcceleratorError: {CUDA_ERROR_OUT_OF_MEMORY}",
        f"RuntimeError: {CUBLAS_ALLOC_FAILED}",
        f"torch.distributed.DistBackendError: {NCCL_UNHANDLED_CUDA_ERROR_OOM}",
        f"{NCCL_WARN_OOM_LINE}\ntorch.distributed.DistBackendError: {NCCL_UNHANDLED_CUDA_ERROR_BARE}",
    ],
    ids=["cuda-error", "cublas", "nccl-last-error", "nccl-debug-log"],
)
def test_every_form_of_gpu_oom_in_the_log_is_invalid(tmp_path, log):
    outcome = classify([report(0)], process(tmp_path, returncode=1, log=log))
    assert isinstance(outcome, Invalid) and outcome.gpu_oom


def test_a_bare_nccl_unhandled_cuda_error_in_the_log_is_failed(tmp_path):
    log = f"torch.distributed.DistBackendError: {NCCL_UNHANDLED_CUDA_ERROR_BARE}"
    assert isinstance(classify([report(0)], process(tmp_path, returncode=1, log=log)), Failed)


@pytest.mark.parametrize(
    "log, said",
    [
        (
            ACCELERATE_PORT_IN_USE,
            "ConnectionError: Tried to launch distributed communication on port `29633`",
        ),
        (TCPSTORE_EADDRINUSE, "torch.distributed.DistNetworkError: The server socket has failed"),
        (LAUNCHER_NOT_INSTALLED, "(ModuleNotFoundError: No module named 'accelerate')"),
    ],
    ids=["accelerate-port-check", "tcpstore-eaddrinuse", "not-installed"],
)
def test_a_launcher_that_started_no_rank_is_headlined_with_what_it_said(tmp_path, log, said):
    outcome = classify([], process(tmp_path, returncode=1, log=log))
    assert isinstance(outcome, Failed)
    headline = outcome.reason.splitlines()[0]
    assert headline.startswith(
        "training failed: the launcher exited with status 1 before any rank started, saying: "
    )
    assert said in headline and "killed from outside" not in outcome.reason


def test_ranks_killed_after_they_started_are_still_killed_from_outside(tmp_path):
    outcome = classify([], process(tmp_path, returncode=1, log=RANK_SIGKILLED))
    assert "rank(s) [0, 1] ended without a report" in outcome.reason
    assert "killed from outside, or by the kernel's out-of-memory killer" in outcome.reason


def test_watchdog_stop_is_failed(tmp_path):
    outcome = classify([], process(tmp_path, returncode=-15, watchdog="no output for 31 s"))
    assert isinstance(outcome, Failed) and "no output for 31 s" in outcome.reason


def test_a_refused_setting_fails_with_the_fix_not_the_log(tmp_path):
    refused = report(
        0,
        RankOutcome.ERROR,
        Failure(
            exception_type="ado_actuators.sfttrainer.trainer.adapt.SettingUnavailable",
            message="flash_attn: true ... set flash_attn: false",
        ),
    )
    outcome = classify([refused, report(1)], process(tmp_path, returncode=1, log="noise\n"))
    assert isinstance(outcome, Failed)
    assert (
        outcome.reason
        == "the configuration cannot run as requested: flash_attn: true ... set flash_attn: false"
    )


def test_gpus_that_could_not_be_read_fail_a_completed_training(tmp_path):
    sampler = report(0)
    sampler.gpu_indices = [0, 1]
    sampler.gpu_sampling_problem = "NVML failed to start (NVMLError_DriverNotLoaded)"
    outcome = classify([sampler, report(1)], process(tmp_path))
    assert isinstance(outcome, Failed) and "DriverNotLoaded" in outcome.reason
    assert outcome.metadata["training_completed"] is True


def test_metadata_says_why_figures_are_omitted(tmp_path):
    outcome = classify([report(0), report(1)], process(tmp_path))
    notes = outcome.metadata["notes"]
    assert any(
        n.startswith("model_tflops_per_device omitted: the trainer did not report") for n in notes
    )


# ---- several nodes ------------------------------------------------------------------------


def node(rank, returncode=0, **fields):
    return NodeRun(machine_rank=rank, hostname=f"host{rank}", returncode=returncode, **fields)


def two_nodes(runs, reports):
    return launch_outcome(reports, runs, world_size=2, number_gpus=2, stop_after_seconds=-1)


def test_two_nodes_combine_their_ranks():
    outcome = two_nodes([node(0), node(1)], [report(0), report(1)])
    assert isinstance(outcome, Measured)
    assert outcome.properties["dataset_tokens_per_second"] == 10


def test_a_rank_killed_on_one_node_names_that_node_not_the_cancelled_one():
    runs = [node(0, returncode=None, cancelled=True), node(1, returncode=1, log_tail="rank died")]
    outcome = two_nodes(runs, [])
    assert isinstance(outcome, Failed)
    assert "rank(s) [1] ended without a report on node 1 (host1)" in outcome.reason
    assert "rank died" in outcome.reason


def test_a_node_that_could_not_launch_says_which():
    runs = [
        node(0, returncode=None, cancelled=True),
        node(1, returncode=None, problem="dataset file x does not exist"),
    ]
    outcome = two_nodes(runs, [])
    assert isinstance(outcome, Failed)
    assert outcome.reason == "dataset file x does not exist on node 1 (host1)"


def test_gpu_oom_on_any_node_is_invalid():
    oom = report(
        1,
        RankOutcome.GPU_OOM,
        Failure(exception_type="OutOfMemoryError", message="CUDA out of memory"),
    )
    outcome = two_nodes([node(0, returncode=None, cancelled=True), node(1, returncode=3)], [oom])
    assert isinstance(outcome, Invalid) and outcome.gpu_oom


def stopped(rank):
    """The report of a rank its own node stopped because another node failed."""
    return report(
        rank,
        RankOutcome.ERROR,
        Failure(exception_type="Terminated", message="terminated by signal SIGTERM"),
    )


GLOO_PEER_GONE = report(
    0,
    RankOutcome.ERROR,
    Failure(
        exception_type="RuntimeError",
        message="[gloo/transport/tcp/pair.cc:534] Connection closed by peer",
    ),
)
OOM_1 = report(
    1, RankOutcome.GPU_OOM, Failure(exception_type="OutOfMemoryError", message="CUDA out of memory")
)


def test_an_oom_on_the_node_that_was_cancelled_wins_over_the_failure_it_caused():
    # node 0's rank lost its peer and failed first; node 1, where the OOM was, was cancelled
    runs = [
        node(0, returncode=1, log_tail="Connection closed by peer"),
        node(1, returncode=None, cancelled=True, log_tail="OutOfMemoryError"),
    ]
    outcome = two_nodes(runs, [GLOO_PEER_GONE, OOM_1])
    assert isinstance(outcome, Invalid) and outcome.gpu_oom
    assert outcome.reason.startswith(
        "GPU out of memory: rank 1 on node 1 (host1): OutOfMemoryError"
    )


def test_an_oom_said_only_in_the_cancelled_nodes_log_wins():
    # the OOM rank died before it could report; its node's log says why
    runs = [
        node(0, returncode=1, log_tail="Connection closed by peer"),
        node(
            1,
            returncode=None,
            cancelled=True,
            log_tail="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ),
    ]
    outcome = two_nodes(runs, [GLOO_PEER_GONE])
    assert isinstance(outcome, Invalid) and outcome.gpu_oom
    assert outcome.reason == "GPU out of memory (from the training log on node 1 (host1))"


def test_an_oom_in_the_log_wins_over_a_peers_reported_error_on_one_node_too():
    nccl = report(
        0, RankOutcome.ERROR, Failure(exception_type="RuntimeError", message="NCCL Error 3")
    )
    log = f"torch.distributed.DistBackendError: {NCCL_UNHANDLED_CUDA_ERROR_OOM}"
    outcome = classify([nccl], process(None, returncode=1, log=log))
    assert isinstance(outcome, Invalid) and outcome.gpu_oom


def test_the_ranks_a_cancelled_node_stopped_do_not_take_the_blame():
    # node 1's rank was killed; node 0 was cancelled and its rank reported being stopped
    runs = [
        node(0, returncode=None, cancelled=True, log_tail="terminated by signal SIGTERM"),
        node(1, returncode=1, log_tail="rank died"),
    ]
    outcome = two_nodes(runs, [stopped(0)])
    assert isinstance(outcome, Failed)
    assert outcome.reason.startswith(
        "training failed: rank(s) [1] ended without a report on node 1 (host1)"
    )
    assert "SIGTERM" not in outcome.reason


def test_without_an_oom_anywhere_a_cancelled_nodes_reports_change_nothing():
    crash = report(
        1,
        RankOutcome.ERROR,
        Failure(exception_type="RuntimeError", message="Injected trainer crash"),
    )
    runs = [node(0, returncode=None, cancelled=True), node(1, returncode=1, log_tail="crash")]
    outcome = two_nodes(runs, [stopped(0), crash])
    assert isinstance(outcome, Failed)
    assert outcome.reason.startswith(
        "training failed: rank 1 on node 1 (host1): RuntimeError: Injected trainer crash"
    )
