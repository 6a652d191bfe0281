"""The wrapper calls fms-hf-tuning the way the release's own main() does (fms_api reads it);
tests/unit/test_fms_releases.py reads every published release, tests/e2e/test_versions.py
trains them."""

from __future__ import annotations

import textwrap
import types
from pathlib import Path

import pytest

from ado_actuators.sfttrainer.trainer import fms, fms_api


def test_installed_release_parses_every_returned_value_by_name(tmp_path, trainer_tools):
    argv = trainer_tools.spec_fms_args(
        Path("/nonexistent-model"),
        tmp_path / "d.jsonl",
        peft_method="lora",
        extra=("--target_modules", "q_proj"),
    )
    args = fms.parse(argv)
    assert type(args.configs["peft_config"]).__name__ == "LoraConfig"
    assert args.train_args.max_steps == 3 and args.data_args.dataset_text_field == "output"
    assert {"quantization_config", "fast_moe_config", "tracker_configs"} <= set(args.configs)


RELEASE = """
def parse_arguments(parser, json_config=None):
    return model_args, data_args, training_args, tune_config, {extra}aim_config, exp_metadata

def train(model_args, data_args, train_args, peft_config=None, tracker_configs=None,
          additional_callbacks=None, exp_metadata=None{train_extra}):
    pass

def main():
    (model_args, data_args, training_args, tune_config, {extra}aim_config,
     exp_metadata) = parse_arguments(parser, job_config)
    metadata = json.loads(exp_metadata)
    trackers = TrackerConfigFactory(aim_config=aim_config)
    {after}
    trainer, info = train(model_args=model_args, data_args=data_args, train_args=training_args,
                          peft_config=tune_config, tracker_configs=trackers,
                          additional_callbacks=None, exp_metadata=metadata{call_extra})
"""


def release(extra="", train_extra="", after="", call_extra="") -> str:
    return textwrap.dedent(RELEASE).format(
        extra=extra, train_extra=train_extra, after=after, call_extra=call_extra
    )


class TrackerConfigFactory:
    def __init__(self, **configs):
        self.__dict__.update(configs)


def test_a_release_with_one_config_more_is_read_and_called_like_the_others():
    api = fms_api.read_api(
        release(
            extra="new_tracker_config, new_kernels_config, ",
            train_extra=", new_kernels_config=None",
            after="trackers.new_tracker = new_tracker_config",
            call_extra=", new_kernels_config=new_kernels_config",
        )
    )
    assert api.parsed_names == (
        "model_args",
        "data_args",
        "training_args",
        "tune_config",
        "new_tracker_config",
        "new_kernels_config",
        "aim_config",
        "exp_metadata",
    )
    parsed = {name: f"<{name}>" for name in api.parsed_names}
    namespace = types.SimpleNamespace(TrackerConfigFactory=TrackerConfigFactory)
    keywords = api.train_keywords(namespace, parsed)
    assert (
        keywords["train_args"] == "<training_args>" and keywords["peft_config"] == "<tune_config>"
    )
    assert keywords["new_kernels_config"] == "<new_kernels_config>"
    trackers = keywords["tracker_configs"]
    assert (trackers.aim_config, trackers.new_tracker) == ("<aim_config>", "<new_tracker_config>")
    assert "additional_callbacks" not in keywords and "exp_metadata" not in keywords


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        (
            {"call_extra": ", fast=compute_fast(tune_config)", "train_extra": ", fast=None"},
            "train(fast=compute_fast(tune_config))",
        ),
        ({"call_extra": ", unknown=None"}, "train(unknown=...), which train() does not take"),
        ({"call_extra": ", **more"}, "train(**...)"),
    ],
)
def test_a_release_whose_main_cannot_be_reproduced_is_refused_naming_what(changes, named):
    with pytest.raises(fms_api.ApiNotUnderstood, match=r"fms-hf-tuning 9\.9\.9: .*") as error:
        fms_api.read_api(release(**changes), "fms-hf-tuning 9.9.9")
    assert named in str(error.value)


def test_a_release_without_main_or_with_mismatched_counts_is_refused():
    with pytest.raises(fms_api.ApiNotUnderstood, match="defines no main"):
        fms_api.read_api(release().split("def main")[0])
    mismatched = release().replace("aim_config, exp_metadata\n", "exp_metadata\n", 1)
    with pytest.raises(fms_api.ApiNotUnderstood, match="returns 5 values but main\\(\\) unpacks 6"):
        fms_api.read_api(mismatched)
    with pytest.raises(fms_api.ApiNotUnderstood, match="does not parse"):
        fms_api.read_api("def main(:\n")


def test_the_node_refuses_a_release_it_cannot_read_before_launching(tmp_path):
    from ado_actuators.sfttrainer.contract.outcomes import Failed
    from ado_actuators.sfttrainer.execute import environment

    source = tmp_path / "sft_trainer.py"
    source.write_text(release(call_extra=", **more"))
    chosen = environment.Environment(python="python", metadata={})
    refused = environment._readable_api(chosen, source, "9.9.9")
    assert isinstance(refused, Failed)
    assert refused.reason.startswith("fms-hf-tuning 9.9.9: the trainer cannot tell how to call")
    assert (
        "train(**...)" in refused.reason
        and "Choose another fms_hf_tuning_version" in refused.reason
    )
    source.write_text(release())
    assert environment._readable_api(chosen, source, "9.9.9") is chosen
