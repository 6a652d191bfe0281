"""news-tokens-* promise "at least N tokens per entry" for any subword tokenizer.

The generator emits at least N whitespace-separated words in every response (see
`response_words`); here tokenizers of each family the experiments meet are trained locally
(no downloads) and every entry of a small file is checked against them:

- byte-level BPE (GPT-2 style, as granite) and WordPiece (BERT style), which pre-tokenize at
  whitespace;
- SentencePiece-style BPE as the HF fast llama tokenizer runs it: trained with whitespace
  splitting, encoded with `Metaspace(split=False)`, i.e. merges run over the whole text;
- real SentencePiece BPE and unigram models (llama's library), when installed.

The tokenizers are trained on the generator's own text (other seed), which is the hardest
case: the vocabulary then holds whole words, so tokens per word get close to 1 (checked, so
that the test would notice a generator emitting fewer words than it claims). One tokenizer is
also trained on unrelated text (Python docstrings).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable

import pytest
from typer.testing import CliRunner

from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.cli import generate_dataset_text as gen
from ado_actuators.sfttrainer.cli import news_text

tokenizers = pytest.importorskip("tokenizers")

MIN_TOKENS = 300
SEP = "\n\n### Response: "


@pytest.fixture(scope="module")
def entries(tmp_path_factory) -> list[str]:
    path = tmp_path_factory.mktemp("tokens") / "news-tokens-16384plus-entries-4096.jsonl"
    result = CliRunner().invoke(
        gen.app, ["-o", str(path), "--entries", "24", "--min-tokens", str(MIN_TOKENS)]
    )
    assert result.exit_code == 0, result.output
    return [json.loads(line)["output"] for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def own_text() -> list[str]:
    shape = datasets.get_shape(datasets.DEFAULT_DATASET_ID)
    return list(news_text.iter_entries(shape, entries=20, seed=12345, min_tokens=2000))


@pytest.fixture(scope="module")
def unrelated_text() -> list[str]:
    import argparse
    import collections
    import json as json_mod
    import pathlib
    import random
    import re
    import textwrap

    docs = []
    for module in (argparse, collections, json_mod, pathlib, random, re, textwrap, io):
        docs.append(module.__doc__ or "")
        for name in dir(module):
            doc = getattr(getattr(module, name), "__doc__", None)
            if isinstance(doc, str):
                docs.append(doc)
    return docs


def check(entries: list[str], encode: Callable[[str], list[int]]) -> float:
    """Asserts the guarantee on every entry, whole and response alone; returns the lowest
    tokens-per-word ratio seen on a response."""
    lowest = float("inf")
    for output in entries:
        response = output.split(SEP)[1]
        whole, alone = len(encode(output)), len(encode(response))
        assert whole >= MIN_TOKENS, (whole, output[:200])
        assert alone >= MIN_TOKENS, (alone, response[:200])
        assert whole > alone
        lowest = min(lowest, alone / len(response.split()))
    return lowest


def test_byte_level_bpe(entries, own_text):
    tok = tokenizers.ByteLevelBPETokenizer()
    tok.train_from_iterator(own_text, vocab_size=8000, min_frequency=2, show_progress=False)
    ratio = check(entries, lambda s: tok.encode(s).ids)
    assert ratio < 1.5  # whole-word vocabulary: the bound is nearly tight


def test_byte_level_bpe_unrelated_corpus(entries, unrelated_text):
    tok = tokenizers.ByteLevelBPETokenizer()
    tok.train_from_iterator(unrelated_text, vocab_size=8000, show_progress=False)
    check(entries, lambda s: tok.encode(s).ids)


def test_wordpiece(entries, own_text):
    tok = tokenizers.BertWordPieceTokenizer(lowercase=False)
    tok.train_from_iterator(own_text, vocab_size=8000, show_progress=False)
    ratio = check(entries, lambda s: tok.encode(s, add_special_tokens=False).ids)
    assert ratio < 1.5


def test_sentencepiece_style_bpe_encoded_like_hf_llama(entries, own_text):
    tok = tokenizers.SentencePieceBPETokenizer()
    tok.train_from_iterator(own_text, vocab_size=8000, show_progress=False)
    check(entries, lambda s: tok.encode(s).ids)
    # HF's fast llama tokenizer has no whitespace pre-tokenization at encode time
    tok._tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace(
        replacement="▁", prepend_scheme="first", split=False
    )
    ratio = check(entries, lambda s: tok.encode(s).ids)
    assert ratio < 1.5


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_sentencepiece(entries, own_text, model_type):
    spm = pytest.importorskip("sentencepiece")
    sentences = [s for text in own_text for s in text.replace("\n\n", " ").split(". ") if s]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        vocab_size=2000,
        model_type=model_type,
        hard_vocab_limit=False,
        byte_fallback=True,
        minloglevel=2,
    )
    processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
    check(entries, processor.encode)
