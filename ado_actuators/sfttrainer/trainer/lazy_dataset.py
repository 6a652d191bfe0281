"""Time-bounded runs tokenise entries as training reaches them, not the whole dataset first.

A run bounded by `stop_after_seconds` cannot know beforehand how many entries it will train,
so fms-hf-tuning would load, format and tokenise the whole file before the first step (over
a minute for the default dataset). Instead the trainer hands fms a head file (the first
block of entries) so that fms sets everything up as usual, then trains `LeadingEntries`: the
whole file's entries in file order, read and tokenised block by block, the next block in a
background thread while the current one trains. The entries trained after S steps are the
first S x batch_size x gradient_accumulation_steps, the same ones a `max_steps: S` run trains.

Only fms's single-sequence text path (`--dataset_text_field`, no template, no packing,
no padding-free or multipack plugin, text-only, jsonl/parquet files) is tokenised lazily; for
it, fms 3.x + TRL 0.19 do, per entry:
    text = entry[field] + eos_token            (fms's `{{element[field]}}{{eos_token}}` template)
    input_ids = tokenizer(text=text).input_ids[:max_length]        (TRL tokenize + truncate)
which `encode_entry` repeats, after checking it against fms's own rendering of entry 0.
Other runs prepare the whole dataset as before.

The fms/TRL/transformers APIs this relies on (the only module that knows them):
- `tuning.sft_trainer.process_dataargs`, looked up as a module global by `train()`, returning
  (train_dataset, eval_dataset, text_field, collator, max_seq_length, dataset_kwargs);
- TRL's `SFTConfig.dataset_kwargs["skip_prepare_dataset"]` (TRL then leaves the dataset alone);
- `transformers.Trainer._get_train_sampler` (returns the training sampler);
- `transformers.Trainer.num_tokens` (a staticmethod that, for `include_tokens_per_second` on
  an epoch-bounded run, iterates the whole training dataloader).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ado_actuators.sfttrainer.contract.entries import (
    INDEXED_SUFFIXES,
    EntryFile,
    write_first_entries,
)
from ado_actuators.sfttrainer.contract.workspace import Workspace

MAX_BLOCK_ENTRIES = 256
"""Later blocks double in size up to this: large enough that a block's tokenisation is not
dominated by per-call overhead, small enough to stay well ahead of training in the background."""


def encode_entry(tokenizer, text_field: str, max_length: int | None, entry: dict) -> list[int]:
    ids = tokenizer(text=render_text(tokenizer, text_field, entry)).input_ids
    return ids[:max_length] if max_length is not None else ids


def render_text(tokenizer, text_field: str, entry: dict) -> str:
    return f"{entry[text_field]}{tokenizer.eos_token}"


def block_bounds(length: int, first: int, largest: int = MAX_BLOCK_ENTRIES) -> list[int]:
    """Start of every block, then `length`: the first `first` entries, then doubling blocks."""
    bounds, size, start = [0], max(1, first), 0
    while start < length:
        start = min(length, start + size)
        bounds.append(start)
        size = min(max(largest, first), size * 2)
    return bounds


class LeadingEntries:
    """A map-style dataset of a file's tokenised entries, encoded a block at a time.

    Indexing entry i encodes its block if nobody has yet, and starts encoding the next block
    in the background; blocks two behind are dropped. A single worker thread does every
    encoding, so the tokenizer is never used from two threads at once.
    """

    def __init__(self, entries: EntryFile, encode: Callable[[dict], list[int]], first_block: int):
        self.entries, self.encode = entries, encode
        self.bounds = block_bounds(len(entries), first_block)
        self.waited_seconds = 0.0
        self.encoded_entries = 0
        self._closed = False
        self._blocks: dict[int, concurrent.futures.Future] = {}
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tokenise")

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        import bisect

        if not 0 <= index < len(self):
            raise IndexError(index)
        block = bisect.bisect_right(self.bounds, index) - 1
        future = self._submit(block)
        assert future is not None  # index < len(self): its block exists
        self._submit(block + 1)
        for old in [b for b in self._blocks if b < block - 1]:
            del self._blocks[old]
        if not future.done():
            started = time.monotonic()
            concurrent.futures.wait([future])
            self.waited_seconds += time.monotonic() - started
        return {"input_ids": future.result()[index - self.bounds[block]]}

    def prepare_first_block(self) -> None:
        if (first := self._submit(0)) is not None:  # None: no entries, nothing to prepare
            first.result()

    def _submit(self, block: int) -> concurrent.futures.Future | None:
        """The encoding of `block`, started if it was not; None past the last block."""
        if block not in self._blocks and block < len(self.bounds) - 1:
            start, stop = self.bounds[block], self.bounds[block + 1]
            self._blocks[block] = self._worker.submit(self._encode_block, start, stop)
        return self._blocks.get(block)

    def _encode_block(self, start: int, stop: int) -> list[list[int]]:
        encoded = []
        for entry in self.entries.read(start, stop):
            if self._closed:  # the interpreter joins this thread at exit: do not make it wait
                break
            encoded.append(self.encode(entry))
        self.encoded_entries += len(encoded)
        return encoded

    def close(self) -> None:
        self._closed = True
        self._worker.shutdown(wait=False, cancel_futures=True)

    def __getstate__(self):  # dataloader worker processes get their own thread and blocks
        state = self.__dict__.copy()
        state["_blocks"], state["_worker"] = {}, None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tokenise")


def unsupported_reason(args: Any, dataset: Path) -> str | None:  # tuning is untyped
    """Why this run's data cannot be tokenised lazily (None: it can)."""
    data, train = args.data_args, args.train_args
    packing = args.configs.get("attention_and_distributed_packing_config")
    checks = [
        (dataset.suffix not in INDEXED_SUFFIXES, f"a {dataset.suffix} dataset"),
        (not data.dataset_text_field, "no --dataset_text_field"),
        (bool(data.data_formatter_template), "a data formatter template"),
        (bool(data.instruction_template), "a chat (instruction template) dataset"),
        (bool(getattr(data, "dataset_image_field", None)), "a vision dataset"),
        (bool(getattr(data, "data_config_path", None)), "a data config file"),
        (bool(train.packing), "packing"),
        (
            packing is not None and (packing.is_padding_free or packing.is_multipack),
            "the padding-free / multipack plugin",
        ),
    ]
    return next((why for failed, why in checks if failed), None)


