"""The FLOP convention against a hand count, and the parameter counts it is fed."""

from __future__ import annotations

import pytest

from ado_actuators.sfttrainer.contract.trainer_io import ModelParameters
from ado_actuators.sfttrainer.metrics.flops import flops_per_token, token_weighted_sequence_length
from ado_actuators.sfttrainer.trainer.model_size import parameters_of_model

# The tiny Llama of the tests (examples/local-cpu/tiny_model.py), with a round vocabulary:
HIDDEN, INTER, LAYERS, HEADS, VOCAB = 64, 128, 2, 4, 512
# Per layer, counted by hand: q, k, v, o (64 x 64 each), gate, up, down (64 x 128 each),
# two RMSNorm weights (64 each).
PER_LAYER = 4 * 64 * 64 + 3 * 64 * 128 + 2 * 64  # 16384 + 24576 + 128 = 41088
EMBEDDING = 512 * 64  # a lookup table: no FLOPs
LM_HEAD = 64 * 512  # untied: a 64 x 512 matmul per token
TOTAL = EMBEDDING + 2 * PER_LAYER + 64 + LM_HEAD  # 32768 + 82176 + 64 + 32768 = 147776
MATMUL = TOTAL - EMBEDDING  # 115008


def llama_config(tie=False):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTER,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        tie_word_embeddings=tie,
    )


def tiny_llama(tie=False):
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(llama_config(tie))


def test_full_fine_tuning_counts_every_matmul_weight():
    params = parameters_of_model(tiny_llama())
    assert (params.total, params.trainable) == (147_776, 147_776) == (TOTAL, TOTAL)
    assert (params.matmul, params.trainable_matmul) == (MATMUL, MATMUL)
    assert (params.layers, params.attention_width) == (2, 64)
    # 6N + 12 L A s at s = 100: 6 * 115008 + 12 * 2 * 64 * 100 = 690048 + 153600
    assert flops_per_token(params, 100.0) == 843_648


def test_tied_embeddings_are_the_lm_head_and_multiply():
    params = parameters_of_model(tiny_llama(tie=True))
    assert params.total == TOTAL - LM_HEAD
    assert params.matmul == params.total  # the one table is the head's weight


def test_lora_adds_its_adapters_and_only_their_weight_gradients():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny_llama(), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    params = parameters_of_model(model)
    adapters = LAYERS * 2 * (4 * 64 + 64 * 4)  # A (4 x 64) and B (64 x 4) on q and v: 2048
    assert params.total == TOTAL + adapters
    assert params.trainable == params.trainable_matmul == adapters
    assert params.matmul == MATMUL + adapters
    # 4N + 2T + 12 L A s = 4 * 117056 + 2 * 2048 + 153600 = 468224 + 4096 + 153600
    assert flops_per_token(params, 100.0) == 625_920


def test_prompt_tuning_trains_a_lookup_table_only():
    from peft import PromptTuningConfig, get_peft_model

    model = get_peft_model(
        tiny_llama(), PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=8)
    )
    params = parameters_of_model(model)
    assert params.trainable == 8 * 64
    assert params.trainable_matmul == 0 and params.matmul == MATMUL
    assert flops_per_token(params, 100.0) == 4 * MATMUL + 153_600


def test_no_figure_for_mixture_of_experts_or_unknown_shapes():
    moe = ModelParameters(
        total=10,
        trainable=10,
        matmul=10,
        trainable_matmul=10,
        layers=2,
        attention_width=64,
        mixture_of_experts=True,
    )
    assert flops_per_token(moe, 100) is None
    assert (
        flops_per_token(moe.model_copy(update={"mixture_of_experts": False, "layers": None}), 100)
        is None
    )


def test_attention_uses_the_token_weighted_sequence_length():
    # sequences of 10 and 30 tokens: sum s^2 = 1000, sum s = 40 -> 25 (not the plain mean, 20)
    assert token_weighted_sequence_length(10**2 + 30**2, 40) == pytest.approx(25.0)
    assert token_weighted_sequence_length(0, 0) == 0.0


