"""Counting a micro-batch's dataset tokens: padding excluded, fms's appended EOS excluded."""

from __future__ import annotations

import math

import torch
import transformers

from ado_actuators.sfttrainer.trainer.tokens import StepCounts, TokenMeter, count_dataset_tokens

EOS, PAD, BOS = 2, 3, 1


def batch(rows, pad_left=False):
    """Pads token rows to one length and builds the attention mask, like tokenizer.pad."""
    width = max(len(r) for r in rows)
    ids, mask = [], []
    for r in rows:
        padding = [PAD] * (width - len(r))
        ids.append(padding + r if pad_left else r + padding)
        ones, zeros = [1] * len(r), [0] * (width - len(r))
        mask.append(zeros + ones if pad_left else ones + zeros)
    return torch.tensor(ids), torch.tensor(mask)


def test_without_eos_convention_every_real_token_counts():
    ids, mask = batch([[BOS, 5, 6, EOS], [BOS, 7]])
    assert int(count_dataset_tokens(mask, ids, None)) == 6


def test_appended_eos_of_untruncated_entries_is_not_a_dataset_token():
    # entry 1 kept whole (ends with the appended EOS), entry 2 truncated at the limit
    ids, mask = batch([[BOS, 5, 6, EOS], [BOS, 7, 8, 9, 10, 11]])
    assert int(count_dataset_tokens(mask, ids, EOS)) == 3 + 6


def test_left_padding_finds_the_last_real_token_too():
    ids, mask = batch([[BOS, 5, 6, EOS], [BOS, 7, 8, 9, 10, 11]], pad_left=True)
    assert int(count_dataset_tokens(mask, ids, EOS)) == 3 + 6


def test_a_row_of_padding_only_counts_nothing():
    ids = torch.tensor([[BOS, 5, EOS], [PAD, PAD, PAD]])
    mask = torch.tensor([[1, 1, 1], [0, 0, 0]])
    assert int(count_dataset_tokens(mask, ids, EOS)) == 2


def test_pad_equal_to_eos_is_not_mistaken_for_an_appended_eos_in_the_padding():
    ids = torch.tensor([[BOS, 5, 6, EOS, EOS], [BOS, 7, 8, 9, 10]])
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    assert int(count_dataset_tokens(mask, ids, EOS)) == 3 + 5


def test_meter_sums_micro_batches_and_resets_per_step():
    meter = TokenMeter()
    meter.appended_eos_id = EOS
    for rows in ([[BOS, 5, EOS]], [[BOS, 6, 7, EOS], [BOS, 8]]):
        ids, mask = batch(rows)
        meter.add({"input_ids": ids, "attention_mask": mask})
    counts = meter.take()
    assert counts.dataset_tokens == 2 + 3 + 2
    # 3 sequences of 3, 4 and 2 real tokens (EOS included: the model processes it)
    assert counts.samples == 3
    assert counts.padded_tokens == 3 + 2 * 4
    assert counts.sequence_tokens_squared == 3**2 + 4**2 + 2**2
    assert meter.take() == StepCounts()


def test_meter_counts_packed_batches_without_a_mask_by_their_positions():
    meter = TokenMeter()
    meter.add({"input_ids": torch.ones(1, 37, dtype=torch.long)})
    assert meter.take() == StepCounts(
        dataset_tokens=37, samples=1, padded_tokens=37, sequence_tokens_squared=37**2
    )


def test_installed_wraps_training_step_and_restores_it():
    original = transformers.Trainer.training_step
    meter = TokenMeter()
    with meter.installed():
        assert transformers.Trainer.training_step is not original
    assert transformers.Trainer.training_step is original


