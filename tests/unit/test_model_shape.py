"""config.json is read once, into plan/model/shape.py's ModelShape, and every family's knowledge
lives in its own module of plan/model/families/: the count, the memory prediction's dimensions
and the step time read the same shape."""

from __future__ import annotations

import pytest

from ado_actuators.sfttrainer.plan.memory.peak import Dimensions
from ado_actuators.sfttrainer.plan.model.architecture import (
    COUNTED,
    UnsupportedArchitecture,
    count_parameters,
)
from ado_actuators.sfttrainer.plan.model.families.registry import FAMILIES, family_of
from ado_actuators.sfttrainer.plan.model.shape import ModelShape

MISTRAL_NO_KV = {
    "model_type": "mistral",
    "vocab_size": 1000,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
}


def test_every_counted_model_type_has_one_family():
    assert set(FAMILIES) == set(COUNTED)
    assert all(family_of(name).model_type == name for name in COUNTED)
    assert family_of("granitemoehybrid") is None


def test_the_count_and_the_dimensions_read_one_shape():
    shape = ModelShape.of(MISTRAL_NO_KV)
    assert shape.kv_heads == 8  # MistralConfig's default, for both readers
    kv_proj = next(s for s in count_parameters(shape).linears if s.name == "k_proj")
    assert kv_proj.outputs == Dimensions.of(shape).kv_width == 8 * 16
    assert count_parameters(shape) is count_parameters(ModelShape.of(MISTRAL_NO_KV))  # memoised


def test_a_multimodal_config_reads_its_language_model():
    nested = {"model_type": "llava_next", "text_config": MISTRAL_NO_KV, "vision_config": {}}
    assert ModelShape.of(nested) == ModelShape.of(MISTRAL_NO_KV)


def test_a_shape_given_as_no_count_fails_the_count_and_a_missing_one_names_its_key():
    shape = ModelShape.of(dict(MISTRAL_NO_KV, hidden_size="64"))
    assert shape.hidden is None
    with pytest.raises(UnsupportedArchitecture, match="hidden_size '64' is not a count"):
        count_parameters(shape)
    with pytest.raises(KeyError, match="hidden_size"):
        Dimensions.of(shape)
    bigcode = ModelShape.of({"model_type": "gpt_bigcode", "vocab_size": 10, "n_layer": 1})
    with pytest.raises(UnsupportedArchitecture, match="n_embd / hidden_size"):
        count_parameters(bigcode)


def test_the_quantization_is_read_with_the_shape():
    """config.json's quantization_config, read once beside the shape: GPTQ's bits,
    bitsandbytes' load flags, and one stated without a bit width raises only when asked."""
    from ado_actuators.sfttrainer.plan.model.shape import Quantization, UnsupportedArchitecture

    assert ModelShape.of({"model_type": "llama"}).quantized_bits is None
    gptq = ModelShape.of({"quantization_config": {"quant_method": "GPTQ", "bits": 4}})
    assert gptq.quantization == Quantization("gptq", 4)
    assert gptq.quantized_bits == 4
    eight = ModelShape.of({"quantization_config": {"load_in_8bit": True}})
    assert (eight.quantized_bits, eight.quantization.bitsandbytes) == (8, True)
    assert ModelShape.of({"quantization_config": {"load_in_4bit": True}}).quantized_bits == 4
    fp8 = ModelShape.of({"quantization_config": {"quant_method": "fp8"}})
    with pytest.raises(UnsupportedArchitecture, match="'fp8' without a readable bit width"):
        _ = fp8.quantized_bits
    odd = ModelShape.of({"quantization_config": "int4"})
    with pytest.raises(UnsupportedArchitecture, match="'int4' is not a mapping"):
        _ = odd.quantized_bits
