"""A tiny random Llama and a locally trained BPE tokenizer, for tests and the CPU demo.

There is no model hub here, so every test and demo builds its model. Build with the same
transformers version that loads it: tokenizers saved by newer transformers do not load in older.

    python examples/local-cpu/tiny_model.py OUT_DIR
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

SPECIAL_TOKENS = {
    "unk_token": "<unk>",
    "bos_token": "<s>",
    "eos_token": "</s>",
    "pad_token": "<pad>",
}
RESPONSE_TEMPLATE = "\n### Response:"
"""The spec's response template: a real newline, then `### Response:`."""

_WORDS = [
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "is",
    "it",
    "that",
    "for",
    "on",
    "with",
    "as",
    "was",
    "by",
    "at",
    "be",
    "this",
    "from",
    "or",
    "an",
    "are",
    "which",
    "market",
    "river",
    "city",
    "council",
    "report",
    "science",
    "model",
    "data",
    "train",
    "token",
    "energy",
    "weather",
    "storm",
    "season",
    "player",
    "team",
    "match",
    "goal",
    "result",
    "price",
    "bank",
    "policy",
    "court",
    "law",
    "vote",
    "election",
    "school",
    "student",
    "teacher",
    "music",
    "film",
    "story",
    "author",
    "book",
    "garden",
    "farmer",
    "harvest",
    "ocean",
    "island",
    "bridge",
    "engine",
    "rocket",
    "orbit",
    "planet",
    "signal",
    "network",
    "server",
    "memory",
    "cluster",
    "graph",
    "research",
    "study",
    "doctor",
    "patient",
    "health",
    "virus",
    "vaccine",
    "museum",
    "painting",
    "history",
    "kingdom",
    "empire",
    "village",
    "road",
]


def sample_text(rng: random.Random, words: int) -> str:
    """Newspaper-ish filler: lower-case sentences of common words."""
    out: list[str] = []
    while len(out) < words:
        sentence = [rng.choice(_WORDS) for _ in range(rng.randint(4, 14))]
        sentence[0] = sentence[0].capitalize()
        out.extend(sentence)
        out[-1] += rng.choice([".", ".", ",", "!", "?"])
    return " ".join(out[:words])


def record_text(rng: random.Random, words: int) -> str:
    """One entry's `output`, in the spec's single-sequence format."""
    prompt_words = max(1, words // 3)
    return (
        f"### Input: {sample_text(rng, prompt_words)}"
        f"\n\n### Response: {sample_text(rng, max(1, words - prompt_words))}"
    )


def _training_lines(seed: int = 0, lines: int = 400) -> list[str]:
    rng = random.Random(seed)
    return [record_text(rng, rng.randint(8, 40)) for _ in range(lines)]


def build_tokenizer(out_dir: Path, *, vocab_size: int = 512, model_max_length: int = 512):
    """A byte-level BPE that, like Llama's, prepends BOS; fms/TRL append EOS themselves."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = list(SPECIAL_TOKENS.values())
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        _training_lines(),
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=specials,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    bos_id = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos_id)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, model_max_length=model_max_length, **SPECIAL_TOKENS
    )
    fast.save_pretrained(out_dir)
    _legacy_merges(Path(out_dir) / "tokenizer.json")
    return fast


def _legacy_merges(path: Path) -> None:
    """Writes the BPE merges as "a b" strings, the form every tokenizers release reads.

    tokenizers >= 0.20 saves them as pairs, which 0.19 (fms-hf-tuning 2.0.1's) cannot parse
    ("data did not match any variant of untagged enum ModelWrapper"). Byte-level tokens hold
    no spaces, so the two forms say the same."""
    document = json.loads(path.read_text())
    merges = document["model"]["merges"]
    document["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in merges]
    path.write_text(json.dumps(document, ensure_ascii=False))


def tiny_llama_config(tokenizer, *, positions: int):
    """The tiny Llama's shape (2 layers of width 64, 4 heads, an MLP of 128) over `tokenizer`'s
    vocabulary and special tokens, with `positions` positions."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=positions,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )


def build_tiny_model(out_dir: Path, *, model_max_length: int = 512, seed: int = 0) -> Path:
    """Writes config, weights and tokenizer of a ~100k-parameter Llama to `out_dir`."""
    import torch
    from transformers import LlamaForCausalLM

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(out_dir, model_max_length=model_max_length)
    config = tiny_llama_config(tokenizer, positions=max(model_max_length, 512))
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(out_dir, safe_serialization=True)
    return out_dir


def write_text_dataset(
    path: Path,
    entries: int,
    *,
    min_words: int = 5,
    max_words: int = 120,
    seed: int = 0,
) -> Path:
    """A jsonl of `{"output": "### Input: ...\\n\\n### Response: ..."}` records.

    Lengths are spread between min_words and max_words, so with a small max_seq_length
    some entries are truncated and some are not.
    """
    rng = random.Random(seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for i in range(entries):
            # Alternate short and long entries so every batch mixes padding and truncation.
            words = rng.randint(min_words, max(min_words, (min_words + max_words) // 2))
            if i % 2:
                words = rng.randint((min_words + max_words) // 2, max_words)
            f.write(json.dumps({"output": record_text(rng, words)}) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python examples/local-cpu/tiny_model.py OUT_DIR", file=sys.stderr)
        return 2
    print(build_tiny_model(Path(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
