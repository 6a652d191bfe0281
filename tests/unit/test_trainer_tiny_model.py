"""The tiny model the trainer tests (and the demo) train: what they rely on about it."""

from __future__ import annotations

import json

from tiny_model import RESPONSE_TEMPLATE, write_text_dataset


def test_tokenizer_has_every_special_token_and_prepends_bos(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert None not in (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id, tok.unk_token_id)
    assert len({tok.bos_token_id, tok.eos_token_id, tok.pad_token_id}) == 3  # fms would add a pad
    assert tok.model_max_length == 512
    ids = tok("### Input: a river\n\n### Response: a bank").input_ids
    assert ids[0] == tok.bos_token_id and tok.eos_token_id not in ids
    # the EOS fms appends as text comes back as one token
    assert tok("a river</s>").input_ids[-1] == tok.eos_token_id


def test_model_matches_the_tokenizer_and_is_tiny(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert model.config.vocab_size == len(tok)
    assert (model.config.hidden_size, model.config.num_hidden_layers) == (64, 2)
    assert model.config.num_attention_heads == 4
    assert sum(p.numel() for p in model.parameters()) < 200_000


def test_dataset_records_hold_the_response_template_fms_masks_on(tiny_model_dir, tmp_path):
    """fms finds the template by its token ids minus the first two ([2:]): they must occur."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    template_ids = tok.encode(RESPONSE_TEMPLATE, add_special_tokens=False)[2:]
    assert template_ids
    path = write_text_dataset(tmp_path / "d.jsonl", 20)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 20 and all(set(r) == {"output"} for r in records)
    for r in records:
        assert r["output"].startswith("### Input: ") and "\n\n### Response: " in r["output"]
        ids = tok(r["output"]).input_ids
        n = len(template_ids)
        assert any(ids[i : i + n] == template_ids for i in range(len(ids) - n + 1))
    lengths = [len(tok(r["output"]).input_ids) for r in records]
    assert min(lengths) < 40 < max(lengths)  # short and long entries for truncation tests