@dataclasses.dataclass
class LazyData:
    """What the installed hooks did, for the rank's report."""

    dataset: LeadingEntries | None = None
    notes: list[str] = dataclasses.field(default_factory=list)

    def summary(self) -> list[str]:
        if self.dataset is None:
            return self.notes
        data = self.dataset
        return [
            *self.notes,
            f"tokenised {data.encoded_entries} of {len(data)} entries as "
            f"training reached them (training waited {data.waited_seconds:.2f} s for them)",
        ]


@contextlib.contextmanager
# Any: tuning (fms-hf-tuning) is untyped
def installed(args: Any, world_size: int, rank: int, workdir: Path) -> Iterator[LazyData]:
    """Makes a time-bounded run's fms.train() tokenise lazily; yields a LazyData."""
    result = LazyData()
    dataset = Path(args.data_args.training_data_path or "")
    from tuning import sft_trainer

    reason = unsupported_reason(args, dataset)
    if reason is None and not hasattr(sft_trainer, "process_dataargs"):
        # fms-hf-tuning 2.x prepares its data inside train(): nothing to hand a lazy dataset to
        reason = "this fms-hf-tuning has no process_dataargs to hook"
    if reason:
        result.notes.append(f"whole dataset tokenised before training: {reason}")
        yield result
        return

    train = args.train_args
    first_block = train.per_device_train_batch_size * world_size * train.gradient_accumulation_steps
    head = Workspace(workdir).dataset_head(rank, dataset.suffix)
    write_first_entries(dataset, head, first_block)
    args.data_args.training_data_path = str(head)
    import transformers

    original = sft_trainer.process_dataargs
    original_sampler = transformers.Trainer._get_train_sampler
    original_num_tokens = transformers.Trainer.num_tokens
    sft_trainer.process_dataargs = _lazy_process_dataargs(original, dataset, first_block, result)
    transformers.Trainer._get_train_sampler = _in_order_sampler(original_sampler)
    transformers.Trainer.num_tokens = staticmethod(_num_tokens(original_num_tokens))
    try:
        yield result
    finally:
        sft_trainer.process_dataargs = original
        transformers.Trainer._get_train_sampler = original_sampler
        transformers.Trainer.num_tokens = staticmethod(original_num_tokens)
        args.data_args.training_data_path = str(dataset)
        head.unlink(missing_ok=True)
        if result.dataset is not None:
            result.dataset.close()


def _lazy_process_dataargs(
    original: Callable, dataset: Path, first_block: int, result: LazyData
) -> Callable:
    """fms-hf-tuning's process_dataargs, handing training a LeadingEntries of `dataset` where
    it renders entry 0 as the lazy tokeniser would (else the whole dataset, with a note)."""

    def process_dataargs(data_args, tokenizer, *rest, **kwargs):
        outputs = list(original(data_args, tokenizer, *rest, **kwargs))
        formatted, max_length, dataset_kwargs = outputs[0], outputs[4], outputs[5]
        entries = EntryFile(dataset)
        text_field = data_args.dataset_text_field
        first = entries.read(0, 1)
        if not first or render_text(tokenizer, text_field, first[0]) != formatted[0][text_field]:
            result.notes.append(
                "whole dataset tokenised before training: fms-hf-tuning rendered entry 0 "
                "other than the lazy tokeniser would"
            )
            data_args.training_data_path = str(dataset)
            return original(data_args, tokenizer, *rest, **kwargs)
        lazy = LeadingEntries(
            entries,
            lambda entry: encode_entry(tokenizer, text_field, max_length, entry),
            first_block,
        )
        lazy.prepare_first_block()
        result.dataset = outputs[0] = lazy
        outputs[5] = {**(dataset_kwargs or {}), "skip_prepare_dataset": True}
        return tuple(outputs)

    return process_dataargs


def _in_order_sampler(original_sampler: Callable) -> Callable:
    """The Trainer's sampler, sequential over a LeadingEntries (it is tokenised in order)."""

    def get_train_sampler(trainer, *a, **kw):
        import torch.utils.data

        if isinstance(trainer.train_dataset, LeadingEntries):
            return torch.utils.data.SequentialSampler(trainer.train_dataset)
        return original_sampler(trainer, *a, **kw)

    return get_train_sampler


def _num_tokens(original_num_tokens: Callable) -> Callable:
    def num_tokens(train_dl, max_steps=None):
        # With include_tokens_per_second, an epoch-bounded Trainer draws the whole epoch to
        # count its padded tokens, which would tokenise the whole file; HF's estimate for
        # step-bounded runs (first batch x batches) is what this run's figure gets instead.
        if isinstance(getattr(train_dl, "dataset", None), LeadingEntries):
            return original_num_tokens(train_dl, max_steps or len(train_dl))
        return original_num_tokens(train_dl, max_steps)

    return num_tokens
