"""Counting the dataset tokens a rank trained on, from the micro-batches it really trained.

Counted in `transformers.Trainer.training_step` (once per micro-batch, gradient-accumulation
micro-steps included), not in the collator: the dataloader prefetches a batch that may never
be trained, and a second tokenisation pass would double the preprocessing cost.

The spec's per-entry figure (note 3) is
    min(len(tokenizer(entry["output"]).input_ids), tokenizer.model_max_length, max_seq_length)
i.e. the tokenizer's own special tokens (BOS for Llama-style tokenizers) count, and nothing
else does. fms-hf-tuning's text-field path renders `{{output}}{{eos_token}}` before TRL
tokenises and truncates to min(max_seq_length, model_max_length), so a trained sequence is
    tokens(output) + [EOS], truncated to that limit.
The appended EOS survives only in sequences that were not truncated, where it is the last
real token. Subtracting it there gives exactly the spec's figure; `count_dataset_tokens`
does that. (A truncated entry whose token at the cut happens to be the EOS token itself
would be under-counted by one; generated datasets never contain the EOS text.)
"""

from __future__ import annotations

import contextlib
import dataclasses


def count_dataset_tokens(attention_mask, input_ids=None, appended_eos_id: int | None = None):
    """Non-padding tokens of a micro-batch, minus the EOS fms appended to each entry.

    Returns a 0-d tensor on the batch's device so that no GPU sync happens per micro-step.
    """
    real = attention_mask.sum()
    if appended_eos_id is None or input_ids is None:
        return real
    import torch

    mask = attention_mask.to(torch.bool)
    # index of each row's last real token, whichever side the padding is on
    positions = torch.arange(mask.shape[-1], device=mask.device).expand_as(mask)
    last = torch.where(mask, positions, torch.full_like(positions, -1)).max(dim=-1).values
    has_tokens = last >= 0
    last_ids = input_ids.gather(-1, last.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return real - ((last_ids == appended_eos_id) & has_tokens).sum()


IGNORE_INDEX = -100
"""The label of a position no loss is computed for (PyTorch's and Hugging Face's)."""


@dataclasses.dataclass(frozen=True)
class StepCounts:
    dataset_tokens: int = 0
    samples: int = 0
    padded_tokens: int = 0
    sequence_tokens_squared: int = 0
    loss: float | None = None
    labelled_tokens: int | None = None
    image_tokens: int | None = None
    image_tiles: int | None = None


class TokenMeter:
    """Accumulates, over the micro-batches of the current step: `count_dataset_tokens`, the
    sequences, the batch positions (padding included), the sum of squared sequence lengths
    (what attention costs, metrics/flops.py), the positions with a label, and the loss.

    The loss is what `training_step` returns for each micro-batch, summed over the step as
    Hugging Face sums it into the loss it logs (`tr_loss += tr_loss_step`): already divided
    by the accumulation steps or token-weighted, as the release does it. Hugging Face then
    logs the mean of that sum over the ranks; metrics/loss.py takes the same mean from the
    rank reports. It is read here, not from HF's log, because fms-hf-tuning logs once per
    epoch (its logging_strategy default) and HF's log replaces a NaN step by the mean of the
    finite ones (logging_nan_inf_filter). Both stay device tensors until take()."""

    def __init__(self) -> None:
        self.appended_eos_id: int | None = None
        # a vision-language model's image token: its processor has expanded every image into
        # these, counted among the dataset tokens; counted apart too, to say how many they were
        self.image_token_id: int | None = None
        # and the tiles its vision tower encodes, from each batch's image sizes
        # (trainer/model_size.tile_counter), read at take(): no device sync per micro-step
        self.tiles_of = None
        self._image_sizes: list = []
        self._images: list = []
        self._tokens: list = []
        self._squares: list = []
        self._labelled: list = []
        self._losses: list = []
        self._samples = 0
        self._padded = 0

    def add(self, inputs) -> None:
        get = inputs.get if hasattr(inputs, "get") else lambda _name: None
        mask, ids, labels = get("attention_mask"), get("input_ids"), get("labels")
        if labels is not None:
            self._labelled.append((labels != IGNORE_INDEX).sum())
        if self.image_token_id is not None and ids is not None:
            self._images.append((ids == self.image_token_id).sum())
        if self.tiles_of is not None and (sizes := get("image_sizes")) is not None:
            self._image_sizes.append(sizes)
        if mask is None:
            # padding-free / packed batches carry no mask: every position is a real token
            if ids is not None:
                rows = ids.shape[0] if ids.dim() > 1 else 1
                self._tokens.append(ids.numel())
                self._squares.append(rows * ids.shape[-1] ** 2)
                self._samples += rows
                self._padded += ids.numel()
            return
        self._tokens.append(count_dataset_tokens(mask, ids, self.appended_eos_id))
        lengths = mask.sum(dim=-1)
        self._squares.append((lengths * lengths).sum())
        self._samples += mask.shape[0] if mask.dim() > 1 else 1
        self._padded += mask.numel()

    def add_loss(self, loss) -> None:
        """A micro-step's loss as `training_step` returned it (a detached device tensor)."""
        if loss is not None:
            self._losses.append(loss)

    def take(self) -> StepCounts:
        """What was counted since the last take(): one device sync per optimisation step."""
        counts = StepCounts(
            dataset_tokens=sum(int(t) for t in self._tokens),
            samples=self._samples,
            padded_tokens=self._padded,
            sequence_tokens_squared=sum(int(t) for t in self._squares),
            loss=float(sum(self._losses)) if self._losses else None,
            labelled_tokens=sum(int(t) for t in self._labelled) if self._labelled else None,
            image_tokens=sum(int(t) for t in self._images) if self._images else None,
            image_tiles=self._tiles(),
        )
        self._tokens, self._squares, self._samples, self._padded = [], [], 0, 0
        self._labelled, self._losses, self._images, self._image_sizes = [], [], [], []
        return counts

    def _tiles(self) -> int | None:
        if self.tiles_of is None or not self._image_sizes:
            return None
        sizes = [s.tolist() if hasattr(s, "tolist") else s for s in self._image_sizes]
        return sum(self.tiles_of(batch) for batch in sizes)

    @contextlib.contextmanager
    def installed(self):
        """Counts every `Trainer.training_step` call made inside the block.

        SFTTrainer (TRL) overrides training_step but calls super(), so patching the base
        class sees every micro-step of every HF-based trainer fms-hf-tuning builds.
        """
        import transformers

        original = transformers.Trainer.training_step
        meter = self

        def training_step(trainer, model, inputs, *args, **kwargs):
            meter.add(inputs)
            loss = original(trainer, model, inputs, *args, **kwargs)
            meter.add_loss(loss)
            return loss

        transformers.Trainer.training_step = training_step
        try:
            yield self
        finally:
            transformers.Trainer.training_step = original