def test_installed_counts_what_training_step_receives():
    calls = []

    class FakeTrainer(transformers.Trainer):
        def __init__(self):  # no model needed: only the dispatch is under test
            pass

    original = transformers.Trainer.training_step
    transformers.Trainer.training_step = lambda self, model, inputs, *a, **k: calls.append(inputs)
    try:
        meter = TokenMeter()
        with meter.installed():
            ids, mask = batch([[BOS, 5, 6]])
            FakeTrainer().training_step(None, {"input_ids": ids, "attention_mask": mask}, None)
        assert meter.take().dataset_tokens == 3 and len(calls) == 1
    finally:
        transformers.Trainer.training_step = original


def test_meter_sums_the_micro_steps_losses_and_counts_the_labelled_positions():
    """As Hugging Face sums training_step's returns into the loss it logs; -100 is no label."""
    meter = TokenMeter()
    for loss, labels in ((0.75, [[-100, -100, 5]]), (0.5, [[-100, 6, 7], [-100, -100, -100]])):
        ids = torch.tensor(labels).clamp(min=0)
        meter.add(
            {
                "input_ids": ids,
                "attention_mask": torch.ones_like(ids),
                "labels": torch.tensor(labels),
            }
        )
        meter.add_loss(torch.tensor(loss))
    counts = meter.take()
    assert (counts.loss, counts.labelled_tokens) == (1.25, 3)
    assert (meter.take().loss, meter.take().labelled_tokens) == (None, None)  # reset per step


def test_a_nan_micro_step_makes_the_step_nan_and_no_label_counts_zero():
    meter = TokenMeter()
    meter.add({"input_ids": torch.ones(1, 4, dtype=torch.long), "labels": torch.full((1, 4), -100)})
    meter.add_loss(torch.tensor(float("nan")))
    counts = meter.take()
    assert math.isnan(counts.loss) and counts.labelled_tokens == 0


def test_installed_keeps_the_loss_training_step_returns():
    class FakeTrainer(transformers.Trainer):
        def __init__(self):
            pass

    original = transformers.Trainer.training_step
    transformers.Trainer.training_step = lambda self, model, inputs, *a, **k: torch.tensor(2.5)
    try:
        meter = TokenMeter()
        with meter.installed():
            ids, mask = batch([[BOS, 5, 6]])
            returned = FakeTrainer().training_step(None, {"input_ids": ids, "attention_mask": mask})
        assert float(returned) == 2.5 and meter.take().loss == 2.5
    finally:
        transformers.Trainer.training_step = original


def test_a_vision_models_image_tokens_are_counted_apart_and_among_the_dataset_tokens():
    """The processor expanded each image into image tokens (id 9 here): dataset tokens count
    them with the text, the image count says how many they were; a text model counts none."""
    meter = TokenMeter()
    ids = torch.tensor([[9, 9, 9, 4, 5, 0], [9, 9, 9, 6, 0, 0]])
    batch = {"input_ids": ids, "attention_mask": (ids != 0).long()}
    meter.add(batch)
    text_model = meter.take()  # no image token known
    assert (text_model.dataset_tokens, text_model.image_tokens) == (9, None)
    meter.image_token_id = 9
    meter.add(batch)
    meter.add(batch)
    counts = meter.take()
    assert (counts.dataset_tokens, counts.image_tokens) == (18, 12)
    assert meter.take().image_tokens is None  # reset per step


def test_a_vision_models_tiles_are_counted_from_each_batchs_image_sizes_at_the_steps_end():
    """The tower's tiles per step, from the batches' image sizes (the model's own tile count,
    trainer/model_size.tile_counter; here one tile per 100 pixels of height), read once per
    step; a model without a counter counts none."""
    meter = TokenMeter()
    ids = torch.tensor([[9, 9, 4], [9, 9, 5]])
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "image_sizes": torch.tensor([[300, 100], [500, 100]]),
    }
    meter.add(batch)
    assert meter.take().image_tiles is None
    meter.tiles_of = lambda sizes: sum(height // 100 for height, _ in sizes)
    meter.add(batch)
    meter.add(batch)
    assert meter.take().image_tiles == 2 * (3 + 5)
    assert meter.take().image_tiles is None  # reset per step
