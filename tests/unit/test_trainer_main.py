"""The wrapper's pure parts: its own argument, rank identity, and the pre-train adaptations."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import torch

from ado_actuators.sfttrainer.contract.trainer_io import JOB_FLAG
from ado_actuators.sfttrainer.trainer import adapt
from ado_actuators.sfttrainer.trainer.__main__ import USAGE_EXIT_CODE, main, split_argv
from ado_actuators.sfttrainer.trainer.identity import RankIdentity, library_versions


def test_job_flag_is_taken_out_wherever_it_is():
    assert split_argv(["--a", "1", JOB_FLAG, "j.json", "--b"]) == (
        Path("j.json"),
        ["--a", "1", "--b"],
    )
    assert split_argv([f"{JOB_FLAG}=j.json", "--a"]) == (Path("j.json"), ["--a"])


@pytest.mark.parametrize("argv", [[], ["--a"], [JOB_FLAG]])
def test_missing_job_is_a_usage_error(argv):
    with pytest.raises(ValueError, match=JOB_FLAG):
        split_argv(argv)


def test_unreadable_job_exits_with_the_usage_code_without_training(tmp_path, capsys):
    assert main([JOB_FLAG, str(tmp_path / "missing.json")]) == USAGE_EXIT_CODE
    bad = tmp_path / "bad.json"
    bad.write_text('{"report_dir": "r", "unknown_field": 1}')
    assert main([JOB_FLAG, str(bad)]) == USAGE_EXIT_CODE
    assert "unknown_field" in capsys.readouterr().err


def test_rank_identity_from_launcher_env():
    ident = RankIdentity.from_env({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"})
    assert (ident.rank, ident.local_rank, ident.world_size) == (3, 1, 4)
    plain = RankIdentity.from_env({})
    assert (plain.rank, plain.local_rank, plain.world_size) == (0, 0, 1)


def test_versions_name_the_training_stack():
    versions = library_versions()
    assert {"torch", "transformers", "trl", "peft", "accelerate", "fms-hf-tuning"} <= set(versions)


def test_flash_attention_goes_without_a_note_only_where_no_cuda_exists():
    args = types.SimpleNamespace(use_flash_attn=True)
    note = adapt.check_flash_attention(args, cuda=False, installed=False)
    assert args.use_flash_attn is False and "CUDA is not available" in note
    assert adapt.check_flash_attention(args, cuda=False) is None  # nothing left to change


def flash_args(dtype="bfloat16"):
    return types.SimpleNamespace(use_flash_attn=True, torch_dtype=dtype)


A100 = ((8, 0), "NVIDIA A100-SXM4-80GB")


def test_flash_attention_missing_on_a_cuda_device_refuses_with_every_fix():
    args = flash_args()
    with pytest.raises(adapt.SettingUnavailable) as refused:
        adapt.check_flash_attention(args, cuda=True, installed=False)
    message = str(refused.value)
    assert "flash_attn package is not installed" in message
    for fix in ("pip install flash-attn", "match_exact_dependencies: true", "flash_attn: false"):
        assert fix in message
    assert args.use_flash_attn is True  # not silently changed


def test_flash_attention_is_kept_where_it_can_run():
    for dtype in ("bfloat16", "float16", torch.bfloat16, "auto"):
        args = flash_args(dtype)
        assert (
            adapt.check_flash_attention(
                args, cuda=True, installed=True, import_problem="", capability=A100
            )
            is None
        )
        assert args.use_flash_attn is True


# what importing flash_attn 2 raises when its wheel was built for another torch (as reported
# from a verl run: flash_attn_interface.py's `import flash_attn_2_cuda as flash_attn_gpu`)
WRONG_TORCH = (
    "ImportError: /usr/local/lib/python3.12/dist-packages/flash_attn_2_cuda.cpython-312-"
    "x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEa"
)


def test_a_flash_attn_extension_that_does_not_load_is_refused_before_training():
    with pytest.raises(adapt.SettingUnavailable) as refused:
        adapt.check_flash_attention(
            flash_args(), cuda=True, installed=True, import_problem=WRONG_TORCH, capability=A100
        )
    message = str(refused.value)
    assert "undefined symbol" in message and f"torch {torch.__version__}" in message
    for fix in (
        "pip install --force-reinstall",
        "match_exact_dependencies: true",
        "flash_attn: false",
    ):
        assert fix in message


@pytest.mark.parametrize("gpu", [((7, 0), "Tesla V100-SXM2-32GB"), ((7, 5), "Tesla T4")])
def test_flash_attention_on_a_gpu_older_than_ampere_is_refused(gpu):
    with pytest.raises(
        adapt.SettingUnavailable, match=r"capability 8\.0.*is 7\.\d.*flash_attn: false"
    ):
        adapt.check_flash_attention(
            flash_args(), cuda=True, installed=True, import_problem="", capability=gpu
        )


@pytest.mark.parametrize("dtype", ["float32", torch.float32, None])
def test_flash_attention_in_float32_is_refused_with_the_dtype_fix(dtype):
    with pytest.raises(
        adapt.SettingUnavailable, match=r"torch_dtype is (float32|None).*torch_dtype: bfloat16"
    ):
        adapt.check_flash_attention(
            flash_args(dtype), cuda=True, installed=True, import_problem="", capability=A100
        )


def test_where_flash_attn_is_not_installed_its_import_problem_says_so():
    if adapt.flash_attn_installed():
        pytest.skip("flash_attn is installed here")
    assert "ModuleNotFoundError" in adapt.flash_attn_import_problem()


def test_this_machine_has_no_cuda_so_flash_attention_is_dropped():
    import torch

    if torch.cuda.is_available():
        pytest.skip("has CUDA")
    args = types.SimpleNamespace(use_flash_attn=True)
    assert "CUDA is not available" in adapt.check_flash_attention(args)


def test_gpus_without_cuda_refuse_to_train_on_the_cpu():
    adapt.require_cuda_for_gpus([], cuda=False)  # number_gpus 0 (or CPU stand-ins): fine
    adapt.require_cuda_for_gpus([0, 1], cuda=True)
    with pytest.raises(
        adapt.SettingUnavailable,
        match=r"number_gpus > 0 \(GPUs \[0, 1\] of "
        r"this node\) but the training process sees no CUDA device",
    ):
        adapt.require_cuda_for_gpus([0, 1], cuda=False)


def test_arguments_fms_would_drop_are_refused_naming_them():
    adapt.refuse_ignored_arguments([], "3.2.2")
    with pytest.raises(
        adapt.SettingUnavailable,
        match=r"fms-hf-tuning 3.2.2 does not recognise "
        r"--fast_moe 2: it would train without them",
    ):
        adapt.refuse_ignored_arguments(["--fast_moe", "2"], "3.2.2")


def test_ranks_get_one_data_seed():
    args = types.SimpleNamespace(seed=42, data_seed=None)
    assert adapt.same_shuffle_on_every_rank(args, 1) is None and args.data_seed is None
    assert "disjoint" in adapt.same_shuffle_on_every_rank(args, 2) and args.data_seed == 42
    args = types.SimpleNamespace(seed=42, data_seed=7)
    assert adapt.same_shuffle_on_every_rank(args, 2) is None and args.data_seed == 7


def test_a_vision_dataset_keeps_the_columns_its_collator_reads():
    """Trainer would drop the text and image columns (not the model's arguments) and stop;
    a text dataset, or a vision one already keeping them, is left as asked."""
    vision = types.SimpleNamespace(dataset_image_field="images")
    args = types.SimpleNamespace(remove_unused_columns=True)
    note = adapt.keep_the_vision_columns(vision, args)
    assert note and "trained with remove_unused_columns=False" in note
    assert args.remove_unused_columns is False
    assert adapt.keep_the_vision_columns(vision, args) is None  # already False: nothing said
    text, args = (
        types.SimpleNamespace(dataset_image_field=None),
        types.SimpleNamespace(remove_unused_columns=True),
    )
    assert adapt.keep_the_vision_columns(text, args) is None and args.remove_unused_columns


def test_cpu_ranks_ask_accelerate_for_gloo_ddp():
    import torch

    if torch.cuda.is_available():
        pytest.skip("has CUDA")
    env: dict[str, str] = {}
    assert adapt.use_cpu_for_multi_process(1, env) is None and env == {}
    assert "ACCELERATE_USE_CPU" in adapt.use_cpu_for_multi_process(2, env)
    assert env == {"ACCELERATE_USE_CPU": "true"}
    assert adapt.use_cpu_for_multi_process(2, env) is None  # already set: no note


def _pause_when_started(started) -> None:
    import signal

    started.set()
    signal.pause()


def test_a_process_forked_from_a_rank_dies_of_sigterm_as_usual():
    """datasets' map(num_proc=N) pool workers are forked from the rank: with the rank's
    SIGTERM handler they outlived the pool's terminate() and the rank hung in join()."""
    import multiprocessing
    import signal

    from ado_actuators.sfttrainer.trainer.__main__ import sigterm_raises

    context = multiprocessing.get_context("fork")
    started = context.Event()
    with sigterm_raises():
        child = context.Process(target=_pause_when_started, args=(started,), daemon=True)
        child.start()
        try:
            assert started.wait(timeout=120)  # the child runs its own code: past the fork
            child.terminate()
            child.join(timeout=120)
        finally:
            if child.is_alive():
                child.kill()
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # the rank keeps its own
    assert child.exitcode == -signal.SIGTERM


FORKED_FROM_A_RANK = """
import multiprocessing, os, sys, time
import ado_actuators.sfttrainer.trainer.__main__  # registers the at-fork hooks, as in a rank
def sleep():
    time.sleep(600)
child = multiprocessing.get_context("fork").Process(target=sleep)
child.start()
print(child.pid, flush=True)
time.sleep(600)
"""


def test_a_process_forked_from_a_rank_dies_when_the_rank_is_killed():
    """The kernel clears the parent-death signal on fork: a datasets pool worker outlived its
    SIGKILLed rank, blocked for ever on its queue."""
    import signal
    import subprocess
    import sys

    import psutil

    forked = None
    rank = subprocess.Popen(
        [sys.executable, "-c", FORKED_FROM_A_RANK], stdout=subprocess.PIPE, text=True
    )
    try:
        forked = psutil.Process(int(rank.stdout.readline()))
        rank.send_signal(signal.SIGKILL)
        rank.wait(timeout=60)
        forked.wait(timeout=60)  # psutil.TimeoutExpired here: the forked process lives on
    finally:
        rank.kill()
        rank.wait()
        if forked is not None and forked.is_running():
            forked.kill()
