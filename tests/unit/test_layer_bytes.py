"""A layer's memory-bound bytes by the kernels its architecture runs (plan/speed/layer_bytes.py):
the counts held to what transformers' layers move, and the scale the step time takes from them."""

from __future__ import annotations

import dataclasses

import pytest
from benchmark_modules import benchmark

from ado_actuators.sfttrainer.plan.speed.layer_bytes import (
    ACTIVATION_BYTES,
    LAYOUT_BYTES,
    LLAMA,
    NORM_BYTES,
    RESIDUAL_BYTES,
    ROTARY_BYTES,
    LayerKernels,
    LayerWidths,
    elementwise_scale,
)
from ado_actuators.sfttrainer.plan.speed.step_time import (
    COUNTED_ELEMENTWISE_BYTES,
    FITTED,
    REFERENCE,
    ModelShape,
    step_time,
)

# transformers' GPTBigCode scripts a helper with torch.jit.script, which torch 2.13 deprecates
pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning"
)

PLAIN = LayerKernels(rms_norm=False, rotary=False, gated_mlp=False)
"""GPTBigCode's and MPT's layer: LayerNorms, learned or ALiBi positions, a 2-matrix GELU MLP."""
LLAMA_2_7B = LayerWidths(hidden=4096, query=4096, key=4096, activated=4096 + 2 * 11008)
MISTRAL_7B = LayerWidths(hidden=4096, query=4096, key=1024, activated=4096 + 2 * 14336)
MIXTRAL = dataclasses.replace(MISTRAL_7B, activated=4096 + 2 * 2 * 14336)  # two experts a token
SANTACODER = LayerWidths(hidden=2048, query=2048, key=128, activated=2048 + 8192)


def test_the_counts_are_what_transformers_layers_move():
    pytest.importorskip("transformers")
    layer_bytes = benchmark("layer_bytes")
    hidden = layer_bytes.HIDDEN
    llama = layer_bytes.per_layer(layer_bytes.llama)
    bigcode = layer_bytes.per_layer(layer_bytes.gpt_bigcode)
    assert llama["norm"] / hidden == pytest.approx(2 * NORM_BYTES["rms"], rel=0.01)
    assert bigcode["norm"] / hidden == pytest.approx(2 * NORM_BYTES["layer"], rel=0.01)
    # GPTBigCode's attention moves only the layout copies; Llama's adds the rotary embedding
    assert bigcode["attention"] / hidden == pytest.approx(LAYOUT_BYTES, rel=0.01)
    rotary = (llama["attention"] - bigcode["attention"]) / (2 * hidden)  # queries and keys
    assert rotary == pytest.approx(ROTARY_BYTES, rel=0.01)
    for found in (llama, bigcode):
        assert found["layer"] / hidden == pytest.approx(RESIDUAL_BYTES, rel=0.01)
    assert llama["mlp"] / 688 == pytest.approx(ACTIVATION_BYTES[True], rel=0.01)
    assert bigcode["mlp"] / (4 * hidden) == pytest.approx(ACTIVATION_BYTES[False], rel=0.01)


def test_a_llama_layer_keeps_the_fitted_bytes_and_its_widths_set_what_fused_kernels_cut():
    shares = []
    for widths in (LLAMA_2_7B, MISTRAL_7B, MIXTRAL):
        scale = elementwise_scale(LLAMA, widths)
        assert scale.bytes == 1.0
        shares.append(scale.fusable)
    # a wider MLP leaves the RMSNorms and rotary embedding a smaller share of the layer
    assert shares == sorted(shares, reverse=True)
    assert shares[0] == pytest.approx(0.67, abs=0.01) and shares[-1] == pytest.approx(0.5, abs=0.01)


def test_layernorms_and_no_rotary_embedding_move_a_third_and_leave_nothing_to_fuse():
    scale = elementwise_scale(PLAIN, SANTACODER)
    assert scale.bytes == pytest.approx(0.37, abs=0.01)
    assert scale.fusable == 0.0
    assert scale.fast_kernels(FITTED.fast_kernels_elementwise) == 1.0


def test_only_the_counted_bytes_follow_the_architecture():
    """The fit's bytes beyond the count are charged as fitted: no count says what they are."""

    def shape(kernels: LayerKernels) -> ModelShape:
        return ModelShape(
            layers=24,
            attention_width=2048,
            activated_width=10240,
            matmul_params=10**9,
            total_params=10**9,
            trainable_params=10**9,
            hidden=2048,
            key_width=128,
            layer_kernels=kernels,
        )

    from ado_actuators.sfttrainer.plan.model.training import Batch, TrainingConfiguration

    configuration = TrainingConfiguration(batch=Batch(per_device_batch=4, sample_tokens=2048))
    found = {
        k: step_time(shape(k), configuration, REFERENCE, FITTED).parts["elementwise"]
        for k in (LLAMA, PLAIN)
    }
    counted = COUNTED_ELEMENTWISE_BYTES
    own = elementwise_scale(PLAIN, SANTACODER).bytes
    expected = (FITTED.elementwise_bytes - counted + counted * own) / FITTED.elementwise_bytes
    assert found[PLAIN] / found[LLAMA] == pytest.approx(expected)


def test_the_counter_reads_the_layer_kernels_from_the_family():
    from ado_actuators.sfttrainer.catalog.model_shapes import shipped_shape
    from ado_actuators.sfttrainer.plan.model.training import Tuning
    from ado_actuators.sfttrainer.plan.speed.prediction import model_shape

    bigcode = model_shape(shipped_shape("granite-20b-v2").config, Tuning(), "Vanilla")
    assert bigcode.layer_kernels == PLAIN
    assert bigcode.key_width == 128  # multi-query: one key head
    llama = model_shape(shipped_shape("llama3.1-8b").config, Tuning(), "Vanilla")
    assert llama.layer_kernels == LLAMA and llama.key_width == 8 * 128


def test_the_meta_device_reads_the_kernels_the_family_declares():
    """A family the counter knows and transformers' own modules agree: the meta path is what an
    architecture the counter lacks gets."""
    pytest.importorskip("transformers")
    from ado_actuators.sfttrainer.catalog.model_shapes import shipped_shape
    from ado_actuators.sfttrainer.plan.model.meta_shape import meta_counts
    from ado_actuators.sfttrainer.plan.model.shape import ModelShape as ConfigShape
    from ado_actuators.sfttrainer.plan.model.training import Tuning
    from ado_actuators.sfttrainer.plan.speed.prediction import _meta_shape, model_shape

    for name in ("granite-20b-v2", "mistral-7b-v0.1"):
        config = shipped_shape(name).config
        counted = model_shape(config, Tuning(), "Vanilla")
        meta = _meta_shape(meta_counts(config), ConfigShape.of(config), Tuning(), None)
        assert meta.layer_kernels == counted.layer_kernels
        assert meta.key_width == counted.key_width
