"""The packages each fms-hf-tuning version is measured with, per match_exact_dependencies, as data."""

from __future__ import annotations

import pytest
from packaging.specifiers import SpecifierSet

from ado_actuators.sfttrainer.catalog.entity import FMS_HF_TUNING_VERSIONS, entity_values
from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.plan.launch import environments as env

GPU_PACKAGES = (
    "flash-attn",
    "flash_attn",
    "mamba-ssm",
    "mamba_ssm",
    "causal-conv1d",
    "fms-acceleration",
    "fms-acceleration-foak",
    "nvidia-cublas-cu12",
    "triton",
    "bitsandbytes",
    "torch",
)


def spec(version, exact, **kwargs):
    return env.environment_spec(version, env.read_package_list(version), exact=exact, **kwargs)


def pinned(s: env.EnvironmentSpec) -> dict[str, str]:
    return {env.package_name(line): line for line in s.packages}


def test_every_version_in_the_domain_has_a_shipped_list():
    for version in FMS_HF_TUNING_VERSIONS:
        assert env.list_path(version).is_file(), version


@pytest.mark.parametrize("version", [v for v in FMS_HF_TUNING_VERSIONS if v != "3.0.0.1"])
def test_both_modes_install_that_release_from_the_registry(version):
    for exact in (True, False):
        packages = spec(version, exact).packages
        assert f"fms-hf-tuning=={version}" in packages
        assert not [p for p in packages if "://" in p], "no local wheels, no git URLs"


def test_cpu_mode_drops_what_needs_nvidia_gpus_and_keeps_the_workers_torch():
    s = spec("3.0.0", exact=False)
    names = s.names
    for package in GPU_PACKAGES:
        assert env.package_name(package) not in names, package
    assert not [n for n in names if n.startswith(("nvidia-", "fms-acceleration"))]
    assert {"transformers", "trl", "peft", "accelerate", "datasets"} <= names
    assert pinned(s)["transformers"] == "transformers==4.52.4"
    assert any(o.startswith("torch==2.6.0: the worker's own torch") for o in s.left_out)
    assert any(o.startswith("flash_attn==2.7.4.post1: needs NVIDIA GPUs") for o in s.left_out)


def test_exact_mode_keeps_every_pinned_package_cuda_builds_included():
    s = spec("2.1.2", exact=True)
    assert pinned(s)["torch"] == "torch==2.4.1"
    assert pinned(s)["flash-attn"] == "flash-attn==2.7.0.post2"
    assert "nvidia-cudnn-cu12" in s.names and "fms-acceleration-foak" in s.names
    assert s.left_out == ()
    assert len(s.packages) == len(env.read_package_list("2.1.2"))


def test_a_version_without_a_registry_release_is_refused_naming_it():
    for exact in (True, False):
        with pytest.raises(
            env.NoEnvironment, match=r"3.0.0.1 has no release on the package registry"
        ):
            spec("3.0.0.1", exact)


def test_pins_the_workers_own_packages_cannot_live_with_are_left_to_the_worker():
    needs = {"typing-extensions": SpecifierSet(">=4.16"), "sympy": SpecifierSet(">=1.13.3")}
    s = spec("3.0.0", exact=False, worker_needs=needs)
    assert "typing-extensions" not in s.names and "sympy" not in s.names
    assert any("typing_extensions==4.14.1: the worker's copy is kept" in o for o in s.left_out)
    fits = spec("3.0.0", exact=False, worker_needs={"numpy": SpecifierSet("<2")})
    assert pinned(fits)["numpy"] == "numpy==1.26.4"


def test_a_missing_list_is_refused(tmp_path):
    with pytest.raises(env.NoEnvironment, match=r"no package list for fms-hf-tuning 2.1.2"):
        env.read_package_list("2.1.2", tmp_path)


def values(**overrides):
    return entity_values(
        {
            "model_name": "llama-7b",
            "number_gpus": 1,
            "model_max_length": 512,
            "batch_size": 2,
            **overrides,
        }
    )


def test_features_follow_the_packages():
    assert env.provided_features(spec("3.0.0", exact=True).names) == {
        "flash_attn",
        "fast_kernels",
        "fast_moe",
        "gptq",
    }
    assert env.provided_features(spec("2.1.2", exact=True).names) == {
        "flash_attn",
        "fast_kernels",
        "gptq",
    }
    assert env.provided_features(spec("3.0.0", exact=False).names) == frozenset()


def test_features_an_environment_cannot_provide_are_refused_naming_setting_and_fix():
    gptq = catalog_data().experiment("finetune_gtpq-lora_benchmark-v1.0.0").sft_trainer_arguments
    wanted = env.requested_features(values(fast_moe=1, flash_attn=True), gptq, on_gpus=True)
    assert set(wanted) == {"fast_kernels", "fast_moe", "gptq", "flash_attn"}
    cpu = env.feature_problems(wanted, frozenset(), "3.0.0", exact=False)
    assert len(cpu) == 4
    assert all("set match_exact_dependencies: true" in p for p in cpu)
    assert any(p.startswith("fast_moe needs fms-acceleration-moe") for p in cpu)
    exact = env.feature_problems({"fast_moe": "fast_moe"}, frozenset({"gptq"}), "2.1.2", exact=True)
    assert exact == [
        "fast_moe needs fms-acceleration-moe, but fms-hf-tuning 2.1.2's package list "
        "has no fms-acceleration-moe; choose an fms_hf_tuning_version whose "
        "environment provides it, or measure without fast_moe"
    ]


def test_flash_attention_on_cpu_is_left_to_the_trainer_which_notes_it():
    assert env.requested_features(values(number_gpus=0, flash_attn=True), {}, on_gpus=False) == {}
    assert env.requested_features(values(number_gpus=2, flash_attn=True), {}, on_gpus=False) == {}


def test_skip_prepare_dataset_names_the_version():
    assert "fms-hf-tuning 2.1.2 has no argument" in env.skip_prepare_dataset_problem("2.1.2")


def test_a_non_exact_environment_counts_the_feature_packages_the_worker_has(tmp_path, monkeypatch):
    from ado_actuators.sfttrainer.execute.environment import worker_features

    assert worker_features({"flash_attn", "gptq"}) == {}  # this worker has neither
    (tmp_path / "flash_attn").mkdir()
    (tmp_path / "flash_attn" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = worker_features({"flash_attn", "gptq"})
    assert list(found) == ["flash_attn"]
    assert found["flash_attn"].startswith("the worker's flash-attn (no package metadata) (")
    assert str(tmp_path / "flash_attn") in found["flash_attn"]
    cpu = env.feature_problems(
        {"flash_attn": "flash_attn: true"}, frozenset(), "3.0.0", exact=False
    )
    assert "or install flash-attn on the workers" in cpu[0]