def stand_in_quant_linear(linear, spelling, bits=4):
    """A GPTQ linear layer as GPTQModel / AutoGPTQ build it: 4-bit weights packed eight to an
    int32 in a `qweight` buffer, with zeros and scales buffers and no weight parameter."""
    import torch

    fan_in, fan_out = linear.in_features, linear.out_features
    layer = torch.nn.Module()
    if spelling:
        setattr(layer, spelling[0], fan_in)
        setattr(layer, spelling[1], fan_out)
    layer.bits = bits
    layer.register_buffer("qweight", torch.zeros((fan_in // 32 * bits, fan_out), dtype=torch.int32))
    layer.register_buffer("qzeros", torch.zeros((1, fan_out // 32 * bits), dtype=torch.int32))
    layer.register_buffer("scales", torch.zeros((1, fan_out), dtype=torch.float16))
    return layer


def quantised_llama(spelling):
    model = tiny_llama()
    for layer in model.model.layers:
        for block in (layer.self_attn, layer.mlp):
            for name, child in list(block.named_children()):
                if name.endswith("_proj"):
                    setattr(block, name, stand_in_quant_linear(child, spelling))
    return model


@pytest.mark.parametrize(
    "spelling",
    [("in_features", "out_features"), ("infeatures", "outfeatures"), None],
    ids=["gptqmodel", "auto-gptq", "from-packing"],
)
def test_quantised_layers_count_their_unpacked_weights(spelling):
    """GPTQ-LoRA's base model keeps its weights in buffers: counting parameters alone saw only
    the embeddings, norms and head (5-15x too few FLOPs on real models)."""
    params = parameters_of_model(quantised_llama(spelling))
    assert (params.total, params.matmul) == (TOTAL, MATMUL)  # the same model, packed
    norms = LAYERS * 2 * 64 + 64
    # the quantised weights are frozen: what trains is what stayed a parameter
    assert params.trainable == EMBEDDING + norms + LM_HEAD
    assert params.trainable_matmul == norms + LM_HEAD


def tiny_llava(method: str = "none"):
    """A LLaVA-NeXT of the tiny Llama and a 2-layer SigLIP tower (hidden 32, MLP 64) on
    32-pixel tiles of 8-pixel patches: 16 positions a tile, no CLS token."""
    import torch
    import transformers

    torch.manual_seed(0)
    vision = transformers.SiglipVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=32,
        patch_size=8,
    )
    config = transformers.LlavaNextConfig(
        vision_config=vision,
        text_config=llama_config(),
        image_token_index=VOCAB - 1,
        image_grid_pinpoints=[[32, 32], [32, 64], [64, 32], [64, 64]],
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
        tie_word_embeddings=False,
    )
    model = transformers.LlavaNextForConditionalGeneration(config)
    if method == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, target_modules=["gate_proj"]))
    return model


# The SigLIP tower by hand: the patch convolution (3 x 8 x 8 -> 32, with bias), per layer q, k,
# v, out (32 x 32 + 32 each), fc1, fc2 (32 x 64 + 64, 64 x 32 + 32), two LayerNorms (2 x 32
# each); the post-layernorm; the attention-pooling head (a probe, an nn.MultiheadAttention's
# in and out projections, a LayerNorm and an MLP); the projector (32 -> 64 -> 64, biases). The
# position table (16 x 32) is looked up; the image-newline vector (64) is the model's own.
CONV = 3 * 8 * 8 * 32 + 32
SIGLIP_LAYER = 4 * (32 * 32 + 32) + (32 * 64 + 64) + (64 * 32 + 32) + 2 * 2 * 32
HEAD = 32 + (3 * 32 * 32 + 3 * 32) + (32 * 32 + 32) + 2 * 32 + (32 * 64 + 64) + (64 * 32 + 32)
PROJECTOR = (32 * 64 + 64) + (64 * 64 + 64)
TOWER = CONV + 2 * SIGLIP_LAYER + 2 * 32 + HEAD + PROJECTOR


def test_a_vision_models_tower_is_counted_apart_and_priced_per_tile():
    from ado_actuators.sfttrainer.metrics.flops import flops_per_tile

    params = parameters_of_model(tiny_llava())
    tower = params.image_tower
    assert tower is not None
    assert (tower.matmul, tower.trainable_matmul) == (TOWER, TOWER)
    assert (tower.layers, tower.attention_width, tower.tile_positions) == (2, 32, 16)
    # the language model as the tiny Llama (and the newline vector): the tower is not per token
    assert (params.matmul, params.layers, params.attention_width) == (MATMUL + 64, 2, 64)
    # trained: P (4 N + 2 T + 12 L A P)
    assert flops_per_tile(tower) == 16 * (6 * TOWER + 12 * 2 * 32 * 16)


def test_a_frozen_tower_runs_its_forward_only():
    from ado_actuators.sfttrainer.metrics.flops import flops_per_tile

    params = parameters_of_model(tiny_llava("lora"))  # LoRA on the language model's MLP only
    tower = params.image_tower
    assert tower is not None and tower.trainable_matmul == 0
    assert flops_per_tile(tower) == 16 * (2 * TOWER + 4 * 2 * 32 * 16)


def test_the_tiles_are_llava_nexts_own_count():
    from ado_actuators.sfttrainer.trainer.model_size import tile_counter

    tiles = tile_counter(tiny_llava())
    assert tiles is not None
    # a square image: the 64 x 64 tiling (4 tiles) and the base image; a tall one: 2 + 1
    assert tiles([[384, 384]]) == 5
    assert tiles([[768, 384], [384, 384]]) == 3 + 5
    assert tile_counter(tiny_llama()) is None
